"""The GPU fuzz campaign: N generated strings per tokenizer family, encoded by blockbpe_jax in
large batches on the device, every row compared with the family's reference library.

    python3 benchmarks/fuzz_campaign.py [--families KEY,...] [--strings 1000000] [--seed 0]
        [--kernel default|piece] [--device gpu|cpu] [--out DIR] [--time-budget S]
        [--threads N] [--jobs J] [--batch-bytes B] [--corrupt] [--list]

Families (--list prints the keys; benchmarks/fuzz_families.py says what each is checked
against): the shared vocabularies from their .tiktoken files (r50k, cl100k, o200k, llama3) and
their tokenizer.json HF ports (gpt2_hf, cl100k_hf, o200k_hf, llama3_hf), and the families
benchmarks/families.py builds or finds (Qwen2's split with and without NFC, Lowercase, and
where their packages or files are there DeepSeek-V3, Mistral Tekken, SentencePiece BPE, GGUF).
Default: every family found. Strings: benchmarks/fuzz_strings.py (lengths 0 .. 64 KiB, mostly
short; the mix is in its docstring and in the JSON); each gets one of its family's variants
(exact mode with no / all / some specials allowed, exact and bytes mode on invalid UTF-8,
bytes mode) by the variant's share.

Batches: strings are grouped by (variant, width), width the smallest of WIDTHS that holds the
string, about --batch-bytes a batch (the last one padded with empty rows), so that each
family compiles one encode per (mode, width). A worker thread encodes a batch on the device
and computes the reference on host threads (tiktoken's *_batch with --threads, HF's
encode_batch; invalid UTF-8 one string at a time), a second worker the next batch, while the
main thread generates the next strings. A row matches when its count equals the reference's
number of tokens, its ids equal the reference's and the rest of the row is padding (0). Normalizing families: rows the device reports by design (count -2: see
Tokenizer.encode_batch) are encoded again by Tokenizer.encode_batch and counted as host_rows.
--corrupt adds 1 to one id of every batch before the comparison: a check of the checker.
--jobs J checks J families at once, each in a process of its own (run_jobs): a family's
generation, invalid-UTF-8 oracles and comparison hold one Python interpreter, so on a host of
many cores several families side by side use them.

Writes DIR/fuzz_campaign.json after every family: per family strings, bytes, mismatches (and
the first KEEP_MISMATCHES inputs, base64, for reproduction), seconds per stage, per variant;
the device, kernel, seed and mix. --time-budget stops generating when the run has used that
many seconds, compares what was generated, and records how many strings were done.
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures
import itertools
import json
import os
import pathlib
import random
import sys
import threading
import time
import zlib

HERE = pathlib.Path(__file__).resolve().parent
sys.path.append(str(HERE))  # (appended: tests importing this module keep their own `families`)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
import fuzz_strings  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from fuzz_families import FAMILY_KEYS, Family, Variant, bench_families, load_family  # noqa: E402

WIDTHS = (64, 256, 1024, 4096, 16384, fuzz_strings.MAX_LEN)
KEEP_MISMATCHES = 10


# ---------------------------------------------------------------------------------------------
# checking


def row_mismatches(ids: np.ndarray, counts: np.ndarray, refs: list[list[int]]) -> np.ndarray:
    """Indices of the rows whose count is not len(ref), whose ids (as many as the output
    holds) are not ref's, or whose padding after them is not 0 (encode's pad_id)."""
    T = ids.shape[1]
    ids = ids[: len(refs)]
    counts = counts[: len(refs)].astype(np.int64)
    ref_counts = np.fromiter(map(len, refs), np.int64, len(refs))
    same_count = counts == ref_counts
    kept = np.minimum(np.where(same_count, ref_counts, 0), T)
    ours = ids[np.arange(T)[None, :] < kept[:, None]]
    theirs = np.fromiter(
        itertools.chain.from_iterable(r if k == len(r) else r[:k] for r, k in zip(refs, kept.tolist())),
        np.int64,
        int(kept.sum()),
    )
    bad = ~same_count | ((ids != 0) & (np.arange(T)[None, :] >= np.clip(counts, 0, T)[:, None])).any(axis=1)
    bad[np.repeat(np.arange(len(refs)), kept)[ours != theirs]] = True
    return np.flatnonzero(bad)


def describe(family: Family, variant: Variant, width: int, index: int, raw: bytes, ours, ref) -> dict:
    """A mismatch as the JSON keeps it: enough to reproduce it (the input, base64) and see it."""
    k = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return {
        "family": family.key,
        "variant": variant.name,
        "width": width,
        "string": index,
        "bytes": len(raw),
        "input_base64": base64.b64encode(raw).decode("ascii"),
        "count": len(ours),
        "reference_count": len(ref),
        "first_difference": k,
        "ours": [int(x) for x in ours[max(0, k - 3) : k + 5]],
        "reference": [int(x) for x in ref[max(0, k - 3) : k + 5]],
    }


class Checker:
    """Encodes batches of one family on `device` and compares them with the reference."""

    def __init__(self, family: Family, device, corrupt: bool = False):
        self.family, self.device, self.corrupt = family, device, corrupt
        self.tables = {v.name: family.tok.tables(v.allowed, device=device) for v in family.variants}
        self._fns: dict = {}
        self._host_path = threading.Lock()  # one encode_batch at a time (its staging buffers)

    def _encode_fn(self, mode: str, T: int):
        key = (mode, T)
        if key not in self._fns:
            self._fns[key] = jax.jit(
                lambda d, l, tabs: tuple(bb.encode(d, l, tabs, max_tokens=T, mode=mode, check_lengths=False))
            )
        return self._fns[key]

    def check(self, variant: Variant, width: int, rows: int, items: list[tuple[int, bytes]]) -> dict:
        """One batch: `items` (index, string) packed into `rows` rows of `width` bytes."""
        strings = [s for _, s in items]
        t0 = time.perf_counter()
        data, lengths = bb.pack_strings(strings + [b""] * (rows - len(strings)), max_len=width)
        data, lengths = jax.device_put((data, lengths), self.device)
        out = self._encode_fn(variant.mode, width + 1)(data, lengths, self.tables[variant.name])
        t1 = time.perf_counter()
        refs = variant.reference(strings)  # on the host while the device encodes
        t2 = time.perf_counter()
        ids, counts = np.array(out[0])[: len(strings)], np.array(out[1])[: len(strings)]
        t3 = time.perf_counter()
        host_rows = self._reported_rows(variant, width, strings, ids, counts)
        corrupted = 0
        if self.corrupt:
            nonempty = np.flatnonzero(counts > 0)
            if nonempty.size:
                ids[nonempty[0], 0] += 1
                corrupted = 1
        bad = row_mismatches(ids, counts, refs)
        t4 = time.perf_counter()
        return {
            "variant": variant.name,
            "strings": len(strings),
            "bytes": sum(map(len, strings)),
            "mismatches": int(bad.size),
            "first": [
                describe(
                    self.family,
                    variant,
                    width,
                    items[i][0],
                    strings[i],
                    ids[i, : max(counts[i], 0)].tolist(),
                    refs[i],
                )
                for i in bad[:KEEP_MISMATCHES].tolist()
            ],
            "host_rows": host_rows,
            "truncated_rows": int((counts > width + 1).sum()),
            "corrupted_rows": corrupted,
            "encode_s": (t1 - t0) + (t3 - t2),
            "reference_s": t2 - t1,
            "compare_s": t4 - t3,
        }

    def _reported_rows(self, variant, width, strings, ids, counts) -> int:
        """Rows a normalizing family's device reports (count -2, by design) encoded again by
        Tokenizer.encode_batch (which normalizes on the host), in place; their number."""
        tok = self.family.tok
        reported = np.flatnonzero(counts == -2) if tok.normalizes and variant.mode == "exact" else []
        if len(reported):
            with self._host_path:
                again = tok.encode_batch(
                    [strings[i] for i in reported],
                    max_len=width,
                    max_tokens=ids.shape[1],
                    mode=variant.mode,
                    allowed_special=variant.allowed,
                    device=self.device,
                )
                ids[reported] = np.asarray(again.ids)
                counts[reported] = np.asarray(again.counts)
        return len(reported)


# ---------------------------------------------------------------------------------------------
# the campaign


def family_seed(seed: int, key: str) -> int:
    return seed * 1_000_003 + zlib.crc32(key.encode())


def run_family(
    family: Family, n: int, seed: int, device, corpora, deadline: float, batch_bytes: int, corrupt=False
):
    """Generates, encodes and checks `n` strings of `family` (fewer if `deadline`, a
    time.monotonic() value, passes first). Returns the family's summary."""
    t_start = time.perf_counter()
    checker = Checker(family, device, corrupt)
    source = fuzz_strings.StringSource(family_seed(seed, family.key), family.specials, corpora)
    pick = random.Random(family_seed(seed, family.key) ^ 0x5EED)
    variants, shares = family.variants, [v.share for v in family.variants]
    rows = {w: max(16, min(16384, batch_bytes // w)) for w in WIDTHS}
    buckets: dict = collections.defaultdict(list)
    pending: collections.deque = collections.deque()
    results: list[dict] = []
    generate_s, done, stopped = 0.0, 0, False
    # Two workers: one batch's reference in Python (invalid UTF-8) overlaps another's on
    # tiktoken's or HF's threads.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as worker:

        def submit(key):
            variant, width = key
            pending.append(worker.submit(checker.check, variant, width, rows[width], buckets.pop(key)))
            while len(pending) > 4:
                results.append(pending.popleft().result())

        for i in range(n):
            if i % 512 == 0:
                if time.monotonic() > deadline:
                    stopped = True
                    break
                if i and i % max(512, n // 10 // 512 * 512) == 0:
                    print(
                        f"  {family.key}: {i} strings generated, {time.perf_counter() - t_start:.0f} s",
                        flush=True,
                    )
            t = time.perf_counter()
            variant = pick.choices(variants, shares)[0]
            s = source.draw(invalid=variant.invalid)
            key = (variant, next(w for w in WIDTHS if len(s) <= w))
            buckets[key].append((i, s))
            generate_s += time.perf_counter() - t
            done = i + 1
            if len(buckets[key]) == rows[key[1]]:
                submit(key)
        for key in list(buckets):
            submit(key)
        while pending:
            results.append(pending.popleft().result())
    summary = {
        "family": family.key,
        "tokenizer": family.tok.vocab.name,
        "reference": family.reference,
        "strings": sum(r["strings"] for r in results),
        "strings_requested": n,
        "complete": not stopped,
        "bytes": sum(r["bytes"] for r in results),
        "mismatches": sum(r["mismatches"] for r in results),
        "batches": len(results),
        "host_rows": sum(r["host_rows"] for r in results),
        "truncated_rows": sum(r["truncated_rows"] for r in results),
        "corrupted_rows": sum(r["corrupted_rows"] for r in results),
        "seconds": time.perf_counter() - t_start,
        "generate_s": generate_s,
        "encode_s": sum(r["encode_s"] for r in results),
        "reference_s": sum(r["reference_s"] for r in results),
        "compare_s": sum(r["compare_s"] for r in results),
        "variants": {},
        "first_mismatches": [m for r in results for m in r["first"]][:KEEP_MISMATCHES],
    }
    assert summary["strings"] == done
    for v in variants:
        mine = [r for r in results if r["variant"] == v.name]
        summary["variants"][v.name] = {
            "mode": v.mode,
            "allowed": v.allowed if isinstance(v.allowed, str) else sorted(v.allowed),
            "invalid_utf8": v.invalid,
            "share": v.share,
            "strings": sum(r["strings"] for r in mine),
            "bytes": sum(r["bytes"] for r in mine),
            "mismatches": sum(r["mismatches"] for r in mine),
            "reference_s": sum(r["reference_s"] for r in mine),
        }
    return summary


def mix() -> dict:
    """The generator's mix, as recorded in the JSON."""
    return {
        "length_classes": [
            {"share": share, "bytes": [lo, hi]} for share, lo, hi in fuzz_strings.LENGTH_CLASSES
        ],
        "segments": [
            {"weight": w, "kind": kind, "longest": limit} for w, kind, limit in fuzz_strings.SEGMENTS
        ],
        "widths": list(WIDTHS),
        "generator": "benchmarks/fuzz_strings.py",
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILY_KEYS), help="comma-separated keys (--list)")
    ap.add_argument("--strings", type=int, default=1_000_000, help="strings per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--kernel",
        default=None,
        help="default, or a BLOCKBPE_KERNEL value (piece); unset: as the environment says",
    )
    ap.add_argument("--device", choices=["default", "gpu", "cpu"], default="default")
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--time-budget", type=float, default=float("inf"), help="seconds for the whole run")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="tiktoken's reference threads")
    ap.add_argument(
        "--batch-bytes", type=int, default=None, help="bytes a batch (default 4 MiB; CPU 256 KiB)"
    )
    ap.add_argument("--corrupt", action="store_true", help="add 1 to one id per batch: the check must fail")
    ap.add_argument("--jobs", type=int, default=1, help="families checked at once, each in its own process")
    ap.add_argument("--list", action="store_true", help="print the family keys and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(FAMILY_KEYS))
        return 0
    keys = [k for k in args.families.split(",") if k]
    unknown = [k for k in keys if k not in FAMILY_KEYS]
    if unknown:
        ap.error(f"unknown families {unknown}; known: {', '.join(FAMILY_KEYS)}")
    deadline = time.monotonic() + args.time_budget
    if args.jobs > 1:
        return run_jobs(args, keys, deadline)
    device = jax.devices()[0] if args.device == "default" else jax.devices(args.device)[0]
    batch_bytes = args.batch_bytes or (256 << 10 if device.platform == "cpu" else 4 << 20)
    previous_kernel = os.environ.get("BLOCKBPE_KERNEL")
    if args.kernel is not None:
        bench_families().select_kernel(args.kernel)
    try:
        return _run(args, keys, deadline, device, batch_bytes)
    finally:  # the environment as it was (the CUDA handler reads it per call)
        os.environ.pop("BLOCKBPE_KERNEL", None)
        if previous_kernel is not None:
            os.environ["BLOCKBPE_KERNEL"] = previous_kernel


def _run(args, keys, deadline, device, batch_bytes) -> int:
    """main's campaign: every family in `keys` in turn; the JSON after each."""
    root = testing.data_dir()
    corpora = [testing.read_corpus(p) for p in testing.corpus_paths(root)]
    report = {
        "tool": "benchmarks/fuzz_campaign.py",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device.device_kind,
        "platform": device.platform,
        "jax": jax.__version__,
        "kernel": os.environ.get("BLOCKBPE_KERNEL") or "default",
        "seed": args.seed,
        "strings_per_family": args.strings,
        "time_budget_s": args.time_budget,
        "reference_threads": args.threads,
        "batch_bytes": batch_bytes,
        "corrupt": args.corrupt,
        "mix": mix(),
        "families": [],
    }

    def save():
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "fuzz_campaign.json").write_text(json.dumps(report, indent=1))

    for key in keys:
        if time.monotonic() > deadline:
            report["families"].append({"family": key, "skipped": "time budget spent"})
            continue
        t = time.perf_counter()
        family = load_family(root, key, args.threads)
        if family is None:
            report["families"].append({"family": key, "skipped": "its files or packages are not there"})
            print(f"{key}: skipped (files or packages not there)", flush=True)
            continue
        row = run_family(
            family, args.strings, args.seed, device, corpora, deadline, batch_bytes, args.corrupt
        )
        row["load_s"] = time.perf_counter() - t - row["seconds"]
        report["families"].append(row)
        print_family(row)
        save()
    save()
    return finish(report, args)


def print_family(row: dict) -> None:
    print(
        f"{row['family']}: {row['strings']} strings ({row['bytes'] / 1e6:.1f} MB), {row['mismatches']} "
        f"mismatches, {row['seconds']:.1f} s (generate {row['generate_s']:.1f}, encode {row['encode_s']:.1f}, "
        f"reference {row['reference_s']:.1f}, compare {row['compare_s']:.1f}), host rows {row['host_rows']}"
        + ("" if row["complete"] else " [time budget: stopped early]"),
        flush=True,
    )
    for m in row["first_mismatches"][:3]:
        print("  MISMATCH", json.dumps(m)[:400], flush=True)


def finish(report: dict, args) -> int:
    """Prints the total; the exit status: 1 where a row mismatched (unless --corrupt asked
    for it) or a family's process failed."""
    total = sum(f.get("mismatches", 0) for f in report["families"])
    failed = [f["family"] for f in report["families"] if "error" in f]
    print(
        f"total: {sum(f.get('strings', 0) for f in report['families'])} strings, {total} mismatches"
        + (f"; failed: {failed}" if failed else ""),
        flush=True,
    )
    return 1 if (total and not args.corrupt) or failed else 0


def run_jobs(args, keys: list[str], deadline: float) -> int:
    """--jobs J: each family in a process of its own (this script with --jobs 1), J at a time,
    with --threads / J reference threads and the time left, so that the Python parts of J
    families (generation, invalid-UTF-8 oracles, comparison) run side by side. The processes
    share the GPU: JAX allocates as needed there (XLA_PYTHON_CLIENT_PREALLOCATE=false). Their
    JSONs (DIR/parts/KEY/) are merged into DIR/fuzz_campaign.json in the order of `keys`."""
    import subprocess
    import tempfile

    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="fuzz_campaign_"))
    threads = max(1, args.threads // args.jobs)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", RAYON_NUM_THREADS=str(threads))
    rows: dict[str, dict] = {}
    base: dict = {}  # the first family's report: device, kernel, seed, mix
    waiting, running = list(keys), {}
    while waiting or running:
        while waiting and len(running) < args.jobs:
            key = waiting.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                rows[key] = {"family": key, "skipped": "time budget spent"}
                continue
            part = out / "parts" / key
            part.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, __file__, "--families", key, "--strings", str(args.strings)]
            argv += ["--seed", str(args.seed), "--device", args.device, "--out", str(part)]
            argv += ["--threads", str(threads), "--time-budget", str(left)]
            argv += ["--kernel", args.kernel] if args.kernel is not None else []
            argv += ["--batch-bytes", str(args.batch_bytes)] if args.batch_bytes else []
            argv += ["--corrupt"] if args.corrupt else []
            log = open(part / "fuzz_campaign.log", "w")  # noqa: SIM115 - closed when the process ends
            running[key] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log, part)
        time.sleep(0.2)
        for key, (proc, log, part) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[key]
            try:
                child = json.loads((part / "fuzz_campaign.json").read_text())
                rows[key] = child["families"][0]
                base = base or child
            except (OSError, ValueError, IndexError):
                rows[key] = {
                    "family": key,
                    "error": f"exit {proc.returncode}",
                    "log": str(part / "fuzz_campaign.log"),
                }
            if "strings" in rows[key]:
                print_family(rows[key])
            else:
                print(f"{key}: {rows[key]}", flush=True)
    report = dict(base, families=[rows[k] for k in keys], jobs=args.jobs)
    report.update(time_budget_s=args.time_budget, reference_threads=threads, corrupt=args.corrupt)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz_campaign.json").write_text(json.dumps(report, indent=1))
    return finish(report, args)


if __name__ == "__main__":
    sys.exit(main())
