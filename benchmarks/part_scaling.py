"""The `scaling` part of run_all.py: r50k, bytes and exact modes, cost vs string length and vs
batch size, each point checked against tiktoken and timed next to it; a series stops when its
next point would be too slow."""

from __future__ import annotations

import peers as peers_mod
from grids import BYTES_CHECK_BYTES, SCALE_MAX_TOTAL_BYTES, SLOW_CALL_S
from harness import compare_rows, excerpts, log, measure, nbytes_of, time_ours


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
