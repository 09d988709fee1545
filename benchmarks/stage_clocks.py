"""Where a block's time goes: per-stage cycles of the CUDA kernel.

Needs a build with the stage clocks compiled in (they cost a few atomics per block, so normal
builds leave them out):

    BLOCKBPE_STAGE_CLOCKS=ON pip install --no-build-isolation --no-deps -e .
    python3 benchmarks/stage_clocks.py --out results/ [--corpus code_python_stdlib.py.txt.gz] [--blocks]
        [--kernel default|block] [--no-cache]

For each shape it runs a few warm encodes of excerpts of a corpus file (War and Peace unless
--corpus names another in the data folder's corpus/) and prints, per block, the average
cycles thread 0 spent in each stage, and the fraction of blocks that needed the block-wide
passes. --kernel default (the kernels each call runs by default): the piece kernels where a
call allows them (ffi/cuda/piece_kernel.cuh: load = the step tables, the chunks and Lowercase;
pretokenize; segments = the pieces looked up whole and in the misses' cache; merges = the
misses merged; keep = the merged misses put in the cache; output = the placement;
char_piece_kernel: load = the chunks and, with specials, their table's copy; specials = the
matching; initial = character symbols and word starts, then the same),
run without their second launch (BLOCKBPE_PIECE_FILL=0: its blocks would overwrite the block
marks), so a row they leave pending is counted (pending_rows) but not encoded. --kernel block,
the block-per-string kernel for every call (load, specials, pretokenize, initial tokens,
segments: whole-piece lookups; merges: short pieces merged lane-parallel or a warp each;
output, or the block-wide merge passes). The calls after the first find the batch's misses in
the misses' cache; --no-cache runs with it off (BLOCKBPE_MISS_CACHE=0). --blocks adds
the blocks of the last call over time: the kernel's span, block durations (p50 / p99 / max)
and the slowest blocks' stages and merged pieces, what averages hide (a few slow blocks the
kernel waits for); `block` is the grid's index (its rows: block x the rows a block holds);
`first_merged` the first piece (or word) it merged, its length and first 16 bytes (with the
cache warm: what the cache did not hold).
merged_pieces_per_block: the piece kernels' misses merged (not found whole or in the misses'
cache) per block, averaged over the calls. SentencePiece
BPE (mistral-v1): initial = character symbols, prefixes and word flags; merges = words merged
one per thread and packed; passes = long words; output = runs and output. The family files
(mistral-v1, llama2-gguf, gemma3-gguf, gemma4-gguf) are found as the tests find them: their package, or a
copy in $BLOCKBPE_FAMILY_FILES (docs/families.md).
"""

import argparse
import json
import os
import pathlib
import sys

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import native, testing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from harness import COUNT_PENDING, family_files  # noqa: E402

SHAPES = [
    ("cl100k", "exact", 1024, 4096),
    ("cl100k", "exact", 1024, 512),
    ("cl100k", "exact", 64, 512),
    ("cl100k", "exact", 256, 16384),  # the corpus job's packed rows: the tile pipeline's tile_encode
    ("o200k", "exact", 1024, 4096),
    ("r50k", "bytes", 1024, 4096),
    ("mistral-v1", "exact", 1024, 4096),
    ("llama2-gguf", "exact", 1024, 4096),
    ("mistral-v7", "exact", 1024, 4096),  # the specials stage with a few specials (Gemma 3: many)
    ("gemma3-gguf", "exact", 1024, 4096),
    ("gemma4-gguf", "exact", 1024, 4096),  # Gemma 3's vocabulary without its specials
    ("llama2-gguf", "exact", 64, 512),
]
FAMILY_FILES = {
    "mistral-v1": "mistral-v1-spm",
    "mistral-v7": "mistral-v7-spm",
    "llama2-gguf": "llama2-gguf",
    "gemma3-gguf": "gemma3-gguf",
    "gemma4-gguf": "gemma4-gguf",
}


def load(vocab: str, root: pathlib.Path) -> bb.Tokenizer | None:
    """The shape's tokenizer: a shared vocabulary, or a family file found as the tests find it
    (tests/families.py: its package, or a copy in BLOCKBPE_FAMILY_FILES); None when absent."""
    if vocab in FAMILY_FILES:
        return family_files().tokenizer(FAMILY_FILES[vocab])[0]
    return bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[vocab][0])


def first_merged(mark: np.ndarray) -> str | None:
    """A block's first merged piece from its marks (length, bytes 0..7, bytes 8..15), as
    "length: bytes" (its first 16 bytes), or None where it merged none."""
    m = int(mark[0])
    if m == 0:
        return None
    if m < 0:
        return "a word the misses' cache does not key by its text"
    head = int(mark[1]).to_bytes(8, "little", signed=True) + int(mark[2]).to_bytes(8, "little", signed=True)
    return f"{m}: {head[: min(m, 16)]!r}"


# A block's marks after its stages' ends (ffi/cuda/stage_clock.cuh, BlockMarkSlot): its start,
# its SM, the pieces it merged, the first of them (length, bytes 0..7, bytes 8..15).
START, MERGED, FIRST_MERGED, AFTER_STAGES = 0, 2, 3, 6


