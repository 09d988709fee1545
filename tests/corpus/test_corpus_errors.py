"""The corpus job's errors: one line naming the file and line for every bad input (unreadable,
truncated, bad JSONL, missing or non-string field, invalid UTF-8, output exists, a missing
optional package), also when found after many batches, and no partial shards left behind."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus.inputs import compressed as compressed_input
from blockbpe_jax.corpus import job as corpus, documents

import corpus_shared
from helpers import encode_argv

# corpus_shared's module-scoped fixtures, requested by name below
root, r50k = corpus_shared.root, corpus_shared.r50k


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
    loop = tmp / "loop.txt"
    loop.symlink_to(loop)
    done.mkdir()
    (done / "shard.json").write_text("{}")
    empty = tmp / "empty"
    empty.mkdir()
    (empty / "_SUCCESS").write_bytes(b"")
    good = write("good.txt", b"hello\n")
    long_line = write("long.txt", b"ok\n\nshort\n" + b"x" * 40 + b"\nok\n")
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
        "directory": (
            [empty],
            f"{empty}: a directory with no input files (names starting with . or _ left out)",
        ),
        "first_bad_input": ([good, tmp / "nope2.txt", done], f"{tmp / 'nope2.txt'}: no such file"),
        "symlink_loop": ([loop], f"{loop}: cannot read: too many levels of symbolic links"),
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
        "too_long": (
            [long_line, "--max-len", 16],
            f"{long_line}:4: document of 40 bytes, more than --max-len 16 (use --split chunk:N)",
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
    "first_bad_input",
    "symlink_loop",
    "too_long",
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


def test_error_after_many_batches_in_the_pipeline(tmp_path, r50k):
    """A bad JSONL line found by the reader thread after many batches have been encoded and
    written: the same one-line error naming the line (from the in-memory job too), and no
    shard left behind; the batches
    before it, run again without the bad line, are the documents' ids in order."""
    good = [{"text": f"document {i}: " + "word " * (i % 37)} for i in range(400)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in good) + "\n{not json\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(corpus.CorpusError, match=rf"^{src}:401: "):
        corpus.encode_files(r50k, [src], out / "shard", jsonl_field="text", batch_bytes=2048)
    assert not out.exists()  # (the job made it: gone with the shards)
    with pytest.raises(corpus.CorpusError, match=rf"^{src}:401: "):  # (in memory: the same error)
        corpus.encode_files_to_arrays(r50k, [src], jsonl_field="text", batch_bytes=2048)
    with pytest.raises(corpus.CorpusError, match=rf"^{tmp_path / 'nope.txt'}: "):
        corpus.encode_files_to_arrays(r50k, [src, tmp_path / "nope.txt"])
    src.write_text("\n".join(json.dumps(d) for d in good) + "\n", encoding="utf-8")
    corpus.encode_files(r50k, [src], out / "shard", jsonl_field="text", batch_bytes=2048)
    got = [d.tolist() for d in corpus.read_shards(out / "shard")]
    ids, counts = r50k.encode_batch([d["text"] for d in good])
    assert got == [np.asarray(ids)[i, :c].tolist() for i, c in enumerate(np.asarray(counts))]


def test_write_error_mid_job(tmp_path, r50k, monkeypatch):
    """A shard write that fails after some windows were written (a full disk): the error comes
    out of encode_files, no shard is left behind, and nothing is still writing afterwards."""
    from blockbpe_jax.corpus.shards import flat as shards

    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i} of many words\n" for i in range(3000)), encoding="utf-8")
    add, calls = shards.FlatWriter.add, []

    def failing_add(self, ids, counts, window, done=None):
        calls.append(len(counts))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        add(self, ids, counts, window, done)

    monkeypatch.setattr(shards.FlatWriter, "add", failing_add)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"):
        corpus.encode_files(r50k, [src], out / "shard", window_bytes=4096, batch_bytes=2048)
    assert len(calls) == 3 and not out.exists()  # (the job made it: gone with the shards)


def test_write_error_on_a_shard_thread(tmp_path, r50k, monkeypatch):
    """A write that fails on one of FlatWriter's shard threads (the disk full while reserving a
    later shard's room): the error comes out of encode_files, no shard is left behind, and no
    shard thread is still running."""
    import threading

    from blockbpe_jax import native

    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i} of many words\n" for i in range(3000)), encoding="utf-8")
    real, calls = native.cpu.reserve_file, []

    def reserve_file(fd, offset, length):
        calls.append(threading.current_thread().name)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(native.cpu, "reserve_file", reserve_file)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"):
        corpus.encode_files(
            r50k, [src], out / "shard", window_bytes=4096, batch_bytes=2048, shard_tokens=2000
        )
    assert len(calls) >= 4 and all(name.startswith("blockbpe-shard") for name in calls)
    assert not out.exists()  # (the job made it: gone with the shards)
    assert not [t for t in threading.enumerate() if t.name.startswith("blockbpe-shard")]


def test_arrayrecord_missing_package_is_one_line(tmp_path, capsys, root, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    # After an earlier test's import, `from array_record.python import array_record_module`
    # finds the package's attribute without asking sys.modules.
    package = sys.modules.get("array_record.python")
    if package is not None:
        monkeypatch.delattr(package, "array_record_module", raising=False)
    src = tmp_path / "a.txt"
    src.write_text("hello\n")
    rc = cli.main(
        encode_argv(
            src, tmp_path / "o", root / "vocab/tiktoken/r50k_base.tiktoken", "--format", "arrayrecord"
        )
    )
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "blockbpe-jax: error: --format arrayrecord needs the array_record package (pip install array_record)"
    ]


