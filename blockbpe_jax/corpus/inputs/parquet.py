"""Parquet inputs of the corpus job (with pyarrow): a string column read as windows of the
column's own Arrow buffers. Row groups decode independently and without the GIL, so the
parquet inputs' row groups are read on several threads ahead of their turn, in input order
(one thread decodes a column at a few hundred MB/s: a fraction of what the job encodes); a row
group too large to hold whole is read in batches by a thread of its own. An Arrow column already
in memory (`corpus.job.encode_arrow`) is cut into windows the same way (`column_windows`)."""

from __future__ import annotations

import collections
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from ..background import in_background, map_in_background, stop_background
from ..types import Window
from .lines import one_line
from ..types import CorpusError

THREADS = max(1, min(8, (os.cpu_count() or 1) // 2))  # row groups decoded at once
BYTES_AHEAD = 1 << 30  # the decoded column bytes read ahead of the consumer (at least one task)
LARGE_GROUP = 256 << 20  # a row group this large is read batch by batch, by a thread of its own
LARGE_DEPTH = 2  # batches such a thread reads ahead of the consumer


class _Task(NamedTuple):
    fi: int
    path: Path
    meta: object  # the file's FileMetaData (its footer, read once)
    row: int  # the file's row of the task's first row
    groups: list  # consecutive row groups (one, when it is a LARGE_GROUP)
    nbytes: int  # their column's uncompressed bytes (metadata)
    large: bool
    error: CorpusError | None = None  # the file cannot be read: raised at its turn

    def held(self, window_bytes: int) -> int:
        """The bytes it holds while read ahead (a large group: its thread's batches)."""
        return (LARGE_DEPTH + 2) * window_bytes if self.large else self.nbytes


class ParquetAhead:
    """The windows of the parquet inputs among `paths` (`windows(fi)`, taken in input order):
    consecutive row groups of about a window's bytes per task, THREADS tasks decoded at once
    within BYTES_AHEAD; a LARGE_GROUP read in batches by a thread of its own, within the same
    budget. A file's error (no pyarrow, not parquet, no such column, a null, invalid UTF-8) is
    raised at its turn."""

    def __init__(self, paths: Sequence[Path], field: str | None, window_bytes: int):
        self.field, self.window_bytes = field, window_bytes
        self._plans = ((fi, p) for fi, p in enumerate(paths) if p.suffix == ".parquet")
        self._tasks: collections.deque = collections.deque()  # planned, not yet submitted
        self._ahead: collections.deque = collections.deque()  # (task, future / batches / None)
        self._held = 0  # bytes of the tasks read ahead
        self._pool = ThreadPoolExecutor(THREADS, "blockbpe-parquet")

    def windows(self, fi: int) -> Iterator[Window]:
        self._top_up()
        while self._ahead and self._ahead[0][0].fi < fi:  # (inputs never taken)
            self._pop()
        while self._ahead and self._ahead[0][0].fi == fi:
            task, work = self._pop()
            if task.error is not None:
                raise task.error
            if task.large:
                yield from work
                continue
            parts = work.result()
            if isinstance(parts, CorpusError):
                raise parts
            yield from cut_windows(parts, task.fi, self.window_bytes)

    def close(self) -> None:
        for task, work in self._ahead:
            if task.large:
                stop_background(work)
            elif work is not None:
                work.cancel()
        # (no thread left inside pyarrow when the process ends)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._ahead.clear()

    def _pop(self):
        item = self._ahead.popleft()
        self._held -= item[0].held(self.window_bytes)
        self._top_up()
        return item

    def _top_up(self) -> None:
        while True:
            if not self._tasks:
                plan = next(self._plans, None)
                if plan is None:
                    return
                self._tasks.extend(self._plan(*plan))
                continue
            task = self._tasks[0]
            if self._ahead and self._held + task.held(self.window_bytes) > BYTES_AHEAD:
                return
            self._tasks.popleft()
            if task.error is not None:
                work = None
            elif task.large:
                work = in_background(self._batches(task), LARGE_DEPTH, "blockbpe-parquet-large")
            else:
                work = self._pool.submit(self._read, task)
            self._ahead.append((task, work))
            self._held += task.held(self.window_bytes)

    def _open(self, path: Path, metadata=None):
        """(the ParquetFile, the column's index); CorpusError where pyarrow is missing, or the
        file or the column is not what the job reads."""
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CorpusError(
                f"{path}: reading parquet needs the pyarrow package (pip install pyarrow)"
            ) from None
        if self.field is None:
            raise CorpusError(f"{path}: a parquet input needs --field COLUMN")
        try:
            pf = pq.ParquetFile(path, metadata=metadata)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise CorpusError(f"{path}: cannot read parquet: {one_line(e)}") from None
        names = pf.schema_arrow.names
        if self.field not in names:
            raise CorpusError(f"{path}: no column {self.field!r} (--field); columns: {', '.join(names)}")
        kind = pf.schema_arrow.field(self.field).type
        if not _is_string(kind):
            raise CorpusError(f"{path}: column {self.field!r} is {kind}, not a string")
        return pf, names.index(self.field)

    def _plan(self, fi: int, path: Path) -> list[_Task]:
        """The file's tasks: its row groups gathered up to a window's bytes; one task holding the
        CorpusError where the file cannot be read."""
        try:
            pf, col = self._open(path)
        except CorpusError as e:
            return [_Task(fi, path, None, 0, [], 0, False, e)]
        meta, tasks, groups, nbytes, row, start = pf.metadata, [], [], 0, 0, 0
        pf.close()
        for g in range(meta.num_row_groups):
            size = meta.row_group(g).column(col).total_uncompressed_size
            rows = meta.row_group(g).num_rows
            if size >= LARGE_GROUP:
                if groups:
                    tasks.append(_Task(fi, path, meta, start, groups, nbytes, False))
                tasks.append(_Task(fi, path, meta, row, [g], size, True))
                groups, nbytes, start = [], 0, row + rows
            else:
                if groups and nbytes + size > self.window_bytes:
                    tasks.append(_Task(fi, path, meta, start, groups, nbytes, False))
                    groups, nbytes, start = [], 0, row
                groups.append(g)
                nbytes += size
            row += rows
        if groups:
            tasks.append(_Task(fi, path, meta, start, groups, nbytes, False))
        return tasks

    def _read(self, task: _Task):
        """(on a pool thread) The task's column checked (`checked_strings`), or the CorpusError."""
        path = task.path
        try:
            pf, _ = self._open(path, task.meta)
            try:
                column = pf.read_row_groups(task.groups, columns=[self.field], use_threads=False).column(0)
            except Exception as e:  # noqa: BLE001
                raise CorpusError(f"{path}: cannot read parquet: {one_line(e)}") from None
            finally:
                pf.close()
            return checked_strings(column.chunks, path, f"column {self.field!r}", task.row)
        except CorpusError as e:
            return e

    def _batches(self, task: _Task) -> Iterator[Window]:
        """A large row group, batch by batch of about window_bytes (its thread's)."""
        path = task.path
        pf, _ = self._open(path, task.meta)
        rows = task.meta.row_group(task.groups[0]).num_rows
        rows = max(1, min(1 << 20, self.window_bytes * rows // max(task.nbytes, 1)))
        row = task.row
        try:
            batches = pf.iter_batches(rows, task.groups, [self.field], use_threads=False)
            for batch in batches:
                yield from cut_windows(
                    checked_strings([batch.column(0)], path, f"column {self.field!r}", row),
                    task.fi,
                    self.window_bytes,
                )
                row += batch.num_rows
        except CorpusError:
            raise
        except Exception as e:  # noqa: BLE001
            raise CorpusError(f"{path}: cannot read parquet: {one_line(e)}") from None
        finally:
            pf.close()


def checked_strings(chunks: list, where, what: str, row: int) -> list[tuple]:
    """A string column's chunks (`row`: the first's row; pyarrow gives one chunk per read unless
    its strings pass 2 GiB) checked (no nulls, valid UTF-8) -> (bytes, offsets, first row) of
    each; the CorpusError names `where` (the file), the row and `what` (the column)."""
    import pyarrow as pa

    parts = []
    for chunk in chunks:
        if chunk.null_count:
            first = row + int(np.flatnonzero(np.asarray(chunk.is_null()))[0])
            raise CorpusError(f"{where}: row {first}: {what} is null")
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as e:
            raise CorpusError(f"{where}: {what} is not valid UTF-8: {one_line(e)}") from None
        parts.append((*arrow_strings(chunk.cast(pa.large_string())), row))
        row += len(chunk)
    return parts


def cut_windows(parts: list, fi: int, window_bytes: int) -> Iterator[Window]:
    """Each (bytes, offsets, first row) as windows of about window_bytes (views)."""
    for data, offsets, row in parts:
        a, rows = 0, len(offsets) - 1
        while a < rows:  # (a row larger than a window is a window)
            b = max(a + 1, int(np.searchsorted(offsets, offsets[a] + window_bytes, "right")) - 1)
            lo, hi = int(offsets[a]), int(offsets[b])
            positions = np.arange(row + a, row + b, dtype=np.int64)
            yield Window(data[lo:hi], offsets[a : b + 1] - lo, positions, fi, hi - lo)
            a = b


def column_windows(column, window_bytes: int) -> Iterator[Window]:
    """An Arrow string column in memory (an Array or ChunkedArray of string, large_string or
    string_view) as windows of views of its buffers (`corpus.job.encode_arrow`): cut into pieces of
    about window_bytes, consecutive small chunks (a datasets.Dataset's are of 1000 rows) copied
    together into one, as each window costs the engine milliseconds; the pieces checked and
    joined on THREADS threads, in order. TypeError for anything else, CorpusError naming the row
    of a null."""
    import pyarrow as pa

    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        raise TypeError(
            f"encode_arrow: expected a pyarrow Array or ChunkedArray, got {type(column).__name__}"
        )
    if not _is_string(column.type):
        raise TypeError(f"encode_arrow: the column is {column.type}, not a string column")
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]

    def pieces() -> Iterator[tuple[int, list]]:  # (first row, slices to join), in order
        group, held, row = [], 0, 0
        for chunk in chunks:
            step = max(1, -(-len(chunk) // max(1, -(-chunk.nbytes // window_bytes))))
            for a in range(0, len(chunk), step):
                piece = chunk.slice(a, step)
                if group and held + piece.nbytes > window_bytes:
                    yield row, group
                    row, group, held = row + sum(map(len, group)), [], 0
                group.append(piece)
                held += piece.nbytes
        if group:
            yield row, group

    def checked(item) -> list:
        row, group = item
        one = group[0] if len(group) == 1 else pa.concat_arrays(group)
        return checked_strings([one], "encode_arrow", "the column", row)

    ready = map_in_background(checked, pieces(), THREADS, 2, "blockbpe-arrow")
    try:
        for parts in ready:
            yield from cut_windows(parts, 0, window_bytes)
    finally:
        stop_background(ready)


def _is_string(kind) -> bool:
    import pyarrow as pa

    is_view = getattr(pa.types, "is_string_view", lambda t: False)  # (pyarrow >= 16)
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind)


def arrow_strings(column) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 bytes, int64 offsets from 0) of an Arrow large_string array without nulls: views of
    its buffers (offsets rebased when the array is a slice)."""
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    return data[lo:hi], offsets - lo
