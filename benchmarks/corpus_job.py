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
               loading the first one's executables (~/.cache/blockbpe_jax/executables;
               BLOCKBPE_XLA_CACHE=0 turns it off)
  encode_files `Tokenizer.encode_files` in-process (reading, parsing, encode, writing); "cold"
               is the first call (compiles its shapes), "warm" the median of --reps more
  encode_files_to_arrays  the same job with its ids left in memory (warm), as gigatoken_files's
  tokie, gigatoken (encode_batch), tiktoken (encode_ordinary_batch, --threads threads):
               given the decoded list[str] (reading and JSON parsing NOT timed), fed in pieces
               of --piece-mb MB; the time is the sum of the encode calls only
  gigatoken_files  gigatoken's `encode_files(JsonlFileSource([CORPUS], field="text"))`:
               reads and parses the file itself (timed, like our cli; the median of --reps);
               its result stays in memory (an awkward array), nothing is written
  gigatoken_command  gigatoken as a command of its own, our cli's counterpart: a fresh
               interpreter that imports it, loads the vocabulary, runs encode_files and writes
               the ids and document offsets flat (.bin/.idx); wall time of everything
Every peer's ids are compared with the cli's shards, flat arrays and per-document counts, on
all documents. A peer that does not import is "unavailable"; one whose time exceeds
--peer-budget-s or that is skipped by a size rule (tiktoken above --tiktoken-max-mb) is
"not run" (nothing is extrapolated). Writes DIR/corpus_job.json and DIR/corpus_job.txt.
The corpora are built by corpora.py, the peers are run by corpus_peers.py.

