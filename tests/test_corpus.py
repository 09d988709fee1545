"""The corpus job's flat token shards (blockbpe_jax/corpus.py, shards.py): ids equal
`Tokenizer.encode_batch`'s and tiktoken's for documents of any length, text back via decode,
uint16/uint32 by vocabulary size, verify, and a one-line error for every bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import cli, corpus, documents, native, staging, window_encode
from blockbpe_jax._data import find_data_dir


@pytest.fixture(scope="module")
def root() -> Path:
    path = find_data_dir()
    if path is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA or place it at ../shared/data)")
    return path


@pytest.fixture(scope="module")
def cl100k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/cl100k_base.tiktoken")


@pytest.fixture(scope="module")
def r50k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/r50k_base.tiktoken")


@pytest.fixture(scope="module")
def war_and_peace(root) -> bytes:
    return (root / "corpus/war_and_peace_en.txt").read_bytes()


def utf8_cut(raw: bytes, n: int) -> bytes:
    while n < len(raw) and (raw[n] & 0xC0) == 0x80:
        n -= 1
    return raw[:n]


def encode_batch_ids(tok, docs: list[bytes]) -> list[list[int]]:
    """The reference: `encode_batch` on the short documents together, long ones alone."""
    out: dict[int, list[int]] = {}
    short = [i for i, d in enumerate(docs) if len(d) <= 4096]
    groups = [short] + [[i] for i in range(len(docs)) if len(docs[i]) > 4096]
    for group in groups:
        if group:
            ids, counts = tok.encode_batch([docs[i] for i in group])
            ids, counts = np.asarray(ids), np.asarray(counts)
            assert (counts <= ids.shape[1]).all()
            out.update({i: ids[r, : counts[r]].tolist() for r, i in enumerate(group)})
    return [out[i] for i in range(len(docs))]


def test_any_length_equals_encode_batch_tiktoken_and_decode(tmp_path, cl100k, war_and_peace):
    pytest.importorskip("tiktoken")
    mb = utf8_cut(war_and_peace, 1 << 20)
    lines = [x for x in war_and_peace[200_000:260_000].split(b"\n") if x]
    docs = (
        [b"", b"a", utf8_cut(war_and_peace[300_000:], 100_000)]
        + lines[:150]
        + ["ünïcödé — ✓ 日本語 🎉".encode(), mb, b" ", b"\n\n  x"]
        + lines[150:]
    )
    src = tmp_path / "docs.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d.decode(), "id": i}) + "\n" for i, d in enumerate(docs))
    # small batches and shards: long documents alone, many batches, documents across shards
    meta = corpus.encode_files(
        cl100k, [src], tmp_path / "out" / "wp", jsonl_field="text", batch_bytes=64 << 10, shard_tokens=20_000
    )
    assert meta["dtype"] == "uint32" and meta["n_vocab"] == 100277 > 65536
    assert meta["documents"] == len(docs) and len(meta["shards"]) > 3
    got = [a.tolist() for a in corpus.read_shards(tmp_path / "out" / "wp")]
    want = encode_batch_ids(cl100k, docs)
    assert got == want
    assert max(map(len, got)) > 200_000 and got[0] == [] and len(got[1]) == 1
    from blockbpe_jax.testing import tiktoken_oracle

    enc = tiktoken_oracle("cl100k", cl100k, cl100k.vocab.pattern)
    assert got == enc.encode_ordinary_batch([d.decode() for d in docs])
    texts = [cl100k.decode_bytes(np.asarray([ids or [0]]), np.asarray([len(ids)]))[0] for ids in got]
    assert texts == docs
    # the layout, as a training loader reads it: memmap + offsets
    out = tmp_path / "out"
    total = 0
    for k, shard in enumerate(meta["shards"]):
        assert shard["bin"] == f"wp_{k:05d}.bin" and shard["idx"] == f"wp_{k:05d}.idx"
        tokens = np.memmap(out / shard["bin"], dtype="<u4", mode="r")
        idx = np.fromfile(out / shard["idx"], dtype="<i8")
        assert idx[0] == 0 and idx[-1] == len(tokens) == shard["tokens"]
        assert len(idx) == shard["documents"] + 1
        total += len(tokens)
    assert total == meta["tokens"] == sum(map(len, want))
    assert meta["inputs"] == [str(src)] and meta["vocab"] == "cl100k_base"


def test_cli_default_flat_uint16_and_verify(capsys, tmp_path, root, r50k, war_and_peace):
    src = tmp_path / "wp.txt"
    src.write_bytes(war_and_peace[:80_000])
    out = tmp_path / "o"
    rc = cli.main(
        [
            str(x)
            for x in (
                "encode",
                src,
                "-o",
                out,
                "--vocab",
                root / "vocab/tiktoken/r50k_base.tiktoken",
                "-q",
                "--batch-bytes",
                16384,
                "--verify",
                100000,
            )
        ]
    )
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "verify: ok" in stdout and "equal to tiktoken" in stdout
    meta = json.loads((out / "shard.json").read_text())
    assert meta["dtype"] == "uint16" and meta["n_vocab"] == 50257 <= 65536
    docs = [x.rstrip(b"\r") for x in war_and_peace[:80_000].split(b"\n") if x.rstrip(b"\r")]
    got = [a.tolist() for a in corpus.read_shards(out / "shard")]
    assert got == encode_batch_ids(r50k, docs)
    assert (out / "shard_00000.bin").stat().st_size == 2 * meta["tokens"]
    # verify from the sidecar alone (it names the vocabulary), the prefix or the directory
    for prefix in (out / "shard", out / "shard.json", out):
        rc = cli.main(["verify", str(prefix), "--sample", "50"])
        stdout, err = capsys.readouterr()
        assert rc == 0, err
        assert "50 sampled documents equal to tiktoken" in stdout


def corrupt(path: Path, offset: int, value: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset : offset + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["id", "truncated", "idx", "vocab_range"])
def test_verify_finds_corruption(capsys, tmp_path, root, cl100k, war_and_peace, damage):
    src = tmp_path / "wp.txt"
    src.write_bytes(war_and_peace[:20_000])
    prefix = tmp_path / "o" / "c"
    corpus.encode_files(cl100k, [src], prefix)
    assert cli.main(["verify", str(prefix), "--sample", "100000"]) == 0
    capsys.readouterr()
    bin_path, idx_path = tmp_path / "o" / "c_00000.bin", tmp_path / "o" / "c_00000.idx"
    idx = np.fromfile(idx_path, dtype="<i8")
    tokens = np.fromfile(bin_path, dtype="<u4")
    j = 7  # a document in the middle
    if damage == "id":
        t = int(idx[j]) + 1
        corrupt(bin_path, 4 * t, np.array([(int(tokens[t]) + 1) % 100000], "<u4").tobytes())
        needle = f"{bin_path}: document {j} ({src}:"
    elif damage == "truncated":
        bin_path.write_bytes(bin_path.read_bytes()[:-4])
        needle = f"{bin_path}: {4 * (len(tokens) - 1)} bytes"
    elif damage == "idx":
        corrupt(idx_path, 8 * j, np.array([idx[j + 1] + 1], "<i8").tobytes())
        needle = f"{idx_path}: offsets decrease at document {j}"
    else:
        corrupt(bin_path, 4 * int(idx[j]), np.array([200_000], "<u4").tobytes())
        needle = f"{bin_path}: document {j} holds id 200000 >= n_vocab 100277"
    rc = cli.main(["verify", str(prefix), "--sample", "100000"])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].startswith("blockbpe-jax: verify failed: ") and needle in lines[0], err
    with pytest.raises(corpus.VerifyError):
        corpus.verify(prefix, cl100k, sample=100000)


def bad_inputs(tmp: Path) -> dict[str, tuple[list, str]]:
    """case -> (extra encode arguments, the exact error after 'blockbpe-jax: error: ')."""

    def write(name: str, data: bytes) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name

    not_gz = write("not.txt.gz", b"plain text, not gzip\n")
    whole = gzip.compress(b"line one\n" * 2000)
    cut_gz = write("cut.txt.gz", whole[: len(whole) // 2])
    bad_json = write("bad.jsonl", b'{"text": "ok"}\n\n{"text": "a",}\n')
    no_field = write("nofield.jsonl", b'{"text": "ok"}\n{"body": "b"}\n')
    not_str = write("notstr.jsonl", b'{"text": "ok"}\n{"text": 5}\n')
    not_obj = write("notobj.jsonl", b'["text"]\n')
    surrogate = write("surrogate.jsonl", b'{"text": "ok"}\n{"text": "a\\ud800b"}\n')
    bad_utf8 = write("latin1.txt", "ok\nfa\u00e7ade\n".encode("latin-1"))
    bad_utf8_json = write("latin1.jsonl", '{"text": "fa\u00e7ade"}\n'.encode("latin-1"))
    done = tmp / "done"
    done.mkdir()
    (done / "shard.json").write_text("{}")
    good = write("good.txt", b"hello\n")
    J = ["--jsonl-field", "text"]
    try:
        json.loads('{"text": "a",}')
    except json.JSONDecodeError as e:
        json_error = str(e)
    try:
        gzip.decompress(cut_gz.read_bytes())
    except EOFError as e:
        eof_error = str(e)
    return {
        "missing": ([tmp / "nope.txt"], f"{tmp / 'nope.txt'}: no such file"),
        "directory": ([done], f"{done}: not a regular file"),
        "not_gzip": ([not_gz], f"{not_gz}: cannot read: Not a gzipped file (b'pl')"),
        "truncated_gzip": ([cut_gz], f"{cut_gz}:{cut_gz_line(whole)}: cannot read: {eof_error}"),
        "bad_json": ([bad_json] + J, f"{bad_json}:3: not valid JSON: {json_error}"),
        "field_missing": ([no_field] + J, f"{no_field}:2: no field 'text' (--jsonl-field)"),
        "field_not_string": ([not_str] + J, f"{not_str}:2: field 'text' is int, not a string"),
        "not_object": ([not_obj] + J, f"{not_obj}:1: not a JSON object (list)"),
        "surrogate": (
            [surrogate] + J,
            f"{surrogate}:2: field 'text' is not valid UTF-8 (lone surrogate at character 1)",
        ),
        "utf8_lines": ([bad_utf8], f"{bad_utf8}:2: not valid UTF-8 (byte 2: invalid continuation byte)"),
        "utf8_file": (
            [bad_utf8, "--split", "file"],
            f"{bad_utf8}:2: not valid UTF-8 (byte 5: invalid continuation byte)",
        ),
        "utf8_jsonl": (
            [bad_utf8_json] + J,
            f"{bad_utf8_json}:1: not valid UTF-8 (byte 12: invalid continuation byte)",
        ),
        "output_exists": (
            [good, "-o", done],
            f"{done / 'shard.json'}: output exists (use --overwrite or another --output)",
        ),
    }


def cut_gz_line(whole: bytes) -> int:
    """The line at which a gzip stream cut in half stops: one past the lines it yields."""
    n = 0
    try:
        with gzip.open(__import__("io").BytesIO(whole[: len(whole) // 2])) as f:
            for n, _ in enumerate(f, start=1):
                pass
    except EOFError:
        pass
    return n + 1


CASES = [
    "missing",
    "directory",
    "not_gzip",
    "truncated_gzip",
    "bad_json",
    "field_missing",
    "field_not_string",
    "not_object",
    "surrogate",
    "utf8_lines",
    "utf8_file",
    "utf8_jsonl",
    "output_exists",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_one_line_error(capsys, tmp_path, root, case):
    args, message = bad_inputs(tmp_path)[case]
    out = [] if "-o" in args else ["-o", tmp_path / "out"]
    argv = ["encode", *args, *out, "--vocab", root / "vocab/tiktoken/r50k_base.tiktoken", "-q"]
    rc = cli.main([str(a) for a in argv])
    stdout, err = capsys.readouterr()
    assert rc == 2
    assert err.strip().splitlines() == [f"blockbpe-jax: error: {message}"], err
    # a failed run leaves no partial output behind
    assert not list((tmp_path / "out").glob("shard*")) if (tmp_path / "out").exists() else True


def test_overwrite_replaces_all_shards(tmp_path, r50k, war_and_peace):
    src = tmp_path / "a.txt"
    src.write_bytes(war_and_peace[:30_000])
    prefix = tmp_path / "o" / "x"
    first = corpus.encode_files(r50k, [src], prefix, shard_tokens=1000)
    assert len(first["shards"]) > 2
    first_ids = [a.tolist() for a in corpus.read_shards(prefix)]
    with pytest.raises(corpus.CorpusError, match="output exists"):
        corpus.encode_files(r50k, [src], prefix)
    second = corpus.encode_files(r50k, [src], prefix, overwrite=True)
    assert len(second["shards"]) == 1 and sorted(p.name for p in prefix.parent.iterdir()) == [
        "x.json",
        "x_00000.bin",
        "x_00000.idx",
    ]
    assert [a.tolist() for a in corpus.read_shards(prefix)] == first_ids
    assert second["tokens"] == first["tokens"]


def test_tokenizer_encode_files_is_the_corpus_job(tmp_path, data_dir):
    """`Tokenizer.encode_files` writes the same shards as `corpus.encode_files`."""
    from blockbpe_jax import corpus
    from helpers import load_tokenizer

    tok = load_tokenizer("r50k", "tiktoken")
    src = tmp_path / "in.txt"
    src.write_text("first line\nsecond, longer line of text\nfourth\n", encoding="utf-8")
    a = tok.encode_files([src], tmp_path / "a" / "shard")
    b = corpus.encode_files(tok, [src], tmp_path / "b" / "shard")
    docs_a = [d.tolist() for d in corpus.read_shards(tmp_path / "a" / "shard")]
    docs_b = [d.tolist() for d in corpus.read_shards(tmp_path / "b" / "shard")]
    assert docs_a == docs_b and len(docs_a) == 3
    ids, counts = tok.encode_batch(src.read_text().split("\n")[:3])
    assert docs_a == [np.asarray(ids)[i, :c].tolist() for i, c in enumerate(np.asarray(counts))]
    assert a["shards"] and b["shards"]


def test_error_after_many_batches_in_the_pipeline(tmp_path, r50k):
    """A bad JSONL line found by the reader thread after many batches have been encoded and
    written: the same one-line error naming the line, and no shard left behind; the batches
    before it, run again without the bad line, are the documents' ids in order."""
    good = [{"text": f"document {i}: " + "word " * (i % 37)} for i in range(400)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in good) + "\n{not json\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(corpus.CorpusError, match=rf"^{src}:401: "):
        corpus.encode_files(r50k, [src], out / "shard", jsonl_field="text", batch_bytes=2048)
    assert not any(out.iterdir())
    src.write_text("\n".join(json.dumps(d) for d in good) + "\n", encoding="utf-8")
    corpus.encode_files(r50k, [src], out / "shard", jsonl_field="text", batch_bytes=2048)
    got = [d.tolist() for d in corpus.read_shards(out / "shard")]
    ids, counts = r50k.encode_batch([d["text"] for d in good])
    assert got == [np.asarray(ids)[i, :c].tolist() for i, c in enumerate(np.asarray(counts))]


