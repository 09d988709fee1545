"""The corpus job's compressed inputs: .gz, read through ISA-L when `isal` is installed (~2.5x
the standard module), and .zst, through `zstandard` (corpus/inputs/zstd_frames.py; from PROCESS_BYTES the zstd
command line where one works). From PROCESS_BYTES either is decompressed by a process of its
own, out of the GIL's way: in the job's process both release the GIL for each small piece of
output and wait to take it back after each, behind the job's other threads (a GIL convoy).
Several are read ahead of their turn: one decompression is a fraction of what the job encodes,
and a compressed stream cannot be split, so several files are decompressed at once (in input
order, within a memory budget)."""

from __future__ import annotations

import fcntl
import functools
import gzip
import io
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ... import native
from . import zstd_frames
from ..background import in_background, stop_background
from ..types import CorpusError

try:  # ISA-L's gzip reader (optional): the standard module's interface, ~2.5x faster
    from isal import igzip as _fast_gzip
    from isal.isal_zlib import error as _fast_gzip_error
except ImportError:
    _fast_gzip, _fast_gzip_error = gzip, zlib.error

READ_ERRORS = (OSError, EOFError, zlib.error, _fast_gzip_error)  # what reading an input raises

# Files decompressed at once (one stream decompresses at a few hundred MB/s: a core's work per
# file, and the job encodes several times that), and the bytes of blocks they may hold
# decompressed ahead of their reader, 256 MiB each: a file as large is decompressed whole before
# its turn.
FILES_AHEAD = max(1, min(8, (os.cpu_count() or 1) // 2))
BYTES_AHEAD = FILES_AHEAD << 28
PROCESS_BYTES = 8 << 20  # a compressed input this large or larger is decompressed by a process


def is_compressed(path: Path) -> bool:
    return path.suffix in (".gz", ".zst")


def open_input(path: Path, fast: bool = False):
    """The file, decompressed when it is .gz (`fast`: by ISA-L when installed; the error messages
    users see come from the standard module's reading) or .zst (ZstdFrames); `fast`, from
    PROCESS_BYTES, by a process of its own (DecompressingProcess)."""
    if path.suffix == ".zst":
        try:
            import zstandard  # noqa: F401 (checked here: the decompressing process needs it too)
        except ImportError:
            raise CorpusError(
                f"{path}: .zst inputs need the zstandard package (pip install zstandard)"
            ) from None
        argv = _zstd_argv(path) if fast and _by_process(path) else None
        if argv is not None:
            return DecompressingProcess(path, argv)
        return io.BufferedReader(zstd_frames.ZstdFrames(path), buffer_size=1 << 20)
    if not is_compressed(path):
        f = open(path, "rb")
        return f if f.seekable() else StreamInput(f.detach())
    if fast and _fast_gzip is not gzip and _by_process(path):
        return DecompressingProcess(path, [sys.executable, "-m", "isal.igzip", "-d", "-c", str(path)])
    return (_fast_gzip if fast else gzip).open(path, "rb")


def larger_pipe(fd: int) -> None:
    """A pipe of 1 MiB (where `fd` is a pipe's and the system allows): the writer blocks, and
    both processes wake, a sixteenth as often as with the default 64 KiB."""
    try:
        fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ
    except OSError:
        pass


def read_stream_into(fd: int, buf) -> int:
    """Reads the stream `fd` (a pipe) into `buf` until it is full or the stream ends, in one
    native call without the GIL (`read_stream`) -> the bytes read. Through Python's reads a
    pipe's every piece waited to take the GIL back, behind the job's other threads: a GIL
    convoy, as the decompressions in this process had."""
    got = native.cpu.read_stream(fd, np.frombuffer(buf, np.uint8))
    if got < 0:
        raise OSError(-got, os.strerror(-got))
    return got


class StreamInput(io.RawIOBase):
    """A stream input (a pipe, standard input) read a whole buffer per call (read_stream_into),
    its pipe made larger."""

    def __init__(self, raw: io.FileIO):
        self._raw = raw
        larger_pipe(raw.fileno())

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def readinto(self, buf) -> int:
        return read_stream_into(self._raw.fileno(), buf)

    def readall(self) -> bytes:
        return self._raw.readall()

    def close(self) -> None:
        self._raw.close()
        super().close()


def _by_process(path: Path) -> bool:
    return bool(sys.executable) and path.stat().st_size >= PROCESS_BYTES


def _zstd_argv(path: Path) -> list | None:
    """The decompressing process of a .zst: the zstd command line where it works (faster than
    corpus/inputs/zstd_frames.py; it refuses an empty file, which corpus/inputs/zstd_frames.py reads as no bytes),
    else corpus/inputs/zstd_frames.py run by its path (the child does not import the package, nor jax; -P
    keeps its folder, whose modules could shadow others, off the child's sys.path), else None
    (Python 3.10 has no -P: there, in this process)."""
    command = zstd_command()
    if command is not None and path.stat().st_size:
        return [command, "-dcq", "--format=zstd", "--", str(path)]
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", zstd_frames.__file__, str(path)]
    return None


# Two frames (the second after a skippable one) and what they hold: the zstd command line must
# give exactly these bytes (and know --format) before it is used.
ZSTD_PROBE = bytes.fromhex("28b52ffd2003190000616263502a4d180300000078787828b52ffd2003190000646566")


@functools.lru_cache(maxsize=1)
def zstd_command() -> str | None:
    """The path of a working `zstd` command (None: none found, or it decoded the probe wrongly)."""
    command = shutil.which("zstd")
    if command is None:
        return None
    try:
        run = subprocess.run(
            [command, "-dcq", "--format=zstd"], input=ZSTD_PROBE, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return command if run.returncode == 0 and run.stdout == b"abcdef" else None


class DecompressingProcess:
    """A compressed input decompressed by a process of its own, `argv` (.gz: ISA-L's
    `python -m isal.igzip -dc`; .zst: `zstd -dc` or corpus/inputs/zstd_frames.py), which writes the
    decompressed bytes to its stdout, read from its pipe a whole block per call
    (read_stream_into). (In this process the decompression releases the GIL in small pieces and
    waits to take it back after each: beside one busy Python thread ISA-L's ran 4-7x slower.) An error of the process is an OSError at the end of its output,
    naming its exit status and its last line on stderr (the reader then re-reads the file in
    this process to name the line)."""

    def __init__(self, path: Path, argv: list):
        self.path = path
        # (the child imports isal or zstandard from where this process found it)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        larger_pipe(self._process.stdout.fileno())

    def readinto(self, buf) -> int:
        got = read_stream_into(self._process.stdout.fileno(), buf)
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
