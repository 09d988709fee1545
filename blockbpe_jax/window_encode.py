"""The corpus job's engine: one window of documents (documents.Window: a flat buffer and
offsets) -> encode calls planned by width -> ids on the device, compacted there into input
order in the shard dtype -> one copy back per window, handed to a writer (shards.py). Reading,
encoding and writing overlap (a reader thread ahead, a writer thread behind). corpus.py drives
it; see encode_documents.
"""

from __future__ import annotations

import functools
import threading
import types
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .documents import Window
from .shards import CorpusError, token_dtype

DEFAULT_BATCH_BYTES = 4 << 20  # padded bytes (rows x width) per encode call


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def _pow2_widths(lengths: np.ndarray, floor: int = 16) -> np.ndarray:
    """_pow2 of each length, exactly (frexp's exponent of n - 1 is its bit length)."""
    return np.maximum(floor, np.left_shift(1, np.frexp(np.maximum(lengths - 1, 0))[1].astype(np.int64)))


def plan_batches(
    lengths: np.ndarray, batch_bytes: int, max_docs: int | None, max_len: int | None
) -> list[tuple[int, np.ndarray]]:
    """(width, document indices) of each encode call of a window: the documents sorted by
    length, each call holding documents of one power-of-two width (or all at max_len), at
    most batch_bytes // width of them (one at least) and at most max_docs."""
    order = np.argsort(lengths, kind="stable")
    widths = np.full(len(order), max_len, np.int64) if max_len is not None else _pow2_widths(lengths[order])
    cuts = np.flatnonzero(np.diff(widths)) + 1
    out = []
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(order)]]).tolist()):
        width = int(widths[lo])
        rows = max(1, batch_bytes // width)
        if max_docs is not None:
            rows = min(rows, max_docs)
        out += [(width, order[i : min(i + rows, hi)]) for i in range(lo, hi, rows)]
    return out


def first_pass_tokens(width: int) -> int:
    """Token columns of a call of this byte width. Byte-level BPE gives at most one token per
    byte, but real text gives one per 2.5-4.5 bytes: half the width keeps the copy back small,
    and the rare row with more tokens (its count says so) is encoded again at full width."""
    return width + 1 if width < 64 else width // 2


def _in_background(items: Iterator, depth: int) -> Iterator:
    """The items of `items`, produced by a thread up to `depth` ahead; its exception is raised
    here, in order, when the consumer reaches it. Stops the thread when the consumer stops."""
    import queue

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put((end, e))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            item, error = q.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.1)


