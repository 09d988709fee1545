"""The corpus job's input files: checked (`check_inputs`: regular files, or streams read once as
they come: a pipe, `-` for standard input; a directory, the files under it) and read as blocks of whole lines (the reader's unit)
into buffers used in turn, a plain file's large reads made by threads (`read_at`), a pipe or
decompressed stream read as a stream."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ... import native
from ..spares import Spares
from ..types import CorpusError

STDIN = Path("/dev/stdin")  # the input `-` names


class Inputs(list):
    """The checked inputs (`check_inputs`), in order, with each one's size as stat'ed then
    (`sizes`: bytes, None for a stream). Checking them again returns them as they are: a corpus
    of many thousands of small files is walked and stat'ed once per job, not once per step."""

    def __init__(self, paths: list[Path], sizes: list[int | None]):
        super().__init__(paths)
        self.sizes = sizes


def check_inputs(paths: Sequence[str | os.PathLike]) -> Inputs:
    """The inputs as paths (`-`: standard input), each a readable regular file or a stream (a
    pipe, a terminal: read once, as it comes, so named once), a directory standing for the files
    under it (`files_under`); a one-line CorpusError otherwise. (One stat each, made on the
    path's string; a Path made again, or asked for its string, costs as much again on 3.12.)"""
    if isinstance(paths, Inputs):
        return paths
    if isinstance(paths, (str, bytes, os.PathLike)):  # one input, not a sequence of characters
        paths = [paths]
    elif not hasattr(paths, "__iter__"):
        raise TypeError(f"the inputs must be a path or a sequence of paths, got {type(paths).__name__}")
    out, sizes, streams = [], [], set()
    for p in paths:
        name = os.fspath(p)
        if name == "-":
            p, name = STDIN, os.fspath(STDIN)
        elif name.startswith("~"):
            p = Path(name).expanduser()
            name = os.fspath(p)
        elif not isinstance(p, Path):
            p = Path(name)
        try:
            st = os.stat(name)
        except (FileNotFoundError, NotADirectoryError):
            raise CorpusError(f"{p}: no such file") from None
        except OSError as e:
            raise CorpusError(f"{p}: cannot read: {_reason(e)}") from None
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            under = files_under(p)
            out += under
            sizes += under.sizes
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
            raise CorpusError(f"{p}: not a regular file, a stream or a directory")
        if not os.access(name, os.R_OK):
            raise CorpusError(f"{p}: cannot read: permission denied")
        if not stat.S_ISREG(mode):
            if p in streams:
                raise CorpusError(f"{p}: a stream is read once: name it once")
            streams.add(p)
        out.append(p)
        sizes.append(st.st_size if stat.S_ISREG(mode) else None)
    return Inputs(out, sizes)


# Names a directory input leaves out, as pyarrow's datasets do: hidden files and the metadata
# data tools write beside their output (.crc, _SUCCESS, _metadata, _delta_log).
LEFT_OUT = (".", "_")


