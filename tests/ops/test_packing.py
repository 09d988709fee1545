"""On-device packing (`blockbpe_jax.pack`) against the plain-loop NumPy reference (issue P9).

* hypothesis over random batches: counts from -2 (invalid / not NFC) through 0 (empty) to
  past the width (rows cut by encode), documents longer than seq_len, more tokens than the rows
  hold; both methods, both overflow rules, no / one / two BOS and EOS ids; every output array
  and every report field compared exactly, jitted and eager;
* the reference itself checked against properties that do not come from either
  implementation (the stream of sequential rows is the documents back to back; first-fit rows
  hold exactly the documents' seq_len pieces when nothing drops);
* end to end: War and Peace excerpts encoded by `bb.encode` (cl100k, CPU) and packed; each
  document's ids come back from its segments;
* `segment_attention_mask` against loops.

`pack_stream` (first fit across batches, carry-over) is tested in test_packing_stream.py.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.ops.packing import PackReport, pack, pack_reference, segment_attention_mask

from helpers import load_tokenizer, packed_segments
from strategies import fuzz

CPU = jax.devices("cpu")[0]
SPECIAL = [None, 900, (901, 902)]  # no id, one id, a sequence of ids (disjoint from the ids)


@st.composite
def batches(draw, max_batches: int = 1):
    """(options, [(ids int32[B, T], counts int32[B]), ...]): 1..max_batches batches of one shape,
    the shapes and options from small sets (one compile per example, a few checks per compile)."""
    B = draw(st.sampled_from([1, 3, 7]))
    T = draw(st.sampled_from([0, 1, 6, 13]))
    opts = dict(
        seq_len=draw(st.sampled_from([1, 4, 8])),
        rows=draw(st.sampled_from([1, 3, 6])),
        bos_id=draw(st.sampled_from(SPECIAL)),
        eos_id=draw(st.sampled_from(SPECIAL)),
        method=draw(st.sampled_from(["first_fit", "sequential"])),
        overflow=draw(st.sampled_from(["drop", "stop"])),
        pad_id=draw(st.sampled_from([0, -7])),
    )
    out = []
    for _ in range(draw(st.integers(1, max_batches))):
        ids = draw(st.lists(st.integers(1, 800), min_size=B * T, max_size=B * T))
        counts = draw(
            st.lists(
                st.one_of(st.integers(-2, -1), st.just(0), st.integers(0, T + 4), st.just(T)),
                min_size=B,
                max_size=B,
            )
        )
        out.append((np.asarray(ids, np.int32).reshape(B, T), np.asarray(counts, np.int32)))
    return opts, out


_jitted = jax.jit(
    pack, static_argnames=("seq_len", "rows", "bos_id", "eos_id", "method", "overflow", "pad_id")
)


def _events(ids, counts, opts):
    """Hypothesis statistics (--hypothesis-show-statistics): which cases the examples reach."""
    report = pack_reference(ids, counts, **opts)[3]
    for name, hit in [
        ("tokens dropped by packing", report["tokens_dropped"] > report["tokens_truncated"]),
        ("row cut by encode", report["tokens_truncated"] > 0),
        ("invalid row", report["documents_invalid"] > 0),
        (
            "document longer than seq_len",
            any(
                d and len(d) > opts["seq_len"]
                for d in _documents(ids, counts, opts.get("bos_id"), opts.get("eos_id"))
            ),
        ),
        ("empty document", (counts == 0).any() and not opts.get("bos_id") and not opts.get("eos_id")),
        ("all rows used", report["rows_used"] == opts["rows"]),
    ]:
        if hit:
            event(f"{opts['method']}: {name}")


def _assert_same(got, ids, counts, opts):
    tokens, segment_ids, positions, report = pack_reference(ids, counts, **opts)
    np.testing.assert_array_equal(np.asarray(got.tokens), tokens, err_msg="tokens")
    np.testing.assert_array_equal(np.asarray(got.segment_ids), segment_ids, err_msg="segment_ids")
    np.testing.assert_array_equal(np.asarray(got.positions), positions, err_msg="positions")
    for field in PackReport._fields:
        np.testing.assert_array_equal(np.asarray(getattr(got.report, field)), report[field], err_msg=field)
    for x in (got.tokens, got.segment_ids, got.positions, *got.report):
        assert x.dtype == jnp.int32


@fuzz(70)
@given(batches(max_batches=4))
def test_pack_matches_reference_jit(case):
    opts, data = case
    for ids, counts in data:
        _events(ids, counts, opts)
        _assert_same(
            _jitted(jax.device_put(ids, CPU), jax.device_put(counts, CPU), **opts), ids, counts, opts
        )


@fuzz(150)
@given(
    st.sampled_from([("first_fit", "drop"), ("first_fit", "stop"), ("sequential", "drop")]),
    st.sampled_from([None, 900]),
    st.lists(st.integers(-1, 13), min_size=7, max_size=7),
    st.integers(0, 2**31 - 1),
)
def test_one_shape_many_batches(method_overflow, eos_id, counts, seed):
    """One shape, many batches (few compiles): empty documents between others, a piece that
    fits no row followed by ones that fit somewhere (first fit: "stop" vs "drop")."""
    ids = np.random.default_rng(seed).integers(1, 800, (7, 13)).astype(np.int32)
    counts = np.asarray(counts, np.int32)
    method, overflow = method_overflow
    opts = dict(seq_len=8, rows=3, bos_id=None, eos_id=eos_id, method=method, overflow=overflow, pad_id=0)
    _events(ids, counts, opts)
    _assert_same(_jitted(ids, counts, **opts), ids, counts, opts)


@fuzz(12)
@given(batches())
def test_pack_matches_reference_eager(case):
    opts, [(ids, counts)] = case
    _assert_same(pack(bb.Encoded(jnp.asarray(ids), jnp.asarray(counts)), **opts), ids, counts, opts)


def _documents(ids, counts, bos_id, eos_id):
    as_list = lambda x: [] if x is None else [x] if isinstance(x, int) else list(x)
    return [
        None if c < 0 else as_list(bos_id) + ids[b, : min(c, ids.shape[1])].tolist() + as_list(eos_id)
        for b, c in enumerate(counts)
    ]


@fuzz(150)
@given(batches())
def test_reference_properties(case):
    """The reference against rules stated independently of both implementations."""
    opts, [(ids, counts)] = case
    tokens, segment_ids, positions, report = pack_reference(ids, counts, **opts)
    S, R = opts["seq_len"], opts["rows"]
    docs = _documents(ids, counts, opts["bos_id"], opts["eos_id"])
    rows = packed_segments(tokens, segment_ids, positions)
    assert (tokens[segment_ids == 0] == opts["pad_id"]).all()
    stream = [t for d in docs if d for t in d]
    if opts["method"] == "sequential":
        flat = [t for row in rows for piece in row for t in piece]
        assert flat == stream[: R * S]
        assert all(sum(map(len, row)) == S for row in rows[: len(stream) // S])
    else:
        pieces = collections.Counter(tuple(d[k : k + S]) for d in docs if d for k in range(0, len(d), S))
        got = collections.Counter(tuple(p) for row in rows for p in row)
        assert not got - pieces  # every segment is one of the pieces
        if report["tokens_dropped"] == report["tokens_truncated"]:
            assert got == pieces  # nothing dropped: all of them
    truncated = sum(max(int(c) - ids.shape[1], 0) for c in counts if c >= 0)
    assert report["tokens_truncated"] == truncated
    assert report["tokens_packed"] == int((segment_ids > 0).sum())
    assert report["tokens_packed"] + report["tokens_dropped"] == len(stream) + truncated
    assert report["documents_invalid"] == sum(d is None for d in docs)


def test_no_documents_and_zero_width():
    for B, T in [(0, 5), (3, 0), (0, 0)]:
        ids, counts = np.zeros((B, T), np.int32), np.full(B, 2, np.int32)
        for method in ("first_fit", "sequential"):
            opts = dict(seq_len=4, rows=2, bos_id=5, method=method)
            _assert_same(pack(ids, counts, **opts), ids, counts, opts)


def test_arguments_checked():
    ids, counts = np.zeros((2, 3), np.int32), np.zeros(2, np.int32)
    for bad in (
        dict(seq_len=0, rows=1),
        dict(seq_len=4, rows=0),
        dict(seq_len=4, rows=1, method="best_fit"),
        dict(seq_len=4, rows=1, overflow="x"),
    ):
        with pytest.raises(ValueError):
            pack(ids, counts, **bad)
    with pytest.raises(TypeError):
        pack(ids, None, seq_len=4, rows=1)
    with pytest.raises(TypeError):
        pack(ids, counts[:1], seq_len=4, rows=1)


@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=3), st.booleans())
@fuzz(30)
def test_segment_attention_mask(segment_ids, causal):
    seg = np.asarray(segment_ids, np.int32)
    got = np.asarray(segment_attention_mask(jnp.asarray(seg), causal=causal))
    want = np.zeros(seg.shape + (seg.shape[1],), bool)
    for r in range(seg.shape[0]):
        for i in range(seg.shape[1]):
            for j in range(seg.shape[1]):
                want[r, i, j] = seg[r, i] == seg[r, j] != 0 and (j <= i or not causal)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", ["first_fit", "sequential"])
def test_encode_then_pack_round_trip(method, data_dir):
    """Real encode output (cl100k, CPU): documents of 0 to ~700 tokens, one cut by encode."""
    tok = load_tokenizer("cl100k", "tiktoken")
    raw = (testing.data_dir() / "corpus" / "war_and_peace_en.txt").read_bytes()
    rng = np.random.default_rng(7)
    sizes = [0, 1, 5, 3000, 40, 700, 1200, 9, 2500, 64, 333, 3500, 17, 800, 2, 1500]
    texts = []
    for n in sizes:
        start = int(rng.integers(0, len(raw) - n - 8))
        while raw[start] & 0xC0 == 0x80:  # start on a character boundary
            start += 1
        texts.append(raw[start : start + n].decode("utf-8", "ignore").encode())
    data, lengths = bb.pack_strings(texts, max_len=4096)
    T, S, bos, eos = 640, 256, 100257, 100276  # <|endoftext|>, <|endofprompt|>
    enc = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=T))(
        jax.device_put(data, CPU), jax.device_put(lengths, CPU), tok.tables()
    )
    ids, counts = np.asarray(enc.ids), np.asarray(enc.counts)
    assert (counts > T).any() and (counts == 0).any() and (counts > S).any()
    packed = _jitted(enc, seq_len=S, rows=40, bos_id=bos, eos_id=eos, method=method)
    _assert_same(packed, ids, counts, dict(seq_len=S, rows=40, bos_id=bos, eos_id=eos, method=method))
    rep = packed.report
    assert int(rep.tokens_dropped) == int(rep.tokens_truncated) == int((counts - T).clip(0).sum())
    # Every document's ids from its segments. Sequential: the segments in row order, a
    # document from the one starting with BOS to the one ending with EOS. First fit: segments
    # are placed out of order, so the check is on the multiset: the segments are exactly the
    # seq_len pieces of the documents BOS + ids + EOS (and nothing else; nothing dropped).
    rows = packed_segments(
        np.asarray(packed.tokens), np.asarray(packed.segment_ids), np.asarray(packed.positions)
    )
    pieces = [p for row in rows for p in row]
    expected = [ids[b, : min(c, T)].tolist() for b, c in enumerate(counts)]
    if method == "sequential":
        docs, current = [], None
        for piece in pieces:
            current = piece if current is None else current + piece
            if piece[-1] == eos:
                docs.append(current)
                current = None
        assert current is None and all(d[0] == bos for d in docs)
        assert [d[1:-1] for d in docs] == expected
    else:
        want = collections.Counter(
            tuple(d[k : k + S]) for d in _documents(ids, counts, bos, eos) for k in range(0, len(d), S)
        )
        assert collections.Counter(map(tuple, pieces)) == want
