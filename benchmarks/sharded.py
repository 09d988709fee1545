"""Multi-GPU scaling of encode_sharded: the batch split over 1 and over all visible GPUs.

    python3 benchmarks/sharded.py --out results/

Each device gets `--rows` War and Peace excerpts of `--bytes` bytes (cl100k, exact mode), so
the work per device is the same at every device count (weak scaling). Timed: one jitted
encode_sharded call on device-resident, batch-sharded input, until its outputs are ready
(median of `--reps` after warm-up). Checked before timing: ids equal the one-device encode,
outputs stay sharded by rows, and the compiled program has no all-gather.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import testing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--rows", type=int, default=1024, help="strings per device")
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    gpus = jax.devices("gpu")
    root = testing.data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    rows = []
    for n_dev in sorted({1, len(gpus)}):
        batch = args.rows * n_dev
        texts = [raw[(i * args.bytes) % (len(raw) - args.bytes):][:args.bytes] for i in range(batch)]
        data, lengths = bb.pack_strings(texts, max_len=args.bytes)
        mesh = jax.sharding.Mesh(np.array(gpus[:n_dev]), ("data",))
        tables = bb.sharding.replicate(tok.tables(), mesh)
        rows_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        d, l = jax.device_put(data, rows_sharding), jax.device_put(lengths, rows_sharding)
        f = jax.jit(lambda d, l, t: tuple(bb.encode_sharded(  # noqa: E731
            d, l, t, mesh, max_tokens=args.bytes, check_lengths=False)))
        hlo = f.lower(d, l, tables).compile().as_text()
        ids, counts = f(d, l, tables)
        ref = bb.encode(jax.device_put(data, gpus[0]), jax.device_put(lengths, gpus[0]), tok,
                        max_tokens=args.bytes)
        same = (np.array_equal(np.asarray(ids), np.asarray(ref.ids))
                and np.array_equal(np.asarray(counts), np.asarray(ref.counts)))
        times = []
        for _ in range(args.reps + 2):
            t = time.perf_counter()
            out = f(d, l, tables)
            out[0].block_until_ready()
            times.append(time.perf_counter() - t)
        s = statistics.median(times[2:])
        row = {"devices": n_dev, "batch": batch, "bytes": args.bytes, "median_s": s,
               "MB_per_s_total": round(batch * args.bytes / s / 1e6, 1),
               "MB_per_s_per_device": round(batch * args.bytes / s / 1e6 / n_dev, 1),
               "ids_equal_one_device_encode": bool(same),
               "output_sharding": str(ids.sharding.spec),
               "all_gather_in_hlo": "all-gather" in hlo}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sharded.json").write_text(json.dumps(
            {"device": gpus[0].device_kind, "n_gpus": len(gpus), "jax": jax.__version__,
             "vocab": "cl100k", "mode": "exact", "timed": "one jitted encode_sharded call, "
             "device-resident batch-sharded input, until ids are ready", "rows": rows}, indent=1))
    return 0 if all(r["ids_equal_one_device_encode"] and not r["all_gather_in_hlo"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
