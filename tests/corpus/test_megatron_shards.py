"""Megatron's indexed dataset as the corpus job's output (blockbpe_jax/corpus/shards/megatron.py):
pairs read back by a reader that follows Megatron-LM's megatron/core/datasets/indexed_dataset.py
(and by megatron.core's own IndexedDataset where it imports) hold tiktoken's ids for every
document; uint16 or int32 by Megatron's rule; the streaming merge of several pairs equals one
job's output byte for byte; bad pairs are refused naming the file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.shards import megatron as megatron_shards
from blockbpe_jax.corpus.shards.megatron import merge, read_megatron
from blockbpe_jax.corpus.types import CorpusError, VerifyError

import corpus_shared
from corpus_shared import utf8_cut
from helpers import encode_argv

root, cl100k, r50k, war_and_peace = (
    corpus_shared.root,
    corpus_shared.cl100k,
    corpus_shared.r50k,
    corpus_shared.war_and_peace,
)


class MegatronReference:
    """A pair read as Megatron-LM's IndexedDataset reads it (its _IndexReader: the header
    fields one after another, then numpy.frombuffer over the memory-mapped .idx at running
    offsets; its _MMapBinReader: numpy.frombuffer over the memory-mapped .bin at a sequence's
    pointer; the asserts its constructor makes). Written from that file's description, so that
    the test does not lean on megatron_shards' own reader."""

    DTYPES = {
        1: np.uint8,
        2: np.int8,
        3: np.int16,
        4: np.int32,
        5: np.int64,
        6: np.float64,
        7: np.float32,
        8: np.uint16,
    }

    def __init__(self, prefix: str | Path):
        idx_path, bin_path = f"{prefix}.idx", f"{prefix}.bin"
        with open(idx_path, "rb") as stream:
            assert stream.read(9) == b"MMIDIDX\x00\x00", "bad header"
            assert struct.unpack("<Q", stream.read(8))[0] == 1, "bad version"
            self.dtype = self.DTYPES[struct.unpack("<B", stream.read(1))[0]]
            self.sequence_count = struct.unpack("<Q", stream.read(8))[0]
            self.document_count = struct.unpack("<Q", stream.read(8))[0]
            offset = stream.tell()
        buffer = memoryview(np.memmap(idx_path, mode="r", order="C"))
        self.sequence_lengths = np.frombuffer(
            buffer, dtype=np.int32, count=self.sequence_count, offset=offset
        )
        offset += self.sequence_lengths.nbytes
        self.sequence_pointers = np.frombuffer(
            buffer, dtype=np.int64, count=self.sequence_count, offset=offset
        )
        offset += self.sequence_pointers.nbytes
        self.document_indices = np.frombuffer(
            buffer, dtype=np.int64, count=self.document_count, offset=offset
        )
        assert self.sequence_lengths.shape[0] == self.document_indices[-1]
        assert self.sequence_lengths.shape[0] == self.sequence_count
        self.bin = memoryview(np.memmap(bin_path, mode="r", order="C"))

    def __len__(self) -> int:
        return self.sequence_count

    def __getitem__(self, idx: int) -> np.ndarray:
        count, offset = int(self.sequence_lengths[idx]), int(self.sequence_pointers[idx])
        return np.frombuffer(self.bin, dtype=self.dtype, count=count, offset=offset)

    def documents(self) -> list[list[int]]:
        d = self.document_indices
        return [sum((self[k].tolist() for k in range(d[j], d[j + 1])), []) for j in range(len(d) - 1)]


def megatron_job(tok, paths, prefix, **options) -> dict:
    """The corpus job writing Megatron pairs at prefix (DIR/NAME); returns the sidecar."""
    return corpus.encode_files(tok, paths, prefix, fmt="megatron", **options)


def reference_documents(meta: dict, directory: Path) -> list[list[int]]:
    return [ids for s in meta["shards"] for ids in MegatronReference(directory / s["prefix"]).documents()]


