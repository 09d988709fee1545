"""What the corpus job's test files (tests/corpus/, tests/compat/test_hf_datasets.py) share: the
fixtures (the shared data directory, cl100k and r50k tokenizers, War and Peace, rows of the
corpora with tiktoken's ids) and the reference ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax._data import find_data_dir


@pytest.fixture(scope="module")
def root() -> Path:
    path = find_data_dir()
    if path is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA or place it at ../shared/data)")
    return path


@pytest.fixture(scope="module")
def cl100k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/cl100k_base.tiktoken")


@pytest.fixture(scope="module")
def r50k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/r50k_base.tiktoken")


@pytest.fixture(scope="module")
def war_and_peace(root) -> bytes:
    return (root / "corpus/war_and_peace_en.txt").read_bytes()


def utf8_cut(raw: bytes, n: int) -> bytes:
    while n < len(raw) and (raw[n] & 0xC0) == 0x80:
        n -= 1
    return raw[:n]


def encode_batch_ids(tok, docs: list[bytes]) -> list[list[int]]:
    """The reference: `encode_batch` on the short documents together, long ones alone."""
    out: dict[int, list[int]] = {}
    short = [i for i, d in enumerate(docs) if len(d) <= 4096]
    groups = [short] + [[i] for i in range(len(docs)) if len(docs[i]) > 4096]
    for group in groups:
        if group:
            ids, counts = tok.encode_batch([docs[i] for i in group])
            ids, counts = np.asarray(ids), np.asarray(counts)
            assert (counts <= ids.shape[1]).all()
            out.update({i: ids[r, : counts[r]].tolist() for r, i in enumerate(group)})
    return [out[i] for i in range(len(docs))]


CL100K = "vocab/tiktoken/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def texts(root, war_and_peace) -> list[str]:
    questions = [
        json.loads(x)["question"] for x in (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    ]
    lines = [x for x in utf8_cut(war_and_peace[100_000:], 60_000).decode().split("\n") if x]
    return questions[:500] + ["", "ünïcödé — ✓ 日本語 🎉", " "] + lines + questions[500:]


@pytest.fixture(scope="module")
def want(root, texts) -> list[list[int]]:
    pytest.importorskip("tiktoken")
    from blockbpe_jax.testing import tiktoken_oracle

    tok = bb.Tokenizer.from_file(root / CL100K)
    return tiktoken_oracle("cl100k", tok, tok.vocab.pattern).encode_ordinary_batch(texts)
