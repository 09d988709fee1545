"""The corpus job's output (blockbpe_jax/corpus/job.py, corpus/shards/flat.py): flat token shards whose ids
equal `Tokenizer.encode_batch`'s and tiktoken's for documents of any length, text back via
decode, uint16/uint32 by vocabulary size, the layout a loader reads, verify (and the corruption
it finds), --overwrite, ArrayRecord output and parquet input. Bad inputs: test_corpus_errors.py;
the engine (calls, buffers, compilation): test_corpus_engine.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus, documents

import corpus_shared
from corpus_shared import encode_batch_ids, utf8_cut
from helpers import encode_argv

# corpus_shared's module-scoped fixtures, requested by name below
root, cl100k, r50k, war_and_peace = (
    corpus_shared.root,
    corpus_shared.cl100k,
    corpus_shared.r50k,
    corpus_shared.war_and_peace,
)


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
    # the same job with its result in memory: one array of ids, document j at offsets[j:j + 2]
    ids, offsets = cl100k.encode_files_to_arrays([src], jsonl_field="text", batch_bytes=64 << 10)
    assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and len(offsets) == len(docs) + 1
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == want


def test_arrays_writer_grows():
    """The in-memory layout's array grows past its first guess (copied into room twice as
    large) and ends at its tokens' size, the ids handed over in pieces (a window's, in a buffer
    the job reuses) copied out."""
    from blockbpe_jax.corpus.shards.flat import ArraysWriter

    rng = np.random.default_rng(0)
    writer = ArraysWriter(60_000, input_bytes=0)
    assert writer.dtype == np.uint16
    buffer = np.empty(1 << 20, np.int32)
    pieces, counts = [], []
    for _ in range(5):
        c = rng.integers(0, 9000, 100)
        ids = buffer[: c.sum()]
        ids[:] = rng.integers(0, 60_000, len(ids))
        writer.add(ids, c, None)
        pieces.append(ids.copy())
        counts.append(c)
    got, offsets = writer.finish({})
    want = np.concatenate(pieces)
    assert len(want) > 2 << 20 and got.dtype == np.uint16
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(np.concatenate(counts))]))


@pytest.mark.parametrize("reserves", [True, False])
def test_flat_writer_reserves_ahead_and_cuts_to_size(tmp_path, monkeypatch, reserves):
    """A flat shard's file is reserved ahead of its writes (native reserve_file), and cut back
    to its tokens when the shard closes; where the file system cannot reserve, plain writes."""
    from blockbpe_jax import native
    from blockbpe_jax.corpus.shards import flat as shards

    calls = []
    real = native.cpu.reserve_file

    def reserve_file(fd, offset, length):
        calls.append((offset, length))
        return real(fd, offset, length) if reserves else False

    monkeypatch.setattr(native.cpu, "reserve_file", reserve_file)
    monkeypatch.setattr(shards.FlatWriter, "RESERVE", 1 << 16)
    rng = np.random.default_rng(1)
    writer = shards.FlatWriter(tmp_path / "s", 100_000, shard_tokens=30_000, shard_docs=None)
    pieces, counts, checked = [], [], 0
    for _ in range(6):
        c = rng.integers(0, 3000, 12)
        pieces.append(rng.integers(0, 100_000, c.sum()).astype(np.int32))
        counts.append(c)
        writer.add(pieces[-1], c, None)
        held = writer._shard.tokens * 4
        size = (tmp_path / f"s_{len(writer.shards):05d}.bin").stat().st_size
        if reserves and calls:  # reserved past the writes, by at most RESERVE
            assert held < size <= held + (1 << 16) and writer._shard.reserved == size
            checked += 1
    meta = writer.finish({"n_vocab": 100_000})
    assert len(meta["shards"]) > 2 and checked == (6 if reserves else 0)
    assert len(calls) >= (len(meta["shards"]) if reserves else 1)
    got = list(shards.read_shards(tmp_path / "s"))  # (open_shard checks each .bin's size)
    want = np.concatenate(pieces)
    ends = np.cumsum(np.concatenate(counts))
    assert [g.tolist() for g in got] == [d.tolist() for d in np.split(want, ends[:-1])]


def test_shards_written_two_at_a_time(tmp_path, r50k, war_and_peace, monkeypatch):
    """FlatWriter writes shard k on its thread k % WRITERS while the next shard's windows come in:
    both threads write, a shard's writes stay on one thread in file order, and the shards hold
    what one thread writing them in turn would (encode_batch's ids)."""
    import threading

    from blockbpe_jax.corpus.shards import flat as shards

    lines = [x for x in war_and_peace[:400_000].split(b"\n") if x.strip()]
    src = tmp_path / "wp.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    real, writes = shards.FlatWriter._write, []

    def recording_write(self, shard, tokens, at):
        writes.append((shard.k, at, threading.current_thread().name))
        real(self, shard, tokens, at)

    monkeypatch.setattr(shards.FlatWriter, "_write", recording_write)
    prefix = tmp_path / "o" / "s"
    meta = corpus.encode_files(r50k, [src], prefix, window_bytes=16384, batch_bytes=4096, shard_tokens=5000)
    assert len(meta["shards"]) > 8
    assert {name for _, _, name in writes} == {"blockbpe-shard0_0", "blockbpe-shard1_0"}
    for k in range(len(meta["shards"])):
        mine = [(at, name) for j, at, name in writes if j == k]
        assert [at for at, _ in mine] == sorted(at for at, _ in mine)
        assert {name for _, name in mine} == {f"blockbpe-shard{k % 2}_0"}
    got = [a.tolist() for a in corpus.read_shards(prefix)]
    assert got == encode_batch_ids(r50k, [x.rstrip(b"\r") for x in lines])


def test_progress_counts_every_document_of_shards_written_later(
    tmp_path, r50k, war_and_peace, capsys, monkeypatch
):
    """The progress counter (tqdm absent) is updated as FlatWriter's threads finish each window's
    writes; its last line, printed when the job ends, counts every document and input byte."""
    import sys
    import time

    from blockbpe_jax.corpus.shards import flat as shards

    monkeypatch.setitem(sys.modules, "tqdm", None)
    real = shards.FlatWriter._write
    monkeypatch.setattr(shards.FlatWriter, "_write", lambda *a: (time.sleep(0.02), real(*a)))  # (slow writes)
    src = tmp_path / "wp.txt"
    src.write_bytes(war_and_peace[:300_000])
    meta = corpus.encode_files(
        r50k,
        [src],
        tmp_path / "o" / "s",
        window_bytes=16384,
        batch_bytes=4096,
        shard_tokens=5000,
        progress=True,
    )
    assert len(meta["shards"]) > 4
    last = capsys.readouterr().err.strip().split("\r")[-1]
    assert last.startswith(f"encode: {meta['documents']} documents, {300_000 / 1e6:.2f} MB"), last


def test_cli_default_flat_uint16_and_verify(capsys, tmp_path, root, r50k, war_and_peace):
    src = tmp_path / "wp.txt"
    src.write_bytes(war_and_peace[:80_000])
    out = tmp_path / "o"
    rc = cli.main(
        encode_argv(
            src, out, root / "vocab/tiktoken/r50k_base.tiktoken", "--batch-bytes", 16384, "--verify", 100000
        )
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
    from blockbpe_jax.corpus import job as corpus
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
            encode_argv(
                src,
                out,
                root / f"vocab/tiktoken/{vocab}.tiktoken",
                "--field",
                "body",
                "--format",
                "arrayrecord",
                "--shard-size",
                100,
            )
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


def test_parquet_input(tmp_path, capsys, root, r50k, monkeypatch):
    """Parquet input (column --field): the documents' ids; without pyarrow, a one-line error."""
    src = tmp_path / "in.parquet"
    texts = ["first row", "second, longer row of text", "ünïcödé 🎉"]
    argv = encode_argv(src, tmp_path / "o", root / "vocab/tiktoken/r50k_base.tiktoken", "--field", "text")
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


def test_parquet_columns_as_arrow_buffers(tmp_path, root, r50k):
    """Parquet documents come straight from the column's Arrow buffers: string and large_string
    columns, row groups and batches cut into several windows (slices of one buffer), empty
    strings; ids equal encode_batch's, positions are rows. Nulls, a column that is not a
    string and invalid UTF-8 are one-line errors naming the row or the column."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(3)
    words = ["tokens", "ünïcödé", "🎉", " ", "\n", "1234", "x"]
    texts = ["".join(rng.choice(words, int(n))) for n in rng.integers(0, 60, 3000)]
    for kind in (pa.string(), pa.large_string()):
        src = tmp_path / f"{kind}.parquet"
        pq.write_table(
            pa.table({"id": np.arange(3000), "text": pa.array(texts, kind)}), src, row_group_size=700
        )
        windows = list(documents.iter_windows([src], jsonl_field="text", window_bytes=4096))
        assert len(windows) > 10
        assert [b.decode() for w in windows for b in w.blobs] == texts
        assert [p for w in windows for p in w.positions.tolist()] == list(range(3000))
        out = tmp_path / f"o_{kind}" / "s"
        corpus.encode_files(r50k, [src], out, jsonl_field="text", window_bytes=4096, batch_bytes=8192)
        assert [a.tolist() for a in corpus.read_shards(out)] == encode_batch_ids(
            r50k, [t.encode() for t in texts]
        )

    def error(table) -> str:
        src = tmp_path / "bad.parquet"
        pq.write_table(table, src)
        with pytest.raises(corpus.CorpusError) as e:
            list(documents.iter_windows([src], jsonl_field="text"))
        return str(e.value).replace(str(src), "F")

    assert error(pa.table({"text": ["a", "b", None, "d"]})) == "F: row 2: column 'text' is null"
    assert error(pa.table({"text": [1, 2]})) == "F: column 'text' is int64, not a string"
    bad = pa.Array.from_buffers(
        pa.string(),
        2,
        [None, pa.py_buffer(np.array([0, 1, 3], np.int32).tobytes()), pa.py_buffer(b"a\xff\xfe")],
    )
    assert error(pa.table({"text": bad})).startswith("F: column 'text' is not valid UTF-8: ")
