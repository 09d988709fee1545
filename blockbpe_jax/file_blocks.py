"""Blocks of whole lines read from a file (the corpus reader's unit): read into buffers used in
turn, a plain file's large reads made by threads (`read_at`), a pipe or decompressed stream read
as a stream."""

from __future__ import annotations

import io
import itertools
import os
from typing import Iterator

import numpy as np

from . import native

BLOCK_BUFFERS = 4  # the reader's buffers, used in turn


def blocks_of_lines(f, size: int, turns: int = BLOCK_BUFFERS) -> Iterator[memoryview]:
    """Blocks of about `size` bytes of a file, each ending at the end of a line (the last one
    where the file ends): views of `turns` buffers read into in turn (a fresh object per block
    costs its page faults, as much as the read), so a block is overwritten `turns` blocks
    later: its consumer (one block behind the reading thread) is done with it by then.
    A block's unfinished last line starts the next buffer; a line longer than a buffer grows
    it (the old one stays alive while a view of it does)."""
    buffers: list[np.ndarray] = []  # (made as needed and not zeroed: a small file touches little)
    tail = memoryview(b"")  # the unfinished line after the last block
    for k in itertools.count():
        slot, need = k % turns, len(tail) + size
        if len(buffers) <= slot:
            buffers.append(np.empty(need, np.uint8))
        elif buffers[slot].size < need:
            buffers[slot] = np.empty(need, np.uint8)
        buf = buffers[slot]
        buf[: len(tail)] = tail
        n = searched = len(tail)
        while True:
            n = read_into(f, buf, n, need)
            end = after_last_newline(buf, searched, n)
            if n < need or end:
                break
            searched, need = n, 2 * need  # (no line ends in the buffer: a larger one)
            buf = buffers[slot] = np.concatenate([buf[:n], np.empty(need - n, np.uint8)])
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
    bounds the reading of long documents. (Not a pipe's: `<(zcat ...)` has no positions.)"""
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
