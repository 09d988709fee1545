"""What the staging tests share (tests/tokenizer/test_staging.py, test_read_back.py): the
GPU mark, cl100k's tokenizer and War and Peace excerpts of up to 4,000 bytes."""

from __future__ import annotations

import pytest

from blockbpe_jax import testing
from blockbpe_jax.ops import primitive as ops

from helpers import gpu_devices, load_tokenizer

needs_gpu = pytest.mark.skipif(
    not gpu_devices() or not ops.HAS_CUDA_MODULE,
    reason="no GPU visible to JAX, or no CUDA module in this build",
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


@pytest.fixture(scope="module")
def corpus_texts():
    raw = b"".join(testing.read_corpus(p) for p in testing.corpus_paths())
    return [t.decode("utf-8", "replace") for t in testing.excerpts(raw, 0, 4000, seed=3)[:600]]
