"""Prototype driver: the specials' marks as a pass of their own (special_marks.cu) on a family's
specials and War and Peace excerpts: exact against the CPU executor's rule, and how long it takes.

    python3 benchmarks/prototypes/special_marks.py [--family gemma3-gguf] [--allowed none|all]
        [--batch 1024] [--bytes 4096] [--dense ROWS] [--launches 50] [--out DIR]

Writes the batch (--dense: that many rows more, of specials, runs of spaces, newlines and tabs
and short words: rows whose matches outgrow the warp's list, which it then resolves in parts)
and the family's specials (the set a call with `allowed_special` passes: tables/build.py's
build_special_tables) to DIR/special_marks.bin, builds special_marks.cu with nvcc ($CUDACXX,
else on PATH, else /usr/local/cuda/bin) where its binary is older than the source, runs it and
prints its JSON line (also DIR/special_marks.json). Exit status 1 where a mark differs, 3
without a GPU (the host's marks alone: their count). The family files are found as
tests/families.py finds them ($BLOCKBPE_FAMILY_FILES).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from harness import excerpts, family_files  # noqa: E402

from blockbpe_jax import testing  # noqa: E402
from blockbpe_jax.tables.build import build_special_tables  # noqa: E402
from blockbpe_jax.tables.specials import specials_escaped  # noqa: E402


def dense_rows(names: list[str], rows: int, length: int, seed: int = 0) -> list[bytes]:
    """Rows of the set's specials, whitespace runs and short words, cut at `length` bytes on a
    character boundary."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        parts, size = [], 0
        while size < length:
            kind = rng.random()
            if kind < 0.4 and names:
                part = rng.choice(names)
            elif kind < 0.8:
                part = rng.choice(" \n\t") * rng.randint(1, 40)
            else:
                part = "".join(rng.choice("ab▁é") for _ in range(rng.randint(1, 5)))
            parts.append(part)
            size += len(part.encode("utf-8"))
        raw = "".join(parts).encode("utf-8")[:length]
        out.append(raw.decode("utf-8", errors="ignore").encode("utf-8"))
    return out


def write_input(path: pathlib.Path, vocab, allowed, rows: list[bytes], max_len: int) -> None:
    """The file special_marks.cu reads (its read_input)."""
    tables = build_special_tables(vocab, allowed)
    lengths = np.asarray([len(r) for r in rows], dtype=np.int32)
    text = np.zeros((len(rows), max_len), dtype=np.uint8)
    for i, r in enumerate(rows):
        text[i, : len(r)] = np.frombuffer(r, dtype=np.uint8)
    head = np.asarray(
        [
            int(specials_escaped(vocab)),
            tables.count,
            tables.special_data.size,
            len(rows),
            max_len,
            tables.special_starts.size,
        ],
        dtype=np.int32,
    )
    with open(path, "wb") as f:
        for a in (
            head,
            tables.special_offsets,
            tables.special_ids,
            tables.special_data,
            tables.special_starts,
        ):
            f.write(np.ascontiguousarray(a).tobytes())
        f.write(lengths.tobytes())
        f.write(text.tobytes())


def build(out: pathlib.Path) -> pathlib.Path:
    """special_marks.cu compiled into `out` (again only where the source is newer)."""
    source, binary = HERE / "special_marks.cu", out / "special_marks"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        cmd = [
            nvcc,
            "-std=c++17",
            "-O3",
            "-arch=sm_90",
            "-I",
            str(ROOT / "ffi"),
            "-o",
            str(binary),
            str(source),
        ]
        subprocess.run(cmd, check=True)
    return binary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="gemma3-gguf", help="a key of tests/families.py's FILES")
    ap.add_argument("--allowed", choices=("none", "all"), default="none")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--dense", type=int, default=0, help="rows of specials and whitespace runs, added")
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/special_marks"))
    args = ap.parse_args(argv)
    tok, why = family_files().tokenizer(args.family)
    if tok is None:
        print(f"special_marks: {why}", file=sys.stderr)
        return 2
    raw = testing.read_corpus(testing.data_dir() / "corpus" / "war_and_peace_en.txt")
    rows = [t.encode("utf-8") for t in excerpts(raw, args.batch, args.bytes)]
    allowed = None if args.allowed == "none" else "all"
    names = sorted(tok.vocab.special_tokens if allowed else tok.vocab.always_special)
    rows += dense_rows(names, args.dense, args.bytes)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "special_marks.bin"
    write_input(data, tok.vocab, allowed, rows, args.bytes)
    run = subprocess.run(
        [str(build(args.out)), str(data), str(args.launches)], capture_output=True, text=True
    )
    if run.returncode not in (0, 1, 3):
        print(run.stdout + run.stderr, file=sys.stderr)
        return run.returncode
    result = {
        "family": args.family,
        "allowed": args.allowed,
        "dense_rows": args.dense,
        **json.loads(run.stdout),
    }
    (args.out / "special_marks.json").write_text(json.dumps(result) + "\n")
    print(json.dumps(result))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
