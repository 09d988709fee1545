#!/usr/bin/env python3
"""The host's normalizer (`tables.sets.normalize_texts`, what `Tokenizer.normalize` and the
rows the device reports go through) on War and Peace excerpts, per step order: cl100k's
tokenizer.json with its "normalizer" replaced by NFC, Lowercase, and a Sequence of both in
either order. Run by hand; no GPU needed.

    python3 benchmarks/host_normalize.py [--rows 1024] [--bytes 4096] [--reps 5]

Prints the median ms of --reps calls after a warm-up, per step order, and checks the output
equal to `normalizer.apply` per text.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from blockbpe_jax.testing import data_dir  # noqa: E402
from harness import excerpts  # noqa: E402

NORMALIZERS = {
    "nfc": {"type": "NFC"},
    "lowercase": {"type": "Lowercase"},
    "nfc,lowercase": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
    "lowercase,nfc": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "NFC"}]},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import tokenizers

    import blockbpe_jax as bb
    from blockbpe_jax.pretok import normalizer
    from blockbpe_jax.tables import sets

    raw = (data_dir() / "corpus" / "war_and_peace_en.txt").read_bytes()
    texts = excerpts(raw, args.rows, args.bytes)
    mib = sum(len(t.encode("utf-8")) for t in texts) / (1 << 20)
    doc = json.loads((data_dir() / "vocab" / "cl100k_hf" / "tokenizer.json").read_bytes())
    print(f"{args.rows} excerpts of {args.bytes} bytes ({mib:.2f} MiB)")
    for name, config in NORMALIZERS.items():
        doc["normalizer"] = config
        tok = bb.Tokenizer.from_hf(tokenizers.Tokenizer.from_str(json.dumps(doc)))
        norm = tok.vocab.pretokenizer.normalizer
        got = sets.normalize_texts(norm, texts)  # (warm-up: tables built, module loaded)
        assert got == [normalizer.apply(norm, t) for t in texts], name
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            sets.normalize_texts(norm, texts)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"{name:>15}: {1e3 * times[len(times) // 2]:8.1f} ms")


if __name__ == "__main__":
    main()
