"""Single long strings: ours (one row, the GPU) vs tiktoken (one thread), prose and adversarial.

    python3 benchmarks/long_rows.py [--out DIR] [--vocab cl100k] [--max-mib 8]

One string per call, as the issue's single-string scaling asks: War and Peace prose from 128 B
to --max-mib MiB, and adversarial strings (runs of one letter, random letters a-j, spaces,
digits, whitespace with newlines, CJK, emoji, base64) at 64 KiB and 1 MiB. Ours: the bytes
already on the device, `bb.encode` jitted, median wall time per call (dispatch included);
tiktoken: `encode_ordinary` in the same process. Ids are checked equal first; a mismatch is
recorded and the case is not timed. An adversarial kind whose 64 KiB call takes longer than
--slow-s is not run at 1 MiB (its time there is what item 2 of the issue is about); cases not
started within --deadline-s are skipped (both recorded as skipped).
Writes DIR/long_rows.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from run_all import measure  # noqa: E402

KIB = 1024


def prose(raw: bytes, n: int) -> bytes:
    while len(raw) < n:
        raw += raw
    s = raw[:n]
    while s and s[-1] >= 0x80:
        s = s[:-1]
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--vocab", default="cl100k")
    ap.add_argument("--max-mib", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--slow-s", type=float, default=0.5)
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="cases not started within this many seconds are skipped")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    root = testing.data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[args.vocab][0])
    enc = testing.tiktoken_oracle(args.vocab, tok, tok.vocab.pattern)
    dev = jax.devices()[0]
    tables = tok.tables(device=dev)
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    # (in order of interest, for --deadline-s: 1 MiB of prose, every adversarial kind at 64 KiB
    # then at 1 MiB, then the larger prose)
    cases = [("prose", prose(raw, n)) for n in [128, 4 * KIB, 64 * KIB, 256 * KIB, KIB * KIB]]
    rng = random.Random(0)
    for n in (64 * KIB, 1024 * KIB):
        cases += [(kind, testing.ADVERSARIAL[kind](rng, n)) for kind in testing.ADVERSARIAL]
    cases += [("prose", prose(raw, m * KIB * KIB)) for m in (2, 4, 8, 16, 32, 64) if m <= args.max_mib]
    rows, slow = [], set()
    meta = {"device": str(dev.device_kind), "vocab": args.vocab, "block_size": args.block_size,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    def save(rows):
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "long_rows.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    for kind, text in cases:
        n = len(text)
        late = time.perf_counter() - start > args.deadline_s
        if kind in slow or late:
            why = "past the deadline" if late else f"64 KiB took more than {args.slow_s} s"
            rows.append({"kind": kind, "bytes": n, "skipped": why})
            print(json.dumps(rows[-1]), flush=True)
            save(rows)
            continue
        L = max(16, n)
        data, lengths = bb.pack_strings([text], max_len=L)
        data, lengths = jax.device_put(data, dev), jax.device_put(lengths, dev)
        f = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=L, block_size=args.block_size))
        t0 = time.perf_counter()
        ids, counts = (np.asarray(x) for x in f(data, lengths, tables))
        first_s = time.perf_counter() - t0
        ref = enc.encode_ordinary(text.decode("utf-8"))
        equal = int(counts[0]) == len(ref) and ids[0, :len(ref)].tolist() == ref
        row = {"kind": kind, "bytes": n, "tokens": len(ref), "equal_to_tiktoken": equal,
               "first_call_s": first_s}
        if equal:
            m = measure(lambda: f(data, lengths, tables)[0].block_until_ready(), target_s=0.5)
            s = enc.encode_ordinary(text.decode("utf-8"))  # (warm)
            t_m = measure(lambda: enc.encode_ordinary(text.decode("utf-8")), target_s=0.5,
                          min_reps=3, max_reps=20)
            row.update(ours_s=m["s"], ours_MBps=n / m["s"] / 1e6, tiktoken_s=t_m["s"],
                       tiktoken_MBps=n / t_m["s"] / 1e6, speedup=t_m["s"] / m["s"])
            del s
            if kind != "prose" and n <= 64 * KIB and m["s"] > args.slow_s:
                slow.add(kind)
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(rows)  # after every case: a run cut short keeps what it measured
    return 0 if all(r.get("equal_to_tiktoken", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
