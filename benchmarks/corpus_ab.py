"""The corpus job's A/B runs: sets of options alternated on the same corpus in one process, ids
compared (`run_options_ab`: the device split off and on, pack widths), and an NFC tokenizer's job
with NFC on the host, on the device, and on the device with the device split, next to the same
vocabulary without a normalizer (`run_nfc_ab`). `benchmarks/corpus_job.py --device-split both`
and `--pack-widths W,W` run them on that benchmark's corpora."""

from __future__ import annotations

import random
import shutil

import numpy as np

from corpus_peers import MB, compare
from harness import Clock, cpu_per_gb


# The device split off and on (--device-split both), the first the reference.
DEVICE_SPLIT_VARIANTS = (
    ("device_split=off", dict(device_split=False)),
    ("device_split=on", dict(device_split=True)),
)


def pack_width_variants(widths: list[int]) -> tuple:
    """(name, options) of each pack width (--pack-widths), the first the reference."""
    return tuple((f"pack_width={w}", dict(pack_width=w)) for w in widths)


def run_options_ab(label, path, texts, nbytes, tok, ps, work, args, read_flat, variants) -> dict:
    """The job in process under each of `variants` ((name, encode_files options) pairs),
    alternated: `path`'s JSONL (field "text", its documents `texts`, `nbytes` bytes), with
    `tok`; ps: the peers (their tiktoken anchors the first call's ids); read_flat(prefix) ->
    (ids, counts) of flat shards. Returns the runs' times, host CPU and whether their ids equal
    the first variant's first call's."""
    names = " / ".join(name for name, _ in variants)
    print(f"[{label}] {len(texts)} documents, {nbytes / MB:.1f} MB: {names}", flush=True)
    r: dict = dict(corpus=label, documents=len(texts), bytes=nbytes)

    window = {"window_bytes": int(args.window_mb * (1 << 20))} if args.window_mb else {}
    r["window_bytes"] = window.get("window_bytes", "default")

    def arrays(k: int):
        got, offsets = tok.encode_files_to_arrays([path], jsonl_field="text", **variants[k][1], **window)
        return got, np.diff(offsets)

    def shards(k: int):
        out = work / f"{label}_variant_{k}"
        tok.encode_files(
            [path], out / "shard", jsonl_field="text", overwrite=True, **variants[k][1], **window
        )
        return out

    ref = None  # (ids, counts) of the first call, the first variant
    for api, call in (("encode_files_to_arrays", arrays), ("encode_files", shards)):
        for rep in range(1 + args.reps):
            for k, (name, _) in enumerate(variants):
                with Clock() as clock:
                    got = call(k)
                if api == "encode_files":
                    # (compared on the last run only: reading the shards back is not the job's)
                    got = read_flat(got / "shard") if rep == args.reps else None
                    if got is not None:
                        shutil.rmtree(work / f"{label}_variant_{k}", ignore_errors=True)
                if ref is None:
                    ref = got
                    r["tokens"] = int(len(ref[0]))
                diff = "" if got is None else compare(f"{api} {name}", got, *ref)
                del got
                _record(r, f"{api} {name}", clock, diff, rep, nbytes)
    _summarize(r, nbytes)
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


def normalizing_tokenizers() -> dict:
    """{"nfc", "lower", "plain": Tokenizer}: llama3's tokenizer.json with Qwen2's split
    (benchmarks/nfc_throughput.py's) with an NFC normalizer, a Lowercase one, and none."""
    import blockbpe_jax as bb
    from blockbpe_jax.vocab.hf_json import vocab_from_tokenizer_json
    from nfc_throughput import tokenizer_doc

    return {
        name: bb.Tokenizer(
            vocab_from_tokenizer_json(tokenizer_doc(None if name == "plain" else name), f"llama3-{name}")
        )
        for name in ("nfc", "lower", "plain")
    }


# A normalizing tokenizer's job (encode_files_to_arrays): where its normalizer runs, and the split
NFC_VARIANTS = (
    ("nfc host, split off", "nfc", dict(device_normalizer=False, device_split=False)),
    ("nfc device, split off", "nfc", dict(device_split=False)),
    ("nfc device, split on", "nfc", dict(device_split=True)),
    ("lower host, split off", "lower", dict(device_normalizer=False, device_split=False)),
    ("lower device, split off", "lower", dict(device_split=False)),
    ("lower device, split on", "lower", dict(device_split=True)),
    ("no normalizer, split off", "plain", dict(device_split=False)),
    ("no normalizer, split on", "plain", dict(device_split=True)),
)


