"""The Ray Data stage and job (blockbpe_jax/corpus/ray_stage.py, corpus/ray_job.py): the stage's token column
equals tiktoken's ids row by row; the sink's shards do not depend on how the blocks are cut;
on a local Ray cluster (2 CPUs) the job's shards hold every document once, equal to the corpus
job's, with an actor that dies on its first batch, and a job killed half-way and run again
gives the same files byte for byte. The tests without a cluster run where ray is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from blockbpe_jax.corpus import job as corpus, ray_stage
from blockbpe_jax.corpus.shards import megatron as megatron_shards  # noqa: E402
from blockbpe_jax.corpus.ray_stage import ROW, UNIT, EncodeBatch, ShardSink  # noqa: E402
from blockbpe_jax.corpus.shards.flat import token_dtype  # noqa: E402

import corpus_shared  # noqa: E402
from corpus_shared import CL100K  # noqa: E402

root, war_and_peace = corpus_shared.root, corpus_shared.war_and_peace
texts, want = corpus_shared.texts, corpus_shared.want  # the corpora's rows, tiktoken's ids


@pytest.fixture(scope="module")
def parquet_files(tmp_path_factory, texts) -> list[str]:
    """Two files of small row groups (units of a few groups each)."""
    d = tmp_path_factory.mktemp("ray_inputs")
    half = len(texts) // 2
    pq.write_table(pa.table({"text": texts[:half], "id": range(half)}), d / "a.parquet", row_group_size=97)
    pq.write_table(pa.table({"text": texts[half:]}), d / "b.parquet", row_group_size=211)
    return [os.fspath(d / "a.parquet"), os.fspath(d / "b.parquet")]


def test_stage_adds_the_token_column(root, texts, want):
    stage = EncodeBatch(os.fspath(root / CL100K), keep_text=False)
    table = pa.table({"text": pa.chunked_array([texts[:300], texts[300:900]]), "n": range(900)})
    out = stage(table)
    assert out.column_names == ["n", "input_ids"] and out.schema.field("input_ids").type == pa.list_(
        pa.uint32()
    )
    assert out.column("input_ids").to_pylist() == want[:900]
    r50k = EncodeBatch(os.fspath(root / "vocab/tiktoken/r50k_base.tiktoken"), output="ids")(table.slice(0, 0))
    assert r50k.num_rows == 0 and r50k.schema.field("ids").type == pa.list_(pa.uint16())


def test_units_cover_every_row_group_once(tmp_path, parquet_files, texts):
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    units = ray_stage.plan_units([parquet_files[0], empty, parquet_files[1]], "text", 24_000)
    assert [u["unit"] for u in units] == list(range(len(units))) and sum(u["rows"] for u in units) == len(
        texts
    )
    for path in parquet_files:
        groups = [u["groups"] for u in units if u["path"] == path]
        assert groups[0][0] == 0 and groups[-1][1] == pq.ParquetFile(path).num_row_groups
        assert all(a[1] == b[0] for a, b in zip(groups, groups[1:])) and len(groups) > 2
    with pytest.raises(corpus.CorpusError, match="no column 'body'"):
        ray_stage.plan_units(parquet_files, "body")
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(corpus.CorpusError, match="a.txt: the Ray job reads parquet files"):
        ray_stage.plan_units([tmp_path / "a.txt"], "text")


@pytest.mark.parametrize("fmt", ["megatron", "flat", "arrayrecord"])
def test_sink_shards_do_not_depend_on_the_blocks(tmp_path, root, texts, want, fmt):
    """The rows of two units, in blocks cut anywhere and written twice (a retried task), in any
    order: each unit's shard is the same bytes as when written in one block."""
    if fmt == "arrayrecord":
        pytest.importorskip("array_record.python.array_record_module")
    stage = EncodeBatch(os.fspath(root / CL100K))
    units = [dict(unit=0, rows=700), dict(unit=1, rows=400)]
    table = stage(pa.table({"text": texts[:1100]}))
    table = table.append_column(UNIT, pa.array(np.repeat([0, 1], [700, 400]).astype(np.int64)))
    table = table.append_column(ROW, pa.array(np.r_[np.arange(700), np.arange(400)].astype(np.int64)))
    ShardSink(tmp_path / "one" / "s", fmt, 100277).write([table])
    assert ray_stage.consolidate(tmp_path / "one" / "s", units, fmt) == []
    sink = ShardSink(tmp_path / "cut" / "s", fmt, 100277)
    cuts = [0, 5, 6, 333, 650, 701, 1000, 1100]
    blocks = [table.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:])]
    sink.write(blocks[::-1] + blocks[2:4])
    assert ray_stage.consolidate(tmp_path / "cut" / "s", units[:1] + [dict(unit=1, rows=401)], fmt) == [1]
    assert ray_stage.consolidate(tmp_path / "cut" / "s", units, fmt) == []
    names = [p.name for u in (0, 1) for p in ray_stage.shard_names(tmp_path / "one" / "s", u, fmt)]
    for name in names:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert not list((tmp_path / "cut" / "s.parts").iterdir())
    assert sorted(p.name for p in (tmp_path / "cut").glob("s_*")) == sorted(names)
    if fmt == "arrayrecord":  # (the records as the CLI's shards hold them)
        from array_record.python.array_record_module import ArrayRecordReader

        got = []
        for name in names[::2]:
            reader = ArrayRecordReader(os.fspath(tmp_path / "cut" / name))
            got += [np.frombuffer(r, "<u4").tolist() for r in reader.read_all()]
            reader.close()
        assert got == want[:1100]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def expected_pair(root, parquet_files) -> tuple[bytes, bytes]:
    """The corpus job's ids for the same files as one Megatron pair."""
    import blockbpe_jax as bb

    tok = bb.Tokenizer.from_file(root / CL100K)
    ids, offsets = corpus.encode_files_to_arrays(tok, parquet_files, jsonl_field="text")
    dtype = megatron_shards.megatron_dtype(tok.vocab.n_vocab)
    return ids.astype(dtype).tobytes(), megatron_shards.index_bytes(dtype, offsets)


