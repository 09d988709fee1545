"""The rows a piece kernel leaves pending (a piece longer than it merges that the piece table
lacks: here a run of 300 letters) are encoded by the block kernel's fill launch, which may be
scheduled before the piece kernel ends and waits for it (ffi/cuda/block_common.cuh,
launch_dependent). Checked against tiktoken: the pending rows first, last, alone or among
others, one row or several to a block (4 KiB and 512-byte rows), in calls on one stream that
alternate with calls that leave none pending. With BLOCKBPE_PIECE_FILL=0 (no fill) those rows
keep count -3: the rows the test calls pending are. GPU only."""

from __future__ import annotations

import random
import string

import numpy as np
import pytest

from blockbpe_jax import testing
from helpers import device_for, gpu_devices, load_tokenizer, tiktoken_enc

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]

PENDING = -3  # kCountPending (ffi/binding/encode_params.h)


def long_word(seed: int) -> str:
    rng = random.Random(seed)
    return "x " + "".join(rng.choice(string.ascii_lowercase) for _ in range(300)) + " y"


def encode(tok, rows, width):
    ids, counts = tok.encode_batch(rows, max_len=width, mode="exact", device=device_for("gpu"))
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[k, : counts[k]].tolist() if counts[k] >= 0 else counts[k] for k in range(len(rows))]


@pytest.mark.parametrize("batch, width", [(1, 512), (64, 512), (1024, 512), (40, 4096)])
def test_pending_rows_filled_from_the_device(data_dir, monkeypatch, batch, width):
    tok = load_tokenizer("cl100k", "tiktoken")
    enc = tiktoken_enc("cl100k", "exact")
    prose = testing.corpus_rows(data_dir, batch, width)
    layouts = {
        "none": {},
        "first": {0: 1},
        "last": {batch - 1: 2},
        "several": {k: k for k in range(0, batch, 7)},
    }
    calls = []
    for name in ("first", "none", "last", "none", "several", "first"):
        rows = list(prose)
        for k, seed in layouts[name].items():
            rows[k] = long_word(seed)
        calls.append((name, rows))
    monkeypatch.setenv("BLOCKBPE_PIECE_FILL", "0")
    for name, rows in calls[:3]:
        pending = [k for k, r in enumerate(encode(tok, rows, width)) if r == PENDING]
        assert pending == sorted(layouts[name]), name
    monkeypatch.delenv("BLOCKBPE_PIECE_FILL")
    for name, rows in calls:
        assert encode(tok, rows, width) == enc.encode_ordinary_batch(rows), name
