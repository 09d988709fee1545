"""tokenizer.json loading (blockbpe_jax.vocab): synthetic files, pre-tokenizer support and
unsupported features (loaded with a reason), and malformed files (VocabError naming the file
and the JSON path)."""

from __future__ import annotations

import json

import pytest

from blockbpe_jax.vocab import KNOWN_PATTERNS, VocabError, bytes_to_unicode, load_tokenizer_json

from helpers import sample_text
from synthetic import split_then_bytelevel, tokenizer_json_doc, write, write_json


# --------------------------------------------------------------------------------------------
# tokenizer.json: pre-tokenizer support
# --------------------------------------------------------------------------------------------


def test_synthetic_tokenizer_json_loads(tmp_path):
    v = load_tokenizer_json(write_json(tmp_path / "tokenizer.json", tokenizer_json_doc()))
    a, b, c = (v.byte_ids[ord(ch)] for ch in "abc")
    assert v.merges == {(a, b): (0, 256), (256, c): (1, 257), (b, c): (2, 258)}
    assert v.special_tokens == {"<|end|>": 259} and v.token_bytes[259] == b"<|end|>"
    assert v.n_vocab == 260 and v.unsupported is None and v.pattern_name == "r50k"
    assert v.name == tmp_path.name and not v.whole_piece_shortcut


def test_merges_as_lists(tmp_path):
    doc = tokenizer_json_doc()
    doc["model"]["merges"] = [m.split(" ") for m in doc["model"]["merges"]]  # newer HF format
    as_lists = load_tokenizer_json(write_json(tmp_path / "lists.json", doc))
    as_strings = load_tokenizer_json(write_json(tmp_path / "strings.json", tokenizer_json_doc()))
    assert as_lists.merges == as_strings.merges and len(as_lists.merges) == 3


def test_added_tokens_are_all_specials(tmp_path):
    doc = tokenizer_json_doc()
    doc["added_tokens"].append(dict(doc["added_tokens"][0], id=260, content="plain", special=False))
    v = load_tokenizer_json(write_json(tmp_path / "t.json", doc))
    assert v.special_tokens == {"<|end|>": 259, "plain": 260}


UNSUPPORTED_CASES = {
    "normalizer": (
        {"normalizer": {"type": "NFKC"}},
        "normalizer: normalizer NFKC is not supported (only NFC and Lowercase, alone or in a Sequence)",
    ),
    "metaspace": (
        {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}},
        "pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported",
    ),
    "whitespace_seq": (
        {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}},
        "pre_tokenizer.pretokenizers[0]: pre-tokenizer type 'Whitespace' is not supported",
    ),
    "no_pre_tokenizer": ({"pre_tokenizer": None}, "pre_tokenizer: no pre-tokenizer"),
    "prefix_space": (
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}},
        "add_prefix_space=true",
    ),
    "removed": (
        {"pre_tokenizer": split_then_bytelevel(KNOWN_PATTERNS["llama3"], "Removed")},
        "pre_tokenizer.pretokenizers[0].behavior: 'Removed' is not supported",
    ),
    "lstrip": (
        {"added_tokens": [{"id": 259, "content": "<|end|>", "lstrip": True, "special": True}]},
        "uses lstrip",
    ),
    "suffix": (
        {"model": dict(tokenizer_json_doc()["model"], end_of_word_suffix="</w>")},
        "end_of_word_suffix",
    ),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED_CASES))
def test_unsupported_features_load_with_reason(tmp_path, case):
    overrides, reason = UNSUPPORTED_CASES[case]
    v = load_tokenizer_json(write_json(tmp_path / "tokenizer.json", tokenizer_json_doc(**overrides)))
    assert v.unsupported is not None and reason in v.unsupported


@pytest.mark.parametrize("behavior, invert", [("Isolated", False), ("Removed", True)])
def test_split_forms_for_known_pattern_are_supported(tmp_path, behavior, invert):
    doc = tokenizer_json_doc(pre_tokenizer=split_then_bytelevel(KNOWN_PATTERNS["llama3"], behavior, invert))
    v = load_tokenizer_json(write_json(tmp_path / "tokenizer.json", doc))
    assert (v.unsupported, v.pattern, v.pattern_name) == (None, KNOWN_PATTERNS["llama3"], "llama3")


