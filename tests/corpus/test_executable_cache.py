"""The corpus job's executables kept on disk (blockbpe_jax/corpus/executable_cache.py): a second
process of the job compiles nothing and writes the same shards; a process that JAX's own
persistent cache serves keeps nothing; a damaged or foreign entry is built again; the key
separates what the executables are built from. Each case runs in processes of its own (whether
an entry may be written depends on what the process did before)."""

from __future__ import annotations

import os
import subprocess
import sys

import corpus_shared

root = corpus_shared.root  # (a module-scoped fixture, requested by name below)

JOB = """
import sys, jax, blockbpe_jax as bb
from blockbpe_jax.corpus import executable_cache, job as corpus
corpus.enable_executable_cache()  # as the CLI does
counts = {"loaded": 0, "built": 0}
real_load, real_build = executable_cache._load, executable_cache.load_or_build
def load(*a):
    counts["loaded"] += 1
    return real_load(*a)
def load_or_build(key, build, device):
    def counted():
        counts["built"] += 1
        return build()
    return real_build(key, counted, device)
executable_cache._load, executable_cache.load_or_build = load, load_or_build
tok = bb.Tokenizer.from_file(sys.argv[1])
corpus.encode_files(tok, [sys.argv[2]], sys.argv[3], overwrite=True)
print(counts["loaded"], counts["built"])
"""


def test_second_process_loads_the_jobs_executables(tmp_path, root):
    """The CLI's caching on: a first process compiles the job's executables and keeps them; the
    next loads every one and compiles none, and writes the same shards as a process with the
    caching off. A process that JAX's persistent cache serves (JAX_COMPILATION_CACHE_DIR)
    keeps nothing: an executable JAX loaded serializes without its host code on the CPU
    backend, and such an entry failed when run."""
    src = tmp_path / "in.txt"
    src.write_text("first line\nsecond, longer line of text " * 40 + "\n" + "x\n" * 30, encoding="utf-8")
    env = {**os.environ, "BLOCKBPE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("BLOCKBPE_XLA_CACHE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    vocab = str(root / "vocab/tiktoken/r50k_base.tiktoken")
    kept = tmp_path / "cache" / "executables"

    def job(out: str, **extra):
        argv = [sys.executable, "-c", JOB, vocab, str(src), str(tmp_path / out / "s")]
        run = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        return tuple(map(int, run.stdout.split())), (tmp_path / out / "s_00000.bin").read_bytes()

    jax_cache = dict(
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0"
    )
    _, jax_filled = job("jax-filled", **jax_cache)
    (loaded, built), jax_served = job("jax-served", **jax_cache)
    assert any((tmp_path / "jax").iterdir()) and built > 0 and not kept.exists()
    (loaded, built), first = job("first")
    entries = sorted(kept.iterdir())
    assert loaded == 0 and built == len(entries) >= 3
    for path in entries:  # (last used an hour ago: a load marks its entry used, disk_cache.used)
        os.utime(path, (path.stat().st_mtime - 3600,) * 2)
    before = {path: path.stat().st_mtime for path in entries}
    (loaded, built), again = job("again")
    assert (loaded, built) == (len(entries), 0) and sorted(kept.iterdir()) == entries
    assert all(path.stat().st_mtime > before[path] for path in entries)
    _, uncached = job("uncached", BLOCKBPE_XLA_CACHE="0")
    assert jax_filled == jax_served == first == again == uncached and len(first) > 0


DAMAGE = """
import pickle, sys, jax, numpy as np
from pathlib import Path
from blockbpe_jax.corpus import device as window_device, executable_cache
executable_cache.enable(Path(sys.argv[1]))
device = jax.devices()[0]
def gather_build(n):
    spec = window_device._specs(device, ((n,), np.int32), ((4,), np.int32))
    return lambda: window_device.device_functions().gather.lower(*spec).compile()
def gathers(run, n):
    raw = jax.numpy.arange(n, dtype=jax.numpy.int32) * 3
    return np.asarray(run(raw, jax.numpy.array([0, 2, n - 1, n + 5], jax.numpy.int32))).tolist()
key, other = ("gather", device, 4096, 4), ("gather", device, 8192, 4)
assert executable_cache._entry(key, device) != executable_cache._entry(other, device)
built = []
def counted():
    built.append(1)
    return gather_build(4096)()
want = [0, 6, 3 * 4095, 3 * 4095]
assert gathers(executable_cache.load_or_build(key, counted, device), 4096) == want and built == [1]
(entry,) = Path(sys.argv[1]).iterdir()
assert gathers(executable_cache.load_or_build(key, counted, device), 4096) == want and built == [1]
good = entry.read_bytes()
damaged = {
    "garbage": b"not a pickle",
    "foreign format": pickle.dumps((executable_cache.ENTRY_FORMAT + 1, pickle.loads(good)[1])),
    "truncated": good[: len(good) // 2],
}
for name, bad in damaged.items():
    entry.write_bytes(bad)
    before = len(built)
    assert gathers(executable_cache.load_or_build(key, counted, device), 4096) == want, name
    assert len(built) == before + 1 and entry.read_bytes() != bad, name  # (built and written again)
    assert gathers(executable_cache.load_or_build(key, counted, device), 4096) == want, name
    assert len(built) == before + 1, name  # (then loaded)
executable_cache.enable(None)
assert executable_cache._entry(key, device) is None
assert gathers(executable_cache.load_or_build(key, gather_build(4096), device), 4096) == want
assert len(list(Path(sys.argv[1]).iterdir())) == 1
print("ok")
"""


def test_damaged_entries_keys_and_the_switch(tmp_path):
    """A damaged, foreign-format or truncated entry is built again and written over, then
    loaded; different keys are different entries; off (enable(None)) nothing is read or
    written."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    run = subprocess.run(
        [sys.executable, "-c", DAMAGE, str(tmp_path / "executables")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
