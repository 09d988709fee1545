"""The corpus reader's file blocks (blockbpe_jax/corpus/inputs/files.py): blocks of whole lines read into
buffers used in turn, a plain file's large reads made by threads (`read_at`), a pipe's read
as a stream; several compressed inputs decompressed at once, ahead of their turn, and .zst
inputs (corpus/inputs/compressed.py)."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from blockbpe_jax.corpus.inputs import compressed as compressed_input, files as file_blocks, zstd_frames
from blockbpe_jax.corpus import job as corpus, documents
from blockbpe_jax import native
from blockbpe_jax.corpus.types import CorpusError


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
        blocks = file_blocks.blocks_of_lines(f, 4096)
        kept, seen = [], []
        for block in blocks:
            assert bytes(block[-1:]) == b"\n" or bytes(block).endswith(b"no newline at the end")
            seen.append(bytes(block))
            kept.append(block)
            if len(kept) >= file_blocks.BLOCK_BUFFERS:  # BLOCK_BUFFERS - 1 blocks later: still intact
                assert bytes(kept[-file_blocks.BLOCK_BUFFERS + 1]) == seen[-file_blocks.BLOCK_BUFFERS + 1]
    assert b"".join(seen) == path.read_bytes()
    assert max(map(len, seen)) > (1 << 20)


def test_block_buffers_kept_from_one_file_to_the_next(tmp_path):
    """Files read one after another into one BlockBuffers: each file's blocks are its bytes,
    a block stays intact until BLOCK_BUFFERS blocks later across files too, and no buffer is
    made after the first file but where a line longer than a buffer grows one."""
    rng = random.Random(6)
    paths = []
    for k in range(5):
        paths.append(tmp_path / f"in{k}.txt")
        rows = [b"%d " % k + b"w" * rng.randrange(0, 2000) + b"\n" for _ in range(rng.randrange(20, 200))]
        paths[-1].write_bytes(b"".join(rows) + (b"z" * 40000 + b"\n" if k == 3 else b""))
    buffers, kept, seen, made = file_blocks.BlockBuffers(), [], [], []
    for path in paths:
        with open(path, "rb") as f:
            got = []
            for block in file_blocks.blocks_of_lines(f, 16384, buffers):
                got.append(bytes(block))
                seen.append(got[-1])
                kept.append(block)
                if len(kept) >= file_blocks.BLOCK_BUFFERS:
                    assert bytes(kept[-file_blocks.BLOCK_BUFFERS + 1]) == seen[-file_blocks.BLOCK_BUFFERS + 1]
        assert b"".join(got) == path.read_bytes()
        made.append(list(buffers.arrays))
    same = [all(a is b for a, b in zip(made[k - 1], made[k])) for k in range(1, 5)]
    assert len(made[0]) == file_blocks.BLOCK_BUFFERS and same == [True, True, False, True]


class FakePool:
    """A stand-in for the engine's WindowBuffers as BlockBuffers' pool of page-locked memory:
    hands out plain arrays and records what it made and got back."""

    def __init__(self):
        self.made, self.back = [], []

    def read_block(self, nbytes):
        self.made.append(np.full(nbytes, 0xFF, np.uint8))  # (stale bytes a reader must overwrite)
        return self.made[-1]

    def give_back_read_block(self, a):
        self.back.append(a)


def test_block_buffers_from_the_device_splits_pool(tmp_path):
    """While the device split wants blocks in page-locked memory (BlockBuffers' `page_locked`),
    the reader's buffers come from its pool: those made before it did are made again there,
    a line longer than a buffer grows it from the pool, the blocks are the file's bytes and say
    they are page-locked (only then), and every pool buffer goes back once, never while in
    use: a smaller one when a later block outgrows it, the rest at close()."""
    rng = random.Random(9)
    lines = [b"w" * rng.randrange(0, 900) + b"\n" for _ in range(300)]
    lines.insert(150, b"L" * 20000 + b"\n")
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(lines))
    pool, wanted = FakePool(), [None]
    buffers = file_blocks.BlockBuffers(page_locked=lambda: wanted[0])
    got, locked = [], []
    with open(path, "rb") as f:
        for k, block in enumerate(file_blocks.blocks_of_lines(f, 4096, buffers)):
            if k == 2:
                wanted[0] = pool  # (the engine's device split starts after the first blocks)
            got.append(bytes(block))
            locked.append(buffers.page_locked(block))
    assert b"".join(got) == path.read_bytes()
    assert locked[:3] == [False] * 3 and all(locked[3:])
    assert not buffers.page_locked(memoryview(b"x")) and not buffers.page_locked(b"x")
    assert any(a.size >= 20000 for a in pool.made)  # (the long line grew a buffer from the pool)
    current = list(buffers.arrays)
    assert all(any(a is m for m in pool.made) for a in current)
    # (while reading, only buffers of the pool too small for a later block went back, none in use)
    early = list(pool.back)
    assert all(any(b is m for m in pool.made) and not any(b is a for a in current) for b in early)
    buffers.close()
    assert len(pool.back) == len(early) + len(current) and all(
        any(b is a for b in pool.back) for a in current
    )
    assert len({id(b) for b in pool.back}) == len(pool.back) and buffers.arrays == []


def test_block_buffers_kept_from_one_job_to_the_next(tmp_path, monkeypatch):
    """A job's reader gives its buffers back when its reading is over (close) and the next
    job's reader takes them (no fresh pages to fault in), each buffer once; their blocks are
    each job's file."""
    monkeypatch.setattr(file_blocks, "KEPT", file_blocks.KeptBuffers())
    paths = []
    for k in range(2):
        paths.append(tmp_path / f"in{k}.txt")
        paths[-1].write_bytes(b"".join(b"%d " % k + b"v" * (j % 900) + b"\n" for j in range(300)))
    used = []
    for path in paths:
        buffers = file_blocks.BlockBuffers()
        with open(path, "rb") as f:
            assert (
                b"".join(bytes(b) for b in file_blocks.blocks_of_lines(f, 8192, buffers)) == path.read_bytes()
            )
        used.append(list(buffers.arrays))
        assert not any(buffers.page_locked(memoryview(a)) for a in used[-1])
        buffers.close()
    assert len(used[0]) == file_blocks.BLOCK_BUFFERS
    assert sorted(map(id, used[1])) == sorted(map(id, used[0]))  # the same buffers, each once


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
        n = file_blocks.read_into(f, buf, 5, 5 + (6 << 20))  # one parallel read
        assert n == 5 + (6 << 20) and f.tell() == 1000 + (6 << 20)
        assert bytes(buf[5:n]) == data[1000 : 1000 + (6 << 20)].tobytes()
        n = file_blocks.read_into(f, buf, 0, 16 << 20)  # past the end: what is left
        assert n == data.size - 1000 - (6 << 20) and f.tell() == data.size
        assert bytes(buf[:n]) == data[1000 + (6 << 20) :].tobytes()
        assert file_blocks.read_into(f, buf, 0, 16 << 20) == 0
    monkeypatch.setattr(file_blocks, "PARALLEL_READ", 1000)
    with open(path, "rb") as f:
        blocks = [bytes(b) for b in file_blocks.blocks_of_lines(f, 300_000)]
    assert b"".join(blocks) == data.tobytes() and all(b.endswith(b"\n") for b in blocks[:-1])
    assert native.cpu.read_at(-1, 0, buf) < 0
    # a pipe (`<(zcat ...)`) has no positions: read as a stream
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_bytes(data.tobytes()), daemon=True)
    feeder.start()
    with open(fifo, "rb") as f:
        blocks = [bytes(b) for b in file_blocks.blocks_of_lines(f, 300_000)]
    feeder.join()
    assert b"".join(blocks) == data.tobytes()


