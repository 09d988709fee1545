"""`Vocab`, the one model every vocabulary file becomes (with CharLevel and RunRule, the
character-level tables it may hold), and the checks every loader shares."""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Mapping

import numpy as np

from .. import pretok
from ..pretok import Pretokenizer
from .patterns import recognise_pattern


# Ids index Python tuples and int32 device tables. A huge rank in a file (a typo, or a hostile
# file) would otherwise allocate a tuple of that many holes; real vocabularies stay below 2**18.
MAX_TOKEN_ID = 2**24 - 1


@dataclass(frozen=True)
class CharLevel:
    """What the character-level kernel path needs besides the pair table (ffi/core/char_symbols.h);
    built by vocab/char_bpe.py and vocab/sentencepiece.py."""

    char_ids: dict[str, int]  # one-character pieces by the character the text holds
    replacement_id: int  # piece of U+FFFD (a byte that is not valid UTF-8), or -1
    prefix_id: int  # piece of the dummy prefix `▁`, or -1
    prefix_rule: int  # where it goes: PREFIX_* bits
    word_start_id: int  # piece that starts a word (`▁`), or -1 (no word segments)
    runs: "RunRule | None"  # how runs of one character split, when passes cannot do it
    joiners: tuple[int, ...] = ()  # pieces after which a `▁` does not start a word
    escaped_specials: bool = False  # a `▁` of a special token also matches a space


@dataclass(frozen=True)
class RunRule:
    """A run of m single run characters: m >= long splits off the piece long_id (step
    characters) and goes on as a run of m - step; shorter runs are table[m] (piece ids)."""

    run_id: int
    long: int
    long_id: int
    step: int
    table: tuple[tuple[int, ...], ...]


class VocabError(ValueError):
    """A vocabulary file is malformed. The message names the file and line / JSON path."""


@dataclass(frozen=True, eq=False)
class Vocab:
    """One byte-level BPE vocabulary, whatever file it came from.

    token_bytes[i] is the byte string of id i (None for an unused id); special tokens are
    included at their ids. merges maps (left_id, right_id) -> (rank, merged_id), lower rank
    first. "Mergeable" tokens are the ids that are not special: BPE and the whole-piece
    shortcut only ever see those.
    """

    name: str
    token_bytes: tuple[bytes | None, ...]
    merges: Mapping[tuple[int, int], tuple[int, int]]  # a dict, or TiktokenMerges
    byte_ids: tuple[int, ...]
    special_tokens: dict[str, int]
    pattern: str | None
    pattern_name: str | None
    # A pre-tokenized piece that is a token encodes to it (tiktoken; HF's ignore_merges): the
    # piece table then holds every token, else only those the merges make (tables/build.py).
    whole_piece_shortcut: bool
    # The pre-tokenizer as data (blockbpe_jax/pretok), None when the file names none; compiled
    # at the first exact-mode use.
    pretokenizer: Pretokenizer | None
    unsupported: str | None
    source: str
    # SentencePiece-style BPE (merges over characters; blockbpe_jax/vocab/char_bpe.py), else None.
    char_level: "CharLevel | None" = None
    # Special tokens matched in text whatever the allowed specials (SentencePiece user-defined
    # pieces).
    always_special: tuple[str, ...] = ()

    @property
    def n_vocab(self) -> int:
        return len(self.token_bytes)

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        return frozenset(self.special_tokens.values())

    @functools.cached_property
    def mergeable_ids(self) -> tuple[int, ...]:
        """Ids of the non-special tokens, ascending."""
        specials = self.special_ids
        return tuple(i for i, b in enumerate(self.token_bytes) if b is not None and i not in specials)

    def __reduce__(self):
        """Pickled by content: its fields, less what is derived from them (cached properties; a
        tiktoken vocabulary's merges, as the ids of its ranks: `_vocab_from_state`)."""
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.merges, TiktokenMerges):
            state["merges"] = ("tiktoken ranks", self.merges.rank_ids)
        return (_vocab_from_state, (state,))

    def __repr__(self) -> str:
        return (
            f"Vocab(name={self.name!r}, n_vocab={self.n_vocab}, merges={len(self.merges)}, "
            f"specials={len(self.special_tokens)}, pattern_name={self.pattern_name!r}, "
            f"whole_piece_shortcut={self.whole_piece_shortcut}, source={self.source!r})"
        )


def _vocab_from_state(state: dict) -> "Vocab":
    merges = state["merges"]
    if isinstance(merges, tuple) and len(merges) == 2 and merges[0] == "tiktoken ranks":
        tb = state["token_bytes"]
        state = {**state, "merges": TiktokenMerges({tb[i]: i for i in merges[1].tolist()})}
    return Vocab(**state)


def vocab_name(path: str | os.PathLike) -> str:
    """A vocabulary's name from its file: the folder of a `tokenizer.json`, else the file's stem."""
    path = Path(path)
    return path.parent.name if path.name == "tokenizer.json" and path.parent.name else path.stem


