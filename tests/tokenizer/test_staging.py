"""Tokenizer.encode_batch's GPU input path (blockbpe_jax/staging.py): pinned staging, one DMA,
DLPack import, encode_stream. Differential: the staged ids against the NumPy path's and
tiktoken's, the staged rows against pack_strings'. (The way back, read_back: test_read_back.py.)"""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blockbpe_jax as bb
from blockbpe_jax import native, staging
from blockbpe_jax.vocab import KNOWN_PATTERNS

from helpers import gpu_devices, oracle
import staging_shared

needs_gpu = staging_shared.needs_gpu
tok, corpus_texts = (
    staging_shared.tok,
    staging_shared.corpus_texts,
)  # (module-scoped fixtures, requested by name)


def _reference(tok, texts, max_len):
    # The NumPy path (what encode_batch does off the GPU), on the GPU.
    data, lengths = bb.pack_strings(texts, max_len=max_len)
    dev = gpu_devices()[0]
    out = bb.encode(jax.device_put(data, dev), jax.device_put(lengths, dev), tok, max_tokens=data.shape[1])
    return np.asarray(out.ids), np.asarray(out.counts)


def test_cpu_devices_do_not_stage():
    assert not staging.available(jax.devices("cpu")[0])


@needs_gpu
@pytest.mark.parametrize("max_len", [None, 4096])
def test_staged_equals_numpy_path_and_tiktoken_gpu(tok, corpus_texts, max_len):
    enc = oracle("cl100k", "tiktoken", KNOWN_PATTERNS["cl100k"])
    texts = corpus_texts[:256] + ["", "ünïcödé ✓ 日本語 🎉", b"raw bytes \xff\xfe"]
    out = tok.encode_batch(texts, max_len=max_len)
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    ref_ids, ref_counts = _reference(tok, texts, max_len)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(counts, ref_counts)
    for k, t in enumerate(texts[:-1]):  # tiktoken takes str only
        assert ids[k, : counts[k]].tolist() == enc.encode_ordinary(t), k
    assert out.ids.devices() == {gpu_devices()[0]}


@needs_gpu
def test_stream_of_batches_reuses_slots_safely_gpu(tok, corpus_texts):
    # More batches in flight than slots, growing and shrinking shapes, no wait in between: a
    # slot refilled before its encode had read it would change that batch's ids.
    shapes = [(512, 4096), (64, 512), (512, 4096), (256, 1024), (600, 4096), (8, 64)] * 3
    outs, refs = [], []
    for k, (batch, max_len) in enumerate(shapes):
        texts = [
            t.encode()[:max_len].decode("utf-8", "ignore")
            for t in np.roll(np.array(corpus_texts, dtype=object), 37 * k)[:batch]
        ]
        outs.append(tok.encode_batch(texts, max_len=max_len))
        refs.append(texts)
    for texts, out, (batch, max_len) in zip(refs, outs, shapes):
        ref_ids, ref_counts = _reference(tok, texts, max_len)
        np.testing.assert_array_equal(np.asarray(out.ids), ref_ids)
        np.testing.assert_array_equal(np.asarray(out.counts), ref_counts)
    pool = staging._pools[gpu_devices()[0]]
    assert pool.count <= staging.MAX_SLOTS


@needs_gpu
def test_bad_input_and_deleted_outputs_leave_the_pool_usable_gpu(tok, corpus_texts):
    with pytest.raises(TypeError, match="item 1 is neither str nor bytes"):
        tok.encode_batch(["ok", 3])
    with pytest.raises(ValueError, match="more than max_len=16"):
        tok.encode_batch(["x" * 17], max_len=16)
    with pytest.raises(ValueError, match="block_size"):
        tok.encode_batch(["ok"], block_size=100)
    texts = corpus_texts[:64]
    for _ in range(staging.MAX_SLOTS + 2):
        tok.encode_batch(texts, max_len=4096).counts.delete()  # the consumer is gone
    out = tok.encode_batch(texts, max_len=4096)
    ref_ids, _ = _reference(tok, texts, 4096)
    np.testing.assert_array_equal(np.asarray(out.ids), ref_ids)
    assert staging._pools[gpu_devices()[0]].count <= staging.MAX_SLOTS


@needs_gpu
def test_refilled_views_see_each_new_batch_gpu(tok, corpus_texts):
    # A slot keeps its DLPack views per shape and is refilled in place: batches of one shape,
    # each with other text, more of them than slots, each checked after all were dispatched.
    outs, batches = [], []
    for k in range(3 * staging.MAX_SLOTS):
        texts = corpus_texts[40 * k : 40 * k + 40]
        batches.append(texts)
        outs.append(tok.encode_batch(texts, max_len=4096))
    for texts, out in zip(batches, outs):
        ref_ids, ref_counts = _reference(tok, texts, 4096)
        np.testing.assert_array_equal(np.asarray(out.ids), ref_ids)
        np.testing.assert_array_equal(np.asarray(out.counts), ref_counts)


