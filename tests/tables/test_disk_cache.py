"""The disk cache's size bound (blockbpe_jax/disk_cache.py): each write trims every kind of
entry, least recently used first, to $BLOCKBPE_CACHE_MAX_MB; a load marks its entry used; the
entry just written, files of other folders and fresh temporaries of other writers stay; `info`
shows the cache."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from helpers import vocab_path

from blockbpe_jax import cli, disk_cache


def entry(root, kind, name, size, age_s):
    """An entry of `size` bytes last used `age_s` seconds ago."""
    path = root / kind / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def names(root):
    return sorted(p.name for p in root.rglob("*") if p.is_file())


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_write_removes_least_recently_used_across_kinds(root, monkeypatch):
    entry(root, "tables", "old.npz", 400_000, 300)
    entry(root, "ranks", "middle.npz", 400_000, 200)
    entry(root, "executables", "recent.pkl", 400_000, 100)
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "1.0")
    disk_cache.save_bytes(root / "pretok" / "new.npz", b"y" * 300_000)
    # 1.5 MB held, 1.0 allowed: the two oldest go, whatever their kind
    assert names(root) == ["new.npz", "recent.pkl"]
    assert (root / "pretok" / "new.npz").read_bytes() == b"y" * 300_000


def test_a_load_marks_its_entry_used(root, monkeypatch):
    build = {"n": 0}

    def kept(key):
        def make():
            build["n"] += 1
            return np.arange(100_000, dtype=np.int64)

        return disk_cache.kept_npz(
            "tables", key, make, to_arrays=lambda a: {"a": a}, from_arrays=lambda z: z["a"]
        )

    kept("first")
    kept("second")
    first, second = root / "tables" / "first.npz", root / "tables" / "second.npz"
    for path, age in ((first, 300), (second, 200)):
        os.utime(path, (time.time() - age,) * 2)
    assert np.array_equal(kept("first"), np.arange(100_000))  # loaded, not built
    assert build["n"] == 2
    assert first.stat().st_mtime > second.stat().st_mtime
    # room for two entries of ~0.8 MB: the third evicts `second`, the least recently used
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "1.7")
    kept("third")
    assert names(root) == ["first.npz", "third.npz"]


def test_the_entry_just_written_stays_even_over_the_limit(root, monkeypatch):
    entry(root, "tables", "old.npz", 1000, 100)
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "0")
    disk_cache.save_bytes(root / "tables" / "big.npz", b"z" * 5000)
    assert names(root) == ["big.npz"]


def test_other_folders_and_fresh_temporaries_are_left(root, monkeypatch):
    entry(root, "xla", "jax_entry-cache", 10_000, 1000)  # (JAX's own folder, from older versions)
    entry(root, "tables", "a.npz.123.456.tmp", 10_000, 10)  # another writer's, in progress
    entry(root, "tables", "b.npz.123.456.tmp", 10_000, disk_cache.STALE_TMP_SECONDS + 60)  # a crashed one's
    entry(root, "tables", "old.npz", 10_000, 500)
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "0.015")
    disk_cache.save_bytes(root / "ranks" / "new.npz", b"n" * 10_000)
    assert names(root) == ["a.npz.123.456.tmp", "jax_entry-cache", "new.npz"]


def test_within_the_limit_nothing_goes(root, monkeypatch):
    monkeypatch.delenv("BLOCKBPE_CACHE_MAX_MB", raising=False)
    assert disk_cache.max_bytes() == disk_cache.DEFAULT_MAX_MB * 10**6
    for k in range(5):
        entry(root, "executables", f"e{k}.pkl", 50_000, 100 * k)
    disk_cache.save_bytes(root / "executables" / "e5.pkl", b"e" * 50_000)
    assert names(root) == [f"e{k}.pkl" for k in range(6)]


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "1e3x"])
def test_a_malformed_limit_is_named(root, monkeypatch, value):
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", value)
    with pytest.raises(ValueError, match="BLOCKBPE_CACHE_MAX_MB must be a number of megabytes"):
        disk_cache.save_bytes(root / "tables" / "x.npz", b"x")
    assert not (root / "tables" / "x.npz").exists()


def test_an_entry_removed_while_listed_is_skipped(root, monkeypatch):
    """Another process may trim the cache between this one's listing and its stat of a file."""
    kept = entry(root, "tables", "kept.npz", 1000, 100)
    gone = entry(root, "tables", "gone.npz", 1000, 200)
    real_scandir = os.scandir

    class Listing:
        def __init__(self, path):
            self.it = real_scandir(path)

        def __enter__(self):
            entries = list(self.it)
            gone.unlink(missing_ok=True)  # (after the listing, before the stats)
            return iter(entries)

        def __exit__(self, *exc):
            self.it.close()

    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "0")
    with monkeypatch.context() as patched:  # (only around the cache's calls: pathlib lists with it too)
        patched.setattr(disk_cache.os, "scandir", Listing)
        held = disk_cache.usage()["bytes"]["tables"]
        disk_cache.save_bytes(root / "ranks" / "new.npz", b"n")
    assert held == 1000
    assert names(root) == ["new.npz"] and not kept.exists()


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_info_shows_the_disk_cache(capsys, tmp_path, monkeypatch):
    """`blockbpe-jax info` reports the cache (folder, limit, bytes per kind); a malformed limit is
    a one-line usage error before any work."""
    vocab = vocab_path("r50k")
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "512")
    (tmp_path / "executables").mkdir()
    (tmp_path / "executables" / "e.pkl").write_bytes(b"x" * 2_500_000)
    rc, out, err = run(capsys, "info", "--vocab", vocab, "--json")
    assert rc == 0, err
    cache = json.loads(out)["cache"]
    assert cache["folder"] == str(tmp_path) and cache["limit_bytes"] == 512_000_000
    # the vocabulary's load wrote its entries (rank file, tables) beside the one made here
    assert cache["bytes"]["executables"] == 2_500_000 and cache["bytes"]["tables"] > 0
    assert cache["bytes"]["ranks"] > 0
    rc, out, err = run(capsys, "info", "--vocab", vocab)
    row = next(line for line in out.splitlines() if line.startswith("disk cache "))
    assert f" {tmp_path}: " in row and "MB of 512 (" in row and "executables 2.5" in row
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "lots")
    rc, out, err = run(capsys, "info", "--vocab", vocab)
    assert rc == 2 and err.strip() == (
        "blockbpe-jax: error: BLOCKBPE_CACHE_MAX_MB must be a number of megabytes, 0 or more, got 'lots'"
    )
    monkeypatch.setenv("BLOCKBPE_CACHE_MAX_MB", "512")
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", "")
    rc, out, err = run(capsys, "info", "--vocab", vocab, "--json")
    assert rc == 0 and json.loads(out)["cache"] is None