def test_sorted_calls_and_dense_rows_keep_input_order(tmp_path, r50k):
    """Documents of very different lengths (sorted into calls by width, put back in input
    order) and rows with more tokens than half their width (emoji: encoded again at full
    width) give the ids of `encode_batch`, in input order, across several windows."""
    from blockbpe_jax import documents

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "🎉🎉🎉", "日本語", "  ", "1234567", "\t", "🇯🇵👩‍👩‍👧"]
    docs = [
        " ".join(rng.choice(words, int(n))).encode()
        for n in rng.integers(1, 400, 300).tolist() + [5000, 1, 2]
    ]
    docs[10] = "\U00020000".encode() * 300  # 1200 bytes, 1200 tokens: more than width // 2
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(docs) + b"\n")
    windows = list(documents.iter_windows([src], window_bytes=4096))
    assert len(windows) > 5 and [b for w in windows for b in w.blobs] == docs
    assert [p for w in windows for p in w.positions.tolist()] == list(range(1, len(docs) + 1))
    out = tmp_path / "o" / "s"
    corpus.encode_files(r50k, [src], out, batch_bytes=8192)
    assert [a.tolist() for a in corpus.read_shards(out)] == encode_batch_ids(r50k, docs)


def _spy_encode_into(monkeypatch) -> list[tuple[int, int, int]]:
    """Records (rows, width, T) of every encode call of the corpus job."""
    fns = window_encode._device_functions()
    real, calls = fns.encode_into, []

    def spy(data, lengths, tables, raw, at, **kw):
        calls.append((*data.shape, kw["max_tokens"]))
        return real(data, lengths, tables, raw, at, **kw)

    monkeypatch.setattr(fns, "encode_into", spy)
    return calls


