#!/usr/bin/env python3
"""The corpus job in memory (`Tokenizer.encode_files_to_arrays`) on the same documents in the
shapes users bring them: one plain JSONL file, 8 plain files, 8 .jsonl.gz (gzip -6), 8 .jsonl.zst
(when `zstandard` is installed), 8 .parquet files (zstd, row groups of 8192 documents; when `pyarrow`
is installed), the same documents as an Arrow column in memory (`corpus.encode_arrow`) and many
small files (~50 KB each). MB/s of uncompressed input (parquet, Arrow: of text),
median of --reps warm runs; the ids and offsets of every shape checked equal to the one file's.

    python3 benchmarks/corpus_inputs.py --out DIR [--mb 1000] [--small-mb 60] [--reps 3]

Writes DIR/corpus_inputs.json and prints a table. (`isal` installed: .gz through ISA-L, in
processes from 8 MiB; without it Python's gzip.)
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from corpora import build_mixed, source_texts  # noqa: E402
from harness import Clock, cpu_per_gb  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax.corpus import job as corpus  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402


def cut(data: bytes, n: int) -> list[bytes]:
    """data (whole lines) cut into n pieces of whole lines."""
    pieces, at = [], 0
    for k in range(n):
        end = len(data) if k == n - 1 else data.index(b"\n", (k + 1) * len(data) // n) + 1
        pieces.append(data[at:end])
        at = end
    return pieces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mb", type=float, default=1000, help="the mixed corpus' size (the 8-file shapes)")
    ap.add_argument("--small-mb", type=float, default=60, help="bytes of it cut into ~50 KB files")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corpus_inputs_"))
    docs, _ = build_mixed(work / "one.jsonl", source_texts(data_dir()), int(args.mb * 1e6))
    data = (work / "one.jsonl").read_bytes()
    shapes = {"one file": [work / "one.jsonl"]}
    parts = cut(data, 8)
    shapes["8 files"] = [work / f"part{k}.jsonl" for k in range(8)]
    shapes["8 .gz"] = [work / f"part{k}.jsonl.gz" for k in range(8)]
    for k, part in enumerate(parts):
        shapes["8 files"][k].write_bytes(part)
        shapes["8 .gz"][k].write_bytes(gzip.compress(part, 6))
    try:
        import zstandard

        shapes["8 .zst"] = [work / f"part{k}.jsonl.zst" for k in range(8)]
        for k, part in enumerate(parts):
            shapes["8 .zst"][k].write_bytes(
                zstandard.ZstdCompressor(level=3, write_checksum=True).compress(part)
            )
    except ImportError:
        print("zstandard not installed: no .zst shape")
    text_bytes = 0  # the parquet shape's: its documents' bytes
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        shapes["8 .parquet"] = [work / f"part{k}.parquet" for k in range(8)]
        for k, path in enumerate(shapes["8 .parquet"]):
            part = pa.array(docs[k * len(docs) // 8 : (k + 1) * len(docs) // 8], pa.large_string())
            text_bytes += part.buffers()[2].size
            pq.write_table(pa.table({"text": part}), path, compression="zstd", row_group_size=8192)
        # in memory (corpus.encode_arrow): one array, and a datasets.Dataset's 1000-row chunks
        shapes["arrow column, one array"] = pa.array(docs, pa.large_string())
        shapes["arrow column, 1000-row chunks"] = pa.chunked_array(
            [pa.array(docs[i : i + 1000]) for i in range(0, len(docs), 1000)]
        )
    except ImportError:
        print("pyarrow not installed: no .parquet shape")
    del docs
    small = data[: data.index(b"\n", int(min(args.small_mb * 1e6, len(data) - 1))) + 1]
    n_small = max(2, len(small) // 50_000)
    shapes[f"{n_small} small files"] = [work / f"small{k:05d}.jsonl" for k in range(n_small)]
    for path, piece in zip(shapes[f"{n_small} small files"], cut(small, n_small)):
        path.write_bytes(piece)
    (work / "small_one.jsonl").write_bytes(small)
    shapes["the small files' bytes in one file"] = [work / "small_one.jsonl"]

    tok = bb.Tokenizer.from_file(data_dir() / "vocab/tiktoken/cl100k_base.tiktoken")
    rows, want = [], {}
    for name, paths in shapes.items():
        text = "parquet" in name or "arrow" in name
        nbytes = len(small) if "small" in name else text_bytes if text else len(data)
        times, cpus = [], []
        for rep in range(args.reps + 1):  # (the first run compiles and allocates: not counted)
            with Clock() as clock:
                if "arrow" in name:
                    ids, offsets = corpus.encode_arrow(tok, paths)
                else:
                    ids, offsets = tok.encode_files_to_arrays(paths, jsonl_field="text")
            if rep:
                times.append(clock.wall)
                cpus.append(clock.cpu)
        key = "small" if "small" in name else "all"
        if key not in want:
            want[key] = (ids, offsets)
        equal = bool(len(ids) == len(want[key][0]) and (ids == want[key][0]).all())
        equal = equal and bool(len(offsets) == len(want[key][1]) and (offsets == want[key][1]).all())
        median = statistics.median(times)
        files = 0 if "arrow" in name else len(paths)  # (in memory)
        rows.append(
            dict(
                shape=name,
                files=files,
                bytes=nbytes,
                median_s=median,
                mb_s=nbytes / median / 1e6,
                cpu_s_per_GB=cpu_per_gb(statistics.median(cpus), nbytes),
                runs_s=times,
                runs_cpu_s=cpus,
                ids_equal_one_file=equal,
            )
        )
        print(
            f"{name:36s} {files:6d} files {nbytes / 1e6:8.1f} MB  median {median:7.3f} s "
            f"{nbytes / median / 1e6:8.0f} MB/s  {rows[-1]['cpu_s_per_GB']:6.1f} CPU-s/GB  ids equal: {equal}",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "corpus_inputs.json").write_text(json.dumps(dict(rows=rows), indent=2) + "\n")
    if not all(r["ids_equal_one_file"] for r in rows):
        sys.exit("ids differ between the shapes")


if __name__ == "__main__":
    main()
