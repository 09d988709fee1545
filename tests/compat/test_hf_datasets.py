"""HF datasets (blockbpe_jax/compat/hf_datasets.py): `Tokenizer.encode_dataset` adds `input_ids` equal
to `encode_batch`'s and tiktoken's on a dataset of the shared corpora, by way of `encode_arrow`
on views of the dataset's own Arrow buffers (no Python string per row); in one process and with
`num_proc=2` (the tokenizer pickled into datasets' workers), through `encode_dataset` and through
`EncodeColumn` in a caller's own `map`; datasets' cache hits for the same vocabulary loaded
again; empty strings, an empty dataset, large_string columns, None rows, bad columns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import text_rows, tokenizer  # noqa: E402
from blockbpe_jax.compat import hf_datasets, tiktoken_api  # noqa: E402
from blockbpe_jax.compat.hf_datasets import EncodeColumn  # noqa: E402
from blockbpe_jax.corpus import job as corpus  # noqa: E402

import corpus_shared  # noqa: E402
from helpers import REPO  # noqa: E402
from corpus_shared import CL100K  # noqa: E402

root, war_and_peace, cl100k = corpus_shared.root, corpus_shared.war_and_peace, corpus_shared.cl100k
texts, want = corpus_shared.texts, corpus_shared.want  # the corpora's rows, tiktoken's ids


@pytest.fixture(scope="module")
def batch_ids(cl100k, texts) -> list[list[int]]:
    return corpus_shared.encode_batch_ids(cl100k, [t.encode() for t in texts])


@pytest.fixture
def arrow_calls(monkeypatch) -> list:
    """The columns `corpus.encode_arrow` is called with; the paths that take Python strings
    (encode_batch, pack_strings, the tiktoken view) raise while the test runs."""
    calls, real = [], corpus.encode_arrow

    def spy(tok, column, **kw):
        calls.append(column)
        return real(tok, column, **kw)

    def refuse(*a, **k):
        raise AssertionError("encode_dataset took a path of Python strings")

    monkeypatch.setattr(corpus, "encode_arrow", spy)
    for owner, name in [
        (bb.Tokenizer, "encode_batch"),
        (tokenizer, "pack_strings"),
        (text_rows, "pack_strings"),
        (text_rows._blockbpe_cpu, "pack_strings"),
        (tiktoken_api.Encoding, "encode_ordinary_batch"),
        (tiktoken_api.Encoding, "encode_batch"),
    ]:
        monkeypatch.setattr(owner, name, refuse)
    return calls


def _buffer_range(column) -> tuple[int, int]:
    data = [c.buffers()[2] for c in column.chunks]
    return min(b.address for b in data), max(b.address + b.size for b in data)


def test_encode_dataset_equals_encode_batch_and_tiktoken(cl100k, texts, want, batch_ids, arrow_calls):
    assert want == batch_ids
    ds = datasets.Dataset.from_dict({"text": texts, "n": list(range(len(texts)))})
    out = cl100k.encode_dataset(ds, batch_size=500)
    assert out.column_names == ["text", "n", "input_ids"] and out.num_rows == len(texts)
    assert out.features["input_ids"] == datasets.List(datasets.Value("int32"))
    assert out["input_ids"] == want and out["n"] == list(range(len(texts)))
    assert out.format["type"] is None and ds.column_names == ["text", "n"]  # (ds unchanged)
    # one engine call per batch, each on a view of the dataset's own string buffers
    assert len(arrow_calls) == -(-len(texts) // 500)
    lo, hi = _buffer_range(ds.data.column("text"))
    for column in arrow_calls:
        assert isinstance(column, pa.ChunkedArray)
        a, b = _buffer_range(column)
        assert lo <= a and b <= hi, "the batch's strings were copied out of the dataset"


def test_large_string_dtypes_and_formats(root, cl100k, texts, want, arrow_calls):
    ds = datasets.Dataset.from_dict({"text": texts[:400]}).cast_column("text", datasets.Value("large_string"))
    assert ds.data.schema.field("text").type == pa.large_string()
    out = cl100k.encode_dataset(ds.with_format("numpy"), dtype="int64", keep_text=False)
    assert out.column_names == ["input_ids"] and out.format["type"] == "numpy"
    assert out.features["input_ids"] == datasets.List(datasets.Value("int64"))
    assert [row.tolist() for row in out["input_ids"]] == want[:400]
    r50k = bb.Tokenizer.from_file(root / "vocab/tiktoken/r50k_base.tiktoken")
    small = r50k.encode_dataset(ds.select(range(3)).with_format("numpy", columns=["text"]), dtype="uint16")
    assert small.format["columns"] == ["text", "input_ids"]
    assert small.data.schema.field("input_ids").type == pa.list_(pa.uint16())
    with pytest.raises(ValueError, match="uint16 cannot hold 100277 ids"):
        cl100k.encode_dataset(ds, dtype="uint16")


def test_empty_rows_and_an_empty_dataset(cl100k, arrow_calls):
    out = cl100k.encode_dataset(datasets.Dataset.from_dict({"text": ["", "", "a"]}), output="ids")
    assert out["ids"] == [[], [], [64]]
    empty = cl100k.encode_dataset(datasets.Dataset.from_dict({"text": ["x"]}).select([]))
    assert empty.num_rows == 0 and empty.features["input_ids"] == datasets.List(datasets.Value("int32"))


def test_refusals(cl100k):
    ds = datasets.Dataset.from_dict({"text": ["a", "b", "c", None, "d"], "n": [1, 2, 3, 4, 5]})
    with pytest.raises(corpus.CorpusError, match="row 3 of column 'text' is None"):
        cl100k.encode_dataset(ds, batch_size=2)  # (the dataset's row, not the batch's)
    with pytest.raises(KeyError, match=r"no column 'body' \(the columns: \['text', 'n'\]\)"):
        cl100k.encode_dataset(ds, "body")
    with pytest.raises(TypeError, match="column 'n' is int64, not a string column"):
        cl100k.encode_dataset(ds, "n")
    with pytest.raises(ValueError, match="has a column 'n' already"):
        cl100k.encode_dataset(ds, output="n")
    with pytest.raises(ValueError, match="dtype must be one of"):
        cl100k.encode_dataset(ds, dtype="float32")
    with pytest.raises(TypeError, match="got IterableDataset"):
        cl100k.encode_dataset(ds.to_iterable_dataset())
    with pytest.raises(TypeError, match="got list"):
        cl100k.encode_dataset(["a"])


def test_dataset_dict_and_iterable_dataset(cl100k, texts, want):
    splits = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"text": texts[:50]}),
        test=datasets.Dataset.from_dict({"text": texts[50:80]}),
    )
    out = cl100k.encode_dataset(splits)
    assert out["train"]["input_ids"] == want[:50] and out["test"]["input_ids"] == want[50:80]
    stream = datasets.Dataset.from_dict({"text": texts[:90]}).to_iterable_dataset(num_shards=3)
    mapped = stream.with_format("arrow").map(EncodeColumn(cl100k), batched=True, batch_size=32)
    got = pa.concat_tables(list(mapped.iter(batch_size=40)))
    assert got.column("input_ids").to_pylist() == want[:90]


def test_cache_hits_for_the_same_vocabulary(tmp_path, root, texts, arrow_calls):
    from datasets.fingerprint import Hasher

    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts[:300]}), tmp_path / "a.parquet")
    ds = datasets.Dataset.from_parquet(str(tmp_path / "a.parquet"), cache_dir=str(tmp_path / "cache"))
    first, again = (bb.Tokenizer.from_file(root / CL100K) for _ in range(2))
    assert Hasher.hash(EncodeColumn(first)) == Hasher.hash(EncodeColumn(again))
    assert Hasher.hash(EncodeColumn(first)) != Hasher.hash(EncodeColumn(first, mode="bytes"))
    out = first.encode_dataset(ds)
    calls = len(arrow_calls)
    assert calls and out.cache_files and out.cache_files != ds.cache_files
    cached = again.encode_dataset(ds)
    assert len(arrow_calls) == calls, "the same vocabulary loaded again did not hit datasets' cache"
    assert cached.cache_files == out.cache_files and cached["input_ids"] == out["input_ids"]


NUM_PROC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import datasets
    import blockbpe_jax as bb
    from blockbpe_jax.compat.hf_datasets import EncodeColumn

    vocab, texts_path, out_path = sys.argv[1:]
    tok = bb.Tokenizer.from_file(vocab)
    ds = datasets.Dataset.from_dict({"text": json.load(open(texts_path))})
    by_method = tok.encode_dataset(ds, batch_size=300, num_proc=2)
    by_map = ds.with_format("arrow").map(EncodeColumn(tok), batched=True, batch_size=300, num_proc=2)
    json.dump([list(by_method["input_ids"]), by_map.data.column("input_ids").to_pylist()], open(out_path, "w"))
    """
)


def test_num_proc_2(tmp_path, root, texts, want):
    """datasets forks its workers: run in a fresh process, which has started no JAX backend
    before the fork (each worker starts its own)."""
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    args = [str(root / CL100K), str(tmp_path / "texts.json"), str(tmp_path / "out.json")]
    proc = subprocess.run(
        [sys.executable, "-c", NUM_PROC_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_method, by_map = json.loads((tmp_path / "out.json").read_text())
    assert by_method == want and by_map == want
    assert "hashed properly" not in proc.stderr and "os.fork()" not in proc.stderr, proc.stderr[-3000:]


def test_module_exports():
    assert hf_datasets.INPUT_IDS == "input_ids" and "int32" in hf_datasets.ID_TYPES
