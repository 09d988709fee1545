"""The CUDA handler's kernel choice (BLOCKBPE_KERNEL, read per call): unset or `piece`, the
piece-parallel kernel wherever a call allows it; `block`, encode_kernel for every call; any other
value, an error naming the variable. Both kernels give tiktoken's ids on corpus text, at shapes
where the piece kernel runs (rows of at most 4 KiB, short and long batches: every chunk size)
with allowed special tokens as without. GPU only."""

from __future__ import annotations

import numpy as np
import pytest

from blockbpe_jax import testing
from helpers import device_for, gpu_devices, load_tokenizer, specials_of, tiktoken_enc

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]


def encode(tok, rows, width, allowed_special="none"):
    ids, counts = tok.encode_batch(
        rows, max_len=width, mode="exact", allowed_special=allowed_special, device=device_for("gpu")
    )
    return np.asarray(ids), np.asarray(counts)


@pytest.mark.parametrize("batch, width", [(8, 512), (300, 512), (64, 1000), (96, 4096)])
def test_piece_and_block_equal_tiktoken(data_dir, monkeypatch, batch, width):
    tok = load_tokenizer("cl100k", "tiktoken")
    enc = tiktoken_enc("cl100k", "exact")
    rows = testing.corpus_rows(data_dir, batch, width)
    want = enc.encode_ordinary_batch(rows)
    results = {}
    for kernel in (None, "piece", "block"):
        if kernel is None:
            monkeypatch.delenv("BLOCKBPE_KERNEL", raising=False)
        else:
            monkeypatch.setenv("BLOCKBPE_KERNEL", kernel)
        ids, counts = encode(tok, rows, width)
        got = [ids[k, : counts[k]].tolist() for k in range(batch)]
        assert got == want, kernel
        results[kernel] = ids
    assert np.array_equal(results[None], results["block"])  # the padding too


def test_specials_call_with_either_choice(monkeypatch):
    tok = load_tokenizer("cl100k", "tiktoken")
    enc = tiktoken_enc("cl100k", "exact")
    rows = ["a<|endoftext|>b hello world", "<|endoftext|>", "x" * 40 + "<|endoftext|> y"]
    want = [enc.encode(r, allowed_special="all") for r in rows]
    for kernel in ("piece", "block"):
        monkeypatch.setenv("BLOCKBPE_KERNEL", kernel)
        ids, counts = encode(tok, rows, 64, allowed_special="all")
        assert [ids[k, : counts[k]].tolist() for k in range(len(rows))] == want, kernel


@pytest.mark.parametrize("name", ["cl100k", "llama3"])
@pytest.mark.parametrize(
    "batch, width", [(8, 512), (300, 512), (64, 1000), (2048, 512), (96, 4096), (40, 160)]
)
def test_specials_spliced_into_corpus_rows(data_dir, monkeypatch, name, batch, width):
    """Calls with specials allowed, which the piece kernel takes too: every chunk size, specials
    at a row's start and end, back to back, across chunk edges, and their prefixes as decoys;
    both kernels against tiktoken, and each other's padding."""
    tok = load_tokenizer(name, "tiktoken")
    enc = tiktoken_enc(name, "exact")
    specials = specials_of(name, "tiktoken")[:6]
    pieces = specials + [sp[: len(sp) // 2] for sp in specials[:2]] + ["<|"]
    rng = np.random.default_rng(width * 7 + batch)
    rows = []
    room = 5 * max(len(x.encode()) for x in pieces)  # (at most five pieces a row)
    for k, row in enumerate(testing.corpus_rows(data_dir, batch, width - room)):
        cuts = sorted(rng.integers(0, len(row) + 1, size=int(rng.integers(0, 4))).tolist())
        if k % 5 == 0:
            cuts = [0] + cuts + [len(row)]
        parts, at = [], 0
        for c in cuts:
            parts += [row[at:c], str(rng.choice(pieces))]
            at = c
        rows.append("".join(parts) + row[at:])
    assert all(len(r.encode()) <= width for r in rows)
    want = [enc.encode(r, allowed_special="all") for r in rows]
    results = {}
    for kernel in ("piece", "block"):
        monkeypatch.setenv("BLOCKBPE_KERNEL", kernel)
        ids, counts = encode(tok, rows, width, allowed_special="all")
        got = [ids[k, : counts[k]].tolist() for k in range(batch)]
        assert got == want, kernel
        results[kernel] = ids
    assert np.array_equal(results["piece"], results["block"])


def test_unknown_kernel_is_an_error(monkeypatch):
    tok = load_tokenizer("cl100k", "tiktoken")
    monkeypatch.setenv("BLOCKBPE_KERNEL", "blocks")
    with pytest.raises(Exception, match="BLOCKBPE_KERNEL must be 'piece' or 'block', got 'blocks'"):
        encode(tok, ["hello"], 64)
