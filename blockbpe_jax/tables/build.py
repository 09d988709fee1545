"""NumPy builders of the device tables that the C++/CUDA kernels read.

The layouts below are a contract with ffi/: the C++ side reads these arrays bit for bit, so
change them only together with it. All arrays are int32 unless noted.

* pair table, int32[P, 4]: two-choice (cuckoo) hashing. Row = (left, right, rank,
  merged_id); an empty row is (-1, -1, -1, -1). A pair is in slot pair_hash(l, r) & (P-1) or
  in slot pair_hash_alt(l, r) & (P-1), so a lookup is two independent row loads (the GPU
  issues both at once) and a miss is known without a walk. P = the smallest power of two
  >= max(16, 2 * number of merges) (at most half full) at which the placement succeeds (it
  doubles P on the rare failure; never for the shared vocabularies).
* piece table, int32[Q, 8] (32-byte rows; core/bpe_core.h's lookup_piece reads them, the GPU
  as two 16-byte loads): whole pieces (piece bytes -> token id), linear probing from the home
  slot piece_hash(bytes) & (Q-1). Columns 0-3 are the key, 4 the token_id, 5 the byte_len, 6-7
  zero. A key of at most SHORT_KEY_LEN (16) bytes is its own row: its bytes 0-3, 4-7, 8-11,
  12-15 as four little-endian words (zero past byte_len), found by a hash of the words' two
  little-endian uint64 halves and the length (piece_hash) and confirmed by comparing the words
  and the length, with no read of token_data. A longer key's row is (int32 view of its FNV-1a
  hash, offset of the token's bytes in token_data, 0, 0, token_id, byte_len, 0, 0), and a hit
  must still compare bytes (byte_len tells the two kinds of rows apart). An empty row is all
  -1 (test token_id == -1: a real hash or key word may be 0xFFFFFFFF). Q = power of two >=
  max(16, 2 * number of keys). Which tokens it holds (`whole_piece_ids`, of at most 255 bytes,
  never specials): with the vocabulary's whole-piece rule (tiktoken; HF's ignore_merges) every
  mergeable token, since a piece that is a token encodes to it; without it (HF tokenizers'
  BPE) only the self-encoding tokens, those that the merges make from their own bytes, so a
  piece found there encodes to what merging it gives: the table changes no output, it only
  spares the merges. Either way the executors look every piece up first (max_piece_len > 0).
* token_offsets int32[V+1], token_data uint8[max(1, D)]: bytes of id i are
  token_data[token_offsets[i]:token_offsets[i+1]] (empty for holes), specials included.
* special tables: the allowed specials' UTF-8 bytes, longest first (ties by bytes), so the
  first match at a position is the longest one.
* SentencePiece BPE (vocab.char_level; ffi/core/char_symbols.h): byte_ids holds the byte-fallback
  pieces <0xXX>; the piece table holds the one-character pieces of 2-4 UTF-8 bytes (their
  bytes appended to token_data, as the text spells them: `▁` is the piece of U+2581), then,
  where the whole-word rule holds (tables/whole_words.py), the self-encoding pieces of 2+ characters
  under their token bytes (`▁` a space: what lookup_word hashes), and max_piece_len is its
  longest key; char_table is the int32 layout documented in ffi/core/char_symbols.h (its
  whole-word entry says whether the words are there). Byte-level vocabularies pass a one-entry
  stand-in char_table.

tables/probe.py reads them back in plain Python, probing as the kernels do (the tests prove
the layout with it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

import numpy as np

from ..vocab.char_bpe import MAX_JOINERS
from ..vocab import Vocab
from . import word_bounds
from .specials import specials_escaped
from .whole_words import whole_word_ids

__all__ = [
    "pair_hash",
    "pair_hash_alt",
    "piece_hash",
    "VocabTables",
    "build_vocab_tables",
    "SpecialTables",
    "SPECIAL_OPERANDS",
    "build_special_tables",
    "whole_piece_ids",
]

MAX_PIECE_TABLE_LEN = 255  # longer tokens are never looked up whole (the C++ side caps pieces)

_U32 = 0xFFFFFFFF
SHORT_KEY_LEN = 16  # kShortKeyLen (ffi/core/bpe_core.h)
PIECE_ROW_INTS = 8  # kPieceRowInts: the piece table's columns
PIECE_ID, PIECE_LEN = 4, 5  # the piece table's token_id and byte_len columns
_SHORT_KEY_MUL_LO = 0x9E3779B97F4A7C15
_SHORT_KEY_MUL_HI = 0xC2B2AE3D27D4EB4F
_SHORT_KEY_MUL_MIX = 0x165667B19E3779F9
_SHORT_KEY_LEN_MUL = 0x85EBCA6B
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


# --------------------------------------------------------------------------------------------
# Hashes (uint32 arithmetic with wraparound, identical in C++)
# --------------------------------------------------------------------------------------------


def pair_hash(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """uint32 hash of (left, right) id pairs, elementwise (a multiply-xorshift finaliser)."""
    h_left = np.asarray(left).astype(np.uint32)
    h_right = np.asarray(right).astype(np.uint32)
    with np.errstate(over="ignore"):
        h = h_left * np.uint32(0x9E3779B1) + h_right
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h


_PAIR_ALT_SALT = 0x5BD1E995  # ffi/core/bpe_core.h pair_hash_alt


def pair_hash_alt(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The second hash of the two-choice pair table: pair_hash of (right ^ salt, left)."""
    return pair_hash(np.asarray(right).astype(np.uint32) ^ np.uint32(_PAIR_ALT_SALT), left)


