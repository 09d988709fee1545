"""The native JSONL reader (ffi/core/jsonl.h, json_line.h, json_simd.h) built with AddressSanitizer and
UndefinedBehaviorSanitizer (tests/cpp/jsonl_sanitized.cc) and run over JSONL made from the
shared corpora (escaped and raw, short lines and lines over the reader's long-line threshold,
split by its threads in pieces), then over blocks cut short and with bytes changed: no read
past a block (each is copied into memory of its exact size; reading 16 bytes where fewer than 9
are left fails here), no write past an allocation, no undefined behaviour, and the documents
counted as json.loads counts them."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from blockbpe_jax import testing

from helpers import compile_sanitized


def build(out_dir: Path) -> Path:
    return compile_sanitized("jsonl_sanitized.cc", out_dir / "jsonl_sanitized", "address,undefined")


@pytest.mark.parametrize("avx512", ["1", "0"], ids=["avx512", "sse2"])
def test_reader_under_address_and_undefined_behaviour_sanitizers(tmp_path, data_dir, avx512):
    # (avx512 "0": the SSE2 and byte-wise code, what CPUs without AVX-512 VBMI2 run)
    texts = [testing.read_corpus(p).decode("utf-8", "replace") for p in testing.corpus_paths(data_dir)]
    if not texts:
        pytest.skip("no shared corpus (set BLOCKBPE_DATA)")
    rng = random.Random(11)
    lines = []
    for text in texts:
        for _ in range(150):
            at = rng.randrange(len(text))
            piece = text[at : at + rng.choice([0, 1, 40, 700, 5000])]
            lines.append(
                json.dumps(
                    {"id": len(lines), "text": piece, "meta": [1.5, None]}, ensure_ascii=rng.random() < 0.5
                )
            )
    long_text = "".join(texts)[: 3 << 20]  # (longer than kLongLine: decoded in pieces on 4 threads)
    lines += [json.dumps({"text": long_text}), json.dumps({"text": long_text}, ensure_ascii=False)]
    rng.shuffle(lines)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = dict(
        os.environ,
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
        UBSAN_OPTIONS="print_stacktrace=1",
        BLOCKBPE_JSON_AVX512=avx512,
    )
    run = subprocess.run(
        [str(build(tmp_path)), str(corpus), str(1 << 18)], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ERROR" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-3000:]
    assert run.stdout.split() == ["documents", str(len(lines))]
