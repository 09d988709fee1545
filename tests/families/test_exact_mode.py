"""Exact mode equals tiktoken (with the vocabulary's real pattern) and HF tokenizers.

`.tiktoken` vocabularies are checked against tiktoken, `tokenizer.json` ones against HF
`tokenizers` (each against its own oracle: the cl100k HF port uses the Llama-3 regex, which
differs from tiktoken's cl100k on whitespace at the end of a text). Every shared corpus is cut
into excerpts of 1-8192 bytes; hypothesis adds mixed-script text with special tokens.
"""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings

from blockbpe_jax import testing

from helpers import BACKENDS, FORMATS, device_for, load_tokenizer, mismatches, vocab_path

NAMES = list(testing.VOCAB_FILES)


@functools.lru_cache(maxsize=None)
def hf_oracle(name: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(vocab_path(name, "json")))


@functools.lru_cache(maxsize=None)
def tiktoken_exact(name: str):
    tok = load_tokenizer(name, "tiktoken")
    return testing.tiktoken_oracle(name, tok, tok.vocab.pattern)


def reference_ids(name: str, fmt: str, texts: list[str], allowed_special: bool) -> list[list[int]]:
    if fmt == "tiktoken":
        enc = tiktoken_exact(name)
        if allowed_special:
            return [enc.encode(t, allowed_special="all") for t in texts]
        return enc.encode_ordinary_batch(texts, num_threads=8)
    hf = hf_oracle(name)  # HF always splits on its added tokens
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


@functools.lru_cache(maxsize=None)
def corpus_excerpts() -> tuple[bytes, ...]:
    out = []
    for seed, path in enumerate(testing.corpus_paths()):
        out += testing.excerpts(testing.read_corpus(path), 1, 8192, seed=100 + seed)
    return tuple(out)


_REFS: dict = {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_exact_mode_equals_oracle_on_corpora(name, fmt, backend, data_dir):
    kind, block_size = backend
    texts = list(corpus_excerpts())
    if (name, fmt) not in _REFS:
        _REFS[name, fmt] = reference_ids(name, fmt, [t.decode("utf-8") for t in texts], False)
    refs = _REFS[name, fmt]
    tok = load_tokenizer(name, fmt)
    bad = mismatches(
        tok, texts, refs, device=device_for(kind), mode="exact", block_size=block_size, max_len=8200
    )
    assert not bad, f"{len(bad)}/{len(texts)} excerpts differ; first: #{bad[0][0]} {texts[bad[0][0]][:60]!r}"


def _check_texts(name, fmt, backend, texts):
    kind, block_size = backend
    tok = load_tokenizer(name, fmt)
    refs = reference_ids(name, fmt, texts, allowed_special=True)
    data = [t.encode("utf-8") for t in texts]
    bad = mismatches(
        tok, data, refs, device=device_for(kind), mode="exact", block_size=block_size, allowed_special="all"
    )
    assert not bad, f"text {texts[bad[0][0]]!r}: ours {bad[0][1]} reference {bad[0][2]}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_exact_mode_on_generated_text(name, fmt, backend, data_dir):
    specials = tuple(sorted(load_tokenizer(name, fmt).vocab.special_tokens))[:8]

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(testing.mixed_text(specials))
    def check(text):
        _check_texts(name, fmt, backend, [text])

    check()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_exact_mode_edge_cases(name, backend, data_dir):
    special = sorted(load_tokenizer(name, "tiktoken").vocab.special_tokens)[0]
    texts = [
        "",
        " ",
        "\n",
        "  \n  ",
        "x\n  ",
        "a  ",
        "   b",
        "1234567",
        "don't I'LL 'S",
        "'ſ",
        "\r\n\r\n  x",
        special,
        special * 3,
        f"a{special}  {special}\n",
        " " * 5000 + "x",
        "9" * 3001,
        "é" * 2000,
        "ab" * 3000,
        "\u3000\u3000x\u00a0y",
        "👩‍👩‍👧" * 40,
    ]
    for fmt in FORMATS:
        _check_texts(name, fmt, backend, texts)


@pytest.mark.parametrize("backend", BACKENDS)
def test_specials_in_rows_of_one_block(backend, data_dir):
    """Rows of at most 4096 bytes in a batch of 32 (one block per row): many matches that do
    not overlap (documents packed with a separator after each: marked in parallel) and chains
    of matches inside matches ('@#@' in '@#@#@#...': the leftmost-first walk) equal tiktoken."""
    import tiktoken
    import tiktoken.load

    import blockbpe_jax as bb

    base = load_tokenizer("cl100k", "tiktoken")
    specials = {"@#@": 100300, "#@#@#": 100301, "<|endoftext|>": 100257, "<|fim_prefix|>": 100258}
    enc = tiktoken.Encoding(
        "overlap",
        pat_str=base.vocab.pattern,
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(vocab_path("cl100k"))),
        special_tokens=specials,
    )
    tok = bb.Tokenizer.from_tiktoken(enc)
    words = testing.TEXT_FRAGMENTS + ["<|endoftext", "|>", "@", "#", " ", "\n\n"]
    rng = random.Random(5)
    texts = []
    for k in range(32):
        parts = [rng.choice(words) for _ in range(rng.randrange(1, 300))]
        sep = "<|endoftext|>" if k % 4 else "@#@#@"
        texts.append(sep.join("".join(parts[i : i + 5]) for i in range(0, len(parts), 5)))
    texts = [t.encode()[:4096].decode(errors="ignore") for t in texts]
    refs = [enc.encode(t, allowed_special="all") for t in texts]
    kind, block_size = backend
    bad = mismatches(
        tok,
        [t.encode() for t in texts],
        refs,
        device=device_for(kind),
        mode="exact",
        block_size=block_size,
        allowed_special="all",
        max_len=4096,
    )
    assert not bad, f"text {texts[bad[0][0]][:80]!r}: ours {bad[0][1][:20]} reference {bad[0][2][:20]}"