def _stream_cases(corpus_texts):
    """Batches of several shapes for encode_stream, each a rotation of the corpus."""
    shapes = [(256, 4096), (64, 512), (256, 4096), (8, 64), (300, 1024)]
    return [
        (
            [
                t.encode()[:L].decode("utf-8", "ignore")
                for t in corpus_texts[31 * k :] + corpus_texts[: 31 * k]
            ][:B],
            L,
        )
        for k, (B, L) in enumerate(shapes)
    ]


def _check_stream(tok, corpus_texts, device):
    cases = _stream_cases(corpus_texts)
    outs = list(tok.encode_stream((texts for texts, _ in cases), max_len=4096, device=device))
    assert len(outs) == len(cases)
    for (texts, _), out in zip(cases, outs):
        want = tok.encode_batch(texts, max_len=4096, device=device)
        np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(want.ids))
        np.testing.assert_array_equal(np.asarray(out.counts), np.asarray(want.counts))
    # A bad batch raises after the result of the batch before it; stopping early, or a
    # failing iterable, leaves no batch staged.
    stream = tok.encode_stream([cases[0][0], ["ok", 3], cases[1][0]], max_len=4096, device=device)
    first = next(stream)
    np.testing.assert_array_equal(np.asarray(first.counts), np.asarray(outs[0].counts))
    with pytest.raises(TypeError, match="item 1 is neither str nor bytes"):
        next(stream)
    stream = tok.encode_stream((texts for texts, _ in cases), max_len=4096, device=device)
    next(stream)
    stream.close()

    def failing():
        yield cases[0][0]
        raise RuntimeError("the input pipeline failed")

    with pytest.raises(RuntimeError, match="input pipeline failed"):
        list(tok.encode_stream(failing(), max_len=4096, device=device))
    assert list(tok.encode_stream([], device=device)) == []


def test_encode_stream_equals_encode_batch(tok, corpus_texts):
    """encode_stream: one result per batch, in order, each encode_batch's; errors in order."""
    _check_stream(tok, corpus_texts, jax.devices("cpu")[0])


@needs_gpu
def test_encode_stream_equals_encode_batch_gpu(tok, corpus_texts):
    """The same on the GPU, where each batch is staged before the one before it is encoded;
    the pool is left within its slots."""
    _check_stream(tok, corpus_texts, gpu_devices()[0])
    assert staging._pools[gpu_devices()[0]].count <= staging.MAX_SLOTS


# ---------------------------------------------------------------------------------------------
# staging.py's own logic on the CPU: a stand-in for the native HostStaging with its contract
# (pack by the packer's rule, a copy into a "device" buffer that grows, DLPack views of it that
# see every later fill), so that slots, views per shape, Staged and encode_stream are checked
# here, not only on a GPU.


