"""`ops.encode_host`: the CPU handler called on NumPy arrays without XLA (the tiktoken-style
API's path on the CPU executor) gives the jitted primitive's ids and counts, and its checks."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import native, ops

from helpers import load_tokenizer
from strategies import unicode_text

pytestmark = pytest.mark.usefixtures("data_dir")
CPU = jax.devices("cpu")[0]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


def both(tok, texts, *, max_len=None, max_tokens=None, allowed="none", mode="exact", pad_id=0):
    data, lengths = bb.pack_strings(texts, max_len=max_len)
    T = max_tokens or data.shape[1]
    host = ops.encode_host(
        data, lengths, tok.tables(allowed, host=True), max_tokens=T, pad_id=pad_id, mode=mode
    )
    ref = ops.encode(
        jax.device_put(data, CPU), jax.device_put(lengths, CPU), tok.tables(allowed, CPU),
        max_tokens=T, pad_id=pad_id, mode=mode,
    )  # fmt: skip
    return host, (np.asarray(ref.ids), np.asarray(ref.counts))


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(unicode_text, min_size=1, max_size=6), mode=st.sampled_from(["exact", "bytes"]))
def test_equals_the_primitive(tok, texts, mode):
    (ids, counts), (want_ids, want_counts) = both(tok, texts, mode=mode)
    assert ids.dtype == np.int32 and counts.dtype == np.int32
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(counts, want_counts)


def test_specials_truncation_padding(tok):
    texts = ["a <|endoftext|> b", "x" * 300 + " many words " * 20, "", "héllo 🎉"]
    for kwargs in (dict(allowed="all"), dict(max_tokens=5, pad_id=-7), dict(max_len=1024, max_tokens=3)):
        (ids, counts), (want_ids, want_counts) = both(tok, texts, **kwargs)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(counts, want_counts)
    assert (counts > ids.shape[1]).any()  # truncation is flagged as by the primitive


def test_checks(tok):
    data, lengths = bb.pack_strings(["hello", "world"], max_len=16)
    tables = tok.tables("none", host=True)
    bad = lengths.copy()
    bad[1] = 17
    with pytest.raises(ValueError, match=r"lengths\[1\] = 17 is outside \[0, 16\]"):
        ops.encode_host(data, bad, tables, max_tokens=16)
    with pytest.raises(ValueError, match="pair_table must be int32"):
        broken = dataclasses.replace(tables, pair_table=np.zeros((3, 4), np.int32))
        ops.encode_host(data, lengths, broken, max_tokens=16)
    with pytest.raises(TypeError):  # no silent conversion of a wrong dtype
        ops.encode_host(data.astype(np.int32), lengths, tables, max_tokens=16)
    with pytest.raises(ValueError, match="max_tokens"):
        ops.encode_host(data, lengths, tables, max_tokens=0)
    with pytest.raises(ValueError, match="data must be uint8"):
        native.cpu.encode_host(data[0], lengths, *tables.operands(), 0, 0, 0, 0, 0, 0, 0, 0, 1, 16)


def test_tiktoken_api_uses_it_on_the_cpu(tok, monkeypatch):
    """The tiktoken-style API on the CPU executor encodes through encode_host (no XLA call),
    with the ids of encode_batch."""
    texts = ["Hello world", "ünïcödé 日本語", "x" * 5000]
    calls = []
    host = ops.encode_host
    monkeypatch.setattr(ops, "encode_host", lambda *a, **k: calls.append(1) or host(*a, **k))
    got = tok.as_tiktoken().encode_ordinary_batch(texts)
    assert calls
    ids, counts = tok.encode_batch(texts, device=CPU).numpy()
    assert got == [ids[i, : counts[i]].tolist() for i in range(len(texts))]


def test_threads_share_the_tables(tok):
    """encode_host releases the GIL: calls from several threads at once, on the same host
    tables, give each its own ids."""
    from concurrent.futures import ThreadPoolExecutor

    enc = tok.as_tiktoken()
    texts = [f"thread text {i}: " + "wörds and 日本語 " * (i % 23) for i in range(200)]
    want = [enc.encode_ordinary(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(enc.encode_ordinary, texts)) == want