def run_nfc_ab(label, path, texts, nbytes, args) -> dict:
    """The normalizing tokenizers' jobs in process on `path` (field "text"): NFC_VARIANTS
    alternated, the first round cold, the median of --reps warm; each normalizer's runs' ids
    compared with its host run's, the plain ones' with each other; the ratios of P12's
    must-show 2 (the normalizer on the device over the same vocabulary without one, split on
    and off). The corpus is in NFC but for
    the odd document (War and Peace's mojibake, WikiText): the device checks every row."""
    toks = normalizing_tokenizers()
    print(f"[{label}] NFC / Lowercase tokenizers: {len(texts)} documents, {nbytes / MB:.1f} MB", flush=True)
    r: dict = dict(corpus=f"{label} (llama3 + NFC / Lowercase)", documents=len(texts), bytes=nbytes)
    refs: dict = {}
    for rep in range(1 + args.reps):
        for name, which, options in NFC_VARIANTS:
            with Clock() as clock:
                ids, offsets = toks[which].encode_files_to_arrays([path], jsonl_field="text", **options)
            got = (ids, np.diff(offsets))
            ref = refs.setdefault(which, got)
            diff = compare(name, got, *ref) if got is not ref else ""
            del got, ids, offsets
            _record(r, name, clock, diff, rep, nbytes)
    _summarize(r, nbytes)
    for which in ("nfc", "lower"):
        for split in ("off", "on"):
            norm, plain = r.get(f"{which} device, split {split}"), r.get(f"no normalizer, split {split}")
            if norm and plain and "warm_s" in norm and "warm_s" in plain:
                r[f"{which}_over_plain_split_{split}"] = plain["warm_s"] / norm["warm_s"]
    return r


def _record(r: dict, name: str, clock, diff: str, rep: int, nbytes: int) -> None:
    """One timed run of `name` into r[name] (its wall and CPU seconds, whether its ids equal the
    reference's), printed."""
    e = r.setdefault(name, dict(runs_s=[], runs_cpu_s=[]))
    e["runs_s"].append(clock.wall)
    e["runs_cpu_s"].append(clock.cpu)
    e["ids_equal"] = e.get("ids_equal", True) and not diff
    if diff:
        e["detail"] = diff
    print(
        f"  {name} {'cold' if rep == 0 else 'warm'}: {clock.wall:.2f} s "
        f"({nbytes / clock.wall / MB:.1f} MB/s, {cpu_per_gb(clock.cpu, nbytes):.1f} CPU-s/GB)"
        + (f" DIFFERS: {diff}" if diff else ""),
        flush=True,
    )


def _summarize(r: dict, nbytes: int) -> None:
    """Each path's cold run, warm median, MB/s and host CPU-s/GB, from its runs."""
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


def ab_table(results: list[dict]) -> str:
    lines = [
        "corpus | documents | MB | path | cold s | warm s | MB/s (warm) | host CPU-s/GB | ids equal the first's",
        "---|---:|---:|---|---:|---:|---:|---:|---",
    ]
    for r in results:
        head = f"{r['corpus']} | {r['documents']} | {r['bytes'] / MB:.0f}"
        for name, e in r.items():
            if isinstance(e, dict) and "warm_s" in e:
                lines.append(
                    f"{head} | {name} | {e['cold_s']:.2f} | {e['warm_s']:.2f} | {e['MBps']:.1f} | "
                    f"{e['cpu_s_per_GB']:.1f} | {e['ids_equal']}"
                )
        if "reference_sample" in r:
            lines.append(
                f"{head} | first call's sample equal to tiktoken | | | | | {r['reference_sample']['equal_to_tiktoken']}"
            )
        for which, label in (("nfc", "NFC"), ("lower", "Lowercase")):
            for split in ("off", "on"):
                if f"{which}_over_plain_split_{split}" in r:
                    lines.append(
                        f"{head} | {label} device / no normalizer, split {split} (warm) | | | "
                        f"{r[f'{which}_over_plain_split_{split}']:.0%} | | |"
                    )
        if "error" in r:
            lines.append(f"{head} | ERROR: {r['error']} | | | | | |")
    return "\n".join(lines) + "\n"
