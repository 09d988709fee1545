"""Pieces of 33..64 bytes, a warp each (merge_in_warp, ffi/cuda/lane_merges.cuh).

A pre-tokenizer piece too long for the lane-parallel merges (32 bytes) and short enough for
the merge list (64, kShortPieceLen) is merged by one warp, two tokens a lane, in every kernel
that lists pieces: the one-block path with many rows and with few (beside the warp
sub-spans of longer pieces), and the tile pipeline of long rows. Every test compares the GPU
(every block size) with the CPU executor, row by row and padding included, and with tiktoken.
Skips where JAX sees no GPU.
"""

from __future__ import annotations

import random

import pytest

from blockbpe_jax import testing

from helpers import gpu_devices, load_tokenizer
from long_rows_shared import TILE, assert_equals_tiktoken, assert_gpu_equals_cpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

FEW_ROWS = 16  # kFewRows (ffi/binding/encode_params.h)
LENGTHS = range(30, 67)  # around 33..64, both edges


def punctuation(rng: random.Random, n: int) -> bytes:
    return bytes(rng.choice(b"=-#*~+_.:/\\|<>") for _ in range(n))


def rule(rng: random.Random, n: int) -> bytes:
    """A comment rule, as source files draw them."""
    return b"# " + rng.choice([b"-", b"=", b"#", b"*", b"-="]) * n


def letters_digits(rng: random.Random, n: int) -> bytes:
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyzABC0123456789_") for _ in range(n))


KINDS = {**testing.ADVERSARIAL, "punctuation": punctuation, "rule": rule, "letters_digits": letters_digits}


def piece(kind: str, n: int, seed: int = 0) -> bytes:
    raw = KINDS[kind](random.Random(f"{kind}/{n}/{seed}"), n + 4)
    return raw[:n].decode("utf-8", errors="ignore").encode()


def pieces(seed: int = 0) -> list[bytes]:
    return [piece(kind, n, seed) for kind in sorted(KINDS) for n in LENGTHS]


def check(name, rows, max_len):
    tok = load_tokenizer(name, "tiktoken")
    want = assert_gpu_equals_cpu(tok, rows, max_len=max_len)
    assert_equals_tiktoken(name, rows, want)


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
def test_one_block_rows(name):
    """Many rows (more than FEW_ROWS): one piece each, alone and between words."""
    rows = pieces() + [b"x " + p + b" y" for p in pieces(1)]
    assert len(rows) > FEW_ROWS
    check(name, rows, max_len=256)


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_few_rows(name):
    """At most FEW_ROWS rows, so longer pieces would go to the warp sub-spans; these do not."""
    ps = pieces(2)
    rows = [b" 7 ".join(ps[k::FEW_ROWS])[:1024] for k in range(FEW_ROWS)]
    check(name, rows, max_len=1024)


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
def test_long_rows(name):
    """Rows of three tiles and more (the tile pipeline), many such pieces to a tile."""
    rng = random.Random(3)
    ps = pieces(3)
    rng.shuffle(ps)
    text = b" 7 ".join(ps)
    rows = [text[k * 3 * TILE : (k + 1) * 3 * TILE] for k in range(len(text) // (3 * TILE))] + [
        text[: 5 * TILE]
    ]
    rows = [r.decode("utf-8", errors="ignore").encode() for r in rows]
    check(name, rows, max_len=5 * TILE)