--device-split on / off: everything above with the corpus job's blocks split on the device or
on the host (BLOCKBPE_DEVICE_SPLIT=1 / 0, corpus/device_split.py; the cli's processes inherit
it); without it, the job's default (on where the device is a GPU).
--device-split both: only the in-process job with the option off and on, alternated on the
same corpora (encode_files_to_arrays, and encode_files writing flat shards): the first call
of each compiles ("cold"), the median of --reps warm calls after it; every result's ids and
offsets compared with the first call's (option off), whose sample is checked against
tiktoken; no cli and no peers. Then, on --nfc-corpora (default mixed), an NFC tokenizer's job
(llama3's vocabulary, Qwen2's split, NFC) with NFC on the host, on the device, and on the
device with the split, and the same vocabulary without a normalizer, split off and on
(benchmarks/corpus_ab.py: run_nfc_ab; NFC runs' ids compared with the host NFC
run's). Writes DIR/corpus_job_device_split.json and .txt.
--pack-widths W,W,...: only the in-process job with each pack width, alternated as above (the
first width's first call the reference); the device split as --device-split on / off says, else
the job's default. Writes DIR/corpus_job_pack_widths.json and .txt.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import peers as peer_lib  # noqa: E402
from corpora import build_long, build_mixed, source_texts  # noqa: E402

# re-exported: benchmarks/corpus_reader.py imports it from corpus_job
from corpora import unique_documents  # noqa: E402, F401
from corpus_ab import DEVICE_SPLIT_VARIANTS, ab_table, pack_width_variants, run_nfc_ab, run_options_ab  # noqa: E402
from corpus_peers import MB, compare, run_peers  # noqa: E402
from harness import Clock, cpu_per_gb, run_command  # noqa: E402

from blockbpe_jax.testing import data_dir  # noqa: E402


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
    p = run_command(cmd, timeout)
    if p["timed_out"]:
        return dict(status=f"not run to the end (over {timeout:.0f} s)", command=" ".join(cmd))
    if p["returncode"] != 0:
        return dict(
            status=f"failed (exit {p['returncode']}): {p['stderr'].strip()[-500:]}", command=" ".join(cmd)
        )
    meta = json.loads((out / "shard.json").read_text())
    return dict(
        status="ok",
        command=" ".join(cmd),
        wall_s=p["wall_s"],
        cpu_s=p["cpu_s"],
        peak_rss_bytes=p["peak_rss_bytes"],
        job_s=meta["seconds"],
        tokens=meta["tokens"],
        documents=meta["documents"],
        stdout=p["stdout"].strip(),
        output_bytes=output_bytes(out / "shard"),
    )


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
    # again: with the job's executables kept on disk (on unless BLOCKBPE_XLA_CACHE=0), the
    # second process loads the first one's instead of compiling them
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
        cpu_s_per_GB=cpu_per_gb(cli["cpu_s"], nbytes),
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

    def shards_api():
        out = work / f"{label}_api"
        tok.encode_files([path], out / "shard", jsonl_field="text", overwrite=True)
        return out

    def read_shards_api(out):  # (after the timing: reading 1 GB back is not the job's)
        got = read_flat(out / "shard")
        shutil.rmtree(out, ignore_errors=True)
        return got

    def arrays_api():
        got, offsets = tok.encode_files_to_arrays([path], jsonl_field="text")
        return got, np.diff(offsets)

    # encode_files: cold (its first call compiles) and warm; encode_files_to_arrays warm (the
    # engine's executables are shared, so its first call is warm)
    r["encode_files"] = time_api(
        "encode_files",
        shards_api,
        ["cold"] + ["warm"] * args.reps,
        ids,
        counts,
        nbytes,
        args,
        load=read_shards_api,
    )
    r["encode_files_to_arrays"] = time_api(
        "encode_files_to_arrays", arrays_api, ["warm"] * args.reps, ids, counts, nbytes, args
    )
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
    if "MBps" in r["peers"].get("gigatoken_command", {}):  # command for command
        r["cli_over_peer_command"] = cli["MBps"] / r["peers"]["gigatoken_command"]["MBps"]
    shutil.rmtree(work / f"{label}_cli", ignore_errors=True)
    return r


def time_api(name, call, runs, ids, counts, nbytes, args, load=None) -> dict:
    """{run: seconds (the median of that run's), MB/s, every run, ids equal the cli's}. Only
    `call` is timed; `load` (when given) turns its result into (ids, counts) afterwards."""
    res: dict = {}
    for run in runs:
        with Clock() as clock:
            got = call()
        secs = clock.wall
        if load is not None:
            got = load(got)
        diff = compare(name, got, ids, counts)
        del got
        times = res.get(run, {}).get("runs_s", []) + [secs]
        cpus = res.get(run, {}).get("runs_cpu_s", []) + [clock.cpu]
        med = sorted(times)[len(times) // 2]
        res[run] = dict(
            seconds=med,
            MBps=nbytes / med / MB,
            cpu_s_per_GB=cpu_per_gb(sorted(cpus)[len(cpus) // 2], nbytes),
            runs_s=times,
            runs_cpu_s=cpus,
            ids_equal_cli=not diff and res.get(run, {}).get("ids_equal_cli", True),
            **({"detail": diff} if diff else {}),
        )
        print(
            f"  {name} {run}: {secs:.2f} s ({nbytes / secs / MB:.1f} MB/s)"
            + (f" DIFFERS: {diff}" if diff else ""),
            flush=True,
        )
        if secs > args.peer_budget_s:
            break
    return res


def table(results: list[dict]) -> str:
    lines = [
        "corpus | documents | MB | path | seconds | MB/s | host CPU-s/GB | M tokens/s | note",
        "---|---:|---:|---|---:|---:|---:|---:|---",
    ]
    for r in results:
        head = f"{r['corpus']} | {r['documents']} | {r['bytes'] / MB:.0f}"
        cli = r["cli"]
        if cli.get("status") != "ok":
            lines.append(f"{head} | ours cli | | | | | {cli.get('status')}")
            continue
        lines.append(
            f"{head} | ours cli (all incl. start-up, writing) | {cli['wall_s']:.2f} | "
            f"{cli['MBps']:.1f} | {cli['cpu_s_per_GB']:.1f} | {cli['Mtokens_per_s']:.2f} | {cli['output_bytes_per_token']:.2f} "
            f"output bytes/token; job alone {cli['job_s']:.2f} s"
        )
        again = r.get("cli_second_run", {})
        if again.get("status") == "ok":
            lines.append(
                f"{head} | ours cli, second process (compilation cache) | {again['wall_s']:.2f} | "
                f"{again['MBps']:.1f} | {cpu_per_gb(again['cpu_s'], r['bytes']):.1f} | {r['tokens'] / again['wall_s'] / 1e6:.2f} | job alone "
                f"{again['job_s']:.2f} s; ids equal first run: {again['ids_equal_first']}"
            )
        for api, what in (("encode_files", "writing shards"), ("encode_files_to_arrays", "ids in memory")):
            for run, e in r.get(api, {}).items():
                lines.append(
                    f"{head} | ours {api} ({run}; {what}) | {e['seconds']:.2f} | {e['MBps']:.1f} | "
                    f"{e['cpu_s_per_GB']:.1f} | {r['tokens'] / e['seconds'] / 1e6:.2f} | ids equal cli: {e['ids_equal_cli']}"
                )
        for name, p in r.get("peers", {}).items():
            if "MBps" in p:
                lines.append(
                    f"{head} | {name} | {p['seconds']:.2f} | {p['MBps']:.1f} | "
                    f"{p.get('cpu_s_per_GB', float('nan')):.1f} | {p['Mtokens_per_s']:.2f} | ids equal ours"
                )
            else:
                lines.append(f"{head} | {name} | | | | | {p.get('status')} {p.get('detail', '')}")
        if "cli_over_fastest_peer" in r:
            lines.append(f"{head} | cli / fastest peer | | {r['cli_over_fastest_peer']:.2f}x | | | |")
        if "cli_over_peer_command" in r:
            lines.append(f"{head} | cli / gigatoken_command | | {r['cli_over_peer_command']:.2f}x | | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the mixed corpus (GB)")
    ap.add_argument("--long-docs", type=int, default=120, help="documents of the long corpus")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--piece-mb", type=float, default=64, help="peers get the texts in pieces of this size")
    ap.add_argument("--peer-budget-s", type=float, default=60)
    ap.add_argument(
        "--reps", type=int, default=3, help="warm runs of encode_files (ours, gigatoken's): the median"
    )
    ap.add_argument("--cli-timeout-s", type=float, default=240)
    ap.add_argument("--tiktoken-max-mb", type=float, default=256)
    ap.add_argument(
        "--reference-sample", type=int, default=2000, help="documents also checked against tiktoken directly"
    )
    ap.add_argument("--corpora", default="mixed,long")
    ap.add_argument("--workdir", help="where the corpora go (default: a temporary directory)")
    ap.add_argument(
        "--device-split",
        choices=("off", "on", "both"),
        help="the job's blocks split on the device: off, on (the whole benchmark), both (only "
        "the in-process job off and on, ids compared); default: the job's (on on a GPU)",
    )
    ap.add_argument(
        "--pack-widths",
        help="W,W,...: only the in-process job with each pack width, alternated, ids compared",
    )
    ap.add_argument(
        "--window-mb",
        type=float,
        default=0,
        help="with --device-split both or --pack-widths: the in-process jobs' window_bytes in MiB "
        "(0: the job's default)",
    )
    ap.add_argument(
        "--nfc-corpora",
        default="mixed",
        help="with --device-split both: the corpora the NFC tokenizer's job also runs on (its "
        "NFC on the host, on the device, with the split; the vocabulary without a normalizer)",
    )
    args = ap.parse_args()
    widths = [int(w) for w in args.pack_widths.split(",")] if args.pack_widths else None
    if widths and args.device_split == "both":
        ap.error("--pack-widths and --device-split both are two benchmarks: run one at a time")
    if args.device_split in ("on", "off"):  # (before anything reads it; the cli's processes inherit it)
        os.environ["BLOCKBPE_DEVICE_SPLIT"] = "1" if args.device_split == "on" else "0"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.data = data_dir()
    vocab = args.data / "vocab" / peer_lib.FILES["cl100k"][0]

    import jax

    import blockbpe_jax as bb
    from blockbpe_jax.corpus.device_split import wanted

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
            if widths:
                variants = pack_width_variants(widths)
                results.append(
                    run_options_ab(label, path, texts, nbytes, tok, ps, work, args, read_flat, variants)
                )
            elif args.device_split == "both":
                results.append(
                    run_options_ab(
                        label, path, texts, nbytes, tok, ps, work, args, read_flat, DEVICE_SPLIT_VARIANTS
                    )
                )
                if label in args.nfc_corpora.split(","):
                    results.append(run_nfc_ab(label, path, texts, nbytes, args))
            else:
                results.append(run_corpus(label, path, texts, nbytes, tok, ps, vocab, work, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    split = wanted(None, jax.devices()[0])  # (the option as the jobs not told otherwise run it)
    if widths or args.device_split == "both":
        name = "corpus_job_pack_widths" if widths else "corpus_job_device_split"
        doc = dict(
            benchmark=name,
            vocab="cl100k",
            device=str(jax.devices()[0]),
            cpu_count=os.cpu_count(),
            build_s=build_s,
            reps=args.reps,
            device_split=split if widths else "both",
            results=results,
        )
        (out / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
        text = ab_table(results)
        (out / f"{name}.txt").write_text(text)
        print(text)
        return
    doc = dict(
        benchmark="corpus_job",
        vocab="cl100k",
        device=str(jax.devices()[0]),
        xla_compilation_cache=os.environ.get("BLOCKBPE_XLA_CACHE", "1") != "0",
        device_split=split,
        threads=args.threads,
        cpu_count=os.cpu_count(),
        build_s=build_s,
        timing_notes=dict(
            cli="wall time of the whole command (start-up, vocabulary, reading, JSON, "
            "encode, writing shards)",
            encode_files="in-process, reading + JSON + encode + writing shards",
            encode_files_to_arrays="in-process, reading + JSON + encode, ids in memory (flat "
            "array + offsets)",
            peers="encode calls only, on the decoded list[str] in pieces of "
            f"{args.piece_mb:g} MB (reading and JSON parsing not timed)",
            gigatoken_files="gigatoken reads and parses the JSONL file itself (timed); its "
            "result stays in memory (an awkward array), nothing is written",
            gigatoken_command="a fresh process: import, vocabulary, encode_files, ids and offsets "
            "written flat (.bin/.idx); wall time of everything, like our cli's",
        ),
        results=results,
    )
    (out / "corpus_job.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = table(results)
    (out / "corpus_job.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
