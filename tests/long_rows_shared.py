"""What the long-row GPU tests (test_long_rows.py, test_huge_pieces.py) share: one encode call
on a device, GPU (every block size) against the CPU executor, ids against tiktoken, and rows cut
from a corpus on character boundaries."""

from __future__ import annotations

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import native

from helpers import gpu_devices, tiktoken_enc

TILE = native.cpu.tile_bytes  # kTileBytes as built (CMake BLOCKBPE_TILE_BYTES; 2048 by default)
BLOCK_SIZES = (256, 512, 1024)


def cpu():
    return jax.devices("cpu")[0]


def run(
    tok_or_tables,
    rows: list[bytes],
    *,
    device,
    max_len: int,
    max_tokens: int,
    pad_id: int = -7,
    block_size: int = 256,
    allowed_special=None,
    check_lengths=True,
    lengths=None,
):
    data, lens = bb.pack_strings(rows, max_len=max_len)
    if lengths is not None:
        lens = np.asarray(lengths, np.int32)
    kwargs = {} if allowed_special is None else {"allowed_special": allowed_special}
    out = bb.encode(
        jax.device_put(data, device),
        jax.device_put(lens, device),
        tok_or_tables,
        max_tokens=max_tokens,
        pad_id=pad_id,
        block_size=block_size,
        check_lengths=check_lengths,
        **kwargs,
    )
    return np.asarray(out.ids), np.asarray(out.counts)


def assert_gpu_equals_cpu(
    tok,
    rows,
    *,
    max_len,
    max_tokens=None,
    block_sizes=BLOCK_SIZES,
    allowed_special=None,
    pad_id=-7,
    lengths=None,
    check_lengths=True,
):
    """GPU (every block size) == CPU executor, ids with padding and counts; returns the CPU's."""
    max_tokens = max_tokens or max_len
    want = run(
        tok,
        rows,
        device=cpu(),
        max_len=max_len,
        max_tokens=max_tokens,
        pad_id=pad_id,
        allowed_special=allowed_special,
        lengths=lengths,
        check_lengths=check_lengths,
    )
    for bs in block_sizes:
        got = run(
            tok,
            rows,
            device=gpu_devices()[0],
            max_len=max_len,
            max_tokens=max_tokens,
            pad_id=pad_id,
            block_size=bs,
            allowed_special=allowed_special,
            lengths=lengths,
            check_lengths=check_lengths,
        )
        for k in range(len(rows)):
            assert got[1][k] == want[1][k], (bs, k, len(rows[k]), got[1][k], want[1][k])
            diff = np.flatnonzero(got[0][k] != want[0][k])
            assert diff.size == 0, (bs, k, len(rows[k]), int(diff[0]))
    return want


def tiktoken_ids(name: str, text: bytes, allowed=()) -> list[int]:
    return tiktoken_enc(name, "exact").encode(
        text.decode("utf-8"), allowed_special=set(allowed), disallowed_special=()
    )


def assert_equals_tiktoken(name, rows, ids_counts, allowed=()):
    ids, counts = ids_counts
    for k, row in enumerate(rows):
        ref = tiktoken_ids(name, row, allowed)
        assert counts[k] == len(ref), (k, len(row), counts[k], len(ref))
        assert ids[k, : min(len(ref), ids.shape[1])].tolist() == ref[: ids.shape[1]], k


def cut(raw: bytes, start: int, n: int) -> bytes:
    """n bytes of raw from start (wrapping), shortened to end on a character boundary."""
    while len(raw) < start + n:
        raw = raw + raw
    s = raw[start : start + n]
    while s and (s[0] & 0xC0) == 0x80:
        s = s[1:]
    while s and s[-1] >= 0x80:
        s = s[:-1]
    return s