def _inputs(tmp_path, n_files: int, lines: int, plain=(2,), suffix=".gz") -> list:
    """JSONL inputs, compressed (`suffix`: .gz, or .zst as _zst writes it) but those numbered in
    `plain`."""
    rng = random.Random(5)
    paths = []
    for k in range(n_files):
        rows = [json.dumps({"text": f"{k}:{i} " + "ab\u00e9" * rng.randrange(0, 300)}) for i in range(lines)]
        data = ("\n".join(rows) + "\n").encode()
        path = tmp_path / (f"in{k}.jsonl" if k in plain else f"in{k}.jsonl{suffix}")
        path.write_bytes(data if k in plain else gzip.compress(data, 1) if suffix == ".gz" else _zst(data))
        paths.append(path)
    return paths


def _zst(data: bytes) -> bytes:
    """`data` as .zst: two frames (checksummed), a skippable frame between them."""
    zstandard = pytest.importorskip("zstandard", reason="the test extra installs zstandard")
    frames = zstandard.ZstdCompressor(write_checksum=True)
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"xyz"
    return frames.compress(data[:1000]) + skippable + frames.compress(data[1000:])


def _documents(paths, **kw) -> list:
    return [
        (w.file_index, p, b)
        for w in documents.iter_windows(paths, jsonl_field="text", window_bytes=1 << 14, **kw)
        for p, b in zip(w.positions.tolist(), w.blobs)
    ]


