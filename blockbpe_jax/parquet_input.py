"""Parquet inputs of the corpus job (with pyarrow): a string column read as windows of the
column's own Arrow buffers (documents.iter_windows calls this for a .parquet path)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .documents import Window, one_line
from .shards import CorpusError


def parquet_windows(path: Path, fi: int, field: str | None, window_bytes: int) -> Iterator[Window]:
    """A parquet file's string column `field`, in windows of about window_bytes; position = row.
    The documents are the column's Arrow buffers (UTF-8 bytes + offsets), checked by Arrow's
    own UTF-8 validation: no Python object per row."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(
            f"{path}: reading parquet needs the pyarrow package (pip install pyarrow)"
        ) from None
    if field is None:
        raise CorpusError(f"{path}: a parquet input needs --field COLUMN")
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise CorpusError(f"{path}: cannot read parquet: {one_line(e)}") from None
    if field not in pf.schema_arrow.names:
        raise CorpusError(
            f"{path}: no column {field!r} (--field); columns: {', '.join(pf.schema_arrow.names)}"
        )
    kind = pf.schema_arrow.field(field).type
    is_view = getattr(pa.types, "is_string_view", lambda t: False)  # (pyarrow >= 16)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind)):
        raise CorpusError(f"{path}: column {field!r} is {kind}, not a string")
    meta = pf.metadata
    rows_per_batch = 65536
    if meta is not None and meta.num_rows > 0 and meta.num_row_groups > 0:
        col = pf.schema_arrow.get_field_index(field)
        size = sum(meta.row_group(g).column(col).total_uncompressed_size for g in range(meta.num_row_groups))
        rows_per_batch = max(1, min(1 << 20, window_bytes * meta.num_rows // max(size, 1)))
    row = 0
    try:
        for batch in pf.iter_batches(columns=[field], batch_size=rows_per_batch):
            column = batch.column(0)
            if column.null_count:
                first = row + int(np.flatnonzero(np.asarray(column.is_null()))[0])
                raise CorpusError(f"{path}: row {first}: column {field!r} is null")
            try:
                column.validate(full=True)
            except pa.ArrowInvalid as e:
                raise CorpusError(f"{path}: column {field!r} is not valid UTF-8: {one_line(e)}") from None
            data, offsets = arrow_strings(column.cast(pa.large_string()))
            yield Window(data, offsets, np.arange(row, row + len(column), dtype=np.int64), fi, len(data))
            row += len(column)
    except CorpusError:
        raise
    except Exception as e:  # noqa: BLE001
        raise CorpusError(f"{path}: cannot read parquet: {one_line(e)}") from None


def arrow_strings(column) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 bytes, int64 offsets from 0) of an Arrow large_string array without nulls: views of
    its buffers (offsets rebased when the array is a slice)."""
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    return data[lo:hi], offsets - lo
