"""Huge pieces on the GPU: one pre-tokenizer piece longer than a tile (2048 bytes unless the
build says otherwise) in a long row (ffi/cuda/huge_pieces.cuh, ffi/core/span_stitch.h).

Such a piece (a run of letters, CJK, emoji, whitespace, ...) is encoded as overlapping spans,
one per tile it covers, stitched at a token that neighbouring spans share; a boundary
without one sends the piece to the whole-piece merge. Every test encodes on the GPU and
compares, row by row and padding included, with the CPU executor (a heap merge of the whole
piece, no spans) and with tiktoken: every adversarial kind at lengths around the tile and
span boundaries and up to 3 MiB, on cl100k, o200k and r50k; pieces starting and ending at
every offset near tile boundaries; several huge pieces in one row; truncated rows; and the
fallback, forced through the CUDA handler's test hook (BLOCKBPE_STITCH_MARGIN: -1 fails every
stitch; small margins stitch some boundaries and not others). Runs across tile boundaries
(letters_runs) need the second round (a span encoded again from a tile earlier): with the
whole-piece merge turned off (BLOCKBPE_STITCH_FALLBACK=0 leaves such a piece out) they still
equal tiktoken, and without the second round too (BLOCKBPE_STITCH_SECOND=0) exactly those
whose first round fails by the CPU model of the spans do not. Spans are encoded in warp
sub-spans where they stitch, else by the block (BLOCKBPE_WARP_SPANS=0: always by the block).
Positions near tiles follow the build's tile size; the inputs do not. Skips where JAX sees no
GPU.
"""

from __future__ import annotations

import random

import pytest

from blockbpe_jax import testing

