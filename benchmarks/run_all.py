#!/usr/bin/env python3
"""blockbpe_jax benchmarks: the BlockBPE paper's experiments, the CPU peers, scaling, memory.

    python3 benchmarks/run_all.py --out DIR [--only peers,paper,scaling,memory] [--quick]

Writes DIR/results_<parts>.json (rewritten after every part, so a run cut short still leaves
what it measured) and, when matplotlib imports, the PNGs of benchmarks/plot.py. Without
--only, the parts come from $BLOCKBPE_BENCH_ONLY, else all of them. See benchmarks/README.md
for what each number means.

Parts (every id we time is first checked against tiktoken in the same run):
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

import numpy as np  # noqa: E402

import peers as peers_mod  # noqa: E402
import plot  # noqa: E402  (matplotlib only when a PNG is drawn)
from harness import (
    Budget,
    Ours,
    compare_rows,
    excerpts,
    log,
    measure,
    nbytes_of,  # noqa: E402
    time_ours,
)
from part_peers import part_peers, summarize_targets  # noqa: E402

PARTS = ("memory", "peers", "paper", "scaling")

# Grids. The three issue-4 target cells come first in PEER_GRID.
PEER_GRID = [(64, 512), (1024, 512), (1024, 4096), (256, 512), (1024, 128), (1024, 2048), (64, 4096)]
PAPER_BLOCKS = (256, 512, 1024)
PAPER_BATCHES = (64, 128, 256, 512, 1024)
PAPER_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
SCALE_LENGTHS = (128, 512, 2048, 8192, 16384, 65536, 262144, 1 << 20)
SCALE_LENGTH_BATCHES = (1, 64)
SCALE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SCALE_BATCH_LEN = 512
SCALE_MAX_TOTAL_BYTES = 16 << 20  # cap on batch x length for one call in the scaling sweeps
SLOW_CALL_S = 2.0  # a series stops growing past a call this slow
BYTES_CHECK_BYTES = 2 << 20  # tiktoken with one piece per string is superlinear: check
# only the first rows of long bytes-mode strings (>= 1 row)

QUICK = dict(
    peer_grid=[(8, 128), (16, 512)],
    paper_blocks=(256, 1024),
    paper_batches=(4, 8),
    paper_lengths=(128, 256),
    scale_lengths=(128, 1024, 9000),
    scale_length_batches=(1, 2),
    scale_batches=(1, 4, 16),
    scale_batch_len=128,
)


# --------------------------------------------------------------------------------------------
# parts
def part_memory(ctx, res):
    bb, testing = ctx["bb"], ctx["testing"]
    smem_max = int(bb.native.cpu.smem_max_len)
    modes = {"exact": 2, "bytes": 0}  # the workspace depends only on whether mode is bytes
    names = [
        "pair_table",
        "byte_ids",
        "piece_table",
        "token_offsets",
        "token_data",
        "special_offsets",
        "special_data",
        "special_ids",
    ]
    vocabs = {}
    for name, (rel, _) in testing.VOCAB_FILES.items():
        if ctx["quick"] and name not in ("r50k", "cl100k"):
            continue
        t = time.perf_counter()
        try:
            tok = ctx["tokenizer"](name)
        except Exception as e:  # noqa: BLE001
            vocabs[name] = {"error": repr(e)[:300]}
            continue
        load_s = time.perf_counter() - t
        tabs = tok.host_tables()
        v = {
            "file": rel,
            "n_vocab": int(tok.vocab.n_vocab),
            "pattern": tok.vocab.pattern_name,
            "table_nbytes": int(tok.table_nbytes()),
            "table_nbytes_all_specials": int(tok.table_nbytes("all")),
            "tables": {(names[i] if i < len(names) else f"t{i}"): int(a.nbytes) for i, a in enumerate(tabs)},
            "load_s": load_s,
        }
        vocabs[name] = v
        log(
            f"  {name:7s} n_vocab={v['n_vocab']:7d} tables={v['table_nbytes'] / 2**20:7.2f} MiB "
            f"(load {load_s:.1f} s)"
        )

    def workspace(batch, length, mode="exact"):
        size = bb.native.workspace_bytes(batch, length, modes[mode], 0)  # the kernel's own rule (byte-level)
        return 0 if size <= 1 else size

    shapes = sorted(
        {
            *PEER_GRID,
            *[(b, l) for b in PAPER_BATCHES for l in PAPER_LENGTHS],
            *[(b, l) for b in SCALE_LENGTH_BATCHES for l in SCALE_LENGTHS],
            (4096, 512),
            (1024, 16384),
            (1024, 65536),
        }
    )
    ws = [
        {
            "batch": b,
            "bytes": l,
            "workspace_bytes_exact": workspace(b, l, "exact"),
            "workspace_bytes_bytes_mode": workspace(b, l, "bytes"),
            "ids_bytes": b * l * 4 + b * 4,
            "input_bytes": b * l + b * 4,
        }
        for b, l in shapes
    ]
    # XLA's accounting of whole calls (cl100k, T = L): arguments (input + tables), outputs
    # (ids, counts, and the workspace, which is an output), temporaries.
    measured = []
    try:
        ours = ctx["ours"]("cl100k")
        mshapes = (
            [(8, 128), (16, 9000)]
            if ctx["quick"]
            else [
                (64, 512),
                (1024, 512),
                (1024, 4096),
                (4096, 512),
                (1024, 16384),
                (64, 1 << 20),
                (1, 1 << 20),
            ]
        )
        for mode in ("exact", "bytes"):
            for b, l in mshapes:
                try:
                    ma = ours.memory_analysis(mode, 256, b, l, l)
                except Exception as e:  # noqa: BLE001
                    ma = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                measured.append(
                    {
                        "mode": mode,
                        "batch": b,
                        "bytes": l,
                        "max_tokens": l,
                        "workspace_bytes_rule": workspace(b, l, mode),
                        **ma,
                    }
                )
    except Exception as e:  # noqa: BLE001
        measured.append({"error": f"{type(e).__name__}: {e}"[:300]})
    res["memory"] = {
        "vocabs": vocabs,
        "xla_memory_analysis_cl100k": measured,
        "smem_max_len": smem_max,
        "workspace_rule": (
            f"exact mode, L <= {smem_max}: B * ceil16(L) * 12 bytes (the merge-pass "
            f"buffers; the rest is in shared memory); bytes mode, L <= {smem_max}: 0; "
            f"L > {smem_max}: B * ceil16(L) * 23 bytes; allocated by XLA as a "
            "discarded output (ffi/binding/encode_params.h)"
        ),
        "ids_rule": "ids int32[B, T] + counts int32[B]; the benchmark uses T = L (never truncates)",
        "shapes": ws,
    }


def part_paper(ctx, res, budget):
    """The BlockBPE paper: GPT-2 vocabulary, bytes mode, block sizes x batch x excerpt length."""
    ours = ctx["ours"]("r50k")
    bytes_ref = peers_mod.reference_encoding(ctx["data"], "r50k", ctx["testing"].BYTES_MODE_PATTERN)
    ps = peers_mod.load(ctx["data"], "r50k", threads=ctx["threads"], only=("hf_tokenizers",))
    out = {
        "vocab": "r50k",
        "mode": "bytes",
        "notes": ours.notes,
        "threads": ps.threads,
        "unavailable": dict(ps.unavailable),
        "rows": [],
        "baselines": [],
    }
    res["paper"] = out
    bb = ctx["bb"]
    for B in ctx["paper_batches"]:
        for L in ctx["paper_lengths"]:
            if budget.left() < 5:
                out["rows"].append({"batch": B, "bytes": L, "skipped": "time budget"})
                continue
            texts = excerpts(ctx["raw"], B, L, seed=B * 7919 + L)
            total = nbytes_of(texts)
            mref = [list(r) for r in bytes_ref.encode_ordinary_batch(texts, num_threads=ps.threads)]
            data_dev, lens_dev = ours.put(*bb.pack_strings(texts, max_len=L))
            first_ids = None
            for bs in ctx["paper_blocks"]:
                r = {
                    "block_size": bs,
                    "batch": B,
                    "bytes": L,
                    "total_bytes": total,
                    "tokens": sum(map(len, mref)),
                }
                try:
                    ids, counts = ours.run_checked("bytes", bs, L, data_dev, lens_dev)
                    ok, detail = compare_rows(ids, counts, mref, L)
                    if first_ids is None:
                        first_ids = ids
                    r.update(
                        exact_vs_tiktoken=ok,
                        check=detail,
                        same_as_first_block_size=bool(np.array_equal(ids, first_ids)),
                    )
                    r.update(time_ours(ours, "bytes", bs, L, data_dev, lens_dev, total, target_s=0.2))
                    r["merge_s"] = r["device_s"]
                except Exception as e:  # noqa: BLE001
                    r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                out["rows"].append(r)
            # the paper's baselines: tiktoken (GPT-2 pattern) and HF tokenizers, same inputs
            base = {"batch": B, "bytes": L, "total_bytes": total}
            eref = ps.reference_ids(texts)
            for name, p in ps.peers.items():
                ok, detail = (True, "reference") if name == "tiktoken" else peers_mod.check(p, texts, eref)
                if not ok:
                    base[name] = {"exact_vs_tiktoken": False, "check": detail}
                    continue
                m = measure(lambda: p.encode(texts), target_s=0.2, max_reps=20)
                base[name] = {"s": m["s"], "MBps": total / m["s"] / 1e6, "reps": m["reps"]}
            out["baselines"].append(base)
            cells = [r for r in out["rows"][-len(ctx["paper_blocks"]) :] if "device_MBps" in r]
            log(
                f"  B={B:5d} L={L:5d} "
                + " ".join(
                    f"bs{r['block_size']}={r['device_MBps']:.0f}MB/s({r['device_s'] * 1e6:.0f}us)"
                    f"{'' if r['exact_vs_tiktoken'] else '(!)'}"
                    for r in cells
                )
                + " | "
                + " ".join(
                    f"{k}={v['MBps']:.1f}" for k, v in base.items() if isinstance(v, dict) and "MBps" in v
                )
            )
            ctx["save"]()


def part_scaling(ctx, res, budget):
    """r50k, bytes and exact modes: time vs string length, and vs batch size."""
    ours = ctx["ours"]("r50k")
    bb = ctx["bb"]
    refs = {
        "exact": peers_mod.reference_encoding(ctx["data"], "r50k"),
        "bytes": peers_mod.reference_encoding(ctx["data"], "r50k", ctx["testing"].BYTES_MODE_PATTERN),
    }
    out = {
        "vocab": "r50k",
        "notes": ours.notes,
        "length": [],
        "batch": [],
        "block_sizes": list(ctx["scale_blocks"]),
    }
    res["scaling"] = out
    threads = ctx["threads"]

    def point(kind, B, L, seed):
        texts = excerpts(ctx["raw"], B, L, seed=seed)
        total = nbytes_of(texts)
        data_dev, lens_dev = ours.put(*bb.pack_strings(texts, max_len=L))
        pt = {
            "batch": B,
            "bytes": L,
            "total_bytes": total,
            "workspace": "global" if L > ctx["smem_max"] else "shared",
        }
        eref = refs["exact"].encode_ordinary_batch(texts, num_threads=threads)
        m = measure(
            lambda: refs["exact"].encode_ordinary_batch(texts, num_threads=threads), target_s=0.2, max_reps=20
        )
        pt["tiktoken"] = {"s": m["s"], "MBps": total / m["s"] / 1e6}
        refs_cache: dict = {}
        for mode in ("bytes", "exact"):
            for bs in ctx["scale_blocks"]:
                key = (kind, mode, bs, B if kind == "length" else None)
                if key in stopped:
                    pt[f"{mode}_{bs}"] = {"skipped": stopped[key]}
                    continue
                if budget.left() < 5:
                    pt[f"{mode}_{bs}"] = {"skipped": "time budget"}
                    continue
                try:
                    got = ours.run_checked(mode, bs, L, data_dev, lens_dev)
                    if got is None:
                        pt[f"{mode}_{bs}"] = {"unavailable": ours.unavailable[mode]}
                        continue
                    n = B if mode == "exact" else max(1, min(B, BYTES_CHECK_BYTES // L))
                    if mode not in refs_cache:
                        refs_cache[mode] = (
                            eref
                            if mode == "exact"
                            else refs["bytes"].encode_ordinary_batch(texts[:n], num_threads=threads)
                        )
                    ids, counts = got
                    ok, detail = compare_rows(ids[:n], counts[:n], [list(r) for r in refs_cache[mode]], L)
                    r = {
                        "exact_vs_tiktoken": ok,
                        "check": detail + (f" (first {n} of {B} rows)" if n < B else ""),
                    }
                    r.update(time_ours(ours, mode, bs, L, data_dev, lens_dev, total, target_s=0.2))
                    # the next point of a series is 4x longer (or 2x larger): stop when it
                    # would take more than SLOW_CALL_S even if it grew only linearly
                    growth = 4 if kind == "length" else 2
                    if r["latency_s"] * growth > SLOW_CALL_S:
                        stopped[key] = (
                            f"skipped: the previous point took {r['latency_s']:.2f} s "
                            f"(> {SLOW_CALL_S} s / {growth} predicted)"
                        )
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                    stopped[key] = "an earlier point failed"
                pt[f"{mode}_{bs}"] = r
        return pt

    stopped: dict = {}
    for B in ctx["scale_length_batches"]:
        for L in ctx["scale_lengths"]:
            if B * L > SCALE_MAX_TOTAL_BYTES or L >= len(ctx["raw"]):
                continue
            pt = point("length", B, L, seed=L + B)
            out["length"].append(pt)
            log_scale(pt)
            ctx["save"]()
    for B in ctx["scale_batches"]:
        L = ctx["scale_batch_len"]
        pt = point("batch", B, L, seed=B)
        out["batch"].append(pt)
        log_scale(pt)
        ctx["save"]()


def log_scale(pt):
    cells = []
    for k, v in pt.items():
        if isinstance(v, dict) and k != "tiktoken":
            if "device_s" in v:
                cells.append(f"{k}={v['device_s'] * 1e6:.0f}us{'' if v['exact_vs_tiktoken'] else '(!)'}")
            else:
                cells.append(f"{k}=({next(iter(v.values()))!s:.40})")
    log(
        f"  B={pt['batch']:5d} L={pt['bytes']:8d} tiktoken={pt['tiktoken']['s'] * 1e6:.0f}us "
        + " ".join(cells)
    )


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