def _readers_alive() -> int:
    return sum(t.name == "blockbpe-read" and t.is_alive() for t in threading.enumerate())


def _processes(monkeypatch, process: bool, suffix=".gz") -> list:
    """process: compressed inputs (`suffix`) decompressed by processes of their own (.gz: ISA-L's
    command line; .zst: corpus/inputs/zstd_frames.py), every one started recorded in the list returned (and
    checked to run the command of its file's format); else in this process."""
    if process and suffix == ".gz" and compressed_input._fast_gzip is gzip:
        pytest.skip("decompressing processes need isal (pip install isal)")
    if process and suffix == ".zst" and sys.version_info < (3, 11):
        pytest.skip(".zst inputs are decompressed by processes from Python 3.11 (python -P)")
    monkeypatch.setattr(compressed_input, "PROCESS_BYTES", 0 if process else 1 << 62)
    started, init = [], compressed_input.DecompressingProcess.__init__
    commands = ["isal.igzip"] if suffix == ".gz" else [zstd_frames.__file__, compressed_input.zstd_command()]

    def record(self, path, argv):
        assert any(c is not None and c in argv for c in commands) and path.suffix == suffix
        init(self, path, argv)
        started.append(self._process)

    monkeypatch.setattr(compressed_input.DecompressingProcess, "__init__", record)
    return started


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("process", [False, True])
def test_compressed_inputs_read_ahead_at_once(tmp_path, monkeypatch, process, suffix):
    """Several .gz or .zst inputs are decompressed at once, ahead of their turn (a barrier that
    only two files' readers reading together pass), and give the documents, lines and files that
    each file read alone gives (and the plain file gives), in input order; no reading thread or
    process outlives the windows."""
    started = _processes(monkeypatch, process, suffix)
    monkeypatch.setattr(compressed_input, "FILES_AHEAD", 2)
    monkeypatch.setattr(compressed_input, "BYTES_AHEAD", 10 << 14)  # 2 blocks queued per file
    paths = _inputs(tmp_path, 5, 400, suffix=suffix)
    alone = [(fi, p, b) for fi, path in enumerate(paths) for _, p, b in _documents([path])]
    assert len(alone) == 5 * 400 and _readers_alive() == 0
    barrier = threading.Barrier(2, timeout=10)
    opened = compressed_input.open_input

    class FirstReadWaits:
        """A file whose first read waits at the barrier."""

        def __init__(self, f):
            self.f, self.waited = f, False

        def readinto(self, buf) -> int:
            if not self.waited:
                self.waited = barrier.wait() >= 0
            return self.f.readinto(buf)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

        close = __exit__

    def open_input(path, fast=False):
        f = opened(path, fast)
        if path.name in (f"in0.jsonl{suffix}", f"in1.jsonl{suffix}") and fast:
            return FirstReadWaits(f)  # (their first reads wait for each other)
        return f

    monkeypatch.setattr(compressed_input, "open_input", open_input)
    monkeypatch.setattr(documents, "open_input", open_input)
    assert _documents(paths) == [(fi, p, b) for fi, p, b in alone]
    assert barrier.n_waiting == 0 and not barrier.broken
    (tmp_path / "plain").mkdir()
    assert _documents(_inputs(tmp_path / "plain", 5, 400, plain=range(5))) == alone  # (the same lines)
    assert _readers_alive() == 0
    assert len(started) == (2 * 4 if process else 0)
    assert all(p.returncode == 0 and p.stdout.closed for p in started)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("process", [False, True])
