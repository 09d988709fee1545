"""Differential fuzzing of the GPU path against the CPU path, on the device (issue P5).

The CPU path is checked against tiktoken and HF tokenizers by test_fuzz_*.py; here every
hypothesis example is a batch of adversarial byte strings (random Unicode, long whitespace /
digit / apostrophe runs, invalid UTF-8, special tokens, empty rows, rows of exactly L bytes)
encoded on the GPU and on the CPU with the same vocabulary, mode, allowed specials, max_tokens,
pad_id and a random block size; ids and counts must be identical, padding included. Row widths
come from a few buckets (shared memory, and past 8192 bytes the global workspace) so that jit
compiles a handful of shapes. `BLOCKBPE_FUZZ_EXAMPLES=N` runs N examples per test (a long run).
Skips where JAX sees no GPU.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

from helpers import FORMATS, gpu_devices, load_tokenizer, specials_of
from strategies import fuzz, raw_bytes, runs_text, unicode_text

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

NAMES = ["r50k", "cl100k", "o200k", "llama3"]
WIDTHS = [64, 512, 4096, 9000]  # 9000 > kSmemMaxLen: the global-workspace path
ROWS = 8


def strings(specials):
    text = (unicode_text | runs_text).map(lambda s: s.encode("utf-8"))
    return st.lists(text | raw_bytes(specials) | st.just(b""), min_size=1, max_size=ROWS)


def fit(rows: list[bytes], width: int, filler: bytes) -> list[bytes]:
    """Rows cut to the width; one row (if any) padded with `filler` to exactly `width` bytes."""
    rows = [r[:width] for r in rows]
    if filler:
        k = len(rows) // 2
        rows[k] = (rows[k] + filler * width)[:width]
    return rows


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fmt", FORMATS)
@fuzz(40)
@given(data=st.data())
def test_gpu_equals_cpu(name, fmt, data):
    tok = load_tokenizer(name, fmt)
    specials = specials_of(name, fmt)[:8]
    width = data.draw(st.sampled_from(WIDTHS), label="width")
    rows = data.draw(strings(specials), label="rows")
    rows = fit(
        rows, width, data.draw(st.sampled_from([b"", b" ", b"a", b"1", b"'", b"\xf0"]), label="filler")
    )
    mode = data.draw(st.sampled_from(["exact", "bytes"]), label="mode")
    block_size = data.draw(st.sampled_from([256, 512, 1024]), label="block_size")
    allowed = data.draw(st.sampled_from(["none", "all"]), label="allowed")
    max_tokens = data.draw(st.sampled_from([1, 7, width]), label="max_tokens")
    pad_id = data.draw(st.integers(-(2**31), 2**31 - 1), label="pad_id")
    packed, lengths = bb.pack_strings(rows, max_len=width)
    out = {}
    for kind in ("cpu", "gpu"):
        dev = jax.devices(kind)[0]
        enc = bb.encode(
            jax.device_put(packed, dev),
            jax.device_put(lengths, dev),
            tok.tables(allowed_special=allowed, device=dev),
            max_tokens=max_tokens,
            mode=mode,
            pad_id=pad_id,
            block_size=block_size,
        )
        out[kind] = (np.asarray(enc.ids), np.asarray(enc.counts))
    for k in range(len(rows)):
        assert out["gpu"][1][k] == out["cpu"][1][k], (k, rows[k][:200], mode, block_size)
        assert np.array_equal(out["gpu"][0][k], out["cpu"][0][k]), (k, rows[k][:200], mode, block_size)
