"""Streams as the corpus job's inputs (blockbpe_jax/corpus/inputs/files.py `check_inputs`): a pipe, or `-`
for standard input, read once as it comes: the same ids as the same bytes in a file, beside
regular and small inputs; named twice, or given to --verify (which reads the inputs again), a
one-line error."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.types import CorpusError, VerifyError

import corpus_shared
from helpers import encode_argv

# (corpus_shared's module-scoped fixtures)
root, r50k, war_and_peace = corpus_shared.root, corpus_shared.r50k, corpus_shared.war_and_peace


@pytest.fixture
def jsonl(tmp_path, war_and_peace) -> Path:
    """~400 KB of War and Peace's non-blank lines as JSONL, one of them longer than a 64 KiB block."""
    lines = war_and_peace[:400_000].decode("utf-8", "ignore").split("\n")
    rows = [json.dumps({"text": t}) for t in lines if t.strip()]
    rows[50] = json.dumps({"text": " ".join(lines[:3000])})  # (a line longer than a block)
    path = tmp_path / "wp.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def _fifo_of(tmp_path, data: bytes, name: str = "pipe") -> Path:
    """A named pipe a thread writes `data` into (once a reader opens it)."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    threading.Thread(target=lambda: fifo.write_bytes(data), daemon=True).start()
    return fifo


def test_a_pipe_gives_the_ids_of_its_bytes_in_a_file(tmp_path, r50k, jsonl):
    """A pipe between two small files and a large one: the ids and offsets of the same inputs as
    files, in blocks smaller than a window and in one."""
    small = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    small[0].write_text('{"text": "first small"}\n{"text": "second"}')
    small[1].write_text('{"text": "after the pipe"}\n')
    files = [small[0], jsonl, small[1], jsonl]
    want = r50k.encode_files_to_arrays(files, jsonl_field="text", window_bytes=1 << 16)
    for window in (1 << 16, 1 << 22):
        pipe = _fifo_of(tmp_path, jsonl.read_bytes(), f"pipe{window}")
        got = r50k.encode_files_to_arrays(
            [small[0], pipe, small[1], jsonl], jsonl_field="text", window_bytes=window
        )
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_standard_input_through_the_command(tmp_path, root, jsonl):
    """`blockbpe-jax encode -` with the JSONL on standard input writes the shards of the file."""
    vocab = root / "vocab/tiktoken/r50k_base.tiktoken"
    assert cli.main(encode_argv(jsonl, tmp_path / "file", vocab, "--jsonl-field", "text")) == 0
    argv = [
        sys.executable,
        "-m",
        "blockbpe_jax",
        *encode_argv("-", tmp_path / "stdin", vocab, "--jsonl-field", "text"),
    ]
    with open(jsonl, "rb") as f:  # (a pipe, as from `zstd -dc ... |`)
        feeder = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        done = subprocess.run(argv, stdin=feeder.stdout, capture_output=True, text=True, timeout=300)
        feeder.wait()
    assert done.returncode == 0, done.stderr
    got = [a.tolist() for a in corpus.read_shards(tmp_path / "stdin" / "shard")]
    assert got == [a.tolist() for a in corpus.read_shards(tmp_path / "file" / "shard")] and len(got) > 100
    assert json.loads((tmp_path / "stdin" / "shard.json").read_text())["inputs"] == ["/dev/stdin"]


def test_stream_errors(tmp_path, capsys, root, r50k, jsonl):
    """A stream named twice; --verify of a stream (refused before the job); verify() of shards
    written from a stream: each a one-line error naming it."""
    pipe = _fifo_of(tmp_path, b"")
    with pytest.raises(CorpusError, match=r"pipe: a stream is read once: name it once$"):
        corpus.check_inputs([pipe, jsonl, pipe])
    vocab = root / "vocab/tiktoken/r50k_base.tiktoken"
    rc = cli.main(encode_argv(pipe, tmp_path / "o", vocab, "--verify", "10"))
    assert rc != 0 and f"--verify reads the inputs again: {pipe} is a stream" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    pipe.open("rb").close()  # (the writer's open returns)
    pipe2 = _fifo_of(tmp_path, jsonl.read_bytes(), "pipe2")
    corpus.encode_files(r50k, [pipe2], tmp_path / "s" / "x", jsonl_field="text")
    with pytest.raises(VerifyError, match=r"pipe2: a stream \(standard input, a pipe\) cannot be read again"):
        corpus.verify(tmp_path / "s" / "x", r50k)


def test_a_stream_is_read_a_block_per_native_call(tmp_path, monkeypatch, jsonl):
    """A pipe is opened unbuffered, made 1 MiB, and each block read by `read_stream` (one call,
    the GIL released: Python's buffered reads wait for the GIL after each piece), its documents
    those of the file."""
    from blockbpe_jax.corpus.inputs import compressed as compressed_input, files as file_blocks
    from blockbpe_jax.corpus import documents
    from blockbpe_jax import native

    pipe = _fifo_of(tmp_path, b"")
    calls, cpu = [], native.cpu

    class Counting:  # (the CPU module with read_stream counted)
        def __getattr__(self, name):
            return getattr(cpu, name)

        def read_stream(self, fd, buf):
            calls.append(len(buf))
            return cpu.read_stream(fd, buf)

    monkeypatch.setattr(file_blocks.native, "cpu", Counting())
    with compressed_input.open_input(pipe) as f:
        assert not f.seekable() and not hasattr(f, "peek")  # (not a buffered reader)
        assert fcntl.fcntl(f.fileno(), 1032) >= 1 << 20  # F_GETPIPE_SZ: the pipe made larger
    pipe = _fifo_of(tmp_path, jsonl.read_bytes(), "again")
    got = [d.data for d in documents.iter_documents([pipe], jsonl_field="text")]
    monkeypatch.undo()
    want = [d.data for d in documents.iter_documents([jsonl], jsonl_field="text")]
    assert got == want and len(calls) >= 1
