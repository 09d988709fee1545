#!/usr/bin/env python3
"""The device's split of JSONL and text blocks (corpus.inputs.device_lines, the FFI target
bbpe_split_lines) against the host's native reader (`native.cpu.split_documents`,
ffi/core/jsonl.h) on the same bytes: GB/s and host CPU-seconds per GB, the documents checked
equal.

    python3 benchmarks/jsonl_device.py --out DIR [--mb 1000] [--block-mb 32,256] [--repeat 5]

Corpora, built from the shared data (benchmarks/corpora.py): the corpus job's mixed JSONL
(UTF-8 text, ensure_ascii=False), the same documents with every non-ASCII character escaped
(json.dumps' default, an "id" member before the text), and plain lines (War and Peace, tiled).
Each is cut into blocks of whole lines of about --block-mb. Rows:
  device         the blocks already on the device (one executable: every block padded to the
                 largest), split there; timed from the first call to the last status ready
  host native    the same blocks in host memory, split by the native reader on 1 thread and
                 on every CPU (the corpus job's reader: half of them, ffi/core/jsonl.h)
Writes DIR/jsonl_device.json and DIR/jsonl_device.txt and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from corpora import build_mixed, source_texts, unique_documents  # noqa: E402

from blockbpe_jax import native  # noqa: E402
from blockbpe_jax.corpus.inputs import device_lines  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402

GB = 1e9


def corpus_bytes(kind: str, src: dict, target: int, work: Path) -> bytes:
    if kind == "jsonl_utf8":
        path = work / "mixed.jsonl"
        build_mixed(path, src, target)
        return path.read_bytes()
    if kind == "jsonl_escaped":
        docs = unique_documents(src)
        lines = [(json.dumps({"id": i, "text": d}) + "\n").encode() for i, d in enumerate(docs)]
    else:
        lines = [(x + "\n").encode() for x in src["war_and_peace"].split("\n")]
    block = b"".join(lines)
    return block * max(1, -(-target // len(block)))


def blocks_of(data: bytes, block_bytes: int) -> list[bytes]:
    """Blocks of whole lines of about block_bytes."""
    out, at = [], 0
    while at < len(data):
        end = data.find(b"\n", min(len(data), at + block_bytes) - 1)
        end = len(data) if end < 0 else end + 1
        out.append(data[at:end])
        at = end
    return out


def timed(fn, repeat: int) -> tuple[float, float]:
    """(best wall seconds, host CPU seconds of that run) of fn() over `repeat` runs."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        t, c = time.perf_counter() - t0, time.process_time() - c0
        best = min(best, (t, c))
    return best


def device_rows(blocks: list[bytes], field, repeat: int, device) -> tuple[float, float]:
    """The blocks on `device`, split there: (best seconds, CPU seconds); the documents checked
    equal to the host reader's."""
    cap = max(map(len, blocks))
    newlines = max(b.count(b"\n") for b in blocks)
    max_lines, max_bytes = newlines + 1, cap
    split = device_lines.split_lines_jit(field, b"", max_lines, max_bytes)
    on_device = []
    for b in blocks:
        padded = np.zeros(cap, np.uint8)
        padded[: len(b)] = np.frombuffer(b, np.uint8)
        on_device.append((jax.device_put(padded, device), jax.device_put(np.int32(len(b)), device)))
    jax.block_until_ready(on_device)
    for (block, size), host_block in zip(on_device, blocks):  # (compiles, and checks)
        data, offsets, lines, status = (np.asarray(x) for x in split(block, size))
        assert status[device_lines.CODE] == device_lines.OK, status
        want = native.cpu.split_documents(host_block, field, 1, b"", None)
        docs = int(status[device_lines.DOCS])
        assert data[: status[device_lines.BYTES]].tobytes() == want[0].tobytes()
        assert (offsets[: docs + 1] == want[1]).all() and (lines[:docs] == want[2]).all()

    def run():
        jax.block_until_ready([split(block, size)[3] for block, size in on_device])

    return timed(run, repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=1000, help="size of each corpus (MB)")
    ap.add_argument("--block-mb", default="32,256", help="block sizes (MB), comma-separated")
    ap.add_argument("--corpora", default="jsonl_utf8,jsonl_escaped,lines")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0]
    cpus = os.cpu_count() or 1
    src = source_texts(data_dir())
    results = []
    with tempfile.TemporaryDirectory(prefix="jsonl_device_") as work:
        for kind in args.corpora.split(","):
            data = corpus_bytes(kind, src, int(args.mb * 1e6), Path(work))
            field = None if kind == "lines" else "text"
            for block_mb in [float(x) for x in args.block_mb.split(",")]:
                blocks = blocks_of(data, int(block_mb * 1e6))
                rows = [(f"device ({device.platform})", *device_rows(blocks, field, args.repeat, device))]
                for threads in sorted({1, cpus}):
                    t, c = timed(
                        lambda: [native.cpu.split_documents(b, field, threads) for b in blocks], args.repeat
                    )
                    rows.append((f"host native, {threads} threads", t, c))
                for path, t, c in rows:
                    results.append(
                        dict(
                            corpus=kind,
                            GB=len(data) / GB,
                            block_MB=block_mb,
                            blocks=len(blocks),
                            path=path,
                            seconds=t,
                            GBps=len(data) / GB / t,
                            cpu_s_per_GB=c / (len(data) / GB),
                        )
                    )
                    print(
                        f"{kind} {len(data) / GB:.2f} GB, blocks of {block_mb:g} MB: {path}: "
                        f"{results[-1]['GBps']:.2f} GB/s, {results[-1]['cpu_s_per_GB']:.2f} CPU-s/GB",
                        flush=True,
                    )
            del data
    meta = dict(device=str(device), cpu_count=cpus, jax=jax.__version__)
    (out / "jsonl_device.json").write_text(json.dumps(dict(meta=meta, results=results), indent=1))
    table = ["corpus | GB | block MB | path | seconds | GB/s | CPU-s/GB", "---|---:|---:|---|---:|---:|---:"]
    table += [
        f"{r['corpus']} | {r['GB']:.2f} | {r['block_MB']:g} | {r['path']} | {r['seconds']:.3f} | "
        f"{r['GBps']:.2f} | {r['cpu_s_per_GB']:.2f}"
        for r in results
    ]
    (out / "jsonl_device.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
