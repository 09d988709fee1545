"""Vocabulary loading (blockbpe_jax.vocab) of the real shared vocabularies: each loads with its
recognised pattern, and the .tiktoken and tokenizer.json forms of one vocabulary agree. CPU
only, no FFI; each vocabulary is loaded once per session (fixture `vocab`, tests/conftest.py).
"""

from __future__ import annotations

import json

import pytest

from blockbpe_jax import _data
from blockbpe_jax.vocab import LLAMA3_SPECIAL_TOKENS, from_tiktoken_encoding

from helpers import SAME_VOCAB, VOCAB_CASES


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


@pytest.mark.parametrize("name", list(VOCAB_CASES))
def test_real_vocab_loads_with_recognised_pattern(vocab, name):
    v = vocab(name)
    assert v.pattern_name == VOCAB_CASES[name][1]
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
        mergeable_ranks=tiktoken_load.load_tiktoken_bpe(str(data_dir / "vocab" / VOCAB_CASES[name][0])),
        special_tokens=v.special_tokens,
    )
    w = from_tiktoken_encoding(enc)
    assert (w.name, w.token_bytes, w.byte_ids, w.special_tokens) == (
        v.name,
        v.token_bytes,
        v.byte_ids,
        v.special_tokens,
    )
    assert w.merges == v.merges
    assert (w.pattern, w.pattern_name, w.whole_piece_shortcut) == (v.pattern, v.pattern_name, True)


@pytest.mark.parametrize("name", ["gpt2_hf", "cl100k_hf"])
def test_hf_merge_rank_is_list_index(vocab, data_dir, name):
    v = vocab(name)
    doc = json.loads((data_dir / "vocab" / VOCAB_CASES[name][0]).read_text(encoding="utf-8"))
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
