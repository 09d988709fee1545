"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from blockbpe_jax._data import ENV_VAR, find_data_dir

import helpers
import pretok_shim


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data directory (vocab/, corpus/); skips the test when it is absent."""
    path = find_data_dir()
    if path is None:
        configured = os.environ.get(ENV_VAR)
        if configured:
            pytest.skip(f"shared data not found: {ENV_VAR}={configured!r} is not a directory")
        pytest.skip(f"shared data not found: set {ENV_VAR} or place it at <repo>/../shared/data")
    return path


@pytest.fixture(scope="session")
def vocab(data_dir):
    """name of helpers.VOCAB_CASES -> its Vocab, as blockbpe_jax.vocab loads it (once)."""
    return lambda name: helpers.load_vocab(data_dir, name)


@pytest.fixture(scope="session")
def tables(data_dir):
    """name of helpers.VOCAB_CASES -> its device tables (built once)."""
    return lambda name: helpers.vocab_tables(data_dir, name)


@pytest.fixture(scope="session")
def nfc_tok(data_dir):
    """(ours, HF's) for Llama 3's vocabulary with an NFC normalizer and Qwen2's split
    (synthetic.nfc_tokenizer), built once."""
    from synthetic import nfc_tokenizer

    return nfc_tokenizer(data_dir)


@pytest.fixture(scope="session")
def shim(tmp_path_factory) -> pretok_shim.Shim:
    """The C++ pre-tokenizer, compiled once per session."""
    return pretok_shim.build_shim(tmp_path_factory.mktemp("pretok"))


# CI draws the same hypothesis examples every run (a landing must not depend on luck); set
# BLOCKBPE_HYPOTHESIS_RANDOM=1 for fresh random examples (long fuzz runs).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("blockbpe-ci", derandomize=True)
if not os.environ.get("BLOCKBPE_HYPOTHESIS_RANDOM"):
    _hypothesis_settings.load_profile("blockbpe-ci")
