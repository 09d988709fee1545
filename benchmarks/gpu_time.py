"""The GPU's time for one encode call, every kernel of the call summed, at the GPU's own clocks
with its caches warm (ncu --clock-control none --cache-control none): what the GPU spends,
without the host's dispatch and launches. Per shape, the first call on text the misses' cache
has not seen and the same batch's next call (benchmarks/profile_kernel.py --warm-seeds K
--split-book: K batches of the book's first half, then two calls on excerpts of its second
half; with --warm-book the warm calls read every row of the first half instead: the steady
state of a pipeline that has seen much of one author's text). ncu's defaults (base clocks,
caches flushed) read higher; they serve A/B comparisons of builds (scripts/gpu_check.sh
so_variants), this the figures to quote.

    python3 benchmarks/gpu_time.py [--out DIR] [--shapes 1024:4096,1024:512,64:512]
        [--vocab cl100k | --family KEY] [--warm-seeds 2 | --warm-book] [--allowed-special none|all]

Needs a GPU and ncu; writes DIR/gpu_time.json. `parse` reads a saved ncu CSV
(`ncu --csv --metrics gpu__time_duration.sum ...` of profile_kernel.py) the same way.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import write_report  # noqa: E402

UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def parse(text: str, calls_run: int, calls_kept: int) -> dict:
    """The kernels of the last `calls_kept` of `calls_run` encode calls in ncu's CSV output (the
    encode's kernels are those of namespace bbpe; every call launches the same ones).

    Returns {"input_bytes", "calls": [{"kernels": [[name, us], ...], "us"}]}."""
    m = re.search(r"tokens: \d+ for (\d+) bytes", text)
    start = text.find('"ID",')
    if start < 0:
        raise ValueError("no ncu CSV in the output")
    launches = []
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum" or "bbpe::" not in row.get("Kernel Name", ""):
            continue
        name = re.sub(r"^void bbpe::<unnamed>::|\(.*$", "", row["Kernel Name"])
        us = float(row["Metric Value"].replace(",", "")) * UNITS_US[row["Metric Unit"]]
        launches.append((name, us))
    if not launches or len(launches) % calls_run:
        raise ValueError(f"{len(launches)} encode kernels for {calls_run} calls: not the same set each call")
    per_call = len(launches) // calls_run
    out = []
    for c in range(calls_run - calls_kept, calls_run):
        kernels = launches[c * per_call : (c + 1) * per_call]
        out.append(
            {
                "kernels": [[n, round(us, 2)] for n, us in kernels],
                "us": round(sum(us for _, us in kernels), 2),
            }
        )
    return {"input_bytes": int(m.group(1)) if m else None, "calls": out}


def profile(
    batch: int,
    length: int,
    source: list[str],
    warm_seeds: int,
    allowed: str = "none",
    warm_book: bool = False,
) -> dict:
    cmd = [
        "ncu", "--csv", "--clock-control", "none", "--cache-control", "none",
        "--metrics", "gpu__time_duration.sum",
        sys.executable, str(HERE / "profile_kernel.py"),
        "--batch", str(batch), "--bytes", str(length), "--calls", "2",
        "--warm-seeds", str(warm_seeds), "--split-book", "--allowed-special", allowed, *source,
    ] + (["--warm-book"] if warm_book else [])  # fmt: skip
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if run.returncode:
        raise RuntimeError(f"ncu exited {run.returncode}: {(run.stdout + run.stderr)[-600:]}")
    warm = re.search(r"warm calls: (\d+)", run.stdout)  # (profile_kernel.py says how many)
    if not warm:
        raise RuntimeError(f"profile_kernel.py did not say its warm calls: {run.stdout[-600:]}")
    got = parse(run.stdout, int(warm.group(1)) + 2, 2)
    for call, label in zip(got["calls"], ("unseen", "again")):
        call["text"] = label
        if got["input_bytes"]:
            call["GBps"] = round(got["input_bytes"] / (call["us"] * 1e-6) / 1e9, 2)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--shapes", default="1024:4096,1024:512,64:512")
    ap.add_argument("--vocab", default="cl100k")
    ap.add_argument("--family", default=None, help="a key of tests/families.py's FILES instead")
    ap.add_argument("--warm-seeds", type=int, default=2)
    ap.add_argument("--warm-book", action="store_true", help="warm on every row of the book's first half")
    ap.add_argument("--allowed-special", choices=["none", "all"], default="none", help="the tables' specials")
    args = ap.parse_args(argv)
    source = ["--family", args.family] if args.family else ["--vocab", args.vocab]
    rows = []
    for shape in args.shapes.split(","):
        batch, length = (int(x) for x in shape.split(":"))
        row = {"vocabulary": args.family or args.vocab, "batch": batch, "bytes": length,
               "allowed_special": args.allowed_special, "warm": "book" if args.warm_book else args.warm_seeds}  # fmt: skip
        row.update(profile(batch, length, source, args.warm_seeds, args.allowed_special, args.warm_book))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        name = "gpu_time_warm_book.json" if args.warm_book else "gpu_time.json"
        write_report(args.out, name, rows, warm_seeds=args.warm_seeds, warm_book=args.warm_book)
    return 0


if __name__ == "__main__":
    sys.exit(main())
