#!/usr/bin/env python3
"""The command line on a corpus of tens of GB, next to gigatoken's command: wall time, host
CPU-seconds per GB, peak memory, ids compared on every document.

    python3 benchmarks/corpus_cli_scale.py --out DIR [--gb 10] [--runs 2] [--workdir DIR]

The corpus is corpus_job.py's mixed JSONL (corpora.build_mixed) of --gb GB, written once under
--workdir (it needs about three times --gb of disk: the corpus and both outputs). Timed, each
as a fresh process measured by wait4 (harness.run_command: wall, user + system CPU, peak
resident memory):
  cli      `blockbpe-jax encode CORPUS --jsonl-field text -o DIR`, --runs times (the first
           compiles, or loads the executables a run before it kept on disk); flat shards
  peer     gigatoken's command (corpus_peers.PEER_COMMAND: encode_files, then the ids and
           offsets written flat), once, where gigatoken imports
The outputs are compared document by document and token by token through memory maps, a
chunk at a time (never loaded whole), and a sample of documents is checked against tiktoken.
Peak memory is the point of the scale: a job whose memory grew with its input would show it
here. Writes DIR/corpus_cli_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import peers as peer_lib  # noqa: E402
from corpora import build_mixed, source_texts  # noqa: E402
from corpus_job import run_cli  # noqa: E402
from corpus_peers import MB, PEER_COMMAND, compare_counts  # noqa: E402
from harness import cpu_per_gb, run_command  # noqa: E402

from blockbpe_jax.testing import data_dir  # noqa: E402

CHUNK = 1 << 26  # tokens compared at a time


def flat_shards(prefix: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, per-document counts) of each shard of a flat output, the ids memory-mapped."""
    meta = json.loads(prefix.with_name(prefix.name + ".json").read_text())
    return [
        (
            np.memmap(prefix.parent / s["bin"], dtype=meta["dtype"], mode="r"),
            np.diff(np.fromfile(prefix.parent / s["idx"], dtype="<i8")),
        )
        for s in meta["shards"]
    ]


def compare_flat(ours: list[tuple[np.ndarray, np.ndarray]], ids: np.ndarray, counts: np.ndarray) -> str:
    """'' where the shards `ours` hold the documents `counts` and the ids `ids` (one flat
    array: the peer's), else where they first differ."""
    ours_counts = np.concatenate([c for _, c in ours]) if ours else np.zeros(0, np.int64)
    differ = compare_counts("the peer", counts, ours_counts)
    if differ:
        return differ
    at = 0
    for shard_ids, _ in ours:
        if at + len(shard_ids) > len(ids):
            return f"{len(ids)} tokens, ours more"
        for lo in range(0, len(shard_ids), CHUNK):
            mine = np.asarray(shard_ids[lo : lo + CHUNK], np.uint32)
            theirs = ids[at + lo : at + lo + len(mine)]
            if not np.array_equal(mine, theirs):
                k = int(np.argmax(mine != theirs))
                j = int(np.searchsorted(np.cumsum(counts), at + lo + k, "right"))
                return f"token {at + lo + k} (document {j}) is {int(theirs[k])}, ours {int(mine[k])}"
        at += len(shard_ids)
    return "" if at == len(ids) else f"{len(ids)} tokens, ours {at}"


def sample_against_reference(ours, texts: list[str], reference, n: int, threads: int) -> dict:
    """`n` documents at random: their ids in `ours` against tiktoken's."""
    ends = np.concatenate([[0], np.cumsum(np.concatenate([c for _, c in ours]))])
    shard_of = np.repeat(np.arange(len(ours)), [len(c) for _, c in ours])
    firsts = np.concatenate([[0], np.cumsum([len(i) for i, _ in ours])])
    pick = sorted(random.Random(3).sample(range(len(texts)), min(len(texts), n)))
    want = reference.encode_ordinary_batch([texts[i] for i in pick], num_threads=threads)
    bad = []
    for i, w in zip(pick, want):
        k = shard_of[i]
        lo, hi = ends[i] - firsts[k], ends[i + 1] - firsts[k]
        if np.asarray(ours[k][0][lo:hi]).tolist() != w:
            bad.append(i)
    return dict(
        documents=len(pick),
        equal_to_tiktoken=not bad,
        **({"first_differing_document": bad[0]} if bad else {}),
    )