def test_a_later_compressed_input_fails_at_its_turn(tmp_path, monkeypatch, process, suffix):
    """A truncated .gz or .zst read ahead of its turn raises its one-line file:line error only
    once the inputs before it have given all their documents; stopping early ends every reader
    (and decompressing process)."""
    started = _processes(monkeypatch, process, suffix)
    monkeypatch.setattr(compressed_input, "FILES_AHEAD", 3)
    monkeypatch.setattr(compressed_input, "BYTES_AHEAD", 12 << 14)  # (one block queued per file)
    paths = _inputs(tmp_path, 4, 300, plain=(), suffix=suffix)
    paths[2].write_bytes(paths[2].read_bytes()[:-200])
    seen = []
    with pytest.raises(CorpusError, match=rf"in2\.jsonl\{suffix}:\d+: cannot read"):
        for w in documents.iter_windows(paths, jsonl_field="text", window_bytes=1 << 14):
            seen += [w.file_index] * w.ndocs
    assert seen[: 2 * 300] == [0] * 300 + [1] * 300 and set(seen) <= {0, 1, 2}
    windows = documents.iter_windows(paths, jsonl_field="text", window_bytes=1 << 14)
    next(windows)
    assert _readers_alive() >= 2  # (this file's and the next ones')
    windows.close()
    for _ in range(100):
        if _readers_alive() == 0:
            break
        time.sleep(0.05)
    assert _readers_alive() == 0
    # (each process waited for and its pipes closed: none left running or as a zombie)
    assert all(p.returncode is not None and p.stdout.closed for p in started)
    assert len(started) >= (5 if process else 0)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_failed_decompressing_process_is_an_error(tmp_path, monkeypatch, suffix):
    """A decompressing process that dies on a good file (killed, or isal or zstandard missing
    there) is a one-line error naming the file, never a short input."""
    started = _processes(monkeypatch, True, suffix)
    paths = _inputs(tmp_path, 1, 200, plain=(), suffix=suffix)
    init = compressed_input.DecompressingProcess.__init__

    def killed(self, path, argv):
        init(self, path, argv)
        self._process.kill()

    monkeypatch.setattr(compressed_input.DecompressingProcess, "__init__", killed)
    with pytest.raises(
        CorpusError, match=rf"in0\.jsonl\{suffix}: cannot read: the decompressing process exited with -9"
    ):
        _documents(paths)
    assert len(started) == 1 and started[0].stdout.closed


@pytest.mark.parametrize("process", [False, True])
def test_zst_inputs(tmp_path, monkeypatch, process):
    """.zst inputs (`zstandard`), decompressed in this process or (process) by processes of
    their own: frames one after another (a skippable one too; the zstd command's output where
    it is installed) give the plain file's documents, several read ahead at once; a truncated
    or corrupt one is the one-line file:line error; without the package, a one-line error
    naming the file (no process started)."""
    started = _processes(monkeypatch, process, ".zst")
    (plain,) = _inputs(tmp_path, 1, 3000, plain=(0,))
    blob = _zst(plain.read_bytes())
    paths = [tmp_path / f"in{k}.jsonl.zst" for k in range(3)]
    for p in paths:
        p.write_bytes(blob)
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-f", str(plain), "-o", str(paths[2])], check=True)
    want = _documents([plain])
    monkeypatch.setattr(compressed_input, "FILES_AHEAD", 2)
    got = _documents(paths)
    assert [(p, b) for _, p, b in got] == [(p, b) for _, p, b in want] * 3
    assert [fi for fi, _, _ in got] == [k for k in range(3) for _ in want]
    assert corpus._input_bytes(paths) is None  # (the progress bar's total: not the files' sizes)
    (tmp_path / "t.jsonl.zst").write_bytes(blob[:-300])
    with pytest.raises(
        CorpusError, match=r"t\.jsonl\.zst:\d+: cannot read: the \.zst file ended inside a frame"
    ):
        _documents([tmp_path / "t.jsonl.zst"])
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 0x55
    (tmp_path / "b.jsonl.zst").write_bytes(bytes(bad))
    with pytest.raises(CorpusError, match=r"b\.jsonl\.zst(:\d+)?: cannot read: invalid \.zst data"):
        _documents([tmp_path / "b.jsonl.zst"])
    # (each process waited for: the good files' exited with 0, the truncated and corrupt one's with 1)
    assert [p.returncode for p in started] == ([0, 0, 0, 1, 1] if process else [])
    assert all(p.stdout.closed for p in started)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # (its import fails)
    with pytest.raises(CorpusError, match=r"in0\.jsonl\.zst: \.zst inputs need the zstandard package"):
        _documents(paths)
    assert _readers_alive() == 0 and len(started) == (5 if process else 0)


