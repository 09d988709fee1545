"""A disk cache of the built vocabulary tables (`build.build_vocab_tables`), next to the
pre-tokenizer cache ($BLOCKBPE_CACHE_DIR, default ~/.cache/blockbpe_jax; "" turns both off):
building cl100k's hash tables takes a third of a second of every start-up.

The key is a digest of what the builder reads (token bytes, merges, byte ids, specials, the
whole-piece rule) and of the builder's own source (build.py), so a changed vocabulary or
layout never meets a stale entry. (The piece table of a vocabulary without the whole-piece
rule holds the tokens its merges make from their own bytes: a function of the same inputs.)
SentencePiece-style vocabularies (char_level) are built every time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

import numpy as np

from . import build
from ..disk_cache import kept_npz
from ..vocab.model import TiktokenMerges

TABLE_FORMAT = 2  # the entries' own layout (fields as saved below)


@functools.lru_cache(maxsize=1)
def _builder_digest() -> bytes:
    return hashlib.sha256(Path(build.__file__).read_bytes()).digest()


def vocab_key(vocab) -> str | None:
    """The cache key of `vocab`'s tables, or None where they are not cached."""
    if vocab.char_level is not None:
        return None
    h = hashlib.sha256(_builder_digest())
    rule = vocab.whole_piece_shortcut
    h.update(repr((TABLE_FORMAT, vocab.n_vocab, vocab.byte_ids, sorted(vocab.special_ids), rule)).encode())
    tb = vocab.token_bytes
    h.update(np.fromiter((-1 if b is None else len(b) for b in tb), np.int64, len(tb)).tobytes())
    h.update(b"".join(b for b in tb if b))
    if isinstance(vocab.merges, TiktokenMerges):  # a function of the token bytes and specials
        h.update(b"tiktoken merges")
        return h.hexdigest()[:32]
    n = len(vocab.merges)
    h.update(np.fromiter((x for pair in vocab.merges for x in pair), np.int64, 2 * n).tobytes())
    h.update(np.fromiter((x for v in vocab.merges.values() for x in v), np.int64, 2 * n).tobytes())
    return h.hexdigest()[:32]


def vocab_tables(vocab) -> build.VocabTables:
    """`build.build_vocab_tables(vocab)`, from the disk cache when it holds them."""
    return kept_npz(
        "tables",
        vocab_key(vocab),
        lambda: build.build_vocab_tables(vocab),
        to_arrays=lambda built: {
            f.name: np.asarray(getattr(built, f.name)) for f in dataclasses.fields(build.VocabTables)
        },
        from_arrays=_from_arrays,
    )


def _from_arrays(z) -> build.VocabTables:
    values = {}
    for f in dataclasses.fields(build.VocabTables):
        a = z[f.name]
        if f.name == "char_runs":
            values[f.name] = tuple(int(x) for x in a)
        elif a.ndim == 0:
            values[f.name] = a.dtype.type(a).item()
        else:
            values[f.name] = a
    return build.VocabTables(**values)