def run_peer(corpus: Path, vocab: Path, work: Path, ours, timeout: float) -> dict:
    """gigatoken's command on the corpus, measured, its ids against `ours`."""
    out = work / "gigatoken"
    p = run_command([sys.executable, "-c", PEER_COMMAND, str(corpus), str(vocab), str(out)], timeout)
    if p["timed_out"]:
        return dict(status=f"not run to the end (over {timeout:.0f} s)")
    if p["returncode"] != 0:
        return dict(status=f"failed (exit {p['returncode']}): {p['stderr'].strip()[-300:]}")
    ids = np.memmap(str(out) + ".bin", np.uint32, mode="r")
    diff = compare_flat(ours, ids, np.diff(np.fromfile(str(out) + ".idx", np.int64)))
    del ids
    for suffix in (".bin", ".idx"):
        Path(str(out) + suffix).unlink(missing_ok=True)
    return dict(
        status="ids differ" if diff else "ok",
        ids_equal=not diff,
        **({"detail": diff} if diff else {}),
        wall_s=p["wall_s"],
        cpu_s=p["cpu_s"],
        peak_rss_bytes=p["peak_rss_bytes"],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gb", type=float, default=10.0, help="size of the corpus (GB)")
    ap.add_argument("--runs", type=int, default=2, help="runs of our command")
    ap.add_argument("--timeout-s", type=float, default=400, help="per command")
    ap.add_argument("--workdir", help="where the corpus and outputs go (default: a temporary directory)")
    ap.add_argument("--reference-sample", type=int, default=2000)
    ap.add_argument("--no-peer", action="store_true", help="our command only")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = data_dir()
    vocab = data / "vocab" / peer_lib.FILES["cl100k"][0]
    work = Path(tempfile.mkdtemp(prefix="corpus_cli_scale_", dir=args.workdir))
    doc: dict = dict(benchmark="corpus_cli_scale", vocab="cl100k", cpu_count=os.cpu_count())
    try:
        corpus = work / "mixed.jsonl"
        texts, nbytes = build_mixed(corpus, source_texts(data), int(args.gb * 1e9))
        doc.update(corpus="mixed", documents=len(texts), bytes=nbytes)
        print(f"corpus: {len(texts)} documents, {nbytes / MB:.0f} MB", flush=True)
        runs = []
        for k in range(args.runs):
            r = run_cli(corpus, vocab, work / "ours", args.timeout_s)
            if r["status"] == "ok":
                r.update(MBps=nbytes / r["wall_s"] / MB, cpu_s_per_GB=cpu_per_gb(r["cpu_s"], nbytes))
                print(
                    f"  ours, run {k + 1}: {r['wall_s']:.2f} s ({r['MBps']:.0f} MB/s; job {r['job_s']:.2f} s), "
                    f"{r['cpu_s_per_GB']:.2f} CPU-s/GB, peak {r['peak_rss_bytes'] / 2**30:.2f} GiB",
                    flush=True,
                )
            else:
                print(f"  ours, run {k + 1}: {r['status']}", flush=True)
            runs.append(r)
        doc["ours"] = runs
        if runs and runs[-1]["status"] == "ok":
            ours = flat_shards(work / "ours" / "shard")
            doc["reference_sample"] = sample_against_reference(
                ours, texts, peer_lib.reference_encoding(data, "cl100k"), args.reference_sample, 16
            )
            if not args.no_peer:
                peer = run_peer(corpus, vocab, work, ours, args.timeout_s)
                if "wall_s" in peer:
                    peer.update(
                        MBps=nbytes / peer["wall_s"] / MB, cpu_s_per_GB=cpu_per_gb(peer["cpu_s"], nbytes)
                    )
                    doc["ours_over_peer"] = runs[-1]["MBps"] / peer["MBps"]
                doc["gigatoken_command"] = peer
                print(f"  gigatoken command: {peer}", flush=True)
            del ours
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / "corpus_cli_scale.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
