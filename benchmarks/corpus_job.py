#!/usr/bin/env python3
"""The corpus job on real corpora, ours next to the CPU tokenizers, ids checked equal.

    python3 benchmarks/corpus_job.py --out DIR [--gb 1.0] [--threads 16] [--long-docs 120]

Two JSONL corpora (field "text") are built under a temporary directory from the shared data,
deterministically, in seconds (the unique documents are serialized once, then tiled):
  mixed  >= --gb GB: War and Peace paragraphs, GSM8K records (question + answer), WikiText-2
         articles and Python stdlib files, interleaved; each repetition of the ~14 MB of unique
         documents in a different order
  long   --long-docs documents of 0.1-5 MB: the whole of War and Peace, and spans of the
         books, the Python sources, WikiText and GSM8K cut at random offsets
Timed on each corpus, all with cl100k:
  cli          `blockbpe-jax encode CORPUS --jsonl-field text -o DIR` as a subprocess: wall
               time of EVERYTHING (interpreter and JAX start-up, vocabulary load, reading and
               JSON parsing, encode, writing the flat shards); run twice, the second process
               with the first one's executables in JAX's persistent compilation cache
               (~/.cache/blockbpe_jax/xla; BLOCKBPE_XLA_CACHE=0 turns it off)
  encode_files `Tokenizer.encode_files` in-process (reading, parsing, encode, writing); "cold"
               is the first call (compiles its shapes), "warm" a second one
  tokie, gigatoken (encode_batch), tiktoken (encode_ordinary_batch, --threads threads):
               given the decoded list[str] (reading and JSON parsing NOT timed), fed in pieces
               of --piece-mb MB; the time is the sum of the encode calls only
  gigatoken_files  gigatoken's `encode_files(JsonlFileSource([CORPUS], field="text"))`:
               reads and parses the file itself (timed, like our cli)
Every peer's ids are compared with the cli's shards, flat arrays and per-document counts, on
all documents. A peer that does not import is "unavailable"; one whose time exceeds
--peer-budget-s or that is skipped by a size rule (tiktoken above --tiktoken-max-mb) is
"not run" (nothing is extrapolated). Writes DIR/corpus_job.json and DIR/corpus_job.txt.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import peers as peer_lib  # noqa: E402

from blockbpe_jax.testing import data_dir, read_corpus  # noqa: E402

MB = 1e6


# --------------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------------


def source_texts(root: Path) -> dict[str, str]:
    c = root / "corpus"
    gsm = []
    for name in ("gsm8k_train.jsonl.gz", "gsm8k_test.jsonl"):
        for line in read_corpus(c / name).decode().splitlines():
            if line.strip():
                r = json.loads(line)
                gsm.append(f"Question: {r['question']}\nAnswer: {r['answer']}")
    return dict(
        war_and_peace=read_corpus(c / "war_and_peace_en.txt").decode(),
        python=read_corpus(c / "code_python_stdlib.py.txt.gz").decode(),
        wikitext=read_corpus(c / "wikitext2_test.txt.gz").decode(),
        gsm8k="\n\n".join(gsm),
        gsm8k_records=gsm,
    )


def unique_documents(src: dict[str, str]) -> list[str]:
    """Paragraphs, records, articles and files, in a fixed interleaved order."""
    paragraphs = [p.strip("\n") for p in src["war_and_peace"].split("\n\n") if p.strip()]
    files = ["# ===== file:" + f for f in src["python"].split("# ===== file:") if f.strip()]
    articles, cur = [], []
    for line in src["wikitext"].split("\n"):
        if line.startswith(" = ") and not line.startswith(" = = ") and cur:
            articles.append("\n".join(cur))
            cur = []
        cur.append(line)
    articles.append("\n".join(cur))
    docs = paragraphs + list(src["gsm8k_records"]) + [a for a in articles if a.strip()] + files
    random.Random(0).shuffle(docs)
    return docs


def build_mixed(path: Path, src: dict[str, str], target_bytes: int) -> tuple[list[str], int]:
    """Writes the mixed corpus (JSONL); returns its documents in file order and its size."""
    docs = unique_documents(src)
    lines = [(json.dumps({"text": d}, ensure_ascii=False) + "\n").encode() for d in docs]
    block = sum(map(len, lines))
    rng = random.Random(1)
    order: list[int] = []
    written = 0
    with open(path, "wb") as f:
        while written < target_bytes:
            perm = list(range(len(docs)))
            rng.shuffle(perm)
            f.write(b"".join([lines[i] for i in perm]))
            order += perm
            written += block
    return [docs[i] for i in order], written


def build_long(path: Path, src: dict[str, str], n: int) -> tuple[list[str], int]:
    """Writes `n` long documents (JSONL): whole War and Peace, then spans of 0.1-5 MB."""
    rng = random.Random(2)
    kinds = ["war_and_peace", "python", "wikitext", "gsm8k"]
    docs = [src["war_and_peace"]]
    while len(docs) < n:
        text = src[kinds[len(docs) % len(kinds)]]
        size = int(math.exp(rng.uniform(math.log(100_000), math.log(5_000_000))))
        reps = -(-(size + len(text)) // len(text))
        start = rng.randrange(len(text))
        docs.append((text * reps)[start : start + size])
    with open(path, "wb") as f:
        for d in docs:
            f.write((json.dumps({"text": d}, ensure_ascii=False) + "\n").encode())
    return docs, path.stat().st_size


# --------------------------------------------------------------------------------------------
# Ours
# --------------------------------------------------------------------------------------------


def read_flat(prefix: Path) -> tuple[np.ndarray, np.ndarray]:
    """(all ids back to back, per-document counts) of a flat output."""
    meta = json.loads(prefix.with_name(prefix.name + ".json").read_text())
    ids, counts = [], []
    for s in meta["shards"]:
        ids.append(np.fromfile(prefix.parent / s["bin"], dtype=meta["dtype"]))
        counts.append(np.diff(np.fromfile(prefix.parent / s["idx"], dtype="<i8")))
    return np.concatenate(ids).astype(np.uint32), np.concatenate(counts)


def output_bytes(prefix: Path) -> int:
    return sum(p.stat().st_size for p in prefix.parent.glob(prefix.name + "*"))


def run_cli(corpus: Path, vocab: Path, out: Path, timeout: float) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "blockbpe_jax",
        "encode",
        str(corpus),
        "--jsonl-field",
        "text",
        "-o",
        str(out),
        "--vocab",
        str(vocab),
        "-q",
        "--overwrite",
    ]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(status=f"not run to the end (over {timeout:.0f} s)", command=" ".join(cmd))
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return dict(status=f"failed (exit {p.returncode}): {p.stderr.strip()[-500:]}", command=" ".join(cmd))
    meta = json.loads((out / "shard.json").read_text())
    return dict(
        status="ok",
        command=" ".join(cmd),
        wall_s=wall,
        job_s=meta["seconds"],
        tokens=meta["tokens"],
        documents=meta["documents"],
        stdout=p.stdout.strip(),
        output_bytes=output_bytes(out / "shard"),
    )


# --------------------------------------------------------------------------------------------
# Peers
# --------------------------------------------------------------------------------------------


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
            t = time.perf_counter()
            got = gt.encode_files(source([str(corpus_path)], field="text"))
            secs = time.perf_counter() - t
            diff = compare("gigatoken_files", flatten_awkward(got), ids, counts)
            res["gigatoken_files"] = dict(
                version=version,
                api="encode_files(JsonlFileSource)",
                seconds=secs,
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


# --------------------------------------------------------------------------------------------


def run_corpus(label, path, texts, nbytes, tok, ps, vocab, work, args) -> dict:
    print(f"[{label}] {len(texts)} documents, {nbytes / MB:.1f} MB", flush=True)
    r: dict = dict(corpus=label, documents=len(texts), bytes=nbytes, text_chars=sum(map(len, texts)))
    cli = run_cli(path, vocab, work / f"{label}_cli", args.cli_timeout_s)
    r["cli"] = cli
    if cli["status"] != "ok":
        print(f"  cli: {cli['status']}", flush=True)
        return r
    ids, counts = read_flat(work / f"{label}_cli" / "shard")
    # again: with the persistent compilation cache (on unless BLOCKBPE_XLA_CACHE=0), the
    # second process loads the first one's executables instead of compiling them
    again = run_cli(path, vocab, work / f"{label}_cli2", args.cli_timeout_s)
    if again["status"] == "ok":
        diff = compare("cli second run", read_flat(work / f"{label}_cli2" / "shard"), ids, counts)
        again.update(MBps=nbytes / again["wall_s"] / MB, ids_equal_first=not diff)
        print(
            f"  cli again: {again['wall_s']:.2f} s wall ({again['MBps']:.1f} MB/s; job "
            f"{again['job_s']:.2f} s)" + (f" DIFFERS: {diff}" if diff else ""),
            flush=True,
        )
        shutil.rmtree(work / f"{label}_cli2", ignore_errors=True)
    r["cli_second_run"] = again
    cli.update(
        MBps=nbytes / cli["wall_s"] / MB,
        Mtokens_per_s=len(ids) / cli["wall_s"] / 1e6,
        job_MBps=nbytes / cli["job_s"] / MB,
        output_bytes_per_token=cli["output_bytes"] / max(1, len(ids)),
    )
    print(
        f"  cli: {cli['wall_s']:.2f} s wall ({cli['MBps']:.1f} MB/s; job {cli['job_s']:.2f} s), "
        f"{len(ids)} tokens, {cli['output_bytes_per_token']:.2f} output bytes/token",
        flush=True,
    )
    r["tokens"] = int(len(ids))
    if len(counts) != len(texts):
        r["error"] = f"cli wrote {len(counts)} documents, the corpus has {len(texts)}"
        return r
    ef: dict = {}
    for run in ("cold", "warm"):
        out = work / f"{label}_api_{run}"
        t = time.perf_counter()
        tok.encode_files([path], out / "shard", jsonl_field="text", overwrite=True)
        secs = time.perf_counter() - t
        diff = compare("encode_files", read_flat(out / "shard"), ids, counts)
        ef[run] = dict(
            seconds=secs,
            MBps=nbytes / secs / MB,
            ids_equal_cli=not diff,
            **({"detail": diff} if diff else {}),
        )
        print(
            f"  encode_files {run}: {secs:.2f} s ({nbytes / secs / MB:.1f} MB/s)"
            + (f" DIFFERS: {diff}" if diff else ""),
            flush=True,
        )
        shutil.rmtree(out, ignore_errors=True)
        if secs > args.peer_budget_s:
            break
    r["encode_files"] = ef
    # tiktoken on a sample too, so that the equalities below are anchored to the reference
    rng = random.Random(3)
    sample = sorted(rng.sample(range(len(texts)), min(len(texts), args.reference_sample)))
    ends = np.concatenate([[0], np.cumsum(counts)])
    want = ps.reference.encode_ordinary_batch([texts[i] for i in sample], num_threads=ps.threads)
    bad = [i for i, w in zip(sample, want) if ids[ends[i] : ends[i + 1]].tolist() != w]
    r["reference_sample"] = dict(
        documents=len(sample),
        equal_to_tiktoken=not bad,
        **({"first_differing_document": bad[0]} if bad else {}),
    )
    r["peers"] = run_peers(ps, texts, path, ids, counts, nbytes, args)
    for name, p in r["peers"].items():
        print(
            f"  {name}: {p.get('status')}"
            + (f", {p['seconds']:.2f} s ({p['MBps']:.1f} MB/s)" if "MBps" in p else ""),
            flush=True,
        )
    fastest = max((p["MBps"] for p in r["peers"].values() if "MBps" in p), default=None)
    if fastest:
        r["cli_over_fastest_peer"] = cli["MBps"] / fastest
    shutil.rmtree(work / f"{label}_cli", ignore_errors=True)
    return r


def table(results: list[dict]) -> str:
    lines = [
        "corpus | documents | MB | path | seconds | MB/s | M tokens/s | note",
        "---|---:|---:|---|---:|---:|---:|---",
    ]
    for r in results:
        head = f"{r['corpus']} | {r['documents']} | {r['bytes'] / MB:.0f}"
        cli = r["cli"]
        if cli.get("status") != "ok":
            lines.append(f"{head} | ours cli | | | | {cli.get('status')}")
            continue
        lines.append(
            f"{head} | ours cli (all incl. start-up, writing) | {cli['wall_s']:.2f} | "
            f"{cli['MBps']:.1f} | {cli['Mtokens_per_s']:.2f} | {cli['output_bytes_per_token']:.2f} "
            f"output bytes/token; job alone {cli['job_s']:.2f} s"
        )
        again = r.get("cli_second_run", {})
        if again.get("status") == "ok":
            lines.append(
                f"{head} | ours cli, second process (compilation cache) | {again['wall_s']:.2f} | "
                f"{again['MBps']:.1f} | {r['tokens'] / again['wall_s'] / 1e6:.2f} | job alone "
                f"{again['job_s']:.2f} s; ids equal first run: {again['ids_equal_first']}"
            )
        for run, e in r.get("encode_files", {}).items():
            lines.append(
                f"{head} | ours encode_files ({run}) | {e['seconds']:.2f} | {e['MBps']:.1f} | "
                f"{r['tokens'] / e['seconds'] / 1e6:.2f} | ids equal cli: {e['ids_equal_cli']}"
            )
        for name, p in r.get("peers", {}).items():
            if "MBps" in p:
                lines.append(
                    f"{head} | {name} | {p['seconds']:.2f} | {p['MBps']:.1f} | "
                    f"{p['Mtokens_per_s']:.2f} | ids equal ours"
                )
            else:
                lines.append(f"{head} | {name} | | | | {p.get('status')} {p.get('detail', '')}")
        if "cli_over_fastest_peer" in r:
            lines.append(f"{head} | cli / fastest peer | | {r['cli_over_fastest_peer']:.2f}x | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the mixed corpus (GB)")
    ap.add_argument("--long-docs", type=int, default=120, help="documents of the long corpus")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--piece-mb", type=float, default=64, help="peers get the texts in pieces of this size")
    ap.add_argument("--peer-budget-s", type=float, default=60)
    ap.add_argument("--cli-timeout-s", type=float, default=240)
    ap.add_argument("--tiktoken-max-mb", type=float, default=256)
    ap.add_argument(
        "--reference-sample", type=int, default=2000, help="documents also checked against tiktoken directly"
    )
    ap.add_argument("--corpora", default="mixed,long")
    ap.add_argument("--workdir", help="where the corpora go (default: a temporary directory)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.data = data_dir()
    vocab = args.data / "vocab" / peer_lib.FILES["cl100k"][0]

    import jax

    import blockbpe_jax as bb

    ps = peer_lib.load(args.data, "cl100k", threads=args.threads, only=("tokie",))
    tok = bb.Tokenizer.from_file(vocab)
    work = Path(tempfile.mkdtemp(prefix="corpus_job_", dir=args.workdir))
    results = []
    try:
        t = time.perf_counter()
        src = source_texts(args.data)
        built = {}
        for label in args.corpora.split(","):
            path = work / f"{label}.jsonl"
            texts, nbytes = (
                build_mixed(path, src, int(args.gb * 1e9))
                if label == "mixed"
                else build_long(path, src, args.long_docs)
            )
            built[label] = (path, texts, nbytes)
        build_s = time.perf_counter() - t
        print(f"corpora built in {build_s:.1f} s", flush=True)
        for label, (path, texts, nbytes) in built.items():
            results.append(run_corpus(label, path, texts, nbytes, tok, ps, vocab, work, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = dict(
        benchmark="corpus_job",
        vocab="cl100k",
        device=str(jax.devices()[0]),
        xla_compilation_cache=os.environ.get("BLOCKBPE_XLA_CACHE", "1") != "0",
        threads=args.threads,
        cpu_count=os.cpu_count(),
        build_s=build_s,
        timing_notes=dict(
            cli="wall time of the whole command (start-up, vocabulary, reading, JSON, "
            "encode, writing shards)",
            encode_files="in-process, reading + JSON + encode + writing shards",
            peers="encode calls only, on the decoded list[str] in pieces of "
            f"{args.piece_mb:g} MB (reading and JSON parsing not timed)",
            gigatoken_files="gigatoken reads and parses the JSONL file itself (timed)",
        ),
        results=results,
    )
    (out / "corpus_job.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = table(results)
    (out / "corpus_job.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
