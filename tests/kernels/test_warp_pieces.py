"""Long pieces of the one-block path in warp sub-spans (ffi/cuda/sub_spans.cuh).

A call of at most 16 rows no wider than a tile runs one block per row; there every
pre-tokenizer piece longer than 64 bytes (kShortPieceLen) is merged in sub-spans of 128-byte
chunks, one warp each, stitched at shared tokens (the row's pieces in rounds of up to 32
sub-spans), and a piece whose sub-spans do not stitch (a run that starts inside it, across
a chunk boundary) goes to the block passes. Every test compares the
GPU, row by row and padding included, with the CPU executor and with tiktoken, also with the
CUDA handler's test hook BLOCKBPE_WARP_SPANS=0 (every piece by the block passes). Skips where
JAX sees no GPU.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
import pytest

import blockbpe_jax as bb

from blockbpe_jax import testing

from helpers import gpu_devices, load_tokenizer
from long_rows_shared import TILE, assert_equals_tiktoken, assert_gpu_equals_cpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

FEW_ROWS = 16  # kFewRows (ffi/binding/encode_params.h)


def cut(raw: bytes, n: int) -> bytes:
    """The first n bytes of raw (repeated as needed), shortened to whole characters."""
    return (raw * (n // max(len(raw), 1) + 1))[:n].decode("utf-8", errors="ignore").encode()


def mixed_letters(rng: random.Random, n: int) -> bytes:
    return "".join(rng.choice("abcdefghijжщыΩλ中文日本語") for _ in range(n)).encode()


def run_in_piece(rng: random.Random, n: int) -> bytes:
    """One piece: a run of one letter that starts inside it (its sub-spans do not stitch)."""
    return b"xyz" + b"a" * (n - 3)


KINDS = {**testing.ADVERSARIAL, "mixed": mixed_letters, "run_in_piece": run_in_piece}
LENGTHS = [64, 65, 100, 128, 129, 200, 256, 257, 383, 640, 1000, 1500, TILE - 1, TILE]


def piece(kind: str, n: int, seed: int = 0) -> bytes:
    return cut(KINDS[kind](random.Random(f"{kind}/{n}/{seed}"), n + 4), n)


def several_pieces(seed: int) -> bytes:
    """Long pieces of several kinds with short text between them, within one tile."""
    rng = random.Random(seed)
    parts = [b"Start: "]
    for kind in rng.sample(["letters_a_j", "cjk", "emoji", "mixed", "whitespace_newlines", "spaces"], 4):
        parts += [piece(kind, rng.randint(256, 420), seed), b" 42, x" if kind != "spaces" else b"y"]
    return cut(b"".join(parts), TILE)


def many_pieces(seed: int, lo: int, hi: int) -> bytes:
    """Pieces of lo..hi bytes of letters or CJK after one digit each (pieces of their own), up
    to a tile: more sub-spans than one round holds."""
    rng, parts, size = random.Random(seed), [], 0
    while True:
        part = b"7" + piece(rng.choice(["letters_a_j", "cjk", "one_letter"]), rng.randint(lo, hi), size)
        if size + len(part) > TILE:
            return b"".join(parts)
        parts.append(part)
        size += len(part)


def check(name, rows, monkeypatch, max_len=TILE):
    assert len(rows) <= FEW_ROWS
    tok = load_tokenizer(name, "tiktoken")
    for hook in ("1", "0"):
        monkeypatch.setenv("BLOCKBPE_WARP_SPANS", hook)
        want = assert_gpu_equals_cpu(tok, rows, max_len=max_len, block_sizes=(256, 512, 1024))
        assert_equals_tiktoken(name, rows, want)


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_single_long_pieces(monkeypatch, name, kind):
    check(name, [piece(kind, n) for n in LENGTHS], monkeypatch)


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_several_long_pieces_in_one_row(monkeypatch, name):
    rows = [several_pieces(seed) for seed in range(6)] + [b"", b"short row", piece("cjk", 700)]
    check(name, rows, monkeypatch)


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_many_long_pieces_in_one_row(monkeypatch, name):
    rows = [many_pieces(seed, 65, 90) for seed in range(3)] + [
        many_pieces(seed, 65, 400) for seed in range(3)
    ]
    check(name, rows, monkeypatch)


@pytest.mark.parametrize("max_len", [65, 128, 129, 300, 1024])
def test_narrow_calls(monkeypatch, max_len):
    """The sub-spans' scratch is sized by max_len: pieces as long as the row, or one short."""
    rows = [
        piece(kind, n) for kind in ("cjk", "letters_a_j", "spaces", "emoji") for n in (max_len, max_len - 1)
    ]
    check("cl100k", [r for r in rows if len(r) <= max_len], monkeypatch, max_len=max_len)


def test_truncated_rows(monkeypatch):
    rows = [piece("letters_a_j", 2000), piece("cjk", 1500), several_pieces(7)]
    tok = load_tokenizer("cl100k", "tiktoken")
    for hook in ("1", "0"):
        monkeypatch.setenv("BLOCKBPE_WARP_SPANS", hook)
        assert_gpu_equals_cpu(tok, rows, max_len=TILE, max_tokens=100, block_sizes=(256, 512, 1024))


def test_gpu_threads_with_calls_of_different_shared_memory():
    """Threads dispatching calls of two shapes at once, one with far more shared memory per
    block than the other (8 x 2048: few rows, warp sub-spans' scratch; 64 x 256), as the corpus
    job's two threads do: every result equals the CPU handler's. (The handler once set the
    kernel's shared-memory ceiling per call, and a call launched after another thread had just
    lowered it failed with "invalid argument".)"""
    tok = load_tokenizer("cl100k", "tiktoken")
    gpu, cpu = gpu_devices()[0], jax.devices("cpu")[0]
    raw = testing.read_corpus(next(p for p in testing.corpus_paths() if p.name.startswith("war")))
    calls = []
    for B, L in [(8, 2048), (64, 256)]:
        data, lengths = bb.pack_strings([raw[i * L : (i + 1) * L] for i in range(B)], max_len=L)
        ref = np.asarray(bb.encode(data, lengths, tok.tables(device=cpu), max_tokens=L).ids)
        args = (jax.device_put(data, gpu), jax.device_put(lengths, gpu), tok.tables(device=gpu))
        f = jax.jit(lambda d, l, t, L=L: bb.encode(d, l, t, max_tokens=L, check_lengths=False).ids)
        calls.append((f, args, ref))

    def call(k: int) -> bool:
        f, args, ref = calls[k % 2]
        return np.array_equal(np.asarray(f(*args)), ref)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(400)))