def check_id(where: str | Callable[[], str], token_id: object) -> int:
    """token_id, an id in range; else VocabError at `where` (or what where() spells: a loader
    checking 100-200k ids makes the message only for a bad one)."""
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        problem = f"id {token_id!r} is not an integer"
    elif not 0 <= token_id <= MAX_TOKEN_ID:
        problem = f"id {token_id} is outside 0..{MAX_TOKEN_ID}"
    else:
        return token_id
    raise VocabError(f"{where() if callable(where) else where}: {problem}")


def place_specials(
    where: str, token_bytes: list[bytes | None], special_tokens: Mapping[str, int]
) -> list[bytes | None]:
    """Put special tokens' UTF-8 bytes at their ids, growing the list; reject collisions with a
    mergeable token of different bytes (the same bytes at the same id is fine: HF files list
    their specials in model.vocab too). Several special strings may share an id, as tiktoken
    allows (gpt-oss's o200k_harmony has '<|endofprompt|>' and '<|reserved_200018|>'): each
    encodes to it, and it decodes to the first one listed."""
    seen_ids: dict[int, str] = {}
    for text, token_id in special_tokens.items():
        check_id(f"{where}: special token {text!r}", token_id)
        if token_id in seen_ids:
            continue
        seen_ids[token_id] = text
        if not text:
            raise VocabError(f"{where}: special token with id {token_id} is empty")
        data = text.encode("utf-8")
        if token_id >= len(token_bytes):
            token_bytes.extend([None] * (token_id + 1 - len(token_bytes)))
        existing = token_bytes[token_id]
        if existing is not None and existing != data:
            raise VocabError(
                f"{where}: special token {text!r} has id {token_id}, which is already the "
                f"mergeable token {existing!r}"
            )
        token_bytes[token_id] = data
    return token_bytes


def missing_bytes_message(missing: list[int]) -> str:
    shown = ", ".join(f"0x{b:02x}" for b in missing[:8])
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    return f"missing single-byte tokens for {len(missing)} byte values ({shown}{more}); all 256 bytes must be tokens"


def _merges_from_ranks(ranks: Mapping[bytes, int]) -> dict[tuple[int, int], tuple[int, int]]:
    """tiktoken semantics: every split (prefix, suffix) of a token where both halves are tokens
    becomes a merge whose rank and merged id are the token's rank.

    A plain loop over the ~540k splits of cl100k (about 0.5 s); no two tokens can claim the
    same pair, because a pair's concatenation is one byte string, hence one token."""
    merges: dict[tuple[int, int], tuple[int, int]] = {}
    get = ranks.get
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left = get(token[:cut])
            if left is not None:
                right = get(token[cut:])
                if right is not None:
                    merges[(left, right)] = (rank, rank)
    return merges


class TiktokenMerges(Mapping):
    """A tiktoken vocabulary's merges (`_merges_from_ranks`), derived at their first use: they
    are a function of the token bytes, and a start-up whose tables come from the disk cache
    (tables/cache.py keys them by the token bytes) never needs them."""

    def __init__(self, ranks: Mapping[bytes, int]):
        self._ranks: Mapping[bytes, int] | None = ranks
        self._merges: dict | None = None
        self._lock = threading.Lock()
        # The ids that are ranks: with the vocabulary's token bytes, all a pickle needs.
        self.rank_ids = np.fromiter(ranks.values(), np.int32, len(ranks))

    def __reduce__(self):
        """Alone (a Vocab pickles its rank ids instead): its ranks, or its merges once derived."""
        if self._ranks is not None:
            return (TiktokenMerges, (dict(self._ranks),))
        return (dict, (self.derived,))

    @property
    def derived(self) -> dict[tuple[int, int], tuple[int, int]]:
        if self._merges is None:
            with self._lock:
                if self._merges is None:
                    self._merges = _merges_from_ranks(self._ranks)
                    self._ranks = None
        return self._merges

    def __getitem__(self, pair):
        return self.derived[pair]

    def __iter__(self):
        return iter(self.derived)

    def __len__(self) -> int:
        return len(self.derived)


def vocab_from_ranks(
    *,
    ranks: Mapping[bytes, int],
    where: str,
    name: str,
    special_tokens: Mapping[str, int],
    pattern: str | None,
    source: str,
) -> Vocab:
    """Shared tail of the tiktoken loaders (ranks already free of duplicates)."""
    if not ranks:
        raise VocabError(f"{where}: no tokens")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise VocabError(f"{where}: {missing_bytes_message(missing)}")
    token_bytes: list[bytes | None] = [None] * (max(ranks.values()) + 1)
    for data, rank in ranks.items():
        token_bytes[rank] = data
    token_bytes = place_specials(where, token_bytes, special_tokens)
    return Vocab(
        name=name,
        token_bytes=tuple(token_bytes),
        merges=TiktokenMerges(dict(ranks)),
        byte_ids=tuple(ranks[bytes([b])] for b in range(256)),
        special_tokens=dict(special_tokens),
        pattern=pattern,
        pattern_name=recognise_pattern(pattern),
        whole_piece_shortcut=True,
        pretokenizer=None if pattern is None else pretok.from_tiktoken_pattern(pattern),
        unsupported=None,
        source=source,
    )
