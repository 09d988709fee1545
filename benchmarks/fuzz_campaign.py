"""The GPU fuzz campaign: N generated strings per tokenizer family, encoded by blockbpe_jax in
large batches on the device, every row compared with the family's reference library.

    python3 benchmarks/fuzz_campaign.py [--families KEY[=N],...] [--strings 1000000] [--seed 0]
        [--kernel default|piece] [--device default|gpu|cpu] [--out DIR] [--time-budget S]
        [--workers W] [--batch-bytes B] [--corrupt] [--list]

Families (--list prints the keys; benchmarks/fuzz_families.py says what each is checked
against): the shared vocabularies from their .tiktoken files (r50k, cl100k, o200k, llama3) and
their tokenizer.json HF ports (gpt2_hf, cl100k_hf, o200k_hf, llama3_hf), and the families
benchmarks/families.py builds or finds (Qwen2's split with and without NFC, Lowercase, and
where their packages or files are there DeepSeek-V3, Mistral Tekken, SentencePiece BPE, GGUF).
Default: every family found, --strings each; KEY=N asks N strings of that family. Strings:
benchmarks/fuzz_strings.py (lengths 0 .. 64 KiB, mostly short; the mix is in its docstring and
in the JSON); each gets one of its family's variants (exact mode with no / all / some specials
allowed, exact and bytes mode on invalid UTF-8, bytes mode) by the variant's share.

Where the work goes. A pool of W processes (default: all cores but one) generates the strings
and computes the references, chunk by chunk (benchmarks/fuzz_chunks.py: a chunk's strings
depend on the seed, the family and the chunk's number alone; the references run there on one
thread each). This process takes the chunks in order and checks them on the device
(benchmarks/fuzz_check.py): strings grouped by (variant, width) into batches of about
--batch-bytes, encoded, compared with the references on the device, which returns a flag and
the count of each row. Device calls are asynchronous and the pool works CHUNKS_AHEAD chunks a
process ahead, so the device, this process and the pool work at the same time. A row matches
when its count equals the reference's number of tokens, its ids equal the reference's and the
rest of the row is padding (0). Normalizing families: rows the device reports by design
(count -2: see Tokenizer.encode_batch) are encoded again by Tokenizer.encode_batch and
compared on the host (host_rows). --corrupt adds 1 to the first id of one row of every batch
on the device before the comparison: a check of the checker.

Writes DIR/fuzz_campaign.json after every family (one JSON for the run): the run (device,
kernel, seed, chunk size, workers, mix, seconds) and per family strings, bytes, mismatches
(and the first KEEP_MISMATCHES with their input in base64 and the string's number, which
fuzz_chunks.regenerate makes again), seconds, per variant; a family whose files are not there
is recorded as skipped, one that raised with its error (the others go on). --time-budget stops
handing out chunks when the run has used that many seconds and stops waiting for those handed
out (a slow family's CHUNKS_AHEAD a process would outlast the budget) or checking them (a
family stopped early drops the batches it has not sent: stopping costs at most those in flight),
and records each family's strings checked by then (complete: false) or skipped.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.append(str(HERE))  # (appended: tests importing this module keep their own `families`)

import jax  # noqa: E402

import fuzz_chunks  # noqa: E402
import fuzz_check  # noqa: E402
import fuzz_strings  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from fuzz_families import FAMILY_KEYS, bench_families, load_family  # noqa: E402

# Chunks handed to the pool ahead of the one this process takes next, per pool process: enough
# that the pool keeps working while this process compiles a family's encodes (~6 MB each).
CHUNKS_AHEAD = 8


@contextlib.contextmanager
def _environment(values: dict):
    """os.environ with `values` while the block runs (what spawned processes inherit)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def campaign(
    plan: list[tuple[str, int]],
    seed: int,
    device,
    workers: int,
    deadline: float,
    batch_bytes: int,
    corrupt: bool = False,
    on_family=lambda row: None,
) -> list[dict]:
    """Checks `plan` ([(family key, strings)], in order) with a pool of `workers` processes;
    stops handing out chunks, and waiting for them, at `deadline` (time.monotonic()). Returns a row per family (its
    summary, why it was skipped, or the error that stopped it: one family's error does not stop
    the others); `on_family(row)` as each is done."""
    root = testing.data_dir()
    context = multiprocessing.get_context("spawn")  # (this process holds the device and threads)
    with _environment(fuzz_chunks.WORKER_ENV):
        pool = context.Pool(workers, fuzz_chunks.init_worker, (str(root),))
    # The families' tokenizers and references here, loaded in order on a thread of their own
    # while the pool starts and works (the pool's processes load each family themselves).
    loader = concurrent.futures.ThreadPoolExecutor(1)
    loading = {key: loader.submit(load_family, root, key, 1) for key, _ in plan}
    rows: dict[str, dict] = {}
    families: dict = {}
    checks: dict[str, fuzz_check.FamilyCheck] = {}

    def tasks():
        for key, n in plan:
            family = loading[key].result()
            if family is None:
                rows[key] = {"family": key, "skipped": "its files or packages are not there"}
                print(f"{key}: skipped (files or packages not there)", flush=True)
                continue
            families[key] = (family, n)
            chunks = -(-n // fuzz_chunks.CHUNK)
            for c in range(chunks):
                yield (key, seed, c, min(fuzz_chunks.CHUNK, n - c * fuzz_chunks.CHUNK)), c == chunks - 1

    def done(key: str, complete: bool):
        rows[key] = checks.pop(key).finish(complete)
        print_family(rows[key])
        on_family(rows[key])

    pending = tasks()
    in_flight: collections.deque = collections.deque()
    stopped, failed = False, set()
    try:
        while True:
            while not stopped and len(in_flight) < CHUNKS_AHEAD * workers:
                task = next(pending, None) if time.monotonic() < deadline else None
                if task is not None and task[0][0] in failed:
                    continue
                if task is None:
                    stopped = time.monotonic() >= deadline
                    break
                in_flight.append((task, pool.apply_async(fuzz_chunks.run_chunk, task[0])))
            if not in_flight:
                break
            ((key, _, c, _), last), result = in_flight.popleft()
            if key in failed:
                continue
            left = deadline - time.monotonic()
            result.wait(None if left == float("inf") else max(left, 0.0))
            if not result.ready() or time.monotonic() >= deadline:
                break  # the budget is spent: the chunks still in flight are dropped
            try:
                chunk = result.get()
                if key not in checks:
                    family, n = families[key]
                    checks[key] = fuzz_check.FamilyCheck(family, n, device, batch_bytes, corrupt)
                checks[key].add_chunk(chunk)
                if last:
                    done(key, complete=True)
            except Exception as e:  # this family's error, recorded; the other families go on
                failed.add(key)
                checks.pop(key, None)
                rows[key] = {"family": key, "error": f"{type(e).__name__}: {e}"}
                print(f"{key}: FAILED: {rows[key]['error']}", flush=True)
                on_family(rows[key])
                continue
            if c and c % 50 == 0 and key in checks:
                print(
                    f"  {key}: {c * fuzz_chunks.CHUNK} strings, {checks[key].tally['strings']} checked",
                    flush=True,
                )
        for key in list(checks):  # a time budget spent in the middle of these
            done(key, complete=False)
    finally:
        pool.terminate()
        pool.join()
        for future in loading.values():
            future.cancel()
        loader.shutdown()
    for key, _ in plan:
        rows.setdefault(key, {"family": key, "skipped": "time budget spent"})
    return [rows[key] for key, _ in plan]


def mix() -> dict:
    """The generator's mix, as recorded in the JSON."""
    return {
        "length_classes": [
            {"share": share, "bytes": [lo, hi]} for share, lo, hi in fuzz_strings.LENGTH_CLASSES
        ],
        "segments": [
            {"weight": w, "kind": kind, "longest": limit} for w, kind, limit in fuzz_strings.SEGMENTS
        ],
        "widths": list(fuzz_chunks.WIDTHS),
        "generator": "benchmarks/fuzz_strings.py",
    }


def parse_plan(text: str, strings: int) -> list[tuple[str, int]]:
    """--families: "KEY[=N],..." -> [(key, strings)] (N: this family's, else `strings`).
    Raises ValueError naming an unknown key or a bad count."""
    plan = []
    for item in filter(None, text.split(",")):
        key, _, n = item.partition("=")
        if key not in FAMILY_KEYS:
            raise ValueError(f"unknown family {key!r}; known: {', '.join(FAMILY_KEYS)}")
        if n and not (n.isdigit() and int(n) > 0):
            raise ValueError(f"family {key}: the count {n!r} is not a positive integer")
        plan.append((key, int(n) if n else strings))
    return plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILY_KEYS), help="KEY[=N],... (--list)")
    ap.add_argument("--strings", type=int, default=1_000_000, help="strings per family (no =N)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--kernel",
        default=None,
        help="default, or a BLOCKBPE_KERNEL value (block, piece); unset: as the environment says",
    )
    ap.add_argument("--device", choices=["default", "gpu", "cpu"], default="default")
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--time-budget", type=float, default=float("inf"), help="seconds for the whole run")
    ap.add_argument(
        "--workers",
        type=int,
        default=max(1, (os.cpu_count() or 2) - 1),
        help="processes generating strings and computing references (default: the cores but one)",
    )
    ap.add_argument(
        "--batch-bytes", type=int, default=None, help="bytes a device batch (default 16 MiB; CPU 256 KiB)"
    )
    ap.add_argument("--corrupt", action="store_true", help="add 1 to one id per batch: the check must fail")
    ap.add_argument("--list", action="store_true", help="print the family keys and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(FAMILY_KEYS))
        return 0
    try:
        plan = parse_plan(args.families, args.strings)
    except ValueError as e:
        ap.error(str(e))
    if args.workers < 1:
        ap.error(f"--workers must be at least 1, got {args.workers}")
    deadline = time.monotonic() + args.time_budget
    device = jax.devices()[0] if args.device == "default" else jax.devices(args.device)[0]
    batch_bytes = args.batch_bytes or (256 << 10 if device.platform == "cpu" else 16 << 20)
    previous_kernel = os.environ.get("BLOCKBPE_KERNEL")
    if args.kernel is not None:
        bench_families().select_kernel(args.kernel)
    try:
        return _run(args, plan, deadline, device, batch_bytes)
    finally:  # the environment as it was (the CUDA handler reads it per call)
        os.environ.pop("BLOCKBPE_KERNEL", None)
        if previous_kernel is not None:
            os.environ["BLOCKBPE_KERNEL"] = previous_kernel


def _run(args, plan, deadline, device, batch_bytes) -> int:
    """main's campaign; the JSON after each family and at the end."""
    t0 = time.perf_counter()
    report = {
        "tool": "benchmarks/fuzz_campaign.py",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device.device_kind,
        "platform": device.platform,
        "jax": jax.__version__,
        "kernel": os.environ.get("BLOCKBPE_KERNEL") or "default",
        "seed": args.seed,
        "chunk_strings": fuzz_chunks.CHUNK,
        "plan": [{"family": key, "strings": n} for key, n in plan],
        "time_budget_s": args.time_budget,
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "batch_bytes": batch_bytes,
        "corrupt": args.corrupt,
        "mix": mix(),
        "families": [],
    }

    def save(row=None):
        if row is not None:
            report["families"].append(row)
        report["seconds"] = time.perf_counter() - t0
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "fuzz_campaign.json").write_text(json.dumps(report, indent=1))

    rows = campaign(plan, args.seed, device, args.workers, deadline, batch_bytes, args.corrupt, save)
    report["families"] = rows
    save()
    return finish(report, args)


