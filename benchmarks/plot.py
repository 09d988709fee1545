#!/usr/bin/env python3
"""PNGs from benchmarks/run_all.py results.

    python3 benchmarks/plot.py RESULTS.json [MORE.json ...] [--out DIR]

Several JSON files (e.g. one per `--only` part) are merged part by part, later files winning.
Writes, for the parts present:
  paper_throughput.png  throughput and merge time vs batch, one column per block size (the
                        paper's figure), plus tiktoken / HF tokenizers on the same inputs
  peers.png             ours (device-resident and end to end) vs every CPU peer, per cell
  scaling.png           time vs string length and vs batch size
  families.png          per tokenizer family: ours on the device vs its reference library
                        (from benchmarks/families.py's families.json)
Also prints a Markdown summary of the peers table (for the README).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(paths) -> dict:
    merged: dict = {}
    for p in paths:
        d = json.loads(Path(p).read_text())
        for k, v in d.items():
            if k == "meta":
                merged.setdefault("meta_runs", []).append(v)
                merged["meta"] = v
            else:
                merged[k] = v
    return merged


def _save(fig, out_dir, name: str) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(out_dir) / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _subtitle(res) -> str:
    m = res.get("meta", {})
    return f"{m.get('device', '?')} · jax {m.get('jax', '?')} · {m.get('date_utc', '?')[:10]}"


def plot_paper(res, out_dir, plt):
    paper = res["paper"]
    rows = [r for r in paper["rows"] if "device_MBps" in r]
    if not rows:
        return None
    blocks = sorted({r["block_size"] for r in rows})
    lengths = sorted({r["bytes"] for r in rows})
    cmap = plt.get_cmap("viridis")
    colour = {L: cmap(i / max(1, len(lengths) - 1)) for i, L in enumerate(lengths)}
    base = paper.get("baselines", [])
    peer_names = [n for n in ("tiktoken", "hf_tokenizers") if any(n in b and "MBps" in b[n] for b in base)]
    ncol = len(blocks) + (1 if peer_names else 0)
    fig, axes = plt.subplots(2, ncol, figsize=(4.2 * ncol, 7.5), squeeze=False, sharex=True)
    ymax = max(r["device_MBps"] for r in rows) * 1.5
    ymin = (
        min(
            [r["device_MBps"] for r in rows]
            + [b[n]["MBps"] for b in base for n in peer_names if n in b and "MBps" in b[n]]
        )
        / 1.5
    )
    for j, bs in enumerate(blocks):
        ax, ax2 = axes[0, j], axes[1, j]
        for L in lengths:
            pts = sorted(
                (r["batch"], r["device_MBps"], r["device_s"])
                for r in rows
                if r["block_size"] == bs and r["bytes"] == L
            )
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1] for p in pts], "o-", color=colour[L], label=f"{L} B", ms=3)
            ax2.plot(xs, [p[2] * 1e6 for p in pts], "o-", color=colour[L], label=f"{L} B", ms=3)
        ax.set_title(f"block size {bs}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        ax.grid(True, which="both", alpha=0.3)
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        ax2.grid(True, which="both", alpha=0.3)
        ax2.set_xlabel("batch (strings)")
        if j == 0:
            ax.set_ylabel("throughput, MB/s of input (device-resident)")
            ax2.set_ylabel("merge time per call, µs (GPU)")
            ax.legend(title="excerpt", fontsize=7)
    if peer_names:
        ax, ax2 = axes[0, -1], axes[1, -1]
        for ax_, name in ((ax, peer_names[0]), (ax2, peer_names[-1] if len(peer_names) > 1 else None)):
            if name is None:
                ax_.axis("off")
                continue
            for L in lengths:
                pts = sorted(
                    (b["batch"], b[name]["MBps"])
                    for b in base
                    if b["bytes"] == L and name in b and "MBps" in b[name]
                )
                if pts:
                    ax_.plot(
                        [p[0] for p in pts], [p[1] for p in pts], "s--", color=colour[L], ms=3, label=f"{L} B"
                    )
            ax_.set_title(f"{name} (CPU, {paper.get('threads', '?')} threads)")
            ax_.set_xscale("log", base=2)
            ax_.set_yscale("log")
            ax_.set_ylim(ymin, ymax)
            ax_.grid(True, which="both", alpha=0.3)
            ax_.set_ylabel("MB/s of input")
            ax_.set_xlabel("batch (strings)")
    fig.suptitle(
        f"BlockBPE paper experiment: GPT-2 (r50k) vocabulary, bytes mode, War and Peace "
        f"excerpts\n{_subtitle(res)}",
        fontsize=11,
    )
    return _save(fig, out_dir, "paper_throughput.png")


# End to end, one batch and a stream: the best of the paths run_all timed (each checked
# equal to the device-resident ids; benchmarks/README.md says what each is).
ONE_BATCH_KEYS = ("e2e_MBps", "e2e_numpy_MBps", "e2e_api_MBps")
STREAM_KEYS = ("e2e_stream_MBps", "e2e_api_stream_MBps", "e2e_api_pipelined_MBps")


def best_of(e: dict, keys) -> float | None:
    vals = [e[k] for k in keys if e.get(k)]
    return max(vals) if vals else None


def _peer_bars(row):
    """(label, MB/s, kind) for one cell; kind picks the colour."""
    bars = []
    for mode in ("exact", "bytes"):
        e = row.get("ours", {}).get(mode, {})
        if "device_MBps" in e:
            bars.append((f"ours {mode}\ndevice", e["device_MBps"], f"ours_{mode}_dev"))
        if best_of(e, ONE_BATCH_KEYS):
            bars.append((f"ours {mode}\nend to end", best_of(e, ONE_BATCH_KEYS), f"ours_{mode}_e2e"))
        if mode == "exact" and best_of(e, STREAM_KEYS):
            bars.append((f"ours {mode}\ne2e, stream", best_of(e, STREAM_KEYS), f"ours_{mode}_e2e"))
    for name, p in row.get("peers", {}).items():
        if "MBps" in p:
            bars.append((name, p["MBps"], "peer"))
    return bars


def plot_peers(res, out_dir, plt):
    rows = [r for r in res["peers"]["rows"] if "peers" in r]
    if not rows:
        return None
    colours = {
        "ours_exact_dev": "#1b5e20",
        "ours_exact_e2e": "#66bb6a",
        "ours_bytes_dev": "#0d47a1",
        "ours_bytes_e2e": "#64b5f6",
        "peer": "#9e9e9e",
    }
    n = len(rows)
    ncol = min(3, n)
    nrow = (n + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.2 * nrow), squeeze=False)
    for k, row in enumerate(rows):
        ax = axes[k // ncol, k % ncol]
        bars = _peer_bars(row)
        xs = range(len(bars))
        ax.bar(xs, [b[1] for b in bars], color=[colours[b[2]] for b in bars])
        for x, b in zip(xs, bars):
            ax.text(
                x, b[1], f"{b[1]:.0f}" if b[1] >= 10 else f"{b[1]:.1f}", ha="center", va="bottom", fontsize=7
            )
        ax.set_xticks(list(xs))
        ax.set_xticklabels([b[0] for b in bars], rotation=60, ha="right", fontsize=7)
        fp = row.get("fastest_peer")
        if fp:
            ax.axhline(10 * fp["MBps"], color="crimson", ls="--", lw=1)
            ax.text(
                len(bars) - 0.5,
                10 * fp["MBps"],
                "end-to-end target: 10x fastest peer",
                color="crimson",
                fontsize=7,
                ha="right",
                va="bottom",
            )
        ax.set_yscale("log")
        ax.set_title(f"{row['batch']} x {row['bytes']} B")
        ax.set_ylabel("MB/s of input")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    for k in range(n, nrow * ncol):
        axes[k // ncol, k % ncol].axis("off")
    thr = res["peers"].get("threads", "?")
    fig.suptitle(
        f"cl100k, War and Peace excerpts: blockbpe_jax vs CPU tokenizers ({thr} threads); "
        f"all ids checked equal to tiktoken's\n{_subtitle(res)}",
        fontsize=11,
    )
    return _save(fig, out_dir, "peers.png")


def plot_families(res, out_dir, plt):
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    ys = range(len(rows))
    ours = [r["device_MBps"] for r in rows]
    ref = [r["reference_MBps"] for r in rows]
    ax.barh([y - 0.2 for y in ys], ours, height=0.4, color="#1b5e20", label="ours, device")
    ax.barh([y + 0.2 for y in ys], ref, height=0.4, color="#9e9e9e", label="reference (CPU)")
    for y, o, r in zip(ys, ours, ref):
        ax.text(o, y - 0.2, f" {o / 1000:.1f} GB/s", va="center", fontsize=7)
        ax.text(r, y + 0.2, f" {r:.0f} MB/s", va="center", fontsize=7)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{r['family']} ({r['reference']})" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("MB/s of input")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    every = all(r.get("equal_to_reference") for r in rows)
    row0 = rows[0]
    ax.set_title(
        f"tokenizer families, {row0['batch']} x {row0['bytes']} B {res.get('corpus', '')}, "
        f"{res.get('device', '?')}\nids {'all equal' if every else 'NOT all equal'} to the reference",
        fontsize=9,
    )
    return _save(fig, out_dir, "families.png")


def plot_scaling(res, out_dir, plt):
    sc = res["scaling"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    styles = {"bytes": "-", "exact": "--"}
    markers = ["o", "s", "^", "D"]
    cmap = plt.get_cmap("tab10")

    def series(pts, xkey, ax, group_key=None):
        keys = sorted(
            {
                k
                for p in pts
                for k, v in p.items()
                if isinstance(v, dict) and k != "tiktoken" and "device_s" in v
            }
        )
        groups = sorted({p[group_key] for p in pts}) if group_key else [None]
        for gi, g in enumerate(groups):
            gp = [p for p in pts if group_key is None or p[group_key] == g]
            mk = markers[gi % len(markers)]
            for ki, k in enumerate(keys):
                xy = sorted((p[xkey], p[k]["device_s"]) for p in gp if "device_s" in p.get(k, {}))
                if xy:
                    mode, bs = k.rsplit("_", 1)
                    lab = f"{mode}, block {bs}" + (f", batch {g}" if group_key else "")
                    ax.plot(
                        [a for a, _ in xy],
                        [b * 1e6 for _, b in xy],
                        styles.get(mode, "-"),
                        color=cmap(ki),
                        marker=mk,
                        ms=3,
                        label=lab,
                    )
            xy = sorted((p[xkey], p["tiktoken"]["s"]) for p in gp if "tiktoken" in p)
            if xy:
                ax.plot(
                    [a for a, _ in xy],
                    [b * 1e6 for _, b in xy],
                    ":",
                    color="k",
                    alpha=0.6,
                    marker=mk,
                    ms=3,
                    label="tiktoken (CPU)" + (f", batch {g}" if group_key else ""),
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("time per call, µs")
        ax.legend(fontsize=6)

    if sc.get("length"):
        series(sc["length"], "bytes", axes[0], "batch")
        axes[0].set_xlabel("string length, bytes")
        axes[0].set_title("cost vs string length")
    if sc.get("batch"):
        series(sc["batch"], "batch", axes[1])
        L = sc["batch"][0]["bytes"]
        axes[1].set_xlabel(f"batch (strings of {L} B)")
        axes[1].set_title("cost vs batch size")
    fig.suptitle(
        f"Scaling, {sc.get('vocab', '?')} vocabulary, device time per call\n{_subtitle(res)}", fontsize=11
    )
    return _save(fig, out_dir, "scaling.png")


def peers_markdown(res) -> str:
    if "peers" not in res:
        return ""
    names = []
    for r in res["peers"]["rows"]:
        for n in r.get("peers", {}):
            if n not in names:
                names.append(n)
    head = [
        "batch x bytes",
        "ours exact dev",
        "ours exact e2e",
        "ours exact e2e stream",
        "ours bytes dev",
        "ours bytes e2e",
    ] + names
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["peers"]["rows"]:
        if "peers" not in r:
            continue
        cells = [f"{r['batch']} x {r['bytes']}"]
        for mode in ("exact", "bytes"):
            e = r["ours"].get(mode, {})
            vals = [e.get("device_MBps"), best_of(e, ONE_BATCH_KEYS)]
            vals += [best_of(e, STREAM_KEYS)] if mode == "exact" else []
            cells += [f"{v:.0f}" if v else "n/a" for v in vals]
        for n in names:
            p = r["peers"].get(n, {})
            cells.append(f"{p['MBps']:.1f}" if "MBps" in p else ("differs" if p else "n/a"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_markdown(res) -> str:
    t = res.get("targets") or {}
    lines = []
    d = t.get("device_resident_1024x4096")
    if d:
        lines.append(
            f"- device-resident 1024 x 4096 ({d['mode']}): {d['GBps_device']:.2f} GB/s GPU time, "
            f"{d['GBps_with_dispatch']:.2f} GB/s with dispatch; target {d['target']}: "
            f"{'met' if d['met'] else 'missed'}"
        )
    for k in ("end_to_end_1024x4096", "end_to_end_1024x512"):
        e = t.get(k)
        if e:
            best = e["one_batch_best"]
            stream = (
                f"; a stream of batches {e['stream_MBps']:.0f} MB/s = {e['ratio_stream']:.2f}x "
                f"({'met' if e['met_stream'] else 'missed'})"
                if e.get("stream_MBps")
                else ""
            )
            lines.append(
                f"- {k.replace('_', ' ')} ({e['mode']}): one batch {e['one_batch_MBps'][best]:.0f} "
                f"MB/s ({best}) = {e['ratio_one_batch']:.2f}x {e['fastest_peer']} "
                f"({e['fastest_peer_MBps']:.0f} MB/s), target {e['target']}: "
                f"{'met' if e['met'] else 'missed'}{stream}"
            )
    lat = t.get("latency_64x512")
    if lat:
        lines.append(
            f"- latency 64 x 512 ({lat['mode']}): median {lat['latency_median_us']:.0f} us "
            f"unchecked (min {lat['latency_min_us']:.0f} us), "
            f"{lat.get('latency_checked_median_us', float('nan')):.0f} us checked, "
            f"GPU time {lat['device_us']:.0f} us; target "
            f"{lat['target']}: {'met' if lat['met'] else 'missed'}"
        )
    return "\n".join(lines)


def make_all(paths, out_dir) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = load(paths)
    made = []
    for key, fn in (("paper", plot_paper), ("peers", plot_peers), ("scaling", plot_scaling)):
        if key in res:
            p = fn(res, out_dir, plt)
            if p:
                made.append(p)
    if res.get("rows") and "family" in res["rows"][0]:
        made.append(plot_families(res, out_dir, plt))
    return made


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", default=None, help="directory for the PNGs (default: the first JSON's)")
    a = ap.parse_args(argv)
    out = Path(a.out or Path(a.results[0]).parent)
    out.mkdir(parents=True, exist_ok=True)
    for p in make_all(a.results, out):
        print("wrote", p)
    res = load(a.results)
    for md in (targets_markdown(res), peers_markdown(res)):
        if md:
            print(md + "\n")


if __name__ == "__main__":
    sys.exit(main())