@pytest.mark.parametrize("command", ["zstd_frames.py", "zstd command line"])
def test_a_zst_decompressing_process_reads_as_zstd_frames(tmp_path, monkeypatch, command):
    """A .zst's decompressing process (corpus/inputs/zstd_frames.py run as a script, or the zstd command line
    where it works) gives the bytes that ZstdFrames gives in this process, and fails where it
    fails: exit status 1 (corpus/inputs/zstd_frames.py: ZstdFrames's error its last line on stderr), never a
    short output."""
    if command == "zstd_frames.py":
        monkeypatch.setattr(compressed_input, "zstd_command", lambda: None)
    elif compressed_input.zstd_command() is None:
        pytest.skip("no working zstd command line here")
    _processes(monkeypatch, True, ".zst")
    data = b"".join(b"line %d " % i + b"\xc3\xa9" * (i % 70) + b"\n" for i in range(40000))
    blob = _zst(data)
    corrupt = bytearray(blob)
    corrupt[len(corrupt) // 2] ^= 0x55
    first_frame = blob[: blob.index((0x184D2A50).to_bytes(4, "little")) + 11]  # (and the skippable one)
    files = {
        "whole": (blob, data),
        "empty": (b"", b""),
        "first frame": (first_frame, data[:1000]),
        "truncated": (blob[:-300], None),
        "cut in the skippable frame": (first_frame[:-2], None),
        "corrupt": (bytes(corrupt), None),
        "not a frame after the frames": (blob + b"not zstd", None),
    }
    for name, (content, want) in files.items():
        path = tmp_path / f"{name}.zst"
        path.write_bytes(content)
        results = []
        for fast in (False, True):  # (in this process, then by a process)
            buf = np.empty(len(data) + 1, np.uint8)
            try:
                with compressed_input.open_input(path, fast=fast) as f:
                    assert isinstance(f, compressed_input.DecompressingProcess) == fast
                    results.append(bytes(buf[: file_blocks.read_into(f, buf, 0, buf.size)]))
            except (OSError, EOFError) as e:
                results.append(str(e))
        assert results[0] == want if want is not None else isinstance(results[0], str), name
        if want is not None:
            assert results[1] == results[0], name
        elif command == "zstd_frames.py":
            assert results[1] == f"the decompressing process exited with 1: {results[0]}", name
        else:  # (the command line's own words)
            assert results[1].startswith("the decompressing process exited with 1: "), name


@pytest.mark.parametrize("read_bytes", [1, 7, 300, 64 << 10])
def test_zstd_frames_across_any_read_size(tmp_path, monkeypatch, read_bytes):
    """Frames and skippable frames cut anywhere by the reads (headers split, a frame ending
    exactly at a read's end) give every byte, and a truncated last frame is still an error."""
    zstandard = pytest.importorskip("zstandard", reason="the test extra installs zstandard")
    rng = random.Random(read_bytes)
    parts = [bytes(rng.choice(b"ab \n\xc3\xa9") for _ in range(rng.randint(0, 3000))) for _ in range(40)]
    blob = b""
    for k, part in enumerate(parts):
        blob += zstandard.ZstdCompressor(write_checksum=k % 2 == 0).compress(part)
        if k % 3 == 0:
            blob += (
                (0x184D2A50 + k % 16).to_bytes(4, "little") + (k % 5).to_bytes(4, "little") + b"s" * (k % 5)
            )
    monkeypatch.setattr(zstd_frames, "READ_BYTES", read_bytes)
    path = tmp_path / "frames.zst"
    path.write_bytes(blob)
    with zstd_frames.ZstdFrames(path) as f:
        assert f.read() == b"".join(parts)
    path.write_bytes(blob[:-2])  # (the last frame cut short)
    with pytest.raises((OSError, EOFError)), zstd_frames.ZstdFrames(path) as f:
        f.read()


def test_a_zstd_command_line_is_used_only_if_it_decodes_the_probe(tmp_path, monkeypatch):
    """A `zstd` on the PATH that fails the probe (an old one without --format, or not zstd at
    all) is not used: corpus/inputs/zstd_frames.py decompresses instead."""
    if sys.version_info < (3, 11):
        pytest.skip(".zst inputs are decompressed by processes from Python 3.11 (python -P)")
    path = tmp_path / "in.jsonl.zst"
    path.write_bytes(_zst(b"x\n" * 1000))
    monkeypatch.setattr(compressed_input, "PROCESS_BYTES", 0)
    for script, used in (
        ("echo 'zstd: unknown option --format=zstd' >&2; exit 1", False),
        ("printf abcxyz", False),
        ("cat > /dev/null; printf abcdef", True),
    ):
        fake = tmp_path / "bin" / "zstd"
        fake.parent.mkdir(exist_ok=True)
        fake.write_text(f"#!/bin/sh\n{script}\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
        compressed_input.zstd_command.cache_clear()
        try:
            assert compressed_input.zstd_command() == (str(fake) if used else None), script
            assert (compressed_input._zstd_argv(path)[0] == str(fake)) == used, script
        finally:
            compressed_input.zstd_command.cache_clear()
