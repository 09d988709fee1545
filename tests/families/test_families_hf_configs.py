"""HF pre-tokenizer configurations on the shared GPT-2 vocabulary (Split behaviours, invert,
String patterns, Digits, Punctuation, Sequences) == HF tokenizers on the same JSON, and every
refusal path with its exact message. The CPU executor runs here, the GPU where present
(BLOCKBPE_FULL=1: more text).
"""

from __future__ import annotations

import copy
import json
import random
import re

import pytest
from hypothesis import given

import blockbpe_jax as bb
from blockbpe_jax import pretok, testing

from helpers import BACKENDS, CPU, FULL, MIXED, assert_same, corpus_texts, ours
from strategies import family_texts, fuzz
from synthetic import BYTE_LEVEL, BYTE_LEVEL_REGEX, gpt2_doc, pre_tokenizer, split


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
    "four_stages": [
        split(r"\p{N}{1,3}"),
        split(r"[一-龥぀-ゟ゠-ヿ]+"),
        split(r"[\p{P}\p{S}]"),
        split(r" ?\p{L}+|\s+|\S"),
        BYTE_LEVEL,
    ],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_hf_configs(name, data_dir, backend):
    from tokenizers import Tokenizer

    doc = copy.deepcopy(gpt2_doc(data_dir))
    steps = CONFIGS[name]
    doc["pre_tokenizer"] = pre_tokenizer(steps)
    tok = bb.Tokenizer.from_hf(Tokenizer.from_str(json.dumps(doc)))
    assert tok.tables(device=CPU).exact_error is None
    hf = Tokenizer.from_str(json.dumps(doc))
    texts = corpus_texts(data_dir, 20 if FULL else 4, seed=13) + MIXED
    rng = random.Random(len(name))
    texts += [
        "".join(rng.choice(MIXED + list(" \n12.,!aé日")) for _ in range(rng.randint(1, 8))) for _ in range(60)
    ]
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids, backend)


# ---------------------------------------------------------------------------------------------
# Refusals: each names the construct, at load or at the first exact-mode use.

REFUSALS = {
    "lookbehind": (
        [split(r"(?<=a)b|\S+|\s+"), BYTE_LEVEL],
        "pre_tokenizer.pretokenizers[0].pattern: lookbehind (?<=...) is not supported "
        "(at offset 0 of '(?<=a)b|\\\\S+|\\\\s+')",
    ),
    "negative_lookbehind": (
        [split(r"(?<!a)b|.")],
        "pre_tokenizer.pattern: lookbehind (?<!...) is not supported",
    ),
    "word_boundary": ([split(r"\b\w+")], "pre_tokenizer.pattern: anchor \\b is not supported"),
    "word_class": ([split(r"\w+|\s+")], "pre_tokenizer.pattern: escape \\w is not supported"),
    "backreference": ([split(r"(a)\1")], "pre_tokenizer.pattern: escape \\1 is not supported"),
    "atomic_group": ([split(r"(?>ab|a)c")], "pre_tokenizer.pattern: atomic group (?>...) is not supported"),
    "possessive_group": (
        [split(r"(?:ab)++")],
        "pre_tokenizer.pattern: a possessive quantifier on more than one code point is not supported",
    ),
    "start_anchor": ([split(r"^ |\S+|\s+")], "pre_tokenizer.pattern: start anchor ^ is not supported"),
    "empty_match": ([split(r"a*")], "pre_tokenizer.pattern: the pattern can match the empty string"),
    "nested_lookahead": (
        [split(r"a(?=b(?!c))")],
        "pre_tokenizer.pattern: a lookahead inside a lookahead is not supported",
    ),
    "unknown_property": (
        [split(r"\p{Greek_And_Coptic}+|.")],
        "pre_tokenizer.pattern: Unicode property \\p{Greek_And_Coptic} is not supported",
    ),
    "removed": (
        [split(r"\s+", "Removed")],
        "pre_tokenizer.behavior: 'Removed' is not supported (text would be removed)",
    ),
    "removed_invert_partial": (
        [split(r"\p{L}+", "Removed", invert=True)],
        "pre_tokenizer.pattern: the pattern does not match every character",
    ),
    "merged_invert": (
        [split(r"\s+", "MergedWithNext", invert=True)],
        "pre_tokenizer.invert: Split invert=true is only supported with behavior Isolated",
    ),
    "metaspace": (
        [{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}],
        "pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported",
    ),
    "whitespace": (
        [{"type": "Whitespace"}],
        "pre_tokenizer: pre-tokenizer type 'Whitespace' is not supported",
    ),
    "prefix_space": (
        [dict(BYTE_LEVEL_REGEX, add_prefix_space=True)],
        "pre_tokenizer: ByteLevel with add_prefix_space=true is not supported",
    ),
    "five_stages": ([split("a")] * 5, "pre_tokenizer: 5 regex stages; at most 4 are supported"),
    "step_not_an_object": (
        ["ByteLevel", BYTE_LEVEL_REGEX],
        "pre_tokenizer.pretokenizers[0]: expected an object, got str",
    ),
    "sequence_without_list": (
        [{"type": "Sequence"}, BYTE_LEVEL_REGEX],
        "pre_tokenizer.pretokenizers[0].pretokenizers: missing or not a list",
    ),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals(name, data_dir, tmp_path):
    steps, message = REFUSALS[name]
    doc = copy.deepcopy(gpt2_doc(data_dir))
    doc["pre_tokenizer"] = pre_tokenizer(steps)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    tok = bb.Tokenizer.from_file(path)  # loads: bytes mode stays available
    with pytest.raises(ValueError) as e:
        tok.encode_batch(["abc"], device=CPU)
    assert message in str(e.value), str(e.value)
    assert "Use mode='bytes'" in str(e.value)
    ids = ours(tok, ["abc abc"], mode="bytes")[0]
    assert b"".join(tok.vocab.token_bytes[i] for i in ids) == b"abc abc"


@pytest.mark.parametrize(
    "normalizer, message",
    [
        ({"type": "NFKC"}, "normalizer: normalizer NFKC is not supported (only NFC and Lowercase"),
        (
            {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFD"}]},
            "normalizer.normalizers[1]: normalizer NFD is not supported (only NFC and Lowercase",
        ),
        ("NFC", "normalizer: expected an object, got str"),
        (
            {"type": "Sequence", "normalizers": {"type": "NFC"}},
            "normalizer.normalizers: missing or not a list",
        ),
        (
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            "normalizer: normalizer Replace is not supported (only NFC and Lowercase",
        ),
    ],
)
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
    with pytest.raises(
        pretok.PretokenizerUnsupported,
        match=r"pattern: the pattern needs \d+ lookahead "
        r"and \d+ match states; the kernels hold at most 16",
    ):
        pretok.compile_pattern(pattern)


@pytest.fixture(
    scope="module",
    params=["four_stages", "contiguous", "merged_with_previous", "digits_individual", "lookahead_and_lazy"],
)
def hf_config(request, data_dir):
    from tokenizers import Tokenizer

    doc = copy.deepcopy(gpt2_doc(data_dir))
    steps = CONFIGS[request.param]
    doc["pre_tokenizer"] = pre_tokenizer(steps)
    hf = Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


@fuzz(30)
@given(texts=family_texts())
def test_fuzz_hf_configs(hf_config, texts):
    tok, hf = hf_config
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids)
