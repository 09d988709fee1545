"""Multi-GPU scaling of encode_sharded: the batch split over 1 and over all visible GPUs.

    python3 benchmarks/sharded.py --out results/
    python3 benchmarks/sharded.py --processes 2 --out results/    # multi-host path, 1 GPU each

Each device gets `--rows` War and Peace excerpts of `--bytes` bytes (cl100k, exact mode), so
the work per device is the same at every device count (weak scaling). Timed: one jitted
encode_sharded call on device-resident, batch-sharded input, until its outputs are ready
(median of `--reps` after warm-up). Checked before timing: ids equal the one-device encode,
outputs stay sharded by rows, and the compiled program has no all-gather.

--processes N: the multi-host path on this machine. N processes join JAX's distributed
runtime on localhost (process k sees GPU k only; `--platform cpu`: one CPU device each, for
CI), each packs its own `--rows` excerpts and encodes them on its device with
`encode_process_local`, which assembles the global batch (`make_array_from_process_local_data`).
Timed: that call until the global ids are ready, median of `--reps` after warm-up, in every
process. Checked: every global row, gathered to every process, against tiktoken.
Writes sharded_multiprocess.json (one entry per process).
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import testing


def _texts(raw: bytes, n: int, size: int, first: int = 0) -> list[bytes]:
    return [raw[((first + i) * size) % (len(raw) - size) :][:size] for i in range(n)]


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps + 2):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


def process_main(args) -> int:
    """One process of --processes N (started by launch())."""
    jax.distributed.initialize(
        coordinator_address=f"localhost:{args.port}",
        num_processes=args.num_processes,
        process_id=args.process_id,
        initialization_timeout=120,
    )
    from jax.experimental import multihost_utils

    from blockbpe_jax.ops.sharding import encode_process_local, exit_distributed

    k, n_proc = jax.process_index(), jax.process_count()
    root = testing.data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
    raw = testing.read_corpus(root / "corpus" / "war_and_peace_en.txt")
    raw = raw.decode("utf-8", "ignore").encode()
    rows = args.rows * jax.local_device_count()
    mine = _texts(raw, rows, args.bytes, first=k * rows)
    mine = [t.decode("utf-8", "ignore").encode() for t in mine]  # whole characters
    data, lengths = bb.pack_strings(mine, max_len=args.bytes)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    tables = tok.tables(device=jax.local_devices()[0])

    def run():
        return encode_process_local((data, lengths), tables, mesh, max_tokens=args.bytes, check_lengths=False)

    out = run()
    s = _median_time(run, args.reps)
    ids = np.asarray(multihost_utils.process_allgather(out.ids, tiled=True))
    counts = np.asarray(multihost_utils.process_allgather(out.counts, tiled=True))
    enc = testing.tiktoken_oracle("cl100k", tok, tok.vocab.pattern)
    errors, bad = [], 0
    for p in range(n_proc):  # process p's rows are global rows p*rows ...
        texts = [t.decode("utf-8", "ignore").encode() for t in _texts(raw, rows, args.bytes, first=p * rows)]
        for j, t in enumerate(texts):
            ref = enc.encode_ordinary(t.decode("utf-8"))
            g = p * rows + j
            if int(counts[g]) != len(ref) or ids[g, : len(ref)].tolist() != ref:
                bad += 1
                if len(errors) < 5:
                    errors.append(f"global row {g}: count {int(counts[g])} vs {len(ref)}")
    report = {
        "process_id": k,
        "process_count": n_proc,
        "device": str(jax.local_devices()[0]),
        "device_kind": jax.local_devices()[0].device_kind,
        "local_device_count": jax.local_device_count(),
        "rows_per_process": rows,
        "bytes": args.bytes,
        "global_shape": list(out.ids.shape),
        "median_s": s,
        "MB_per_s_global": round(rows * n_proc * args.bytes / s / 1e6, 1),
        "rows_checked": int(ids.shape[0]),
        "mismatched_rows": bad,
        "errors": errors,
    }
    multihost_utils.sync_global_devices("sharded benchmark done")
    pathlib.Path(args.worker_out).write_text(json.dumps(report))
    exit_distributed(0 if bad == 0 else 1)


def launch(args) -> int:
    """--processes N: starts the N processes, merges their reports."""
    from blockbpe_jax.ops.sharding import run_local_processes

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sharded_mp_"))

    def argv_for(k, port):
        return [
            sys.executable,
            __file__,
            "--port",
            str(port),
            "--process-id",
            str(k),
            "--num-processes",
            str(args.processes),
            "--worker-out",
            str(tmp / f"{k}.json"),
            "--rows",
            str(args.rows),
            "--bytes",
            str(args.bytes),
            "--reps",
            str(args.reps),
        ]

    def env_for(k):
        env = dict(os.environ)
        if args.platform == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(k)
        else:
            env["JAX_PLATFORMS"] = "cpu"
        return env

    codes, logs = run_local_processes(
        argv_for, args.processes, log_dir=tmp, timeout_s=args.timeout, env_for=env_for
    )
    for k, log in enumerate(logs):
        print(f"--- process {k} (exit {None if codes is None else codes[k]}) ---\n{log[-1500:]}")
    if codes != [0] * args.processes:
        return 1
    per = [json.loads((tmp / f"{k}.json").read_text()) for k in range(args.processes)]
    result = {
        "processes": args.processes,
        "platform": args.platform,
        "jax": jax.__version__,
        "vocab": "cl100k",
        "mode": "exact",
        "timed": "encode_process_local (each process: pack its rows, encode on its "
        "device, assemble the global batch) until the global ids are ready",
        "ids_equal_tiktoken": all(p["mismatched_rows"] == 0 for p in per),
        "per_process": per,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "per_process"}))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sharded_multiprocess.json").write_text(json.dumps(result, indent=1))
    return 0 if result["ids_equal_tiktoken"] else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--rows", type=int, default=1024, help="strings per device")
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--processes", type=int, default=0, help="run the multi-host path with this many local processes"
    )
    parser.add_argument("--platform", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.port is not None:
        return process_main(args)
    if args.processes:
        return launch(args)
    gpus = jax.devices("gpu")
    root = testing.data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    rows = []
    for n_dev in sorted({1, len(gpus)}):
        batch = args.rows * n_dev
        texts = [raw[(i * args.bytes) % (len(raw) - args.bytes) :][: args.bytes] for i in range(batch)]
        data, lengths = bb.pack_strings(texts, max_len=args.bytes)
        mesh = jax.sharding.Mesh(np.array(gpus[:n_dev]), ("data",))
        tables = bb.ops.sharding.replicate(tok.tables(), mesh)
        rows_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        d, l = jax.device_put(data, rows_sharding), jax.device_put(lengths, rows_sharding)
        f = jax.jit(
            lambda d, l, t: tuple(
                bb.encode_sharded(  # noqa: E731
                    d, l, t, mesh, max_tokens=args.bytes, check_lengths=False
                )
            )
        )
        hlo = f.lower(d, l, tables).compile().as_text()
        ids, counts = f(d, l, tables)
        ref = bb.encode(
            jax.device_put(data, gpus[0]), jax.device_put(lengths, gpus[0]), tok, max_tokens=args.bytes
        )
        same = np.array_equal(np.asarray(ids), np.asarray(ref.ids)) and np.array_equal(
            np.asarray(counts), np.asarray(ref.counts)
        )
        times = []
        for _ in range(args.reps + 2):
            t = time.perf_counter()
            out = f(d, l, tables)
            out[0].block_until_ready()
            times.append(time.perf_counter() - t)
        s = statistics.median(times[2:])
        row = {
            "devices": n_dev,
            "batch": batch,
            "bytes": args.bytes,
            "median_s": s,
            "MB_per_s_total": round(batch * args.bytes / s / 1e6, 1),
            "MB_per_s_per_device": round(batch * args.bytes / s / 1e6 / n_dev, 1),
            "ids_equal_one_device_encode": bool(same),
            "output_sharding": str(ids.sharding.spec),
            "all_gather_in_hlo": "all-gather" in hlo,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sharded.json").write_text(
            json.dumps(
                {
                    "device": gpus[0].device_kind,
                    "n_gpus": len(gpus),
                    "jax": jax.__version__,
                    "vocab": "cl100k",
                    "mode": "exact",
                    "timed": "one jitted encode_sharded call, "
                    "device-resident batch-sharded input, until ids are ready",
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0 if all(r["ids_equal_one_device_encode"] and not r["all_gather_in_hlo"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
