#!/usr/bin/env python3
"""The corpus job's reader alone (no tokenizer): MB/s of turning JSONL / text lines into
documents, the native block reader (ffi/core/jsonl.h) on 1..N threads next to the C-level Python
path it replaced (`corpus.inputs.lines.fast_block`: json scan_once per line, a str and a bytes object
per document), the documents checked equal.

    python3 benchmarks/corpus_reader.py --out DIR [--mb 200] [--threads 1,2,4,8,16]

Corpora, built from the shared data like benchmarks/corpus_job.py's mixed corpus: JSONL with
UTF-8 text (ensure_ascii=False), JSONL with every non-ASCII character escaped
(ensure_ascii=True, json.dumps' default), and plain lines (War and Peace, tiled). Rows:
  parse    the file's blocks (WINDOW_BYTES) already in memory, split and parsed (the pure parse rate)
  windows  `documents.iter_windows` on the file: reading included, what the job's reader
           thread does
Each row's host CPU-seconds per GB (every thread of the process) beside its wall time.
Writes DIR/corpus_reader.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from corpus_job import source_texts, unique_documents  # noqa: E402
from harness import Clock, cpu_per_gb  # noqa: E402

from blockbpe_jax.corpus import documents
from blockbpe_jax.corpus.inputs import lines as line_reader
from blockbpe_jax import native  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402

MB = 1e6


def build(path: Path, lines: list[bytes], target: int) -> int:
    block = b"".join(lines)
    with open(path, "wb") as f:
        for _ in range(max(1, -(-target // len(block)))):
            f.write(block)
    return path.stat().st_size


def blocks_of(path: Path) -> list[bytes]:
    out = []
    with open(path, "rb") as f:
        while True:
            b = f.read(documents.WINDOW_BYTES)
            if not b:
                return out
            if not b.endswith(b"\n"):
                b += f.readline()
            out.append(b)


def best_of(fn, repeat: int) -> tuple[float, float]:
    """(wall, host CPU) seconds of the fastest of `repeat` calls."""
    runs = []
    for _ in range(repeat):
        with Clock() as clock:
            fn()
        runs.append((clock.wall, clock.cpu))
    return min(runs)


def result(corpus: str, size: int, path: str, stage: str, threads: int, timed: tuple[float, float]) -> dict:
    """A row of the table: `size` bytes of `corpus` read in `timed` (wall, CPU) seconds."""
    t, cpu = timed
    return dict(
        corpus=corpus,
        MB=size / MB,
        path=path,
        stage=stage,
        threads=threads,
        seconds=t,
        MBps=size / MB / t,
        cpu_s_per_GB=cpu_per_gb(cpu, size),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=200, help="size of each corpus (MB)")
    ap.add_argument("--threads", default=",".join(str(t) for t in sorted({1, 2, 4, 8, os.cpu_count() or 1})))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    src = source_texts(data_dir())
    docs = unique_documents(src)
    corpora = {
        "jsonl_utf8": ([(json.dumps({"text": d}, ensure_ascii=False) + "\n").encode() for d in docs], "text"),
        "jsonl_escaped": (
            [(json.dumps({"id": i, "text": d}) + "\n").encode() for i, d in enumerate(docs)],
            "text",
        ),
        "lines": ([(x + "\n").encode() for x in src["war_and_peace"].split("\n")], None),
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="corpus_reader_") as work:
        for name, (lines, field) in corpora.items():
            path = Path(work) / f"{name}.txt"
            size = build(path, lines, int(args.mb * MB))
            blocks = blocks_of(path)
            python = [line_reader.fast_block(b, field) for b in blocks]
            assert all(p is not None for p in python)
            t = best_of(lambda: [line_reader.fast_block(b, field) for b in blocks], args.repeat)
            results.append(result(name, size, "python (_fast_block)", "parse", 1, t))
            print(f"{name}: {size / MB:.0f} MB, python {results[-1]['MBps']:.0f} MB/s", flush=True)
            for n in threads:
                got = [native.cpu.split_documents(b, field, n) for b in blocks]
                for (data, offsets, _, _), (blobs, _) in zip(got, python):
                    assert data.tobytes() == b"".join(blobs) and len(offsets) == len(blobs) + 1
                del got
                t = best_of(lambda: [native.cpu.split_documents(b, field, n) for b in blocks], args.repeat)
                results.append(result(name, size, "native", "parse", n, t))
                t = best_of(
                    lambda: sum(
                        w.ndocs for w in documents.iter_windows([path], jsonl_field=field, threads=n)
                    ),
                    args.repeat,
                )
                results.append(result(name, size, "native", "windows", n, t))
                print(
                    f"  native {n} threads: parse {results[-2]['MBps']:.0f} MB/s, windows "
                    f"{results[-1]['MBps']:.0f} MB/s",
                    flush=True,
                )
    meta = dict(cpu_count=os.cpu_count(), window_bytes=documents.WINDOW_BYTES)
    (out / "corpus_reader.json").write_text(json.dumps(dict(meta=meta, results=results), indent=1))
    lines = [
        "corpus | MB | path | stage | threads | seconds | MB/s | host CPU-s/GB",
        "---|---:|---|---|---:|---:|---:|---:",
    ]
    lines += [
        f"{r['corpus']} | {r['MB']:.0f} | {r['path']} | {r['stage']} | {r['threads']} | "
        f"{r['seconds']:.3f} | {r['MBps']:.0f} | {r['cpu_s_per_GB']:.2f}"
        for r in results
    ]
    (out / "corpus_reader.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