def block_timeline(marks: np.ndarray, stages: list[str], slowest: int = 5) -> dict:
    """The last call's blocks over time, from read_block_marks (rows: each stage's end, 0 where a
    block did not get there; then the marks above), in microseconds."""
    n = len(stages)
    marks = marks.reshape(-1, n + AFTER_STAGES).astype(np.uint64).astype(np.int64)
    ran = np.flatnonzero(marks[:, n + START] > 0)  # (the blocks' indices in the grid)
    marks = marks[ran]
    start = marks[:, n + START]
    ends = np.where(marks[:, :n] > 0, marks[:, :n], start[:, None])
    end = ends.max(axis=1)
    t0, dur = start.min(), (end - start) / 1e3
    rows = []
    for b in np.argsort(dur)[::-1][:slowest]:
        order = np.argsort(ends[b], kind="stable")
        took, at = {}, start[b]
        for k in order:
            if marks[b, k] > 0:
                took[stages[k]] = round((marks[b, k] - at) / 1e3, 1)
                at = marks[b, k]
        rows.append(
            {
                "block": int(ran[b]),
                "start_us": round((start[b] - t0) / 1e3, 1),
                "us": round(float(dur[b]), 1),
                "stages_us": took,
                "merged_pieces": int(marks[b, n + MERGED]),
                "first_merged": first_merged(marks[b, n + FIRST_MERGED :]),
            }
        )
    return {
        "blocks": int(len(marks)),
        "span_us": round((end.max() - t0) / 1e3, 1),
        "block_us": {
            q: round(float(np.percentile(dur, p)), 1) for q, p in (("p50", 50), ("p99", 99), ("max", 100))
        },
        "slowest": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--only", default="", help="shapes whose vocabulary contains this text")
    parser.add_argument(
        "--corpus", default="war_and_peace_en.txt", help="a file of the data folder's corpus/"
    )
    parser.add_argument("--blocks", action="store_true", help="the last call's blocks over time too")
    parser.add_argument("--kernel", choices=("default", "block"), default="default")
    parser.add_argument("--no-cache", action="store_true", help="the misses' cache off")
    args = parser.parse_args(argv)
    # (the CUDA handler reads these at every call)
    if args.kernel == "block":
        os.environ["BLOCKBPE_KERNEL"] = "block"
    else:
        os.environ.pop("BLOCKBPE_KERNEL", None)
        os.environ["BLOCKBPE_PIECE_FILL"] = "0"
    if args.no_cache:
        os.environ["BLOCKBPE_MISS_CACHE"] = "0"
    cuda = native.cuda
    if cuda is None or not hasattr(cuda, "read_stage_clocks"):
        print("stage_clocks: needs a CUDA build with BLOCKBPE_STAGE_CLOCKS=ON", file=sys.stderr)
        return 2
    root = testing.data_dir()
    raw = testing.read_corpus(root / "corpus" / args.corpus)
    rows = []
    for vocab, mode, batch, length in SHAPES:
        if args.only not in vocab:
            continue
        tok = load(vocab, root)
        if tok is None:
            print(
                f"stage_clocks: {vocab} skipped (its family file is not there: docs/families.md)",
                file=sys.stderr,
            )
            continue
        texts = [raw[i * length % len(raw) :][:length] for i in range(batch)]
        data, lengths = bb.pack_strings(texts, max_len=length)
        data, lengths = jax.device_put(data), jax.device_put(lengths)
        f = jax.jit(
            lambda d, l, t: bb.encode(
                d,
                l,
                t,
                max_tokens=length,
                mode=mode,  # noqa: E731
                block_size=args.block_size,
                check_lengths=False,
            )
        )
        tables = tok.tables()
        f(data, lengths, tables)[1].block_until_ready()  # compile + warm-up
        cuda.read_stage_clocks()  # zero
        for _ in range(args.calls):
            counts = f(data, lengths, tables)[1]
            counts.block_until_ready()
        clocks = dict(cuda.read_stage_clocks())
        marks = np.asarray(cuda.read_block_marks(), np.uint64)  # (the last call's)
        blocks = max(1, clocks["blocks"])
        # (the stages in the module's order: ffi/cuda/stage_clock.cuh; blocks are counts)
        counts_only = ("blocks", "long_blocks", "merged_pieces")
        per_block = {k: round(v / blocks) for k, v in clocks.items() if k not in counts_only}
        row = {
            "vocab": vocab,
            "mode": mode,
            "batch": batch,
            "bytes": length,
            "block_size": args.block_size,
            "kernel": args.kernel,
            "cache": not args.no_cache,
            "pending_rows": int((np.asarray(counts) == COUNT_PENDING).sum()),
            "cycles_per_block": per_block,
            "total_cycles_per_block": sum(per_block.values()),
            "long_block_fraction": round(clocks["long_blocks"] / blocks, 4),
            "merged_pieces_per_block": round(clocks["merged_pieces"] / blocks, 2),
            "corpus": args.corpus,
        }
        if args.blocks:
            row["timeline"] = block_timeline(marks, list(clocks))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        dev = jax.devices()[0]
        (args.out / "stage_clocks.json").write_text(
            json.dumps({"device": dev.device_kind, "jax": jax.__version__, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
