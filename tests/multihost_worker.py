"""One process of the 2-process multi-host check (tests/ops/test_multihost.py starts two of these).

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=2 \\
        python3 tests/multihost_worker.py --port 12345 --process-id K --num-processes 2 --out rK.json

Joins JAX's distributed runtime on localhost, takes its shard of a fixed list of texts (War and
Peace excerpts, mixed-script fragments, an empty string), tokenizes it on its own devices with
`encode_process_local`, then gathers the GLOBAL ids/counts to every process
(`multihost_utils.process_allgather`, a cross-process all-gather over the CPU collectives) and
compares every row, both processes' rows, with tiktoken. Writes a JSON report; exit 1 on any
difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

MAX_LEN, MAX_TOKENS = 512, 96


def texts_for_test() -> list[bytes]:
    """The fixed global list (identical in every process): 35 texts of 0..~500 bytes, split 18 + 17."""
    from blockbpe_jax import testing

    raw = testing.read_corpus(testing.data_dir() / "corpus" / "war_and_peace_en.txt")[:60000]
    texts = testing.excerpts(raw, 1, 480, seed=9)[:29]
    frags = testing.TEXT_FRAGMENTS
    texts += [" ".join(frags[i::5]).encode() for i in range(5)]  # scripts, digits, emoji, ...
    return texts + [b""]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.perf_counter()

    import jax

    if "jax_cpu_collectives_implementation" in jax.config.values:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{args.port}",
        num_processes=args.num_processes,
        process_id=args.process_id,
        initialization_timeout=90,
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    import blockbpe_jax as bb
    from blockbpe_jax import testing
    from blockbpe_jax.ops.sharding import encode_process_local, exit_distributed, process_shard

    report = {
        "process_id": jax.process_index(),
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "jax": jax.__version__,
        "errors": [],
    }
    errors = report["errors"]
    t_init = time.perf_counter()

    name = "cl100k"
    tok = bb.Tokenizer.from_file(testing.data_dir() / "vocab" / testing.VOCAB_FILES[name][0])
    enc = testing.tiktoken_oracle(name, tok, tok.vocab.pattern)
    texts = texts_for_test()
    refs = [enc.encode_ordinary(t.decode("utf-8")) for t in texts]
    if not any(len(r) > MAX_TOKENS for r in refs):
        errors.append("no text is truncated: the check of counts > T is not exercised")

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    mine = process_shard(texts)
    rows = -(-len(texts) // jax.process_count())  # the same in every process
    rows += rows % jax.local_device_count()
    t_enc = time.perf_counter()
    out = encode_process_local(mine, tok, mesh, max_len=MAX_LEN, max_tokens=MAX_TOKENS, rows=rows)
    jax.block_until_ready(out)
    t_enc = time.perf_counter() - t_enc

    # The global arrays: shapes, sharding, which rows live here.
    b = rows * jax.process_count()
    want = NamedSharding(mesh, P("data"))
    for label, a, shape in (("ids", out.ids, (b, MAX_TOKENS)), ("counts", out.counts, (b,))):
        if a.shape != shape or not a.sharding.is_equivalent_to(want, a.ndim):
            errors.append(f"{label}: shape {a.shape} sharding {a.sharding}, want {shape} {want}")
        if a.is_fully_addressable or len(a.addressable_shards) != jax.local_device_count():
            errors.append(f"{label}: not a global array over both processes")
        for s in a.addressable_shards:
            if s.device.process_index != jax.process_index():
                errors.append(f"{label}: shard on {s.device}, another process's device")
    report["global_shape"] = {"ids": list(out.ids.shape), "counts": list(out.counts.shape)}
    report["spec"] = [str(x) for x in out.ids.sharding.spec]
    report["local_rows"] = sorted([s.index[0].start, s.index[0].stop] for s in out.ids.addressable_shards)
    report["rows_per_process"], report["local_texts"] = rows, len(mine)

    # Every process sees every row (an all-gather across processes) and checks all of them.
    ids = np.asarray(multihost_utils.process_allgather(out.ids, tiled=True))
    counts = np.asarray(multihost_utils.process_allgather(out.counts, tiled=True))
    total = int(jax.jit(lambda c: jnp.sum(c), out_shardings=NamedSharding(mesh, P()))(out.counts))
    report["gathered_shape"] = list(ids.shape)
    report["total_tokens_jit"], report["total_tokens_ref"] = total, sum(map(len, refs))
    if total != report["total_tokens_ref"]:
        errors.append(f"jitted global sum of counts {total} != {report['total_tokens_ref']}")

    def compare(ids, counts, tag):
        bad = 0
        for p in range(jax.process_count()):
            shard = process_shard(list(range(len(texts))), process_index=p)
            for j in range(rows):
                g = p * rows + j
                ref = refs[shard[j]] if j < len(shard) else []  # padding rows: empty
                got = ids[g, : min(int(counts[g]), MAX_TOKENS)].tolist()
                if int(counts[g]) != len(ref) or got != ref[:MAX_TOKENS]:
                    bad += 1
                    if len(errors) < 10:
                        errors.append(
                            f"{tag}: global row {g} (process {p}, local {j}): count "
                            f"{int(counts[g])} vs {len(ref)}; ids {got[:8]} vs {ref[:8]}"
                        )
        return bad

    report["mismatched_rows"] = compare(ids, counts, "Tokenizer")
    report["rows_checked"] = b
    report["truncated_rows"] = int((counts > MAX_TOKENS).sum())

    # The other input form: packed host arrays and EncodeTables on one local device.
    data, lengths = bb.pack_strings(mine, max_len=MAX_LEN)
    out2 = encode_process_local(
        (data, lengths), tok.tables(device=jax.local_devices()[0]), mesh, max_tokens=MAX_TOKENS, rows=rows
    )
    report["mismatched_rows_tables"] = compare(
        np.asarray(multihost_utils.process_allgather(out2.ids, tiled=True)),
        np.asarray(multihost_utils.process_allgather(out2.counts, tiled=True)),
        "EncodeTables",
    )

    report["equal_to_tiktoken"] = (
        not errors and report["mismatched_rows"] == 0 and report["mismatched_rows_tables"] == 0
    )
    report["seconds"] = {
        "initialize": round(t_init - t0, 2),
        "encode": round(t_enc, 3),
        "total": round(time.perf_counter() - t0, 2),
    }
    multihost_utils.sync_global_devices("blockbpe multihost check done")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))
    exit_distributed(0 if report["equal_to_tiktoken"] else 1)


if __name__ == "__main__":
    sys.exit(main())
