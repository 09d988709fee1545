#!/usr/bin/env python3
"""An NFC tokenizer against the same vocabulary without a normalizer: encode_batch end to end
and the primitive on device-resident rows (the executors normalize NFC themselves,
ffi/pretok/nfc_normalize.h and ffi/cuda/nfc_prepass.cuh).

    python3 benchmarks/nfc_throughput.py --out DIR [--rows 1024] [--bytes 4096] [--reps 10]

llama3's tokenizer.json with Qwen2's split (tests' synthetic.nfc_tokenizer), once with
"normalizer": {"type": "NFC"} and once with none; War and Peace excerpts (NFC text, as nearly
all text is) and the same excerpts with every "e" and "a" followed by U+0301 (text not in NFC,
where every row takes the pre-pass's slow path). Medians of --reps calls after a warm-up:
  e2e        tok.encode_batch(texts) with the ids waited for (packing, copy, encode)
  stream     tok.encode_stream of --stream copies of the batch, all waited for, per batch (an NFC
             tokenizer reads each batch's counts back once the next is dispatched)
  device     bb.encode on rows already on the device, waited for
  host_nfc   texts normalized on the host first (Tokenizer.normalize: the native batch for NFC alone),
             then encode_batch's packing and the encode with the check off
Every NFC path's ids are checked equal to HF tokenizers' (when installed) or to host_nfc's.
Writes DIR/nfc_throughput.json and prints GB/s of input bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from blockbpe_jax.testing import QWEN2_PATTERN, data_dir, read_corpus  # noqa: E402
from harness import median_s, spread_excerpts  # noqa: E402


def tokenizer_doc(nfc: bool) -> dict:
    doc = json.loads((data_dir() / "vocab" / "llama3" / "tokenizer.json").read_bytes())
    doc["normalizer"] = {"type": "NFC"} if nfc else None
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
    args = ap.parse_args()
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

    for name, nfc in (("nfc", True), ("plain", False)):
        doc = tokenizer_doc(nfc)
        toks[name] = bb.Tokenizer(vocab_from_tokenizer_json(doc, f"llama3-{name}"))
        hfs[name] = HfTokenizer.from_str(json.dumps(doc)) if HfTokenizer else None

    def rows_of(ids, counts):
        ids, counts = np.asarray(ids), np.asarray(counts)
        return [ids[i, : counts[i]].tolist() for i in range(len(counts))]

    results = []
    for text_name, texts in inputs.items():
        nbytes = sum(len(t.encode()) for t in texts)
        for tok_name, tok in toks.items():
            row = {"text": text_name, "tokenizer": tok_name, "rows": len(texts), "bytes": nbytes}

            def e2e(tok=tok, texts=texts):
                out = tok.encode_batch(texts, device=dev)
                jax.block_until_ready(out)
                return out

            s, out = median_s(e2e, args.reps)
            row["e2e_gbps"] = nbytes / s / 1e9
            got = rows_of(*out)

            def stream(tok=tok, texts=texts):
                outs = list(tok.encode_stream([texts] * args.stream, device=dev))
                jax.block_until_ready(outs)
                return outs

            s, souts = median_s(stream, args.reps)
            row["stream_gbps"] = nbytes * args.stream / s / 1e9
            stream_same = all(rows_of(*o) == got for o in souts)
            data, lengths = bb.pack_strings(texts)
            data, lengths = jax.device_put((data, lengths), dev)

            def device(tok=tok, data=data, lengths=lengths):
                out = bb.encode(data, lengths, tok, max_tokens=data.shape[1])
                jax.block_until_ready(out)
                return out

            s, dout = median_s(device, args.reps)
            row["device_gbps"] = nbytes / s / 1e9
            dgot = rows_of(*dout)
            row["device_reported_rows"] = int(sum(1 for r in np.asarray(dout.counts) if r == -2))
            if tok_name == "nfc":

                def host_nfc(tok=tok, texts=texts):
                    norm = tok.normalize(texts)
                    d, n = bb.pack_strings(norm)
                    d, n = jax.device_put((d, n), dev)
                    out = bb.encode(d, n, tok, max_tokens=d.shape[1], assume_normalized=True)
                    jax.block_until_ready(out)
                    return out

                s, hout = median_s(host_nfc, min(args.reps, 3))  # (slow: a few calls)
                row["host_nfc_gbps"] = nbytes / s / 1e9
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
        nfc = next(r for r in results if r["text"] == text_name and r["tokenizer"] == "nfc")
        plain = next(r for r in results if r["text"] == text_name and r["tokenizer"] == "plain")
        print(
            f"{text_name:13s} e2e NFC {nfc['e2e_gbps']:.2f} vs plain {plain['e2e_gbps']:.2f} GB/s "
            f"({nfc['e2e_gbps'] / plain['e2e_gbps']:.0%}); stream NFC {nfc['stream_gbps']:.2f} vs plain "
            f"{plain['stream_gbps']:.2f} GB/s ({nfc['stream_gbps'] / plain['stream_gbps']:.0%}); device NFC "
            f"{nfc['device_gbps']:.2f} vs "
            f"plain {plain['device_gbps']:.2f} GB/s ({nfc['device_gbps'] / plain['device_gbps']:.0%}); "
            f"normalized on the host first {nfc['host_nfc_gbps']:.2f} GB/s; ids equal: {nfc['e2e_ids_equal']} "
            f"{nfc['device_ids_equal']}"
        )
    (out_dir / "nfc_throughput.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
