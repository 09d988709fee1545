"""The corpus reader's file blocks (blockbpe_jax/documents.py): blocks of whole lines read into
buffers used in turn, a plain file's large reads made by threads (`read_at`), a pipe's read
as a stream."""

from __future__ import annotations

import os
import random
import threading

import numpy as np

from blockbpe_jax import documents, native


def test_blocks_of_lines_reuse_their_buffers(tmp_path, monkeypatch):
    """Blocks end at line ends and together are the file; the reader's buffers are reused in
    turn (a block stays intact until BLOCK_BUFFERS blocks later); a line longer than a buffer
    grows it; a file that does not end with a newline ends with its last line."""
    rng = random.Random(4)
    lines = [b"x" * rng.randrange(0, 3000) + b"\n" for _ in range(400)]
    lines.insert(200, b"y" * ((1 << 20) + 5000) + b"\n")  # 256 buffers' worth
    lines.insert(300, b"z" * 8191 + b"\n")  # the buffer's size and a tail's
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(lines) + b"no newline at the end")
    with open(path, "rb") as f:
        blocks = documents._blocks_of_lines(f, 4096)
        kept, seen = [], []
        for block in blocks:
            assert bytes(block[-1:]) == b"\n" or bytes(block).endswith(b"no newline at the end")
            seen.append(bytes(block))
            kept.append(block)
            if len(kept) >= documents.BLOCK_BUFFERS:  # BLOCK_BUFFERS - 1 blocks later: still intact
                assert bytes(kept[-documents.BLOCK_BUFFERS + 1]) == seen[-documents.BLOCK_BUFFERS + 1]
    assert b"".join(seen) == path.read_bytes()
    assert max(map(len, seen)) > (1 << 20)


def test_large_reads_are_made_by_threads(tmp_path, monkeypatch):
    """A plain file's large reads (`read_at`, ranges on threads) give the file's bytes, stop
    where it ends, and leave the file's position after them; blocks made of such reads are the
    file; a bad descriptor is an OSError's errno, not a crash."""
    rng = np.random.default_rng(7)
    path = tmp_path / "in.txt"
    data = rng.integers(0, 256, (9 << 20) + 12345, dtype=np.uint8)
    data[rng.integers(0, data.size, 20000)] = ord("\n")
    path.write_bytes(data.tobytes())
    with open(path, "rb") as f:
        f.read(1000)  # (a position other than 0, with the reader's own buffer filled)
        buf = np.zeros(16 << 20, np.uint8)
        n = documents._read_into(f, buf, 5, 5 + (6 << 20))  # one parallel read
        assert n == 5 + (6 << 20) and f.tell() == 1000 + (6 << 20)
        assert bytes(buf[5:n]) == data[1000 : 1000 + (6 << 20)].tobytes()
        n = documents._read_into(f, buf, 0, 16 << 20)  # past the end: what is left
        assert n == data.size - 1000 - (6 << 20) and f.tell() == data.size
        assert bytes(buf[:n]) == data[1000 + (6 << 20) :].tobytes()
        assert documents._read_into(f, buf, 0, 16 << 20) == 0
    monkeypatch.setattr(documents, "PARALLEL_READ", 1000)
    with open(path, "rb") as f:
        blocks = [bytes(b) for b in documents._blocks_of_lines(f, 300_000)]
    assert b"".join(blocks) == data.tobytes() and all(b.endswith(b"\n") for b in blocks[:-1])
    assert native.cpu.read_at(-1, 0, buf) < 0
    # a pipe (`<(zcat ...)`) has no positions: read as a stream
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_bytes(data.tobytes()), daemon=True)
    feeder.start()
    with open(fifo, "rb") as f:
        blocks = [bytes(b) for b in documents._blocks_of_lines(f, 300_000)]
    feeder.join()
    assert b"".join(blocks) == data.tobytes()
