#!/usr/bin/env python3
"""What a corpus-job call of packed rows costs on the device (corpus.plan.packing): 1024 rows
of 4096 bytes of the mixed corpus's short documents, each followed by the separator, encoded
with the separator allowed (as the job does) and not allowed (the same bytes, no special
token), next to War and Peace excerpts of the same shape; per document kind; and the job's
whole packed step (the window FFI call of one call of packed rows: encode, then the
separators' positions).

    python3 benchmarks/packed_rows.py [--rows 1024] [--reps 20]

Times are medians of jitted calls with their sync (device-resident inputs).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import native
from blockbpe_jax.ops import primitive as ops
from blockbpe_jax.corpus import device as window_device, plan as window_plan  # noqa: E402
from blockbpe_jax.ops.ragged import gather_rows  # noqa: E402
from blockbpe_jax.testing import data_dir, excerpts, read_corpus  # noqa: E402
from corpora import source_texts, unique_documents  # noqa: E402
from harness import measure  # noqa: E402

WIDTH = 4096


def packed(docs: list[bytes], sep: bytes, rows: int, device):
    """(padded rows uint8[rows, WIDTH], lengths, documents in them) of the first packed rows."""
    data = np.frombuffer(b"".join(docs), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    flat = np.zeros(data.size + len(docs) * len(sep) + WIDTH, np.uint8)
    row_of_doc, spans = native.cpu.pack_documents(data, offsets, sep, WIDTH, flat)
    spans = spans[:rows]
    table = np.zeros((2, rows), np.int32)
    table[:, : len(spans)] = spans.T
    flat_d, table_d = jax.device_put(flat, device), jax.device_put(table, device)
    padded = jax.jit(lambda f, t: gather_rows(f, t[0], t[1], WIDTH))(flat_d, table_d)
    n_docs = int(((row_of_doc >= 0) & (row_of_doc < len(spans))).sum())
    return padded, table_d[1], n_docs, flat_d, table_d


def timed(f, *args, reps: int) -> float:
    """Median microseconds of f(*args) with its sync (harness.measure, at least `reps` calls)."""
    return measure(lambda: jax.block_until_ready(f(*args)), min_reps=reps)["s"] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    device = jax.devices()[0]
    tok = bb.Tokenizer.from_file(data_dir() / "vocab/tiktoken/cl100k_base.tiktoken")
    pack = window_plan.packing(tok, "exact", "none", WIDTH)
    with_sep, without = tok.tables(pack.allowed, device), tok.tables("none", device)
    encode = jax.jit(functools.partial(ops.encode, max_tokens=WIDTH, mode="exact", check_lengths=False))
    print(f"device {device.device_kind}; {args.rows} rows x {WIDTH} B; median us per call with its sync")
    docs = [d.encode() for d in unique_documents(source_texts(data_dir()))]
    padded, lengths, n_docs, flat, table = packed(docs, pack.sep, args.rows, device)
    print(f"  mixed corpus packed ({n_docs} documents, {int(lengths.sum())} B):")
    print(
        f"    encode, separator allowed      {timed(encode, padded, lengths, with_sep, reps=args.reps):9.1f}"
    )
    print(
        f"    encode, no special allowed     {timed(encode, padded, lengths, without, reps=args.reps):9.1f}"
    )
    wp = excerpts(read_corpus(data_dir() / "corpus/war_and_peace_en.txt"), WIDTH - 96, WIDTH)[: args.rows]
    data, lens = bb.pack_strings(wp, max_len=WIDTH)
    wp_us = timed(encode, jax.device_put(data, device), jax.device_put(lens, device), without, reps=args.reps)
    print(f"    War and Peace excerpts, same shape {wp_us:5.1f}")
    kinds: dict[str, list[bytes]] = {}
    for d in docs:
        kind = (
            "python" if d.startswith(b"# ===== file:") else "gsm8k" if d.startswith(b"Question:") else "prose"
        )
        kinds.setdefault(kind, []).append(d)
    for kind, group in kinds.items():
        p, ls, n, *_ = packed(group, pack.sep, args.rows, device)
        print(
            f"    {kind:8s} only ({n} documents, {int(ls.sum())} B)  {timed(encode, p, ls, with_sep, reps=args.reps):9.1f}"
        )
    step = window_device.CompiledWindows(
        with_sep, device, sep_id=pack.sep_id, mode="exact", block_size=256, assume_nfc=False
    )
    plan = np.array([(args.rows, WIDTH, WIDTH, 0, 0, n_docs)], np.int64)
    raw = [jnp.zeros(args.rows * WIDTH + n_docs, jnp.int32, device=device)]
    space = step.scratch(plan)

    def whole_step():
        raw[0] = step(flat, table, raw[0], plan, space)  # (raw is donated)
        return raw[0]

    print(f"    the job's packed step (encode + separators) {timed(whole_step, reps=args.reps):7.1f}")


if __name__ == "__main__":
    main()