def test_dense_rows_redone_into_a_grown_buffer(tmp_path, r50k, monkeypatch):
    """A window whose every row has more tokens than half its width: all rows are encoded
    again at full width after the first pass, into the window's buffer grown past its
    first size; the ids are encode_batch's, in input order, empty documents included."""
    calls = _spy_encode_into(monkeypatch)
    fns = window_encode._device_functions()
    grown = []
    real_grow = fns.grow
    monkeypatch.setattr(fns, "grow", lambda raw, size: grown.append(size) or real_grow(raw, size=size))
    monkeypatch.setattr(window_encode._Buffers, "_spare", [])
    docs = [("\U00020000" * (40 + i) + " x").encode() for i in range(16)]
    docs[3] = b""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d.decode()}) + "\n" for d in docs), encoding="utf-8")
    corpus.encode_files(r50k, [src], tmp_path / "o" / "s", jsonl_field="text", batch_bytes=4096)
    want = encode_batch_ids(r50k, docs)
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "o" / "s")] == want
    assert all(len(w) > len(d) // 2 for w, d in zip(want, docs) if d)
    assert calls == [(16, 16, 17), (16, 256, 128), (16, 256, 257)] and grown == [8192]


def test_window_shapes_are_bucketed_and_compiled_once(tmp_path, r50k, monkeypatch):
    """Over many windows, each width is encoded with at most five row counts (and the
    copy back has eight sizes per octave); a second run of the job compiles nothing."""
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "🎉", "1234", "\n"]
    docs = [" ".join(rng.choice(words, int(n))).encode() for n in rng.integers(1, 300, 3000)]
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(docs) + b"\n")
    windows = list(documents.iter_windows([src], window_bytes=8192))
    assert len(windows) > 50
    calls = _spy_encode_into(monkeypatch)

    def run(name):
        corpus.encode_documents(
            r50k, iter(windows), shards_writer(tmp_path / name, r50k), [src], batch_bytes=16384
        )

    run("a")
    by_width: dict[int, set] = {}
    for rows, width, T in calls:
        by_width.setdefault(width, set()).add(rows)
    assert all(len(rows) <= 5 for rows in by_width.values()), by_width
    fns = window_encode._device_functions()
    compiled = (fns.finalize._cache_size(), fns.gather._cache_size())
    run("b")
    assert (fns.finalize._cache_size(), fns.gather._cache_size()) == compiled
    for n in [0, 1, 4096, 4097, 70_000, 1 << 20, (1 << 20) + 1, 12_345_678]:
        size = window_encode._size_bucket(n)
        assert size >= n and size % 4096 == 0 and size <= max(4096, n + max(4096, n // 8))
    assert {window_encode._rows_bucket(n, 1000) for n in range(1, 1001)} == {64, 128, 256, 512, 1024}


def shards_writer(prefix: Path, tok):
    from blockbpe_jax.shards import FlatWriter

    prefix.mkdir()
    return FlatWriter(prefix / "s", tok.vocab.n_vocab, 1 << 20, None)


def test_compilation_cache_switch(tmp_path, monkeypatch):
    """enable_compilation_cache: ~/.cache/blockbpe_jax/xla (under $BLOCKBPE_CACHE_DIR), a
    directory the user chose is kept, BLOCKBPE_XLA_CACHE=0 or BLOCKBPE_CACHE_DIR="" is off."""
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path / "c"))
        monkeypatch.setenv("BLOCKBPE_XLA_CACHE", "0")
        assert corpus.enable_compilation_cache() is None and not jax.config.jax_compilation_cache_dir
        monkeypatch.delenv("BLOCKBPE_XLA_CACHE")
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", "")
        assert corpus.enable_compilation_cache() is None and not jax.config.jax_compilation_cache_dir
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path / "c"))
        assert corpus.enable_compilation_cache() == str(tmp_path / "c" / "xla")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c" / "xla")
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
        assert corpus.enable_compilation_cache() == str(tmp_path / "mine")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")
    finally:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])


