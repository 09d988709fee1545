"""ArrayRecord shards of the corpus job (`--format arrayrecord`, what grain reads): one record
per document, its ids as raw little-endian uint16/uint32; the sidecar as flat shards'. Needs the
optional array_record package."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from ..types import CorpusError
from .flat import _ShardWriter, as_tokens, sidecar_path

ARRAY_RECORD_FORMAT = "blockbpe-arrayrecord-v1"


class ArrayRecordWriter(_ShardWriter):
    """ArrayRecord shards (what grain reads): `<prefix>_<k>.array_record`, one record per
    document = its ids as raw little-endian uint16/uint32 bytes; `<prefix>.json` as for flat
    shards (format blockbpe-arrayrecord-v1). Shards end after `shard_tokens` tokens or
    `shard_docs` documents, as FlatWriter's."""

    fmt = "arrayrecord"

    def __init__(self, prefix: Path, n_vocab: int, shard_tokens: int, shard_docs: int | None):
        try:
            from array_record.python.array_record_module import ArrayRecordWriter as Native
        except ImportError:
            raise CorpusError(
                "--format arrayrecord needs the array_record package (pip install array_record)"
            ) from None
        self._native = Native
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
                self._out = self._native(str(path), "group_size:1")
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
