#!/usr/bin/env python3
"""The Ray stage's engine path over parquet, without Ray, next to gigatoken on the same data.

    python3 benchmarks/ray_engine.py --out DIR [--mb 1024] [--reps 5] [--unit-mb 256]

Ray cannot be installed on the GPU host (no registry there, and its wheel is larger than what a
device call carries), so this times what each of the Ray job's encoding actors does per batch:
`corpus.ray_stage.EncodeBatch` (constructed from the vocabulary path, as an actor does) called
on the pyarrow Tables that `corpus.ray_stage.read_units` makes of `plan_units`' units, the
batches `ray_job.encode_parquet` hands its `map_batches(EncodeBatch, batch_format="pyarrow")`.

The corpus (>= --mb MB of text in a column "text") is built from the shared corpora
(BLOCKBPE_DATA) deterministically: benchmarks/corpora.py's unique documents (War and Peace
paragraphs, GSM8K records, WikiText articles, Python files), tiled in shuffled orders, written
as 8 zstd parquet files of about 16 MB row groups. Timed, all with cl100k:
  read          read_units over every unit (parquet decoding: a Ray read task's work)
  stage_cold    the first pass of EncodeBatch over the batches (the actor's compiles included)
  stage         the median of --reps passes: MB/s of text and host CPU-seconds per GB
                (time.process_time: every thread of the process)
  gigatoken_bytes  gigatoken's fastest path: `encode_batch(BytesSource(buffers, separator))`,
                each unit's documents joined by NUL in one buffer (the joining not timed)
  gigatoken_parquet  gigatoken's `encode_files(ParquetFileSource(files, column="text"))`: it
                reads and decodes the parquet itself (compare with read + stage)
The ids of every document are compared: the stage's token column with gigatoken's. Writes
DIR/ray_engine.json and DIR/ray_engine.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from corpora import source_texts, unique_documents  # noqa: E402
from corpus_peers import compare, flatten_awkward  # noqa: E402
from harness import Clock, cpu_per_gb  # noqa: E402

from blockbpe_jax._data import find_data_dir  # noqa: E402
from blockbpe_jax.corpus.ray_stage import UNIT_BYTES, EncodeBatch, plan_units, read_units  # noqa: E402
from blockbpe_jax.testing import VOCAB_FILES  # noqa: E402

MB = 1e6
FILES = 8
ROW_GROUP_BYTES = 16 << 20
SEPARATOR = b"\x00"  # gigatoken's document separator: no document holds it (checked)


def build_parquet(work: Path, data: Path, target_bytes: int) -> tuple[list[Path], int, int]:
    """Writes FILES parquet files of the unique documents tiled in shuffled orders, at least
    target_bytes of text in all (no Python string per tiled row: Arrow `take`).

    Returns:
        the files, the text bytes and the documents.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    docs = pa.array([d for d in unique_documents(source_texts(data)) if d], pa.string())
    block = int(pc.sum(pc.binary_length(docs)).as_py())
    reps = -(-target_bytes // block)
    rng = np.random.default_rng(1)
    order = np.concatenate([rng.permutation(len(docs)) for _ in range(reps)])
    per_file = np.array_split(order, FILES)
    rows_per_group = max(1, int(ROW_GROUP_BYTES / (block / len(docs))))

    def write(k: int) -> Path:
        path = work / f"part_{k:02d}.parquet"
        table = pa.table({"text": docs.take(pa.array(per_file[k]))})
        pq.write_table(table, path, compression="zstd", row_group_size=rows_per_group)
        return path

    with ThreadPoolExecutor(FILES) as pool:  # (pyarrow compresses without the GIL)
        paths = list(pool.map(write, range(FILES)))
    return paths, block * reps, len(order)


def timed(fn, reps: int, text_bytes: int) -> dict:
    """fn() run reps times: the median wall and host CPU seconds (harness.Clock), MB/s of text,
    CPU-seconds per GB; the last run's result under "result"."""
    runs, result = [], None
    for _ in range(reps):
        result = None  # (the previous result freed before the next run allocates its own)
        with Clock() as clock:
            result = fn()
        runs.append((clock.wall, clock.cpu))
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    return dict(
        seconds=wall,
        MBps=text_bytes / MB / wall,
        cpu_seconds=cpu,
        cpu_s_per_GB=cpu_per_gb(cpu, text_bytes),
        runs=[dict(wall_s=round(w, 4), cpu_s=round(c, 4)) for w, c in runs],
        result=result,
    )


def peer_ids(got) -> tuple[np.ndarray, np.ndarray]:
    """gigatoken's result (an awkward array where awkward is installed, else a list of arrays)."""
    if type(got).__module__.partition(".")[0] == "awkward":
        return flatten_awkward(got)
    counts = np.fromiter(map(len, got), np.int64, count=len(got))  # (arrays: one concatenate)
    return (np.concatenate(got).astype(np.uint32) if len(got) else np.zeros(0, np.uint32)), counts


def stage_ids(outputs) -> tuple[np.ndarray, np.ndarray]:
    """The stage's token columns, all batches: ids back to back and tokens per document."""
    ids, counts = [], []
    for t in outputs:
        col = t.column("input_ids").combine_chunks()
        offsets = col.offsets.to_numpy()
        ids.append(col.values.to_numpy()[offsets[0] : offsets[-1]])
        counts.append(np.diff(offsets))
    return np.concatenate(ids).astype(np.uint32), np.concatenate(counts).astype(np.int64)


def joined_units(tables) -> list[bytes]:
    """Each batch's documents joined by SEPARATOR, one buffer per batch (gigatoken's input)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = []
    for t in tables:
        col = t.column("text").combine_chunks()
        one_list = pa.ListArray.from_arrays(pa.array([0, len(col)], pa.int32()), col)
        joined = pc.binary_join(one_list, SEPARATOR.decode())[0].as_buffer().to_pybytes()
        if joined.count(SEPARATOR) != len(col) - 1:
            raise SystemExit("a document holds the separator: pick another one")
        out.append(joined)
    return out


def run_gigatoken(vocab: Path, tables, paths, reps: int, text_bytes: int, want) -> dict:
    """gigatoken's BytesSource and ParquetFileSource paths, timed and compared with `want`."""
    try:
        import gigatoken

        gt = gigatoken.Tokenizer.from_tiktoken(str(vocab))
        version = getattr(gigatoken, "__version__", None)
        if version is None:
            from importlib.metadata import version as dist_version

            version = dist_version("gigatoken")
    except Exception as e:  # noqa: BLE001 (any failure to load is a peer "unavailable")
        why = f"unavailable: {e!r}"[:300]
        return dict(gigatoken_bytes=dict(status=why), gigatoken_parquet=dict(status=why))
    res = {}
    buffers = joined_units(tables)
    r = timed(lambda: gt.encode_batch(gigatoken.BytesSource(buffers, separator=SEPARATOR)), reps, text_bytes)
    got = r.pop("result")
    diff = compare("gigatoken", peer_ids(got), *want)
    res["gigatoken_bytes"] = dict(
        version=version,
        api="encode_batch(BytesSource([one buffer per batch], separator=b'\\x00'))",
        output=type(got).__module__ + "." + type(got).__name__,
        **r,
        ids_equal=not diff,
        **({"detail": diff} if diff else {}),
    )
    got = buffers = None  # (freed before the next path allocates its own)
    r = timed(
        lambda: gt.encode_files(gigatoken.ParquetFileSource([str(p) for p in paths], column="text")),
        reps,
        text_bytes,
    )
    got = r.pop("result")
    diff = compare("gigatoken", peer_ids(got), *want)
    res["gigatoken_parquet"] = dict(
        version=version,
        api="encode_files(ParquetFileSource(files, column='text'))",
        **r,
        ids_equal=not diff,
        **({"detail": diff} if diff else {}),
    )
    return res


def report(r: dict) -> str:
    lines = [
        f"ray_engine: {r['text_MB']:.0f} MB of text, {r['documents']} documents, {r['batches']} batches "
        f"(units of {r['unit_mb']} MB), {r['machine']['device']}, {r['machine']['cpus']} CPUs",
        "| path | MB/s of text | CPU-s per GB | ids equal |",
        "|---|---:|---:|---|",
    ]
    for name in ("read", "stage_cold", "stage", "read_plus_stage", "gigatoken_bytes", "gigatoken_parquet"):
        row = r["paths"].get(name, {})
        if "MBps" in row:
            eq = row.get("ids_equal", "")
            lines.append(
                f"| {name} | {row['MBps']:.0f} | {row.get('cpu_s_per_GB', float('nan')):.2f} | {eq} |"
            )
        else:
            lines.append(f"| {name} | {row.get('status', '-')} | | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for ray_engine.json / .txt")
    ap.add_argument("--mb", type=float, default=1024, help="text in the parquet files, at least (MB)")
    ap.add_argument("--reps", type=int, default=5, help="timed passes: the median")
    ap.add_argument(
        "--unit-mb",
        type=float,
        default=UNIT_BYTES / MB,
        help="a batch's column bytes, at most (plan_units; default the job's)",
    )
    ap.add_argument("--workdir", help="where the parquet files go (default: a temporary directory)")
    ap.add_argument("--no-peers", action="store_true", help="time the stage alone")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = find_data_dir()
    if data is None:
        raise SystemExit("no shared data: set BLOCKBPE_DATA to the folder holding vocab/ and corpus/")
    vocab = data / "vocab" / VOCAB_FILES["cl100k"][0]

    import jax
    import pyarrow as pa

    work = Path(tempfile.mkdtemp(prefix="ray_engine_", dir=args.workdir))
    try:
        t = time.perf_counter()
        paths, text_bytes, ndocs = build_parquet(work, data, int(args.mb * MB))
        build_s = time.perf_counter() - t
        units = plan_units(paths, "text", int(args.unit_mb * MB))
        paths_res: dict = {}

        r = timed(lambda: [read_units(pa.Table.from_pylist([u]), "text") for u in units], 1, text_bytes)
        tables = r.pop("result")
        paths_res["read"] = r
        t = time.perf_counter()
        stage = EncodeBatch(str(vocab), column="text", keep_text=False)  # (an actor's constructor)
        construct_s = time.perf_counter() - t
        r = timed(lambda: [stage(b) for b in tables], 1, text_bytes)
        r.pop("result")
        paths_res["stage_cold"] = r
        r = timed(lambda: [stage(b) for b in tables], args.reps, text_bytes)
        want = stage_ids(r.pop("result"))
        paths_res["stage"] = r
        read_s, stage_s = paths_res["read"]["seconds"], r["seconds"]
        paths_res["read_plus_stage"] = dict(
            seconds=read_s + stage_s,
            MBps=text_bytes / MB / (read_s + stage_s),
            cpu_s_per_GB=paths_res["read"]["cpu_s_per_GB"] + r["cpu_s_per_GB"],
            note="read_units then the stage, one after the other (Ray runs them in separate tasks)",
        )
        if not args.no_peers:
            paths_res.update(run_gigatoken(vocab, tables, paths, args.reps, text_bytes, want))
        result = dict(
            what="the Ray stage's engine path (EncodeBatch on read_units' pyarrow batches), no Ray",
            vocab="cl100k",
            text_MB=text_bytes / MB,
            parquet_MB=sum(p.stat().st_size for p in paths) / MB,
            documents=ndocs,
            tokens=int(want[0].size),
            files=len(paths),
            batches=len(tables),
            unit_mb=args.unit_mb,
            reps=args.reps,
            build_s=round(build_s, 2),
            stage_construct_s=round(construct_s, 3),
            paths=paths_res,
            machine=dict(
                device=str(jax.devices()[0].device_kind),
                platform=jax.devices()[0].platform,
                cpus=os.cpu_count(),
                python=platform.python_version(),
                jax=jax.__version__,
                pyarrow=pa.__version__,
            ),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / "ray_engine.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (out / "ray_engine.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
