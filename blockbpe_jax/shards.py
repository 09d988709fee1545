"""Layouts of the corpus job (`blockbpe_jax/corpus.py`): flat token shards and ArrayRecord
shards, their writers, a reader and a consistency check; the flat layout in memory. (The
padded .npz/.npy layout: padded_shards.py.)

Flat layout, for `<prefix>` = DIR/NAME:
    NAME_00000.bin   the shard's documents' token ids back to back, raw little-endian uint16
                     (n_vocab <= 65536) or uint32: np.memmap(path, dtype=sidecar["dtype"])
    NAME_00000.idx   int64[n_docs + 1] offsets into the .bin, in tokens (idx[0] == 0,
                     idx[-1] == tokens): document j is bin[idx[j]:idx[j + 1]]
    NAME.json        the sidecar: dtype, vocabulary, inputs, shards with doc and token counts;
                     written last, so its presence marks a complete output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

FLAT_FORMAT = "blockbpe-flat-v1"
ARRAY_RECORD_FORMAT = "blockbpe-arrayrecord-v1"


class CorpusError(ValueError):
    """A bad input or output of the corpus job; the message is one line naming the file (and
    line or document)."""


class VerifyError(CorpusError):
    """The shards do not hold what they should (corrupt file, ids that differ from the
    reference)."""


def token_dtype(n_vocab: int) -> np.dtype:
    return np.dtype("<u2") if n_vocab <= 65536 else np.dtype("<u4")


def as_tokens(ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """ids (non-negative) in the shards' dtype, contiguous: int32 ids as uint32 are the same
    bytes, viewed rather than copied (the writer's thread copies every token once less)."""
    if ids.dtype.kind == "i" and ids.dtype.itemsize == dtype.itemsize and ids.dtype.byteorder in "=<":
        ids = ids.view(dtype)
    return np.ascontiguousarray(ids, dtype)


def flat_names(prefix: Path, k: int) -> tuple[Path, Path]:
    return (prefix.parent / f"{prefix.name}_{k:05d}.bin", prefix.parent / f"{prefix.name}_{k:05d}.idx")


def sidecar_path(prefix: str | os.PathLike) -> Path:
    """`<prefix>.json`; also accepts the sidecar's own path."""
    p = Path(prefix).expanduser()
    return p if p.suffix == ".json" else p.parent / f"{p.name}.json"


def check_output(directory: Path, name: str, overwrite: bool, fmt: str) -> None:
    """Refuses (or, with overwrite, clears) an existing output of this prefix."""
    if fmt in ("flat", "arrayrecord"):
        old = (
            [directory / f"{name}.json"]
            + sorted(directory.glob(f"{name}_[0-9]*.bin"))
            + sorted(directory.glob(f"{name}_[0-9]*.idx"))
            + sorted(directory.glob(f"{name}_[0-9]*.array_record"))
        )
    else:
        old = [directory / f"{name}manifest.json"]
    old = [p for p in old if p.exists()]
    if old and not overwrite:
        raise CorpusError(f"{old[0]}: output exists (use --overwrite or another --output)")
    for p in old if fmt != "npz" and fmt != "npy" else ():
        p.unlink()


class _ShardWriter:
    """What the two shard writers share: the dtype, the shard limits, the list of shards and of
    files written (removed by `abort`), and the sidecar `finish` writes."""

    keeps_ids = False  # add() copies the ids out: the caller may reuse their buffer

    def __init__(self, prefix: Path, n_vocab: int, shard_tokens: int, shard_docs: int | None):
        self.prefix, self.dtype = prefix, token_dtype(n_vocab)
        self.shard_tokens, self.shard_docs = shard_tokens, shard_docs or 2**62
        self.shards: list[dict] = []
        self.written: list[Path] = []
        self._out = None  # the open shard file

    def _layout(self) -> dict:
        """The sidecar's format fields (before the job's meta)."""
        raise NotImplementedError

    def finish(self, meta: dict) -> dict:
        if self._out is not None:
            self._close()
        sidecar = dict(**self._layout(), **meta, shards=self.shards)
        sidecar["documents"] = sum(s["documents"] for s in self.shards)
        sidecar["tokens"] = sum(s["tokens"] for s in self.shards)
        sidecar_path(self.prefix).write_text(json.dumps(sidecar, indent=2) + "\n")
        return sidecar

    def abort(self) -> None:
        if self._out is not None:
            self._out.close()
        for p in self.written:
            p.unlink(missing_ok=True)


class FlatWriter(_ShardWriter):
    """Streams documents into flat shards of at most `shard_tokens` tokens (a document is never
    split; one longer than that gets a shard of its own) and `shard_docs` documents."""

    fmt = "flat"

    RESERVE = 256 << 20  # the most bytes reserved ahead of the writes (native.cpu.reserve_file)

    def _open(self) -> None:
        bin_path, _ = flat_names(self.prefix, len(self.shards))
        self._out = open(bin_path, "wb")
        self.written.append(bin_path)
        self._offsets, self._tokens, self._ndocs, self._reserved = [np.zeros(1, np.int64)], 0, 0, 0

    def add(self, ids: np.ndarray, counts: np.ndarray, window) -> None:
        """ids: the documents' tokens back to back; counts: tokens per document."""
        ends = np.cumsum(counts, dtype=np.int64)
        start = 0
        while start < len(counts):
            if self._out is None:
                self._open()
            base = int(ends[start - 1]) if start else 0
            # documents that fit under the token limit; a shard holds at least one
            fit = int(np.searchsorted(ends[start:] - base, self.shard_tokens - self._tokens, "right"))
            take = min(len(counts) - start, self.shard_docs - self._ndocs, fit)
            if take == 0 and self._ndocs == 0:
                take = 1
            if take:
                end = int(ends[start + take - 1])
                tokens = as_tokens(ids[base:end], self.dtype)
                self._reserve(self._tokens * self.dtype.itemsize + tokens.nbytes)
                self._out.write(tokens.data)
                self._offsets.append(self._tokens + ends[start : start + take] - base)
                self._tokens += end - base
                self._ndocs += take
                start += take
            if start < len(counts):
                self._close()

    def _reserve(self, end: int) -> None:
        """The file's blocks allocated up to `end` and ahead of it, by as much as it holds up to
        RESERVE (`_reserved` -1: the file system cannot; plain writes)."""
        if 0 <= self._reserved < end:
            from . import native

            upto = min(2 * end, end + self.RESERVE)
            ok = native.cpu.reserve_file(self._out.fileno(), self._reserved, upto - self._reserved)
            self._reserved = upto if ok else -1

    def _close(self) -> None:
        if self._reserved > 0:  # (the reserved bytes past the last write cut off)
            self._out.truncate(self._tokens * self.dtype.itemsize)
        self._out.close()
        self._out = None
        bin_path, idx_path = flat_names(self.prefix, len(self.shards))
        offsets = np.concatenate(self._offsets).astype("<i8")
        offsets.tofile(idx_path)
        self.written.append(idx_path)
        self.shards.append(
            dict(bin=bin_path.name, idx=idx_path.name, documents=len(offsets) - 1, tokens=int(self._tokens))
        )

    def _layout(self) -> dict:
        return dict(format=FLAT_FORMAT, dtype=self.dtype.name, byteorder="little", idx_dtype="int64")


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


class ArraysWriter:
    """The flat layout in memory (`encode_files_to_arrays`): the ids back to back in one array
    that grows in place, and the documents' offsets."""

    keeps_ids, writes_files = False, False  # (window_encode plans two windows at once beside it)

    def __init__(self, n_vocab: int, input_bytes: int):
        self.dtype = token_dtype(n_vocab)
        # (room for 2 bytes per token: untouched pages of a generous guess cost no memory)
        self.ids = np.empty(max(input_bytes // 2, 1 << 20), self.dtype)
        self.ends, self.tokens = [np.zeros(1, np.int64)], 0

    def add(self, ids: np.ndarray, counts: np.ndarray, window) -> None:
        from . import native  # (it imports JAX: not when this module is imported)

        n = self.tokens + len(ids)
        if n > len(self.ids):  # (the inputs' size unknown, or a poor guess: twice the room)
            # (not ndarray.resize: it zero-fills the new room with the GIL held, which stalled
            # every other thread of the job for tens of milliseconds at a time)
            grown = np.empty(max(n, 2 * len(self.ids)), self.dtype)
            native.cpu.copy_bytes(grown[: self.tokens].view(np.uint8), self.ids[: self.tokens].view(np.uint8))
            self.ids = grown
        # (on threads: one thread's copy into fresh pages, their faults, would set the job's pace)
        native.cpu.copy_bytes(
            self.ids[self.tokens : n].view(np.uint8), as_tokens(ids, self.dtype).view(np.uint8)
        )
        self.ends.append(self.tokens + np.cumsum(counts, dtype=np.int64))
        self.tokens = n

    def finish(self, meta: dict) -> tuple[np.ndarray, np.ndarray]:
        self.ids.resize(self.tokens, refcheck=False)
        return self.ids, np.concatenate(self.ends)

    def abort(self) -> None:
        self.ids = None


# --------------------------------------------------------------------------------------------
# Reading and checking flat shards
# --------------------------------------------------------------------------------------------


def load_sidecar(prefix: str | os.PathLike) -> tuple[dict, Path]:
    """(sidecar, directory) of a flat output; CorpusError when missing or not ours."""
    path = sidecar_path(prefix)
    if Path(prefix).is_dir():
        path = Path(prefix) / "shard.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise CorpusError(
            f"{path}: no such sidecar (give the PREFIX that encode wrote, e.g. DIR/shard for DIR/shard.json)"
        ) from None
    except (OSError, UnicodeError, json.JSONDecodeError) as e:
        raise CorpusError(f"{path}: cannot read sidecar: {str(e).splitlines()[0]}") from None
    if not isinstance(meta, dict) or meta.get("format") != FLAT_FORMAT:
        raise CorpusError(f"{path}: not a flat-shard sidecar (format is not {FLAT_FORMAT!r})")
    return meta, path.parent


def open_shard(
    directory: Path, shard: dict, dtype: str, n_vocab: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens memmap, offsets) of one shard, checked for consistency: raises VerifyError
    naming the file when the .idx and .bin disagree with each other or with the sidecar."""
    bin_path, idx_path = directory / shard["bin"], directory / shard["idx"]
    for p in (bin_path, idx_path):
        if not p.is_file():
            raise VerifyError(f"{p}: missing")
    dt = np.dtype(dtype).newbyteorder("<")
    if bin_path.stat().st_size != shard["tokens"] * dt.itemsize:
        raise VerifyError(
            f"{bin_path}: {bin_path.stat().st_size} bytes, the sidecar says "
            f"{shard['tokens']} tokens of {dt.itemsize} bytes"
        )
    idx = np.fromfile(idx_path, dtype="<i8")
    if len(idx) != shard["documents"] + 1 or idx[0] != 0 or idx[-1] != shard["tokens"]:
        raise VerifyError(
            f"{idx_path}: {len(idx)} offsets from {idx[:1].tolist()} to "
            f"{idx[-1:].tolist()}, expected {shard['documents'] + 1} from 0 to "
            f"{shard['tokens']}"
        )
    bad = np.flatnonzero(np.diff(idx) < 0)
    if bad.size:
        raise VerifyError(f"{idx_path}: offsets decrease at document {int(bad[0])}")
    tokens = np.memmap(bin_path, dtype=dt, mode="r") if shard["tokens"] else np.zeros(0, dt)
    if n_vocab is not None and tokens.size:
        top = int(tokens.max())
        if top >= n_vocab:
            j = int(np.searchsorted(idx, int(np.argmax(tokens >= n_vocab)), "right")) - 1
            raise VerifyError(f"{bin_path}: document {j} holds id {top} >= n_vocab {n_vocab}")
    return tokens, idx


def read_shards(prefix: str | os.PathLike) -> Iterator[np.ndarray]:
    """Every document's ids (views of memory-mapped .bin files), in input order."""
    meta, directory = load_sidecar(prefix)
    for shard in meta["shards"]:
        tokens, idx = open_shard(directory, shard, meta["dtype"], meta.get("n_vocab"))
        for j in range(len(idx) - 1):
            yield tokens[idx[j] : idx[j + 1]]