def job(files, out, root, **options):
    from blockbpe_jax.corpus import ray_job

    return ray_job.encode_parquet(files, out, root / CL100K, unit_bytes=24_000, **options)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, cluster, root, parquet_files) -> tuple[Path, dict]:
    """A Megatron output of the job, run once without a failure: (its directory, its sidecar)."""
    out = tmp_path_factory.mktemp("ray_clean")
    return out, job(parquet_files, out / "s", root)


def test_ray_job_equals_the_corpus_job(tmp_path, clean_run, root, parquet_files, want, capsys):
    out, meta = clean_run
    assert meta["documents"] == len(want) and len(meta["shards"]) > 6 and meta["dtype"] == "int32"
    assert [a.tolist() for a in megatron_shards.read_megatron(out / "s")] == want
    megatron_shards.merge([out / "s"], tmp_path / "merged")
    data, index = expected_pair(root, parquet_files)
    assert (tmp_path / "merged.bin").read_bytes() == data and (tmp_path / "merged.idx").read_bytes() == index
    from blockbpe_jax.corpus import ray_job

    argv = [*parquet_files, "-o", os.fspath(tmp_path / "f" / "s"), "--vocab", os.fspath(root / CL100K)]
    argv += ["--format", "flat", "--unit-bytes", "24000"]
    assert ray_job.main(argv) == 0  # the command line
    flat = json.loads((tmp_path / "f" / "s.json").read_text())
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "f" / "s")] == want
    assert flat["dtype"] == token_dtype(100277).name and not (tmp_path / "f" / "s.parts").exists()
    import blockbpe_jax as bb

    checked = corpus.verify(tmp_path / "f" / "s", bb.Tokenizer.from_file(root / CL100K), sample=200)
    assert checked["documents"] == len(want) and checked["checked"] == 200  # (the inputs read again)
    assert ray_job.main(argv) == 2 and "s.json: output exists" in capsys.readouterr().err


def test_ray_job_appends_eod(tmp_path, cluster, root, parquet_files, want):
    """--append-eod on the cluster: each document's ids then the end-of-text id, in both formats;
    the id resolved once, before any task, and named in the plan and the sidecar."""
    from blockbpe_jax.corpus import ray_job

    meta = job(parquet_files, tmp_path / "m" / "s", root, append_eod=True)
    assert [a.tolist() for a in megatron_shards.read_megatron(tmp_path / "m" / "s")] == [
        w + [100257] for w in want
    ]
    plan = json.loads((tmp_path / "m" / "s.plan.json").read_text())
    assert meta["append_eod"] == 100257 and plan["engine"]["append_eod"] == 100257
    argv = [*parquet_files, "-o", os.fspath(tmp_path / "f" / "s"), "--vocab", os.fspath(root / CL100K)]
    assert ray_job.main([*argv, "--format", "flat", "--unit-bytes", "24000", "--eod-id", "11"]) == 0
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "f" / "s")] == [w + [11] for w in want]


