#!/usr/bin/env python3
"""Where a fresh process's seconds go before the corpus job's first window: importing JAX and
blockbpe_jax, creating the GPU client, the first device allocation, loading a vocabulary,
its tables' upload, and a first small encode; under JAX's default memory settings and with
preallocation off (XLA_PYTHON_CLIENT_PREALLOCATE=false), each in fresh processes.

    python3 benchmarks/startup.py [--vocab cl100k] [--reps 3] [--out DIR]

Writes DIR/startup.json and prints one line per setting (medians over the repetitions).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
t = [time.perf_counter()]
def mark(): t.append(time.perf_counter())
import jax; mark()
import blockbpe_jax as bb; mark()
dev = jax.devices()[0]; mark()
jax.device_put(1, dev).block_until_ready(); mark()
from blockbpe_jax import testing
tok = bb.Tokenizer.from_file(testing.data_dir() / "vocab" / testing.VOCAB_FILES[sys.argv[1]][0]); mark()
tables = tok.tables(device=dev); jax.block_until_ready(tables); mark()
out = tok.encode_batch(["hello world"] * 8, max_len=64, device=dev); out.counts.block_until_ready(); mark()
names = ["import_jax", "import_blockbpe_jax", "jax_devices", "first_device_put", "load_vocab",
         "tables_to_device", "first_encode_batch"]
print(json.dumps({"platform": dev.platform, **{n: b - a for n, a, b in zip(names, t, t[1:])},
                  "total": t[-1] - t[0]}))
"""

SETTINGS = {
    "default": {},
    "no_preallocate": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default="cl100k")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    results = {}
    for name, extra in SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_PYTHON_CLIENT_PREALLOCATE",)}
        env.update(extra)
        runs = []
        for _ in range(a.reps):
            p = subprocess.run(
                [sys.executable, "-c", CHILD, a.vocab], env=env, capture_output=True, text=True
            )
            if p.returncode:
                print(f"{name}: child failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "platform"}
        results[name] = {"env": extra, "runs": runs, "median_s": med}
        print(f"{name:15s} " + " ".join(f"{k}={v:.3f}" for k, v in med.items()))
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "startup.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
