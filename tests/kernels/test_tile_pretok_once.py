"""The rule of the tile pipeline's one-pass pre-tokenizer (tile_pretokenize_once,
ffi/cuda/tile_pipeline.cuh), on the host model in tests/cpp/pretok_shim.cc: a tile whose edge
states settle within the margin chunks either side (edge_state) gets exactly the flags of the
sequential pre-tokenizer; one that does not is left to the three passes. Corpus rows (most tiles
settle) and adversarial ones (runs longer than the margin across tile edges: some do not),
for the chunk sizes of 256- and 1024-thread blocks. On the GPU: calls that settle and calls
that do not, in turn, against the CPU executor and tiktoken.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from blockbpe_jax import testing

from helpers import gpu_devices, load_tokenizer
from long_rows_shared import assert_equals_tiktoken, assert_gpu_equals_cpu
from pretok_shim import PATTERN_IDS, PATTERNS

TILE = 2048
MARGIN = 64


def corpus_rows(root, n: int = 12, width: int = 8 * TILE) -> list[bytes]:
    rows = []
    for path in testing.corpus_paths(root):
        raw = testing.read_corpus(path)
        rng = random.Random(path.name)
        rows += [raw[(at := rng.randrange(max(1, len(raw) - width))) : at + width] for _ in range(n)]
    return rows


def adversarial_rows() -> list[bytes]:
    rng = random.Random(5)
    rows = []
    for kind in sorted(testing.ADVERSARIAL):
        make = testing.ADVERSARIAL[kind]
        text = b"".join(b"word " + make(rng, rng.randint(1, 300)) for _ in range(200))
        rows.append(text[: 6 * TILE])
    rows.append((b"x" + b" " * (TILE - 1)) * 4 + b"y")  # runs ending on tile edges
    rows.append(b" " * (TILE + 10) + b"z\n\n" + b"\n" * 200 + b"end")
    # a whitespace run across a tile's end whose last newline lies past the margin: where the
    # tile's pieces split depends on it (`\s*[\r\n]` takes the run up to its last newline)
    rows += [b"x" * (TILE - 48) + b"\n" + b" " * k + b"\n" + b"b" for k in (100, 200, 1000)]
    return rows


def check(shim, pattern, rows, items):
    settled_tiles = tiles = 0
    for row in rows:
        want = shim.flags(pattern, row)
        got, settled = shim.tiles_once(pattern, row, TILE, items, MARGIN)
        for t in np.flatnonzero(settled):
            lo, hi = t * TILE, min(len(row), (t + 1) * TILE)
            assert np.array_equal(got[lo:hi], want[lo:hi]), (pattern, items, t, row[lo : lo + 40])
        settled_tiles += int(settled.sum())
        tiles += len(settled)
    return settled_tiles, tiles


@pytest.mark.parametrize("items", [8, 2])
@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_settled_tiles_equal_the_sequential_flags(shim, data_dir, pattern, items):
    rows = corpus_rows(data_dir)
    if not rows:
        pytest.skip("no shared corpus (set BLOCKBPE_DATA)")
    settled, tiles = check(shim, pattern, rows, items)
    assert settled >= 0.9 * tiles, (settled, tiles)  # (real text settles: the one pass is the rule)
    check(shim, pattern, adversarial_rows(), items)


def unsettled_rows() -> list[bytes]:
    """Rows a tile of which does not settle within the margins: a whitespace run across the
    first tile's end whose last newline lies past the margin."""
    return [b"x" * (TILE - 48) + b"\n" + b" " * k + b"\n" + b"b" + b" tail" * 300 for k in (200, 400, 1000)]


GPU_VOCABS = ["cl100k", "o200k"]


def settling_rows(root) -> list[bytes]:
    return corpus_rows(root, 2, 3 * TILE)


@pytest.mark.parametrize("name", GPU_VOCABS)
def test_the_gpu_tests_rows_settle_as_named(shim, data_dir, name):
    """The next test's rows, on the host model: every tile of settling_rows settles, and a tile
    of each of unsettled_rows does not, at the chunk sizes of 256- and 1024-thread blocks (so
    that test runs both paths)."""
    if not settling_rows(data_dir):
        pytest.skip("no shared corpus (set BLOCKBPE_DATA)")
    pattern = next(pid for pid, (n, _) in PATTERNS.items() if n == name)
    for items in (8, 2):
        assert all(
            shim.tiles_once(pattern, row, TILE, items, MARGIN)[1].all() for row in settling_rows(data_dir)
        )
        assert not any(
            shim.tiles_once(pattern, row, TILE, items, MARGIN)[1].all() for row in unsettled_rows()
        )


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("name", GPU_VOCABS)
def test_gpu_calls_that_settle_and_calls_that_do_not(data_dir, name):
    """On the GPU, in one process and in turn: calls whose tiles all settle (the one pass alone),
    calls with a tile that does not (the three passes run for the call), and one mixing both:
    ids equal the CPU executor's and tiktoken's."""
    settle = settling_rows(data_dir)
    if not settle:
        pytest.skip("no shared corpus (set BLOCKBPE_DATA)")
    tok = load_tokenizer(name, "tiktoken")
    for rows in (settle, unsettled_rows(), settle, settle[:3] + unsettled_rows()[:1] + settle[3:6]):
        want = assert_gpu_equals_cpu(tok, rows, max_len=4 * TILE, block_sizes=(256, 1024))
        assert_equals_tiktoken(name, rows, want)