class FakeHostStaging:
    imports = 0  # device_arrays() calls, all slots

    def __init__(self, device: int):
        self._raw = None
        self.generation = 0
        self._shape = None

    def upload(self, texts, max_len):
        return self._put(*native.cpu.pack_strings(texts, max_len))

    def _put(self, data, lengths):
        batch, width = data.shape
        at = -(-batch * width // 256) * 256
        need = at + 4 * batch
        if self._raw is None or need + 64 > self._raw.size:  # grows: a new buffer, as the native one
            self._raw = np.zeros(max(need, 2 * (0 if self._raw is None else self._raw.size)) + 64, np.uint8)
            self.generation += 1
        buf = self._buf()
        buf[: batch * width] = data.reshape(-1)
        buf[at:need] = lengths.astype(np.int32).view(np.uint8)
        self._shape = (batch, width, at)
        return batch, width

    def _buf(self):  # 64-byte aligned, as JAX imports without a copy
        off = (-self._raw.ctypes.data) % 64
        return self._raw[off:]

    def wait(self):
        pass

    copy_pending = False  # (the stand-in's copy is done when upload returns)

    def device_arrays(self):
        FakeHostStaging.imports += 1
        batch, width, at = self._shape
        buf = self._buf()
        return buf[: batch * width].reshape(batch, width), buf[at : at + 4 * batch].view(np.int32)


@pytest.fixture
def cpu_staging(monkeypatch):
    """staging.py's path on the CPU device, through FakeHostStaging."""
    monkeypatch.setattr(native, "cuda", types.SimpleNamespace(HostStaging=FakeHostStaging), raising=False)
    monkeypatch.setattr(staging, "available", lambda device: True)
    monkeypatch.setattr(staging, "_pools", {})
    FakeHostStaging.imports = 0
    return jax.devices("cpu")[0]


def test_staged_path_logic_on_cpu(tok, corpus_texts, cpu_staging):
    """Through the stand-in: encode_batch's staged ids equal the NumPy path's for shapes that
    come back (views kept per shape: imported once per slot and shape, then refilled in place),
    a buffer that grows (new views), more batches in flight than slots, and encode_stream."""
    shapes = [(64, 512), (256, 4096), (64, 512), (8, 64), (256, 4096), (300, 4096)] * 2
    outs, refs = [], []
    for k, (batch, max_len) in enumerate(shapes):
        texts = [t.encode()[:max_len].decode("utf-8", "ignore") for t in corpus_texts[7 * k :][:batch]]
        outs.append(tok.encode_batch(texts, max_len=max_len, device=cpu_staging))
        refs.append((texts, max_len))
    for (texts, max_len), out in zip(refs, outs):
        data, lengths = bb.pack_strings(texts, max_len=max_len)
        want = bb.encode(data, lengths, tok, max_tokens=max_len)
        np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(want.ids))
        np.testing.assert_array_equal(np.asarray(out.counts), np.asarray(want.counts))
    pool = staging._pools[cpu_staging]
    assert pool.count <= staging.MAX_SLOTS
    assert FakeHostStaging.imports < len(shapes)  # a shape seen again reuses its views
    _check_stream(tok, corpus_texts, cpu_staging)


def test_a_copy_no_encode_waited_for_is_an_error(tok, cpu_staging):
    """A slot whose batch went to a computation that never waited for the copy (on the GPU:
    the copy still registered once the computation finished) refuses its next fill."""
    staged = staging.stage_strings(["abc", "de"], max_len=8, device=cpu_staging)
    slot = staged._slot
    staged.run(lambda data, lengths: bb.encode(data, lengths, tok, max_tokens=8))
    assert slot.encode_waits
    slot.native.copy_pending = True
    with pytest.raises(RuntimeError, match="did not wait for its copy"):
        slot.fill(["x"], 8)


@needs_gpu
def test_the_encode_waits_for_the_staged_copy_gpu(tok, corpus_texts):
    """On the GPU the host dispatches without waiting for the copy; the encode's handler
    waited for it (the copy is no longer registered), and the ids are the NumPy path's."""
    device = gpu_devices()[0]
    texts = corpus_texts[:512]
    for _ in range(3):  # (fills of a slot after the first: views reused, copies overlapped)
        out = tok.encode_batch(texts, max_len=4096, device=device)
        jax.block_until_ready(out)
    slots = [slot for slot, _ in staging._pools[device].idle]
    assert any(slot.encode_waits for slot in slots)
    assert not any(slot.native.copy_pending for slot in slots)
    data, lengths = bb.pack_strings(texts, max_len=4096)
    want = bb.encode(data, lengths, tok, max_tokens=4096)
    np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(want.ids))
    np.testing.assert_array_equal(np.asarray(out.counts), np.asarray(want.counts))


@needs_gpu
def test_the_batch_is_packed_after_upload_returns_gpu(tok, corpus_texts):
    """The rows are packed on the slot's own thread after `upload` returns: the caller's list
    may be emptied and its strings freed at once (the slot holds its own references), and a
    reader that is not the encode (`wait`, then the views) sees every byte."""
    device = gpu_devices()[0]
    want_texts = (corpus_texts * 2)[:1200]  # (over 2 MiB: packed and copied in parts)
    want = np.asarray(bb.pack_strings(want_texts, max_len=4096)[0])
    staging_slot = native.cuda.HostStaging(device.local_hardware_id)
    for _ in range(3):
        texts = [t.encode().decode() for t in want_texts]  # (fresh objects, freed below)
        staging_slot.upload(texts, 4096)
        texts.clear()
        del texts
        staging_slot.wait()
        data, lengths = (jax.dlpack.from_dlpack(a) for a in staging_slot.device_arrays())
        np.testing.assert_array_equal(np.asarray(data), want)
        np.testing.assert_array_equal(np.asarray(lengths), [len(t.encode()) for t in want_texts])
    # the encode's own path, the strings freed before the result is read
    texts = [t.encode().decode() for t in want_texts]
    out = tok.encode_batch(texts, max_len=4096, device=device)
    texts.clear()
    del texts
    ref = bb.encode(*bb.pack_strings(want_texts, max_len=4096), tok, max_tokens=4096)
    np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(ref.ids))