def test_removed_inverted_split_equals_isolated_in_hf(tmp_path, data_dir):
    """The claim behind accepting Split(Removed, invert=true): for a recognised pattern HF
    produces the same pieces as Split(Isolated)."""
    tokenizers = pytest.importorskip("tokenizers")
    text = sample_text(data_dir)
    for name in ("llama3", "o200k", "cl100k"):
        ids = []
        for behavior, invert in [("Isolated", False), ("Removed", True)]:
            doc = tokenizer_json_doc(
                pre_tokenizer=split_then_bytelevel(KNOWN_PATTERNS[name], behavior, invert)
            )
            tok = tokenizers.Tokenizer.from_str(json.dumps(doc))
            ids.append(tok.encode(text, add_special_tokens=False).ids)
        assert ids[0] == ids[1], name


def _without(d: dict, key) -> dict:
    return {k: v for k, v in d.items() if k != key}


def _bad_json_docs():
    u = bytes_to_unicode()
    good = tokenizer_json_doc()
    model = good["model"]
    return {
        "missing_model": (_without(good, "model"), "model: missing"),
        "missing_vocab": (dict(good, model=_without(model, "vocab")), "model.vocab: missing"),
        "missing_merges": (dict(good, model=_without(model, "merges")), "model.merges: missing"),
        "wordpiece": (
            dict(good, model=dict(model, type="WordPiece")),
            "model type 'WordPiece' is not supported",
        ),
        "unknown_merge_token": (
            dict(good, model=dict(model, merges=model["merges"] + ["zz c"])),
            "model.merges[3]: merge 'zz c' refers to unknown token 'zz'",
        ),
        "unknown_right_merge_token": (
            dict(good, model=dict(model, merges=model["merges"] + ["a zz"])),
            "model.merges[3]: merge 'a zz' refers to unknown token 'zz'",
        ),
        "merge_not_a_string": (
            dict(good, model=dict(model, merges=model["merges"] + [7])),
            'model.merges[3]: expected "a b" or [a, b], got 7',
        ),
        "bool_id": (
            dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=True))),
            "model.vocab['xyz']: id True is not an integer",
        ),
        "huge_id": (
            dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=2**24))),
            "model.vocab['xyz']: id 16777216 is outside",
        ),
        "merge_result_missing": (
            dict(good, model=dict(model, merges=model["merges"] + ["c a"])),
            "model.merges[3]: merge result 'ca' is not in model.vocab",
        ),
        "bad_merge_shape": (
            dict(good, model=dict(model, merges=model["merges"] + [["a", "b", "c"]])),
            "model.merges[3]: expected two tokens",
        ),
        "duplicate_id": (
            dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=256))),
            "model.vocab['xyz']: duplicate id 256",
        ),
        "negative_id": (
            dict(good, model=dict(model, vocab=dict(model["vocab"], xyz=-4))),
            "model.vocab['xyz']: id -4 is outside",
        ),
        "not_byte_level": (
            dict(good, model=dict(model, vocab=dict(model["vocab"], **{"a b": 300}))),
            "model.vocab['a b']: key is not a byte-level encoded token",
        ),
        "missing_byte": (
            dict(good, model=dict(model, vocab=_without(model["vocab"], u[0x0A]))),
            "missing single-byte tokens for 1 byte values (0x0a)",
        ),
        "special_collision": (
            dict(good, added_tokens=[{"id": 257, "content": "<|x|>", "special": True}]),
            "special token '<|x|>' has id 257, which is already the mergeable token b'abc'",
        ),
        "added_without_id": (
            dict(good, added_tokens=[{"content": "<|x|>", "special": True}]),
            "added_tokens[0]: id None is not an integer",
        ),
        "top_level_list": ([1, 2], "top level is not a JSON object"),
        "empty_special": (
            dict(good, added_tokens=[{"id": 300, "content": "", "special": True}]),
            "special token with id 300 is empty",
        ),
    }


@pytest.mark.parametrize("case", list(_bad_json_docs()))
def test_malformed_tokenizer_json(tmp_path, case):
    doc, message = _bad_json_docs()[case]
    path = write_json(tmp_path / "tokenizer.json", doc)
    with pytest.raises(VocabError) as info:
        load_tokenizer_json(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_tokenizer_json_not_json(tmp_path):
    path = write(tmp_path / "tokenizer.json", '{"model": {')
    with pytest.raises(VocabError, match="not valid JSON") as info:
        load_tokenizer_json(path)
    assert str(path) in str(info.value) and "line 1" in str(info.value)


def test_hf_duplicate_merge_takes_last_rank_like_hf(tmp_path):
    doc = tokenizer_json_doc()
    doc["model"]["merges"] = ["a b", "b c", "a b", "ab c"]
    v = load_tokenizer_json(write_json(tmp_path / "t.json", doc))
    assert v.merges[(v.byte_ids[97], v.byte_ids[98])] == (2, 256)