def _rows_bucket(n: int, full: int) -> int:
    """Rows of a call of `n` documents whose width holds at most `full` per call: a power of
    two, at least 1/16 of full's: at most five row counts per width, so that a job compiles a
    few executables per width, for at most 1/16 of a call's bytes of empty rows."""
    return max(_pow2(n, 1), _pow2(full, 1) // 16)


def _size_bucket(n: int) -> int:
    """Length of a window's copy back for at most `n` tokens: eight sizes per octave (at most
    1/8 more than n), at least 4096 (a multiple of 4096: `_prefix_count`'s blocks)."""
    if n <= 4096:
        return 4096
    step = max(4096, 1 << (n.bit_length() - 4))
    return -(-n // step) * step


@functools.lru_cache(maxsize=1)
def _device_functions():
    """The jitted steps of a window on the device (built on first use: importing this module
    does not import JAX).

    A window's calls write into one int32 buffer `raw` (donated from call to call): call i's
    padded ids [rows, T] row-major, then its counts [rows], each call after the previous one
    (the offset is passed on the device from call to call). The layout depends only on the
    plan, so the host knows where every document's ids and count
    are before anything ran. The host copies back the counts (`gather`), and `finalize`
    gathers the ids of every document, in input order, back to back, cast to the shard
    dtype: the host copies back only those."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from . import ops

    @functools.partial(
        jax.jit, static_argnames=("max_tokens", "mode", "block_size", "assume_nfc"), donate_argnums=3
    )
    def encode_into(data, lengths, tables, raw, at, *, max_tokens, mode, block_size, assume_nfc):
        enc = ops.encode(
            data,
            lengths,
            tables,
            max_tokens=max_tokens,
            mode=mode,
            block_size=block_size,
            check_lengths=False,
            assume_nfc=assume_nfc,
        )
        raw = lax.dynamic_update_slice(raw, enc.ids.reshape(-1), (at,))
        raw = lax.dynamic_update_slice(raw, enc.counts, (at + enc.ids.size,))
        # the next call's offset, on the device: no host-to-device copy per call
        return raw, enc.counts, at + enc.ids.size + enc.counts.size

    @jax.jit
    def gather(raw, positions):
        return raw.at[positions].get(mode="clip")

    def _prefix_count(marks):
        """Inclusive prefix sums of 0/1 int32 marks (length a multiple of 4096). A scan over
        millions of elements is slow on XLA's CPU backend (~50 ns each); this is a matmul by a
        triangular matrix per 64 elements, again per 64 block sums, and a scan over the 4096x
        fewer sums that are left (exact: float32 holds every integer below 2**24; HIGHEST
        precision keeps GPUs from rounding the inputs to TF32)."""
        upper = jnp.triu(jnp.ones((64, 64), jnp.float32))

        def within(x):  # x[m * 64]: (inclusive sums in each 64 as float32 [m, 64], their totals)
            inner = jnp.dot(x.astype(jnp.float32).reshape(-1, 64), upper, precision=lax.Precision.HIGHEST)
            return inner, inner[:, -1]

        inner, totals = within(marks)
        inner2, totals2 = within(totals)
        inclusive = (inner2 + (jnp.cumsum(totals2) - totals2)[:, None]).reshape(-1)  # of totals
        return (inner + (inclusive - totals)[:, None]).reshape(-1).astype(jnp.int32)

    @functools.partial(jax.jit, static_argnames=("size", "dtype"))
    def finalize(raw, layout, *, size, dtype):
        """The window's ids back to back in input order, cast to `dtype`, padded to `size`.
        layout int32[2, D]: for the non-empty documents in input order, where their ids go in
        the output and how far they are from their place in raw (src - start); `size` where
        D has more entries than there are documents."""
        starts, shift = layout[0], layout[1]
        # output position j reads raw[j + shift[d]], d the number of starts at or before j,
        # minus 1: the non-empty document that holds j
        marks = jnp.zeros(size, jnp.int32).at[starts].set(1, mode="drop")
        d = jnp.maximum(_prefix_count(marks) - 1, 0)
        return raw.at[jnp.arange(size, dtype=jnp.int32) + shift[d]].get(mode="clip").astype(dtype)

    @functools.partial(jax.jit, static_argnames="size")
    def grow(raw, *, size):
        return jnp.zeros(size, raw.dtype).at[: raw.size].set(raw)

    return types.SimpleNamespace(encode_into=encode_into, gather=gather, finalize=finalize, grow=grow)


class _Buffers:
    """Sizes of a job's window buffers, as high-water marks over its windows (powers of two,
    the first twice the first window's need: every encode call's executable depends on it, so
    a job should see one or two). Buffers of finished windows are kept
    for the next windows and jobs (at most `KEEP`, across devices): zeroing a new one costs
    more than the window's steps on the CPU backend."""

    KEEP = 3
    _spare: list = []  # (device, raw), most recent last
    _lock = threading.Lock()

    def __init__(self, device):
        import jax.numpy as jnp

        self.device, self.slots, self.docs = device, 1 << 12, 1 << 10
        self.zero = jnp.zeros((), jnp.int32, device=device)  # a window's first offset

    def take(self, slots: int):
        import jax.numpy as jnp

        with self._lock:
            if slots > self.slots:  # twice the need: the next windows rarely need more
                self.slots = 2 * _pow2(slots, 1)
            for k in range(len(self._spare) - 1, -1, -1):
                device, raw = self._spare[k]
                if device == self.device and raw.size == self.slots:
                    del self._spare[k]
                    return raw
        return jnp.zeros(self.slots, jnp.int32, device=self.device)

    def doc_slots(self, n: int) -> int:
        with self._lock:
            self.docs = max(self.docs, _pow2(n, 1))
            return self.docs

    def grown(self, slots: int) -> int:
        with self._lock:
            self.slots = max(self.slots, _pow2(slots, 1))
            return self.slots

    def give_back(self, raw) -> None:
        with self._lock:
            self._spare.append((self.device, raw))
            del self._spare[: -self.KEEP]


def encode_documents(
    tok,
    windows: Iterator[Window],
    writer,
    paths: Sequence[Path],
    *,
    mode="exact",
    allowed_special="none",
    batch_bytes=DEFAULT_BATCH_BYTES,
    max_docs=None,
    max_len=None,
    block_size=256,
    device=None,
    progress=None,
) -> None:
    """Encodes the documents window by window (within a window, sorted by length into calls of
    one power-of-two width; any length: max_tokens never cuts a document) and hands each
    window's ids, back to back in input order in the shard dtype, to `writer.add`.

    On the device, a window's calls write into one buffer and one step puts their ids in
    input order (`_device_functions`); the host copies back the window's counts, then its ids
    (about 2-4 bytes per token), once each. Rows with more tokens than the first pass keeps
    are encoded again at full width into the same buffer before that step. Reading, encoding
    and writing overlap: a thread reads up to 2 windows ahead, this thread dispatches a
    window's calls (asynchronous: the device works meanwhile) while a thread finishes the
    previous window and writes it."""
    import jax

    from . import native, staging

    nfc = mode == "exact" and tok.normalizes
    fns = _device_functions()
    dtype = token_dtype(tok.vocab.n_vocab)

    def where(w: Window, i: int) -> str:
        return f"{paths[w.file_index]}:{int(w.positions[i])}"

    target = device or jax.devices()[0]
    tables = tok.tables(allowed_special, device)
    staged_path = staging.available(target)
    buffers = _Buffers(target)

    def encode_into(raw, at, w: Window, idx: np.ndarray, width: int, T: int, rows: int):
        """Documents `idx` of the window packed straight from its flat buffer into `rows` rows
        (on a CUDA GPU: into pinned memory, one DMA), encoded, and written into raw at `at` (a
        device scalar): ids [rows, T], then counts [rows]. Returns the new raw (the old one is
        donated) and the offset after them."""
        idx = np.ascontiguousarray(idx, np.int64)
        kw = dict(max_tokens=T, mode=mode, block_size=block_size, assume_nfc=nfc)  # (any normalizer)
        if staged_path and width > 0:
            staged = staging.stage_flat(w.data, w.offsets, idx, max_len=width, rows=rows, device=target)
            try:
                raw, counts, at = fns.encode_into(staged.data, staged.lengths, tables, raw, at, **kw)
            except BaseException:
                staged.discard()
                raise
            staged.release(counts)
            return raw, at
        data, lengths = native.cpu.pack_flat(w.data, w.offsets, idx, width, rows)
        if target != jax.devices()[0]:
            data, lengths = jax.device_put((data, lengths), target)
        raw, _, at = fns.encode_into(data, lengths, tables, raw, at, **kw)
        return raw, at

    def launch(w: Window):
        if nfc:  # the width must fit the normalized text
            w = Window.of(tok.normalize(w.blobs), w.positions, w.file_index, w.consumed)
        lengths = w.lengths
        if max_len is not None and w.ndocs and lengths.max() > max_len:
            i = int(np.argmax(lengths))
            raise CorpusError(
                f"{where(w, i)}: document of {int(lengths[i])} bytes, more than "
                f"--max-len {max_len} (use --split chunk:N)"
            )
        plan = []  # (document indices, width, T, rows, offset in raw)
        end = 0
        for width, idx in plan_batches(lengths, batch_bytes, max_docs, max_len):
            T = first_pass_tokens(width)
            full = max(1, batch_bytes // width)  # plan_batches' most documents per call
            rows = _rows_bucket(len(idx), full if max_docs is None else min(full, max_docs))
            plan.append((idx, width, T, rows, end))
            end += rows * (T + 1)
        raw, at = buffers.take(end), buffers.zero
        for idx, width, T, rows, _ in plan:
            raw, at = encode_into(raw, at, w, idx, width, T, rows)
        resume = at  # where rows encoded again go (== end)
        # per document, in sorted (plan) order: its call's T and width, where its ids and its
        # count are in raw
        sizes = [len(p[0]) for p in plan]
        perm = np.concatenate([p[0] for p in plan]).astype(np.int64)
        row = np.arange(len(perm)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        T = np.repeat([p[2] for p in plan], sizes)
        base = np.repeat([p[4] for p in plan], sizes)
        src = base + row * T
        count_at = base + np.repeat([p[3] * p[2] for p in plan], sizes) + row
        positions = np.zeros(buffers.doc_slots(len(perm)), np.int32)
        positions[perm] = count_at
        counts = fns.gather(raw, positions)
        counts.copy_to_host_async()
        return w, plan, raw, end, resume, perm, T, src, count_at, counts

    def finish(pending) -> None:
        w, plan, raw, end, at, perm, T, src, count_at, counts = pending
        n = len(perm)
        sizes = [len(p[0]) for p in plan]
        got = np.asarray(counts)[perm].astype(np.int64)  # sorted (plan) order from here on
        redo = np.flatnonzero(got > T)
        if redo.size:  # more tokens than the first pass kept: these rows at full width
            call_of = np.repeat(np.arange(len(plan)), sizes)
            groups = np.split(redo, np.flatnonzero(np.diff(call_of[redo])) + 1)
            # (T = width + 1, rows: a power of two, at least 8) of each call's rows again
            shapes = [(plan[call_of[g[0]]][1] + 1, max(_pow2(len(g), 1), 8)) for g in groups]
            need = end + sum(rows * (T2 + 1) for T2, rows in shapes)
            if need > raw.size:
                raw = fns.grow(raw, size=buffers.grown(need))
            for g, (T2, rows) in zip(groups, shapes):
                raw, at = encode_into(raw, at, w, perm[g], T2 - 1, T2, rows)
                r = np.arange(len(g))
                src[g], count_at[g] = end + r * T2, end + rows * T2 + r
                end += rows * (T2 + 1)
            positions = np.zeros(buffers.doc_slots(n), np.int32)
            positions[: redo.size] = count_at[redo]
            got[redo] = np.asarray(fns.gather(raw, positions))[: redo.size]
        widths = np.repeat([p[1] for p in plan], sizes)
        bad = np.flatnonzero((got < 0) | (got > widths + 1))
        if bad.size:
            k = int(bad[0])
            buffers.give_back(raw)
            raise CorpusError(
                f"{where(w, int(perm[k]))}: tokenization failed (count "
                f"{int(got[k])}, width {int(widths[k]) + 1})"
            )
        counts = np.empty(n, np.int64)
        counts[perm] = got
        source = np.empty(n, np.int64)
        source[perm] = src
        total = int(counts.sum())
        size = _size_bucket(total)
        starts = np.cumsum(counts) - counts
        held = np.flatnonzero(counts)
        layout = np.full((2, buffers.doc_slots(n)), size, np.int32)
        layout[0, : held.size] = starts[held]
        layout[1, : held.size] = source[held] - starts[held]
        ids = np.asarray(fns.finalize(raw, layout, size=size, dtype=dtype))
        buffers.give_back(raw)
        flat = ids[:total]
        writer.add(flat, counts, w)
        if progress is not None:
            progress.update(w.consumed, w.ndocs, total)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as writer_thread:
        written = []  # futures of finish(), oldest first
        for window in _in_background(windows, depth=2):
            if not window.ndocs:
                continue
            written.append(writer_thread.submit(finish, launch(window)))
            while len(written) > 1 or (written and written[0].done()):
                written.pop(0).result()  # re-raises a writer's error here
        for future in written:
            future.result()
