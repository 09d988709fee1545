"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from blockbpe_jax._data import ENV_VAR, find_data_dir


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


# CI draws the same hypothesis examples every run (a landing must not depend on luck); set
# BLOCKBPE_HYPOTHESIS_RANDOM=1 for fresh random examples (long fuzz runs).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("blockbpe-ci", derandomize=True)
if not os.environ.get("BLOCKBPE_HYPOTHESIS_RANDOM"):
    _hypothesis_settings.load_profile("blockbpe-ci")
