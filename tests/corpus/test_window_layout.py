"""The corpus job's per-document arithmetic (ffi/core/window_layout.h, used by corpus/engine.py)
against the same rules written in NumPy: a window's layout when planned (the document table,
where each document's ids and count go, its packed row) and when finished (the counts in plan
order, the compaction into input order), on random plans with packed and unpacked calls; and
bad plans refused with a ValueError."""

from __future__ import annotations

import numpy as np
import pytest

from blockbpe_jax import native
from blockbpe_jax.corpus.device import pow2
from blockbpe_jax.corpus.plan import first_pass_tokens, packed_calls, plan_batches

SEP, WIDTH = b"<|sep|>", 64


def random_plan(rng, n_docs: int):
    """A window of n_docs random documents planned as plan_window does (packed calls first)."""
    lengths = rng.choice([0, 1, 5, 20, 50, 100, 300], n_docs).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    out = np.empty(data.size + n_docs * len(SEP), np.uint8)
    row_of_doc, packed_rows = native.cpu.pack_documents(data, offsets, SEP, WIDTH, out)
    doc_start = offsets[:-1] + np.arange(n_docs) * len(SEP)
    calls, docs, laid, end, entries = [], [], [], 0, 0
    for d, first_row, n_rows in packed_calls(row_of_doc, len(packed_rows), 4):
        slots = pow2(len(d))  # (as plan_window)
        calls.append((WIDTH, WIDTH, 4, end, entries))  # (width, T, rows, offset, entry)
        docs.append(d)
        laid.append((first_row, n_rows))
        end, entries = end + 4 * WIDTH + slots, entries + 4
    alone = np.flatnonzero(row_of_doc < 0)
    for width, idx in plan_batches(lengths[alone], 1024, None, None):
        T, rows = first_pass_tokens(width), len(idx) + int(rng.integers(0, 3))
        calls.append((width, T, rows, end, entries))
        docs.append(alone[idx])
        laid.append((-1, len(idx)))
        end, entries = end + rows * (T + 1), entries + rows
    return lengths, doc_start, row_of_doc, packed_rows, calls, docs, laid, entries


