"""What the corpus job's test files (test_corpus_*.py) share: the fixtures (the shared data
directory, cl100k and r50k tokenizers, War and Peace) and the reference ids."""

from __future__ import annotations

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