@needs_gpu
@pytest.mark.parametrize("streaming", ["0", "1"])
def test_staged_rows_with_and_without_non_temporal_stores_gpu(monkeypatch, corpus_texts, streaming):
    """BLOCKBPE_STAGING_STREAM (read when a slot is made; core/stream_stores.h): the device copy
    of the packed rows is pack_strings' either way, for fresh strs of every code unit width and
    bytes, in rows whose width is not a multiple of 16 (rows that share 16-byte blocks with their
    neighbours, written by different threads) and in rows of 4 KiB, in parts and not."""
    monkeypatch.setenv("BLOCKBPE_STAGING_STREAM", streaming)
    device = gpu_devices()[0]
    slot = native.cuda.HostStaging(device.local_hardware_id)
    extra = [
        "",
        "ascii only",
        "latin-1 ünïcödé",
        "bmp — “quotes” 日本語",
        "astral 🎉🎉 ok",
        b"raw \xff\xfe bytes",
    ]
    base = (corpus_texts * 2)[:1200] + extra
    for width in (4096, 4093, 1000):
        items = [t[: width // 4] if width < 4096 and isinstance(t, str) else t for t in base]
        want_rows, want_lengths = bb.pack_strings(items, max_len=width)
        for _ in range(2):
            fresh = [t.encode().decode() if isinstance(t, str) else t for t in items]
            slot.upload(fresh, width)
            slot.wait()
            data, lengths = (jax.dlpack.from_dlpack(a) for a in slot.device_arrays())
            np.testing.assert_array_equal(np.asarray(data), want_rows)
            np.testing.assert_array_equal(np.asarray(lengths), want_lengths)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 8),
    bad=st.one_of(st.none(), st.integers(0, 7)),
    bad_dispatch=st.booleans(),
    finishing=st.sets(st.integers(0, 7)),
    ready=st.sets(st.integers(0, 7)),
    stop_after=st.one_of(st.none(), st.integers(1, 8)),
)
def test_pipelined_order_errors_and_cleanup(n, bad, bad_dispatch, finishing, ready, stop_after):
    """staging.pipelined: results in order, a batch that fails to stage (or to dispatch) raises
    right after the result of the batch before it, every staged batch is either dispatched or
    cancelled (whether the consumer reads everything, stops early or meets the error), and a
    batch that finishes (an NFC tokenizer's: it waits for its result) whose result is not ready
    is finished only after the next batch is dispatched, where there is one, and at the latest
    once MAX_UNFINISHED batches after it are."""
    events = []

    class Prepared:
        def __init__(self, k):
            self.k = k
            self.finishes = k in finishing

        def ready(self, out):
            return not self.finishes or out in ready

        def dispatch(self):
            if bad_dispatch and self.k == bad:
                events.append(("cancel", self.k))  # (its slot goes back when the call fails)
                raise ValueError(f"batch {self.k}")
            events.append(("dispatch", self.k))
            return self.k

        def finish(self, out):
            events.append(("finish", out))
            return out

        def cancel(self):
            events.append(("cancel", self.k))

    def prepare(k):
        if k == bad and not bad_dispatch:
            raise ValueError(f"batch {k}")
        events.append(("stage", k))
        return Prepared(k)

    got, error = [], None
    stream = staging.pipelined(prepare, range(n))
    try:
        for k in stream:
            got.append(k)
            if stop_after is not None and len(got) >= stop_after:
                break
    except ValueError as e:
        error = str(e)
    stream.close()
    last = n if bad is None or bad >= n else bad
    want = list(range(last))[: stop_after if stop_after is not None else None]
    assert got == want
    reaches_error = bad is not None and bad < n and (stop_after is None or stop_after > last)
    assert error == (f"batch {bad}" if reaches_error else None)
    staged = [k for e, k in events if e == "stage"]
    done = sorted(k for e, k in events if e in ("dispatch", "cancel"))
    assert done == staged  # nothing staged is left behind
    assert all(
        events.index(("stage", k + 1)) < events.index(("dispatch", k))
        for k in got
        if ("stage", k + 1) in events
    )
    late = staging.MAX_UNFINISHED + 1
    for k in got:
        assert (("finish", k) in events) == (k in finishing)
        if k in finishing and k not in ready and ("dispatch", k + 1) in events:
            assert events.index(("dispatch", k + 1)) < events.index(("finish", k))
        if k in finishing and ("dispatch", k + late) in events:
            assert events.index(("finish", k)) < events.index(("dispatch", k + late))