def _pair_hash_int(left: int, right: int) -> int:
    """pair_hash for one pair in Python ints (fast enough to call per lookup)."""
    h = ((left & _U32) * 0x9E3779B1 + (right & _U32)) & _U32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _U32
    h ^= h >> 16
    return h


def _pair_hash_alt_int(left: int, right: int) -> int:
    return _pair_hash_int((right & _U32) ^ _PAIR_ALT_SALT, left)


def piece_hash(data: bytes) -> int:
    """The piece table's hash of a key: a mix of a short key's two little-endian halves (at most
    SHORT_KEY_LEN bytes), else 32-bit FNV-1a (_piece_keys of the one key)."""
    hashes, _ = _piece_keys(np.frombuffer(data, dtype=np.uint8), np.zeros(1), np.array([len(data)]))
    return int(hashes[0])


def _short_key_hash(lo: np.ndarray, hi: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """short_key_hash (ffi/core/bpe_core.h) of uint64 halves: both multiplied, folded, multiplied
    again (so the slot bits see every byte), the length mixed in."""
    with np.errstate(over="ignore"):
        x = (lo * np.uint64(_SHORT_KEY_MUL_LO)) ^ (hi * np.uint64(_SHORT_KEY_MUL_HI))
        x ^= x >> np.uint64(32)
        return ((x * np.uint64(_SHORT_KEY_MUL_MIX)) >> np.uint64(32)).astype(np.uint32) ^ (
            lengths.astype(np.uint32) * np.uint32(_SHORT_KEY_LEN_MUL)
        )


def _piece_keys(token_data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple:
    """(hash, int32[N, 4] key columns) of many keys at once (the rows' layout above): one
    vectorised step per byte position, over the keys that are still that long (sorted longest
    first, so they are a prefix of the order)."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    longest_first = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[longest_first]
    h = np.full(len(lengths), _FNV_OFFSET, dtype=np.uint32)
    halves = np.zeros((2, len(lengths)), dtype=np.uint64)  # a short key's bytes 0-7 and 8-15
    with np.errstate(over="ignore"):
        for position in range(int(sorted_lengths[0]) if len(lengths) else 0):
            still_long = longest_first[: np.searchsorted(-sorted_lengths, -position, side="left")]
            byte = token_data[starts[still_long] + position]
            h[still_long] ^= byte
            h[still_long] *= np.uint32(_FNV_PRIME)
            if position < SHORT_KEY_LEN:
                halves[position // 8, still_long] |= byte.astype(np.uint64) << np.uint64(8 * (position % 8))
    short = lengths <= SHORT_KEY_LEN
    h = np.where(short, _short_key_hash(halves[0], halves[1], lengths), h)
    words = np.stack(
        [
            halves[0] & np.uint64(_U32),
            halves[0] >> np.uint64(32),
            halves[1] & np.uint64(_U32),
            halves[1] >> np.uint64(32),
        ],
        axis=1,
    ).astype(np.uint32)
    long_words = np.zeros_like(words)
    long_words[:, 0], long_words[:, 1] = h, starts.astype(np.uint32)
    return h, np.where(short[:, None], words, long_words).view(np.int32)


# --------------------------------------------------------------------------------------------
# Open addressing
# --------------------------------------------------------------------------------------------


def _capacity(n_keys: int) -> int:
    """Power of two >= max(16, 2 * n_keys): load factor at most 1/2."""
    need = max(16, 2 * n_keys)
    return 1 << (need - 1).bit_length()


def _place_by_linear_probing(home_slots: np.ndarray, capacity: int) -> np.ndarray:
    """Slot of every key in a linear-probing table of `capacity` slots (a power of two).

    Vectorised over probe rounds instead of over keys: each round, every unplaced key looks at
    its current slot; free slots go to the first (lowest-index) key asking, the others step to
    the next slot. A key only moves past slots it saw occupied, and slots never empty again, so
    every slot between a key's home and its final slot is occupied: exactly what a linear-probing
    lookup needs to reach it. Earlier keys win ties, so pass the most frequently looked-up keys
    first. The result is deterministic for a given key order."""
    mask = capacity - 1
    slot_of_key = np.full(len(home_slots), -1, dtype=np.int64)
    occupied = np.zeros(capacity, dtype=bool)
    pending = np.arange(len(home_slots))
    probe = home_slots.astype(np.int64) & mask
    while pending.size:
        free = ~occupied[probe]
        asking = np.flatnonzero(free)
        # np.unique's return_index is the first occurrence (it sorts stably).
        won_slots, first = np.unique(probe[asking], return_index=True)
        winners = asking[first]
        occupied[won_slots] = True
        slot_of_key[pending[winners]] = won_slots
        keep = np.ones(pending.size, dtype=bool)
        keep[winners] = False
        pending = pending[keep]
        probe = (probe[keep] + 1) & mask
    return slot_of_key


def _place_by_two_choices(
    first: np.ndarray, second: np.ndarray, capacity: int, max_kicks: int = 1000
) -> np.ndarray | None:
    """Slot of every key in a two-choice (cuckoo) table: key k at first[k] or second[k].

    Vectorised for the many keys whose first choice (then second choice) is free and wanted by
    no earlier key; the rest are inserted one by one, each evicting the occupant of its slot
    to that key's other choice, until a free slot ends the chain. None if a chain runs past
    max_kicks (the caller then retries with a larger table). Deterministic for a given order."""
    n = len(first)
    first = first.astype(np.int64) & (capacity - 1)
    second = second.astype(np.int64) & (capacity - 1)
    owner = np.full(capacity, -1, dtype=np.int64)
    slot_of_key = np.full(n, -1, dtype=np.int64)
    for choice in (first, second):
        pending = np.flatnonzero(slot_of_key < 0)
        pending = pending[owner[choice[pending]] < 0]
        won, at = np.unique(choice[pending], return_index=True)  # first key asking wins
        owner[won] = pending[at]
        slot_of_key[pending[at]] = won
    for key in np.flatnonzero(slot_of_key < 0).tolist():
        slot = int(first[key])
        for _ in range(max_kicks):
            evicted = int(owner[slot])
            owner[slot] = key
            slot_of_key[key] = slot
            if evicted < 0:
                break
            key = evicted
            slot = int(second[key]) if slot == first[key] else int(first[key])
        else:
            return None
    return slot_of_key


# --------------------------------------------------------------------------------------------
# Vocabulary tables
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VocabTables:
    pair_table: np.ndarray  # int32[P, 4]: (left, right, rank, merged_id); empty = -1s
    byte_ids: np.ndarray  # int32[256]
    # int32[Q, 8]: (4 key words, or hash, offset, 0, 0; token_id, byte_len, 0, 0); empty = -1s
    piece_table: np.ndarray
    token_offsets: np.ndarray  # int32[V+1]
    token_data: np.ndarray  # uint8[max(1, D)]
    max_piece_len: int  # longest byte_len in piece_table (the executors' lookups stop there)
    rank_is_id: bool  # every pair's rank equals its merged id (true of tiktoken vocabularies)
    nbytes: int  # total bytes of all arrays
    char_table: np.ndarray  # int32: SentencePiece BPE's character tables, or a [1] stand-in
    symbols: int  # SYMBOLS_BYTES or SYMBOLS_CHARS (ffi/core/char_symbols.h)
    char_runs: tuple[int, int, int]  # the run rule's (T, P, W) attributes; (0, 0, 0): none

    def __repr__(self) -> str:
        return (
            f"VocabTables(P={self.pair_table.shape[0]}, Q={self.piece_table.shape[0]}, "
            f"V={self.token_offsets.shape[0] - 1}, data={self.token_data.shape[0]} B, "
            f"max_piece_len={self.max_piece_len}, nbytes={self.nbytes})"
        )


def _token_bytes_arrays(vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(b) if b else 0 for b in vocab.token_bytes), np.int64, vocab.n_vocab)
    offsets = np.zeros(vocab.n_vocab + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{vocab.name}: token bytes total {offsets[-1]} do not fit int32 offsets")
    data = np.frombuffer(b"".join(b for b in vocab.token_bytes if b), dtype=np.uint8)
    if data.size == 0:
        data = np.zeros(1, dtype=np.uint8)
    return offsets.astype(np.int32), data.copy()


def _build_pair_table(vocab: Vocab) -> np.ndarray:
    n = len(vocab.merges)
    rows = np.empty((n, 4), dtype=np.int64)
    rows[:, :2] = np.fromiter((x for pair in vocab.merges for x in pair), np.int64, 2 * n).reshape(n, 2)
    rows[:, 2:] = np.fromiter((x for v in vocab.merges.values() for x in v), np.int64, 2 * n).reshape(n, 2)
    first, second = pair_hash(rows[:, 0], rows[:, 1]), pair_hash_alt(rows[:, 0], rows[:, 1])
    capacity = _capacity(n)
    while (slots := _place_by_two_choices(first, second, capacity)) is None:
        capacity *= 2
        if capacity > 64 * _capacity(n):  # only identical hash pairs could get here
            raise ValueError(f"cannot place {n} merges in a two-choice pair table")
    table = np.full((capacity, 4), -1, dtype=np.int32)
    table[slots] = rows
    return table


def whole_piece_ids(
    vocab: Vocab, offsets: np.ndarray, data: np.ndarray, pair_table: np.ndarray
) -> np.ndarray:
    """The ids the piece table holds (the module docstring says why): the mergeable tokens of at
    most MAX_PIECE_TABLE_LEN bytes, all of them under the whole-piece rule
    (`vocab.whole_piece_shortcut`), else those whose bytes the merges (the pair table, by the
    executors' own merge rule: `native.cpu.self_encoding`) turn into that one token."""
    mergeable = np.asarray(vocab.mergeable_ids, dtype=np.int64)
    lengths = offsets[mergeable + 1].astype(np.int64) - offsets[mergeable]
    ids = mergeable[lengths <= MAX_PIECE_TABLE_LEN]
    if vocab.whole_piece_shortcut or ids.size == 0:
        return ids
    from .. import native

    encodes_to_itself = native.cpu.self_encoding(
        pair_table,
        np.asarray(vocab.byte_ids, dtype=np.int32),
        offsets,
        data,
        ids.astype(np.int32),
        rank_is_id=_rank_is_id(pair_table),
    )
    return ids[encodes_to_itself.astype(bool)]


def _rank_is_id(pair_table: np.ndarray) -> bool:
    """Whether every pair's rank is its merged id (true of tiktoken vocabularies)."""
    return bool(np.array_equal(pair_table[:, 2], pair_table[:, 3]))


def _build_piece_table(vocab: Vocab, offsets: np.ndarray, data: np.ndarray, pair_table: np.ndarray):
    """(piece table, longest key) of the byte-level vocabulary (whole_piece_ids' tokens)."""
    ids = whole_piece_ids(vocab, offsets, data, pair_table)
    lengths = offsets[ids + 1].astype(np.int64) - offsets[ids]
    table = _piece_rows(data, ids, lengths, offsets[ids], _capacity(len(ids)))
    return table, int(lengths.max(initial=0))


def _piece_rows(token_data: np.ndarray, ids, lengths, starts, capacity: int) -> np.ndarray:
    """The piece table (layout above) of keys with these token ids, byte lengths and offsets of
    their bytes in token_data."""
    hashes, keys = _piece_keys(token_data, starts, lengths)
    table = np.full((capacity, PIECE_ROW_INTS), -1, dtype=np.int32)
    slots = _place_by_linear_probing(hashes, capacity)
    table[slots, :4] = keys
    table[slots, PIECE_ID] = ids
    table[slots, PIECE_LEN] = lengths
    table[slots, PIECE_LEN + 1 :] = 0
    return table


SYMBOLS_BYTES, SYMBOLS_CHARS = 0, 1  # the `symbols` attribute (ffi/core/char_symbols.h)
CHAR_TABLE_ESCAPED, CHAR_TABLE_JOINERS = 134, 135  # kCharTableEscaped, kCharTableJoiners
CHAR_TABLE_WHOLE_WORDS = CHAR_TABLE_JOINERS + MAX_JOINERS  # kCharTableWholeWords
CHAR_TABLE_BOUNDS = CHAR_TABLE_WHOLE_WORDS + 1  # kCharTableBounds
CHAR_TABLE_ISOLATED = CHAR_TABLE_BOUNDS + 1  # kCharTableIsolated
CHAR_TABLE_HEADER = CHAR_TABLE_ISOLATED + word_bounds.MAX_ISOLATED  # kCharTableHeader


def _build_char_tables(vocab: Vocab, offsets: np.ndarray, data: np.ndarray, pair_table: np.ndarray) -> tuple:
    """(piece_table, token_data extended, char_table, char_runs, max key length) of
    SentencePiece BPE."""
    cl = vocab.char_level
    wide = [(ch.encode("utf-8"), i) for ch, i in cl.char_ids.items() if len(ch.encode("utf-8")) > 1]
    keys = b"".join(k for k, _ in wide)
    key_offsets = np.cumsum([0] + [len(k) for k, _ in wide], dtype=np.int64)[:-1] + data.size
    if data.size + len(keys) > np.iinfo(np.int32).max:
        raise ValueError(f"{vocab.name}: token bytes do not fit int32 offsets")
    char_ids = np.asarray([i for _, i in wide], dtype=np.int64)
    key_lengths = np.asarray([len(k) for k, _ in wide], dtype=np.int64)
    extended = np.concatenate([data, np.frombuffer(keys, dtype=np.uint8)])
    table = _piece_rows(extended, char_ids, key_lengths, key_offsets, _capacity(len(wide)))
    runs = cl.runs
    width = (max((len(row) for row in runs.table), default=0) or 1) if runs else 0
    char_table = np.full(CHAR_TABLE_HEADER + (runs.long * width if runs else 0), -1, dtype=np.int32)
    for ch, i in cl.char_ids.items():
        if len(ch) == 1 and ord(ch) < 128:
            char_table[ord(ch)] = i
    char_table[128:132] = (cl.replacement_id, cl.prefix_id, cl.prefix_rule, cl.word_start_id)
    char_table[CHAR_TABLE_ESCAPED] = int(specials_escaped(vocab))
    char_table[CHAR_TABLE_JOINERS : CHAR_TABLE_JOINERS + len(cl.joiners)] = cl.joiners
    isolated = word_bounds.isolated_ids(vocab)
    char_table[CHAR_TABLE_BOUNDS] = word_bounds.bounds_base(vocab)
    char_table[CHAR_TABLE_ISOLATED : CHAR_TABLE_ISOLATED + len(isolated)] = isolated
    if runs:
        char_table[132:134] = (runs.run_id, runs.long_id)
        for m, row in enumerate(runs.table):
            at = CHAR_TABLE_HEADER + m * width
            char_table[at : at + len(row)] = row
    char_runs = (runs.long, runs.step, width) if runs else (0, 0, 0)
    longest = int(key_lengths.max(initial=1))
    char_table[CHAR_TABLE_WHOLE_WORDS] = 0
    words = whole_word_ids(
        vocab, offsets, extended, pair_table, table, longest, char_table, char_runs, MAX_PIECE_TABLE_LEN
    )
    if words.size:  # the characters' keys first (placed first, they stay nearest their home)
        lengths = offsets[words + 1].astype(np.int64) - offsets[words]
        table = _piece_rows(
            extended,
            np.concatenate([char_ids, words]),
            np.concatenate([key_lengths, lengths]),
            np.concatenate([key_offsets, offsets[words].astype(np.int64)]),
            _capacity(len(wide) + words.size),
        )
        char_table[CHAR_TABLE_WHOLE_WORDS] = 1
        longest = max(longest, int(lengths.max()))
    return table, extended, char_table, char_runs, longest


def build_vocab_tables(vocab: Vocab) -> VocabTables:
    """All per-vocabulary device tables (see the module docstring for the layouts)."""
    offsets, data = _token_bytes_arrays(vocab)
    pair_table = _build_pair_table(vocab)
    if vocab.char_level is None:
        piece_table, max_piece_len = _build_piece_table(vocab, offsets, data, pair_table)
        char_table, symbols, char_runs = np.full(1, -1, dtype=np.int32), SYMBOLS_BYTES, (0, 0, 0)
    else:
        piece_table, data, char_table, char_runs, max_piece_len = _build_char_tables(
            vocab, offsets, data, pair_table
        )
        symbols = SYMBOLS_CHARS
    byte_ids = np.asarray(vocab.byte_ids, dtype=np.int32)
    arrays = (pair_table, byte_ids, piece_table, offsets, data, char_table)
    return VocabTables(
        pair_table=pair_table,
        byte_ids=byte_ids,
        piece_table=piece_table,
        token_offsets=offsets,
        token_data=data,
        max_piece_len=max_piece_len,
        rank_is_id=_rank_is_id(pair_table),
        nbytes=sum(a.nbytes for a in arrays),
        char_table=char_table,
        symbols=symbols,
        char_runs=char_runs,
    )


# --------------------------------------------------------------------------------------------
# Special tokens
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecialTables:
    special_offsets: np.ndarray  # int32[S+1]
    special_data: np.ndarray  # uint8[max(1, D)], longest first, ties by bytes
    special_ids: np.ndarray  # int32[max(1, S)]; a dummy 0 when S == 0
    special_starts: np.ndarray  # uint8: where they can start, their runs (ffi/core/special_tokens.h)
    count: int  # S


# The operands of one set of allowed specials (SpecialTables' arrays); the others are the
# vocabulary's, shared by every set.
SPECIAL_OPERANDS = tuple(f.name for f in fields(SpecialTables) if f.name != "count")


def build_special_tables(vocab: Vocab, allowed: str | Iterable[str] | None) -> SpecialTables:
    """Tables of the special tokens to match in text: "all", None (none), or a set of names.

    Sorted longest first (ties by bytes) so a linear scan's first match is the longest match,
    which is what tiktoken and HF do when one special is a prefix of another. Their
    `special_starts` (where one can start, their runs) is built here, once per set, by the CPU
    module for every executor."""
    from .. import native

    if allowed is None:
        names: list[str] = list(vocab.always_special)
    elif allowed == "all":
        names = list(vocab.special_tokens)
    elif isinstance(allowed, str):
        raise ValueError(f"allowed must be 'all', None or a collection of names, not {allowed!r}")
    else:
        names = list(dict.fromkeys([*vocab.always_special, *allowed]))
        unknown = [n for n in names if n not in vocab.special_tokens]
        if unknown:
            raise ValueError(f"{vocab.name}: unknown special tokens: {', '.join(map(repr, unknown))}")
    encoded = sorted(
        ((n.encode("utf-8"), vocab.special_tokens[n]) for n in names), key=lambda e: (-len(e[0]), e[0])
    )
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(b) for b, _ in encoded], dtype=np.int64)
    data = np.frombuffer(b"".join(b for b, _ in encoded), dtype=np.uint8).copy()
    data = data if data.size else np.zeros(1, dtype=np.uint8)
    return SpecialTables(
        special_offsets=offsets,
        special_data=data,
        special_ids=np.asarray([i for _, i in encoded] or [0], dtype=np.int32),
        special_starts=native.cpu.special_starts(offsets, data, specials_escaped(vocab)),
        count=len(encoded),
    )
