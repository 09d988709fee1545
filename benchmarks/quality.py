#!/usr/bin/env python3
"""The BlockBPE paper's quality table, reproduced with our two modes.

    python3 benchmarks/quality.py [--out benchmarks/results] [--device cpu|gpu] [--quick]

For every (dataset, vocabulary, mode) it encodes every item with blockbpe_jax and with tiktoken
using the vocabulary's real pattern (`encode_ordinary`: the reference), and reports

    sim       = mean over items of (1 - Levenshtein(ids_ref, ids_ours) / len(item in UTF-8 bytes))
    identical = fraction of items whose id sequences are equal

Datasets (shared data dir, corpus/):
  gsm8k       gsm8k_test.jsonl, item = question + "\\n" + answer, all 1,319 problems
  gsm8k_400   the first 400 of them (the team's earlier check), a slice of the same run
  war_peace   war_and_peace_en.txt, items = paragraphs (split on blank lines), non-empty
  wikitext2   wikitext2_test.txt.gz, items = lines with non-whitespace content (verbatim)
Vocabularies: r50k (GPT-2, the paper's War and Peace vocabulary), cl100k, llama3.
Modes: bytes (the paper's algorithm: no pre-tokenizer) and exact (must be 1.000 / 100%).

Writes OUT/quality.json (metrics, the most frequent differing regions, environment, command)
and OUT/quality.md (a README-ready table). Exits with status 1 when exact mode differs from
tiktoken on any item (the failing items are printed and recorded in the JSON).

Levenshtein distances are exact: common prefix and suffix are trimmed, then a bit-parallel
row DP (one Python big integer holds a whole DP column) runs over the shorter remainder
(quality_distance.py). The bytes-mode difference regions and quality.md are quality_report.py's.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# appended, not prepended: tests/project/test_quality.py loads this file by path, and benchmarks/ must
# not shadow the tests' own modules (tests/families.py) there
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))

from quality_distance import levenshtein  # noqa: E402

# re-exported: tests/project/test_quality.py cross-checks levenshtein against it
from quality_distance import levenshtein_rows  # noqa: E402, F401
from quality_report import DATASET_LABELS, diff_regions, markdown, region_class, show  # noqa: E402

VOCABS = ("r50k", "cl100k", "llama3")
MODES = ("bytes", "exact")
DATASETS = ("gsm8k", "war_peace", "wikitext2")
SUBSETS = {"gsm8k_400": ("gsm8k", 400)}  # name -> (dataset, first n items)


# --------------------------------------------------------------------------------------------
# datasets
def load_items(name: str, root: Path) -> list[str]:
    from blockbpe_jax import testing

    corpus = root / "corpus"
    if name == "gsm8k":
        rows = [
            json.loads(line)
            for line in (corpus / "gsm8k_test.jsonl").read_text("utf-8").splitlines()
            if line.strip()
        ]
        return [r["question"] + "\n" + r["answer"] for r in rows]
    if name == "war_peace":
        raw = testing.read_corpus(corpus / "war_and_peace_en.txt").decode("utf-8")
        # A blank line is a line with nothing but spaces/tabs; runs of them separate paragraphs.
        return [p for p in re.split(r"\n(?:[ \t]*\n)+", raw) if p.strip()]
    if name == "wikitext2":
        raw = testing.read_corpus(corpus / "wikitext2_test.txt.gz").decode("utf-8")
        return [line for line in raw.split("\n") if line.strip()]
    raise ValueError(name)


# --------------------------------------------------------------------------------------------
# encoding
def encode_ours(tok, items: list[str], mode: str, device, batch: int) -> list[np.ndarray]:
    """Encodes in batches of similar length (sorted), returns per-item id arrays in order."""
    lens = np.array([len(s.encode("utf-8")) for s in items])
    order = np.argsort(lens, kind="stable")
    out: list[np.ndarray | None] = [None] * len(items)
    for start in range(0, len(items), batch):
        idx = order[start : start + batch]
        ids, counts = tok.encode_batch([items[k] for k in idx], mode=mode, device=device)
        ids, counts = np.asarray(ids), np.asarray(counts)
        for r, k in enumerate(idx):
            out[k] = ids[r, : counts[r]].astype(np.int64)
    return out


# --------------------------------------------------------------------------------------------
def environment(args, device) -> dict:
    import jax
    import tiktoken

    import blockbpe_jax as bb

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "machine": {
            "host": platform.node(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "device": str(device),
        },
        "versions": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "numpy": np.__version__,
            "tiktoken": tiktoken.__version__,
            "blockbpe_jax": getattr(bb, "__version__", None),
        },
    }
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            env["machine"]["cpu"] = names[0]
    except OSError:
        pass
    try:
        env["versions"]["jaxlib"] = __import__("jaxlib").__version__
    except Exception:
        pass
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, text=True, capture_output=True, check=True
        ).stdout.strip()
    except Exception:
        pass
    return env


def summarize(
    items_bytes: list[int], dist: np.ndarray, ref_tokens: np.ndarray, our_tokens: np.ndarray
) -> dict:
    nbytes = np.asarray(items_bytes, dtype=np.float64)
    same = dist == 0
    return {
        "items": int(len(dist)),
        "bytes": int(nbytes.sum()),
        "ref_tokens": int(ref_tokens.sum()),
        "our_tokens": int(our_tokens.sum()),
        "sim": float(np.mean(1.0 - dist / nbytes)),
        "sim_pooled": float(1.0 - dist.sum() / nbytes.sum()),
        "identical": int(same.sum()),
        "identical_frac": float(same.mean()),
        "levenshtein_total": int(dist.sum()),
    }


def run(args) -> int:
    import jax

    import blockbpe_jax as bb
    from blockbpe_jax import testing

    t_start = time.perf_counter()
    root = testing.data_dir()
    device = jax.devices(args.device)[0]
    vocabs = args.vocabs.split(",")
    datasets = args.datasets.split(",")
    items = {d: load_items(d, root) for d in datasets}
    if args.quick:
        items = {d: v[: args.quick] for d, v in items.items()}
    items_bytes = {d: [len(s.encode("utf-8")) for s in v] for d, v in items.items()}
    print("items: " + ", ".join(f"{d} {len(v)}" for d, v in items.items()), flush=True)

    cells, failures, regions, timing = [], [], {}, {}
    for name in vocabs:
        t = time.perf_counter()
        tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[name][0])
        enc = testing.tiktoken_oracle(name, tok, tok.vocab.pattern)
        tb = tok.vocab.token_bytes
        timing[f"load_{name}"] = time.perf_counter() - t
        for d in datasets:
            t = time.perf_counter()
            ref = [np.asarray(r, dtype=np.int64) for r in enc.encode_ordinary_batch(items[d])]
            timing[f"ref_{name}_{d}"] = time.perf_counter() - t
            ref_n = np.array([len(r) for r in ref])
            for mode in MODES:
                t = time.perf_counter()
                ours = encode_ours(tok, items[d], mode, device, args.batch)
                t_enc = time.perf_counter() - t
                t = time.perf_counter()
                dist = np.array(
                    [
                        0 if len(r) == len(o) and np.array_equal(r, o) else levenshtein(r, o)
                        for r, o in zip(ref, ours)
                    ],
                    dtype=np.int64,
                )
                t_lev = time.perf_counter() - t
                timing[f"ours_{name}_{d}_{mode}"] = t_enc
                timing[f"lev_{name}_{d}_{mode}"] = t_lev
                our_n = np.array([len(o) for o in ours])
                subsets = [(d, len(items[d]))] + [(s, n) for s, (base, n) in SUBSETS.items() if base == d]
                for sname, n in subsets:
                    cell = {
                        "dataset": sname,
                        "vocab": name,
                        "mode": mode,
                        **summarize(items_bytes[d][:n], dist[:n], ref_n[:n], our_n[:n]),
                    }
                    cells.append(cell)
                    print(
                        f"{sname:10s} {name:7s} {mode:6s} sim {cell['sim']:.4f}  identical "
                        f"{cell['identical']}/{cell['items']} ({cell['identical_frac']:.1%})  "
                        f"tokens ref {cell['ref_tokens']} ours {cell['our_tokens']}  "
                        f"[enc {t_enc:.2f}s lev {t_lev:.2f}s]",
                        flush=True,
                    )
                bad = np.flatnonzero(dist)
                if mode == "exact":
                    for k in bad[:20].tolist():
                        r, o = ref[k], ours[k]
                        n = min(len(r), len(o))
                        first = int(np.flatnonzero(r[:n] != o[:n])[0]) if (r[:n] != o[:n]).any() else n
                        failures.append(
                            {
                                "dataset": d,
                                "vocab": name,
                                "item": k,
                                "levenshtein": int(dist[k]),
                                "first_diff_token": first,
                                "ref": r[max(0, first - 3) : first + 5].tolist(),
                                "ours": o[max(0, first - 3) : first + 5].tolist(),
                                "text": items[d][k][:500],
                            }
                        )
                        print(f"EXACT MODE MISMATCH {d} {name} item {k}: {failures[-1]}", flush=True)
                    if len(bad) > 20:
                        print(f"... {len(bad)} exact-mode mismatches in all", flush=True)
                    continue
                # bytes mode: what differs, by region of text
                cnt, cls = collections.Counter(), collections.Counter()
                for k in bad.tolist():
                    for rp, op in diff_regions(tb, ref[k], ours[k]):
                        cnt[(rp, op)] += 1
                        cls[region_class(b"".join(rp))] += 1
                total = sum(cls.values())
                regions[f"{d}/{name}"] = {
                    "differing_regions": total,
                    "by_class": {c: round(v / total, 4) for c, v in cls.most_common()} if total else {},
                    "top": [
                        {
                            "ref": show(rp),
                            "bytes_mode": show(op),
                            "count": c,
                            "class": region_class(b"".join(rp)),
                        }
                        for (rp, op), c in cnt.most_common(args.top)
                    ],
                }
    wall = time.perf_counter() - t_start
    result = {
        **environment(args, device),
        "wall_s": round(wall, 2),
        "definition": "sim = mean over items of 1 - Levenshtein(ids_ref, ids_ours) / "
        "len(item UTF-8 bytes); identical = fraction of items with equal ids; "
        "ids_ref = tiktoken with the vocabulary's real pattern (encode_ordinary)",
        "datasets": {
            d: {"items": len(items[d]), "bytes": int(sum(items_bytes[d])), "label": DATASET_LABELS[d]}
            for d in datasets
        },
        "quick": args.quick,
        "cells": cells,
        "bytes_mode_regions": regions,
        "exact_mode_failures": failures,
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    (out / "quality.md").write_text(markdown(result))
    print(f"wrote {out / 'quality.json'} and {out / 'quality.md'} in {wall:.1f} s", flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--vocabs", default=",".join(VOCABS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--batch", type=int, default=512, help="strings per encode call")
    ap.add_argument("--top", type=int, default=15, help="differing regions to record per cell")
    ap.add_argument("--quick", type=int, default=0, metavar="N", help="first N items per dataset")
    args = ap.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