SECOND_RUN = """
import sys, jax, blockbpe_jax as bb
from blockbpe_jax import corpus
corpus.enable_compilation_cache()  # as the CLI does
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
tok = bb.Tokenizer.from_file(sys.argv[1])
events.clear()
corpus.encode_files(tok, [sys.argv[2]], sys.argv[3], overwrite=True)
print(events.count("/jax/compilation_cache/cache_hits"), events.count("/jax/compilation_cache/cache_misses"))
"""


def test_second_process_loads_the_jobs_executables(tmp_path, root):
    """With the persistent compilation cache (the CLI turns it on), a second process running the same
    job compiles none of the job's executables: every one is a cache hit."""
    import os
    import subprocess
    import sys

    src = tmp_path / "in.txt"
    src.write_text("first line\nsecond, longer line of text " * 40 + "\n" + "x\n" * 30, encoding="utf-8")
    env = {**os.environ, "BLOCKBPE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("BLOCKBPE_XLA_CACHE", None)
    argv = [
        sys.executable,
        "-c",
        SECOND_RUN,
        str(root / "vocab/tiktoken/r50k_base.tiktoken"),
        str(src),
        str(tmp_path / "o" / "s"),
    ]
    runs = [subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    (hits1, misses1), (hits2, misses2) = [tuple(map(int, r.stdout.split())) for r in runs]
    assert misses1 > 0 and hits2 == misses1 + hits1 and misses2 == 0, (runs[0].stdout, runs[1].stdout)
    assert any((tmp_path / "cache" / "xla").iterdir())


def test_plan_batches_sorts_by_width():
    lengths = np.array([5, 3000, 17, 16, 0, 900, 33, 2048, 2049])
    plan = corpus.plan_batches(lengths, batch_bytes=4096, max_docs=None, max_len=None)
    assert sorted(np.concatenate([i for _, i in plan]).tolist()) == list(range(len(lengths)))
    for width, idx in plan:
        assert all(corpus._pow2(int(n)) == width for n in lengths[idx])
        assert len(idx) == 1 or len(idx) * width <= 4096
    assert [w for w, _ in plan] == sorted(w for w, _ in plan)
    assert [len(i) for _, i in corpus.plan_batches(lengths, 1 << 20, 2, None)] == [2, 1, 1, 1, 1, 1, 2]


def test_arrayrecord_round_trip(tmp_path, capsys, root, cl100k, r50k, war_and_peace):
    """--format arrayrecord: one record per document, its ids as little-endian bytes of the
    vocabulary's dtype, equal to encode_batch's; shards split by --shard-size."""
    pytest.importorskip("array_record.python.array_record_module")
    from array_record.python.array_record_module import ArrayRecordReader

    lines = [x for x in war_and_peace[100_000:140_000].split(b"\n") if x]
    docs = lines + ["\U00020000 🎉 日本語".encode(), utf8_cut(war_and_peace[500_000:], 30_000)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"body": d.decode()}) + "\n" for d in docs), encoding="utf-8")
    for tok, vocab, dtype in ((cl100k, "cl100k_base", "<u4"), (r50k, "r50k_base", "<u2")):
        out = tmp_path / vocab
        rc = cli.main(
            [
                str(a)
                for a in (
                    "encode",
                    src,
                    "-o",
                    out,
                    "--vocab",
                    root / f"vocab/tiktoken/{vocab}.tiktoken",
                    "--field",
                    "body",
                    "--format",
                    "arrayrecord",
                    "--shard-size",
                    100,
                    "-q",
                )
            ]
        )
        assert rc == 0, capsys.readouterr().err
        meta = json.loads((out / "shard.json").read_text())
        assert meta["format"] == "blockbpe-arrayrecord-v1" and meta["dtype"] == np.dtype(dtype).name
        assert len(meta["shards"]) == -(-len(docs) // 100) and meta["documents"] == len(docs)
        want = encode_batch_ids(tok, docs)
        assert [a.tolist() for a in corpus.read_array_records(out / "shard")] == want
        # as grain / a plain reader sees it: records of raw little-endian ids
        reader = ArrayRecordReader(str(out / meta["shards"][0]["file"]))
        first = reader.read([0, 99])
        reader.close()
        assert [np.frombuffer(r, dtype=dtype).tolist() for r in first] == [want[0], want[99]]


def test_arrayrecord_missing_package_is_one_line(tmp_path, capsys, root, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    src = tmp_path / "a.txt"
    src.write_text("hello\n")
    rc = cli.main(
        [
            str(a)
            for a in (
                "encode",
                src,
                "-o",
                tmp_path / "o",
                "--vocab",
                root / "vocab/tiktoken/r50k_base.tiktoken",
                "--format",
                "arrayrecord",
                "-q",
            )
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "blockbpe-jax: error: --format arrayrecord needs the array_record package (pip install array_record)"
    ]


def test_parquet_input(tmp_path, capsys, root, r50k, monkeypatch):
    """Parquet input (column --field): the documents' ids; without pyarrow, a one-line error."""
    src = tmp_path / "in.parquet"
    texts = ["first row", "second, longer row of text", "ünïcödé 🎉"]
    argv = [
        str(a)
        for a in (
            "encode",
            src,
            "-o",
            tmp_path / "o",
            "--vocab",
            root / "vocab/tiktoken/r50k_base.tiktoken",
            "--field",
            "text",
            "-q",
        )
    ]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        src.write_bytes(b"PAR1")
        assert cli.main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"blockbpe-jax: error: {src}: reading parquet needs the pyarrow package (pip install pyarrow)"
        ]
        pytest.skip("pyarrow is not installed: only the error path ran")
    pq.write_table(pa.table({"text": texts, "n": [1, 2, 3]}), src)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "o" / "shard")] == encode_batch_ids(
        r50k, [t.encode() for t in texts]
    )
    assert cli.main(argv[:-3] + ["--field", "nope", "-q", "--overwrite"]) == 2
    assert "no column 'nope' (--field); columns: text, n" in capsys.readouterr().err


