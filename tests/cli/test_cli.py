"""The `blockbpe-jax` command line tool: padded .npz/.npy shards equal `encode`'s arrays; info;
clear errors. (Flat shards and verify: tests/corpus/test_corpus_shards.py.)"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import cli

from helpers import encode_argv

CL100K = "vocab/tiktoken/cl100k_base.tiktoken"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def small_text(tmp_path_factory, request) -> Path:
    """The first ~50 KB of War and Peace (ending on a line), as a file."""
    from blockbpe_jax._data import find_data_dir

    root = find_data_dir()
    if root is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA)")
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()[:50_000]
    raw = raw[: raw.rfind(b"\n") + 1]
    path = tmp_path_factory.mktemp("cli") / "wp50k.txt"
    path.write_bytes(raw)
    return path


@pytest.fixture(scope="module")
def vocab_path() -> Path:
    from blockbpe_jax._data import find_data_dir

    root = find_data_dir()
    if root is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA)")
    return root / CL100K


@pytest.fixture(scope="module")
def tok(vocab_path) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(vocab_path)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def load_shards(out_dir: Path, prefix: str = "shard-") -> tuple[dict, list[dict]]:
    manifest = json.loads((out_dir / f"{prefix}manifest.json").read_text())
    shards = []
    for shard in manifest["shards"]:
        if manifest["format"] == "npz":
            with np.load(out_dir / shard["files"][0]) as z:
                shards.append({k: z[k] for k in z.files})
        else:
            shards.append({f.split(".")[-2]: np.load(out_dir / f) for f in shard["files"]})
    return manifest, shards


def reference(tok, docs: list[bytes], width: int, **kw):
    """`encode` on the same documents, at the shard's width."""
    data, lengths = bb.pack_strings(docs)
    ids, counts = bb.encode(data, lengths, tok, max_tokens=width, **kw)
    return np.asarray(ids), np.asarray(counts)


def check_shards_equal_encode(tok, shards, docs, **kw):
    start = 0
    for shard in shards:
        n = len(shard["counts"])
        assert shard["ids"].dtype == np.int32 and shard["counts"].dtype == np.int32
        ids, counts = reference(tok, docs[start : start + n], shard["ids"].shape[1], **kw)
        np.testing.assert_array_equal(shard["counts"], counts)
        np.testing.assert_array_equal(shard["ids"], ids)
        start += n
    assert start == len(docs)


