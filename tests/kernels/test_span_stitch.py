"""The spans of huge pieces (ffi/core/span_stitch.h) on the CPU, through the model of
benchmarks/span_stitch.py: the geometry of stitch_span (row tiles of the built module's
kTileBytes, margin 256, starts aligned to the piece's start plus a multiple of 256) and the
first-shared-token stitch, with tiktoken encoding the spans. For every adversarial kind of
piece, at several offsets of the piece in its row, every boundary must find a shared token (no
piece of these kinds falls back to the whole-piece merge) and the stitched ids must equal
tiktoken's BPE of the whole piece; runs that start inside the piece must do so with the second
round (kReachBack). The GPU runs the same rule: tests/kernels/test_huge_pieces.py.
"""

from __future__ import annotations

import functools
import random

import pytest

from blockbpe_jax import native, testing

from helpers import benchmark_module, vocab_path

span_stitch = benchmark_module("span_stitch")

MARGIN = ALIGN = 256  # kStitchMargin, kStitchAlign
TILE = native.cpu.tile_bytes  # kTileBytes as built (CMake BLOCKBPE_TILE_BYTES)
REACH_BACK = TILE  # kReachBack
piece_encoder = functools.lru_cache(maxsize=None)(span_stitch.piece_encoder)


@pytest.mark.parametrize("vocab", ["cl100k", "o200k", "r50k"])
@pytest.mark.parametrize("kind", sorted(testing.ADVERSARIAL))
def test_adversarial_pieces_stitch_to_their_bpe(vocab, kind):
    vocab_path(vocab)
    enc = piece_encoder(vocab)
    piece = testing.ADVERSARIAL[kind](random.Random(kind), 20000)
    ref = enc._encode_bytes(piece)
    for offset in (0, 1, TILE - 1, TILE + 100):
        ids, failed_at, _, _ = span_stitch.stitch(enc, piece, MARGIN, offset, ALIGN, tile_bytes=TILE)
        assert failed_at is None, (offset, failed_at)
        assert ids == ref, offset


@pytest.mark.parametrize("vocab", ["cl100k", "o200k", "r50k"])
@pytest.mark.parametrize("kind", sorted(span_stitch.EXTRA_KINDS))
def test_runs_inside_pieces_stitch_with_the_second_round(vocab, kind):
    """Runs that start inside the piece and cross tile boundaries (the first round's residual
    cases): a stitch gives the piece's BPE; with the second round every boundary of
    letters_runs stitches (a run longer than a tile, run_in_piece, may have no phase to find:
    the GPU merges such a piece whole)."""
    vocab_path(vocab)
    enc = piece_encoder(vocab)
    piece = span_stitch.EXTRA_KINDS[kind](random.Random(kind), 20000)
    ref = enc._encode_bytes(piece)
    for offset in (0, 1000, TILE - 3, TILE + 5):
        ids, failed_at, _, _ = span_stitch.stitch(
            enc, piece, MARGIN, offset, ALIGN, REACH_BACK, tile_bytes=TILE
        )
        assert failed_at is None or kind == "run_in_piece", (offset, failed_at)
        assert ids is None or ids == ref, offset


def test_spans_cover_their_chunks_within_the_frame():
    """Each span holds its chunk, stays in the piece, starts at most margin + align - 1
    bytes before its chunk (kSpanLead) at the piece's start plus a multiple of the
    alignment, and the two spans of a tile (the end of one piece, the start of the next)
    do not overlap."""
    rng = random.Random(0)
    for _ in range(2000):
        lo = rng.randrange(0, 5 * TILE)
        hi = lo + TILE + 1 + rng.randrange(0, 4 * TILE)
        nxt = hi + TILE + 1 + rng.randrange(0, TILE)
        margin = rng.choice([0, 1, 16, MARGIN])
        for tile in range(lo // TILE, (hi - 1) // TILE + 1):
            a, b = span_stitch.stitch_span(lo, hi, tile, margin, ALIGN, TILE)
            chunk_lo, chunk_hi = max(lo, tile * TILE), min(hi, (tile + 1) * TILE)
            assert lo <= a <= chunk_lo < chunk_hi <= b <= hi
            assert chunk_lo - a < margin + ALIGN and (a - lo) % ALIGN == 0
            assert b - chunk_hi <= margin
            if tile == (hi - 1) // TILE and hi // TILE == tile:  # the next piece starts here
                assert b <= span_stitch.stitch_span(hi, nxt, tile, margin, ALIGN, TILE)[0]
