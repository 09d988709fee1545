"""Where a block's time goes: per-stage cycles of the CUDA kernel.

Needs a build with the stage clocks compiled in (they cost a few atomics per block, so normal
builds leave them out):

    BLOCKBPE_STAGE_CLOCKS=ON pip install --no-build-isolation --no-deps -e .
    python3 benchmarks/stage_clocks.py --out results/

For each shape it runs a few warm encodes of War and Peace excerpts and prints, per block, the
average cycles thread 0 spent in each stage (load, specials, pretokenize, initial tokens,
segments: whole-piece lookups; merges: short pieces merged one per thread; output, or the
block-wide merge passes), and the fraction of blocks that needed the passes. SentencePiece
BPE (mistral-v1): initial = character symbols, prefixes and word flags; merges = words merged
one per thread and packed; passes = long words; output = runs and output. The GGUF families
(llama2-gguf, gemma3-gguf) are read from $BLOCKBPE_FAMILY_FILES (docs/families.md).
"""

import argparse
import json
import os
import pathlib
import sys

import jax

import blockbpe_jax as bb
from blockbpe_jax import native, testing

SHAPES = [
    ("cl100k", "exact", 1024, 4096),
    ("cl100k", "exact", 1024, 512),
    ("cl100k", "exact", 64, 512),
    ("o200k", "exact", 1024, 4096),
    ("r50k", "bytes", 1024, 4096),
    ("mistral-v1", "exact", 1024, 4096),
    ("llama2-gguf", "exact", 1024, 4096),
    ("gemma3-gguf", "exact", 1024, 4096),
]
GGUF_FILES = {"llama2-gguf": "ggml-vocab-llama-spm.gguf", "gemma3-gguf": "gemma-3-270m-q4_k_m.gguf.part00"}


def load(vocab: str, root: pathlib.Path) -> bb.Tokenizer | None:
    if vocab in GGUF_FILES:
        path = pathlib.Path(os.environ.get("BLOCKBPE_FAMILY_FILES", "/nonexistent")) / GGUF_FILES[vocab]
        return bb.Tokenizer.from_gguf(path) if path.is_file() else None
    if vocab == "mistral-v1":  # SentencePiece BPE, from the mistral-common package
        import importlib.util

        spec = importlib.util.find_spec("mistral_common")
        return bb.Tokenizer.from_file(pathlib.Path(spec.origin).parent / "data" / "tokenizer.model.v1")
    return bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[vocab][0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--only", default="", help="shapes whose vocabulary contains this text")
    args = parser.parse_args(argv)
    cuda = native.cuda
    if cuda is None or not hasattr(cuda, "read_stage_clocks"):
        print("stage_clocks: needs a CUDA build with BLOCKBPE_STAGE_CLOCKS=ON", file=sys.stderr)
        return 2
    root = testing.data_dir()
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    rows = []
    for vocab, mode, batch, length in SHAPES:
        if args.only not in vocab:
            continue
        tok = load(vocab, root)
        if tok is None:
            print(
                f"stage_clocks: {vocab} skipped (its file is not in $BLOCKBPE_FAMILY_FILES)", file=sys.stderr
            )
            continue
        texts = [raw[i * length : (i + 1) * length] for i in range(batch)]
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
            f(data, lengths, tables)[1].block_until_ready()
        clocks = dict(cuda.read_stage_clocks())
        blocks = max(1, clocks["blocks"])
        per_block = {
            k: round(clocks[k] / blocks)
            for k in ("load", "specials", "pretokenize", "initial", "segments", "merges", "output", "passes")
        }
        row = {
            "vocab": vocab,
            "mode": mode,
            "batch": batch,
            "bytes": length,
            "block_size": args.block_size,
            "cycles_per_block": per_block,
            "total_cycles_per_block": sum(per_block.values()),
            "long_block_fraction": round(clocks["long_blocks"] / blocks, 4),
        }
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
