"""The corpus command's paper cuts: `verify` from any directory (the sidecar's inputs stored
absolute; an old sidecar's relative ones still read), an output that cannot be created is a
one-line error, a failed job removes the output directory it created (and only that), and the
progress bar's clock runs from the job's start (its rate is the job's, not one window's)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import blockbpe_jax as bb
from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus

from helpers import CPU, encode_argv

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(200))


@pytest.fixture(scope="module")
def vocab_path() -> Path:
    from blockbpe_jax._data import find_data_dir

    root = find_data_dir()
    if root is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA)")
    return root / "vocab" / "tiktoken" / "r50k_base.tiktoken"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockbpe-jax") and "error:" in lines[0], err
    assert "Traceback" not in err
    return lines[0]


def _encode_here(capsys, monkeypatch, tmp_path, vocab_path) -> Path:
    """Encodes work/in.txt into work/out/ with paths relative to work/ (the encode's directory)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.txt").write_text(TEXT)
    monkeypatch.chdir(work)
    rc, _, err = run_cli(capsys, *encode_argv("in.txt", "out", vocab_path, "--device", "cpu"))
    assert rc == 0, err
    return work / "out" / "shard"


def test_verify_from_any_directory(capsys, monkeypatch, tmp_path, vocab_path):
    prefix = _encode_here(capsys, monkeypatch, tmp_path, vocab_path)
    (inputs,) = json.loads(prefix.with_suffix(".json").read_text())["inputs"]
    assert Path(inputs).is_absolute() and Path(inputs) == tmp_path / "work" / "in.txt"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rc, out, err = run_cli(capsys, "verify", prefix, "--sample", 50)
    assert rc == 0 and "verify: ok" in out, err


def test_old_sidecar_with_relative_inputs_still_verifies(capsys, monkeypatch, tmp_path, vocab_path):
    """A sidecar written before: inputs relative to the encode's directory (read from there), or
    relative to the sidecar's directory (read from anywhere)."""
    prefix = _encode_here(capsys, monkeypatch, tmp_path, vocab_path)
    sidecar = prefix.with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    for relative, cwd in (("in.txt", tmp_path / "work"), ("../in.txt", tmp_path)):
        sidecar.write_text(json.dumps(dict(meta, inputs=[relative])))
        monkeypatch.chdir(cwd)
        rc, out, err = run_cli(capsys, "verify", prefix, "--sample", 50)
        assert rc == 0 and "verify: ok" in out, (relative, err)


def test_output_that_cannot_be_created_is_one_line(capsys, tmp_path, vocab_path):
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for out in (blocker / "out", blocker / "deeper" / "out"):
        rc, _, err = run_cli(capsys, *encode_argv(src, out, vocab_path, "--device", "cpu"))
        assert rc == 2 and str(blocker) in one_error_line(err), err
    tok = bb.Tokenizer.from_file(vocab_path)
    with pytest.raises(corpus.CorpusError, match="cannot create"):
        corpus.encode_files(tok, [src], blocker / "out" / "shard")


def test_full_disk_mid_job_is_one_line(capsys, tmp_path, vocab_path, monkeypatch):
    """A write that fails on a shard thread (the disk full): one line naming the shard, exit 1,
    and the output directory the job made is gone."""
    from blockbpe_jax import native

    src = tmp_path / "in.txt"
    src.write_text(TEXT * 20)

    def reserve_file(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(native.cpu, "reserve_file", reserve_file)
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, *encode_argv(src, out, vocab_path, "--device", "cpu"))
    line = one_error_line(err)
    assert rc == 1 and "No space left on device" in line and str(out / "shard_00000.bin") in line
    assert not out.exists()


def test_failed_job_removes_the_directory_it_created(capsys, tmp_path, vocab_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(TEXT.encode() + b"\xff\xfe broken\n" + TEXT.encode())
    new = tmp_path / "new"
    rc, _, err = run_cli(capsys, *encode_argv(bad, new / "deeper", vocab_path, "--device", "cpu"))
    assert rc == 2 and f"{bad}:201" in one_error_line(err)
    assert not new.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    for fmt in ("flat", "npz"):
        rc, _, err = run_cli(
            capsys, *encode_argv(bad, existing, vocab_path, "--device", "cpu", "--format", fmt)
        )
        assert rc == 2, err
        assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"]


def test_progress_clock_starts_with_the_job(tmp_path, vocab_path, monkeypatch):
    """The bar is drawn at the first window's end, but its elapsed time and rate are the job's:
    on a job slower than its one window's writing (here: 0.4 s of start-up), the bar said GB/s."""
    pytest.importorskip("tqdm")
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    real = corpus.encode_documents

    def slow_start(*a, **k):
        time.sleep(0.4)
        return real(*a, **k)

    monkeypatch.setattr(corpus, "encode_documents", slow_start)
    seen = {}
    real_close = corpus.Progress.close

    def close(self):
        seen.update(self.bar.format_dict)
        real_close(self)

    monkeypatch.setattr(corpus.Progress, "close", close)
    tok = bb.Tokenizer.from_file(vocab_path)
    corpus.encode_files(tok, [src], tmp_path / "out" / "shard", progress=True, device=CPU)
    size = len(TEXT.encode())
    assert seen["n"] == seen["total"] == size
    assert seen["elapsed"] >= 0.4, seen
    assert seen["rate"] is None or seen["rate"] <= size / 0.4, seen