def test_ray_job_arrayrecord_equals_the_cli(tmp_path, cluster, root, parquet_files, want):
    """--format arrayrecord on the cluster: the CLI's layout (shards and sidecar, no .idx left),
    every document's ids equal tiktoken's, the shards' records the CLI's records."""
    pytest.importorskip("array_record.python.array_record_module")
    from blockbpe_jax.corpus import ray_job

    argv = [*parquet_files, "-o", os.fspath(tmp_path / "a" / "s"), "--vocab", os.fspath(root / CL100K)]
    assert ray_job.main([*argv, "--format", "arrayrecord", "--unit-bytes", "24000"]) == 0
    meta = json.loads((tmp_path / "a" / "s.json").read_text())
    assert [a.tolist() for a in corpus.read_array_records(tmp_path / "a" / "s")] == want
    assert (
        meta["format"] == "blockbpe-arrayrecord-v1" and meta["dtype"] == "uint32" and len(meta["shards"]) > 6
    )
    assert meta["tokens"] == sum(map(len, want)) == sum(s["tokens"] for s in meta["shards"])
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        ["s.json", "s.plan.json"] + [s["file"] for s in meta["shards"]]
    )
    import blockbpe_jax as bb

    cli_meta = corpus.encode_files(
        bb.Tokenizer.from_file(root / CL100K),
        parquet_files,
        tmp_path / "c" / "s",
        fmt="arrayrecord",
        jsonl_field="text",
    )
    assert {k: meta[k] for k in ("format", "dtype", "byteorder", "record")} == {
        k: cli_meta[k] for k in ("format", "dtype", "byteorder", "record")
    }


class DiesOnce(EncodeBatch):
    """An actor process that exits on its first batch, once per marker file."""

    def __init__(self, vocab, *, marker, **options):
        super().__init__(vocab, **options)
        self.marker = Path(marker)

    def __call__(self, batch):
        if not self.marker.exists():
            self.marker.write_text("died")
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_that_dies_is_retried_and_every_document_lands_once(
    tmp_path, cluster, root, parquet_files, want
):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the workers cannot import tests/)
    try:
        job(
            parquet_files,
            tmp_path / "s",
            root,
            stage=DiesOnce,
            map_options=dict(max_restarts=2, max_task_retries=3),
            marker=os.fspath(tmp_path / "marker"),
        )
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert (tmp_path / "marker").read_text() == "died"
    assert [a.tolist() for a in megatron_shards.read_megatron(tmp_path / "s")] == want


def test_a_killed_job_run_again_gives_the_same_bytes(tmp_path, cluster, clean_run, root, parquet_files):
    clean = clean_run[0]
    # the same job from another driver on the cluster, killed once it has written a part or a shard
    script = (
        "import ray, sys; from pathlib import Path; from blockbpe_jax.corpus import ray_job; "
        f"ray.init(address={cluster.get_runtime_context().gcs_address!r}, log_to_driver=False); "
        f"ray_job.encode_parquet({parquet_files!r}, {os.fspath(tmp_path / 'k' / 's')!r}, "
        f"Path({os.fspath(root / CL100K)!r}), unit_bytes=24_000)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if any((tmp_path / "k").glob("s.parts/*.idx")) or any((tmp_path / "k").glob("s_*.idx")):
            proc.kill()
            break
        time.sleep(0.02)
    proc.wait()
    time.sleep(1)  # (the killed driver's workers, ended by the cluster)
    killed = not (tmp_path / "k" / "s.json").exists()
    assert not killed or len(list((tmp_path / "k").glob("s_*.idx"))) < len(clean_run[1]["shards"]) - 2
    if killed:
        (tmp_path / "k" / "s.parts").mkdir(exist_ok=True)
        (tmp_path / "k" / "s.parts" / "u000003_r0000000000.bin.tmp-left").write_bytes(b"cut short")
        job(parquet_files, tmp_path / "k" / "s", root)
    names = sorted(p.name for p in clean.iterdir())
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == names, "files differ"
    for name in names:
        assert (tmp_path / "k" / name).read_bytes() == (clean / name).read_bytes(), name
    assert killed, "the job ended before it was killed (its output was checked all the same)"