def print_family(row: dict) -> None:
    print(
        f"{row['family']}: {row['strings']} strings ({row['bytes'] / 1e6:.1f} MB), {row['mismatches']} "
        f"mismatches, {row['seconds']:.1f} s (pool: generate {row['pool_generate_s']:.0f}, reference "
        f"{row['pool_reference_s']:.0f} core-s; here: send {row['send_s']:.1f}, wait {row['wait_s']:.1f} s), "
        f"host rows {row['host_rows']}" + ("" if row["complete"] else " [time budget: stopped early]"),
        flush=True,
    )
    for m in row["first_mismatches"][:3]:
        print("  MISMATCH", json.dumps(m)[:400], flush=True)


def finish(report: dict, args) -> int:
    """Prints the total; the exit status: 1 where a row mismatched (unless --corrupt asked
    for it) or a family failed."""
    total = sum(f.get("mismatches", 0) for f in report["families"])
    failed = [f["family"] for f in report["families"] if "error" in f]
    print(
        f"total: {sum(f.get('strings', 0) for f in report['families'])} strings, {total} mismatches, "
        f"{report['seconds']:.0f} s" + (f"; failed: {failed}" if failed else ""),
        flush=True,
    )
    return 1 if (total and not args.corrupt) or failed else 0


if __name__ == "__main__":
    sys.exit(main())
