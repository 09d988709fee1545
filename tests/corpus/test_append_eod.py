"""--append-eod (blockbpe_jax/corpus/eod.py, Megatron's preprocess_data option): every
document's ids in flat, Megatron and ArrayRecord shards, in memory, through `encode_arrow` and
the Ray stage are `encode_batch`'s (and tiktoken's) followed by the end-of-text id or the id
given; the CLI's --verify checks such shards; a vocabulary without an end-of-text special, or
an id outside the vocabulary, is refused naming the problem."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.eod import with_eod
from blockbpe_jax.corpus.shards.megatron import read_megatron
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared
from corpus_shared import CL100K, encode_batch_ids, utf8_cut
from helpers import encode_argv
from synthetic import tokenizer_json_doc, write_json

root, cl100k, r50k, war_and_peace = (
    corpus_shared.root,
    corpus_shared.cl100k,
    corpus_shared.r50k,
    corpus_shared.war_and_peace,
)
texts, want = corpus_shared.texts, corpus_shared.want


@pytest.fixture(scope="module")
def docs(war_and_peace) -> list[bytes]:
    """Empty, one byte, long (several windows' worth of tokens), unicode, lines of the book."""
    lines = [x for x in war_and_peace[200_000:260_000].split(b"\n") if x]
    return [b"", b"a", utf8_cut(war_and_peace[300_000:], 70_000), "ünïcödé 日本語 🎉".encode(), b""] + lines


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory, docs):
    src = tmp_path_factory.mktemp("eod_inputs") / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d.decode()}) + "\n" for d in docs), encoding="utf-8")
    return src


def read_back(fmt: str, prefix) -> list[list[int]]:
    if fmt == "flat":
        return [a.tolist() for a in corpus.read_shards(prefix)]
    if fmt == "megatron":
        return [a.tolist() for a in read_megatron(prefix)]
    return [a.tolist() for a in corpus.read_array_records(prefix)]


@pytest.mark.parametrize("fmt", ["flat", "megatron", "arrayrecord"])
@pytest.mark.parametrize("vocab", ["cl100k", "r50k"])
def test_shards_hold_encode_batch_ids_then_eod(tmp_path, request, docs, jsonl, fmt, vocab):
    if fmt == "arrayrecord":
        pytest.importorskip("array_record.python.array_record_module")
    tok = request.getfixturevalue(vocab)
    eot = tok.eot_token
    reference = encode_batch_ids(tok, docs)
    meta = corpus.encode_files(
        tok, [jsonl], tmp_path / "s", fmt=fmt, jsonl_field="text", append_eod=True, shard_docs=40
    )
    got = read_back(fmt, tmp_path / "s")
    assert got == [r + [eot] for r in reference] and len(meta["shards"]) > 1
    assert meta["append_eod"] == eot and meta["tokens"] == sum(map(len, reference)) + len(docs)
    # an explicit id, any token of the vocabulary (Megatron users may want another separator)
    corpus.encode_files(tok, [jsonl], tmp_path / "t", fmt=fmt, jsonl_field="text", append_eod=7)
    assert read_back(fmt, tmp_path / "t") == [r + [7] for r in reference]


def test_in_memory_and_encode_arrow(cl100k, texts, want):
    pa = pytest.importorskip("pyarrow")
    eot = cl100k.eot_token
    ids, offsets = corpus.encode_arrow(cl100k, pa.chunked_array([texts[:400], texts[400:]]), append_eod=True)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [w + [eot] for w in want]
    ids, offsets = cl100k.encode_arrow(pa.array(texts[:50]), append_eod=eot - 1)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [
        w + [eot - 1] for w in want[:50]
    ]


