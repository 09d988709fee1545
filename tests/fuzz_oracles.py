"""Oracles and row checks of the CPU fuzz tests (tests/fuzz/test_fuzz_*.py).

Valid text: tiktoken with the real pattern (`.tiktoken` files) or HF `tokenizers` with the file's
own pipeline (`tokenizer.json`). Invalid UTF-8 (policy: ffi/pretok/tables.h): each byte not covered
by a valid shortest-form UTF-8 sequence is one code point of an ordinary symbol class; BPE runs
on the raw bytes. Oracle: tiktoken's own regex (or HF's pre-tokenizer) splits the text in which
each such byte is replaced by a private-use character; the pieces are mapped back to raw byte
ranges and each is BPE-encoded by the oracle (tiktoken `_encode_single_piece`, HF
`model.tokenize`). tiktoken exposes no splitter, so its pieces are read off an Encoding whose
vocabulary is every substring of the text: each regex piece is then one whole-piece token.
The private-use view and the HF oracle are blockbpe_jax.testing's (pua_view, hf_raw_ids), which
benchmarks/fuzz_campaign.py shares.
"""

from __future__ import annotations

import numpy as np
import pytest

from blockbpe_jax import testing
from blockbpe_jax.testing import pua_view

from helpers import CPU, FORMATS, hf_tokenizer, load_tokenizer, tiktoken_enc

NAMES = list(testing.VOCAB_FILES)
VOCABS = [pytest.param(n, f, id=f"{n}-{f}") for n in NAMES for f in FORMATS]


def reference(name: str, fmt: str, text: str, allowed="none") -> list[int]:
    """The oracle's ids for valid text. HF always splits on its added tokens, so json
    vocabularies are only compared with every special allowed."""
    if fmt == "json":
        assert allowed == "all", "HF tokenizers always recognise their added tokens"
        return hf_tokenizer(name).encode(text, add_special_tokens=False).ids
    enc = tiktoken_enc(name, "exact")
    if allowed == "none":
        return enc.encode_ordinary(text)
    if allowed == "all":
        return enc.encode(text, allowed_special="all")
    return enc.encode(text, allowed_special=set(allowed), disallowed_special=())


def tiktoken_pieces(text: str, pattern: str, specials=()) -> list[tuple[int, int] | str]:
    """tiktoken's own split of `text`: character ranges of its regex pieces, and the allowed
    special tokens (as their strings), in order.

    Read off an Encoding with the real pattern whose vocabulary holds every substring of the
    text: tiktoken returns a piece that is a token as that one token (whole-piece rule), so each
    token is one piece. Cost O(n^3) bytes: keep the text short."""
    vocab: dict[bytes, int] = {}
    for i in range(len(text)):
        for j in range(i + 1, len(text) + 1):
            vocab.setdefault(text[i:j].encode("utf-8"), len(vocab))
    special_ids = {s: len(vocab) + k for k, s in enumerate(specials)}
    import tiktoken

    enc = tiktoken.Encoding(
        "pieces", pat_str=pattern, mergeable_ranks=vocab or {b"\0": 0}, special_tokens=special_ids
    )
    names = {i: s for s, i in special_ids.items()}
    char_at = {}  # utf-8 byte offset -> character index
    pos = 0
    for k, ch in enumerate(text):
        char_at[pos] = k
        pos += len(ch.encode("utf-8"))
    char_at[pos] = len(text)
    out, pos = [], 0
    for t in enc.encode(text, allowed_special=set(specials), disallowed_special=()):
        if t in names:
            out.append(names[t])
            pos += len(names[t].encode("utf-8"))
        else:
            end = pos + len(enc.decode_single_token_bytes(t))
            out.append((char_at[pos], char_at[end]))
            pos = end
    assert pos == len(text.encode("utf-8"))
    return out


def tiktoken_raw_reference(enc, raw: bytes, specials=()) -> list[int]:
    """tiktoken's ids for raw bytes under our invalid-UTF-8 policy (see the module docstring)."""
    text, offsets = pua_view(raw)
    out = []
    for item in tiktoken_pieces(text, enc._pat_str, specials):
        if isinstance(item, str):
            out.append(enc._special_tokens[item])
        else:
            out.extend(enc._encode_single_piece(raw[offsets[item[0]] : offsets[item[1]]]))
    return out


def hf_raw_reference(name: str, raw: bytes, mode: str) -> list[int]:
    """HF's ids for raw bytes under our invalid-UTF-8 policy (testing.hf_raw_ids)."""
    special_ids = set(load_tokenizer(name, "json").vocab.special_tokens.values())
    return testing.hf_raw_ids(hf_tokenizer(name), special_ids, raw, mode)


# ---------------------------------------------------------------------------------------------
# Our CPU path
# ---------------------------------------------------------------------------------------------

# A few fixed widths, so that jit compiles a handful of shapes per vocabulary, not one per
# example.
WIDTHS = (1024, 16384, 131072)


def width_for(nbytes: int) -> int:
    return next(w for w in WIDTHS if nbytes <= w)


def as_bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def encode_cpu(tok, texts, *, mode="exact", allowed="none", max_tokens=None, pad_id=0, max_len=None):
    max_len = max_len or width_for(max(len(as_bytes(t)) for t in texts))
    ids, counts = tok.encode_batch(
        texts,
        max_len=max_len,
        max_tokens=max_tokens,
        mode=mode,
        allowed_special=allowed,
        pad_id=pad_id,
        device=CPU,
    )
    return np.asarray(ids), np.asarray(counts)


def describe(text, ours: list[int], ref: list[int]) -> str:
    k = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return (
        f"input {as_bytes(text)[:300]!r} ({len(as_bytes(text))} bytes): {len(ours)} ids vs "
        f"{len(ref)} from the oracle; first difference at {k}: ours {ours[max(0, k - 3) : k + 5]} "
        f"oracle {ref[max(0, k - 3) : k + 5]}"
    )


def check_row(ids: np.ndarray, counts: np.ndarray, k: int, ref: list[int], text, pad_id=0):
    """Row k holds ref[:T] then pad_id, and counts[k] is the full count len(ref)."""
    width = ids.shape[1]
    row = ids[k].tolist()
    kept = min(len(ref), width)
    ours = row[: min(max(int(counts[k]), 0), width)]
    assert int(counts[k]) == len(ref) and row[:kept] == ref[:kept], describe(text, ours, ref)
    assert all(x == pad_id for x in row[kept:]), f"row {k} not padded with {pad_id}: {row[kept : kept + 8]}"


def check_text(name, fmt, text: str, allowed="none", mode="exact"):
    tok = load_tokenizer(name, fmt)
    if fmt == "json":
        allowed = "all"
    ids, counts = encode_cpu(tok, [text], allowed=allowed, mode=mode)
    check_row(ids, counts, 0, reference(name, fmt, text, allowed), text)
