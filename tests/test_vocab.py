"""Tests of vocabulary loading (blockbpe_jax.vocab) and device table layouts (blockbpe_jax.tables).

CPU only, no FFI. Real vocabularies come from the shared data (fixture `data_dir`, skipped when
absent); each is loaded once per session. Where possible the checks are differential: the
.tiktoken and tokenizer.json forms of one vocabulary must agree, and a plain-Python BPE that
only uses the tables (lookup_pair / lookup_piece) must reproduce tiktoken's and HF's BPE.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbpe_jax import _data
from blockbpe_jax.tables import (
    _pair_hash_alt_int,
    _pair_hash_int,
    _place_by_two_choices,
    build_special_tables,
    build_vocab_tables,
    lookup_pair,
    lookup_piece,
    pair_hash,
    pair_hash_alt,
    piece_hash,
)
from blockbpe_jax.vocab import (
    HF_BYTELEVEL_PATTERN,
    KNOWN_PATTERNS,
    LLAMA3_SPECIAL_TOKENS,
    Vocab,
    VocabError,
    bytes_to_unicode,
    from_tiktoken_encoding,
    known_tiktoken_file_defaults,
    load_tiktoken_file,
    load_tokenizer_json,
    recognise_pattern,
)

# name -> (file under vocab/, expected pattern_name)
VOCAB_FILES = {
    "r50k": ("tiktoken/r50k_base.tiktoken", "r50k"),
    "p50k": ("tiktoken/p50k_base.tiktoken", "r50k"),
    "cl100k": ("tiktoken/cl100k_base.tiktoken", "cl100k"),
    "o200k": ("tiktoken/o200k_base.tiktoken", "o200k"),
    "llama3": ("llama3/tokenizer.model", "llama3"),
    "gpt2_hf": ("gpt2/tokenizer.json", "r50k"),
    # The HF port of cl100k carries the pre-2024 cl100k regex, which is Llama 3's (see vocab.py).
    "cl100k_hf": ("cl100k_hf/tokenizer.json", "llama3"),
    "o200k_hf": ("o200k_hf/tokenizer.json", "o200k"),
    "llama3_hf": ("llama3/tokenizer.json", "llama3"),
}
# (tiktoken-format name, tokenizer.json name) of the same vocabulary
SAME_VOCAB = [("r50k", "gpt2_hf"), ("cl100k", "cl100k_hf"), ("o200k", "o200k_hf"), ("llama3", "llama3_hf")]


# --------------------------------------------------------------------------------------------
# Session caches of the real vocabularies (each loaded once)
# --------------------------------------------------------------------------------------------


@functools.cache
def _load(data_dir: Path, name: str) -> Vocab:
    path = data_dir / "vocab" / VOCAB_FILES[name][0]
    return load_tokenizer_json(path) if path.suffix == ".json" else load_tiktoken_file(path)


@functools.cache
def _tables(data_dir: Path, name: str):
    return build_vocab_tables(_load(data_dir, name))


@pytest.fixture(scope="session")
def vocab(data_dir):
    return lambda name: _load(data_dir, name)


@pytest.fixture(scope="session")
def tables(data_dir):
    return lambda name: _tables(data_dir, name)


@functools.cache
def _sample_text(data_dir: Path) -> str:
    """A mix of prose, code and non-Latin text, to draw pre-tokenized pieces from."""
    corpus = data_dir / "corpus"
    prose = (corpus / "war_and_peace_en.txt").read_text(encoding="utf-8")[20_000:40_000]
    code = gzip.open(corpus / "code_python_stdlib.py.txt.gz", "rb").read(30_000).decode("utf-8", "ignore")
    other = (
        "Привет, мир! Он сказал: «нет». 你好，世界。東京タワーに行きました。 مرحبا بالعالم "
        "Ελληνικά κείμενα 😀🎉👍🏽 naïve café ſtraße I'M HE'S they'RE  \t\r\n\n  \u00a0x\u2003y "
        "1234567 3.14159 ١٢٣ ⅧⅫ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x00\x01\x7f"
    )
    return prose + code + other


def _pieces(vocab: Vocab, text: str, limit: int) -> list[bytes]:
    """Distinct pre-tokenized pieces (python `regex` stands in for the pre-tokenizer here)."""
    seen = dict.fromkeys(m.encode("utf-8") for m in regex.findall(vocab.pattern, text))
    return list(seen)[:limit]


# --------------------------------------------------------------------------------------------
# Synthetic files
# --------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _tiktoken_lines() -> list[str]:
    """A valid small tiktoken file: the 256 bytes, then 'ab' (256), 'abc' (257), 'bc' (258)."""
    lines = [f"{_b64(bytes([b]))} {b}" for b in range(256)]
    lines += [f"{_b64(b'ab')} 256", f"{_b64(b'abc')} 257", f"{_b64(b'bc')} 258"]
    return lines


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _tokenizer_json_doc(**overrides) -> dict:
    """A valid small byte-level BPE tokenizer.json (GPT-2 style), as a dict to tweak."""
    u = bytes_to_unicode()
    vocab = {u[b]: b for b in range(256)}
    vocab.update({"ab": 256, "abc": 257, "bc": 258})
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": 259, "content": "<|end|>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": ["a b", "ab c", "b c"]},
    }
    doc.update(overrides)
    return doc


def _split_then_bytelevel(pattern: str, behavior: str = "Isolated", invert: bool = False) -> dict:
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }


def _write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Data location
# --------------------------------------------------------------------------------------------


def test_find_data_dir_honours_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(_data.ENV_VAR, str(tmp_path))
    assert _data.find_data_dir() == tmp_path
    monkeypatch.setenv(_data.ENV_VAR, str(tmp_path / "missing"))
    assert _data.find_data_dir() is None  # a typo is reported, not silently replaced


# --------------------------------------------------------------------------------------------
# Real vocabularies: loading, cross-format agreement
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VOCAB_FILES))
def test_real_vocab_loads_with_recognised_pattern(vocab, name):
    v = vocab(name)
    assert v.pattern_name == VOCAB_FILES[name][1]
    assert v.unsupported is None
    assert len(v.byte_ids) == 256
    assert all(v.token_bytes[i] == bytes([b]) for b, i in enumerate(v.byte_ids))
    for text, token_id in v.special_tokens.items():
        assert v.token_bytes[token_id] == text.encode("utf-8")
    assert v.whole_piece_shortcut == (name in ("r50k", "p50k", "cl100k", "o200k", "llama3", "llama3_hf"))


def test_real_vocab_sizes_and_holes(vocab):
    assert vocab("r50k").n_vocab == 50257
    p50k = vocab("p50k")
    assert p50k.n_vocab == 50281 and p50k.token_bytes[50256] == b"<|endoftext|>"
    cl100k = vocab("cl100k")
    assert cl100k.n_vocab == 100277
    assert cl100k.token_bytes[100256] is None and cl100k.token_bytes[100261:100276] == (None,) * 15
    assert vocab("o200k").n_vocab == 200019 and vocab("o200k").token_bytes[199998] is None
    assert vocab("llama3").n_vocab == 128256 and len(vocab("llama3").special_tokens) == 256


@pytest.mark.parametrize("tiktoken_name, hf_name", SAME_VOCAB)
def test_tiktoken_and_tokenizer_json_agree(vocab, tiktoken_name, hf_name):
    tt, hf = vocab(tiktoken_name), vocab(hf_name)
    assert tt.token_bytes == hf.token_bytes
    assert tt.byte_ids == hf.byte_ids
    assert tt.special_tokens == hf.special_tokens
    assert tt.mergeable_ids == hf.mergeable_ids
    # Every HF merge is one of tiktoken's (same pair, same merged token), and HF's list order is
    # tiktoken's rank order of the merged tokens: the two rankings agree wherever both exist.
    ranks_in_hf_order = []
    for pair, (_, merged) in sorted(hf.merges.items(), key=lambda kv: kv[1][0]):
        tt_rank, tt_merged = tt.merges[pair]
        assert tt_merged == merged
        ranks_in_hf_order.append(tt_rank)
    assert ranks_in_hf_order == sorted(ranks_in_hf_order)
    if tiktoken_name == "llama3":  # Llama 3's HF file lists every split, like tiktoken
        assert hf.merges.keys() == tt.merges.keys()


def test_llama3_specials_match_tokenizer_json(data_dir):
    doc = json.loads((data_dir / "vocab/llama3/tokenizer.json").read_text(encoding="utf-8"))
    assert [(t["id"], t["content"]) for t in doc["added_tokens"]] == [
        (128000 + i, text) for i, text in enumerate(LLAMA3_SPECIAL_TOKENS)
    ]


@pytest.mark.parametrize("name", ["r50k", "cl100k"])
def test_from_tiktoken_encoding_agrees_with_file(vocab, data_dir, name):
    tiktoken_load = pytest.importorskip("tiktoken.load")
    import tiktoken

    v = vocab(name)
    enc = tiktoken.Encoding(
        v.name,
        pat_str=v.pattern,
        mergeable_ranks=tiktoken_load.load_tiktoken_bpe(str(data_dir / "vocab" / VOCAB_FILES[name][0])),
        special_tokens=v.special_tokens,
    )
    w = from_tiktoken_encoding(enc)
    assert (w.name, w.token_bytes, w.byte_ids, w.special_tokens) == (v.name, v.token_bytes, v.byte_ids, v.special_tokens)
    assert w.merges == v.merges
    assert (w.pattern, w.pattern_name, w.whole_piece_shortcut) == (v.pattern, v.pattern_name, True)


@pytest.mark.parametrize("name", ["gpt2_hf", "cl100k_hf"])
def test_hf_merge_rank_is_list_index(vocab, data_dir, name):
    v = vocab(name)
    doc = json.loads((data_dir / "vocab" / VOCAB_FILES[name][0]).read_text(encoding="utf-8"))
    model_vocab = doc["model"]["vocab"]
    for index, merge in enumerate(doc["model"]["merges"]):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        assert v.merges[(model_vocab[left], model_vocab[right])] == (index, model_vocab[left + right])
    assert len(v.merges) == len(doc["model"]["merges"])


def test_tiktoken_merges_are_exactly_the_token_splits(vocab):
    v = vocab("r50k")
    id_of = {b: i for i, b in enumerate(v.token_bytes) if b is not None and i not in v.special_ids}
    expected = {}
    for token, token_id in id_of.items():
        for cut in range(1, len(token)):
            if token[:cut] in id_of and token[cut:] in id_of:
                expected[(id_of[token[:cut]], id_of[token[cut:]])] = (token_id, token_id)
    assert v.merges == expected


# --------------------------------------------------------------------------------------------
# Known patterns and their recognition
# --------------------------------------------------------------------------------------------


def test_known_patterns_match_tiktoken_ext(monkeypatch):
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    # The constructors only download ranks; stub that out to read their pattern and specials.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: {})
    for ctor, name in [("r50k_base", "r50k"), ("p50k_base", "r50k"), ("cl100k_base", "cl100k"), ("o200k_base", "o200k")]:
        spec = getattr(openai_public, ctor)()
        assert spec["pat_str"] == KNOWN_PATTERNS[name]
        file_name, pattern, specials = known_tiktoken_file_defaults(f"/x/{ctor}.tiktoken")
        assert (file_name, pattern, specials) == (ctor, spec["pat_str"], spec["special_tokens"])


def test_known_file_defaults_for_unknown_file():
    assert known_tiktoken_file_defaults("some/dir/mine.tiktoken") == ("mine", None, {})


# Spellings that recognise_pattern claims are equivalent to a known pattern, and a few that it
# must refuse. The hypothesis test below checks the claimed equivalences on random text.
EQUIVALENT_SPELLINGS = [
    (HF_BYTELEVEL_PATTERN, "r50k"),
    (r"""'d|'s|'t|'re|'ve|'m|'ll| ?\p{L}++| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s++$|\s+(?!\S)|\s""", "r50k"),
    (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s++$|\s*[\r\n]|\s+(?!\S)|\s""", "cl100k"),
    (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]+[\r\n]*+|\s*[\r\n]++|\s+(?!\S)|\s+""", "llama3"),
    (KNOWN_PATTERNS["o200k"].replace(r"\s*[\r\n]+|", r"\s*[\r\n]++|"), "o200k"),
]
NOT_RECOGNISED = [
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s+$|\s+(?!\S)|\s""",  # greedy `\s+$`
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s++(?!\S)|\s""",  # possessive lookahead
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # r50k is case-sensitive
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+?| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # lazy
    r"""'s|'t|'re|'ve|'m|'ll| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # lost 'd
    r"""\w+|\s+""",
    r"""(?s:.+)""",
    "",
]


@pytest.mark.parametrize("pattern, name", EQUIVALENT_SPELLINGS)
def test_equivalent_spellings_are_recognised(pattern, name):
    assert recognise_pattern(pattern) == name


@pytest.mark.parametrize("pattern", NOT_RECOGNISED)
def test_other_spellings_are_not_recognised(pattern):
    assert recognise_pattern(pattern) is None


def test_known_patterns_recognise_themselves():
    for name, pattern in KNOWN_PATTERNS.items():
        assert recognise_pattern(pattern) == name
    assert recognise_pattern(None) is None


def test_llama3_spelling_is_not_cl100k():
    # Why cl100k_hf gets "llama3": trailing whitespace with a newline at the end of the text.
    assert regex.findall(KNOWN_PATTERNS["cl100k"], "x\n ") == ["x", "\n "]
    assert regex.findall(KNOWN_PATTERNS["llama3"], "x\n ") == ["x", "\n", " "]


# Characters that exercise every alternative: letters of both cases (and ſ, which folds to s),
# contractions, digits, punctuation, slash, every kind of whitespace.
_EDGE_ALPHABET = list("aAsStTdDmMlLvVeErR'’ \t\n\r\x0b\u00a0\u20031234٣.,!?/-_ſ中é😀")


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=_EDGE_ALPHABET, max_size=24))
def test_equivalent_spellings_split_text_identically(text):
    for pattern, name in EQUIVALENT_SPELLINGS:
        assert regex.findall(pattern, text) == regex.findall(KNOWN_PATTERNS[name], text), (pattern, text)


# --------------------------------------------------------------------------------------------
# tokenizer.json: pre-tokenizer support
# --------------------------------------------------------------------------------------------


def test_synthetic_tokenizer_json_loads(tmp_path):
    v = load_tokenizer_json(_write_json(tmp_path / "tokenizer.json", _tokenizer_json_doc()))
    a, b, c = (v.byte_ids[ord(ch)] for ch in "abc")
    assert v.merges == {(a, b): (0, 256), (256, c): (1, 257), (b, c): (2, 258)}
    assert v.special_tokens == {"<|end|>": 259} and v.token_bytes[259] == b"<|end|>"
    assert v.n_vocab == 260 and v.unsupported is None and v.pattern_name == "r50k"
    assert v.name == tmp_path.name and not v.whole_piece_shortcut


def test_merges_as_lists(tmp_path):
    doc = _tokenizer_json_doc()
    doc["model"]["merges"] = [m.split(" ") for m in doc["model"]["merges"]]  # newer HF format
    as_lists = load_tokenizer_json(_write_json(tmp_path / "lists.json", doc))
    as_strings = load_tokenizer_json(_write_json(tmp_path / "strings.json", _tokenizer_json_doc()))
    assert as_lists.merges == as_strings.merges and len(as_lists.merges) == 3


def test_added_tokens_are_all_specials(tmp_path):
    doc = _tokenizer_json_doc()
    doc["added_tokens"].append(dict(doc["added_tokens"][0], id=260, content="plain", special=False))
    v = load_tokenizer_json(_write_json(tmp_path / "t.json", doc))
    assert v.special_tokens == {"<|end|>": 259, "plain": 260}


UNSUPPORTED_CASES = {
    "normalizer": ({"normalizer": {"type": "NFKC"}}, "normalizer: normalizer NFKC is not supported (only NFC)"),
    "metaspace": ({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}},
                  "pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported"),
    "whitespace_seq": ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}},
                       "pre_tokenizer.pretokenizers[0]: pre-tokenizer type 'Whitespace' is not supported"),
    "no_pre_tokenizer": ({"pre_tokenizer": None}, "pre_tokenizer: no pre-tokenizer"),
    "prefix_space": ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}},
                     "add_prefix_space=true"),
    "removed": ({"pre_tokenizer": _split_then_bytelevel(KNOWN_PATTERNS["llama3"], "Removed")},
                "pre_tokenizer.pretokenizers[0].behavior: 'Removed' is not supported"),
    "lstrip": ({"added_tokens": [{"id": 259, "content": "<|end|>", "lstrip": True, "special": True}]},
               "uses lstrip"),
    "suffix": ({"model": dict(_tokenizer_json_doc()["model"], end_of_word_suffix="</w>")},
               "end_of_word_suffix"),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED_CASES))
def test_unsupported_features_load_with_reason(tmp_path, case):
    overrides, reason = UNSUPPORTED_CASES[case]
    v = load_tokenizer_json(_write_json(tmp_path / "tokenizer.json", _tokenizer_json_doc(**overrides)))
    assert v.unsupported is not None and reason in v.unsupported


@pytest.mark.parametrize("behavior, invert", [("Isolated", False), ("Removed", True)])
def test_split_forms_for_known_pattern_are_supported(tmp_path, behavior, invert):
    doc = _tokenizer_json_doc(pre_tokenizer=_split_then_bytelevel(KNOWN_PATTERNS["llama3"], behavior, invert))
    v = load_tokenizer_json(_write_json(tmp_path / "tokenizer.json", doc))
    assert (v.unsupported, v.pattern, v.pattern_name) == (None, KNOWN_PATTERNS["llama3"], "llama3")


def test_removed_inverted_split_equals_isolated_in_hf(tmp_path, data_dir):
    """The claim behind accepting Split(Removed, invert=true): for a recognised pattern HF
    produces the same pieces as Split(Isolated)."""
    tokenizers = pytest.importorskip("tokenizers")
    text = _sample_text(data_dir)
    for name in ("llama3", "o200k", "cl100k"):
        ids = []
        for behavior, invert in [("Isolated", False), ("Removed", True)]:
            doc = _tokenizer_json_doc(pre_tokenizer=_split_then_bytelevel(KNOWN_PATTERNS[name], behavior, invert))
            tok = tokenizers.Tokenizer.from_str(json.dumps(doc))
            ids.append(tok.encode(text, add_special_tokens=False).ids)
        assert ids[0] == ids[1], name


# --------------------------------------------------------------------------------------------
# Malformed inputs: VocabError naming the file and line / JSON path
# --------------------------------------------------------------------------------------------

_BAD_TIKTOKEN_LINES = {
    "one_field": ("YWJj", "expected '<base64 token> <rank>'"),
    "three_fields": (f"{_b64(b'xy')} 300 1", "expected '<base64 token> <rank>'"),
    "tab_separated": (f"{_b64(b'xy')}\t300", "expected '<base64 token> <rank>'"),
    "not_base64": ("@@@@ 300", "not valid base64"),
    "bad_padding": ("eHk 300", "not valid base64"),
    "empty_token": (" 300", "expected"),
    "rank_not_int": (f"{_b64(b'xy')} 3x0", "not a non-negative integer"),
    "negative_rank": (f"{_b64(b'xy')} -3", "not a non-negative integer"),
    "duplicate_token": (f"{_b64(b'ab')} 300", "duplicate token b'ab' (first on line 257)"),
    "duplicate_rank": (f"{_b64(b'xy')} 257", "duplicate rank 257 (first on line 258)"),
    "huge_rank": (f"{_b64(b'xy')} 99999999999", "exceeds"),
}


@pytest.mark.parametrize("case", list(_BAD_TIKTOKEN_LINES))
def test_malformed_tiktoken_line(tmp_path, case):
    bad_line, message = _BAD_TIKTOKEN_LINES[case]
    lines = _tiktoken_lines()
    path = _write(tmp_path / "bad.tiktoken", "\n".join(lines + [bad_line]) + "\n")
    with pytest.raises(VocabError) as info:
        load_tiktoken_file(path)
    assert f"{path}:{len(lines) + 1}:" in str(info.value)
    assert message in str(info.value)


def test_valid_synthetic_tiktoken_with_holes(tmp_path):
    lines = _tiktoken_lines()[:-1] + [f"{_b64(b'bc')} 300", ""]  # rank 258..299 unused
    v = load_tiktoken_file(_write(tmp_path / "mine.tiktoken", "\r\n".join(lines)), special_tokens={"<|x|>": 400})
    assert v.name == "mine" and v.pattern is None and v.pattern_name is None
    assert v.n_vocab == 401 and v.token_bytes[258:300] == (None,) * 42 and v.token_bytes[400] == b"<|x|>"
    assert v.merges[(97, 98)] == (256, 256) and v.merges[(256, 99)] == (257, 257) and v.merges[(97, 300)] == (257, 257)
    t = build_vocab_tables(v)
    assert t.token_offsets[259] == t.token_offsets[300]  # holes take no bytes
    assert lookup_piece(t, b"<|x|>") is None  # specials are not whole-piece tokens


def test_tiktoken_missing_single_byte(tmp_path):
    lines = [line for line in _tiktoken_lines() if line != f"{_b64(b'A')} 65"]
    path = _write(tmp_path / "nobyte.tiktoken", "\n".join(lines))
    with pytest.raises(VocabError, match=r"missing single-byte tokens for 1 byte values \(0x41\)") as info:
        load_tiktoken_file(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_tiktoken_empty_file(tmp_path, content):
    path = _write(tmp_path / "empty.tiktoken", content)
    with pytest.raises(VocabError, match="empty") as info:
        load_tiktoken_file(path)
    assert str(path) in str(info.value)


def test_tiktoken_special_colliding_with_token(tmp_path):
    path = _write(tmp_path / "v.tiktoken", "\n".join(_tiktoken_lines()))
    with pytest.raises(VocabError, match="already the mergeable token b'abc'") as info:
        load_tiktoken_file(path, special_tokens={"<|x|>": 257})
    assert str(path) in str(info.value)
    # Two special strings may share an id (as in tiktoken): the first one listed decodes.
    v = load_tiktoken_file(path, special_tokens={"<|x|>": 300, "<|y|>": 300})
    assert v.special_tokens == {"<|x|>": 300, "<|y|>": 300} and v.token_bytes[300] == b"<|x|>"


def _without(d: dict, key) -> dict:
    return {k: v for k, v in d.items() if k != key}


def _bad_json_docs():
    u = bytes_to_unicode()
    good = _tokenizer_json_doc()
    model = good["model"]
    return {
        "missing_model": (_without(good, "model"), "model: missing"),
        "missing_vocab": (dict(good, model=_without(model, "vocab")), "model.vocab: missing"),
        "missing_merges": (dict(good, model=_without(model, "merges")), "model.merges: missing"),
        "wordpiece": (dict(good, model=dict(model, type="WordPiece")), "model type 'WordPiece' is not supported"),
        "unknown_merge_token": (dict(good, model=dict(model, merges=model["merges"] + ["zz c"])),
                                "model.merges[3]: merge 'zz c' refers to unknown token 'zz'"),
        "merge_result_missing": (dict(good, model=dict(model, merges=model["merges"] + ["c a"])),
                                 "model.merges[3]: merge result 'ca' is not in model.vocab"),
        "bad_merge_shape": (dict(good, model=dict(model, merges=model["merges"] + [["a", "b", "c"]])),
                            "model.merges[3]: expected two tokens"),
        "duplicate_id": (dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=256))),
                         "model.vocab['xyz']: duplicate id 256"),
        "negative_id": (dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=-4))),
                        "model.vocab['xyz']: id -4 is outside"),
        "not_byte_level": (dict(good, model=dict(model, vocab=dict(model["vocab"], **{"a b": 300}))),
                           "model.vocab['a b']: key is not a byte-level encoded token"),
        "missing_byte": (dict(good, model=dict(model, vocab=_without(model["vocab"], u[0x0A]))),
                         "missing single-byte tokens for 1 byte values (0x0a)"),
        "special_collision": (dict(good, added_tokens=[{"id": 257, "content": "<|x|>", "special": True}]),
                              "special token '<|x|>' has id 257, which is already the mergeable token b'abc'"),
        "added_without_id": (dict(good, added_tokens=[{"content": "<|x|>", "special": True}]),
                             "added_tokens[0]: id None is not an integer"),
        "top_level_list": ([1, 2], "top level is not a JSON object"),
        "empty_special": (dict(good, added_tokens=[{"id": 300, "content": "", "special": True}]),
                          "special token with id 300 is empty"),
    }


@pytest.mark.parametrize("case", list(_bad_json_docs()))
def test_malformed_tokenizer_json(tmp_path, case):
    doc, message = _bad_json_docs()[case]
    path = _write_json(tmp_path / "tokenizer.json", doc)
    with pytest.raises(VocabError) as info:
        load_tokenizer_json(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_tokenizer_json_not_json(tmp_path):
    path = _write(tmp_path / "tokenizer.json", '{"model": {')
    with pytest.raises(VocabError, match="not valid JSON") as info:
        load_tokenizer_json(path)
    assert str(path) in str(info.value) and "line 1" in str(info.value)


def test_hf_duplicate_merge_takes_last_rank_like_hf(tmp_path):
    doc = _tokenizer_json_doc()
    doc["model"]["merges"] = ["a b", "b c", "a b", "ab c"]
    v = load_tokenizer_json(_write_json(tmp_path / "t.json", doc))
    assert v.merges[(v.byte_ids[97], v.byte_ids[98])] == (2, 256)


# --------------------------------------------------------------------------------------------
# Tables: hashes and layout
# --------------------------------------------------------------------------------------------


def _pair_hash_reference(left: int, right: int) -> int:
    m = 0xFFFFFFFF
    h = (left * 0x9E3779B1 + right) & m
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def test_pair_hash_matches_reference():
    rng = np.random.default_rng(0)
    left = rng.integers(0, 2**31 - 1, 5000, dtype=np.int64)
    right = rng.integers(0, 2**31 - 1, 5000, dtype=np.int64)
    left[:3], right[:3] = [0, 1, 2**31 - 1], [0, 0, 2**31 - 1]
    hashes = pair_hash(left.astype(np.int32), right.astype(np.int32))
    assert hashes.dtype == np.uint32
    expected = [_pair_hash_reference(int(a), int(b)) for a, b in zip(left, right)]
    assert hashes.tolist() == expected
    assert [_pair_hash_int(int(a), int(b)) for a, b in zip(left, right)] == expected


def test_pair_hash_alt_is_pair_hash_of_swapped_salted_pair():
    rng = np.random.default_rng(1)
    left = rng.integers(0, 2**31 - 1, 2000, dtype=np.int64)
    right = rng.integers(0, 2**31 - 1, 2000, dtype=np.int64)
    alt = pair_hash_alt(left.astype(np.int32), right.astype(np.int32))
    expected = [_pair_hash_reference(int(b) ^ 0x5BD1E995, int(a)) for a, b in zip(left, right)]
    assert alt.tolist() == expected
    assert [_pair_hash_alt_int(int(a), int(b)) for a, b in zip(left, right)] == expected


@pytest.mark.parametrize("load, crowd", [(0.45, 1), (0.1, 8)])
def test_two_choice_placement(load, crowd):
    """Every key lands in one of its two slots, one key per slot: at the shared vocabularies'
    load (0.38-0.45), and with first choices crowded onto an eighth of the slots. Both cases
    need the eviction chains (149 and 16 keys find both choices taken by earlier keys)."""
    rng = np.random.default_rng(2)
    capacity = 1 << 12
    n = int(load * capacity)
    first = rng.integers(0, capacity // crowd, n)
    second = rng.integers(0, capacity, n)
    slots = _place_by_two_choices(first, second, capacity)
    assert slots is not None
    assert ((slots == first) | (slots == second)).all()
    assert len(set(slots.tolist())) == n


def test_two_choice_placement_reports_failure():
    """Three keys that share both slots cannot be placed: None, so the builder grows the table."""
    first, second = np.array([5, 5, 5, 9]), np.array([7, 7, 7, 3])
    assert _place_by_two_choices(first, second, 16) is None
    assert _place_by_two_choices(first[1:], second[1:], 16) is not None


def test_piece_hash_is_fnv1a():
    # Published FNV-1a 32-bit test vectors.
    assert piece_hash(b"") == 0x811C9DC5
    assert piece_hash(b"a") == 0xE40C292C
    assert piece_hash(b"foobar") == 0xBF9CF968


@pytest.mark.parametrize("name", list(VOCAB_FILES))
def test_table_layout(vocab, tables, name):
    v, t = vocab(name), tables(name)
    P, Q = t.pair_table.shape[0], t.piece_table.shape[0]
    assert t.pair_table.dtype == np.int32 and t.pair_table.shape == (P, 4)
    assert P & (P - 1) == 0 and P >= max(16, 2 * len(v.merges))  # (doubled only if placement failed)
    n_mergeable = len(v.mergeable_ids)
    assert Q & (Q - 1) == 0 and Q >= max(16, 2 * n_mergeable) and Q < 2 * max(16, 2 * n_mergeable)
    pair_empty = t.pair_table[:, 0] == -1
    assert (t.pair_table[pair_empty] == -1).all() and (~pair_empty).sum() == len(v.merges)
    piece_empty = t.piece_table[:, 1] == -1
    assert (t.piece_table[piece_empty] == -1).all()
    full = t.piece_table[~piece_empty]
    assert (full[:, 3] == t.token_offsets[full[:, 1]]).all()  # offset of the token's bytes
    # rank_is_id: true exactly when every pair's rank is its merged id (tiktoken files)
    assert t.rank_is_id == bool((t.pair_table[:, 2] == t.pair_table[:, 3]).all())
    if VOCAB_FILES[name][0].endswith(".tiktoken"):
        assert t.rank_is_id  # a tiktoken pair's rank is the merged token's rank = id
    in_piece_table = set(t.piece_table[~piece_empty, 1].tolist())
    assert in_piece_table == {i for i in v.mergeable_ids if len(v.token_bytes[i]) <= 255}
    assert t.max_piece_len == int(t.piece_table[~piece_empty, 2].max())
    assert t.byte_ids.dtype == np.int32 and t.byte_ids.tolist() == list(v.byte_ids)
    assert t.token_offsets.dtype == np.int32 and t.token_offsets.shape == (v.n_vocab + 1,)
    assert t.token_data.dtype == np.uint8
    data = t.token_data.tobytes()
    offsets = t.token_offsets.tolist()
    assert [data[offsets[i] : offsets[i + 1]] for i in range(v.n_vocab)] == [b or b"" for b in v.token_bytes]
    arrays = (t.pair_table, t.byte_ids, t.piece_table, t.token_offsets, t.token_data, t.char_table)
    assert t.nbytes == sum(a.nbytes for a in arrays)
    assert t.symbols == 0 and t.char_table.tolist() == [-1]  # byte-level: the stand-in


@pytest.mark.parametrize("name", list(VOCAB_FILES))
def test_every_merge_and_piece_is_found(vocab, tables, name):
    v, t = vocab(name), tables(name)
    for (left, right), expected in v.merges.items():
        assert lookup_pair(t, left, right) == expected
    for token_id in v.mergeable_ids:
        assert lookup_piece(t, v.token_bytes[token_id]) == token_id
    for token_id in v.special_ids:
        assert lookup_piece(t, v.token_bytes[token_id]) is None


@pytest.mark.parametrize("name", ["r50k", "cl100k_hf", "llama3_hf"])
def test_non_pairs_and_non_pieces_are_absent(vocab, tables, name):
    v, t = vocab(name), tables(name)
    rng = random.Random(name)
    ids = list(v.mergeable_ids)
    tried = 0
    while tried < 20_000:
        pair = (rng.choice(ids), rng.choice(ids))
        if pair not in v.merges:
            assert lookup_pair(t, *pair) is None
            tried += 1
    assert lookup_pair(t, -1, -1) is None and lookup_pair(t, v.n_vocab, 0) is None
    known = {v.token_bytes[i] for i in v.mergeable_ids}
    for _ in range(5_000):
        piece = rng.randbytes(rng.randint(2, 12))
        if piece not in known:
            assert lookup_piece(t, piece) is None
    assert lookup_piece(t, b"") is None


def test_tables_of_tiny_vocab_are_minimal(tmp_path):
    v = load_tokenizer_json(_write_json(tmp_path / "tokenizer.json", _tokenizer_json_doc()))
    t = build_vocab_tables(v)
    assert t.pair_table.shape == (16, 4) and t.piece_table.shape == (1024, 4)  # 2 * 259 -> 1024
    assert lookup_pair(t, v.byte_ids[97], v.byte_ids[98]) == (0, 256)
    assert lookup_piece(t, b"abc") == 257 and lookup_piece(t, b"<|end|>") is None


# --------------------------------------------------------------------------------------------
# Tables reproduce the oracles' BPE (merge semantics, ranks, whole-piece shortcut)
# --------------------------------------------------------------------------------------------


def _bpe_with_tables(t, whole_piece_shortcut: bool, piece: bytes) -> list[int]:
    """Textbook BPE that only reads the device tables: merge the lowest-ranked adjacent pair
    (leftmost on ties) until none is left."""
    if whole_piece_shortcut and (token_id := lookup_piece(t, piece)) is not None:
        return [token_id]
    parts = [int(t.byte_ids[b]) for b in piece]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            found = lookup_pair(t, parts[i], parts[i + 1])
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], i)
        if best is None:
            break
        parts[best[2] : best[2] + 2] = [best[1]]
    return parts


# Llama 3 tokens that plain BPE does not reach (it stops at other tokens): 588 of them, so the
# whole-piece shortcut (tiktoken's rule, HF's ignore_merges) changes real results there.
LLAMA3_SHORTCUT_ONLY = [" jeho".encode(), " việc".encode(), " hợp".encode(), " nhiều".encode()]


def _oracle_pieces(v: Vocab, data_dir: Path) -> list[bytes]:
    """Corpus pieces, whole tokens (long ones stress the merge order), random bytes."""
    rng = random.Random(v.name)
    tokens = [v.token_bytes[i] for i in rng.sample(v.mergeable_ids, 1500)]
    noise = [rng.randbytes(rng.randint(1, 16)) for _ in range(300)]
    return _pieces(v, _sample_text(data_dir), limit=3000) + tokens + noise + LLAMA3_SHORTCUT_ONLY


def test_llama3_shortcut_matters(vocab, tables):
    v, t = vocab("llama3"), tables("llama3")
    for piece in LLAMA3_SHORTCUT_ONLY:
        token_id = lookup_piece(t, piece)
        assert token_id is not None and v.token_bytes[token_id] == piece
        assert _bpe_with_tables(t, False, piece) != [token_id]


@pytest.mark.parametrize("name", ["r50k", "cl100k", "o200k", "llama3"])
def test_tables_reproduce_tiktoken_bpe(vocab, tables, data_dir, name):
    tiktoken = pytest.importorskip("tiktoken")
    v, t = vocab(name), tables(name)
    enc = tiktoken.Encoding(
        v.name, pat_str=v.pattern,
        mergeable_ranks={v.token_bytes[i]: i for i in v.mergeable_ids}, special_tokens=v.special_tokens,
    )
    for piece in _oracle_pieces(v, data_dir):
        assert _bpe_with_tables(t, True, piece) == enc._encode_single_piece(piece), piece


@pytest.mark.parametrize("name", ["gpt2_hf", "cl100k_hf", "o200k_hf", "llama3_hf"])
def test_tables_reproduce_hf_bpe(vocab, tables, data_dir, name):
    tokenizers = pytest.importorskip("tokenizers")
    v, t = vocab(name), tables(name)
    hf = tokenizers.Tokenizer.from_file(str(data_dir / "vocab" / VOCAB_FILES[name][0]))
    to_unicode = bytes_to_unicode()
    for piece in _oracle_pieces(v, data_dir):
        expected = [tok.id for tok in hf.model.tokenize("".join(to_unicode[b] for b in piece))]
        assert _bpe_with_tables(t, v.whole_piece_shortcut, piece) == expected, piece


# --------------------------------------------------------------------------------------------
# Special tables
# --------------------------------------------------------------------------------------------


def _special_entries(st) -> list[tuple[bytes, int]]:
    data, offsets = st.special_data.tobytes(), st.special_offsets.tolist()
    return [(data[offsets[k] : offsets[k + 1]], int(st.special_ids[k])) for k in range(st.count)]


def test_special_tables_longest_first(vocab):
    v = vocab("cl100k")
    st = build_special_tables(v, "all")
    entries = _special_entries(st)
    assert st.count == 5 and sorted(entries) == sorted((k.encode(), i) for k, i in v.special_tokens.items())
    assert entries == sorted(entries, key=lambda e: (-len(e[0]), e[0]))
    assert entries[0] == (b"<|endofprompt|>", 100276)  # the longest
    assert st.special_offsets.dtype == np.int32 and st.special_ids.dtype == np.int32
    assert st.special_data.dtype == np.uint8


def test_special_tables_prefix_is_matched_longest_first(tmp_path):
    path = _write(tmp_path / "v.tiktoken", "\n".join(_tiktoken_lines()))
    v = load_tiktoken_file(path, special_tokens={"<|a|>": 300, "<|a|><|b|>": 301, "<|b|>": 302})
    entries = _special_entries(build_special_tables(v, ["<|b|>", "<|a|>", "<|a|><|b|>"]))
    assert entries == [(b"<|a|><|b|>", 301), (b"<|a|>", 300), (b"<|b|>", 302)]


def test_special_tables_subset_none_and_unknown(vocab):
    v = vocab("cl100k")
    st = build_special_tables(v, {"<|endoftext|>"})
    assert _special_entries(st) == [(b"<|endoftext|>", 100257)]
    for empty in (build_special_tables(v, None), build_special_tables(v, [])):
        assert empty.count == 0 and empty.special_offsets.tolist() == [0]
        assert empty.special_ids.tolist() == [0] and empty.special_data.shape == (1,)
    with pytest.raises(ValueError, match=r"'<\|nope\|>'"):
        build_special_tables(v, ["<|endoftext|>", "<|nope|>"])
    with pytest.raises(ValueError, match="collection of names"):
        build_special_tables(v, "<|endoftext|>")
