"""Test helpers: tokenizers loaded once per session, backends to run on, batched comparison."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax._data import find_data_dir

FORMATS = ("tiktoken", "json")


def gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


# (device kind, block size) combinations: the CPU once, the GPU with every block size.
BACKENDS = [pytest.param(("cpu", 256), id="cpu")] + [
    pytest.param(("gpu", bs), id=f"gpu{bs}",
                 marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"))
    for bs in (256, 512, 1024)
]


def device_for(kind: str):
    return jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]


def load_tokenizer(name: str, fmt: str) -> bb.Tokenizer:
    """A shared vocabulary (loaded once); skips the calling test when the data is absent."""
    if find_data_dir() is None:
        pytest.skip("shared data not found: set BLOCKBPE_DATA or place it at <repo>/../shared/data")
    vocab_path(name, fmt)
    return _load_tokenizer(name, fmt)


def vocab_path(name: str, fmt: str = "tiktoken"):
    """The shared vocabulary file `name` in format `fmt` ("tiktoken" or "json"); skips the
    calling test when the shared data or that file is absent."""
    if find_data_dir() is None:
        pytest.skip("shared data not found: set BLOCKBPE_DATA or place it at <repo>/../shared/data")
    path = testing.data_dir() / "vocab" / testing.VOCAB_FILES[name][FORMATS.index(fmt)]
    if not path.is_file():
        pytest.skip(f"vocabulary file absent from the shared data: {path}")
    return path


@functools.lru_cache(maxsize=None)
def _load_tokenizer(name: str, fmt: str) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(vocab_path(name, fmt))


@functools.lru_cache(maxsize=None)
def oracle(name: str, fmt: str, pattern: str):
    return testing.tiktoken_oracle(name, load_tokenizer(name, fmt), pattern)


def mismatches(tok: bb.Tokenizer, texts: list[bytes], refs: list[list[int]], *, device, mode: str,
               block_size: int = 256, allowed_special="none", batch: int = 256,
               max_len: int | None = None) -> list[tuple[int, list[int], list[int]]]:
    """Encodes `texts` in batches and returns (index, ours, reference) for every difference."""
    bad = []
    max_len = max_len or max(16, max(len(t) for t in texts))
    for start in range(0, len(texts), batch):
        chunk = texts[start:start + batch]
        ids, counts = tok.encode_batch(chunk, max_len=max_len, mode=mode, block_size=block_size,
                                       allowed_special=allowed_special, device=device)
        ids, counts = np.asarray(ids), np.asarray(counts)
        for k, ref in enumerate(refs[start:start + batch]):
            ours = ids[k, :counts[k]].tolist()
            if counts[k] != len(ref) or ours != ref:
                bad.append((start + k, ours, ref))
    return bad
