"""The corpus job with its blocks split on the device (the option device_split,
corpus/device_split.py) and without, alternated on the same corpus, ids compared:
`benchmarks/corpus_job.py --device-split both` runs it on that benchmark's corpora."""

from __future__ import annotations

import random
import shutil

import numpy as np

from corpus_peers import MB, compare
from harness import Clock, cpu_per_gb


def run_device_split_ab(label, path, texts, nbytes, tok, ps, work, args, read_flat) -> dict:
    """The job in process with the device split off and on, alternated (--device-split both):
    `path`'s JSONL (field "text", its documents `texts`, `nbytes` bytes), with `tok`; ps: the
    peers (their tiktoken anchors the first call's ids); read_flat(prefix) -> (ids, counts) of
    flat shards. Returns the runs' times, host CPU and whether their ids equal the first's."""
    print(f"[{label}] {len(texts)} documents, {nbytes / MB:.1f} MB: device split off / on", flush=True)
    r: dict = dict(corpus=label, documents=len(texts), bytes=nbytes)

    def arrays(on: bool):
        got, offsets = tok.encode_files_to_arrays([path], jsonl_field="text", device_split=on)
        return got, np.diff(offsets)

    def shards(on: bool):
        out = work / f"{label}_split_{on}"
        tok.encode_files([path], out / "shard", jsonl_field="text", overwrite=True, device_split=on)
        return out

    ref = None  # (ids, counts) of the first call, option off
    for api, call in (("encode_files_to_arrays", arrays), ("encode_files", shards)):
        for rep in range(1 + args.reps):
            for on in (False, True):
                with Clock() as clock:
                    got = call(on)
                if api == "encode_files":
                    # (compared on the last run only: reading the shards back is not the job's)
                    got = read_flat(got / "shard") if rep == args.reps else None
                    if got is not None:
                        shutil.rmtree(work / f"{label}_split_{on}", ignore_errors=True)
                if ref is None:
                    ref = got
                    r["tokens"] = int(len(ref[0]))
                diff = "" if got is None else compare(f"{api} device_split={on}", got, *ref)
                del got
                e = r.setdefault(
                    f"{api} device_split={'on' if on else 'off'}", dict(runs_s=[], runs_cpu_s=[])
                )
                e["runs_s"].append(clock.wall)
                e["runs_cpu_s"].append(clock.cpu)
                e["ids_equal_off"] = e.get("ids_equal_off", True) and not diff
                if diff:
                    e["detail"] = diff
                print(
                    f"  {api} device_split={on} {'cold' if rep == 0 else 'warm'}: {clock.wall:.2f} s "
                    f"({nbytes / clock.wall / MB:.1f} MB/s, {cpu_per_gb(clock.cpu, nbytes):.1f} CPU-s/GB)"
                    + (f" DIFFERS: {diff}" if diff else ""),
                    flush=True,
                )
    for e in r.values():
        if isinstance(e, dict) and "runs_s" in e:
            warm, cpus = sorted(e["runs_s"][1:]), sorted(e["runs_cpu_s"][1:])
            if warm:
                e.update(
                    cold_s=e["runs_s"][0],
                    warm_s=warm[len(warm) // 2],
                    MBps=nbytes / warm[len(warm) // 2] / MB,
                    cpu_s_per_GB=cpu_per_gb(cpus[len(cpus) // 2], nbytes),
                )
    # the reference run anchored to tiktoken on a sample
    rng = random.Random(3)
    sample = sorted(rng.sample(range(len(texts)), min(len(texts), args.reference_sample)))
    ids, counts = ref
    if len(counts) != len(texts):
        r["error"] = f"the job gave {len(counts)} documents, the corpus has {len(texts)}"
        return r
    ends = np.concatenate([[0], np.cumsum(counts)])
    want = ps.reference.encode_ordinary_batch([texts[i] for i in sample], num_threads=ps.threads)
    bad = [i for i, w in zip(sample, want) if ids[ends[i] : ends[i + 1]].tolist() != w]
    r["reference_sample"] = dict(documents=len(sample), equal_to_tiktoken=not bad)
    return r


def device_split_table(results: list[dict]) -> str:
    lines = [
        "corpus | documents | MB | path | cold s | warm s | MB/s (warm) | host CPU-s/GB | ids equal off",
        "---|---:|---:|---|---:|---:|---:|---:|---",
    ]
    for r in results:
        head = f"{r['corpus']} | {r['documents']} | {r['bytes'] / MB:.0f}"
        for name, e in r.items():
            if isinstance(e, dict) and "warm_s" in e:
                lines.append(
                    f"{head} | {name} | {e['cold_s']:.2f} | {e['warm_s']:.2f} | {e['MBps']:.1f} | "
                    f"{e['cpu_s_per_GB']:.1f} | {e['ids_equal_off']}"
                )
        if "reference_sample" in r:
            lines.append(
                f"{head} | first call's sample equal to tiktoken | | | | | {r['reference_sample']['equal_to_tiktoken']}"
            )
        if "error" in r:
            lines.append(f"{head} | ERROR: {r['error']} | | | | | |")
    return "\n".join(lines) + "\n"
