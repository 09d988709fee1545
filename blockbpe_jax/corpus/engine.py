"""The corpus job's engine: one window of documents (types.Window: a flat buffer and
offsets) -> encode calls planned by width (corpus/plan.py) -> ids on the device, compacted
there into input order in the shard dtype -> one copy back per window, handed to a writer
(corpus/shards/). Reading, encoding, copying back and writing overlap (a reader thread ahead, a
finishing thread and a writing thread behind). job.py drives it; see encode_documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .. import native, staging
from .background import in_background, map_in_background, stop_background
from .types import CorpusError, Window, check_positive
from .device import CompiledReads, CompiledWindows, WindowBuffers, compile_ahead, device_functions
from .device_split import DeviceSplit, wanted
from .device_normalizer import device_normalizer_available, document_bytes, encode_normalized_again
from .shards.flat import token_dtype
from .plan import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_PACK_WIDTH,
    PlannedCall,
    call_rows,
    first_pass_tokens,
    packed_calls,
    packing,
    plan_batches,
    window_calls,
)

# On the CPU backend compiles take the cores that encode: finalize's size is not guessed
# ahead there (tests turn the GPU's guess on).
LIKELY_SHAPES_ON_CPU = False
NO_ROWS = np.zeros(0, np.int32)  # (an unpacked window's packed rows)


class JoinInto:
    """Lets the reader join a block's documents straight into the corpus job's page-locked window
    buffers, a separator after each (`encode_documents` opens it when it packs short documents:
    planning then copies no bytes). open(sep, take): take(bytes) -> a
    staging.FlatSlot with room for them; until then and after close(), windows are plain.
    `device_split`: the job's corpus.device_split.DeviceSplit while the engine runs with the
    option on (the reader then splits blocks of lines on the device), else None."""

    def __init__(self):
        self.to = None  # (sep, take) while open: read once per block by the reading thread
        self.device_split = None

    def open(self, sep: bytes, take) -> None:
        self.to = (sep, take)

    def close(self) -> None:
        self.to = self.device_split = None


@dataclass
class WindowWork:
    """A window on its way through encode_documents' pipeline: what `plan_window` prepared,
    then (`launch`) the buffer its calls write into and its counts on their way back. Arrays
    "per document" are in plan order (`perm[k]` is the window's document k-th in the plan)."""

    window: Window
    plan: list[PlannedCall]
    slot: staging.FlatSlot  # the window's padded bytes, host and device (reused once its calls ran)
    flat: object  # the same on the device
    table: object  # the document table on the device: each call's rows (start in flat, length)
    end: int  # the id buffer's length the calls need
    perm: np.ndarray  # the window's documents in plan order
    kept: np.ndarray  # per document: the tokens its call's first pass keeps (its T)
    src: np.ndarray  # per document: where its ids start in the id buffer
    count_at: np.ndarray  # per document: where its count is in the id buffer
    positions: np.ndarray  # count_at by document in input order, padded to a bucketed length
    doc_start: np.ndarray  # by document in input order: its start in flat
    packed: np.ndarray  # int64[2, packed documents]: its row's start in the buffer, 1 if it opens its row
    raw: object = None  # (launch) the id buffer on the device
    counts: object = None  # (launch) the counts by document, being copied back


def encode_documents(
    tok, windows: Iterator[Window], writer, paths: Sequence[Path], *, join=None, **options
) -> None:
    """Encodes the documents window by window (within a window, sorted by length into calls of
    one power-of-two width; any length: max_tokens never cuts a document) and hands each
    window's ids, back to back in input order in the shard dtype, to `writer.add`
    (`WindowEncoder` says how; `options` are its own: mode, allowed_special, batch_bytes,
    max_docs, max_len, block_size, device, progress, pack_width, device_split,
    device_normalizer). `join`: the JoinInto the windows' reader was given (opened here when
    short documents are packed, and given the device split when that option is on)."""
    WindowEncoder(tok, writer, paths, **options).run(windows, join)


class WindowEncoder:
    """The corpus job's engine for one tokenizer, device and writer, its stages as methods.

    A window's bytes and a table of its documents in plan order go to the device once; its
    calls run as one FFI call (two when some rows are packed: `corpus.device.CompiledWindows`),
    each call's padded rows gathered from them there. On the device, a window's calls write
    into one buffer and one step puts their ids in input order; the host copies back the
    window's counts, then its ids (about 2-4 bytes per token), once each. Rows with more tokens
    than the first pass keeps are encoded again at full width into the same buffer before that
    step.

    `run` overlaps the stages: a thread reads and splits the documents of the next window while
    others plan the windows after it (`plan_window`: a window's host work; two at once when
    the ids stay in memory), this thread dispatches a window's calls (`launch`, asynchronous:
    the device works meanwhile) while a thread finishes the previous window (`finish`: its
    counts back, compaction dispatched), another copies back the ids of the one before
    (`store`) and another writes them (`write`)."""

    def __init__(
        self,
        tok,
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
        pack_width=DEFAULT_PACK_WIDTH,
        device_split=None,
        device_normalizer=None,
    ):
        import jax

        from ..ops.primitive import BLOCK_SIZES

        check_positive(("batch_bytes", batch_bytes), ("max_docs", max_docs), ("max_len", max_len))
        if block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
        self.tok, self.writer, self.paths, self.progress = tok, writer, paths, progress
        self.batch_bytes, self.max_docs, self.max_len = batch_bytes, max_docs, max_len
        self.allowed_special = allowed_special
        self.normalized_on_host = 0  # documents the device could not normalize (normalized_again)
        self.fns = device_functions()
        self.target = device or jax.devices()[0]
        # the GPU's plan: finalize's size guessed and compiled ahead
        self.speculate = self.target.platform != "cpu" or LIKELY_SHAPES_ON_CPU
        tables = tok.tables(allowed_special, device)
        self.buffers = WindowBuffers(self.target)
        self.reads = CompiledReads(self.target, token_dtype(tok.vocab.n_vocab))
        # (max_len: every call max_len wide, packed rows too)
        self.pack = packing(
            tok, mode, allowed_special, min(pack_width, max_len) if max_len and pack_width else pack_width
        )
        # Where the normalizer runs (docs/corpus.md, "The normalizer"): on the device, in the
        # encode calls' front end, where the executors apply it (`device_normalizer`: NFC,
        # Lowercase, NFC then Lowercase; the documents' bytes go as read), else (Lowercase then
        # NFC, or device_normalizer=False) on the host in plan_window, the calls then trusting
        # the text.
        normalizes = mode == "exact" and tok.normalizes
        self.device_normalizer = (
            normalizes
            and device_normalizer is not False
            and device_normalizer_available(tok, self.pack.sep if self.pack else b"")
        )
        self.host_normalizes = normalizes and not self.device_normalizer
        self.static = dict(mode=mode, block_size=block_size)
        self.encodes = CompiledWindows(tables, self.target, **self.static, assume_nfc=self.host_normalizes)
        self.trusted_encodes = None  # (device_normalizer: made for the first rows normalized on the host)
        self.packed_encodes = None  # (made when short documents are packed: only packed calls use it)
        if self.pack:
            self.packed_encodes = CompiledWindows(
                tok.tables(self.pack.allowed, device),
                self.target,
                sep_id=self.pack.sep_id,
                **self.static,
                assume_nfc=self.host_normalizes,
            )
        # Blocks of lines split on the device (corpus/device_split.py; by default on a GPU); not
        # where the host normalizes: plan_window normalizes the documents' host bytes.
        self.device_split = None
        if wanted(device_split, self.target) and not self.host_normalizes:
            self.device_split = DeviceSplit(self.target, self.buffers, self.pack.sep if self.pack else b"")
        self.stored = []  # futures of store(), oldest first (touched by finish's thread, then run's)
        self.written = []  # futures of write(), oldest first (touched by store's thread, then run's)
        self.write_failed: list = []
        self.reuse_ids = staging.available(self.buffers.device) and not getattr(writer, "keeps_ids", True)
        self.store_thread = self.write_thread = None  # (run's)

    def where(self, w: Window, i: int) -> str:
        return f"{self.paths[int(w.file_indices[i])]}:{int(w.positions[i])}"

    def normalized_documents(self, w: Window, docs=None) -> list[bytes]:
        """The window's documents (the indices `docs`, default all) normalized around the
        specials the calls accept (`Tokenizer.normalize` with allowed_special: matched in the
        raw text, their bytes kept, as HF does). A document whose normalized text spells a
        special that its raw text does not have (the calls would match it there) is refused:
        Tokenizer.encode_batch encodes such a text in parts, the job does not."""
        texts, parts = self.tok._normalize_around_specials(document_bytes(w, docs), self.allowed_special)
        if parts:
            k = min(parts)
            raise CorpusError(
                f"{self.where(w, int(k if docs is None else docs[k]))}: its normalized text spells a special"
                " token that the raw text does not have, which the corpus job cannot encode as HF does"
                " (Tokenizer.encode_batch can; or encode without allowed specials)"
            )
        return texts

    def host_table(self, rows: np.ndarray, entries: np.ndarray, size: int) -> np.ndarray:
        """A table of `size` entries (at least): rows int32[2, n] (start in flat, length) at
        `entries`; the other entries are empty rows."""
        table = self.buffers.table(size)
        table[:, entries] = rows
        return table

    def plan_window(self, w: Window):
        """A window's host work, on the planning thread (ahead of `launch`): the calls planned,
        the bytes padded (and short documents packed), the document table and where each
        document's ids and count will be."""
        import jax

        if not w.ndocs:
            return None
        lengths = w.lengths
        # (the width must fit the normalized text; on the device, a document over max_len may be
        # within it once normalized, as the host path measures it: that window is normalized here)
        too_long = self.max_len is not None and lengths.max() > self.max_len
        if self.host_normalizes or (self.device_normalizer and too_long):
            w = Window.of(self.normalized_documents(w), w.positions, w.file_index, w.consumed)
            lengths = w.lengths
        if self.max_len is not None and lengths.max() > self.max_len:
            i = int(np.argmax(lengths))
            raise CorpusError(
                f"{self.where(w, i)}: document of {int(lengths[i])} bytes, more than "
                f"--max-len {self.max_len} (use --split chunk:N)"
            )
        # (packed: a separator after each document; the reader's may hold them already)
        gap = len(self.pack.sep) - w.sep_len if self.pack else 0
        size = w.data.size + w.ndocs * gap
        if size >= 1 << 31:  # (the table's starts are int32)
            raise CorpusError(f"{self.where(w, 0)}: {size} bytes of documents in one window, 2 GiB or more")
        plan: list[PlannedCall] = []
        end = entries = 0
        alone = np.arange(w.ndocs)
        laid = []  # per call: first packed row (-1: a row per document), table entries it fills
        if self.pack:
            slot = w.slot or self.buffers.flat_slot(size)  # (the reader's: `join`, the same size)
            flat = slot.host
            into = None if w.slot else flat  # (None: the rows only)
            row_of_doc, packed_rows = native.cpu.pack_documents(
                w.data, w.offsets, self.pack.sep, self.pack.width, into
            )
            doc_start = w.offsets[:-1] - w.offsets[0] + np.arange(w.ndocs) * gap
            alone = np.flatnonzero(row_of_doc < 0)
            full = call_rows(self.pack.width, self.batch_bytes, self.max_docs)
            for docs, first_row, n_rows in packed_calls(row_of_doc, len(packed_rows), full):
                plan.append(
                    PlannedCall(docs, self.pack.width, self.pack.width, n_rows, end, entries, len(docs))
                )
                laid.append((first_row, n_rows))
                end += n_rows * self.pack.width + len(docs)
                entries += n_rows
        else:  # (a window the device split made holds its documents there: w.slot)
            slot = w.slot if w.slot is not None else self.buffers.flat_of(w.data)
            flat = slot.host
            doc_start = w.offsets[:-1]
            row_of_doc = packed_rows = NO_ROWS
        n_packed = sum(len(p.docs) for p in plan)
        for width, idx in plan_batches(lengths[alone], self.batch_bytes, self.max_docs, self.max_len):
            idx = alone[idx]
            T = first_pass_tokens(width)
            rows = len(idx)
            plan.append(PlannedCall(idx, width, T, rows, end, entries, 0))
            laid.append((-1, len(idx)))
            end += rows * (T + 1)
            entries += rows
        # per document, in plan order (the packed ones first): its call's T, where its ids and
        # its count are in raw (a packed one's: where its separator's position will be; its
        # ids follow the document before it in its row, or start the row), and the table's
        # entries (core/window_layout.h)
        perm = np.concatenate([p.docs for p in plan]).astype(np.int64, copy=False)
        calls = np.array(
            [(len(p.docs), p.T, p.rows, p.offset, p.entry, *rows) for p, rows in zip(plan, laid)], np.int64
        )
        table = self.buffers.table(entries)
        positions = np.zeros(self.buffers.doc_slots(len(perm)), np.int32)
        kept, src, count_at = per_doc = np.empty((3, len(perm)), np.int64)
        packed_docs = np.empty((2, n_packed), np.int64)  # (row's start in raw, 1: first in its row)
        native.cpu.layout_window(
            perm,
            calls,
            np.ascontiguousarray(doc_start),
            lengths,
            packed_rows,
            row_of_doc,
            self.pack.width if self.pack else 0,
            table,
            positions,
            per_doc,
            packed_docs,
        )
        # the window's one transfer of bytes, here, ahead of its calls
        return WindowWork(
            window=w,
            plan=plan,
            slot=slot,
            flat=slot.to_device(),
            table=jax.device_put(table, self.target),
            end=end,
            perm=perm,
            kept=kept,
            src=src,
            count_at=count_at,
            positions=positions,
            doc_start=doc_start,
            packed=packed_docs,
        )

    def launch(self, work: WindowWork) -> WindowWork:
        """Dispatches a planned window's calls (asynchronous) and the copy back of its counts."""
        plan, flat, table, positions = work.plan, work.flat, work.table, work.positions
        slots = self.buffers.raw_slots(work.end)
        calls = window_calls(plan)
        packed = calls[:, 5] > 0  # (packed rows have tables of their own: a call of their own)
        parts = [
            (step, calls[m])
            for step, m in ((self.packed_encodes, packed), (self.encodes, ~packed))
            if m.any()
        ]
        parts = [(step, c, self.buffers.workspace(step.scratch(c))) for step, c in parts]
        ahead = [step.ahead(flat.size, table.shape[1], slots, space) for step, _, space in parts]
        ahead += [self.reads.gather_ahead(slots, positions.size), self.reads.zeros_ahead(slots)]
        if self.speculate:  # (the ids of a window of about 4 bytes a token)
            ahead.append(
                self.reads.finalize_ahead(slots, positions.size, self.buffers.ids(work.window.data.size // 4))
            )
        compile_ahead(ahead)  # (a window's new executables compiled together, on threads)
        raw = self.buffers.take(slots, self.reads.zeros)
        for step, c, space in parts:
            raw = step(flat, table, raw, c, space)
        work.raw, work.counts = raw, self.reads.gather(raw, positions)
        work.counts.copy_to_host_async()
        return work

    def finish(self, work: WindowWork) -> None:
        """A launched window's counts back, its long rows encoded again, its ids compacted into
        input order on the device (`finalize`), and their copy back and writing queued."""
        import jax

        w, plan, flat, raw, end = work.window, work.plan, work.flat, work.raw, work.end
        perm, src, count_at = work.perm, work.src, work.count_at
        doc_start, packed = work.doc_start, work.packed
        n = len(perm)
        sizes = [len(p.docs) for p in plan]
        got = np.empty(n, np.int64)  # the counts in plan order from here on (core/window_layout.h)
        native.cpu.counts_in_plan_order(np.asarray(work.counts), perm, src, packed, got)
        widths = np.array([p.width for p in plan], np.int64)
        if self.device_normalizer:
            raw, end = encode_normalized_again(self, work, got, raw, end, widths)
        redo = np.flatnonzero(got > work.kept)
        if redo.size:  # more tokens than the first pass kept: these rows at full width
            call_of = np.repeat(np.arange(len(plan)), sizes)
            groups = np.split(redo, np.flatnonzero(np.diff(call_of[redo])) + 1)
            again = np.zeros((len(groups), 6), np.int64)  # window_calls' rows: width + 1 ids a row
            for k, g in enumerate(groups):
                width = plan[call_of[g[0]]].width
                again[k, :4] = len(g), width, width + 1, end
                r = np.arange(len(g))
                src[g], count_at[g] = end + r * (width + 1), end + len(g) * (width + 1) + r
                end += len(g) * (width + 2)
            again[:, 4] = np.cumsum(again[:, 0]) - again[:, 0]  # each group's first table entry
            if end > raw.size:
                raw = self.fns.grow(raw, size=self.buffers.grown(end))
            docs = perm[redo]
            rows = np.stack([doc_start[docs], w.lengths[docs]])
            table = jax.device_put(self.host_table(rows, np.arange(len(docs)), len(docs)), self.target)
            raw = self.encodes(flat, table, raw, again, self.buffers.workspace(self.encodes.scratch(again)))
            positions = np.zeros(self.buffers.doc_slots(n), np.int32)
            positions[: redo.size] = count_at[redo]
            got[redo] = np.asarray(self.reads.gather(raw, positions))[: redo.size]
        counts = np.empty(n, np.int64)
        layout = np.empty((2, self.buffers.doc_slots(n)), np.int32)
        calls = np.stack([sizes, widths], axis=1).astype(np.int64)
        bad, total, held = native.cpu.compaction_layout(got, src, perm, calls, counts, layout)
        if bad >= 0:
            self.buffers.give_back(raw)
            width = int(calls[np.searchsorted(np.cumsum(sizes), bad, side="right"), 1])
            raise CorpusError(
                f"{self.where(w, int(perm[bad]))}: tokenization failed (count {int(got[bad])}, width {width + 1})"
            )
        size = self.buffers.ids(total)
        layout[:, held:] = size
        ids = self.reads.finalize(raw, layout, size)
        # The copy back (of the first `total` ids only) is made on the writing thread (at most
        # two windows queued), so that this one takes the next window's counts meanwhile.
        while len(self.stored) > 1:
            self.stored.pop(0).result()  # re-raises a write's error here
        self.stored.append(self.store_thread.submit(self.store, ids, total, counts, w, raw, work.slot))

    def store(self, ids, total: int, counts: np.ndarray, w: Window, raw, slot: staging.FlatSlot) -> None:
        # (into a kept page-locked buffer where the writer copies the ids out: one DMA, no
        # fresh memory's page faults, no second copy)
        into = self.buffers.host_ids(ids.size * ids.dtype.itemsize) if self.reuse_ids else None
        host_ids = staging.read_back([ids], [total], [into])[0]
        self.buffers.give_back(raw)
        # Every call that reads the window's bytes has run (on the CPU backend `flat` may be
        # this very memory), so the next windows may reuse it.
        self.buffers.give_back_flat(slot)
        if self.write_failed:  # (the windows queued behind a failed write are not written)
            return
        # (the write on a thread of its own: the next window's ids come back meanwhile)
        while len(self.written) > 1:
            self.written.pop(0).result()  # re-raises a write's error here
        self.written.append(self.write_thread.submit(self.write, host_ids, counts, w, total, into))

    def write(self, host_ids: np.ndarray, counts: np.ndarray, w: Window, total: int, into) -> None:
        if self.write_failed:
            return

        def done() -> None:  # (the ids are out of `into`: on a writing thread of FlatWriter's)
            if into is not None:
                self.buffers.give_back_ids(into)
            if self.progress is not None:
                self.progress.update(w.consumed, w.ndocs, total)

        try:
            if getattr(self.writer, "writes_later", False):
                self.writer.add(host_ids, counts, w, done)
            else:
                self.writer.add(host_ids, counts, w)
                done()
        except BaseException:
            self.write_failed.append(True)
            raise

    def run(self, windows: Iterator[Window], join: JoinInto | None = None) -> None:
        """Every window through the stages, overlapped; a stage's error re-raised here."""
        from concurrent.futures import ThreadPoolExecutor

        # Windows planned at once (plan_window's host work is mostly native, the GIL released):
        # two when the ids stay in memory (a writer with `writes_files = False`); one beside a
        # writer of files, whose one thread's copy into the page cache bounds the job and slows
        # with a second planner's memory traffic.
        plan_threads = 1 if getattr(self.writer, "writes_files", True) else 2
        stop_reading = None
        if join is not None and not self.host_normalizes:
            if self.pack:  # (the reader joins each block into a buffer of the pool)
                join.open(self.pack.sep, self.buffers.flat_slot)
            join.device_split = self.device_split
        try:
            # (the writing thread outlives the storing one, which outlives the finishing one:
            # each submits to the next)
            with (
                ThreadPoolExecutor(1, "blockbpe-write") as self.write_thread,
                ThreadPoolExecutor(1, "blockbpe-store") as self.store_thread,
                ThreadPoolExecutor(1, "blockbpe-finish") as finish_thread,
            ):
                finished = []  # futures of finish(), oldest first
                # (windows are split on one thread and planned on others: this one only dispatches)
                split = in_background(windows, depth=1, name="blockbpe-split")
                stop_reading = split
                # (three windows planned or being planned ahead of this one, four at times with two)
                ahead = 2 if plan_threads == 1 else 1
                for planned in map_in_background(
                    self.plan_window, split, plan_threads, ahead, "blockbpe-plan"
                ):
                    if planned is None:  # (a window without documents)
                        continue
                    finished.append(finish_thread.submit(self.finish, self.launch(planned)))
                    while len(finished) > 1 or (finished and finished[0].done()):
                        finished.pop(0).result()  # re-raises a finishing or writing error here
                for future in finished:
                    future.result()
                for future in self.stored:
                    future.result()
                for future in self.written:
                    future.result()
                if getattr(self.writer, "writes_later", False):
                    self.writer.drain()  # (its queued writes, and their progress, before the job returns)
        finally:
            # (a job that stopped early returns once its reader has stopped: the device split's
            # blocks in flight are waited for and their buffers given back)
            if stop_reading is not None:
                stop_background(stop_reading)
            if join is not None:
                join.close()
