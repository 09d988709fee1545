"""Layouts of the corpus job (`blockbpe_jax/corpus/job.py`): flat token shards, their writer, a
reader and a consistency check; the flat layout in memory. (ArrayRecord shards:
corpus/shards/array_records.py; the padded .npz/.npy layout: corpus/shards/padded.py.)

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
import threading
from pathlib import Path
from typing import Iterator

import numpy as np

from . import EVERY_TOKEN_FORMATS
from ..types import CorpusError, VerifyError

FLAT_FORMAT = "blockbpe-flat-v1"
# Tokens per shard by default (128 MiB of uint16, 256 MiB of uint32; FineWeb's shards hold 10**8):
# a corpus of a few GB is several shards, which FlatWriter writes two at a time.
DEFAULT_SHARD_TOKENS = 1 << 26


def naming(path: Path, e: OSError) -> OSError:
    """`e`, naming the file it is about (os.pwrite's and ftruncate's errors name none)."""
    return e if e.filename or e.errno is None else OSError(e.errno, e.strerror, os.fspath(path))


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
    if fmt in EVERY_TOKEN_FORMATS:
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

    def _layout(self) -> dict:
        """The sidecar's format fields (before the job's meta)."""
        raise NotImplementedError

    def finish(self, meta: dict) -> dict:
        sidecar = dict(**self._layout(), **meta, shards=self.shards)
        sidecar["documents"] = sum(s["documents"] for s in self.shards)
        sidecar["tokens"] = sum(s["tokens"] for s in self.shards)
        path = sidecar_path(self.prefix)
        try:
            path.write_text(json.dumps(sidecar, indent=2) + "\n")
        except BaseException:  # (no partial sidecar: its presence marks a complete output)
            path.unlink(missing_ok=True)
            raise
        return sidecar

    def abort(self) -> None:
        for p in self.written:
            p.unlink(missing_ok=True)


class _OpenShard:
    """A flat shard being written: its file, the tokens placed in it (by `FlatWriter.add`, in
    order) and the bytes reserved (by its writing thread)."""

    def __init__(self, k: int, bin_path: Path, thread):
        self.k, self.bin_path, self.thread = k, bin_path, thread
        self.fd = os.open(bin_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self.offsets, self.tokens, self.ndocs, self.reserved = [np.zeros(1, np.int64)], 0, 0, 0


class FlatWriter(_ShardWriter):
    """Streams documents into flat shards of at most `shard_tokens` tokens (a document is never
    split; one longer than that gets a shard of its own) and `shard_docs` documents.

    A file takes one thread's copy into the page cache at a time (ext4 writes to one inode one
    after another), so shards are written by WRITERS threads, shard k by thread k % WRITERS: the
    next shard's first windows are written while the last ones of the one before still are. The
    ids queued for writing are at most PENDING bytes (`add` waits beyond)."""

    fmt = "flat"
    writes_later = True  # add(..., done) queues the writes (the engine gives it `done`)

    RESERVE = 256 << 20  # the most bytes reserved ahead of the writes (native.cpu.reserve_file)
    WRITERS = 2
    PENDING = 192 << 20

    def __init__(self, prefix: Path, n_vocab: int, shard_tokens: int, shard_docs: int | None):
        super().__init__(prefix, n_vocab, shard_tokens, shard_docs)
        from concurrent.futures import ThreadPoolExecutor

        self._threads = [ThreadPoolExecutor(1, f"blockbpe-shard{k}") for k in range(self.WRITERS)]
        self._shard: _OpenShard | None = None
        self._queued = threading.Condition()
        # bytes queued, adds whose done() has not returned yet, the first write error
        self._pending, self._adds, self._failed = 0, 0, []

    def add(self, ids: np.ndarray, counts: np.ndarray, window, done=None) -> None:
        """ids: the documents' tokens back to back; counts: tokens per document. With `done`,
        the writes are queued and done() is called once they no longer read `ids` (on a writing
        thread); without, add returns once they are written."""
        if done is None:
            finished = threading.Event()
            self.add(ids, counts, window, finished.set)
            finished.wait()
            self._raise_failure()
            return
        self._raise_failure()
        ends = np.cumsum(counts, dtype=np.int64)
        nbytes = int(ends[-1]) * self.dtype.itemsize if len(ends) else 0
        with self._queued:
            self._queued.wait_for(lambda: self._pending == 0 or self._pending + nbytes <= self.PENDING)
            self._pending += nbytes
            self._adds += 1
        left = [1]  # writes not yet done, plus one until all are queued

        def written(n: int) -> None:
            with self._queued:
                self._pending -= n
                left[0] -= 1
                last = left[0] == 0
                self._queued.notify_all()
            if last:
                try:
                    done()
                finally:
                    with self._queued:
                        self._adds -= 1
                        self._queued.notify_all()

        start = 0
        while start < len(counts):
            if self._shard is None:
                self._open(len(self.shards))
            shard = self._shard
            base = int(ends[start - 1]) if start else 0
            # documents that fit under the token limit; a shard holds at least one
            fit = int(np.searchsorted(ends[start:] - base, self.shard_tokens - shard.tokens, "right"))
            take = min(len(counts) - start, self.shard_docs - shard.ndocs, fit)
            if take == 0 and shard.ndocs == 0:
                take = 1
            if take:
                end = int(ends[start + take - 1])
                tokens = as_tokens(ids[base:end], self.dtype)
                left[0] += 1
                write = shard.thread.submit(self._write, shard, tokens, shard.tokens * self.dtype.itemsize)
                write.add_done_callback(lambda _, n=tokens.nbytes: written(n))
                shard.offsets.append(shard.tokens + ends[start : start + take] - base)
                shard.tokens += end - base
                shard.ndocs += take
                start += take
            if start < len(counts):
                self._close()
        written(0)

    def _open(self, k: int) -> None:
        bin_path, _ = flat_names(self.prefix, k)
        self.written.append(bin_path)
        self._shard = _OpenShard(k, bin_path, self._threads[k % self.WRITERS])

    def _write(self, shard: _OpenShard, tokens: np.ndarray, at: int) -> None:
        """On the shard's thread, in order: reserves the file ahead and writes the tokens at `at`."""
        if self._failed:
            return
        try:
            self._reserve(shard, at + tokens.nbytes)
            view = memoryview(tokens).cast("B")
            while view:
                n = os.pwrite(shard.fd, view, at)
                view, at = view[n:], at + n
        except OSError as e:  # (a full disk)
            self._failed.append(naming(shard.bin_path, e))
        except BaseException as e:
            self._failed.append(e)

    def _reserve(self, shard: _OpenShard, end: int) -> None:
        """The file's blocks allocated up to `end` and ahead of it, by as much as it holds up to
        RESERVE (`reserved` -1: the file system cannot; plain writes)."""
        if 0 <= shard.reserved < end:
            from ... import native

            upto = min(2 * end, end + self.RESERVE)
            ok = native.cpu.reserve_file(shard.fd, shard.reserved, upto - shard.reserved)
            shard.reserved = upto if ok else -1

    def _close(self) -> None:
        """Ends the current shard: its entry now, its file cut to size and its .idx on its
        thread after its writes."""
        shard, self._shard = self._shard, None
        _, idx_path = flat_names(self.prefix, shard.k)
        offsets = np.concatenate(shard.offsets).astype("<i8")
        self.written.append(idx_path)
        self.shards.append(
            dict(
                bin=shard.bin_path.name,
                idx=idx_path.name,
                documents=len(offsets) - 1,
                tokens=int(shard.tokens),
            )
        )
        shard.thread.submit(self._finish_shard, shard, offsets, idx_path)

    def _finish_shard(self, shard: _OpenShard, offsets: np.ndarray, idx_path: Path) -> None:
        try:
            if shard.reserved > 0 and not self._failed:  # (the reserved bytes past the last write cut off)
                os.ftruncate(shard.fd, shard.tokens * self.dtype.itemsize)
            os.close(shard.fd)
            if not self._failed:
                offsets.tofile(idx_path)
        except OSError as e:
            self._failed.append(naming(idx_path, e))
        except BaseException as e:
            self._failed.append(e)

    def drain(self) -> None:
        """Returns once every add's writes are done and its done() has returned."""
        with self._queued:
            self._queued.wait_for(lambda: self._adds == 0)
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failed:
            raise self._failed[0]

    def _wait(self) -> None:
        """Every queued write and close done, the threads stopped."""
        if self._shard is not None and self._failed:
            shard, self._shard = self._shard, None
            shard.thread.submit(os.close, shard.fd)
        for thread in self._threads:
            thread.shutdown(wait=True)

    def finish(self, meta: dict) -> dict:
        if self._shard is not None:
            self._close()
        self._wait()
        self._raise_failure()
        return super().finish(meta)

    def abort(self) -> None:
        self._failed.append(CorpusError("aborted"))  # (the writes still queued are dropped)
        self._wait()
        super().abort()

    def _layout(self) -> dict:
        return dict(format=FLAT_FORMAT, dtype=self.dtype.name, byteorder="little", idx_dtype="int64")


class ArraysWriter:
    """The flat layout in memory (`encode_files_to_arrays`): the ids back to back in one array
    that grows in place, and the documents' offsets."""

    keeps_ids, writes_files = False, False  # (the engine plans two windows at once beside it)

    def __init__(self, n_vocab: int, input_bytes: int):
        self.dtype = token_dtype(n_vocab)
        # (room for 2 bytes per token: untouched pages of a generous guess cost no memory)
        self.ids = np.empty(max(input_bytes // 2, 1 << 20), self.dtype)
        self.ends, self.tokens = [np.zeros(1, np.int64)], 0

    def add(self, ids: np.ndarray, counts: np.ndarray, window) -> None:
        from ... import native  # (it imports JAX: not when this module is imported)

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


def sidecar_inputs(meta: dict, directory: Path) -> list[str]:
    """The sidecar's inputs, to read from any directory: stored absolute (`encode_files`). An
    older sidecar's are relative to the directory encode ran in: read from the current
    directory where they are there, else relative to the sidecar's directory."""
    out = []
    for p in meta["inputs"]:
        if not os.path.isabs(p) and not os.path.exists(p) and os.path.exists(directory / p):
            p = os.fspath(directory / p)
        out.append(p)
    return out


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