def files_under(directory: Path) -> Inputs:
    """The regular files under a directory input, in the order of their paths' parts; symbolic
    links followed (each folder read once: a link back up the tree is not a loop); names
    starting with LEFT_OUT left out, and with them whatever is under such a folder. CorpusError
    where a folder cannot be read or no file is found."""

    def cannot(e: OSError):
        raise CorpusError(f"{e.filename}: cannot read: {_reason(e)}")

    def first_visit(folder: str) -> bool:
        st = os.stat(folder)
        key = (st.st_dev, st.st_ino)
        return key not in seen and not seen.add(key)

    def entries(folder: str) -> Iterator[os.DirEntry]:
        try:
            with os.scandir(folder) as it:
                return iter(sorted((e for e in it if not e.name.startswith(LEFT_OUT)), key=lambda e: e.name))
        except OSError as e:
            cannot(e)

    # Depth first, each folder's entries by name: the paths' parts in order. (A DirEntry knows
    # a regular file from its directory listing; its one stat gives the size the job needs.)
    found, sizes, seen = [], [], set()
    first_visit(directory)
    stack = [entries(os.fspath(directory))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
        elif entry.is_dir():  # (links followed)
            if first_visit(entry.path):
                stack.append(entries(entry.path))
        elif entry.is_file():
            try:
                size = entry.stat().st_size
            except OSError as e:  # (gone since the folder was listed)
                cannot(e)
            if not os.access(entry.path, os.R_OK):
                raise CorpusError(f"{entry.path}: cannot read: permission denied")
            found.append(entry.path)
            sizes.append(size)
        elif entry.is_symlink() and not os.path.exists(entry.path):  # (a FIFO, a socket: left out)
            raise CorpusError(f"{entry.path}: no such file (a broken symbolic link)")
    if not found:
        raise CorpusError(
            f"{directory}: a directory with no input files (names starting with . or _ left out)"
        )
    return Inputs([Path(name) for name in found], sizes)


def _reason(e: OSError) -> str:
    return (e.strerror or type(e).__name__).lower()


def regular_file_size(path: Path) -> int | None:
    """The size of a regular file; None for a stream (or a path that cannot be stat'ed: its
    reader names the error)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def input_sizes(paths: Sequence[Path]) -> list[int | None]:
    """Each input's size (None: a stream), as `check_inputs` took it, else stat'ed now."""
    return paths.sizes if isinstance(paths, Inputs) else [regular_file_size(p) for p in paths]


def first_stream(paths: Sequence[Path]) -> Path | None:
    """The first input that is a stream (read once: `verify` cannot read it again), or None."""
    return next((p for p, size in zip(paths, input_sizes(paths)) if size is None), None)


BLOCK_BUFFERS = 4  # the reader's buffers, used in turn


class KeptBuffers:
    """Plain host buffers for readers' blocks, kept from one job to the next (BlockBuffers'
    pool where no page-locked memory is wanted): a fresh buffer costs its page faults, as much
    as the read of its bytes. (No block is read into a buffer given back: the documents a
    reader yields are copies, so a buffer is free once its job's reading is over.)"""

    KEEP = 2 * BLOCK_BUFFERS

    def __init__(self):
        self._spares = Spares()

    def read_block(self, nbytes: int) -> np.ndarray:
        kept = self._spares.take("read blocks", nbytes)
        return kept if kept is not None else np.empty(nbytes, np.uint8)

    def give_back_read_block(self, buffer: np.ndarray) -> None:
        self._spares.keep("read blocks", buffer, self.KEEP)


KEPT = KeptBuffers()


class BlockBuffers:
    """The buffers a reader's blocks are read into in turn, kept from one file to the next of
    a job's inputs (read one after another) and, given back by `close()`, for the next jobs: a
    fresh buffer costs its page faults, as much as the read.

    `page_locked`: None, or a callable that returns None or, while the job's device split
    copies blocks straight from where they were read (corpus/device_split.py), the pool of
    page-locked memory it wants them in (`read_block(n)`, `give_back_read_block(a)`: the
    engine's corpus.device.WindowBuffers, which keeps them for the next jobs). A buffer made
    before the split started is made again there. Other buffers come from KEPT."""

    def __init__(self, turns: int = BLOCK_BUFFERS, page_locked=None):
        self.turns = turns
        self.arrays: list[np.ndarray] = []  # (made as needed and not zeroed: a small file touches little)
        self.blocks = 0  # blocks read into them: the next one goes into arrays[blocks % turns]
        self._page_locked = page_locked
        self._pools: list = []  # per array: the pool it came from, or None

    def buffer(self, slot: int, need: int, size: int) -> np.ndarray:
        """arrays[slot], made (`size` bytes) where it is missing, smaller than `need`, or not
        page-locked while the device split wants it to be."""
        pool = self._page_locked() if self._page_locked else None
        if (
            len(self.arrays) <= slot
            or self.arrays[slot].size < need
            or (pool and self._pools[slot] is not pool)
        ):
            self._set(slot, pool, size)
        return self.arrays[slot]

    def grown(self, slot: int, kept: int, need: int) -> np.ndarray:
        """arrays[slot] made again with `need` bytes, its first `kept` bytes copied (the old one
        stays alive while a view of it does; it goes back to no pool)."""
        old = self.arrays[slot]
        self._pools[slot] = None  # (not given back: a view of it may be in use)
        self._set(slot, self._page_locked() if self._page_locked else None, need)
        self.arrays[slot][:kept] = old[:kept]
        return self.arrays[slot]

    def page_locked(self, block) -> bool:
        """Whether `block` (a view blocks_of_lines gave) is in page-locked memory."""
        owner = block.obj if isinstance(block, memoryview) else None
        return any(owner is a and p not in (None, KEPT) for a, p in zip(self.arrays, self._pools))

    def close(self) -> None:
        """The buffers back to their pools (the job's reading is over)."""
        for a, pool in zip(self.arrays, self._pools):
            if pool is not None:
                pool.give_back_read_block(a)
        self.arrays, self._pools = [], []

    def _set(self, slot: int, pool, size: int) -> None:
        if slot < len(self.arrays) and self._pools[slot] is not None:
            self._pools[slot].give_back_read_block(self.arrays[slot])
        pool = pool or KEPT
        self.arrays[slot : slot + 1], self._pools[slot : slot + 1] = [pool.read_block(size)], [pool]


def blocks_of_lines(f, size: int, buffers: BlockBuffers | int = BLOCK_BUFFERS) -> Iterator[memoryview]:
    """Blocks of about `size` bytes of a file, each ending at the end of a line (the last one
    where the file ends): views of `buffers` (BlockBuffers, or how many to make) read into in
    turn, so a block is overwritten `turns` blocks later, in this file or the next read into
    them: its consumer (one block behind the reading thread) is done with it by then.
    A block's unfinished last line starts the next buffer; a line longer than a buffer grows
    it (the old one stays alive while a view of it does)."""
    if isinstance(buffers, int):
        buffers = BlockBuffers(buffers)
    tail = memoryview(b"")  # the unfinished line after the last block
    while True:
        slot, need = buffers.blocks % buffers.turns, len(tail) + size
        buffers.blocks += 1
        buf = buffers.buffer(slot, need, max(need, size + size // 8))  # (room for the tails of most lines)
        buf[: len(tail)] = tail
        n = searched = len(tail)
        while True:
            n = read_into(f, buf, n, need)
            end = after_last_newline(buf, searched, n)
            if n < need or end:
                break
            searched, need = n, 2 * need  # (no line ends in the buffer: a larger one)
            buf = buffers.grown(slot, n, need)
        if n < need:  # the end of the file
            if n:
                yield memoryview(buf)[:n]
            return
        yield memoryview(buf)[:end]
        tail = memoryview(buf)[end:n]


PARALLEL_READ = 4 << 20  # a plain file's reads of at least this many bytes: by threads


def read_into(f, buf: np.ndarray, n: int, need: int) -> int:
    """Reads into buf[n:need] until it is full or the file ends; the bytes in buf now. A plain
    file's large read is made by threads (`read_at`): one thread's copy from the page cache
    bounds the reading of long documents. (Not a pipe's: `<(zcat ...)` has no positions; a
    stream's readinto fills the whole range in one call, corpus.inputs.compressed.StreamInput.)"""
    if (
        need - n >= PARALLEL_READ
        and isinstance(f, io.BufferedReader)
        and isinstance(f.raw, io.FileIO)
        and f.seekable()
    ):
        at = f.tell()
        got = native.cpu.read_at(f.fileno(), at, buf[n:need])
        if got < 0:
            raise OSError(-got, os.strerror(-got))
        f.seek(at + got)
        return n + got
    view = memoryview(buf)
    while n < need:
        got = f.readinto(view[n:need])
        if not got:
            break
        n += got
    return n


def after_last_newline(buf: np.ndarray, lo: int, hi: int) -> int:
    """The index after the last b"\\n" in buf[lo:hi], 0 when there is none (searched from the
    end, 64 KiB at a time)."""
    view = memoryview(buf)
    while hi > lo:
        at = bytes(view[max(lo, hi - (1 << 16)) : hi]).rfind(b"\n")
        if at >= 0:
            return max(lo, hi - (1 << 16)) + at + 1
        hi -= 1 << 16
    return 0
