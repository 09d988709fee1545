#!/usr/bin/env python3
"""The longest serial chain of the device JSONL split's kernels, counted on the CPU: a model of
the per-thread loops of `bbpe_split_lines` (core/json_lines.h, cuda/jsonl_split.cuh) run over
the corpus job's unique JSONL lines, one count per line class and per layout.

    python3 benchmarks/jsonl_split_chains.py [--escaped]

A kernel of the split ends with its slowest thread, and a thread's loop steps depend on each
other (a load, then a branch on it), so a block's fixed cost follows the longest chain of
steps in each kernel. A step is one iteration of decode_string (eight aligned plain ASCII bytes,
else one byte, one UTF-8 sequence or one escape), one 64-byte slice of a string's end or of a
piece's escape map, or one byte of a piece's start searched for. Layouts:
  warp32     lines over 4 KiB by a warp: 32 pieces whose starts are searched for (no backslash
             in the 12 bytes before), the string's end in rounds of 32 slices; shorter lines by
             a thread (measure_lines, then write_lines decode the field again)
  groups     lines over --thread-line by a warp (32 pieces), over --block-line by a block
             (512 pieces): pieces at fixed slice-aligned offsets, each's escape state from a
             scan of the slices' maps, its start the first token start 6-18 bytes past its
             offset; the write kernel measures the piece again for its offset (a block scan).
The mixed corpus's lines are {"text": ...} (json.dumps, ensure_ascii=False); --escaped gives
them as json.dumps' default writes them (every non-ASCII character a \\u escape).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from corpora import source_texts, unique_documents  # noqa: E402

from blockbpe_jax.testing import data_dir  # noqa: E402

SLICE = 64


def plain_words(buf: np.ndarray) -> np.ndarray:
    """Per aligned eight-byte word of buf: whether decode_string takes it in one step."""
    n = len(buf) // 8 * 8
    b = buf[:n].reshape(-1, 8)
    stop = (b >= 0x80) | (b < 0x20) | (b == ord('"')) | (b == ord("\\"))
    return ~stop.any(axis=1)


def step_starts(buf: bytes, plain: np.ndarray, a: int, b: int) -> list[int]:
    """Where decode_string's steps over buf[a:b] start (a: just past the opening quote)."""
    out = []
    p = a
    while p < b:
        out.append(p)
        if p % 8 == 0 and b - p >= 8 and plain[p // 8]:
            p += 8
            continue
        c = buf[p]
        if c == 0x5C:  # backslash
            if buf[p + 1] == ord("u"):
                cp = int(buf[p + 2 : p + 6], 16)
                p += 12 if 0xD800 <= cp < 0xDC00 and buf[p + 6 : p + 8] == b"\\u" else 6
            else:
                p += 2
        elif c >= 0xF0:
            p += 4
        elif c >= 0xE0:
            p += 3
        elif c >= 0xC0:
            p += 2
        else:
            p += 1
    return out


def heuristic_starts(buf: bytes, a: int, b: int, pieces: int) -> tuple[list[int], list[int]]:
    """The 32 pieces' starts as piece_at searches for them, and each search's bytes."""
    starts, searched = [a], [0]
    for k in range(1, pieces):
        at = a + (b - a) * k // pieces
        n = 0
        while at < b and ((buf[at] & 0xC0) == 0x80 or b"\\" in buf[max(a, at - 12) : at]):
            at += 1
            n += 1
        starts.append(at)
        searched.append(n)
    starts.append(b)
    return starts, searched


def pieces_chain(steps: np.ndarray, starts: list[int]) -> list[int]:
    """Steps of each piece [starts[k], starts[k + 1]) (the whole decode's steps in it)."""
    idx = np.searchsorted(steps, starts)
    return list(np.diff(idx))


def group_chain(buf: bytes, steps: np.ndarray, a: int, b: int, size: int) -> dict:
    """A group of `size` threads on the span [a, b): pieces at slice-aligned offsets."""
    first = a - a % 16
    span = b - first
    piece = max(SLICE, -(-span // (size * SLICE)) * SLICE)
    starts = [a] + [min(b, first + k * piece + 6) for k in range(1, size)] + [b]
    starts = sorted(starts)
    per = pieces_chain(steps, starts)
    worst = max(per) + 8  # (up to seven byte steps before an aligned word, one search)
    maps = piece // SLICE
    rounds = -(-span // (size * SLICE))
    return dict(
        rounds=rounds, maps=maps, piece_steps=worst, measure=rounds + maps + worst, write=maps + 2 * worst
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--escaped", action="store_true")
    ap.add_argument("--thread-line", type=int, default=1024)
    ap.add_argument("--block-line", type=int, default=4096)
    args = ap.parse_args()
    docs = unique_documents(source_texts(data_dir()))
    if args.escaped:
        lines = [json.dumps({"text": d}) for d in docs]
    else:
        lines = [json.dumps({"text": d}, ensure_ascii=False) for d in docs]
    blob = ("\n".join(lines) + "\n").encode()
    buf = np.frombuffer(blob, np.uint8)
    plain = plain_words(buf)
    old = {"thread (<= 4 KiB)": [0, 0, 0], "warp (> 4 KiB)": [0, 0, 0]}
    new = {
        f"thread (<= {args.thread_line})": [0, 0, 0],
        f"warp (<= {args.block_line})": [0, 0, 0],
        "block": [0, 0, 0],
    }
    worst_line = [0, 0]
    at = 0
    for line in lines:
        n = len(line.encode())
        a = at + len('{"text": "')
        b = at + n - 2  # (the closing quote and brace)
        steps = np.array(step_starts(blob, plain, a, b), np.int64)
        if n > worst_line[0]:
            worst_line = [n, len(steps)]

        def keep(table, key, measure, write):
            row = table[key]
            row[0] += 1
            row[1] = max(row[1], measure)
            row[2] = max(row[2], write)

        if n <= 4096:
            keep(old, "thread (<= 4 KiB)", len(steps), len(steps))
        else:
            starts, searched = heuristic_starts(blob, a, b, 32)
            per = pieces_chain(steps, starts)
            worst = max(p + s for p, s in zip(per, searched))
            rounds = -(-(b - (a - a % 16)) // (32 * SLICE))
            keep(old, "warp (> 4 KiB)", rounds + worst, worst)
        if n <= args.thread_line:
            keep(new, f"thread (<= {args.thread_line})", len(steps), len(steps))
        else:
            size, key = (32, f"warp (<= {args.block_line})") if n <= args.block_line else (512, "block")
            g = group_chain(blob, steps, a, b, size)
            keep(new, key, g["measure"], g["write"])
        at += n + 1
    print(
        f"{len(lines)} unique lines, {len(blob) / 1e6:.1f} MB; longest {worst_line[0]} bytes, "
        f"{worst_line[1]} decode steps by one thread"
    )
    for name, table in (("warp32 (main)", old), ("groups", new)):
        print(f"\n{name}: class | lines | longest chain, measure kernel | write kernel")
        for key, (count, m, w) in table.items():
            print(f"  {key} | {count} | {m} | {w}")


if __name__ == "__main__":
    main()