from helpers import benchmark_module, gpu_devices, load_tokenizer
from long_rows_shared import (
    TILE,
    assert_equals_tiktoken,
    assert_gpu_equals_cpu,
    cpu,
    cut,
    run,
    tiktoken_ids,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

MARGIN = 256  # kStitchMargin (ffi/core/span_stitch.h)


def mixed_letters(rng: random.Random, n: int) -> bytes:
    """One letter piece of several scripts (Latin, Cyrillic, Greek, CJK), about n bytes."""
    text = "".join(rng.choice("abcdefghijжщыΩλ中文日本語") for _ in range(n))
    return cut(text.encode(), 0, n)


KINDS = {**testing.ADVERSARIAL, "mixed": mixed_letters}
# Kinds that make one piece of the whole string in every vocabulary here (the others split
# into short pieces: digits, base64, apostrophes; they still run through the same kernels).
ONE_PIECE = ["letters_a_j", "one_letter", "spaces", "whitespace_newlines", "cjk", "emoji", "mixed"]


def piece(kind: str, n: int, seed: int = 0) -> bytes:
    return KINDS[kind](random.Random(f"{kind}/{n}/{seed}"), n)


# Lengths around a tile, two tiles, a tile plus a margin, and longer.
SIZES = [
    TILE + 1,
    TILE + 4,
    TILE + MARGIN,
    TILE + MARGIN + 1,
    2 * TILE - 1,
    2 * TILE,
    2 * TILE + 1,
    2 * TILE + 2 * MARGIN + 1,
    3 * TILE + 1,
    20000,
    65536,
]


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_single_pieces_of_many_lengths(name, kind):
    tok = load_tokenizer(name, "tiktoken")
    rows = [piece(kind, n) for n in SIZES]
    want = assert_gpu_equals_cpu(tok, rows, max_len=65536)
    assert_equals_tiktoken(name, rows, want)


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_spans_merged_by_their_whole_block(monkeypatch, name):
    """Spans are encoded in sub-spans, one warp each, where they can; with the CUDA handler's
    test hook BLOCKBPE_WARP_SPANS=0 every span is merged by its whole block instead. Both
    give the CPU's and tiktoken's ids."""
    tok = load_tokenizer(name, "tiktoken")
    rows = [piece(kind, n) for kind in sorted(KINDS) for n in (3 * TILE + 77, 20000)]
    for hook in ("1", "0"):
        monkeypatch.setenv("BLOCKBPE_WARP_SPANS", hook)
        want = assert_gpu_equals_cpu(tok, rows, max_len=20480, block_sizes=(256, 1024))
        assert_equals_tiktoken(name, rows, want)


@pytest.mark.parametrize("kind", ONE_PIECE)
def test_pieces_starting_and_ending_near_tile_boundaries(kind):
    """A huge piece after `boundary + d` digits (pieces of up to three bytes, so the huge one
    starts right there), for d from 40 before the first and second tile boundary to 40 after,
    its length chosen so that its end falls near a later boundary too."""
    rows = []
    for boundary in (TILE, 2 * TILE):
        for k, d in enumerate(range(-40, 41, 3)):
            end_offset = (-1) ** k * (k * 7 % 45)
            body = piece(kind, 2 * TILE - d + end_offset, seed=k)
            rows.append(b"7" * (boundary + d) + body + b"7" * 50)
    tok = load_tokenizer("o200k", "tiktoken")
    want = assert_gpu_equals_cpu(tok, rows, max_len=4 * TILE + 256)
    assert_equals_tiktoken("o200k", rows, want)


def several_huge_pieces() -> bytes:
    """Huge pieces of different kinds next to each other and to ordinary text, so that tiles
    hold the end of one and the start of the next."""
    parts = [
        b"The start. ",
        piece("letters_a_j", 9000),
        b" 123 ",
        piece("whitespace_newlines", 6000),
        b"x",
        piece("emoji", 5000),
        b" ",
        piece("cjk", 4500),
        b".\n",
        piece("spaces", 4200),
        b"y",
        piece("mixed", 13000),
        b" and the end.",
    ]
    return b"".join(parts)


def test_several_huge_pieces_in_one_row():
    row = several_huge_pieces()
    rows = [row, b"", cut(row, 0, 30000), b"x" * 10, row[1234:]]
    for name in ("cl100k", "o200k"):
        want = assert_gpu_equals_cpu(load_tokenizer(name, "tiktoken"), rows, max_len=65536)
        assert_equals_tiktoken(name, rows, want)


def test_truncated_rows_with_huge_pieces():
    """Counts over the capacity: the count is the full one, the ids the first max_tokens."""
    rows = [several_huge_pieces(), piece("letters_a_j", 30000), piece("cjk", 12000)]
    assert_gpu_equals_cpu(load_tokenizer("cl100k", "tiktoken"), rows, max_len=65536, max_tokens=2500)


@pytest.mark.parametrize(
    "kind", ["letters_a_j", "cjk", "whitespace_newlines", "one_letter", "emoji", "mixed"]
)
def test_mebibyte_pieces(kind):
    tok = load_tokenizer("cl100k", "tiktoken")
    rows = [piece(kind, 1 << 20), piece(kind, 3 << 20)]
    want = run(tok, rows, device=cpu(), max_len=3 << 20, max_tokens=3 << 20)
    assert_equals_tiktoken("cl100k", rows, want)
    for bs in (256, 1024):
        got = run(tok, rows, device=gpu_devices()[0], max_len=3 << 20, max_tokens=3 << 20, block_size=bs)
        assert got[1].tolist() == want[1].tolist(), bs
        assert (got[0] == want[0]).all(), bs


@pytest.mark.parametrize("margin", [-1, 0, 16])
def test_fallback_when_a_boundary_has_no_shared_token(monkeypatch, margin):
    """-1: no stitch, every huge piece is merged whole. Margins 0 and 16 (a span's start is
    still rounded down to the piece's start plus a multiple of 256, so they overlap by less
    than 256 + margin bytes): some boundaries stitch and others do not (runs of spaces need
    more), so one call holds both stitched and merged pieces."""
    monkeypatch.setenv("BLOCKBPE_STITCH_MARGIN", str(margin))
    rows = [
        piece(kind, n)
        for kind in ("letters_a_j", "spaces", "cjk", "whitespace_newlines")
        for n in (4097, 8193, 30000)
    ]
    rows.append(several_huge_pieces())
    tok = load_tokenizer("cl100k", "tiktoken")
    want = assert_gpu_equals_cpu(tok, rows, max_len=65536)
    assert_equals_tiktoken("cl100k", rows, want)


# The piece after `offset` digits (pieces of up to three bytes: the letters start right there).
RUNS_OFFSETS = (0, 1000, 4000, TILE - 3, TILE + 5)


def runs_max_len(n: int) -> int:
    return n + max(RUNS_OFFSETS) + TILE


def runs_rows(n: int) -> list[bytes]:
    return [
        b"7" * off + testing.letters_runs(random.Random(f"runs/{n}/{off}"), n, TILE) for off in RUNS_OFFSETS
    ]


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
@pytest.mark.parametrize("n", [1 << 16, 1 << 20])
def test_runs_across_tile_boundaries(name, n):
    tok = load_tokenizer(name, "tiktoken")
    rows = runs_rows(n)
    want = assert_gpu_equals_cpu(tok, rows, max_len=runs_max_len(n), block_sizes=(256, 1024))
    assert_equals_tiktoken(name, rows, want)


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
def test_second_round_stitches_what_the_first_cannot(monkeypatch, name):
    """Without the whole-piece merge a piece with an unstitched boundary puts out no tokens:
    with the second round every row still equals tiktoken; without it exactly the rows whose
    first round fails by the CPU model of the spans (benchmarks/span_stitch.py, the build's
    tile) lose their piece, and the others still equal tiktoken."""
    tok = load_tokenizer(name, "tiktoken")
    rows = runs_rows(1 << 16) + runs_rows(1 << 20)
    kw = {"device": gpu_devices()[0], "max_len": runs_max_len(1 << 20), "max_tokens": 1 << 20}
    monkeypatch.setenv("BLOCKBPE_STITCH_FALLBACK", "0")
    for bs in (256, 1024):
        assert_equals_tiktoken(name, rows, run(tok, rows, block_size=bs, **kw))
    # (benchmarks/span_stitch.py: the CPU model of ffi/core/span_stitch.h)
    model = benchmark_module("span_stitch")
    enc = model.piece_encoder(name)

    def first_round_fails(row: bytes) -> bool:
        piece = row.lstrip(b"7")  # (the digits before it are pieces of their own)
        offset = len(row) - len(piece)
        return model.stitch(enc, piece, MARGIN, offset=offset, align=MARGIN, tile_bytes=TILE)[0] is None

    failing = [k for k, row in enumerate(rows) if first_round_fails(row)]
    if not failing:
        pytest.skip(f"with {TILE}-byte tiles no row here fails the first round (CPU model)")
    monkeypatch.setenv("BLOCKBPE_STITCH_SECOND", "0")
    ids, counts = run(tok, rows, block_size=256, **kw)
    for k, row in enumerate(rows):
        want = tiktoken_ids(name, row)
        if k in failing:
            assert counts[k] < len(want), k
        else:
            assert counts[k] == len(want) and list(ids[k][: counts[k]]) == want, k
