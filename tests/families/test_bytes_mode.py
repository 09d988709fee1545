"""Bytes mode (the BlockBPE paper) equals tiktoken with pattern (?s:.+), token for token.

Every shared corpus is cut into excerpts of 128-4096 bytes, covering all of it; each vocabulary
is loaded from its .tiktoken file and from its tokenizer.json. A second set of excerpts has
allowed special tokens spliced in, so merges must stop at them.
"""

from __future__ import annotations

import random

import pytest

from blockbpe_jax import testing

from helpers import BACKENDS, FORMATS, device_for, load_tokenizer, mismatches, oracle


def _corpus_excerpts(data_dir):
    out = []
    for seed, path in enumerate(testing.corpus_paths(data_dir)):
        out += testing.excerpts(testing.read_corpus(path), 128, 4096, seed=seed)
    return out


@pytest.fixture(scope="module")
def corpus_excerpts(data_dir):
    return _corpus_excerpts(data_dir)


_REFS: dict = {}


def _references(name, texts):
    """tiktoken's ids for every excerpt, computed once per vocabulary."""
    if name not in _REFS:
        enc = oracle(name, "tiktoken", testing.BYTES_MODE_PATTERN)
        _REFS[name] = enc.encode_ordinary_batch([t.decode("utf-8") for t in texts], num_threads=8)
    return _REFS[name]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(testing.VOCAB_FILES))
def test_bytes_mode_equals_tiktoken_on_corpora(name, fmt, backend, corpus_excerpts):
    kind, block_size = backend
    tok = load_tokenizer(name, fmt)
    texts = corpus_excerpts
    refs = _references(name, texts)
    bad = mismatches(
        tok, texts, refs, device=device_for(kind), mode="bytes", block_size=block_size, max_len=4100
    )
    assert not bad, f"{len(bad)}/{len(texts)} excerpts differ; first: #{bad[0][0]}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(testing.VOCAB_FILES))
def test_bytes_mode_special_tokens_split_merges(name, backend, data_dir):
    kind, block_size = backend
    tok = load_tokenizer(name, "tiktoken")
    enc = oracle(name, "tiktoken", testing.BYTES_MODE_PATTERN)
    specials = sorted(tok.vocab.special_tokens)
    rng = random.Random(7)
    raw = testing.read_corpus(testing.corpus_paths(data_dir)[0])
    texts = []
    for piece in testing.excerpts(raw[:400_000], 16, 600, seed=3):
        s = piece.decode("utf-8")
        for _ in range(rng.randint(0, 4)):  # splice specials anywhere, also back to back
            at = rng.randint(0, len(s))
            s = s[:at] + rng.choice(specials) * rng.randint(1, 2) + s[at:]
        texts.append(s.encode("utf-8"))
    texts += [b"", specials[0].encode(), (specials[0] * 3).encode(), b"<|" + specials[0].encode()]
    refs = [enc.encode(t.decode("utf-8"), allowed_special="all") for t in texts]
    bad = mismatches(
        tok, texts, refs, device=device_for(kind), mode="bytes", block_size=block_size, allowed_special="all"
    )
    assert not bad, f"{len(bad)}/{len(texts)} differ; first: #{bad[0][0]} {texts[bad[0][0]][:80]!r}"
    # With no specials allowed, their text is ordinary text (tiktoken's encode_ordinary).
    refs = [enc.encode_ordinary(t.decode("utf-8")) for t in texts]
    bad = mismatches(
        tok, texts, refs, device=device_for(kind), mode="bytes", block_size=block_size, allowed_special="none"
    )
    assert not bad, f"{len(bad)}/{len(texts)} differ without specials; first: #{bad[0][0]}"
