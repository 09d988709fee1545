"""The corpus job's CPU tokenizers: tokie, gigatoken (encode_batch and encode_files), tiktoken,
each fed the decoded documents in pieces with only its encode calls timed (gigatoken_files
reads the JSONL itself), gigatoken's own command (`peer_command`: a fresh process that writes the
flat layout, our command's counterpart), and every peer's ids compared with ours on all
documents."""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

import peers as peer_lib
from harness import Clock, cpu_per_gb, run_command

MB = 1e6


def flatten_lists(rows) -> tuple[np.ndarray, np.ndarray]:
    rows = list(rows)
    counts = np.fromiter(map(len, rows), np.int64, count=len(rows))
    return np.fromiter(itertools.chain.from_iterable(rows), np.uint32, count=int(counts.sum())), counts


def flatten_awkward(arr) -> tuple[np.ndarray, np.ndarray]:
    import awkward as ak

    return np.asarray(ak.flatten(arr), np.uint32), np.asarray(ak.num(arr), np.int64)


def compare_counts(name: str, theirs: np.ndarray, ours: np.ndarray) -> str:
    """'' when the per-document token counts are equal, else the first difference."""
    if len(theirs) != len(ours):
        return f"{name}: {len(theirs)} documents, ours {len(ours)}"
    bad = np.flatnonzero(theirs != ours)
    if bad.size:
        j = int(bad[0])
        return f"{name}: document {j} has {int(theirs[j])} tokens, ours {int(ours[j])}"
    return ""


def compare(name: str, got: tuple[np.ndarray, np.ndarray], ids: np.ndarray, counts: np.ndarray) -> str:
    """'' when equal, else where the first difference is."""
    g_ids, g_counts = got
    differ = compare_counts(name, g_counts, counts)
    if differ:
        return differ
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
    secs = cpu = 0.0
    for lo, hi in pieces(texts, piece_bytes):
        with Clock() as clock:
            got = encode(texts[lo:hi])
        secs, cpu = secs + clock.wall, cpu + clock.cpu
        diff = compare("", flatten(got), ids[ends[lo] : ends[hi]], counts[lo:hi])
        if diff:
            return dict(status="ids differ", detail=f"documents {lo}..{hi}{diff}", seconds=secs)
        if secs > budget:
            return dict(
                status=f"not run (over the {budget:.0f} s budget after {hi} of {len(texts)} documents)"
            )
    return dict(status="ok", seconds=secs, cpu_s=cpu, ids_equal=True)


# The fastest CPU peer as a corpus job of its own, what `blockbpe-jax encode` is measured against
# command for command: a fresh interpreter imports gigatoken, loads the vocabulary, encodes the
# JSONL file with encode_files (its reader, its threads) and writes every id back to back (uint32)
# and the document offsets (int64), the flat layout of our shards.
PEER_COMMAND = """
import sys
import awkward as ak, gigatoken, numpy as np
corpus, vocab, out = sys.argv[1:4]
tok = gigatoken.Tokenizer.from_tiktoken(vocab)
got = tok.encode_files(gigatoken.JsonlFileSource([corpus], field="text"))
np.asarray(ak.flatten(got), np.uint32).tofile(out + ".bin")
np.concatenate([[0], np.cumsum(np.asarray(ak.num(got), np.int64))]).tofile(out + ".idx")
"""


def peer_command(corpus_path, vocab, ids, counts, timeout: float) -> dict:
    """PEER_COMMAND's wall time (everything from the interpreter's start to the files written)
    and its ids against ours."""
    with tempfile.TemporaryDirectory(prefix="peer_command_") as work:
        out = str(Path(work) / "gigatoken")
        cmd = [sys.executable, "-c", PEER_COMMAND, str(corpus_path), str(vocab), out]
        p = run_command(cmd, timeout)
        if p["timed_out"]:
            return dict(status=f"not run to the end (over {timeout:.0f} s)")
        if p["returncode"] != 0:
            return dict(status=f"failed (exit {p['returncode']}): {p['stderr'].strip()[-300:]}")
        got = np.fromfile(out + ".bin", np.uint32), np.diff(np.fromfile(out + ".idx", np.int64))
    diff = compare("gigatoken_command", got, ids, counts)
    return dict(
        api="a fresh process: from_tiktoken + encode_files(JsonlFileSource) + .bin/.idx written",
        seconds=p["wall_s"],
        cpu_s=p["cpu_s"],
        peak_rss_bytes=p["peak_rss_bytes"],
        status="ids differ" if diff else "ok",
        ids_equal=not diff,
        **({"detail": diff} if diff else {}),
    )


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
            runs, cpus = [], []  # (the median of args.reps runs, as ours: one run varies by ~20% here)
            for _ in range(max(1, args.reps)):
                with Clock() as clock:
                    got = gt.encode_files(source([str(corpus_path)], field="text"))
                runs.append(clock.wall)
                cpus.append(clock.cpu)
                if runs[-1] > args.peer_budget_s:
                    break
            diff = compare("gigatoken_files", flatten_awkward(got), ids, counts)
            res["gigatoken_files"] = dict(
                version=version,
                api="encode_files(JsonlFileSource)",
                seconds=sorted(runs)[len(runs) // 2],
                cpu_s=sorted(cpus)[len(cpus) // 2],
                runs_s=runs,
                status="ids differ" if diff else "ok",
                ids_equal=not diff,
                **({"detail": diff} if diff else {}),
            )
            vocab = args.data / "vocab" / peer_lib.FILES["cl100k"][0]
            res["gigatoken_command"] = dict(
                version=version, **peer_command(corpus_path, vocab, ids, counts, args.cli_timeout_s)
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
            if "cpu_s" in r:
                r["cpu_s_per_GB"] = cpu_per_gb(r["cpu_s"], nbytes)
    return res
