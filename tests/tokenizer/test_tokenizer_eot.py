"""`Tokenizer.eot_token` and `Tokenizer.n_vocab`, as tiktoken's `Encoding` has them.

eot_token: the end-of-text special's id, by its name in each family (`<|endoftext|>` for
OpenAI's and Qwen's, `<|end_of_text|>` Llama 3, `<｜end▁of▁sentence｜>` DeepSeek, `</s>`
SentencePiece and Mistral, `<eos>` Gemma); KeyError naming the vocabulary when it has none.
n_vocab: the largest id + 1 (tiktoken's `max_token_value + 1`).
"""

from __future__ import annotations

import pytest

import blockbpe_jax as bb

import families
from helpers import custom_pickle_encoding, load_tokenizer, pair

pytestmark = pytest.mark.usefixtures("data_dir")

CASES = [
    ("r50k", "tiktoken", 50256, 50257),
    ("r50k", "json", 50256, 50257),
    ("cl100k", "tiktoken", 100257, 100277),
    ("o200k", "tiktoken", 199999, 200019),
    ("llama3", "tiktoken", 128001, 128256),
    ("llama3", "json", 128001, 128256),
]


@pytest.mark.parametrize("name,fmt,eot,n_vocab", CASES)
def test_eot_token_and_n_vocab(name, fmt, eot, n_vocab):
    tok = load_tokenizer(name, fmt)
    assert tok.eot_token == eot and tok.n_vocab == n_vocab
    if name != "llama3":  # tiktoken's own Encoding over the same ranks and specials
        view, ref = pair(name)
        assert (view.eot_token, view.n_vocab) == (ref.eot_token, ref.n_vocab) == (eot, n_vocab)


def test_no_end_of_text_special_raises_key_error():
    ref = custom_pickle_encoding()
    tok = bb.Tokenizer.from_tiktoken(ref)
    assert tok.n_vocab == ref.n_vocab == 100_001
    with pytest.raises(KeyError, match="custom_enc"):
        tok.eot_token


@pytest.mark.parametrize(
    "family,special",
    [("mistral-v1-spm", "</s>"), ("mistral-v3-spm", "</s>"), ("deepseek-v3-json", "<｜end▁of▁sentence｜>")],
)
def test_families_eot_token(family, special):
    path = families.require(family)
    tok = bb.Tokenizer.from_file(path)
    assert tok.eot_token == tok.vocab.special_tokens[special]
    assert tok.n_vocab == max(i for i, b in enumerate(tok.vocab.token_bytes) if b is not None) + 1
