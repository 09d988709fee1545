"""ArrayRecord shards of the corpus job (`--format arrayrecord`, what grain reads): one record
per document, its ids as raw little-endian uint16/uint32; the sidecar as flat shards'. The
writer, the reader, and the two steps the Ray sink takes (`write_records`, `concat_records`).
Needs the optional array_record package."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from ..types import CorpusError
from .flat import _ShardWriter, as_tokens, sidecar_path

ARRAY_RECORD_FORMAT = "blockbpe-arrayrecord-v1"
WRITER_OPTIONS = "group_size:1"  # (a record per chunk: grain reads any document without its neighbours)


def native_module():
    """array_record's module; CorpusError naming the package when it is not installed."""
    try:
        from array_record.python import array_record_module
    except ImportError:
        raise CorpusError(
            "--format arrayrecord needs the array_record package (pip install array_record)"
        ) from None
    return array_record_module


def write_records(path: Path, data: np.ndarray, offsets: np.ndarray) -> None:
    """An ArrayRecord file of one record per document, document j = data[offsets[j]:offsets[j + 1]].

    Args:
        path: the file.
        data: the documents' ids back to back, in the shards' dtype.
        offsets: int64 offsets, one per document plus one.
    """
    writer = native_module().ArrayRecordWriter(str(path), WRITER_OPTIONS)
    try:
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            writer.write(data[a:b].tobytes())
    finally:
        writer.close()


def concat_records(paths: list[Path], out: Path) -> None:
    """The records of ArrayRecord files, in order, into one file (as `write_records` would
    have written them at once: the same options, so the same bytes).

    Args:
        paths: the files.
        out: the file written.
    """
    module = native_module()
    writer = module.ArrayRecordWriter(str(out), WRITER_OPTIONS)
    try:
        for p in paths:
            reader = module.ArrayRecordReader(str(p))
            try:
                for record in reader.read_all():
                    writer.write(record)
            finally:
                reader.close()
    finally:
        writer.close()


class ArrayRecordWriter(_ShardWriter):
    """ArrayRecord shards (what grain reads): `<prefix>_<k>.array_record`, one record per
    document = its ids as raw little-endian uint16/uint32 bytes; `<prefix>.json` as for flat
    shards (format blockbpe-arrayrecord-v1). Shards end after `shard_tokens` tokens or
    `shard_docs` documents, as FlatWriter's."""

    fmt = "arrayrecord"

    def __init__(self, prefix: Path, n_vocab: int, shard_tokens: int, shard_docs: int | None):
        self._native = native_module().ArrayRecordWriter
        self._out = None  # the open shard file
        super().__init__(prefix, n_vocab, shard_tokens, shard_docs)

    def add(self, ids: np.ndarray, counts: np.ndarray, window) -> None:
        data = as_tokens(ids, self.dtype)
        ends = np.cumsum(counts, dtype=np.int64).tolist()
        start = 0
        for end in ends:
            if self._out is None:
                path = self.prefix.parent / f"{self.prefix.name}_{len(self.shards):05d}.array_record"
                self.written.append(path)
                self._out = self._native(str(path), WRITER_OPTIONS)
                self._tokens = self._docs = 0
            self._out.write(data[start:end].tobytes())
            self._tokens += end - start
            self._docs += 1
            start = end
            if self._tokens >= self.shard_tokens or self._docs >= self.shard_docs:
                self._close()

    def _close(self) -> None:
        self._out.close()
        self._out = None
        self.shards.append(dict(file=self.written[-1].name, documents=self._docs, tokens=int(self._tokens)))

    def finish(self, meta: dict) -> dict:
        if self._out is not None:
            self._close()
        return super().finish(meta)

    def abort(self) -> None:
        if self._out is not None:
            self._out.close()
        super().abort()

    def _layout(self) -> dict:
        return dict(
            format=ARRAY_RECORD_FORMAT,
            dtype=self.dtype.name,
            byteorder="little",
            record="one per document: its ids as raw little-endian " + self.dtype.name,
        )


def read_array_records(prefix: str | os.PathLike) -> Iterator[np.ndarray]:
    """Every document's ids of an ArrayRecord output, in input order."""
    from array_record.python.array_record_module import ArrayRecordReader

    path = sidecar_path(prefix)
    meta = json.loads(path.read_text())
    if meta.get("format") != ARRAY_RECORD_FORMAT:
        raise CorpusError(f"{path}: not an ArrayRecord sidecar (format is not {ARRAY_RECORD_FORMAT!r})")
    for shard in meta["shards"]:
        reader = ArrayRecordReader(str(path.parent / shard["file"]))
        try:
            for record in reader.read_all():
                yield np.frombuffer(record, dtype=np.dtype(meta["dtype"]).newbyteorder("<"))
        finally:
            reader.close()
