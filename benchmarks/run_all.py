#!/usr/bin/env python3
"""blockbpe_jax benchmarks: the BlockBPE paper's experiments, the CPU peers, scaling, memory.

    python3 benchmarks/run_all.py --out DIR [--only peers,paper,scaling,memory] [--quick]

Writes DIR/results_<parts>.json (rewritten after every part, so a run cut short still leaves
what it measured) and, when matplotlib imports, the PNGs of benchmarks/plot.py. Without
--only, the parts come from $BLOCKBPE_BENCH_ONLY, else all of them. See benchmarks/README.md
for what each number means.

Parts (every id we time is first checked against tiktoken in the same run; each part is the
module part_<name>.py, their grids are grids.py):
  memory   device table bytes per vocabulary, workspace bytes per batch shape
  peers    cl100k, War and Peace excerpts: our encode (exact and bytes; device-resident and
           end to end from list[str]) and every CPU peer that imports, on a batch x bytes grid
  paper    r50k (GPT-2), bytes mode: block size 256/512/1024 x batch 64..1024 x excerpt
           128..4096 bytes; tiktoken and HF tokenizers on the same inputs
  scaling  r50k, bytes and exact: cost vs string length (128 B .. 1 MiB) and vs batch (1..4096)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import plot  # noqa: E402  (matplotlib only when a PNG is drawn)
from grids import (  # noqa: E402
    PAPER_BATCHES,
    PAPER_BLOCKS,
    PAPER_LENGTHS,
    PEER_GRID,
    QUICK,
    SCALE_BATCH_LEN,
    SCALE_BATCHES,
    SCALE_LENGTH_BATCHES,
    SCALE_LENGTHS,
)
from harness import Budget, Ours, log  # noqa: E402

# re-exported: benchmarks/families.py imports these from run_all
from harness import compare_rows, excerpts, measure  # noqa: E402, F401
from part_memory import part_memory  # noqa: E402
from part_paper import part_paper  # noqa: E402
from part_peers import part_peers, summarize_targets  # noqa: E402
from part_scaling import part_scaling  # noqa: E402

PARTS = ("memory", "peers", "paper", "scaling")


# --------------------------------------------------------------------------------------------
def meta(ctx, args):
    jax = ctx["jax"]
    dev = ctx["device"]
    m = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "parts": ctx["parts"],
        "quick": ctx["quick"],
        "device": getattr(dev, "device_kind", str(dev)),
        "platform": dev.platform,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "threads": ctx["threads"],
        "blockbpe_jax": getattr(ctx["bb"], "__version__", "?"),
        "has_cuda_module": bool(getattr(ctx["bb"], "HAS_CUDA_MODULE", False)),
        "data_dir": str(ctx["data"]),
        "env": {
            k: os.environ.get(k)
            for k in ("XLA_FLAGS", "RAYON_NUM_THREADS", "BLOCKBPE_DATA")
            if os.environ.get(k)
        },
    }
    try:
        import jaxlib

        m["jaxlib"] = jaxlib.__version__
    except Exception:  # noqa: BLE001
        pass
    for cmd, key in (
        (["git", "rev-parse", "HEAD"], "git_commit"),
        (["git", "status", "--porcelain", "--untracked-files=no"], "git_dirty"),
    ):
        try:
            r = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                if key == "git_commit":
                    m[key] = r.stdout.strip()
                elif "git_commit" in m:
                    m[key] = bool(r.stdout.strip())
        except Exception:  # noqa: BLE001
            pass
    if dev.platform == "gpu":
        try:
            r = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            m["nvidia_smi"] = r.stdout.strip()
        except Exception:  # noqa: BLE001
            pass
    return m


def device_memory(dev):
    try:
        s = dev.memory_stats() or {}
        return {k: int(s[k]) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit") if k in s}
    except Exception:  # noqa: BLE001
        return {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", str(HERE / "results")))
    ap.add_argument(
        "--only",
        default=os.environ.get("BLOCKBPE_BENCH_ONLY", ""),
        help=f"comma list of parts ({','.join(PARTS)}); default all",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the default device (CPU check)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument(
        "--budget-s",
        type=float,
        default=float(os.environ["BLOCKBPE_BENCH_BUDGET_S"])
        if os.environ.get("BLOCKBPE_BENCH_BUDGET_S")
        else None,
        help="wall-clock budget; cells past it are recorded as skipped (default 420, quick 300)",
    )
    ap.add_argument("--scale-blocks", default="256,1024", help="block sizes of the scaling sweeps")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)

    parts = [p.strip() for p in args.only.split(",") if p.strip()] or list(PARTS)
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"unknown part(s) {bad}; choose from {PARTS}")
    parts = [p for p in PARTS if p in parts]
    budget = Budget(args.budget_s or (300 if args.quick else 420))
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))

    import jax

    import blockbpe_jax as bb
    from blockbpe_jax import testing

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "all" if len(parts) == len(PARTS) else "_".join(parts)
    if args.quick:
        tag = "quick_" + tag
    out_path = out_dir / f"results_{tag}.json"

    data = testing.data_dir()
    raw = (data / "corpus" / "war_and_peace_en.txt").read_bytes()
    device = jax.devices()[0]
    toks, ours_cache = {}, {}

    def tokenizer(name):
        if name not in toks:
            toks[name] = bb.Tokenizer.from_file(data / "vocab" / testing.VOCAB_FILES[name][0])
        return toks[name]

    def ours(name):
        if name not in ours_cache:
            ours_cache[name] = Ours(bb, tokenizer(name), device, name)
        return ours_cache[name]

    res: dict = {}
    ctx = dict(
        bb=bb,
        jax=jax,
        testing=testing,
        data=data,
        raw=raw,
        device=device,
        quick=args.quick,
        threads=args.threads,
        parts=parts,
        tokenizer=tokenizer,
        ours=ours,
        smem_max=int(bb.native.cpu.smem_max_len),
        scale_blocks=tuple(int(x) for x in args.scale_blocks.split(",")),
        peer_grid=PEER_GRID,
        paper_blocks=PAPER_BLOCKS,
        paper_batches=PAPER_BATCHES,
        paper_lengths=PAPER_LENGTHS,
        scale_lengths=SCALE_LENGTHS,
        scale_length_batches=SCALE_LENGTH_BATCHES,
        scale_batches=SCALE_BATCHES,
        scale_batch_len=SCALE_BATCH_LEN,
    )
    if args.quick:
        ctx.update(QUICK)
        ctx["scale_blocks"] = ctx["scale_blocks"][:1]
    res["meta"] = meta(ctx, args)
    res["timings"] = {}

    def save():
        res["meta"]["elapsed_s"] = round(budget.elapsed(), 1)
        try:
            res["targets"] = summarize_targets(res)
        except Exception as e:  # noqa: BLE001
            res["targets"] = {"error": repr(e)[:300]}
        res["meta"]["device_memory"] = device_memory(device)
        tmp = out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str))
        tmp.replace(out_path)

    ctx["save"] = save

    log(
        f"blockbpe_jax benchmarks: parts={parts} device={res['meta']['device']} "
        f"jax={jax.__version__} threads={args.threads} budget={budget.seconds:.0f}s -> {out_path}"
    )
    fns = {
        "memory": lambda: part_memory(ctx, res),
        "peers": lambda: part_peers(ctx, res, budget),
        "paper": lambda: part_paper(ctx, res, budget),
        "scaling": lambda: part_scaling(ctx, res, budget),
    }
    failed = []
    for p in parts:
        t = time.perf_counter()
        log(f"== {p} (t={budget.elapsed():.0f}s)")
        try:
            fns[p]()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res.setdefault("errors", {})[p] = f"{type(e).__name__}: {e}"[:2000]
            failed.append(p)
        res["timings"][p] = round(time.perf_counter() - t, 1)
        save()
    log(f"wrote {out_path} ({budget.elapsed():.0f} s)")
    if not args.no_plots:
        try:
            for png in plot.make_all([out_path], out_dir):
                log(f"wrote {png}")
        except ImportError as e:
            log(f"no plots ({e}); make them later with: python3 benchmarks/plot.py {out_path.name}")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