def test_encode_lines_equals_encode(capsys, tmp_path, small_text, vocab_path, tok):
    out = tmp_path / "out"
    rc, stdout, err = run_cli(
        capsys,
        *encode_argv(small_text, out, vocab_path, "--batch-size", 64, "--shard-size", 200, "--format", "npz"),
    )
    assert rc == 0, err
    docs = [line for line in small_text.read_bytes().split(b"\n") if line]
    manifest, shards = load_shards(out)
    assert manifest["documents"] == len(docs) and len(shards) == -(-len(docs) // 200)
    assert manifest["mode"] == "exact" and manifest["truncated_documents"] == 0
    check_shards_equal_encode(tok, shards, docs, mode="exact")
    # positions point back at the source lines
    lines = small_text.read_bytes().split(b"\n")
    pos = np.concatenate([s["position"] for s in shards])
    assert [lines[p - 1] for p in pos[:5]] == docs[:5]
    assert f"{len(docs)} documents" in stdout


def test_encode_chunks_truncation_npy_bytes_mode(capsys, tmp_path, small_text, vocab_path, tok):
    out = tmp_path / "out"
    rc, _, err = run_cli(
        capsys,
        *encode_argv(
            small_text,
            out,
            vocab_path,
            "--split",
            "chunk:1000",
            "--max-tokens",
            150,
            "--max-len",
            1024,
            "--mode",
            "bytes",
            "--format",
            "npy",
            "--pad-id",
            7,
        ),
    )
    assert rc == 0, err
    raw = small_text.read_bytes()
    docs = [raw[a:b] for a, b in cli.chunk_cuts(raw, 1000)]
    assert b"".join(docs) == raw and max(map(len, docs)) <= 1000
    manifest, shards = load_shards(out)
    assert shards[0]["ids"].shape[1] == 150
    truncated = int(sum((s["counts"] > 150).sum() for s in shards))
    assert truncated > 0 and manifest["truncated_documents"] == truncated
    assert "truncated" in err
    check_shards_equal_encode(tok, shards, docs, mode="bytes", pad_id=7)


def test_encode_jsonl(capsys, tmp_path, vocab_path, tok):
    rows = [{"text": f"Question {i}: what is {i} + {i}?\nAnswer: {2 * i}.", "id": i} for i in range(40)]
    rows[3]["text"] = "ünïcödé — ✓ 日本語"
    src = tmp_path / "data.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = tmp_path / "out"
    rc, _, err = run_cli(
        capsys,
        *encode_argv(src, out, vocab_path, "--jsonl-field", "text", "--batch-size", 16, "--format", "npz"),
    )
    assert rc == 0, err
    _, shards = load_shards(out)
    docs = [r["text"].encode() for r in rows]
    check_shards_equal_encode(tok, shards, docs, mode="exact")
    assert shards[0]["position"].tolist() == list(range(1, 41))


def test_encode_window_bytes(capsys, tmp_path, monkeypatch, small_text, vocab_path, tok):
    """--window-bytes: the file read in windows of ~1 KB (dozens of windows) gives the documents'
    `encode_batch` ids, as the default window does."""
    from blockbpe_jax.corpus import job as corpus
    from blockbpe_jax.corpus.job import read_shards

    asked = []  # the window sizes the job's reader was given
    read = corpus.iter_windows
    monkeypatch.setattr(corpus, "iter_windows", lambda *a, **k: asked.append(a[4]) or read(*a, **k))
    lines = [line.removesuffix(b"\r") for line in small_text.read_bytes().split(b"\n")]
    docs = [line for line in lines if line]
    ids, counts = map(np.asarray, tok.encode_batch(docs))
    want = [row[:n].tolist() for row, n in zip(ids, counts)]
    for extra in ((), ("--window-bytes", 1000)):
        out = tmp_path / f"w{len(extra)}"
        rc, _, err = run_cli(capsys, *encode_argv(small_text, out, vocab_path, "--format", "flat", *extra))
        assert rc == 0, err
        assert [d.tolist() for d in read_shards(out / "shard")] == want
    assert asked == [corpus.WINDOW_BYTES, 1000]


def test_encode_allowed_special(capsys, tmp_path, vocab_path, tok):
    src = tmp_path / "s.txt"
    src.write_text("hello<|endoftext|>world\n")
    for flag, expect_special in (("none", False), ("all", True), ("<|endoftext|>", True)):
        out = tmp_path / f"out_{expect_special}_{len(flag)}"
        rc, _, err = run_cli(
            capsys, *encode_argv(src, out, vocab_path, "--allowed-special", flag, "--format", "npz")
        )
        assert rc == 0, err
        _, shards = load_shards(out)
        assert (100257 in shards[0]["ids"][0].tolist()) == expect_special


def test_info(capsys, vocab_path):
    rc, out, err = run_cli(capsys, "info", "--vocab", vocab_path)
    assert rc == 0, err
    assert "cl100k_base" in out and "100277" in out
    assert "<|endoftext|>=100257" in out
    assert "cl100k" in out and "exact mode" in out and "table bytes" in out
    rc, out, _ = run_cli(capsys, "info", "--vocab", vocab_path, "--json")
    info = json.loads(out)
    assert info["n_vocab"] == 100277 and info["pattern_name"] == "cl100k"
    assert info["special_tokens"]["<|endoftext|>"] == 100257
    assert info["table_bytes"] == sum(t["bytes"] for t in info["tables"].values()) > 0
    assert isinstance(info["exact_mode"], bool)


def test_info_tiktoken_name_offline(capsys, tmp_path, monkeypatch, vocab_path):
    pytest.importorskip("tiktoken")
    cache = tmp_path / "tiktoken_cache"
    cache.mkdir()
    (cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(vocab_path.read_bytes())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    rc, out, err = run_cli(capsys, "info", "--tiktoken", "cl100k_base", "--json")
    assert rc == 0, err
    assert json.loads(out)["n_vocab"] == 100277
    rc, _, err = run_cli(capsys, "info", "--tiktoken", "no_such_encoding")
    assert rc == 2 and "no_such_encoding" in err and len(err.strip().splitlines()) == 1


def test_bench(capsys, small_text, vocab_path):
    rc, out, err = run_cli(
        capsys,
        "bench",
        small_text,
        "--vocab",
        vocab_path,
        "--batch",
        16,
        "--bytes",
        256,
        "--repeats",
        1,
        "--json",
    )
    assert rc == 0, err
    result = json.loads(out)
    assert result["device_MBps"] > 0 and result["tokens"] > 0 and result["batch"] == 16


def _bad_vocab_files(tmp_path: Path) -> list[Path]:
    bad_tiktoken = tmp_path / "bad.tiktoken"
    bad_tiktoken.write_text("IQ== 0\nnot-base64!! 1\n")
    bad_json = tmp_path / "tokenizer.json"
    bad_json.write_text('{"model": {"type": "BPE", "vocab": ')
    return [bad_tiktoken, bad_json]


def _unknown_copy(vocab_path: Path, stem: Path) -> Path:
    path = stem.with_suffix(".tiktoken")
    path.write_bytes(vocab_path.read_bytes() + b"\n")  # (a blank line more: bytes not tiktoken's)
    return path


@pytest.mark.parametrize(
    "case",
    [
        "missing_input",
        "missing_vocab",
        "bad_tiktoken",
        "bad_json",
        "unknown_command",
        "no_command",
        "bad_split",
        "bad_special",
        "no_vocab",
        "jsonl_field",
        "output_exists",
        "bad_batch",
        "bad_pack_width",
        "bad_window_bytes",
        "exact_without_pattern",
        "bad_device_split_variable",
    ],
)
def test_errors_exit_2_with_one_line(capsys, tmp_path, small_text, vocab_path, case, monkeypatch):
    bad_tiktoken, bad_json = _bad_vocab_files(tmp_path)
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"text": "a"}\n{"body": "b"}\n')
    done = tmp_path / "done"
    done.mkdir()
    (done / "shard-manifest.json").write_text("{}")
    out = tmp_path / "o"
    argv, needle = {
        "missing_input": (
            ["encode", tmp_path / "nope.txt", "-o", out, "--vocab", vocab_path],
            str(tmp_path / "nope.txt"),
        ),
        "missing_vocab": (["info", "--vocab", tmp_path / "nope.tiktoken"], str(tmp_path / "nope.tiktoken")),
        "bad_tiktoken": (["info", "--vocab", bad_tiktoken], f"{bad_tiktoken}:2"),
        "bad_json": (["encode", small_text, "-o", out, "--vocab", bad_json], str(bad_json)),
        "unknown_command": (["tokenise", small_text], "tokenise"),
        "no_command": ([], "COMMAND"),
        "bad_split": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path, "--split", "words"],
            "--split",
        ),
        "bad_special": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path, "--allowed-special", "<|nope|>"],
            "<|nope|>",
        ),
        "no_vocab": (["encode", small_text, "-o", out], "--vocab"),
        "jsonl_field": (
            ["encode", jsonl, "--jsonl-field", "text", "-o", out, "--vocab", vocab_path],
            f"{jsonl}:2",
        ),
        "output_exists": (
            ["encode", small_text, "-o", done, "--vocab", vocab_path, "--format", "npz"],
            "--overwrite",
        ),
        "bad_batch": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path, "--batch-size", "0"],
            "--batch-size",
        ),
        "bad_pack_width": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path, "--pack-width", "-1"],
            "--pack-width must be 0 or more, got -1",
        ),
        "bad_window_bytes": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path, "--window-bytes", "0"],
            "--window-bytes",
        ),
        "exact_without_pattern": (  # (a rank file of unknown contents has no pattern)
            ["encode", small_text, "-o", out, "--vocab", _unknown_copy(vocab_path, tmp_path / "mine")],
            "--mode exact: exact mode is not supported for mine: it has no pre-tokenizer pattern",
        ),
        "bad_device_split_variable": (
            ["encode", small_text, "-o", out, "--vocab", vocab_path],
            "BLOCKBPE_DEVICE_SPLIT must be 0 or 1, got 'on'",
        ),
    }[case]
    if case == "bad_device_split_variable":
        monkeypatch.setenv("BLOCKBPE_DEVICE_SPLIT", "on")
    rc, stdout, err = run_cli(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockbpe-jax") and "error:" in lines[0], err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_python_dash_m(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "blockbpe_jax", "--help"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0 and "encode" in ok.stdout and "bench" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "blockbpe_jax", "frobnicate"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "frobnicate" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_command_process_writes_everything_before_it_ends(tmp_path, small_text, vocab_path, tok):
    """The command's process ends without the interpreter's teardown (cli.end_process): its
    shards are complete (ids == encode_batch's), its summary line printed, its exit status
    kept (0 here; 2 for a bad input, test_python_dash_m)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "blockbpe_jax",
            "encode",
            str(small_text),
            "-o",
            str(out),
            "--vocab",
            str(vocab_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in small_text.read_bytes().split(b"\n") if line.strip()]
    assert f"{len(lines)} documents" in done.stdout and done.stdout.endswith("MB/s of input)\n")
    from blockbpe_jax.corpus import job as corpus

    got = [a.tolist() for a in corpus.read_shards(out / "shard")]
    enc = tok.encode_batch(lines)
    ids, counts = np.asarray(enc.ids), np.asarray(enc.counts)
    assert got == [ids[k, : counts[k]].tolist() for k in range(len(lines))]


@pytest.mark.parametrize("user", [None, "true"])
def test_command_turns_preallocation_off_unless_set(monkeypatch, user):
    """The command's process does not preallocate GPU memory (start-up), unless the user says."""
    if user is None:
        monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    else:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", user)
    seen = []
    monkeypatch.setattr(
        cli, "main", lambda: seen.append(cli.os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]) or 0
    )
    monkeypatch.setattr(cli, "end_process", lambda code: code)  # (the real one ends pytest's process)
    assert cli.console_main() == 0
    assert seen == [user or "false"]


def test_main_in_a_process_that_then_ends_normally(tmp_path, small_text):
    """`main` called in-process (a notebook, a script) that fails on the vocabulary, after the
    input's read-ahead and the device's start-up began on their threads: both are stopped and
    waited for, so the interpreter's own shutdown does not meet a thread inside native code
    (that aborted: "terminate called ...", exit status 134)."""
    script = (
        "import sys; from blockbpe_jax.cli import main; "
        f"rc = main(['encode', {str(small_text)!r}, '-o', {str(tmp_path / 'o')!r}, '--tiktoken', 'nope']); "
        "import threading; "
        "print(rc, [t.name for t in threading.enumerate() if t.name == 'blockbpe-background'])"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "[]"], done.stdout
    assert "unknown tiktoken encoding 'nope'" in done.stderr and "terminate" not in done.stderr
