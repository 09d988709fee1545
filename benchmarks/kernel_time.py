"""GPU time of the encode kernel on a few fixed shapes, for comparing kernel variants quickly.

    python3 benchmarks/kernel_time.py [--label NAME] [--out DIR]

Device-resident (bytes already on the GPU, ids left there), the same measurement as
run_all.py's "device" column: a chain of calls in one executable, median per call. Every shape
is first checked against tiktoken (ids and counts); a mismatch is reported and the shape is
not timed. Writes DIR/kernel_time_<label>.json. `scripts/gpu_check.sh variants` runs it once
per kernel variant.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from blockbpe_jax.vocab import KNOWN_PATTERNS  # noqa: E402
from harness import Ours, compare_rows, device_time, excerpts  # noqa: E402

SHAPES = [("cl100k", 1024, 4096), ("cl100k", 1024, 512), ("cl100k", 64, 512), ("o200k", 1024, 4096)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="kernel")
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--block-size", type=int, default=256)
    args = ap.parse_args(argv)
    root = testing.data_dir()
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    dev = jax.devices()[0]
    rows = []
    for vocab, B, L in SHAPES:
        tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[vocab][0])
        enc = testing.tiktoken_oracle(vocab, tok, KNOWN_PATTERNS[vocab])
        texts = excerpts(raw, B, L)
        ours = Ours(bb, tok, dev, vocab)
        data, lengths = ours.put(*bb.pack_strings(texts, max_len=L))
        f = ours.fn("exact", args.block_size, L)
        ids, counts = (np.asarray(x) for x in f(data, lengths)[:2])
        ok, why = compare_rows(ids, counts, enc.encode_ordinary_batch(texts), L)
        row = {"vocab": vocab, "batch": B, "bytes": L, "equal_to_tiktoken": ok, "check": why}
        if ok:
            g = ours.fn("exact", args.block_size, L, chain=Ours.CHAIN)
            m = device_time(g, data, lengths, chain=Ours.CHAIN, target_s=1.0)
            total = sum(len(t.encode("utf-8")) for t in texts)
            row.update(
                device_us=m["s"] * 1e6,
                device_min_us=m["min_s"] * 1e6,
                reps=m["reps"],
                device_MBps=total / m["s"] / 1e6,
            )
        rows.append(row)
        print(args.label, json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"kernel_time_{args.label}.json").write_text(
            json.dumps(
                {
                    "label": args.label,
                    "device": dev.device_kind,
                    "jax": jax.__version__,
                    "block_size": args.block_size,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
