"""The corpus job's window FFI call (ffi/binding/window_ffi.h, ops.encode_window): a plan of calls
of any rows and width, some of packed rows, against `encode` of the same rows one call at a
time (a fixed window on the CPU and a GPU, generated ones on the CPU); separator slots against
NumPy's; plans that do not fit their buffers refused by name."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax import native
from blockbpe_jax.ops import primitive as ops
from blockbpe_jax.corpus import device as window_device

from helpers import BACKENDS, device_for, load_tokenizer
from strategies import fuzz, runs_text, unicode_text

EOT = "<|endoftext|>"


def _window(rng, tok, device):
    """A window's bytes, table and plan: calls of 5 rows x 64 B, 3 x 700 B, packed rows of 256 B
    (documents with EOT after each), 1 x 9000 B (a tiled row on a GPU); plus each call's rows."""
    words = [b"alpha", b" beta", b"\n\n", " 日本".encode(), b" 1234", b"  ", b"x" * 40]

    def text(n):
        out = b""
        while len(out) < n:
            out += words[int(rng.integers(len(words)))]
        return out[:n]

    plain = [
        [text(int(rng.integers(0, 64))) for _ in range(5)],
        [text(int(rng.integers(300, 700))) for _ in range(3)],
    ]
    packed_rows = []
    for _ in range(4):
        row = b"".join(text(int(rng.integers(0, 40))) + EOT.encode() for _ in range(int(rng.integers(1, 6))))
        packed_rows.append(row)
    plain.append([text(9000)])
    blobs = [b for group in plain for b in group] + packed_rows
    starts = np.cumsum([0] + [len(b) + 3 for b in blobs])[:-1]  # (3 junk bytes between rows)
    flat = np.full(int(starts[-1]) + len(blobs[-1]) + 8, 0xEE, np.uint8)
    for s, b in zip(starts, blobs):
        flat[s : s + len(b)] = np.frombuffer(b, np.uint8)
    table = np.zeros((2, 64), np.int32)
    table[0, : len(blobs)], table[1, : len(blobs)] = starts, [len(b) for b in blobs]
    calls, at, entry = [], 0, 0
    for width, group in zip((64, 1024, 9000), plain):
        T = width // 2 if width > 64 else width + 1
        calls.append((len(group), width, T, at, entry, 0))
        at, entry = at + len(group) * (T + 1), entry + len(group)
    docs = sum(r.count(EOT.encode()) for r in packed_rows)
    packed = (len(packed_rows), 256, 256, at, entry, docs + 2)  # (2 slots more than separators: -1)
    return flat, table, np.array(calls, np.int64), np.array([packed], np.int64), plain, packed_rows


def _rows(group, width):
    data = np.zeros((len(group), width), np.uint8)
    for i, b in enumerate(group):
        data[i, : len(b)] = np.frombuffer(b, np.uint8)
    return data, np.array([len(b) for b in group], np.int32)


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_window_call_equals_encode_call_by_call(backend):
    device = device_for(backend[0])
    tok = load_tokenizer("cl100k", "tiktoken")
    flat, table, calls, packed, plain, packed_rows = _window(np.random.default_rng(0), tok, device)
    sep_id = tok.vocab.special_tokens[EOT]
    end = int(packed[0, 3] + packed[0, 0] * packed[0, 2] + packed[0, 5])
    raw = jax.device_put(np.full(end + 5, 7, np.int32), device)
    flat_d, table_d = jax.device_put(flat, device), jax.device_put(table, device)
    static = dict(mode="exact", block_size=backend[1], assume_nfc=False)
    plain_step = window_device.CompiledWindows(tok.tables("none", device), device, **static)
    packed_step = window_device.CompiledWindows(tok.tables({EOT}, device), device, sep_id=sep_id, **static)
    raw = plain_step(flat_d, table_d, raw, calls, plain_step.scratch(calls))
    raw = np.asarray(packed_step(flat_d, table_d, raw, packed, packed_step.scratch(packed)))
    for (rows, width, T, at, _, _), group in zip(calls.tolist(), plain):
        want = ops.encode(*_rows(group, width), tok.tables("none", device), max_tokens=T)
        ids, counts = raw[at : at + rows * T].reshape(rows, T), raw[at + rows * T : at + rows * (T + 1)]
        np.testing.assert_array_equal(counts, np.asarray(want.counts))
        for i in range(rows):  # (what lies past a row's count is not read)
            np.testing.assert_array_equal(ids[i, : counts[i]], np.asarray(want.ids)[i, : counts[i]])
    rows, width, T, at, _, slots = packed[0].tolist()
    want = ops.encode(*_rows(packed_rows, width), tok.tables({EOT}, device), max_tokens=T)
    ids, counts = np.asarray(want.ids), np.asarray(want.counts)
    inside = np.arange(T)[None, :] < counts[:, None]
    where = at + np.flatnonzero(((ids == sep_id) & inside).reshape(-1))
    assert len(where) == slots - 2 and (counts > 0).all()
    np.testing.assert_array_equal(
        raw[at + rows * T : at + rows * T + slots], np.concatenate([where, [-1, -1]])
    )
    np.testing.assert_array_equal(raw[end:], 7)  # (nothing written past the plan)


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_window_call_refuses_plans_that_do_not_fit(backend):
    """A plan is checked against the call's buffers before anything runs: rows past the table,
    ids past the id buffer, a call without a plan, each an error naming it."""
    device = device_for(backend[0])
    tok = load_tokenizer("r50k", "tiktoken")
    flat = jax.device_put(np.zeros(4096, np.uint8), device)
    table = jax.device_put(np.zeros((2, 16), np.int32), device)
    raw = jax.device_put(np.zeros(1000, np.int32), device)
    step = window_device.CompiledWindows(
        tok.tables("none", device), device, mode="exact", block_size=256, assume_nfc=False
    )
    cases = {
        "reads table entries \\[10, 20\\) of 16": (10, 64, 65, 0, 10, 0),
        "writes ids \\[900, 1940\\) of 1000": (16, 64, 64, 900, 0, 0),
        "has rows 1, width 0": (1, 0, 1, 0, 0, 0),
    }
    for message, call in cases.items():
        plan = np.array([call], np.int64)
        with pytest.raises(Exception, match=f"bbpe_encode_window: call 0 {message}"):
            np.asarray(step(flat, table, raw, plan, 1 << 20))
        raw = jax.device_put(np.zeros(1000, np.int32), device)  # (donated to the failed call)
    other = jax.device_put(np.zeros(8192, np.uint8), device)  # (no plan was ever set for it)
    run = window_device.compiled(*step.ahead(other.size, 16, raw.size, 1 << 20))
    with pytest.raises(Exception, match="no plan was set for these bytes and sep_id -1"):
        np.asarray(run(other, table, step.tables, raw))


