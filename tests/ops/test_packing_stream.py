"""`pack_stream` (first fit across batches, carry-over, issue P9): batch for batch equal to
grain's own `FirstFitPackIterDataset` on random document streams fed in random chunks; every
token of every document written exactly once across the batches (documents longer than seq_len
too), and what does not fit a small carry reported as lost, never silently. `pack` itself is
tested in test_packing.py.
"""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from blockbpe_jax.ops.packing_stream import CarryReport, empty_carry, pack_stream

from strategies import fuzz
from helpers import packed_segments  # each row's segments as lists of ids, layout checked


_stream = jax.jit(pack_stream, static_argnames=("seq_len", "rows", "window", "pad_id"))


def _marked_documents(lengths):
    """Document i's token j is 1000 * (i + 1) + j: every written token says where it is from."""
    return [np.arange(n, dtype=np.int32) + 1000 * (i + 1) for i, n in enumerate(lengths)]


def _run_stream(docs, chunks, *, seq_len, rows, window, capacity, width, slots):
    """Feeds `docs` to pack_stream, chunks[k] new documents in call k (padded to `slots` rows;
    then empty calls until the carry is empty). Returns the batches (NumPy) and the reports."""
    carry = empty_carry(capacity, width)
    out, i, k = [], 0, 0
    while True:
        n = min(chunks[k % len(chunks)], len(docs) - i)
        ids, counts = np.zeros((slots, width), np.int32), np.zeros(slots, np.int32)
        for j, d in enumerate(docs[i : i + n]):
            ids[j, : len(d)], counts[j] = d, len(d)
        i, k = i + n, k + 1
        packed, carry, rep = _stream(carry, ids, counts, seq_len=seq_len, rows=rows, window=window)
        out.append(
            (
                np.asarray(packed.tokens),
                np.asarray(packed.segment_ids),
                np.asarray(packed.positions),
                jax.tree.map(np.asarray, rep),
            )
        )
        if i == len(docs) and not np.asarray(carry.counts).any():
            return out


@fuzz(40)
@given(
    st.sampled_from([(4, 1), (8, 3), (8, 6)]),
    st.lists(st.integers(1, 8), min_size=1, max_size=60),
    st.lists(st.integers(1, 9), min_size=1, max_size=5),
    st.sampled_from([3, 7, 49]),
)
def test_pack_stream_equals_grain_first_fit(shape, lengths, chunks, window):
    """grain's FirstFitPackIterDataset over the whole stream vs pack_stream fed it in chunks:
    the same rows, batch for batch, while every batch ends full; the batch that takes the last
    documents is grain's last (partial) batch. A batch that ends early (its window fitted
    whole before the stream's end: a batch grain would have kept filling) ends the comparison.
    Documents of at most seq_len tokens (grain refuses longer elements)."""
    grain = pytest.importorskip("grain")
    seq_len, rows = shape
    docs = _marked_documents([min(n, seq_len) for n in lengths])
    ds = grain.MapDataset.source([{"tokens": d} for d in docs]).to_iter_dataset()
    ds = grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={"tokens": seq_len}, num_packing_bins=rows, shuffle_bins=False
    )
    want = list(ds)
    ours = _run_stream(
        docs, chunks, seq_len=seq_len, rows=rows, window=window, capacity=len(docs), width=seq_len, slots=9
    )
    got = []
    for k, (tokens, seg, pos, rep) in enumerate(ours):
        assert rep.documents_lost == 0 and rep.tokens_lost == 0
        used = seg.any(axis=1)
        if not rep.batch_full and k < len(ours) - 1:
            event("a batch ended early")
            want = want[: len(got)]
            break
        assert used.all() or not used[used.argmin() :].any()  # grain drops trailing empty rows
        got += [
            dict(tokens=tokens[r], tokens_segment_ids=seg[r], tokens_positions=pos[r])
            for r in np.flatnonzero(used)
        ]
    else:
        event("the same stream to the end")
        assert not ours[-1][3].batch_full
    assert len(got) == len(want)
    for r, (g, w) in enumerate(zip(got, want)):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=f"row {r} {key}")


@fuzz(40)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=40),
    st.lists(st.integers(0, 7), min_size=1, max_size=4).filter(any),
    st.sampled_from([1, 5, 12]),
    st.sampled_from([0, 3, 64]),
    st.sampled_from([1, 4]),
)
def test_pack_stream_writes_every_token_once(lengths, chunks, window, capacity, rows):
    """Documents up to 3.75 rows long, random chunks, windows and carry capacities: each
    document's tokens are written at most once each, pieces in order with positions restarting,
    and together with the tokens reported lost, every token exactly once."""
    seq_len, width = 8, 30
    docs = _marked_documents(lengths)
    out = _run_stream(
        docs, chunks, seq_len=seq_len, rows=rows, window=window, capacity=capacity, width=width, slots=7
    )
    seen = collections.Counter()
    lost = 0
    for tokens, seg, pos, rep in out:
        for row in packed_segments(tokens, seg, pos):
            for piece in row:
                assert piece == list(range(piece[0], piece[0] + len(piece)))  # a run of one doc
                assert (piece[0] % 1000) % seq_len == 0  # pieces start at seq_len boundaries
                seen.update(piece)
        lost += int(rep.tokens_lost)
        assert isinstance(rep, CarryReport)
    assert max(seen.values(), default=1) == 1
    everything = {int(t) for d in docs for t in d}
    assert set(seen) <= everything
    assert len(everything) - len(seen) == lost
    if capacity == 64:
        assert lost == 0 and set(seen) == everything
    if lost:
        event("documents lost to a small carry")


def test_pack_stream_arguments_checked():
    ids, counts = np.zeros((2, 5), np.int32), np.ones(2, np.int32)
    carry = empty_carry(4, 5)
    with pytest.raises(ValueError, match=r"pack_stream: window must be a positive int, got 0"):
        pack_stream(carry, ids, counts, seq_len=4, rows=1, window=0)
    with pytest.raises(
        ValueError,
        match=r"pack_stream: the ids are 5 wide and the carry 6; "
        r"make the carry with empty_carry\(capacity, width=5\)",
    ):
        pack_stream(empty_carry(4, 6), ids, counts, seq_len=4, rows=1, window=2)
    with pytest.raises(TypeError, match="pack_stream: counts are required with bare ids"):
        pack_stream(carry, ids, seq_len=4, rows=1, window=2)
    with pytest.raises(ValueError, match=r"empty_carry: width must be a positive int, got 0"):
        empty_carry(4, 0)
    with pytest.raises(ValueError, match=r"empty_carry: capacity must be an int >= 0, got -1"):
        empty_carry(-1, 3)
    # Invalid rows (negative counts) are skipped and counted; empty ones just skipped.
    _, carry, rep = pack_stream(carry, ids, np.array([-1, 0]), seq_len=4, rows=1, window=2)
    assert int(rep.documents_invalid) == 1 and not bool(rep.batch_full)
    assert int(rep.documents_carried) == 0 and not np.asarray(carry.counts).any()