@pytest.mark.parametrize("case", ["not_gzip", "truncated_gzip"])
def test_gzip_errors_without_isal(capsys, tmp_path, root, case, monkeypatch):
    """corpus/documents.py reads .gz blocks with ISA-L's reader when isal is installed (the test
    extra installs it): with the standard module in its place the errors are the same line."""
    monkeypatch.setattr(compressed_input, "_fast_gzip", gzip)
    args, message = bad_inputs(tmp_path)[case]
    argv = [
        "encode",
        *args,
        "-o",
        tmp_path / "out",
        "--vocab",
        root / "vocab/tiktoken/r50k_base.tiktoken",
        "-q",
    ]
    assert cli.main([str(a) for a in argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"blockbpe-jax: error: {message}"]


def test_gzip_documents_with_and_without_isal(tmp_path, monkeypatch):
    """The documents of a .jsonl.gz (several blocks) are the same through either reader."""
    lines = [json.dumps({"text": f"document {i} " + "é🎉 " * (i % 50)}) for i in range(20000)]
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))

    def read():
        ws = list(documents.iter_windows([src], jsonl_field="text", window_bytes=1 << 16))
        return [b for w in ws for b in w.blobs], [p for w in ws for p in w.positions.tolist()]

    fast = read()
    monkeypatch.setattr(compressed_input, "_fast_gzip", gzip)
    assert read() == fast and fast[1] == list(range(1, 20001))
    assert fast[0][7] == json.loads(lines[7])["text"].encode()


# The Python API's options: the CLI checks its flags before the job starts; a call from
# Python gets the same rule (corpus.types.check_positive) and never hangs or fails later with
# another name (a zero window once read nothing forever).
BAD_OPTIONS = [
    (dict(window_bytes=0), ValueError, "window_bytes must be a positive integer, got 0"),
    (dict(window_bytes=-5), ValueError, "window_bytes must be a positive integer, got -5"),
    (dict(window_bytes=1.5), TypeError, "window_bytes must be a positive integer, got float 1.5"),
    (dict(batch_bytes=0), ValueError, "batch_bytes must be a positive integer, got 0"),
    (dict(max_docs=0), ValueError, "max_docs must be a positive integer, got 0"),
    (dict(max_len=-1), ValueError, "max_len must be a positive integer, got -1"),
    (dict(block_size=3), ValueError, r"block_size must be one of \(256, 512, 1024\), got 3"),
    (dict(jsonl_field=5), TypeError, "jsonl_field must be a field name"),
]


@pytest.mark.parametrize("options, error, message", BAD_OPTIONS)
def test_bad_options_from_python(tmp_path, r50k, options, error, message):
    path = tmp_path / "docs.txt"
    path.write_text("one\ntwo\n")
    with pytest.raises(error, match=message):
        corpus.encode_files_to_arrays(r50k, [path], **options)
    with pytest.raises(error, match=message):
        corpus.encode_files(r50k, [path], tmp_path / "out" / "s", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(fmt="parquet"), ValueError, r"fmt must be one of \('flat', "),
        (dict(shard_tokens=0), ValueError, "shard_tokens must be a positive integer, got 0"),
        (dict(shard_docs=0), ValueError, "shard_docs must be a positive integer, got 0"),
        (dict(fmt="npz", max_tokens=0), ValueError, "max_tokens must be a positive integer, got 0"),
        (dict(max_tokens=8), ValueError, r"max_tokens and pad_id apply to fmt npz / npy \(flat shards"),
        (dict(fmt="megatron", pad_id=1), ValueError, r"apply to fmt npz / npy \(megatron shards"),
    ],
)
def test_bad_output_options_from_python(tmp_path, r50k, options, error, message):
    path = tmp_path / "docs.txt"
    path.write_text("one\ntwo\n")
    with pytest.raises(error, match=message):
        corpus.encode_files(r50k, [path], tmp_path / "out" / "s", **options)
    assert not (tmp_path / "out").exists()


def test_inputs_and_tokenizer_from_python(tmp_path, r50k):
    """One path may be given alone (not read as a sequence of one-letter paths); anything else
    that is no sequence of paths, or a tokenizer that is none, is a TypeError naming it."""
    path = tmp_path / "docs.txt"
    path.write_text("one\ntwo\n")
    for one in (path, str(path)):
        ids, offsets = corpus.encode_files_to_arrays(r50k, one)
        want = corpus.encode_files_to_arrays(r50k, [path])
        assert ids.tolist() == want[0].tolist() and offsets.tolist() == want[1].tolist()
    with pytest.raises(TypeError, match="the inputs must be a path or a sequence of paths, got NoneType"):
        corpus.encode_files_to_arrays(r50k, None)
    with pytest.raises(TypeError, match="tok must be a blockbpe_jax.Tokenizer, got str"):
        corpus.encode_files_to_arrays("r50k_base", [path])
    with pytest.raises(TypeError, match="tok must be a blockbpe_jax.Tokenizer, got NoneType"):
        corpus.encode_files(None, [path], tmp_path / "out" / "s")
