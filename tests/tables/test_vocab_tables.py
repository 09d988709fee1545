"""Device table layouts (blockbpe_jax.tables.build): hashes, two-choice placement, layout of every
shared vocabulary, and a plain-Python BPE that only uses the tables (lookup_pair / lookup_piece)
reproducing tiktoken's and HF's BPE; special tables."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from blockbpe_jax.tables.build import (
    _pair_hash_alt_int,
    _pair_hash_int,
    _place_by_two_choices,
    build_special_tables,
    build_vocab_tables,
    pair_hash,
    pair_hash_alt,
    piece_hash,
)
from blockbpe_jax.tables.probe import lookup_pair, lookup_piece, piece_keys
from blockbpe_jax.vocab import Vocab, bytes_to_unicode, load_tiktoken_file, load_tokenizer_json

from helpers import VOCAB_CASES, piece_hash_reference, pieces, probing_with_reference_hash, sample_text
from synthetic import tiktoken_lines, tokenizer_json_doc, write, write_json


# Tables: hashes and layout
# --------------------------------------------------------------------------------------------


def _pair_hash_reference(left: int, right: int) -> int:
    m = 0xFFFFFFFF
    h = (left * 0x9E3779B1 + right) & m
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def test_pair_hash_matches_reference():
    rng = np.random.default_rng(0)
    left = rng.integers(0, 2**31 - 1, 5000, dtype=np.int64)
    right = rng.integers(0, 2**31 - 1, 5000, dtype=np.int64)
    left[:3], right[:3] = [0, 1, 2**31 - 1], [0, 0, 2**31 - 1]
    hashes = pair_hash(left.astype(np.int32), right.astype(np.int32))
    assert hashes.dtype == np.uint32
    expected = [_pair_hash_reference(int(a), int(b)) for a, b in zip(left, right)]
    assert hashes.tolist() == expected
    assert [_pair_hash_int(int(a), int(b)) for a, b in zip(left, right)] == expected


def test_pair_hash_alt_is_pair_hash_of_swapped_salted_pair():
    rng = np.random.default_rng(1)
    left = rng.integers(0, 2**31 - 1, 2000, dtype=np.int64)
    right = rng.integers(0, 2**31 - 1, 2000, dtype=np.int64)
    alt = pair_hash_alt(left.astype(np.int32), right.astype(np.int32))
    expected = [_pair_hash_reference(int(b) ^ 0x5BD1E995, int(a)) for a, b in zip(left, right)]
    assert alt.tolist() == expected
    assert [_pair_hash_alt_int(int(a), int(b)) for a, b in zip(left, right)] == expected


@pytest.mark.parametrize("load, crowd", [(0.45, 1), (0.1, 8)])
def test_two_choice_placement(load, crowd):
    """Every key lands in one of its two slots, one key per slot: at the shared vocabularies'
    load (0.38-0.45), and with first choices crowded onto an eighth of the slots. Both cases
    need the eviction chains (149 and 16 keys find both choices taken by earlier keys)."""
    rng = np.random.default_rng(2)
    capacity = 1 << 12
    n = int(load * capacity)
    first = rng.integers(0, capacity // crowd, n)
    second = rng.integers(0, capacity, n)
    slots = _place_by_two_choices(first, second, capacity)
    assert slots is not None
    assert ((slots == first) | (slots == second)).all()
    assert len(set(slots.tolist())) == n


def test_two_choice_placement_reports_failure():
    """Three keys that share both slots cannot be placed: None, so the builder grows the table."""
    first, second = np.array([5, 5, 5, 9]), np.array([7, 7, 7, 3])
    assert _place_by_two_choices(first, second, 16) is None
    assert _place_by_two_choices(first[1:], second[1:], 16) is not None


def test_piece_hash_of_short_and_long_keys():
    for key in (b"foobarbazquuxcorge", b"\x00" * 17, bytes(range(255))):
        assert len(key) > 16 and piece_hash(key) == piece_hash_reference(key)
    for key in (b"", b"a", b"a\x00", b"foobar", b"\xff" * 8, b"foobarbaz", b"\xff" * 16, bytes(range(1, 17))):
        assert piece_hash(key) == piece_hash_reference(key)
    assert piece_hash(b"a") != piece_hash(b"a\x00")  # (same words, different lengths)
    # every byte of a short key reaches the slot bits (the top byte of each half too)
    rng = random.Random(3)
    for n in (8, 16):
        base = bytearray(rng.randbytes(n))
        for i in range(n):
            other = bytearray(base)
            other[i] ^= 0x80
            assert (piece_hash(bytes(base)) ^ piece_hash(bytes(other))) & 0xFFFF, (n, i)


@pytest.fixture
def reference_piece_hash():
    with probing_with_reference_hash():
        yield


@pytest.mark.parametrize("name", list(VOCAB_CASES))
def test_table_layout(vocab, tables, name):
    v, t = vocab(name), tables(name)
    P, Q = t.pair_table.shape[0], t.piece_table.shape[0]
    assert t.pair_table.dtype == np.int32 and t.pair_table.shape == (P, 4)
    assert P & (P - 1) == 0 and P >= max(16, 2 * len(v.merges))  # (doubled only if placement failed)
    n_keys = int((t.piece_table[:, 4] != -1).sum())
    assert Q & (Q - 1) == 0 and Q >= max(16, 2 * n_keys) and Q < 2 * max(16, 2 * n_keys)
    pair_empty = t.pair_table[:, 0] == -1
    assert (t.pair_table[pair_empty] == -1).all() and (~pair_empty).sum() == len(v.merges)
    assert t.piece_table.dtype == np.int32 and t.piece_table.shape == (Q, 8)
    piece_empty = t.piece_table[:, 4] == -1
    assert (t.piece_table[piece_empty] == -1).all()
    full = t.piece_table[~piece_empty]
    assert (full[:, 6:] == 0).all()
    long_rows, short_rows = full[full[:, 5] > 16], full[full[:, 5] <= 16]
    # a long key's row: (FNV-1a hash, offset of the token's bytes, 0, 0, id, length, 0, 0)
    assert (long_rows[:, 1] == t.token_offsets[long_rows[:, 4]]).all() and (long_rows[:, 2:4] == 0).all()
    long_keys = [v.token_bytes[i] for i in long_rows[:, 4]]
    assert long_rows[:, 0].view(np.uint32).tolist() == [piece_hash_reference(k) for k in long_keys]
    # a short key's row is its bytes, zero-padded to 16, as four little-endian words
    padded = b"".join(v.token_bytes[i].ljust(16, b"\x00") for i in short_rows[:, 4])
    assert np.frombuffer(padded, "<i4").reshape(-1, 4).tolist() == short_rows[:, :4].tolist()
    assert (short_rows[:, 5] == [len(v.token_bytes[i]) for i in short_rows[:, 4]]).all()
    assert all(key == v.token_bytes[i] for i, key in piece_keys(t).items())
    # rank_is_id: true exactly when every pair's rank is its merged id (tiktoken files)
    assert t.rank_is_id == bool((t.pair_table[:, 2] == t.pair_table[:, 3]).all())
    if VOCAB_CASES[name][0].endswith(".tiktoken"):
        assert t.rank_is_id  # a tiktoken pair's rank is the merged token's rank = id
    in_piece_table = set(t.piece_table[~piece_empty, 4].tolist())
    up_to_255 = {i for i in v.mergeable_ids if len(v.token_bytes[i]) <= 255}
    # (every token under the whole-piece rule, else the self-encoding ones: test_self_encoding.py;
    # every token of these vocabularies is self-encoding)
    assert in_piece_table == up_to_255
    assert t.max_piece_len == int(t.piece_table[~piece_empty, 5].max())
    assert t.byte_ids.dtype == np.int32 and t.byte_ids.tolist() == list(v.byte_ids)
    assert t.token_offsets.dtype == np.int32 and t.token_offsets.shape == (v.n_vocab + 1,)
    assert t.token_data.dtype == np.uint8
    data = t.token_data.tobytes()
    offsets = t.token_offsets.tolist()
    assert [data[offsets[i] : offsets[i + 1]] for i in range(v.n_vocab)] == [b or b"" for b in v.token_bytes]
    arrays = (t.pair_table, t.byte_ids, t.piece_table, t.token_offsets, t.token_data, t.char_table)
    assert t.nbytes == sum(a.nbytes for a in arrays)
    assert t.symbols == 0 and t.char_table.tolist() == [-1]  # byte-level: the stand-in


@pytest.mark.parametrize("name", list(VOCAB_CASES))
def test_every_merge_and_piece_is_found(vocab, tables, name, reference_piece_hash):
    v, t = vocab(name), tables(name)
    # piece_hash itself on real keys (a sample of every length: the lookups below use the reference)
    longest = sorted(v.mergeable_ids, key=lambda i: -len(v.token_bytes[i]))[:50]
    for token_id in [*v.mergeable_ids[::97], *longest]:
        key = v.token_bytes[token_id]
        assert piece_hash(key) == piece_hash_reference(key), key
    for (left, right), expected in v.merges.items():
        assert lookup_pair(t, left, right) == expected
    for token_id in v.mergeable_ids:
        assert lookup_piece(t, v.token_bytes[token_id]) == token_id
    for token_id in v.special_ids:
        assert lookup_piece(t, v.token_bytes[token_id]) is None


@pytest.mark.parametrize("name", ["cl100k", "o200k_hf"])
def test_keys_of_up_to_16_bytes_are_found_without_token_data(vocab, tables, name, reference_piece_hash):
    """A key of 9 to 16 bytes is its own row (found with token_data blanked, as a 2-byte key
    is); a key of 17 bytes or more is confirmed against token_data (blanked: not found)."""
    v, t = vocab(name), tables(name)
    blank = dataclasses.replace(t, token_data=np.zeros_like(t.token_data))
    by_length: dict[int, list[int]] = {}
    for i in v.mergeable_ids:
        by_length.setdefault(len(v.token_bytes[i]), []).append(i)
    for n in (2, 8, 9, 15, 16, 17, 24):
        for token_id in by_length[n][:50]:
            key = v.token_bytes[token_id]
            assert lookup_piece(t, key) == token_id
            assert lookup_piece(blank, key) == (token_id if n <= 16 else None), (n, key)


@pytest.mark.parametrize("name", ["r50k", "cl100k_hf", "llama3_hf"])
def test_non_pairs_and_non_pieces_are_absent(vocab, tables, name, reference_piece_hash):
    v, t = vocab(name), tables(name)
    rng = random.Random(name)
    ids = list(v.mergeable_ids)
    tried = 0
    while tried < 20_000:
        pair = (rng.choice(ids), rng.choice(ids))
        if pair not in v.merges:
            assert lookup_pair(t, *pair) is None
            tried += 1
    assert lookup_pair(t, -1, -1) is None and lookup_pair(t, v.n_vocab, 0) is None
    known = {v.token_bytes[i] for i in v.mergeable_ids}
    for _ in range(5_000):
        piece = rng.randbytes(rng.randint(2, 12))
        if piece not in known:
            assert lookup_piece(t, piece) is None
    assert lookup_piece(t, b"") is None


def test_tables_of_tiny_vocab_are_minimal(tmp_path):
    v = load_tokenizer_json(write_json(tmp_path / "tokenizer.json", tokenizer_json_doc()))
    t = build_vocab_tables(v)
    assert t.pair_table.shape == (16, 4) and t.piece_table.shape == (1024, 8)  # 2 * 259 -> 1024
    assert lookup_pair(t, v.byte_ids[97], v.byte_ids[98]) == (0, 256)
    assert lookup_piece(t, b"abc") == 257 and lookup_piece(t, b"<|end|>") is None


# --------------------------------------------------------------------------------------------
# Tables reproduce the oracles' BPE (merge semantics, ranks, whole-piece shortcut)
# --------------------------------------------------------------------------------------------


def _bpe_with_tables(t, whole_piece_shortcut: bool, piece: bytes) -> list[int]:
    """Textbook BPE that only reads the device tables: merge the lowest-ranked adjacent pair
    (leftmost on ties) until none is left."""
    if whole_piece_shortcut and (token_id := lookup_piece(t, piece)) is not None:
        return [token_id]
    parts = [int(t.byte_ids[b]) for b in piece]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            found = lookup_pair(t, parts[i], parts[i + 1])
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], i)
        if best is None:
            break
        parts[best[2] : best[2] + 2] = [best[1]]
    return parts


# Llama 3 tokens that plain BPE does not reach (it stops at other tokens): 588 of them, so the
# whole-piece shortcut (tiktoken's rule, HF's ignore_merges) changes real results there.
LLAMA3_SHORTCUT_ONLY = [" jeho".encode(), " việc".encode(), " hợp".encode(), " nhiều".encode()]


def _oraclepieces(v: Vocab, data_dir: Path) -> list[bytes]:
    """Corpus pieces, whole tokens (long ones stress the merge order), random bytes."""
    rng = random.Random(v.name)
    tokens = [v.token_bytes[i] for i in rng.sample(v.mergeable_ids, 1500)]
    noise = [rng.randbytes(rng.randint(1, 16)) for _ in range(300)]
    return pieces(v, sample_text(data_dir), limit=3000) + tokens + noise + LLAMA3_SHORTCUT_ONLY


def test_llama3_shortcut_matters(vocab, tables):
    v, t = vocab("llama3"), tables("llama3")
    for piece in LLAMA3_SHORTCUT_ONLY:
        token_id = lookup_piece(t, piece)
        assert token_id is not None and v.token_bytes[token_id] == piece
        assert _bpe_with_tables(t, False, piece) != [token_id]


@pytest.mark.parametrize("name", ["r50k", "cl100k", "o200k", "llama3"])
def test_tables_reproduce_tiktoken_bpe(vocab, tables, data_dir, name):
    tiktoken = pytest.importorskip("tiktoken")
    v, t = vocab(name), tables(name)
    enc = tiktoken.Encoding(
        v.name,
        pat_str=v.pattern,
        mergeable_ranks={v.token_bytes[i]: i for i in v.mergeable_ids},
        special_tokens=v.special_tokens,
    )
    for piece in _oraclepieces(v, data_dir):
        assert _bpe_with_tables(t, True, piece) == enc._encode_single_piece(piece), piece


@pytest.mark.parametrize("name", ["gpt2_hf", "cl100k_hf", "o200k_hf", "llama3_hf"])
def test_tables_reproduce_hf_bpe(vocab, tables, data_dir, name):
    tokenizers = pytest.importorskip("tokenizers")
    v, t = vocab(name), tables(name)
    hf = tokenizers.Tokenizer.from_file(str(data_dir / "vocab" / VOCAB_CASES[name][0]))
    to_unicode = bytes_to_unicode()
    for piece in _oraclepieces(v, data_dir):
        expected = [tok.id for tok in hf.model.tokenize("".join(to_unicode[b] for b in piece))]
        # (the piece table is exact without the whole-piece rule too: looked up first here)
        assert _bpe_with_tables(t, True, piece) == expected, piece


# --------------------------------------------------------------------------------------------
# Special tables
# --------------------------------------------------------------------------------------------


def _special_entries(st) -> list[tuple[bytes, int]]:
    data, offsets = st.special_data.tobytes(), st.special_offsets.tolist()
    return [(data[offsets[k] : offsets[k + 1]], int(st.special_ids[k])) for k in range(st.count)]


def test_special_tables_longest_first(vocab):
    v = vocab("cl100k")
    st = build_special_tables(v, "all")
    entries = _special_entries(st)
    assert st.count == 5 and sorted(entries) == sorted((k.encode(), i) for k, i in v.special_tokens.items())
    assert entries == sorted(entries, key=lambda e: (-len(e[0]), e[0]))
    assert entries[0] == (b"<|endofprompt|>", 100276)  # the longest
    assert st.special_offsets.dtype == np.int32 and st.special_ids.dtype == np.int32
    assert st.special_data.dtype == np.uint8


def test_special_tables_prefix_is_matched_longest_first(tmp_path):
    path = write(tmp_path / "v.tiktoken", "\n".join(tiktoken_lines()))
    v = load_tiktoken_file(path, special_tokens={"<|a|>": 300, "<|a|><|b|>": 301, "<|b|>": 302})
    entries = _special_entries(build_special_tables(v, ["<|b|>", "<|a|>", "<|a|><|b|>"]))
    assert entries == [(b"<|a|><|b|>", 301), (b"<|a|>", 300), (b"<|b|>", 302)]


def test_special_tables_subset_none_and_unknown(vocab):
    v = vocab("cl100k")
    st = build_special_tables(v, {"<|endoftext|>"})
    assert _special_entries(st) == [(b"<|endoftext|>", 100257)]
    for empty in (build_special_tables(v, None), build_special_tables(v, [])):
        assert empty.count == 0 and empty.special_offsets.tolist() == [0]
        assert empty.special_ids.tolist() == [0] and empty.special_data.shape == (1,)
    with pytest.raises(ValueError, match=r"'<\|nope\|>'"):
        build_special_tables(v, ["<|endoftext|>", "<|nope|>"])
    with pytest.raises(ValueError, match="collection of names"):
        build_special_tables(v, "<|endoftext|>")
