"""Ragged input (flat bytes + offsets) gives exactly what padded input gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
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
