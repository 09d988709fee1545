"""The piece-parallel kernel (the default; ffi/cuda/piece_kernel.cuh) against the block-per-string
kernel (BLOCKBPE_KERNEL=block), in one process: exactness first, then device time.

    python3 benchmarks/piece_time.py [--out DIR] [--parts cross,time,families] [--budget S]

cross:    both kernels on the same packed inputs (War and Peace, code, wikitext, the adversarial
          strings of blockbpe_jax.testing, random bytes: invalid UTF-8, lengths 0..L) for each
          tokenizer family found; the whole padded ids and counts must be equal. Also how many
          rows the piece kernel left to encode_kernel (BLOCKBPE_PIECE_FILL=0: their count is -3).
time:     cl100k 1024 x 4096, 1024 x 512, 64 x 512 (War and Peace excerpts, as kernel_time.py):
          both kernels checked against tiktoken, then device time (a chain of calls in one
          executable, as run_all.py's "device" column), old, new and new without the misses'
          cache (BLOCKBPE_MISS_CACHE=0) alternated --rounds times in the same executable (the
          handler reads both variables per call); then the piece
          kernel at each chunk size (BLOCKBPE_PIECE_CHUNK).
families: 1024 x 4096 old vs new for the other families (ids checked equal between kernels).
Writes DIR/piece_time.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import random
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from blockbpe_jax.vocab import KNOWN_PATTERNS  # noqa: E402
from harness import COUNT_PENDING, Ours, compare_rows, device_time, excerpts  # noqa: E402

FAMILIES = [  # (label, vocab file under data/vocab)
    ("cl100k", "tiktoken/cl100k_base.tiktoken"),
    ("o200k", "tiktoken/o200k_base.tiktoken"),
    ("r50k", "tiktoken/r50k_base.tiktoken"),
    ("llama3", "llama3/tokenizer.json"),
    ("gpt2_hf", "gpt2/tokenizer.json"),
    ("cl100k_hf", "cl100k_hf/tokenizer.json"),
    ("o200k_hf", "o200k_hf/tokenizer.json"),
    ("deepseek_splits", "cl100k_hf/tokenizer.json"),  # the cl100k port with DeepSeek-V3's three splits
]

# DeepSeek-V3's pre-tokenizer as its tokenizer.json has it (three Splits, then ByteLevel without
# its regex): a pipeline of stages, put on a vocabulary that is here (DeepSeek's own file is not
# in the shared data).
DEEPSEEK_V3_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": False},
        {
            "type": "Split",
            "pattern": {
                "Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
            },
            "behavior": "Isolated",
            "invert": False,
        },
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}


def load_family(label: str, path: pathlib.Path):
    """The family's tokenizer (deepseek_splits: the file with DeepSeek-V3's pre-tokenizer)."""
    if label != "deepseek_splits":
        return bb.Tokenizer.from_file(path)
    from tokenizers import Tokenizer

    doc = json.loads(path.read_bytes())
    doc["pre_tokenizer"] = DEEPSEEK_V3_PRE_TOKENIZER
    return bb.Tokenizer.from_hf(Tokenizer.from_str(json.dumps(doc)))


def kernel(name: str | None, chunk: int | None = None, fill: bool = True, cache: bool = True):
    """Select the kernel for the calls that follow (read per call by the CUDA handler): "block"
    (encode_kernel), "piece", or None (the handler's default, as on entry); cache=False: the
    piece kernel without its misses' cache."""
    for k in ("BLOCKBPE_KERNEL", "BLOCKBPE_PIECE_CHUNK", "BLOCKBPE_PIECE_FILL", "BLOCKBPE_MISS_CACHE"):
        os.environ.pop(k, None)
    if not cache:
        os.environ["BLOCKBPE_MISS_CACHE"] = "0"
    if name:
        os.environ["BLOCKBPE_KERNEL"] = name
    if chunk:
        os.environ["BLOCKBPE_PIECE_CHUNK"] = str(chunk)
    if not fill:
        os.environ["BLOCKBPE_PIECE_FILL"] = "0"


def read_corpus(root, name):
    p = root / "corpus" / name
    if not p.exists():
        return b""
    raw = p.read_bytes()
    return gzip.decompress(raw) if name.endswith(".gz") else raw


def cross_inputs(root, rng: random.Random):
    """(name, L, list of bytes) inputs for the cross-check."""
    wp = read_corpus(root, "war_and_peace_en.txt")
    code = read_corpus(root, "code_python_stdlib.py.txt.gz")
    wiki = read_corpus(root, "wikitext2_test.txt.gz")

    def slices(raw, B, L):
        out = []
        for _ in range(B):
            n = rng.choice([0, 1, 2, 3, rng.randint(0, L), L, L, rng.randint(L // 2, L)])
            s = rng.randint(0, max(0, len(raw) - n))
            out.append(raw[s : s + n])
        return out

    sets = []
    for L in (512, 4096):
        B = 256 if L == 512 else 96
        for name, raw in (("war_and_peace", wp), ("code", code), ("wikitext", wiki)):
            if raw:
                sets.append((f"{name}_{L}", L, slices(raw, B, L)))
        for kind, gen in sorted(testing.ADVERSARIAL.items()):
            sets.append((f"{kind}_{L}", L, [gen(rng, rng.randint(0, L))[:L] for _ in range(32)]))
        sets.append(
            (
                f"random_bytes_{L}",
                L,
                [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, L))) for _ in range(32)],
            )
        )
        mixed = []
        for _ in range(64):
            parts, n = [], rng.randint(0, L)
            while sum(map(len, parts)) < n:
                src = rng.choice(
                    [wp, code, wiki, "日本語のテキスト и кириллица ١٢٣ 👍🏽 e\u0301".encode() * 4]
                )
                k = rng.randint(1, 64)
                s = rng.randint(0, max(0, len(src) - k))
                parts.append(src[s : s + k])
            mixed.append(b"".join(parts)[:L])
        sets.append((f"mixed_{L}", L, mixed))
    sets.append(("odd_width_1000", 1000, slices(wp, 128, 1000)))
    sets.append(("width_16", 16, slices(wp, 300, 16)))
    return sets


def run_encode(fn, data, lengths):
    ids, counts = fn(data, lengths)[:2]
    return np.asarray(ids), np.asarray(counts)


def part_cross(root, dev, families, report, rng):
    inputs = cross_inputs(root, rng)
    rows = []
    for label, tok in families:
        ours = Ours(bb, tok, dev, label)
        for name, L, texts in inputs:
            data, lengths = ours.put(*bb.pack_strings(texts, max_len=L))
            f = ours.fn("exact", 256, L)
            kernel("block")
            ids0, c0 = run_encode(f, data, lengths)
            kernel("piece", fill=False)
            _, cp = run_encode(f, data, lengths)
            row = {
                "family": label,
                "input": name,
                "rows": len(texts),
                "L": L,
                "pending_rows": int((cp == COUNT_PENDING).sum()),
            }
            for chunk in (2, 4, 8, 16):
                if chunk * 256 < L:
                    continue
                kernel("piece", chunk=chunk)
                ids1, c1 = run_encode(f, data, lengths)
                same = bool(np.array_equal(ids0, ids1) and np.array_equal(c0, c1))
                row[f"equal_chunk{chunk}"] = same
                if not same:
                    bad = np.nonzero((c0 != c1) | (ids0 != ids1).any(axis=1))[0]
                    i = int(bad[0])
                    row.setdefault(
                        "first_diff",
                        f"chunk {chunk} row {i} ({len(texts[i])} B): counts {int(c0[i])} vs "
                        f"{int(c1[i])}; text {texts[i][:80]!r}",
                    )
                    row.setdefault("diff_rows", int(len(bad)))
            kernel("block")
            rows.append(row)
            ok = all(v for k2, v in row.items() if k2.startswith("equal_"))
            print("cross", "ok " if ok else "DIFF", json.dumps(row), flush=True)
    report["cross"] = rows
    report["cross_mismatches"] = sum(
        1 for r in rows for k, v in r.items() if k.startswith("equal_") and not v
    )


def time_shape(ours, f, g, data, lengths, total, rounds, target_s):
    # (new: after the chain's first call the misses' cache holds this batch's misses, its best
    # case; new_no_cache: the same calls with the cache off, the other bound)
    out = {"old_us": [], "new_us": [], "new_no_cache_us": []}
    for _ in range(rounds):
        for name, key, cache in (
            ("block", "old_us", True),
            ("piece", "new_us", True),
            ("piece", "new_no_cache_us", False),
        ):
            kernel(name, cache=cache)
            out[key].append(device_time(g, data, lengths, chain=Ours.CHAIN, target_s=target_s)["s"] * 1e6)
    kernel("block")
    for key in ("old_us", "new_us", "new_no_cache_us"):
        med = statistics.median(out[key])
        out[key.replace("_us", "_median_us")] = med
        out[key.replace("_us", "_GBps")] = total / (med * 1e-6) / 1e9
    out["speedup"] = out["old_median_us"] / out["new_median_us"]
    return out


def part_time(root, dev, report, rounds, shapes, label="cl100k", tok=None):
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    tok = tok or bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
    enc = testing.tiktoken_oracle("cl100k", tok, KNOWN_PATTERNS["cl100k"]) if label == "cl100k" else None
    ours = Ours(bb, tok, dev, label)
    rows = []
    for B, L in shapes:
        texts = excerpts(raw, B, L)
        total = sum(len(t.encode("utf-8")) for t in texts)
        data, lengths = ours.put(*bb.pack_strings(texts, max_len=L))
        f = ours.fn("exact", 256, L)
        row = {"family": label, "batch": B, "bytes": L, "input_bytes": total}
        kernel("block")
        ids0, c0 = run_encode(f, data, lengths)
        kernel("piece", fill=False)
        _, cp = run_encode(f, data, lengths)
        row["pending_rows"] = int((cp == COUNT_PENDING).sum())
        kernel("piece")
        ids1, c1 = run_encode(f, data, lengths)
        kernel("block")
        if enc is not None:
            ref = enc.encode_ordinary_batch(texts)
            row["old_vs_tiktoken"] = compare_rows(ids0, c0, ref, L)[1]
            row["new_vs_tiktoken"] = compare_rows(ids1, c1, ref, L)[1]
            ok = row["old_vs_tiktoken"].startswith("equal") and row["new_vs_tiktoken"].startswith("equal")
        else:
            ok = bool(np.array_equal(ids0, ids1) and np.array_equal(c0, c1))
            row["new_vs_old"] = "equal" if ok else "DIFFERENT"
        if ok:
            g = ours.fn("exact", 256, L, chain=Ours.CHAIN)
            row.update(time_shape(ours, f, g, data, lengths, total, rounds, 0.5))
            sweep = {}
            for chunk in (2, 4, 8, 16):
                if chunk * 256 < L:
                    continue
                kernel("piece", chunk=chunk)
                sweep[str(chunk)] = device_time(g, data, lengths, chain=Ours.CHAIN, target_s=0.4)["s"] * 1e6
            kernel("block")
            row["new_us_by_chunk"] = sweep
        rows.append(row)
        print("time", json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--parts", default="cross,time,families")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--families", default=",".join(f for f, _ in FAMILIES))
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    root = testing.data_dir()
    dev = jax.devices()[0]
    report = {
        "device": dev.device_kind,
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    t0 = time.perf_counter()
    want = set(args.families.split(","))
    families = []
    for label, rel in FAMILIES:
        path = root / "vocab" / rel
        if label in want and path.exists():
            try:
                families.append((label, load_family(label, path)))
            except Exception as e:  # noqa: BLE001
                print("family", label, "not loaded:", e, flush=True)

    def save():
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "piece_time.json").write_text(json.dumps(report, indent=1))

    try:
        if "cross" in parts:
            part_cross(root, dev, families, report, random.Random(11))
            print(
                f"cross: {report['cross_mismatches']} mismatching (input, chunk) cells; "
                f"{time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            save()
        if "time" in parts:
            cl = dict(families).get("cl100k")
            report["time"] = part_time(
                root, dev, report, args.rounds, [(1024, 4096), (1024, 512), (64, 512)], tok=cl
            )
            save()
        if "families" in parts:
            rows = []
            for label, tok in families:
                if label == "cl100k":
                    continue
                rows += part_time(root, dev, report, 1, [(1024, 4096)], label=label, tok=tok)
            report["families"] = rows
            save()
    finally:
        kernel(None)
        report["seconds"] = time.perf_counter() - t0
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
