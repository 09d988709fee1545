"""The corpus job's executables kept on disk (blockbpe_jax/executable_cache.py): a second
process of the job traces, lowers and compiles nothing and writes the same shards; a damaged
or foreign entry is built again; the key separates what the executables are built from."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import jax
import numpy as np
import pytest

from blockbpe_jax import executable_cache, window_device

import corpus_shared

root = corpus_shared.root  # (a module-scoped fixture, requested by name below)

JOB = """
import sys, jax, blockbpe_jax as bb
from blockbpe_jax import corpus, executable_cache
corpus.enable_compilation_cache()  # as the CLI does
if sys.argv[4:] == ["jax-only"]:
    executable_cache.enable(None)
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
tok = bb.Tokenizer.from_file(sys.argv[1])
events.clear()
corpus.encode_files(tok, [sys.argv[2]], sys.argv[3], overwrite=True)
print(events.count("/jax/compilation_cache/cache_hits"), events.count("/jax/compilation_cache/cache_misses"))
"""


def test_second_process_loads_the_jobs_executables(tmp_path, root):
    """With the caches the CLI turns on, a process compiles the job's executables and keeps
    them; the next one running the same job loads every one (JAX's own cache sees no
    lookup: nothing was traced or lowered) and writes the same shards as a process with both
    caches off. Kept entries are compiled, never ones JAX loaded from its own cache (on the
    CPU backend those serialize without their host code, and fail when run)."""
    src = tmp_path / "in.txt"
    src.write_text("first line\nsecond, longer line of text " * 40 + "\n" + "x\n" * 30, encoding="utf-8")
    env = {**os.environ, "BLOCKBPE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("BLOCKBPE_XLA_CACHE", None)
    vocab = str(root / "vocab/tiktoken/r50k_base.tiktoken")
    kept = tmp_path / "cache" / "executables"

    def job(out: str, *flag: str, **extra):
        argv = [sys.executable, "-c", JOB, vocab, str(src), str(tmp_path / out / "s"), *flag]
        run = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        return tuple(map(int, run.stdout.split())), (tmp_path / out / "s_00000.bin").read_bytes()

    (_, misses), jax_only = job("jax-only", "jax-only")  # (JAX's cache filled, none kept here)
    assert misses > 0 and not kept.exists()
    (hits, _), first = job("first")
    entries = sorted(kept.iterdir())
    assert hits == 0 and len(entries) >= 3  # (compiled, not taken from JAX's cache)
    events, loaded = job("loaded")
    assert events == (0, 0) and sorted(kept.iterdir()) == entries, events
    _, uncached = job("uncached", BLOCKBPE_XLA_CACHE="0")
    assert jax_only == first == loaded == uncached and len(first) > 0


@pytest.fixture
def cache_in(tmp_path):
    before = executable_cache._directory
    executable_cache.enable(tmp_path / "executables")
    yield tmp_path / "executables"
    executable_cache.enable(before)


def _gather_build(n: int):
    step = window_device.device_functions().gather
    device = jax.devices()[0]
    spec = window_device._specs(device, ((n,), np.int32), ((4,), np.int32))
    return ("gather", device, n, 4), lambda: step.lower(*spec).compile(), device


def _gathers(run, n: int) -> list:
    raw = jax.numpy.arange(n, dtype=jax.numpy.int32) * 3
    return np.asarray(run(raw, jax.numpy.array([0, 2, n - 1, n + 5], jax.numpy.int32))).tolist()


@pytest.mark.parametrize("damage", ["garbage", "foreign format", "truncated"])
def test_a_damaged_entry_is_built_again(cache_in, damage):
    key, build, device = _gather_build(4096)
    built = []
    counted = lambda: built.append(1) or build()  # noqa: E731
    want = _gathers(executable_cache.load_or_build(key, counted, device), 4096)
    assert want == [0, 6, 3 * 4095, 3 * 4095] and built == [1]
    (entry,) = cache_in.iterdir()
    assert _gathers(executable_cache.load_or_build(key, counted, device), 4096) == want and built == [1]
    good = entry.read_bytes()
    bad = {
        "garbage": b"not a pickle",
        "foreign format": pickle.dumps((executable_cache.ENTRY_FORMAT + 1, pickle.loads(good)[1])),
        "truncated": good[: len(good) // 2],
    }[damage]
    entry.write_bytes(bad)
    assert _gathers(executable_cache.load_or_build(key, counted, device), 4096) == want and built == [1, 1]
    assert entry.read_bytes() != bad  # (written again)
    assert _gathers(executable_cache.load_or_build(key, counted, device), 4096) == want and built == [1, 1]


def test_keys_and_the_switch(cache_in, tmp_path):
    """Different keys are different entries; off (enable(None)) nothing is read or written."""
    key, build, device = _gather_build(4096)
    other, _, _ = _gather_build(8192)
    assert executable_cache._entry(key, device) != executable_cache._entry(other, device)
    assert executable_cache._entry(key, device) == executable_cache._entry(key, device)
    executable_cache.enable(None)
    assert executable_cache._entry(key, device) is None
    assert _gathers(executable_cache.load_or_build(key, build, device), 4096)[:2] == [0, 6]
    assert not cache_in.exists()
