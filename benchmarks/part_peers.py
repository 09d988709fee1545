"""The `peers` part of run_all.py: cl100k, War and Peace excerpts on a batch x bytes grid, our
encode (exact and bytes; device-resident and end to end from list[str]) next to every CPU peer
that imports, each checked against tiktoken first; and the summary against the targets."""

from __future__ import annotations

import numpy as np

import peers as peers_mod
import plot
from harness import compare_rows, excerpts, log, measure, measure_fresh, nbytes_of, pack_ljust, time_ours

STREAM = 8  # batches in the end-to-end stream measurement


def part_peers(ctx, res, budget):
    """cl100k: ours (exact + bytes, every block size) and every CPU peer, checked first."""
    bb = ctx["bb"]
    tok = ctx["tokenizer"]("cl100k")
    ours = ctx["ours"]("cl100k")
    bytes_ref = peers_mod.reference_encoding(ctx["data"], "cl100k", ctx["testing"].BYTES_MODE_PATTERN)
    ps = peers_mod.load(ctx["data"], "cl100k", threads=ctx["threads"])
    out = {
        "vocab": "cl100k",
        "threads": ps.threads,
        "notes": ours.notes,
        "peer_versions": {k: p.version for k, p in ps.peers.items()},
        "unavailable": dict(ps.unavailable),
        "rows": [],
    }
    res["peers"] = out
    for name, why in ps.unavailable.items():
        log(f"  peer {name} unavailable: {why}")
    grid = ctx["peer_grid"]
    blocks = ctx["paper_blocks"]
    for ci, (B, L) in enumerate(grid):
        if budget.left() < 10 and ci >= 3:
            out["rows"].append({"batch": B, "bytes": L, "skipped": "time budget"})
            continue
        texts = excerpts(ctx["raw"], B, L, seed=ci)
        total = nbytes_of(texts)
        ref = ps.reference_ids(texts)
        row = {
            "batch": B,
            "bytes": L,
            "total_bytes": total,
            "tokens": sum(map(len, ref)),
            "ours": {},
            "peers": {},
        }
        out["rows"].append(row)
        data_np, lens_np = bb.pack_strings(texts, max_len=L)
        data_dev, lens_dev = ours.put(data_np, lens_np)
        T = L
        # -- ours, device-resident, every block size; then end to end at the best one
        for mode in ("exact", "bytes"):
            mref = (
                ref
                if mode == "exact"
                else [list(r) for r in bytes_ref.encode_ordinary_batch(texts, num_threads=ps.threads)]
            )
            per_bs = {}
            for bs in blocks:
                try:
                    got = ours.run_checked(mode, bs, T, data_dev, lens_dev)
                    if got is None:
                        break
                    ok, detail = compare_rows(*got, mref, T)
                    r = {"exact_vs_tiktoken": ok, "check": detail}
                    r.update(time_ours(ours, mode, bs, T, data_dev, lens_dev, total))
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                per_bs[str(bs)] = r
            if not ours.available(mode):
                row["ours"][mode] = {"unavailable": ours.unavailable[mode]}
                continue
            timed = {k: v for k, v in per_bs.items() if "latency_s" in v}
            entry = {"block_sizes": per_bs}
            if timed:
                best = min(timed, key=lambda k: timed[k]["device_s"])
                bs = int(best)
                entry.update(
                    best_block_size=bs,
                    **{
                        k: timed[best][k]
                        for k in (
                            "exact_vs_tiktoken",
                            "check",
                            "latency_s",
                            "latency_checked_s",
                            "dispatch_floor_s",
                            "device_s",
                            "MBps",
                            "device_MBps",
                            "device_no_cache_MBps",
                        )
                        if k in timed[best]
                    },
                )
                entry.update(e2e(ctx, ours, tok, texts, mode, bs, L, T, total))
            row["ours"][mode] = entry
        # -- peers: check on these inputs, then time
        for name, p in ps.peers.items():
            ok, detail = peers_mod.check(p, texts, ref)
            if not ok:
                row["peers"][name] = {"exact_vs_tiktoken": False, "check": detail}
                continue
            m = measure(lambda: p.encode(texts), target_s=0.5, max_reps=30)
            mf = measure_fresh(p.encode, texts)  # (strs as they come: no UTF-8 form yet)
            row["peers"][name] = {
                "exact_vs_tiktoken": True,
                "s": m["s"],
                "reps": m["reps"],
                "MBps": total / m["s"] / 1e6,
                "fresh_s": mf["s"],
                "fresh_MBps": total / mf["s"] / 1e6,
            }
        timed_peers = {k: v["MBps"] for k, v in row["peers"].items() if "MBps" in v}
        if timed_peers:
            best = max(timed_peers, key=timed_peers.get)
            row["fastest_peer"] = {"name": best, "MBps": timed_peers[best]}
        log_peer_row(row)
        ctx["save"]()


