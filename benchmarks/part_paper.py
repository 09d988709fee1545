"""The `paper` part of run_all.py: the BlockBPE paper's grid (r50k, bytes mode, block size x
batch x excerpt length), ids checked against tiktoken and across block sizes, with tiktoken
(GPT-2 pattern) and HF tokenizers timed on the same inputs."""

from __future__ import annotations

import numpy as np

import peers as peers_mod
from harness import compare_rows, excerpts, log, measure, nbytes_of, time_ours


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
