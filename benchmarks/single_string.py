#!/usr/bin/env python3
"""One string per call, 128 B .. 64 MiB, prose and adversarial inputs, ours vs tiktoken.

    python3 benchmarks/single_string.py --out DIR [--max-mib 64] [--sizes 64K,1M] [--budget-s 5]
        [--cases prose,...] [--tiktoken-max 1M] [--block-size 256]

cl100k, exact mode. Cases (deterministic): prose (War and Peace, repeated), one letter
repeated, random letters a-j, spaces, digits, whitespace with newlines (" ", "\\t", "\\n"),
CJK, emoji, base64, apostrophes and letters ("'sS tl"), mixed scripts (one letter piece of
Latin, Cyrillic, Greek and CJK), a run of one letter after three others (run_in_piece), random
letters a-j with a run of 600 "z" across every 4096th byte (letters_runs: runs that start
inside the piece defeat the first round of the spans of huge pieces, ffi/core/span_stitch.h;
the second round, a span from a tile earlier, stitches them). Every case but prose, digits, base64 and apostrophes is one
pre-tokenizer piece of the whole string. Sizes 128 B, x4 up to 512 KiB, then 1 MiB, x4 to
--max-mib, or the --sizes given (strings are cut on a character boundary at or below the
size). BLOCKBPE_STITCH_MARGIN=-1 in the environment merges such pieces whole (the CUDA
handler's test hook; recorded in the JSON as stitch_margin), BLOCKBPE_STITCH_SECOND=0 turns off
the second round for boundaries without a shared token (recorded as stitch_second),
BLOCKBPE_WARP_SPANS=0 merges every span by its whole block (recorded as warp_spans). Per case
and size:
  ours_device  the jitted `encode` of one row already on the device (ids left there): median
               of repeated calls after a warm-up call (the compile)
  ours_e2e     `Tokenizer.encode_batch([text]).numpy()` from a Python str, ids back on the host
  ours_api     `tok.as_tiktoken(device="auto").encode_ordinary(text)`: tiktoken's call, a list of
               ids; the native host encode below Encoding.LONG_TEXT_BYTES bytes of UTF-8
               (--long-text-bytes sets it for this run), the GPU (encode_batch) from there on
  tiktoken     `Encoding.encode_ordinary(text)`
ids of ours and tiktoken are checked equal whenever both ran (each of ours: device, api). Budget: once one call of a path
takes more than --budget-s / 4 (the next size is 4x longer at least), its larger sizes in that
case are recorded as "not run (over budget)"; nothing is extrapolated. Writes
DIR/single_string.json (rewritten after every row: a run cut short keeps its rows) and
DIR/single_string.txt (MB/s and ours / tiktoken).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from blockbpe_jax.testing import data_dir, read_corpus  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


def sizes(max_bytes: int) -> list[int]:
    out = [128 << (2 * k) for k in range(7)]  # 128 B .. 512 KiB
    n = MiB
    while n <= max_bytes:
        out.append(n)
        n *= 4
    if out[-1] != max_bytes and max_bytes > MiB:
        out.append(max_bytes)
    return [s for s in out if s <= max_bytes]


def _random_chars(alphabet: str, n_chars: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(alphabet), n_chars)
    return "".join(np.array(list(alphabet))[pick].tolist())


def make_case(name: str, n: int, prose: str) -> str:
    """About `n` bytes of UTF-8 (at most n), deterministic."""
    if name == "prose":
        text = prose * (n // len(prose) + 1)
    elif name == "one_letter":
        text = "a" * n
    elif name == "letters_a_j":
        text = _random_chars("abcdefghij", n, 1)
    elif name == "spaces":
        text = " " * n
    elif name == "digits":
        text = _random_chars("0123456789", n, 2)
    elif name == "whitespace_newlines":
        text = _random_chars("  \t\n", n, 3)
    elif name == "cjk":
        text = "".join(map(chr, np.random.default_rng(4).integers(0x4E00, 0x9FA5, n // 3 + 1).tolist()))
    elif name == "emoji":
        text = "".join(map(chr, np.random.default_rng(5).integers(0x1F300, 0x1F64F, n // 4 + 1).tolist()))
    elif name == "base64":
        text = base64.b64encode(random.Random(6).randbytes(n * 3 // 4 + 3)).decode()
    elif name == "apostrophes":
        text = _random_chars("'sS tl", n, 7)
    elif name == "mixed":
        text = _random_chars("abcdefghijжщыΩλ中文日本語", n, 8)
    elif name == "run_in_piece":  # one piece: a run that does not start the piece
        text = "xyz" + "a" * n
    elif name == "letters_runs":  # one piece: random letters, a run of 600 across every 4096th byte
        letters, parts, done = _random_chars("abcdefghij", n, 9), [], 0
        for at in range(4096 - 300, n - 600, 4096):
            parts += [letters[done:at], "z" * 600]
            done = at + 600
        text = "".join(parts) + letters[done:]
    else:
        raise ValueError(f"unknown case {name!r}")
    raw = text.encode()[:n]
    return raw.decode("utf-8", errors="ignore")


CASES = [
    "prose",
    "one_letter",
    "letters_a_j",
    "spaces",
    "digits",
    "whitespace_newlines",
    "cjk",
    "emoji",
    "base64",
    "apostrophes",
    "mixed",
    "run_in_piece",
    "letters_runs",
]


def parse_sizes(spec: str) -> list[int]:
    """'64K,1M,300' -> bytes."""
    unit = {"K": KiB, "M": MiB}
    return [
        int(float(x[:-1]) * unit[x[-1].upper()]) if x[-1].upper() in unit else int(x) for x in spec.split(",")
    ]


def timed(fn, budget_s: float, reps: int = 5) -> tuple[float, object]:
    """(median seconds, last result) of fn() after one untimed call; fewer repeats when slow."""
    t = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t
    times = []
    for _ in range(1 if first > budget_s / 8 else reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def cl100k_setup():
    """(tokenizer, tiktoken oracle, War and Peace as str, JAX's default device, its tables):
    what the single-string benchmarks share."""
    import jax

    import blockbpe_jax as bb
    from blockbpe_jax.testing import tiktoken_oracle

    root = data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab/tiktoken/cl100k_base.tiktoken")
    enc = tiktoken_oracle("cl100k", tok, tok.vocab.pattern)
    prose = read_corpus(root / "corpus/war_and_peace_en.txt").decode()
    dev = jax.devices()[0]
    return tok, enc, prose, dev, tok.tables("none", dev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-mib", type=float, default=64)
    ap.add_argument("--sizes", default=None, help="comma list such as 64K,1M (default: the ladder)")
    ap.add_argument("--budget-s", type=float, default=5.0)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tiktoken-max", default=None, help="tiktoken only up to this size, such as 1M")
    ap.add_argument("--block-size", type=int, default=256, help="CUDA threads per block (256, 512, 1024)")
    ap.add_argument(
        "--long-text-bytes",
        type=int,
        default=None,
        help="the API's host/GPU threshold (default: the library's)",
    )
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    import jax

    import blockbpe_jax as bb
    from blockbpe_jax.ops import primitive as ops

    tok, enc, prose, dev, tables = cl100k_setup()
    api = tok.as_tiktoken(device="auto")
    if args.long_text_bytes is not None:
        api.LONG_TEXT_BYTES = args.long_text_bytes
    args.long_text_bytes = api.LONG_TEXT_BYTES  # (recorded in the JSON)
    jitted: dict = {}

    def device_fn(width: int):
        if width not in jitted:
            jitted[width] = jax.jit(
                lambda d, n, t: ops.encode(
                    d, n, t, max_tokens=width, check_lengths=False, block_size=args.block_size
                )
            )
        return jitted[width]

    tiktoken_max = parse_sizes(args.tiktoken_max)[0] if args.tiktoken_max else None
    rows = []
    for case in args.cases.split(","):
        over = {"ours_device": False, "ours_e2e": False, "ours_api": False, "tiktoken": False}
        for n in parse_sizes(args.sizes) if args.sizes else sizes(int(args.max_mib * MiB)):
            text = make_case(case, n, prose)
            nbytes = len(text.encode())
            row = dict(case=case, size=n, bytes=nbytes)
            ours_ids = None

            def path(key: str, fn, reps: int = 5):
                """fn's result, its median time in row[key + "_s"]; not run once over budget."""
                if over[key]:
                    row[f"{key}_s"] = "not run (over budget)"
                    return None
                secs, out = timed(fn, args.budget_s, reps=reps)
                row[f"{key}_s"] = secs
                over[key] = secs > args.budget_s / 4
                return out

            if not over["ours_device"]:
                data, lengths = bb.pack_strings([text])
                d, ln = jax.device_put(data, dev), jax.device_put(lengths, dev)
                run = device_fn(data.shape[1])
                ids, counts = path("ours_device", lambda: jax.block_until_ready(run(d, ln, tables)))
                ours_ids = np.asarray(ids)[0, : int(np.asarray(counts)[0])]
                del d, ln, ids, counts
            else:
                path("ours_device", None)

            def e2e():
                ids, counts = tok.encode_batch([text], block_size=args.block_size).numpy()
                return ids[0, : counts[0]]

            e2e_ids = path("ours_e2e", e2e, reps=3)
            ours_ids = e2e_ids if ours_ids is None else ours_ids
            api_ids = path("ours_api", lambda: api.encode_ordinary(text))
            if tiktoken_max is not None and n > tiktoken_max:
                row["tiktoken_s"], ref = "not run (--tiktoken-max)", None
            else:
                ref = path("tiktoken", lambda: enc.encode_ordinary(text), reps=3)
            if ref is not None and (ours_ids is not None or api_ids is not None):
                row["ids_equal"] = all(
                    len(got) == len(ref) and np.array_equal(got, ref)
                    for got in (ours_ids, api_ids)
                    if got is not None
                )
                row["tokens"] = len(ref)
            else:
                row["ids_equal"] = "unchecked (one side not run)"
            for k in ("ours_device", "ours_e2e", "ours_api", "tiktoken"):
                if isinstance(row[f"{k}_s"], float):
                    row[f"{k}_MBps"] = nbytes / row[f"{k}_s"] / 1e6
            for k in ("ours_device", "ours_e2e", "ours_api"):
                if f"{k}_MBps" in row and "tiktoken_MBps" in row:
                    row[f"{k}_over_tiktoken"] = row[f"{k}_MBps"] / row["tiktoken_MBps"]
            rows.append(row)
            print(line(row), flush=True)
            write(out_dir, args, dev, rows)
            if all(over.values()):
                break
    print(write(out_dir, args, dev, rows))


def write(out_dir: Path, args, dev, rows: list) -> str:
    """single_string.json and .txt from the rows so far; returns the table."""
    from blockbpe_jax import native

    doc = dict(
        benchmark="single_string",
        vocab="cl100k",
        mode="exact",
        device=str(dev),
        budget_s=args.budget_s,
        block_size=args.block_size,
        api_long_text_bytes=args.long_text_bytes,
        stitch_margin=os.environ.get("BLOCKBPE_STITCH_MARGIN", "default"),
        stitch_second=os.environ.get("BLOCKBPE_STITCH_SECOND", "default"),
        warp_spans=os.environ.get("BLOCKBPE_WARP_SPANS", "default"),
        tile_bytes=native.cpu.tile_bytes,  # the build's long-row tiles (BLOCKBPE_TILE_BYTES)
        rows=rows,
        slower_than_tiktoken={
            k: [f"{r['case']} {r['size']}" for r in rows if r.get(f"{k}_over_tiktoken", 2) < 1]
            for k in ("ours_api", "ours_e2e", "ours_device")
        },
    )
    (out_dir / "single_string.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = (
        "\n".join(
            [
                "case | size | ours device MB/s | ours e2e MB/s | ours api MB/s | tiktoken MB/s "
                "| device/tiktoken | e2e/tiktoken | api/tiktoken | ids equal",
                "---|---:|---:|---:|---:|---:|---:|---:|---:|---",
            ]
            + [line(r) for r in rows]
        )
        + "\n"
    )
    (out_dir / "single_string.txt").write_text(text)
    return text


def _fmt(row, key, spec=".1f") -> str:
    v = row.get(key)
    return format(v, spec) if isinstance(v, float) else "not run"


def line(r) -> str:
    size = (
        f"{r['size'] // MiB} MiB"
        if r["size"] >= MiB
        else (f"{r['size'] // KiB} KiB" if r["size"] >= KiB else f"{r['size']} B")
    )
    return (
        f"{r['case']} | {size} | {_fmt(r, 'ours_device_MBps')} | {_fmt(r, 'ours_e2e_MBps')} | "
        f"{_fmt(r, 'ours_api_MBps')} | {_fmt(r, 'tiktoken_MBps')} | "
        f"{_fmt(r, 'ours_device_over_tiktoken', '.2f')} | {_fmt(r, 'ours_e2e_over_tiktoken', '.2f')} | "
        f"{_fmt(r, 'ours_api_over_tiktoken', '.2f')} | {r['ids_equal']}"
    )


if __name__ == "__main__":
    main()