@pytest.fixture(scope="module")
def edge_docs(war_and_peace) -> list[bytes]:
    """Documents of every shape: empty, one byte, long, unicode, spaces."""
    lines = [x for x in war_and_peace[200_000:230_000].split(b"\n") if x]
    return (
        [b"", b"a", utf8_cut(war_and_peace[300_000:], 60_000)]
        + lines[:60]
        + ["ünïcödé — ✓ 日本語 🎉".encode(), b" ", b"\n\n  x", b""]
        + lines[60:]
    )


@pytest.fixture(scope="module")
def edge_jsonl(tmp_path_factory, edge_docs) -> Path:
    src = tmp_path_factory.mktemp("megatron_inputs") / "edge.jsonl"
    src.write_text("".join(json.dumps({"text": d.decode()}) + "\n" for d in edge_docs))
    return src


def tiktoken_ids(tok, name: str, docs: list[bytes]) -> list[list[int]]:
    pytest.importorskip("tiktoken")
    from blockbpe_jax.testing import tiktoken_oracle

    return tiktoken_oracle(name, tok, tok.vocab.pattern).encode_ordinary_batch([d.decode() for d in docs])


def test_int32_pairs_read_as_megatron_reads_them_equal_tiktoken(tmp_path, cl100k, edge_docs, edge_jsonl):
    meta = megatron_job(cl100k, [edge_jsonl], tmp_path / "out" / "cl", jsonl_field="text")
    assert meta["format"] == "blockbpe-megatron-v1" and meta["dtype"] == "int32" and meta["dtype_code"] == 4
    got = reference_documents(meta, tmp_path / "out")
    assert got == tiktoken_ids(cl100k, "cl100k", edge_docs) and got[0] == [] and max(map(len, got)) > 10_000
    # the header's bytes, as the format fixes them
    idx = (tmp_path / "out" / "cl_00000.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00" and idx[9:17] == (1).to_bytes(8, "little") and idx[17] == 4
    n = meta["shards"][0]["documents"]
    assert struct.unpack("<QQ", idx[18:34]) == (n, n + 1) and len(idx) == 34 + 12 * n + 8 * (n + 1)


def test_gsm8k_several_pairs_equal_tiktoken(tmp_path, root, cl100k):
    gsm8k = root / "corpus/gsm8k_test.jsonl"
    meta = megatron_job(cl100k, [gsm8k], tmp_path / "g", jsonl_field="question", shard_tokens=20_000)
    assert len(meta["shards"]) > 2 and meta["documents"] == 1319
    questions = [json.loads(line)["question"].encode() for line in gsm8k.read_text().splitlines()]
    want = tiktoken_ids(cl100k, "cl100k", questions)
    assert reference_documents(meta, tmp_path) == want
    assert [a.tolist() for a in read_megatron(tmp_path / "g")] == want  # the module's own reader
    for s in meta["shards"]:  # int32 .bin files: 4 bytes a token
        assert (tmp_path / s["bin"]).stat().st_size == 4 * s["tokens"]


def test_uint16_when_the_vocabulary_has_fewer_than_65500_ids(tmp_path, r50k, war_and_peace):
    text = utf8_cut(war_and_peace[100_000:], 200_000)
    src = tmp_path / "wp.txt"
    src.write_bytes(text)
    meta = megatron_job(r50k, [src], tmp_path / "out" / "wp", shard_tokens=15_000)
    assert meta["dtype"] == "uint16" and meta["dtype_code"] == 8 and len(meta["shards"]) > 2
    got = reference_documents(meta, tmp_path / "out")
    assert got == tiktoken_ids(r50k, "r50k", [x for x in text.split(b"\n") if x])
    assert (tmp_path / "out" / meta["shards"][0]["bin"]).stat().st_size == 2 * meta["shards"][0]["tokens"]


def test_dtype_rule_and_int32_from_uint16_ids(tmp_path):
    """Megatron's rule: uint16 below 65500 ids, else int32, even where uint16 would hold them
    (the engine then hands uint16 ids, written widened)."""
    assert megatron_shards.megatron_dtype(65499) == np.uint16
    assert megatron_shards.megatron_dtype(65500) == np.int32 == megatron_shards.megatron_dtype(200_019)
    writer = megatron_shards.MegatronWriter(tmp_path / "v", 65520, 1 << 20, None)
    ids = np.array([65519, 0, 7, 65000, 1], np.uint16)
    writer.add(ids, np.array([2, 0, 3]), None)
    meta = writer.finish({})
    assert meta["dtype"] == "int32" and meta["shards"][0]["prefix"] == "v_00000"
    ref = MegatronReference(tmp_path / "v_00000")
    assert ref.dtype == np.int32 and ref.documents() == [[65519, 0], [], [7, 65000, 1]]


def test_merge_equals_one_job_byte_for_byte(tmp_path, root, cl100k, r50k, edge_jsonl, monkeypatch):
    gsm8k = tmp_path / "gsm8k.jsonl"  # (the field named as edge_jsonl's)
    lines = (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    gsm8k.write_text("".join(json.dumps({"text": json.loads(x)["question"]}) + "\n" for x in lines))
    inputs = [edge_jsonl, gsm8k]
    options = dict(jsonl_field="text", shard_tokens=1 << 40)
    one = megatron_job(cl100k, inputs, tmp_path / "one" / "all", **options)
    assert len(one["shards"]) == 1
    want_bin = (tmp_path / "one" / "all_00000.bin").read_bytes()
    want_idx = (tmp_path / "one" / "all_00000.idx").read_bytes()
    # per-worker outputs: one job per input, each in several pairs
    workers = []
    for k, src in enumerate(inputs):
        megatron_job(cl100k, [src], tmp_path / f"w{k}" / "part", **{**options, "shard_tokens": 9_000})
        workers.append(tmp_path / f"w{k}" / "part")
    monkeypatch.setattr(megatron_shards, "CHUNK", 7)  # the indices converted piece by piece
    info = merge(workers, tmp_path / "merged" / "all")
    assert info["documents"] == one["documents"] == info["sequences"] and info["tokens"] == one["tokens"]
    assert len(info["inputs"]) > 4 and info["dtype"] == "int32"
    assert (tmp_path / "merged" / "all.bin").read_bytes() == want_bin
    assert (tmp_path / "merged" / "all.idx").read_bytes() == want_idx
    # the pairs named one by one give the same; a merged pair merges again
    pairs = megatron_shards.pair_prefixes(workers[0]) + megatron_shards.pair_prefixes(workers[1])
    merge(pairs, tmp_path / "again", overwrite=False)
    assert (tmp_path / "again.idx").read_bytes() == want_idx
    assert megatron_shards.main([str(tmp_path / "once_more"), str(tmp_path / "merged" / "all")]) == 0
    assert (tmp_path / "once_more.bin").read_bytes() == want_bin
    # refused: an existing output, the output as an input, pairs of two dtypes
    with pytest.raises(CorpusError, match="again.bin: output exists"):
        merge(pairs, tmp_path / "again")
    with pytest.raises(CorpusError, match="one of the inputs"):
        merge([tmp_path / "again"], tmp_path / "again", overwrite=True)
    megatron_job(r50k, [edge_jsonl], tmp_path / "r50k" / "p", jsonl_field="text")
    with pytest.raises(CorpusError, match="dtypes differ"):
        merge([tmp_path / "merged" / "all", tmp_path / "r50k" / "p"], tmp_path / "mixed")
    assert not (tmp_path / "mixed.bin").exists() and not (tmp_path / "mixed.idx").exists()


def test_bad_pairs_are_refused_naming_the_file(tmp_path, cl100k, edge_jsonl):
    megatron_job(cl100k, [edge_jsonl], tmp_path / "p", jsonl_field="text")
    good_idx, good_bin = (tmp_path / "p_00000.idx").read_bytes(), (tmp_path / "p_00000.bin").read_bytes()
    cases = [
        (good_idx[:-8], good_bin, "p_00000.idx: .* bytes, its header says"),
        (good_idx + b"\0" * 100, good_bin, "multimodal"),
        (b"XXIDIDX\x00\x00" + good_idx[9:], good_bin, "no MMIDIDX header"),
        (good_idx[:17] + b"\x63" + good_idx[18:], good_bin, "dtype code 99"),
        (good_idx, good_bin[:-4], "p_00000.bin: .* bytes, its index says"),
    ]
    for idx, data, message in cases:
        (tmp_path / "bad.idx").write_bytes(idx)
        (tmp_path / "bad.bin").write_bytes(data)
        with pytest.raises(VerifyError, match=message.replace("p_00000", "bad")):
            merge([tmp_path / "bad"], tmp_path / "out", overwrite=True)
        assert not (tmp_path / "out.bin").exists()
    # pointers that leave a gap between sequences
    n = struct.unpack("<Q", good_idx[18:26])[0]
    pointers = np.frombuffer(good_idx, "<i8", count=n, offset=34 + 4 * n).copy()
    pointers[2] += 4
    gap = good_idx[: 34 + 4 * n] + pointers.tobytes() + good_idx[34 + 12 * n :]
    (tmp_path / "bad.idx").write_bytes(gap)
    (tmp_path / "bad.bin").write_bytes(good_bin)
    with pytest.raises(VerifyError, match="sequence 2 does not follow"):
        list(read_megatron(tmp_path / "bad"))
    with pytest.raises(VerifyError, match="missing"):
        merge([tmp_path / "nothing"], tmp_path / "out")
    assert megatron_shards.main([str(tmp_path / "out"), str(tmp_path / "nothing")]) == 2


def test_megatron_core_indexed_dataset_reads_it(tmp_path, cl100k, edge_docs, edge_jsonl):
    """megatron.core's own reader and merge (it imports torch at the top: skipped without)."""
    mcore = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    meta = megatron_job(cl100k, [edge_jsonl], tmp_path / "p", jsonl_field="text", shard_tokens=9_000)
    want = tiktoken_ids(cl100k, "cl100k", edge_docs)
    got = []
    builder = mcore.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.int32)
    for s in meta["shards"]:
        ds = mcore.IndexedDataset(str(tmp_path / s["prefix"]))
        got += [ds[j].tolist() for j in range(len(ds))]
        builder.add_index(str(tmp_path / s["prefix"]))
    builder.finalize(str(tmp_path / "theirs.idx"))
    assert got == want
    merge([tmp_path / "p"], tmp_path / "ours")
    assert (tmp_path / "ours.idx").read_bytes() == (tmp_path / "theirs.idx").read_bytes()
    assert (tmp_path / "ours.bin").read_bytes() == (tmp_path / "theirs.bin").read_bytes()


def test_cli_format_megatron(tmp_path, root, cl100k, edge_docs, edge_jsonl, capsys):
    vocab = root / "vocab/tiktoken/cl100k_base.tiktoken"
    argv = encode_argv(edge_jsonl, tmp_path / "out", vocab, "--field", "text", "--format", "megatron")
    assert cli.main(argv + ["--shard-tokens", "9000"]) == 0
    meta = json.loads((tmp_path / "out" / "shard.json").read_text())
    assert meta["format"] == "blockbpe-megatron-v1" and len(meta["shards"]) > 1
    assert reference_documents(meta, tmp_path / "out") == tiktoken_ids(cl100k, "cl100k", edge_docs)
    assert cli.main(argv) == 2 and "output exists" in capsys.readouterr().err
    assert cli.main(argv + ["--overwrite"]) == 0  # (one pair now: the earlier ones removed)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "shard.json",
        "shard_00000.bin",
        "shard_00000.idx",
    ]
    assert cli.main(argv + ["--max-tokens", "5"]) == 2
