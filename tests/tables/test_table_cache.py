"""The disk cache of vocabulary tables (blockbpe_jax/tables/cache.py): a cached load gives the
builder's tables exactly; another vocabulary gets another entry; a damaged entry is rebuilt."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockbpe_jax.tables import cache as table_cache, build as tables
from blockbpe_jax._data import find_data_dir
from blockbpe_jax.vocab import load_tiktoken_file


@pytest.fixture(scope="module")
def r50k():
    root = find_data_dir()
    if root is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA or place it at ../shared/data)")
    return load_tiktoken_file(root / "vocab/tiktoken/r50k_base.tiktoken")


def assert_same(a: tables.VocabTables, b: tables.VocabTables) -> None:
    for f in dataclasses.fields(tables.VocabTables):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f.name
        else:
            assert type(x) is type(y) and x == y, f.name


def test_cached_load_equals_build(tmp_path, monkeypatch, r50k):
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path))
    built = tables.build_vocab_tables(r50k)
    first = table_cache.vocab_tables(r50k)
    entries = list((tmp_path / "tables").glob("*.npz"))
    assert len(entries) == 1
    cached = table_cache.vocab_tables(r50k)
    assert_same(first, built)
    assert_same(cached, built)
    # another vocabulary (one token's bytes changed) is another entry, never the cached one
    other = dataclasses.replace(r50k, token_bytes=r50k.token_bytes[:-2] + (b"changed", r50k.token_bytes[-1]))
    assert table_cache.vocab_key(other) != table_cache.vocab_key(r50k)
    assert_same(table_cache.vocab_tables(other), tables.build_vocab_tables(other))
    assert len(list((tmp_path / "tables").glob("*.npz"))) == 2
    # a damaged entry is rebuilt
    entries[0].write_bytes(b"not an npz")
    assert_same(table_cache.vocab_tables(r50k), built)


def test_empty_cache_dir_turns_it_off(tmp_path, monkeypatch, r50k):
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", "")
    monkeypatch.chdir(tmp_path)
    assert_same(table_cache.vocab_tables(r50k), tables.build_vocab_tables(r50k))
    assert not list(tmp_path.rglob("*.npz"))


def test_tiktoken_merges_are_derived_only_for_a_build(tmp_path, monkeypatch, data_dir):
    """A tiktoken vocabulary's merges (every split of a token into two tokens) are derived at
    their first use; a start-up whose tables come from the cache never derives them, and the
    derived merges are those of the rule."""
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path))
    path = data_dir / "vocab/tiktoken/r50k_base.tiktoken"
    first = load_tiktoken_file(path)
    assert first.merges._merges is None
    built = table_cache.vocab_tables(first)  # a miss: built, which derives the merges
    assert first.merges._merges is not None
    second = load_tiktoken_file(path)
    assert_same(table_cache.vocab_tables(second), built)
    assert second.merges._merges is None
    ranks = {b: i for i, b in enumerate(second.token_bytes) if b is not None and i not in second.special_ids}
    want = {
        (ranks[t[:k]], ranks[t[k:]]): (r, r)
        for t, r in ranks.items()
        for k in range(1, len(t))
        if t[:k] in ranks and t[k:] in ranks
    }
    assert second.merges == want and len(second.merges) == len(want) > 40000
