"""The piece kernel's cache of merged misses (ffi/cuda/miss_cache.cuh): the ids are tiktoken's
whether the cache is empty, filled by an earlier call, or off (BLOCKBPE_MISS_CACHE=0); the kernel
fills it; a row planted by hand is what the kernel returns for its piece (so the lookup really
runs), and a row whose check word is wrong is ignored, for a piece of up to 16 bytes and for a
longer one (up to 32: looked up before the lane merges, kept in the row's second half). GPU only."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax.tables.sets import MISS_CACHE_ROW_INTS
from blockbpe_jax import testing
from helpers import device_for, gpu_devices, load_tokenizer, tiktoken_enc
from miss_cache_rows import STATE, home_row, planted_row

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]


def encode(tok, rows, width):
    ids, counts = tok.encode_batch(rows, max_len=width, mode="exact", device=device_for("gpu"))
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[k, : counts[k]].tolist() for k in range(len(rows))]


@pytest.mark.parametrize("batch, width", [(64, 512), (96, 4096)])
def test_ids_with_the_cache_empty_filled_and_off(data_dir, monkeypatch, batch, width):
    tok = load_tokenizer("cl100k", "tiktoken")
    rows = testing.corpus_rows(data_dir, batch, width)
    want = tiktoken_enc("cl100k", "exact").encode_ordinary_batch(rows)
    cache = tok.tables(device=device_for("gpu")).miss_cache
    assert cache.shape[1] == MISS_CACHE_ROW_INTS and cache.shape[0] > 1
    assert encode(tok, rows, width) == want  # (the cache as earlier tests left it)
    filled = np.asarray(cache)[:, STATE] != 0
    assert filled.sum() > 0, "the kernel kept no merged miss"
    assert encode(tok, rows, width) == want  # every short miss now found there
    monkeypatch.setenv("BLOCKBPE_MISS_CACHE", "0")
    assert encode(tok, rows, width) == want


def encode_with(tables, text: str, width: int = 64) -> list[int]:
    data, lengths = bb.pack_strings([text.encode()], max_len=width)
    device = device_for("gpu")
    ids, counts = bb.encode(
        jax.device_put(data, device), jax.device_put(lengths, device), tables, max_tokens=width
    )
    return np.asarray(ids)[0, : int(counts[0])].tolist()


# Misses in cl100k (several tokens each): a short key, and a long one (17-32 bytes: found before
# the merges, kept in a row's second half too).
@pytest.mark.parametrize("piece", [b" Bolkonskiy", b" Drubetskoyvasilievich"])
def test_a_planted_row_is_read_and_a_bad_check_is_not(piece):
    tok = load_tokenizer("cl100k", "tiktoken")
    want = tiktoken_enc("cl100k", "exact").encode_ordinary(piece.decode())
    assert len(want) > 1
    tables = tok.tables(device=device_for("gpu"))
    rows, row = 1024, home_row(piece, 1024)
    own = jax.device_put(np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32), device_for("gpu"))
    assert encode_with(dataclasses.replace(tables, miss_cache=own), piece.decode()) == want
    kept = np.asarray(own)  # the kernel kept the piece where it hashes
    assert kept[row].tolist() == planted_row(piece, want).tolist()
    # A row written by hand is what the kernel returns for its piece; with a wrong check word,
    # the kernel merges the piece instead.
    for delta, expected in ((0, [11, 22, 33]), (1, want)):
        planted = np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32)
        planted[row] = planted_row(piece, [11, 22, 33], delta)
        cache = jax.device_put(planted, device_for("gpu"))
        assert encode_with(dataclasses.replace(tables, miss_cache=cache), piece.decode()) == expected


def test_a_miss_every_block_merges_at_once_is_kept_once():
    """Every row holds the same miss, so in the first call every block merges it and keeps it at
    once: one row holds it. (Copies of a frequent miss in its probe rows and its neighbours' left
    other misses no row: merged again at every call, they set the slowest blocks' time.)"""
    piece = b" Bolkonskiy"
    tok = load_tokenizer("cl100k", "tiktoken")
    want = tiktoken_enc("cl100k", "exact").encode_ordinary(piece.decode())
    tables = tok.tables(device=device_for("gpu"))
    own = jax.device_put(np.zeros((1024, MISS_CACHE_ROW_INTS), np.int32), device_for("gpu"))
    data, lengths = bb.pack_strings([piece] * 512, max_len=64)
    device = device_for("gpu")
    ids, counts = bb.encode(
        jax.device_put(data, device),
        jax.device_put(lengths, device),
        dataclasses.replace(tables, miss_cache=own),
        max_tokens=64,
    )
    ids, counts = np.asarray(ids), np.asarray(counts)
    assert all(ids[k, : counts[k]].tolist() == want for k in range(len(ids)))
    kept = np.asarray(own)
    row = planted_row(piece, want)
    assert sum(kept[r].tolist() == row.tolist() for r in range(len(kept))) == 1
    assert (kept[:, STATE] != 0).sum() == 1  # (no row left claimed and not written either)