def test_window_scratch_covers_the_encode_workspace():
    """A call's scratch on a GPU holds its gathered rows, three int32 per row and the encode
    kernel's workspace, whatever the width (one block per row or tiled)."""
    for rows, width in [(1, 16), (256, 16384), (3, 9000), (1024, 4096), (1, 1 << 22)]:
        scratch = native.cpu.window_scratch_bytes(rows, width, 1, 0)
        assert scratch >= rows * width + 12 * rows + native.workspace_bytes(rows, width, 1, 0)


@fuzz(20)
@given(
    texts=st.lists(unicode_text | runs_text, min_size=1, max_size=24),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    keep=st.sampled_from([1, 2, 0]),  # ids kept per row: 1, width // 2 or width + 1
    packed_width=st.sampled_from([256, 1024]),
)
def test_window_call_on_generated_plans(texts, cuts, keep, packed_width):
    """Generated documents cut into plain calls of random sizes (each of its own power-of-two
    width, ids kept short enough to truncate some) and packed rows of the same documents: the
    window call equals `encode` call by call, counts, kept ids and separators alike (CPU)."""
    device = jax.devices("cpu")[0]
    tok = load_tokenizer("cl100k", "tiktoken")
    sep_id = tok.vocab.special_tokens[EOT]
    blobs = [t.encode("utf-8", "surrogatepass") for t in texts]
    plain, k = [], 0
    for n in cuts:
        if k < len(blobs):
            plain.append(blobs[k : k + n])
            k += n
    packable = [b for b in blobs if EOT.encode() not in b and len(b) + len(EOT) < packed_width]
    rows, row = [], b""
    for b in packable:
        if len(row) + len(b) + len(EOT) > packed_width:
            rows.append(row)
            row = b""
        row += b + EOT.encode()
    rows += [row] if row else []
    entries = [b for group in plain for b in group] + rows
    starts = np.cumsum([0] + [len(b) + 1 for b in entries])[:-1]
    flat = np.zeros(max(int(starts[-1]) + len(entries[-1]), 1), np.uint8)
    for s, b in zip(starts, entries):
        flat[s : s + len(b)] = np.frombuffer(b, np.uint8)
    table = np.zeros((2, 64), np.int32)
    table[0, : len(entries)], table[1, : len(entries)] = starts, [len(b) for b in entries]
    calls, at, entry = [], 0, 0
    for group in plain:
        width = max(16, 1 << max(0, max(map(len, group)) - 1).bit_length())
        T = {1: 1, 2: width // 2, 0: width + 1}[keep]
        calls.append((len(group), width, T, at, entry, 0))
        at, entry = at + len(group) * (T + 1), entry + len(group)
    docs = len(packable)
    packed = [(len(rows), packed_width, packed_width, at, entry, docs)] if rows else []
    end = at + (len(rows) * packed_width + docs if rows else 0)
    flat_d, table_d = jax.device_put(flat, device), jax.device_put(table, device)
    raw = jax.device_put(np.full(end + 3, 7, np.int32), device)
    static = dict(mode="exact", block_size=256, assume_nfc=False)
    plain_step = window_device.CompiledWindows(tok.tables("none", device), device, **static)
    raw = plain_step(flat_d, table_d, raw, np.array(calls, np.int64), 1)
    if packed:
        packed_step = window_device.CompiledWindows(
            tok.tables({EOT}, device), device, sep_id=sep_id, **static
        )
        raw = packed_step(flat_d, table_d, raw, np.array(packed, np.int64), 1)
    raw = np.asarray(raw)
    for (n, width, T, at, _, _), group in zip(calls, plain):
        want = ops.encode(*_rows(group, width), tok.tables("none", device), max_tokens=T)
        counts = raw[at + n * T : at + n * (T + 1)]
        np.testing.assert_array_equal(counts, np.asarray(want.counts))
        for i in range(n):
            kept = min(int(counts[i]), T)
            np.testing.assert_array_equal(raw[at + i * T : at + i * T + kept], np.asarray(want.ids)[i, :kept])
    if packed:
        n, width, T, at, _, docs = packed[0]
        want = ops.encode(*_rows(rows, width), tok.tables({EOT}, device), max_tokens=T)
        ids, counts = np.asarray(want.ids), np.asarray(want.counts)
        inside = np.arange(T)[None, :] < counts[:, None]
        where = at + np.flatnonzero(((ids == sep_id) & inside).reshape(-1))
        assert len(where) == docs
        np.testing.assert_array_equal(raw[at + n * T : at + n * T + docs], where)
    np.testing.assert_array_equal(raw[end:], 7)