def numpy_layout(lengths, doc_start, row_of_doc, packed_rows, calls, docs, laid, table_cap, slots):
    sizes = [len(d) for d in docs]
    perm = np.concatenate(docs).astype(np.int64)
    row = np.arange(len(perm)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    table = np.zeros((2, table_cap), np.int32)
    for (_, _, _, _, entry), d, (first_row, n_rows) in zip(calls, docs, laid):
        rows = (
            packed_rows[first_row : first_row + n_rows].T
            if first_row >= 0
            else np.stack([doc_start[d], lengths[d]])
        )
        table[:, entry : entry + rows.shape[1]] = rows
    kept = np.repeat([c[1] for c in calls], sizes)
    base = np.repeat([c[3] for c in calls], sizes)
    src = base + row * kept
    count_at = base + np.repeat([c[2] * c[1] for c in calls], sizes) + row
    n_packed = sum(s for s, (f, _) in zip(sizes, laid) if f >= 0)
    r = row_of_doc[perm[:n_packed]] if n_packed else np.zeros(0, np.int64)
    first_row = np.repeat([f for f, _ in laid if f >= 0], sizes[: sum(f >= 0 for f, _ in laid)])
    first_in_row = np.concatenate([[True], r[1:] != r[:-1]])[:n_packed]
    row_base = base[:n_packed] + (r - first_row) * WIDTH
    positions = np.zeros(slots, np.int32)
    positions[perm] = count_at
    return perm, table, kept, src, count_at, np.stack([row_base, first_in_row]).astype(np.int64), positions


def native_layout(lengths, doc_start, row_of_doc, packed_rows, calls, docs, laid, table_cap, slots):
    perm = np.concatenate(docs).astype(np.int64)
    laid_calls = np.array(
        [(len(d), c[1], c[2], c[3], c[4], *x) for c, d, x in zip(calls, docs, laid)], np.int64
    )
    table = np.zeros((2, table_cap), np.int32)
    positions = np.zeros(slots, np.int32)
    per_doc = np.empty((3, len(perm)), np.int64)
    n_packed = sum(len(d) for d, (f, _) in zip(docs, laid) if f >= 0)
    packed = np.empty((2, n_packed), np.int64)
    native.cpu.layout_window(
        perm,
        laid_calls,
        doc_start,
        lengths,
        packed_rows,
        row_of_doc,
        WIDTH,
        table,
        positions,
        per_doc,
        packed,
    )
    return perm, table, *per_doc, packed, positions


@pytest.mark.parametrize("seed", range(12))
def test_layout_and_compaction_equal_numpy(seed):
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(1, 300))
    plan = random_plan(rng, n_docs)
    lengths, _, row_of_doc, _, calls, docs, laid, entries = plan
    cap, slots = entries + 3, n_docs + 5
    want = numpy_layout(*plan[:7], cap, slots)
    got = native_layout(*plan[:7], cap, slots)
    for name, a, b in zip(("perm", "table", "kept", "src", "count_at", "packed", "positions"), want, got):
        np.testing.assert_array_equal(a, b, err_msg=name)
    perm, _, kept, src, _, packed, positions = got

    # counts read back by document: a packed one's is its separator's position in its row
    counts = np.zeros(slots, np.int32)
    widths = np.repeat([c[0] for c in calls], [len(d) for d in docs])
    end = 0
    for k, doc in enumerate(perm):
        if k < packed.shape[1]:
            start = packed[0, k] if packed[1, k] else end + 1
            end = start + int(rng.integers(0, 6))
            counts[doc] = end
        else:
            counts[doc] = rng.integers(0, widths[k] + 2)
    n_packed = packed.shape[1]
    ref_got = counts[perm].astype(np.int64)
    ref_src = src.copy()
    ends = ref_got[:n_packed].copy()
    start = np.where(packed[1], packed[0], np.concatenate([[0], ends[:-1] + 1]))
    ref_got[:n_packed] = np.where(ends < 0, -1, ends - start)
    ref_src[:n_packed] = start
    got_counts = np.empty(n_docs, np.int64)
    native.cpu.counts_in_plan_order(counts, perm, src, packed, got_counts)
    np.testing.assert_array_equal(got_counts, ref_got)
    np.testing.assert_array_equal(src, ref_src)

    by_doc = np.empty(n_docs, np.int64)
    by_doc[perm] = ref_got
    source = np.empty(n_docs, np.int64)
    source[perm] = ref_src
    starts = np.cumsum(by_doc) - by_doc
    held = np.flatnonzero(by_doc)
    call_info = np.array([(len(d), c[0]) for c, d in zip(calls, docs)], np.int64)
    out_counts, layout = np.empty(n_docs, np.int64), np.full((2, n_docs + 2), -7, np.int32)
    bad, total, n_held = native.cpu.compaction_layout(got_counts, src, perm, call_info, out_counts, layout)
    assert (bad, total, n_held) == (-1, int(by_doc.sum()), held.size)
    np.testing.assert_array_equal(out_counts, by_doc)
    np.testing.assert_array_equal(layout[0, : held.size], starts[held])
    np.testing.assert_array_equal(layout[1, : held.size], source[held] - starts[held])

    # a count out of 0..width + 1: the first such document in plan order is named
    k = int(rng.integers(0, n_docs))
    got_counts[k:] = np.where(rng.random(n_docs - k) < 0.5, -1, widths[k:] + 2)
    bad, _, _ = native.cpu.compaction_layout(got_counts, src, perm, call_info, out_counts, layout)
    assert bad == k


def test_bad_plans_are_value_errors():
    rng = np.random.default_rng(0)
    plan = random_plan(rng, 50)
    lengths, doc_start, row_of_doc, packed_rows, calls, docs, laid, entries = plan
    native_layout(*plan[:7], entries, 50)  # (the plan as made is fine)
    with pytest.raises(ValueError, match="out of range"):
        native_layout(*plan[:7], calls[-1][4] + laid[-1][1] - 1, 50)  # a table short of its entries
    with pytest.raises(ValueError, match="document index"):
        native_layout(*plan[:7], entries, 49)  # positions too short for the documents
    bad_docs = [d.copy() for d in docs]
    bad_docs[-1][0] = 50
    with pytest.raises(ValueError, match="document index"):
        native_layout(lengths, doc_start, row_of_doc, packed_rows, calls, bad_docs, laid, entries, 64)
    with pytest.raises(ValueError, match="int64\\[C, 7\\]"):
        native.cpu.layout_window(
            np.arange(50),
            np.zeros((1, 6), np.int64),
            doc_start,
            lengths,
            packed_rows,
            row_of_doc,
            WIDTH,
            np.zeros((2, 8), np.int32),
            np.zeros(64, np.int32),
            np.empty((3, 50), np.int64),
            np.empty((2, 0), np.int64),
        )
    perm = np.concatenate(docs).astype(np.int64)
    with pytest.raises(ValueError, match="permutation"):
        native.cpu.compaction_layout(
            np.zeros(50, np.int64),
            np.zeros(50, np.int64),
            np.zeros(50, np.int64),
            np.array([[50, 64]], np.int64),
            np.empty(50, np.int64),
            np.empty((2, 50), np.int32),
        )
    with pytest.raises(ValueError, match="out of range"):
        native.cpu.counts_in_plan_order(
            np.zeros(10, np.int32),
            perm,
            np.zeros(50, np.int64),
            np.zeros((2, 0), np.int64),
            np.empty(50, np.int64),
        )
