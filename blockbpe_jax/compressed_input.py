"""The corpus job's compressed inputs: .gz, read through ISA-L when `isal` is installed (~2.5x
the standard module; from PROCESS_BYTES in a process of its own, out of the GIL's way), and .zst,
through `zstandard`. Several are read ahead of their turn: one decompression is a fraction of
what the job encodes, and a compressed stream cannot be split, so several files are decompressed
at once (in input order, within a memory budget)."""

from __future__ import annotations

import fcntl
import gzip
import io
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from . import native
from .background import in_background, stop_background
from .shards import CorpusError

try:  # ISA-L's gzip reader (optional): the standard module's interface, ~2.5x faster
    from isal import igzip as _fast_gzip
    from isal.isal_zlib import error as _fast_gzip_error
except ImportError:
    _fast_gzip, _fast_gzip_error = gzip, zlib.error

READ_ERRORS = (OSError, EOFError, zlib.error, _fast_gzip_error)  # what reading an input raises

# Files decompressed at once, and the bytes of blocks they may hold decompressed ahead of their
# reader: a file as large as its share is decompressed whole before its turn.
FILES_AHEAD = max(1, min(4, (os.cpu_count() or 1) // 4))
BYTES_AHEAD = 1 << 30
PROCESS_BYTES = 8 << 20  # a .gz input this large or larger is decompressed by a process (ISA-L's)


def is_compressed(path: Path) -> bool:
    return path.suffix in (".gz", ".zst")


def open_input(path: Path, fast: bool = False):
    """The file, decompressed when it is .gz (`fast`: by ISA-L when installed, in a process of
    its own from PROCESS_BYTES; the error messages users see come from the standard module's
    reading) or .zst (ZstdFrames)."""
    if path.suffix == ".zst":
        return io.BufferedReader(ZstdFrames(path), buffer_size=1 << 20)
    if not is_compressed(path):
        return open(path, "rb")
    if fast and _fast_gzip is not gzip and sys.executable and path.stat().st_size >= PROCESS_BYTES:
        return DecompressingProcess(path)
    return (_fast_gzip if fast else gzip).open(path, "rb")


class ZstdFrames(io.RawIOBase):
    """A .zst file's frames one after another (the `zstandard` package), checked to end where
    the file does: its stream readers stop silently at a truncated frame, or after the first."""

    def __init__(self, path: Path):
        try:
            import zstandard
        except ImportError:
            raise CorpusError(
                f"{path}: .zst inputs need the zstandard package (pip install zstandard)"
            ) from None
        self._zstd, self._file = zstandard, open(path, "rb")
        self._frame = None  # the current frame's decompressor
        self._input, self._output = b"", memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        view, n = memoryview(buf).cast("B"), 0
        while n < len(view):
            if self._output:
                k = min(len(view) - n, len(self._output))
                view[n : n + k] = self._output[:k]
                self._output = self._output[k:]
                n += k
                continue
            if not self._input:
                self._input = self._file.read(4 << 20)
                if not self._input:
                    if self._frame is not None and not self._frame.eof:
                        raise EOFError("the .zst file ended inside a frame")
                    break
            if self._frame is None:
                self._frame = self._zstd.ZstdDecompressor().decompressobj()
            try:
                self._output = memoryview(self._frame.decompress(self._input))
            except self._zstd.ZstdError as e:
                raise OSError(f"invalid .zst data: {e}") from None
            if self._frame.eof:  # (the next frame starts in what this one left)
                self._input, self._frame = self._frame.unused_data, None
            else:
                self._input = b""
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


class DecompressingProcess:
    """A .gz input decompressed by ISA-L in a process of its own (`python -m isal.igzip -dc`),
    read from its pipe a whole block per call without the GIL. (In this process the
    decompression releases the GIL in small pieces and waits to take it back after each: beside
    one busy Python thread it ran 4-7x slower, BUILD_NOTES session 36.) An error of the process
    is an OSError at the end of its output (the reader then re-reads the file to name the line)."""

    def __init__(self, path: Path):
        self.path = path
        argv = [sys.executable, "-m", "isal.igzip", "-d", "-c", str(path)]
        # (the child imports isal from where this process found it)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        try:  # (a larger pipe: fewer wake-ups of the two processes)
            fcntl.fcntl(self._process.stdout.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError:
            pass

    def readinto(self, buf) -> int:
        got = native.cpu.read_stream(self._process.stdout.fileno(), np.frombuffer(buf, np.uint8))
        if got < 0:
            raise OSError(-got, os.strerror(-got))
        if got < len(buf) and self._process.wait() != 0:  # the end: the process's verdict
            said = self._process.stderr.read().decode(errors="replace").strip().splitlines()
            why = f": {said[-1]}" if said else ""
            raise OSError(f"the decompressing process exited with {self._process.returncode}{why}")
        return got

    def close(self) -> None:
        if self._process.poll() is None:  # (stopped early)
            self._process.kill()
        self._process.wait()
        self._process.stdout.close()
        self._process.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DecompressAhead:
    """The blocks of each compressed input (`blocks_of(file, block_bytes, buffers)`: its
    blocks, read into `buffers` buffers used in turn), each file read by a thread of its own
    (`in_background`) from the turn of the file FILES_AHEAD - 1 compressed files before it,
    `depth` blocks ahead of its reader. A file that cannot be opened here is left to its reader,
    whose error then comes at its turn (a missing package's comes at once)."""

    def __init__(self, paths: Sequence[Path], block_bytes: int, blocks_of: Callable):
        self.paths, self.block_bytes, self.blocks_of = list(paths), block_bytes, blocks_of
        self.depth = max(1, BYTES_AHEAD // (FILES_AHEAD * max(block_bytes, 1)) - 3)
        self.started: dict = {}  # index -> (file, its blocks)
        self.next = 0  # the first index not yet considered

    def take(self, index: int) -> tuple[object, Iterator] | None:
        """(open file, its blocks) of input `index` (its reader started now if it was not),
        the readers of the next compressed inputs started; None: not compressed, or could
        not be opened."""
        self.next = max(self.next, index)
        while self.next < len(self.paths) and len(self.started) < FILES_AHEAD:  # (none before index left)
            j, self.next = self.next, self.next + 1
            if is_compressed(self.paths[j]):
                try:
                    f = open_input(self.paths[j], fast=True)
                except OSError:
                    continue
                # (buffers: `depth` blocks queued, one being read, one held by its consumer)
                blocks = self.blocks_of(f, self.block_bytes, self.depth + 3)
                self.started[j] = (f, in_background(blocks, depth=self.depth, name="blockbpe-read"))
        return self.started.pop(index, None)

    def close(self) -> None:
        """Stops the readers of the inputs not taken (each thread before its file closes)."""
        for f, blocks in self.started.values():
            stop_background(blocks)
            f.close()
        self.started.clear()
