"""Reading the corpus job's inputs: text/JSONL(.gz/.zst) files -> documents (`Doc`), with a one-line
CorpusError naming the file and line for every bad input (unreadable file, bad JSONL line,
missing field, invalid UTF-8)."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .. import native
from .background import in_background
from .inputs.compressed import READ_ERRORS, DecompressAhead, is_compressed, open_input
from .inputs.files import BlockBuffers, blocks_of_lines, input_sizes
from .inputs.lines import check_utf8, fast_block, line_documents, lines_of, one_line
from .types import CorpusError, Doc, Window

SPLITS_HELP = (
    "lines (one document per non-empty line), file (one per file), chunk:N (pieces of at most N bytes)"
)


def parse_split(text: str) -> tuple[str, int]:
    if text in ("lines", "file"):
        return text, 0
    if text.startswith("chunk:"):
        try:
            n = int(text[6:])
        except ValueError:
            n = 0
        if n >= 4:
            return "chunk", n
    raise CorpusError(f"--split {text!r}: expected {SPLITS_HELP}; N >= 4")


def chunk_cuts(data: bytes, n: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive pieces of at most n bytes, each ending on a UTF-8 character
    boundary, cut just before the last whitespace of the piece's second half when there is one
    (pre-tokenizer pieces start with their space, so such a cut changes few tokens)."""
    i, size = 0, len(data)
    while i < size:
        j = min(size, i + n)
        if j < size:
            ws = max(data.rfind(c, i + n // 2, j) for c in (b" ", b"\n", b"\t", b"\r"))
            if ws > i:
                j = ws
            else:
                while j > i and (data[j] & 0xC0) == 0x80:
                    j -= 1
                if j == i:  # cannot happen in valid UTF-8 with n >= 4
                    j = min(size, i + n)
        yield i, j
        i = j


# Input bytes per window (the unit of reading and of length sorting): each window costs the
# pipeline's threads a fixed share of Python work, which 16 MiB windows left on the critical path.
WINDOW_BYTES = 32 << 20
READ_THREADS = os.cpu_count() or 1  # threads that split and parse one block


def iter_documents(
    paths: Sequence[Path], split: str = "lines", chunk: int = 0, jsonl_field: str | None = None
) -> Iterator[Doc]:
    """The documents of the files, in order; CorpusError (file:line) on a bad input."""
    for w in iter_windows(paths, split, chunk, jsonl_field):
        for data, fi, pos in zip(w.blobs, w.file_indices.tolist(), w.positions.tolist()):
            yield Doc(data, fi, pos, len(data))


def iter_windows(
    paths: Sequence[Path],
    split: str = "lines",
    chunk: int = 0,
    jsonl_field: str | None = None,
    window_bytes: int = WINDOW_BYTES,
    threads: int | None = None,
    join=None,
) -> Iterator[Window]:
    """The documents of the files as windows of about `window_bytes` of input, in order (lines
    and JSONL joined into the engine's buffers while `join`, a corpus.engine.JoinInto, is open).

    Lines and JSONL are read a block at a time and split, checked and parsed per block by
    native code on `threads` threads (default READ_THREADS; ffi/core/jsonl.h), the GIL released.
    A block it gives up on goes through C-level Python calls (`corpus.inputs.lines.fast_block`) and, failing
    those, is re-read line by line (`corpus.inputs.lines.line_documents`), which raises the one-line file:line
    error: every path accepts exactly the same input and gives the same documents. Several
    compressed inputs are decompressed ahead of their turn, a few at once (corpus/inputs/compressed.py),
    and parquet inputs' row groups likewise (corpus/inputs/parquet.py); consecutive small plain inputs
    are read together into one window (`_small_inputs`)."""
    several = (jsonl_field is not None or split == "lines") and sum(map(is_compressed, paths)) > 1
    ahead = DecompressAhead(paths if several else [], window_bytes, blocks_of_lines)
    parquet = None
    if any(p.suffix == ".parquet" for p in paths):
        from .inputs.parquet import ParquetAhead  # (pyarrow only when asked for)

        parquet = ParquetAhead(paths, jsonl_field, window_bytes)
    try:
        yield from _windows(paths, split, chunk, jsonl_field, window_bytes, threads, join, ahead, parquet)
    finally:
        ahead.close()
        if parquet is not None:
            parquet.close()


# Plain inputs this small (and at most a quarter of a window) are read several to a window.
SMALL_INPUT = 1 << 20


def _windows(
    paths, split, chunk, jsonl_field, window_bytes, threads, join, ahead, parquet
) -> Iterator[Window]:
    threads, lines = threads or READ_THREADS, jsonl_field is not None or split == "lines"
    # what inputs not read ahead are read into, one after another (page-locked while the
    # device split takes blocks to the device straight from them)
    buffers = BlockBuffers(page_locked=lambda: _read_pool(join))
    # (small inputs' groups are read by a thread, a group ahead of their split here)
    grouped = "lines" if lines else "file" if split == "file" else None
    units = in_background(
        _inputs_read(paths, grouped, jsonl_field, window_bytes, threads), 1, "blockbpe-read"
    )
    try:
        for fi, group, read in units:
            if group and not lines:
                yield _small_files(paths, group, read)
                continue
            if group:
                yield from _small_inputs(
                    paths, group, read, jsonl_field, window_bytes, threads, join, buffers
                )
                continue
            path = paths[fi]
            if path.suffix == ".parquet":
                yield from parquet.windows(fi)
                continue
            if lines:
                taken = ahead.take(fi)
                yield from _line_windows(path, fi, jsonl_field, window_bytes, threads, join, taken or buffers)
                continue
            data = _whole(path)
            if split == "file":
                yield Window.of([data], np.zeros(1, np.int64), fi, len(data))
                continue
            cuts = list(chunk_cuts(data, chunk))
            for lo in range(0, len(cuts), max(1, window_bytes // max(chunk, 1))):
                part = cuts[lo : lo + max(1, window_bytes // max(chunk, 1))]
                yield Window.of(
                    [data[a:b] for a, b in part],
                    np.array([a for a, _ in part], np.int64),
                    fi,
                    sum(b - a for a, b in part),
                )
    finally:
        units.close()
        buffers.close()


def _read_pool(join):
    """The pool of page-locked memory the engine's device split wants blocks read into
    (DeviceSplit.read_pool), or None."""
    on_device = join.device_split if join is not None else None
    return on_device.read_pool() if on_device is not None else None


def _whole(path: Path) -> bytes:
    """A whole input (`--split file` and `chunk:N`), checked to be UTF-8."""
    try:
        with open_input(path) as f:
            data = f.read()
    except READ_ERRORS as e:
        raise CorpusError(f"{path}: cannot read: {one_line(e)}") from None
    check_utf8(data, path, None)
    return data


def _inputs_read(paths, grouped: str | None, field, window_bytes: int, threads: int) -> Iterator[tuple]:
    """The inputs in order: (index, None, None) for one read on its own, and for consecutive
    small plain inputs (None, their indices, the block read_files made of them, or None where
    it gave up or the native split cannot take the field). grouped: "lines" (lines and JSONL),
    "file" (`--split file`: the files as they are) or None (no groups)."""
    group, sizes, held, small = [], [], 0, min(SMALL_INPUT, window_bytes // 4)
    known = input_sizes(paths) if grouped else []
    for fi, path in enumerate([*paths, None]):
        plain = path is not None and grouped and not is_compressed(path) and path.suffix != ".parquet"
        size = known[fi] if plain else None  # (a pipe: read as a stream)
        if group and (size is None or size > small or held + size > window_bytes):
            read = None
            if len(group) > 1 and _native_field(field):
                names = [os.fsencode(paths[k]) for k in group]
                read = native.cpu.read_files(names, np.asarray(sizes, np.int64), threads, grouped == "lines")
            yield None, group, read
            group, sizes, held = [], [], 0
        if size is not None and size <= small:
            group.append(fi)
            sizes.append(size)
            held += size
        elif path is not None:
            yield fi, None, None


def _small_inputs(paths, group, read, field, window_bytes, threads, join, buffers) -> Iterator[Window]:
    """Small plain inputs read together as one block (`read`: read_files', natively, on threads),
    their documents one window (a window costs the engine milliseconds whatever its size: a
    window per file set the pace of a corpus of many small files). Where the native reader or
    split gives up (a file that cannot be read or grew, a block it cannot parse), each through
    its own reader."""
    if read is not None:
        block, first_line = read
        split = _split(block, field, threads, join)
        if split is not None:
            data, offsets, kept, _, sep_len, slot = split
            file_of = np.searchsorted(first_line, kept, "right") - 1
            positions = kept - first_line[file_of] + 1
            files = np.asarray(group, np.int64)[file_of]
            yield Window(data[: offsets[-1]], offsets, positions, files, len(block), sep_len, slot)
            return
    for fi in group:
        yield from _line_windows(paths[fi], fi, field, window_bytes, threads, join, buffers)


def _small_files(paths, group, read) -> Window:
    """Small inputs read together (`read`: read_files' block of the files as they are, each
    checked to be UTF-8, and where each starts) as one window of one document per file (`--split
    file`); where read_files gave up, each read alone (a file that is not UTF-8 is then the error
    naming it)."""
    if read is not None:
        block, starts = read
        return Window(block, starts, np.zeros(len(group), np.int64), np.asarray(group, np.int64), len(block))
    blobs = [_whole(paths[fi]) for fi in group]
    return Window.of(blobs, np.zeros(len(group), np.int64), np.asarray(group, np.int64), sum(map(len, blobs)))


def _native_field(field: str | None) -> bool:
    """Whether the native split can take the field name (one that is not valid UTF-8, a lone
    surrogate, is left to the Python paths)."""
    try:
        return field is None or field.encode("utf-8") is not None
    except UnicodeEncodeError:
        return False


def _split(block, field: str | None, threads: int, join):
    """The native split of a block of lines (ffi/core/jsonl.h), joined into the engine's buffer
    while `join` is open -> (data, offsets, line of each document, newlines, separator bytes,
    the engine's buffer or None), or None where it gives up. With the engine's device split on
    (`join.device_split`), the block is split on the device instead (corpus/device_split.py:
    the same rules, the same result, the documents left there), read back at once."""
    on_device = _device_split(join, field)
    if on_device is not None:
        return on_device.split(block, field)
    sep, take = (join and join.to) or (b"", None)
    taken = []  # the engine's buffer the documents are joined into

    def into(n: int) -> np.ndarray:
        taken.append(take(n))
        return taken[0].host

    split = native.cpu.split_documents(block, field, threads, sep, into if take else None)
    return None if split is None else (*split, len(sep), taken[0] if taken else None)


def _device_split(join, field: str | None):
    """The engine's corpus.device_split.DeviceSplit where it is on and takes the field, else None."""
    on_device = join.device_split if join is not None else None
    return on_device if on_device is not None and on_device.takes(field) else None


def _line_windows(path: Path, fi: int, field: str | None, window_bytes: int, threads: int, join, source):
    """`source`: (open file, its blocks) read ahead (DecompressAhead.take), else the BlockBuffers
    the file, opened here, is read into."""
    line_base = 0  # lines before this block
    native_field = _native_field(field)
    try:
        taken = isinstance(source, tuple)
        with source[0] if taken else open_input(path, fast=True) as f:
            if taken:
                blocks = source[1]
            else:  # (read ahead)
                blocks = in_background(blocks_of_lines(f, window_bytes, source), 1, "blockbpe-read")
            # Blocks split on the device are dispatched `in_flight` ahead of the one read back
            # (corpus/device_split.py); every other block is split here, in order, once those
            # before it are read back.
            pending: collections.deque = collections.deque()

            def settle(keep: int):
                """The windows of the oldest dispatched blocks, until `keep` are left."""
                while len(pending) > keep:
                    dispatched = pending.popleft()
                    split = dispatched.result()
                    if split is None:  # (the device gave up on it: the host reads it)
                        yield host_window(dispatched.block)
                    else:
                        yield split_window(split, dispatched.size)

            def split_window(split, consumed: int) -> Window:
                nonlocal line_base
                data, offsets, kept, newlines, sep_len, slot = split
                window = Window(
                    data[: offsets[-1]], offsets, kept + (line_base + 1), fi, consumed, sep_len, slot
                )
                line_base += newlines
                return window

            def host_window(block: bytes) -> Window:
                nonlocal line_base
                fast = fast_block(block, field)
                if fast is None:
                    docs = list(line_documents(block.split(b"\n"), path, line_base, field))
                    blobs = [d for d, _ in docs]
                    positions = np.array([p for _, p in docs], np.int64)
                else:
                    blobs, kept = fast
                    positions = kept + (line_base + 1)
                line_base += block.count(b"\n")
                return Window.of(blobs, positions, fi, len(block))

            try:
                for block in blocks:
                    on_device = _device_split(join, field) if native_field else None
                    if on_device is not None:
                        locked = not taken and source.page_locked(block)
                        pending.append(on_device.dispatch(block, field, locked))
                        yield from settle(on_device.in_flight - 1)
                        continue
                    yield from settle(0)
                    split = _split(block, field, threads, join) if native_field else None
                    if split is not None:
                        yield split_window(split, len(block))
                        continue
                    # (the reader's buffer is reused: the Python paths keep bytes)
                    yield host_window(bytes(block))
                yield from settle(0)
            finally:
                for dispatched in pending:  # (stopped early: the splits still read their slots)
                    dispatched.discard()
                blocks.close()  # the reading thread ends before the file closes
            return
    except READ_ERRORS as e:
        failure = e
    # A read error: the line-by-line reader meets it there and names the line (else: the fast reader's own).
    for _ in line_documents(lines_of(path), path, 0, field):
        pass
    raise CorpusError(f"{path}: cannot read: {one_line(failure)}")
