"""Ragged input (flat bytes + offsets) gives exactly what padded input gives; flat ids out
(`Encoded.flat_numpy`) are exactly the padded ids' rows, back to back."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.ops import primitive
from blockbpe_jax.ops.primitive import Encoded
from blockbpe_jax.ops.ragged import encode_ragged, gather_rows, pack_ragged, unflatten

from helpers import load_tokenizer


@pytest.fixture(scope="module")
def tok(data_dir):
    return load_tokenizer("cl100k", "tiktoken")


def test_unflatten_equals_pack_strings():
    texts = ["abc", "", "ünï", "x" * 40]
    flat, offsets = pack_ragged(texts)
    data, lengths = unflatten(flat, offsets, 64)
    ref_data, ref_lengths = bb.pack_strings(texts, max_len=64)
    np.testing.assert_array_equal(np.asarray(data), ref_data)
    np.testing.assert_array_equal(np.asarray(lengths), ref_lengths)


def test_gather_rows_equals_padded_rows():
    """gather_rows (the corpus job's rows, gathered from a window's bytes on the device): any
    subset of the documents, in any order, repeated or empty, padded with zeros; rows whose
    slice of `width` bytes reaches into flat's padding included."""
    texts = [b"abc", b"", "ünï".encode(), b"x" * 40, b"tail"]
    flat, offsets = pack_ragged(texts)
    width, order = 64, [4, 0, 3, 1, 4, 2]
    padded = np.concatenate([flat, np.full(width, 7, np.uint8)])  # padding is never read as text
    starts, lengths = offsets[order], offsets[np.add(order, 1)] - offsets[order]
    rows = jax.jit(gather_rows, static_argnums=3)(padded, starts, lengths, width)
    want = np.array([list(texts[i].ljust(width, b"\0")) for i in order], np.uint8)
    np.testing.assert_array_equal(np.asarray(rows), want)
    assert np.asarray(gather_rows(padded, starts[:2], lengths[:2] * 0, 0)).shape == (2, 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(testing.mixed_text(), max_size=6))
def test_encode_ragged_equals_padded(tok, drawn):
    texts = drawn + ["tail"]  # at least one string
    flat, offsets = pack_ragged(texts)
    max_len = 1 << max(4, (max(len(t.encode()) for t in texts) - 1).bit_length())
    ragged = jax.jit(lambda f, o, t: encode_ragged(f, o, t, max_len=max_len, max_tokens=max_len))(
        flat, offsets, tok.tables()
    )
    padded = tok.encode_batch(texts, max_len=max_len)
    np.testing.assert_array_equal(np.asarray(ragged.ids), np.asarray(padded.ids))
    np.testing.assert_array_equal(np.asarray(ragged.counts), np.asarray(padded.counts))


def test_too_long_string_is_refused_not_cut(tok):
    flat, offsets = pack_ragged(["short", "x" * 100])
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"lengths\[1\] = 100 is outside \[0, 32\]"):
        encode_ragged(flat, offsets, tok, max_len=32, max_tokens=32).ids.block_until_ready()
    with pytest.raises(TypeError, match="offsets"):
        encode_ragged(flat, offsets.astype(np.int64), tok, max_len=32, max_tokens=8)


def test_pack_ragged_refuses_what_pack_strings_refuses():
    # An int would otherwise become that many zero bytes (bytes(3)).
    for bad in ([3], ["ok", None], [["a"]]):
        with pytest.raises(TypeError, match=r"pack_ragged: item \d is neither str nor bytes"):
            pack_ragged(bad)
        with pytest.raises(TypeError, match=r"pack_strings: item \d is neither str nor bytes"):
            bb.pack_strings(bad)


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
