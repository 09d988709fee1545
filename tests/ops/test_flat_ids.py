"""Flat ids out (`Encoded.flat_numpy`, ops/flat_ids.py): exactly the padded ids' rows, back to
back, whether compacted on the device or on the host."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax.ops import primitive
from blockbpe_jax.ops.primitive import Encoded

from helpers import load_tokenizer


@pytest.fixture(scope="module")
def tok(data_dir):
    return load_tokenizer("cl100k", "tiktoken")


def rows_back_to_back(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row b's first clip(counts[b], 0, T) ids, row after row (NumPy, one row at a time)."""
    width = ids.shape[1]
    return np.concatenate([ids[b, : max(0, min(int(c), width))] for b, c in enumerate(counts)] + [ids[:0, 0]])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    shape=st.tuples(st.integers(1, 9), st.integers(1, 12)),
    seed=st.integers(0, 2**32 - 1),
    on_device=st.booleans(),
    compacted_there=st.booleans(),
)
def test_flat_numpy_is_the_rows_back_to_back(shape, seed, on_device, compacted_there, monkeypatch):
    """Any counts (failed rows' -1 and -2: none of their ids; truncated rows' over T: T ids;
    empty rows; all rows empty), on the device (compacted there by flat_ids, or copied whole
    and compacted on the host, by size) or host arrays: the flat ids are each row's, in order,
    and the counts come back as they are."""
    monkeypatch.setattr(primitive, "FLAT_ON_DEVICE_BYTES", 0 if compacted_there else 1 << 30)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 200_000, shape).astype(np.int32)
    counts = rng.integers(-2, shape[1] + 3, shape[0]).astype(np.int32)
    if seed % 7 == 0:
        counts[:] = rng.integers(-2, 1, shape[0])  # (nothing to copy back)
    enc = Encoded(jax.numpy.asarray(ids), jax.numpy.asarray(counts)) if on_device else Encoded(ids, counts)
    flat, got = enc.flat_numpy()
    assert flat.dtype == np.int32 and np.array_equal(flat, rows_back_to_back(ids, counts))
    assert np.array_equal(got, counts)


def test_flat_numpy_of_an_encode(tok):
    """Tokenizer.encode_batch's rows flat: what numpy() gives, cut at the counts (and the
    batch's shape checked: a vmapped result's extra dimensions are refused by name)."""
    texts = ["hello world", "", "ünïcödé " * 30, "x" * 300]
    enc = tok.encode_batch(texts, max_len=512, max_tokens=64)
    ids, counts = enc.numpy()
    flat, got = enc.flat_numpy()
    assert np.array_equal(got, counts) and counts.max() > 64  # (one row truncated)
    assert np.array_equal(flat, rows_back_to_back(ids, counts))
    with pytest.raises(ValueError, match=r"flat_numpy: ids must be \[B, T\]"):
        Encoded(enc.ids[None], enc.counts[None]).flat_numpy()