def test_encode_files_to_arrays(tmp_path, r50k, docs, jsonl):
    ids, offsets = corpus.encode_files_to_arrays(r50k, [jsonl], jsonl_field="text", append_eod=True)
    got = [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    assert got == [r + [50256] for r in encode_batch_ids(r50k, docs)]


def test_ray_stage_appends_eod(root, texts, want):
    pa = pytest.importorskip("pyarrow")
    from blockbpe_jax.corpus.ray_stage import EncodeBatch

    stage = EncodeBatch(os.fspath(root / CL100K), append_eod=True)
    out = stage(pa.table({"text": texts}))
    assert out.column("input_ids").to_pylist() == [w + [100257] for w in want]
    assert out.column("text").to_pylist() == texts


def test_with_eod_on_random_counts():
    """with_eod against a per-document list build, empty documents included."""
    rng = np.random.default_rng(0)
    for dtype in (np.uint16, np.uint32, np.int32):
        counts = rng.integers(0, 5, 200)
        ids = rng.integers(0, 60000, int(counts.sum())).astype(dtype)
        got, got_counts = with_eod(ids, counts, 65535 if dtype == np.uint16 else 99999)
        ends = np.concatenate([[0], np.cumsum(counts)])
        eod = 65535 if dtype == np.uint16 else 99999
        expect = [x for a, b in zip(ends[:-1], ends[1:]) for x in [*ids[a:b].tolist(), eod]]
        assert got.dtype == dtype and got.tolist() == expect and (got_counts == counts + 1).all()


def test_cli_append_eod_megatron_and_verify(tmp_path, capsys, root, r50k, docs, jsonl):
    vocab = root / "vocab/tiktoken/r50k_base.tiktoken"
    argv = encode_argv(
        jsonl, tmp_path / "m", vocab, "--field", "text", "--format", "megatron", "--append-eod"
    )
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert [a.tolist() for a in read_megatron(tmp_path / "m" / "shard")] == [
        r + [50256] for r in encode_batch_ids(r50k, docs)
    ]
    argv = encode_argv(jsonl, tmp_path / "f", vocab, "--field", "text", "--eod-id", "13", "--verify", "50")
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "50 sampled documents equal to" in capsys.readouterr().out
    assert json.loads((tmp_path / "f" / "shard.json").read_text())["append_eod"] == 13
    # the shards' eod changed behind the sidecar's back: verify notices
    meta = json.loads((tmp_path / "f" / "shard.json").read_text())
    meta["append_eod"] = 14
    (tmp_path / "f" / "shard.json").write_text(json.dumps(meta))
    assert cli.main(["verify", str(tmp_path / "f" / "shard"), "--sample", "20"]) == 1
    assert "differs from tiktoken" in capsys.readouterr().err


def test_no_end_of_text_special_is_refused(tmp_path, capsys, jsonl):
    tokenizers = pytest.importorskip("tokenizers")
    import blockbpe_jax as bb

    path = write_json(tmp_path / "tokenizer.json", tokenizer_json_doc())  # (its one special: <|end|>)
    tok = bb.Tokenizer.from_file(path)
    with pytest.raises(CorpusError, match=r"append_eod: .*no end-of-text special token.*pass the id"):
        corpus.encode_files(tok, [jsonl], tmp_path / "x" / "s", jsonl_field="text", append_eod=True)
    assert not (tmp_path / "x").exists()
    rc = cli.main(encode_argv(jsonl, tmp_path / "y", path, "--field", "text", "--append-eod"))
    assert rc == 2 and "no end-of-text special token" in capsys.readouterr().err
    for bad in (260, -1):
        with pytest.raises(CorpusError, match=f"append_eod: id {bad} is not a token of"):
            corpus.encode_files(tok, [jsonl], tmp_path / "z" / "s", jsonl_field="text", append_eod=bad)
    with pytest.raises(CorpusError, match="True, False or a token id"):
        corpus.encode_files(tok, [jsonl], tmp_path / "z" / "s", jsonl_field="text", append_eod="eot")
    # an explicit id works with it: the reference's ids, then that id
    hf = tokenizers.Tokenizer.from_file(str(path))
    lines = [json.loads(x)["text"] for x in jsonl.read_text(encoding="utf-8").splitlines()]
    ids, offsets = corpus.encode_files_to_arrays(tok, [jsonl], jsonl_field="text", append_eod=259)
    got = [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    assert got == [hf.encode(t, add_special_tokens=False).ids + [259] for t in lines]
