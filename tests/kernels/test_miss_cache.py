"""The piece kernel's cache of merged misses (ffi/cuda/miss_cache.cuh): the ids are tiktoken's
whether the cache is empty, filled by an earlier call, or off (BLOCKBPE_MISS_CACHE=0); the kernel
fills it; a row planted by hand is what the kernel returns for its piece (so the lookup really
runs), and a row whose check word is wrong is ignored. GPU only."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax.tables import build
from blockbpe_jax.tables.sets import MISS_CACHE_ROW_INTS
from blockbpe_jax import testing
from helpers import device_for, gpu_devices, load_tokenizer, tiktoken_enc

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

_M64 = (1 << 64) - 1
_READY_TAG = 2  # a ready row's state: length << 16 | count << 8 | 2
_FIRST_TOKEN = 7  # a row: key (4 words), state, check (2 words), tokens
_TOKENS = MISS_CACHE_ROW_INTS - _FIRST_TOKEN


def short_key(piece: bytes) -> tuple[int, int]:
    """The piece's short key (ffi/core/bpe_core.h): bytes 0..7 and 8..15, little-endian."""
    padded = piece.ljust(16, b"\0")
    return int.from_bytes(padded[:8], "little"), int.from_bytes(padded[8:], "little")


def home_row(piece: bytes, rows: int) -> int:
    lo, hi = short_key(piece)
    h = build._short_key_hash(np.array([lo], np.uint64), np.array([hi], np.uint64), np.array([len(piece)]))
    return int(h[0]) & (rows - 1)


def check_word(piece: bytes, state: int, tokens: list[int]) -> int:
    """miss_check (ffi/cuda/miss_cache.cuh) in Python integers."""
    lo, hi = short_key(piece)
    h = ((lo * 0x9E3779B97F4A7C15) & _M64) ^ ((hi * 0xC2B2AE3D27D4EB4F) & _M64) ^ (state & 0xFFFFFFFF)
    for t in tokens:
        h = ((h ^ (t & 0xFFFFFFFF)) * 0x100000001B3) & _M64
        h ^= h >> 29
    return h ^ (h >> 32) ^ 0x5851F42D4C957F2D


def planted_row(piece: bytes, tokens: list[int], check_delta: int = 0) -> np.ndarray:
    lo, hi = short_key(piece)
    state = len(piece) << 16 | len(tokens) << 8 | _READY_TAG
    check = (check_word(piece, state, tokens) + check_delta) & _M64
    words = [lo & 0xFFFFFFFF, lo >> 32, hi & 0xFFFFFFFF, hi >> 32, state, check & 0xFFFFFFFF, check >> 32]
    words += tokens + [0] * (_TOKENS - len(tokens))
    return np.array(words, dtype=np.uint32).view(np.int32)


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
    filled = np.asarray(cache)[:, 4] != 0
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


def test_a_planted_row_is_read_and_a_bad_check_is_not():
    tok = load_tokenizer("cl100k", "tiktoken")
    piece = b" Bolkonskiy"  # a miss in cl100k: several tokens
    want = tiktoken_enc("cl100k", "exact").encode_ordinary(piece.decode())
    assert len(want) > 1
    tables = tok.tables(device=device_for("gpu"))
    rows, row = 1024, home_row(piece, 1024)
    own = jax.device_put(np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32), device_for("gpu"))
    assert encode_with(dataclasses.replace(tables, miss_cache=own), piece.decode()) == want
    kept = np.asarray(own)  # the kernel kept the piece where it hashes
    assert kept[row, 4] == (len(piece) << 16 | len(want) << 8 | _READY_TAG)
    assert kept[row, _FIRST_TOKEN : _FIRST_TOKEN + len(want)].tolist() == want
    # A row written by hand is what the kernel returns for its piece; with a wrong check word,
    # the kernel merges the piece instead.
    for delta, expected in ((0, [11, 22, 33]), (1, want)):
        planted = np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32)
        planted[row] = planted_row(piece, [11, 22, 33], delta)
        cache = jax.device_put(planted, device_for("gpu"))
        assert encode_with(dataclasses.replace(tables, miss_cache=cache), piece.decode()) == expected
