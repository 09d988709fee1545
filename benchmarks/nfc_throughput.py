#!/usr/bin/env python3
"""Tokenizers with a normalizer (NFC, Lowercase, NFC then Lowercase) against the same vocabulary
without one: encode_batch end to end and the primitive on device-resident rows (the executors
normalize themselves: ffi/pretok/nfc_normalize.h, ffi/cuda/nfc_prepass.cuh, pretok/lowercase.h).

    python3 benchmarks/nfc_throughput.py --out DIR [--rows 1024] [--bytes 4096] [--reps 10]
        [--normalizers nfc,lower,nfc_lower]

llama3's tokenizer.json with Qwen2's split (tests' synthetic.nfc_tokenizer), once with each
normalizer of --normalizers and once with none; War and Peace excerpts (NFC text, as nearly
all text is; cased) and the same excerpts with every "e" and "a" followed by U+0301 (text not
in NFC, where every row takes the NFC pre-pass's slow path). Medians of --reps calls after a
warm-up, the tokenizers timed by turns (a round calls each once, in a rotating order):
  e2e        tok.encode_batch(texts) with the ids waited for (packing, copy, encode)
  stream     tok.encode_stream of --stream copies of the batch, all waited for, per batch (an NFC
             tokenizer reads each batch's counts back once the next is dispatched)
  device     bb.encode on rows already on the device, waited for
  host_normalized  texts normalized on the host first (Tokenizer.normalize), then encode_batch's
             packing and the encode with the check off
Every path's ids are checked equal to HF tokenizers' (when installed) or to host_normalized's.
Writes DIR/nfc_throughput.json and prints GB/s of input bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from blockbpe_jax.testing import QWEN2_PATTERN, data_dir, read_corpus  # noqa: E402
from harness import interleaved_medians, median_s, spread_excerpts  # noqa: E402


NFC, LOWER = {"type": "NFC"}, {"type": "Lowercase"}
NORMALIZERS = {"nfc": NFC, "lower": LOWER, "nfc_lower": {"type": "Sequence", "normalizers": [NFC, LOWER]}}


def tokenizer_doc(normalizer: str | None) -> dict:
    doc = json.loads((data_dir() / "vocab" / "llama3" / "tokenizer.json").read_bytes())
    doc["normalizer"] = NORMALIZERS[normalizer] if normalizer else None
    split = {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--stream", type=int, default=4)
    ap.add_argument("--normalizers", default="nfc,lower,nfc_lower", help="of " + ",".join(NORMALIZERS))
    args = ap.parse_args()
    normalizers = args.normalizers.split(",")
    if not set(normalizers) <= set(NORMALIZERS):
        ap.error(f"--normalizers: each of {', '.join(NORMALIZERS)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import jax
    import numpy as np

    import blockbpe_jax as bb

    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError:  # (the ids are then checked against the host path only)
        HfTokenizer = None
    dev = jax.devices()[0]
    prose = read_corpus(data_dir() / "corpus/war_and_peace_en.txt").decode()
    base = spread_excerpts(prose, args.rows, args.bytes)
    inputs = {
        "nfc_text": base,
        "not_nfc_text": [
            t.replace("e", "e\u0301").replace("a", "a\u0301")
            for t in spread_excerpts(prose, args.rows, args.bytes * 3 // 4)
        ],
    }
    toks, hfs = {}, {}
    from blockbpe_jax.vocab.hf_json import vocab_from_tokenizer_json

    for name in ["plain", *normalizers]:
        doc = tokenizer_doc(None if name == "plain" else name)
        toks[name] = bb.Tokenizer(vocab_from_tokenizer_json(doc, f"llama3-{name}"))
        hfs[name] = HfTokenizer.from_str(json.dumps(doc)) if HfTokenizer else None

    def rows_of(ids, counts):
        ids, counts = np.asarray(ids), np.asarray(counts)
        return [ids[i, : counts[i]].tolist() for i in range(len(counts))]

    # The GPU's and the host's clocks ramp up under load: a second of encodes before any timing;
    # then every path times the tokenizers by turns (harness.interleaved_medians): timed one
    # after another, whichever came first read slower than the rest, plain or NFC alike.
    warm_until = time.perf_counter() + 1.0
    while time.perf_counter() < warm_until:
        jax.block_until_ready(toks["plain"].encode_batch(base, device=dev))
    results = []
    for text_name, texts in inputs.items():
        nbytes = sum(len(t.encode()) for t in texts)

        def e2e(tok, texts=texts):
            out = tok.encode_batch(texts, device=dev)
            jax.block_until_ready(out)
            return out

        def stream(tok, texts=texts):
            outs = list(tok.encode_stream([texts] * args.stream, device=dev))
            jax.block_until_ready(outs)
            return outs

        data, lengths = jax.device_put(bb.pack_strings(texts), dev)

        def device(tok, data=data, lengths=lengths):
            out = bb.encode(data, lengths, tok, max_tokens=data.shape[1])
            jax.block_until_ready(out)
            return out

        timed = {
            path: interleaved_medians({n: (lambda f=f, t=t: f(t)) for n, t in toks.items()}, args.reps)
            for path, f in (("e2e", e2e), ("stream", stream), ("device", device))
        }
        for tok_name, tok in toks.items():
            row = {"text": text_name, "tokenizer": tok_name, "rows": len(texts), "bytes": nbytes}
            s, out = timed["e2e"][tok_name]
            row["e2e_gbps"] = nbytes / s / 1e9
            got = rows_of(*out)
            s, souts = timed["stream"][tok_name]
            row["stream_gbps"] = nbytes * args.stream / s / 1e9
            stream_same = all(rows_of(*o) == got for o in souts)
            s, dout = timed["device"][tok_name]
            row["device_gbps"] = nbytes / s / 1e9
            dgot = rows_of(*dout)
            row["device_reported_rows"] = int(sum(1 for r in np.asarray(dout.counts) if r == -2))
            if tok_name != "plain":

                def host_normalized(tok=tok, texts=texts):
                    norm = tok.normalize(texts)
                    d, n = bb.pack_strings(norm)
                    d, n = jax.device_put((d, n), dev)
                    out = bb.encode(d, n, tok, max_tokens=d.shape[1], assume_normalized=True)
                    jax.block_until_ready(out)
                    return out

                s, hout = median_s(host_normalized, min(args.reps, 3))  # (slow: a few calls)
                row["host_normalized_gbps"] = nbytes / s / 1e9
                want = rows_of(*hout)
            else:
                want = got
            if hfs[tok_name] is not None:
                want = [e.ids for e in hfs[tok_name].encode_batch(texts, add_special_tokens=False)]
            row["e2e_ids_equal"] = got == want and stream_same
            row["device_ids_equal"] = all(
                d == w for d, w, c in zip(dgot, want, np.asarray(dout.counts)) if c != -2
            )
            results.append(row)
            print(json.dumps(row), flush=True)
    for text_name in inputs:
        plain = next(r for r in results if r["text"] == text_name and r["tokenizer"] == "plain")
        for name in normalizers:
            r = next(r for r in results if r["text"] == text_name and r["tokenizer"] == name)
            print(
                f"{text_name:13s} {name:9s} e2e {r['e2e_gbps']:.2f} vs plain {plain['e2e_gbps']:.2f} GB/s "
                f"({r['e2e_gbps'] / plain['e2e_gbps']:.0%}); stream {r['stream_gbps']:.2f} vs plain "
                f"{plain['stream_gbps']:.2f} GB/s ({r['stream_gbps'] / plain['stream_gbps']:.0%}); device "
                f"{r['device_gbps']:.2f} vs plain {plain['device_gbps']:.2f} GB/s "
                f"({r['device_gbps'] / plain['device_gbps']:.0%}); normalized on the host first "
                f"{r['host_normalized_gbps']:.2f} GB/s; ids equal: {r['e2e_ids_equal']} {r['device_ids_equal']}"
            )
    (out_dir / "nfc_throughput.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