def e2e(ctx, ours, tok, texts, mode, bs, L, T, total):
    """End to end: list[str] on the host -> padded ids on the device (packing + transfer +
    encode): the harness's path (pack_strings, device_put, jitted encode with unchecked
    lengths), the same with NumPy arguments, a stream of batches, and the public
    `Tokenizer.encode_batch` (what each is: benchmarks/README.md)."""
    bb = ctx["bb"]
    f = ours.fn(mode, bs, T)

    def fast():
        d, l = bb.pack_strings(texts, max_len=L)
        ids, counts = f(*ours.put(d, l))[:2]
        ids.block_until_ready()
        return ids, counts

    ids, counts = fast()
    ref_ids, _ = f(*ours.put(*bb.pack_strings(texts, max_len=L)))[:2]
    same = bool(np.array_equal(np.asarray(ids), np.asarray(ref_ids)))
    m = measure(fast, target_s=0.3, max_reps=50)
    pack = measure(lambda: bb.pack_strings(texts, max_len=L), target_s=0.2, max_reps=50)
    d_np, l_np = bb.pack_strings(texts, max_len=L)

    def h2d():
        d, l = ours.put(d_np, l_np)
        d.block_until_ready()
        l.block_until_ready()

    h = measure(h2d, target_s=0.2, max_reps=50)

    # The NumPy arrays handed straight to the jitted call, which moves them itself (what
    # encode_batch does; other transfer variants: benchmarks/host_path.py).
    def e2e_numpy():
        ids = f(*bb.pack_strings(texts, max_len=L))[0]
        ids.block_until_ready()
        return ids

    # A stream: STREAM batches (rotations of this batch: same bytes, other rows) packed and
    # dispatched one after another with no wait in between, one block at the end: the host
    # packs and sends batch i+1 while the GPU encodes batch i, as in an input pipeline.
    shifts = [k * len(texts) // STREAM for k in range(STREAM)]
    rotations = [texts[s:] + texts[:s] for s in shifts]
    ref = np.asarray(ref_ids)

    def stream_equal(outs) -> bool:  # each batch's ids against the rotated reference
        return all(np.array_equal(np.asarray(got), np.roll(ref, -s, axis=0)) for s, got in zip(shifts, outs))

    def e2e_stream():
        outs = [f(*bb.pack_strings(r, max_len=L))[0] for r in rotations]
        ours.jax.block_until_ready(outs)
        return outs

    same = same and bool(np.array_equal(np.asarray(e2e_numpy()), ref))
    same = same and stream_equal(e2e_stream())
    mn = measure(e2e_numpy, target_s=0.3, max_reps=50)
    st = measure(e2e_stream, target_s=0.5, max_reps=30)["s"] / STREAM

    def fast_ljust():
        ids = f(*ours.put(*pack_ljust(texts, L)))[0]
        ids.block_until_ready()
        return ids

    same = same and bool(np.array_equal(np.asarray(fast_ljust()), np.asarray(ref_ids)))
    mj = measure(fast_ljust, target_s=0.3, max_reps=50)
    pj = measure(lambda: pack_ljust(texts, L), target_s=0.2, max_reps=50)
    out = {
        "e2e_s": m["s"],
        "e2e_MBps": total / m["s"] / 1e6,
        "e2e_reps": m["reps"],
        "e2e_ids_equal_device_resident": same,
        "e2e_ljust_s": mj["s"],
        "e2e_ljust_MBps": total / mj["s"] / 1e6,
        "pack_ljust_s": pj["s"],
        "pack_ljust_MBps": total / pj["s"] / 1e6,
        "pack_s": pack["s"],
        "pack_MBps": total / pack["s"] / 1e6,
        "h2d_s": h["s"],
        "h2d_MBps": (d_np.nbytes + l_np.nbytes) / h["s"] / 1e6,
        "e2e_numpy_s": mn["s"],
        "e2e_numpy_MBps": total / mn["s"] / 1e6,
        "e2e_stream_s": st,
        "e2e_stream_MBps": total / st / 1e6,
        "e2e_stream_batches": STREAM,
    }
    try:
        # The public path: Tokenizer.encode_batch (on a GPU: pinned staging + DLPack import,
        # blockbpe_jax/staging.py), one batch and a stream, each checked against the
        # device-resident ids.
        def api(batch=texts):
            return tok.encode_batch(
                batch, max_len=L, max_tokens=T, mode=mode, block_size=bs, device=ours.dev
            ).ids

        def api_one():
            ids = api()
            ids.block_until_ready()
            return ids

        def api_stream():
            outs = [api(r) for r in rotations]
            ours.jax.block_until_ready(outs)
            return outs

        def api_pipelined():  # Tokenizer.encode_stream: batch i+1 staged before batch i is encoded
            outs = list(
                tok.encode_stream(
                    rotations, max_len=L, max_tokens=T, mode=mode, block_size=bs, device=ours.dev
                )
            )
            ours.jax.block_until_ready([o.ids for o in outs])
            return [o.ids for o in outs]

        api_same = bool(np.array_equal(np.asarray(api_one()), ref)) and stream_equal(api_stream())
        api_same = api_same and stream_equal(api_pipelined())
        out["e2e_api_ids_equal_device_resident"] = api_same
        if api_same:
            a = measure(api_one, target_s=0.3, max_reps=50)
            ast = measure(api_stream, target_s=0.5, max_reps=30)["s"] / STREAM
            apl = measure(api_pipelined, target_s=0.5, max_reps=30)["s"] / STREAM
            fresh = measure_fresh(lambda batch: api(batch).block_until_ready(), texts)
            out.update(
                e2e_api_s=a["s"],
                e2e_api_MBps=total / a["s"] / 1e6,
                e2e_api_fresh_s=fresh["s"],
                e2e_api_fresh_MBps=total / fresh["s"] / 1e6,
                e2e_api_stream_s=ast,
                e2e_api_stream_MBps=total / ast / 1e6,
                e2e_api_pipelined_s=apl,
                e2e_api_pipelined_MBps=total / apl / 1e6,
            )
    except Exception as e:  # noqa: BLE001
        out["e2e_api_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def summarize_targets(res) -> dict:
    """The performance targets against this run's numbers (cl100k, War and Peace)."""
    t: dict = {
        "note": "device = GPU time per call (a chain of calls in one executable: after the first call the "
        "misses' cache holds the batch's misses); device_no_cache = the same chain with BLOCKBPE_MISS_CACHE=0; "
        "latency = one jitted call + block_until_ready (dispatch included)"
    }
    rows = {(r["batch"], r["bytes"]): r for r in res.get("peers", {}).get("rows", []) if "ours" in r}

    def ours(cell):
        r = rows.get(cell, {}).get("ours", {})
        for mode in ("exact", "bytes"):
            if "device_MBps" in r.get(mode, {}):
                return mode, r[mode]
        return None, {}

    mode, e = ours((1024, 4096))
    if e:
        t["device_resident_1024x4096"] = {
            "target": ">= 50 GB/s (exact)",
            "mode": mode,
            "GBps_device": e["device_MBps"] / 1e3,
            "GBps_device_no_cache": e.get("device_no_cache_MBps", e["device_MBps"]) / 1e3,
            "GBps_with_dispatch": e["MBps"] / 1e3,
            # (judged without the misses' cache: text it has not seen)
            "met": mode == "exact" and e.get("device_no_cache_MBps", e["device_MBps"]) >= 50e3,
        }
    for cell in ((1024, 4096), (1024, 512)):
        mode, e = ours(cell)
        fp = rows.get(cell, {}).get("fastest_peer")
        if e and fp and "e2e_MBps" in e:
            # One batch: the best of the list[str] -> ids paths we timed (each checked equal);
            # stream: batches back to back (see e2e). "met" asks it of the single batch.
            one = {k[:-5]: e[k] for k in plot.ONE_BATCH_KEYS if e.get(k)}
            best = max(one, key=one.get)
            streams = {k[:-5]: e[k] for k in plot.STREAM_KEYS if e.get(k)}
            stream = max(streams.values()) if streams else None
            t[f"end_to_end_{cell[0]}x{cell[1]}"] = {
                "target": ">= 10x the fastest exact CPU peer"
                + (" (stream: >= 10 GB/s)" if cell == (1024, 4096) else ""),
                "mode": mode,
                "fastest_peer": fp["name"],
                "fastest_peer_MBps": fp["MBps"],
                "one_batch_MBps": one,
                "one_batch_best": best,
                "ratio_one_batch": one[best] / fp["MBps"],
                "stream_MBps": stream,
                "stream_paths_MBps": streams,
                "ratio_stream": stream / fp["MBps"] if stream else None,
                "met": mode == "exact" and one[best] >= 10 * fp["MBps"],
                "met_stream": bool(
                    mode == "exact"
                    and stream
                    and stream >= (10e3 if cell == (1024, 4096) else 10 * fp["MBps"])
                ),
            }
    mode, e = ours((64, 512))
    if e:
        t["latency_64x512"] = {
            "target": "<= 100 us for one call with its sync, default (checked) settings",
            "mode": mode,
            "latency_median_us": e["latency_s"] * 1e6,
            "latency_min_us": min(v.get("latency_min_s", 9) for v in e["block_sizes"].values()) * 1e6,
            "latency_checked_median_us": e.get("latency_checked_s", float("nan")) * 1e6,
            "device_us": e["device_s"] * 1e6,
            # a trivial jitted call on the same arrays with its sync, same run (harness.time_ours)
            "dispatch_floor_us": e.get("dispatch_floor_s", float("nan")) * 1e6,
            "met": mode == "exact" and e.get("latency_checked_s", 1.0) <= 100e-6,
        }
    mem = res.get("memory")
    if mem:
        t["memory"] = {
            "tables_bytes": {k: v.get("table_nbytes") for k, v in mem["vocabs"].items()},
            "workspace_rule": mem["workspace_rule"],
        }
    return t


def log_peer_row(row):
    parts = []
    for mode, e in row["ours"].items():
        if "device_MBps" in e:
            parts.append(
                f"ours[{mode}] dev={e['device_MBps']:.0f} lat={e['latency_s'] * 1e6:.0f}us "
                f"(floor {e.get('dispatch_floor_s', float('nan')) * 1e6:.0f}us) "
                f"e2e={e.get('e2e_MBps', float('nan')):.0f}/{e.get('e2e_ljust_MBps', float('nan')):.0f}MB/s"
                f"{'' if e['exact_vs_tiktoken'] else '(!MISMATCH)'}"
            )
        else:
            parts.append(f"ours[{mode}] {e.get('unavailable', 'error')[:60]}")
    for name, p in row["peers"].items():
        parts.append(f"{name}={p['MBps']:.1f}" if "MBps" in p else f"{name}=(!{p['check'][:40]})")
    log(f"  B={row['batch']:5d} L={row['bytes']:5d} " + " | ".join(parts))