def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.skipif(
    not _gpus() or not native.HAS_CUDA_MODULE, reason="no GPU visible to JAX, or no CUDA module in this build"
)
def test_gpu_flat_staging_equals_cpu_path(tmp_path, cl100k, war_and_peace):
    """On a GPU the window's rows go from its flat buffer straight into pinned memory
    (staging.stage_flat): the rows equal pack_flat's, and the job's ids the CPU job's."""
    gpu, cpu = _gpus()[0], jax.devices("cpu")[0]
    lines = [x for x in war_and_peace[:400_000].split(b"\n") if x] + ["日本語 🎉 ✓".encode()] * 3
    w = documents.Window.of(lines, np.arange(len(lines), dtype=np.int64), 0, 0)
    idx = np.array([5, 0, len(lines) - 1, 7], np.int64)
    staged = staging.stage_flat(w.data, w.offsets, idx, max_len=128, rows=8, device=gpu)
    want = native.cpu.pack_flat(w.data, w.offsets, idx, 128, 8)
    np.testing.assert_array_equal(np.asarray(staged.data), want[0])
    np.testing.assert_array_equal(np.asarray(staged.lengths), want[1])
    staged.release(None)
    src = tmp_path / "wp.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    for name, device in (("gpu", gpu), ("cpu", cpu)):
        corpus.encode_files(cl100k, [src], tmp_path / name / "s", device=device, batch_bytes=64 << 10)
    for a, b in zip(
        corpus.read_shards(tmp_path / "gpu" / "s"), corpus.read_shards(tmp_path / "cpu" / "s"), strict=True
    ):
        np.testing.assert_array_equal(a, b)
