"""The corpus job's engine: one window of documents (documents.Window: a flat buffer and
offsets) -> encode calls planned by width -> ids on the device, compacted there into input
order in the shard dtype -> one copy back per window, handed to a writer (shards.py). Reading,
encoding and writing overlap (a reader thread ahead, a writer thread behind). corpus.py drives
it; see encode_documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .background import in_background
from .documents import Window
from .window_device import CompiledEncodes, WindowBuffers, device_functions, pow2, size_bucket
from .shards import CorpusError, token_dtype

DEFAULT_BATCH_BYTES = 4 << 20  # padded bytes (rows x width) per encode call


def _pow2_widths(lengths: np.ndarray, floor: int = 16) -> np.ndarray:
    """pow2 of each length, exactly (frexp's exponent of n - 1 is its bit length)."""
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


def _rows_bucket(n: int, full: int) -> int:
    """Rows of a call of `n` documents whose width holds at most `full` per call: a power of
    two, at least 1/16 of full's: at most five row counts per width, so that a job compiles a
    few executables per width, for at most 1/16 of a call's bytes of empty rows."""
    return max(pow2(n, 1), pow2(full, 1) // 16)


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
    input order (`window_device.device_functions`); the host copies back the window's counts, then its ids
    (about 2-4 bytes per token), once each. Rows with more tokens than the first pass keeps
    are encoded again at full width into the same buffer before that step. Reading, encoding
    and writing overlap: a thread reads up to 2 windows ahead, this thread dispatches a
    window's calls (asynchronous: the device works meanwhile) while a thread finishes the
    previous window and writes it."""
    import jax

    from . import native, staging

    nfc = mode == "exact" and tok.normalizes
    fns = device_functions()
    dtype = token_dtype(tok.vocab.n_vocab)

    def where(w: Window, i: int) -> str:
        return f"{paths[w.file_index]}:{int(w.positions[i])}"

    target = device or jax.devices()[0]
    tables = tok.tables(allowed_special, device)
    staged_path = staging.available(target)
    buffers = WindowBuffers(target)
    # (any normalizer: assume_nfc)
    encodes = CompiledEncodes(tables, target, mode=mode, block_size=block_size, assume_nfc=nfc)

    def encode_into(raw, at, w: Window, idx: np.ndarray, width: int, T: int, rows: int):
        """Documents `idx` of the window packed straight from its flat buffer into `rows` rows
        (on a CUDA GPU: into pinned memory, one DMA), encoded, and written into raw at `at` (a
        device scalar): ids [rows, T], then counts [rows]. Returns the new raw (the old one is
        donated) and the offset after them."""
        idx = np.ascontiguousarray(idx, np.int64)
        if staged_path and width > 0:
            staged = staging.stage_flat(w.data, w.offsets, idx, max_len=width, rows=rows, device=target)
            raw, _, at = staged.run(
                lambda data, lengths: encodes(data, lengths, raw, at, T=T), consumer=lambda out: out[1]
            )
            return raw, at
        data, lengths = native.cpu.pack_flat(w.data, w.offsets, idx, width, rows)
        if target != jax.devices()[0]:
            data, lengths = jax.device_put((data, lengths), target)
        raw, _, at = encodes(data, lengths, raw, at, T=T)
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
        encodes.prepare([(rows, width, T, raw.size) for _, width, T, rows, _ in plan])
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
            shapes = [(plan[call_of[g[0]]][1] + 1, max(pow2(len(g), 1), 8)) for g in groups]
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
        size = size_bucket(total)
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
        for window in in_background(windows, depth=2):
            if not window.ndocs:
                continue
            written.append(writer_thread.submit(finish, launch(window)))
            while len(written) > 1 or (written and written[0].done()):
                written.pop(0).result()  # re-raises a writer's error here
        for future in written:
            future.result()
