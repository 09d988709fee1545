"""One warm encode of 1024 excerpts of 4096 War and Peace bytes (cl100k; harness.excerpts, so
every row is full), for ncu / compute-sanitizer;
--adversarial KIND: rows of one of testing.ADVERSARIAL's strings instead (e.g. --batch 1
--bytes 65536 --adversarial cjk: one huge piece through the long-row kernels);
--allowed-special all: the call matches the vocabulary's specials (a kernel instantiation of its own).

ncu --kernel-name regex:encode_kernel --launch-skip 2 --launch-count 1 python3 benchmarks/profile_kernel.py

--warm-seeds K: first K batches of other excerpts (seeds 1..K) of the same shape, so that launch K
(--launch-skip K) is the first on this batch with the misses' cache holding the others' misses
(ffi/cuda/miss_cache.cuh), and launch K + 2 one with this batch's own. The excerpts come from
one 3.3 MB book, so a few batches of them hold most of its passages: with --split-book the warm
batches are excerpts of the book's first half and the profiled batch of its second half, text
the cache has not seen.

--family KEY: a family file of tests/families.py instead of --vocab (mistral-v1-spm,
mistral-v7-spm, llama2-gguf, gemma3-gguf, gemma4-gguf: the SentencePiece-style kernel,
char_piece_kernel), found as the tests find it (mistral-common, or BLOCKBPE_FAMILY_FILES).
"""

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import testing
import harness
from harness import book_rows, excerpts

parser = argparse.ArgumentParser()
parser.add_argument("--vocab", default="cl100k")
parser.add_argument("--family", default=None, help="a key of tests/families.py's FILES instead")
parser.add_argument("--batch", type=int, default=1024)
parser.add_argument("--bytes", type=int, default=4096)
parser.add_argument("--mode", default="exact")
parser.add_argument("--block-size", type=int, default=256)
parser.add_argument("--calls", type=int, default=3)
parser.add_argument("--warm-seeds", type=int, default=0)
parser.add_argument("--split-book", action="store_true", help="warm on the first half, profile the second")
parser.add_argument(
    "--warm-book", action="store_true", help="with --split-book: warm on every row of the first half"
)
parser.add_argument("--adversarial", choices=sorted(testing.ADVERSARIAL), default=None)
parser.add_argument("--allowed-special", choices=["none", "all"], default="none", help="the tables' specials")
args = parser.parse_args()

root = testing.data_dir()
if args.family:
    family_files = harness.family_files()
    if args.family not in family_files.FILES:
        raise SystemExit(
            f"profile_kernel: unknown --family {args.family!r}; one of {sorted(family_files.FILES)}"
        )
    tok, why = family_files.tokenizer(args.family)
    if tok is None:
        raise SystemExit(f"profile_kernel: {why}")
else:
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[args.vocab][0])
raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
warm_raw = raw
if args.split_book:
    half = len(raw) // 2
    while half < len(raw) and raw[half] != 0x0A:  # (at a line break: whole characters either side)
        half += 1
    warm_raw, raw = raw[:half], raw[half:]
texts = excerpts(raw, args.batch, args.bytes)
if args.adversarial:
    import random

    texts = [testing.ADVERSARIAL[args.adversarial](random.Random(i), args.bytes) for i in range(args.batch)]
data, lengths = bb.pack_strings(texts, max_len=args.bytes)
data, lengths = jax.device_put(data), jax.device_put(lengths)
tables = tok.tables(args.allowed_special)
f = jax.jit(
    lambda d, l, t: bb.encode(
        d, l, t, max_tokens=args.bytes, mode=args.mode, block_size=args.block_size, check_lengths=False
    )
)
if args.warm_book and not args.split_book:
    raise SystemExit("profile_kernel: --warm-book needs --split-book")
if args.warm_book:
    rows = book_rows(warm_raw, args.bytes)
    warm_batches = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
else:
    warm_batches = [excerpts(warm_raw, args.batch, args.bytes, seed=k) for k in range(1, args.warm_seeds + 1)]
for warm in warm_batches:
    f(*jax.device_put(bb.pack_strings(warm, max_len=args.bytes)), tables)[1].block_until_ready()
print("warm calls:", len(warm_batches))
for _ in range(args.calls):
    ids, counts = f(data, lengths, tables)
    counts.block_until_ready()
n_bytes = sum(len(t if isinstance(t, bytes) else t.encode()) for t in texts)
print("tokens:", int(np.asarray(counts).sum()), "for", n_bytes, "bytes")
