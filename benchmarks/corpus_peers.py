"""The corpus job's CPU tokenizers: tokie, gigatoken (encode_batch and encode_files), tiktoken,
each fed the decoded documents in pieces with only its encode calls timed (gigatoken_files
reads the JSONL itself), and every peer's ids compared with ours on all documents."""

from __future__ import annotations

import itertools
import time

import numpy as np

import peers as peer_lib

MB = 1e6


def flatten_lists(rows) -> tuple[np.ndarray, np.ndarray]:
    rows = list(rows)
    counts = np.fromiter(map(len, rows), np.int64, count=len(rows))
    return np.fromiter(itertools.chain.from_iterable(rows), np.uint32, count=int(counts.sum())), counts


def flatten_awkward(arr) -> tuple[np.ndarray, np.ndarray]:
    import awkward as ak

    return np.asarray(ak.flatten(arr), np.uint32), np.asarray(ak.num(arr), np.int64)


def compare(name: str, got: tuple[np.ndarray, np.ndarray], ids: np.ndarray, counts: np.ndarray) -> str:
    """'' when equal, else where the first difference is."""
    g_ids, g_counts = got
    if len(g_counts) != len(counts):
        return f"{name}: {len(g_counts)} documents, ours {len(counts)}"
    bad = np.flatnonzero(g_counts != counts)
    if bad.size:
        j = int(bad[0])
        return f"{name}: document {j} has {int(g_counts[j])} tokens, ours {int(counts[j])}"
    if not np.array_equal(g_ids, ids):
        t = int(np.argmax(g_ids != ids))
        j = int(np.searchsorted(np.cumsum(counts), t, "right"))
        return f"{name}: token {t} (document {j}) is {int(g_ids[t])}, ours {int(ids[t])}"
    return ""


def pieces(texts: list[str], piece_bytes: float) -> list[tuple[int, int]]:
    out, lo, size = [], 0, 0
    for i, t in enumerate(texts):
        size += len(t)
        if size >= piece_bytes:
            out.append((lo, i + 1))
            lo, size = i + 1, 0
    if lo < len(texts):
        out.append((lo, len(texts)))
    return out


def time_peer(encode, flatten, texts, ids, counts, piece_bytes, budget) -> dict:
    """Encodes the texts in pieces, timing the calls only; compares each piece with ours."""
    ends = np.concatenate([[0], np.cumsum(counts)])
    secs = 0.0
    for lo, hi in pieces(texts, piece_bytes):
        t = time.perf_counter()
        got = encode(texts[lo:hi])
        secs += time.perf_counter() - t
        diff = compare("", flatten(got), ids[ends[lo] : ends[hi]], counts[lo:hi])
        if diff:
            return dict(status="ids differ", detail=f"documents {lo}..{hi}{diff}", seconds=secs)
        if secs > budget:
            return dict(
                status=f"not run (over the {budget:.0f} s budget after {hi} of {len(texts)} documents)"
            )
    return dict(status="ok", seconds=secs, ids_equal=True)


def run_peers(ps, texts, corpus_path, ids, counts, nbytes, args) -> dict:
    res: dict = {}
    for name, why in ps.unavailable.items():
        res[name] = dict(status=f"unavailable: {why}")
    if "tokie" in ps.peers:
        p = ps.peers["tokie"]
        res["tokie"] = dict(
            version=p.version,
            **time_peer(
                p.encode,
                lambda got: flatten_lists(e.ids for e in got),
                texts,
                ids,
                counts,
                args.piece_mb * MB,
                args.peer_budget_s,
            ),
        )
    try:
        import gigatoken

        gt = gigatoken.Tokenizer.from_tiktoken(str(args.data / "vocab" / peer_lib.FILES["cl100k"][0]))
        version = peer_lib._version("gigatoken")
    except Exception as e:  # noqa: BLE001
        gt, why = None, f"unavailable: {e!r}"[:300]
        res["gigatoken"] = res["gigatoken_files"] = dict(status=why)
    if gt is not None:
        if hasattr(gt, "encode_batch"):
            res["gigatoken"] = dict(
                version=version,
                api="encode_batch",
                **time_peer(
                    gt.encode_batch,
                    flatten_awkward,
                    texts,
                    ids,
                    counts,
                    args.piece_mb * MB,
                    args.peer_budget_s,
                ),
            )
        else:
            res["gigatoken"] = dict(status="unavailable: no encode_batch in this version")
        source = getattr(gigatoken, "JsonlFileSource", None)
        if source is None or not hasattr(gt, "encode_files"):
            res["gigatoken_files"] = dict(
                status=f"unavailable: no encode_files/JsonlFileSource in gigatoken {version}"
            )
        else:
            runs = []  # (the median of args.reps runs, as ours: one run varies by ~20% here)
            for _ in range(max(1, args.reps)):
                t = time.perf_counter()
                got = gt.encode_files(source([str(corpus_path)], field="text"))
                runs.append(time.perf_counter() - t)
                if runs[-1] > args.peer_budget_s:
                    break
            diff = compare("gigatoken_files", flatten_awkward(got), ids, counts)
            res["gigatoken_files"] = dict(
                version=version,
                api="encode_files(JsonlFileSource)",
                seconds=sorted(runs)[len(runs) // 2],
                runs_s=runs,
                status="ids differ" if diff else "ok",
                ids_equal=not diff,
                **({"detail": diff} if diff else {}),
            )
    tk = ps.peers["tiktoken"]
    if nbytes > args.tiktoken_max_mb * MB:
        res["tiktoken"] = dict(status=f"not run (corpus above --tiktoken-max-mb {args.tiktoken_max_mb})")
    else:
        res["tiktoken"] = dict(
            version=tk.version,
            threads=ps.threads,
            **time_peer(tk.encode, flatten_lists, texts, ids, counts, args.piece_mb * MB, args.peer_budget_s),
        )
    for r in res.values():
        if "seconds" in r and r.get("status") == "ok":
            r["MBps"] = nbytes / r["seconds"] / MB
            r["Mtokens_per_s"] = float(counts.sum()) / r["seconds"] / 1e6
    return res
