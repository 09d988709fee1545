"""The tiktoken-style view (`tok.as_tiktoken()`) and the HF-style call (`tok(texts, ...)`).

openai/tiktoken's own test cases (tests/test_encoding.py, test_simple_public.py,
test_offsets.py, test_pickle.py; the assertions ported, not the code) run against BOTH our
view and tiktoken over the same ranks and specials (`testing.tiktoken_oracle`), for r50k,
cl100k and o200k: every literal assertion must hold for both, ids must be equal, and where
tiktoken raises we must raise the same exception type (ValueError messages verbatim).
gpt2 = r50k's ranks, so tiktoken's gpt2 cases run on r50k. Not ported: p50k (no p50k entry in
the shared-vocabulary table), `_encode_bytes` (private; its round trip is checked through
`Tokenizer.encode_batch` on raw bytes), encoding_for_model and pickling (registry features).

The HF-style call is checked against HF `tokenizers` (enable_padding / enable_truncation /
a TemplateProcessing post-processor for BOS/EOS) on the shared tokenizer.json files.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing

from helpers import load_tokenizer, vocab_path
from test_fuzz import fuzz, unicode_text

NAMES = ["r50k", "cl100k", "o200k"]


@pytest.fixture(autouse=True)
def _needs_data(data_dir):
    """Every test here needs the shared vocabularies (the fixture skips when absent)."""


@functools.lru_cache(maxsize=None)
def _pair(name: str):
    tok = load_tokenizer(name, "tiktoken")
    return tok.as_tiktoken(), testing.tiktoken_oracle(name, tok, tok.vocab.pattern)


def pair(name: str):
    pytest.importorskip("tiktoken")
    return _pair(name)


def outcome(fn, enc):
    try:
        return ("ok", fn(enc))
    except Exception as e:  # noqa: BLE001 - compared below
        return ("raise", type(e), str(e) if isinstance(e, ValueError) else None)


def same(name: str, fn):
    """fn on our view and on tiktoken: equal results, or the same exception (same message for
    ValueError). Returns our result."""
    ours, ref = pair(name)
    a, b = outcome(fn, ours), outcome(fn, ref)
    assert a == b, f"{name}: ours {a!r} != tiktoken {b!r}"
    if a[0] == "raise":
        raise a[1](a[2] or "raised")
    return a[1]


def both(name: str):
    return pair(name)


# ----------------------------------------------------------------------------------------------
# Attributes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_attributes(name):
    ours, ref = pair(name)
    assert ours.name == load_tokenizer(name, "tiktoken").vocab.name
    for attr in ("n_vocab", "max_token_value", "eot_token", "special_tokens_set"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert ours.token_byte_values() == ref.token_byte_values()
    for t in (0, ours.eot_token, ours.max_token_value, ours.n_vocab):
        assert ours.is_special_token(t) == ref.is_special_token(t)
    assert ours.device.platform == "cpu"
    assert isinstance(ours, bb.TiktokenEncoding)


def test_tokenizer_encode_batch_keeps_its_meaning():
    tok = load_tokenizer("cl100k", "tiktoken")
    out = tok.encode_batch(["hello world"])
    assert isinstance(out, bb.Encoded) and isinstance(out.ids, jax.Array)
    assert np.asarray(out.ids)[0, :2].tolist() == [15339, 1917]


# ----------------------------------------------------------------------------------------------
# tiktoken's tests/test_encoding.py and test_simple_public.py
# ----------------------------------------------------------------------------------------------


def test_simple():
    for enc in both("r50k"):   # tiktoken's "gpt2"
        assert enc.encode("hello world") == [31373, 995]
        assert enc.decode([31373, 995]) == "hello world"
        assert enc.encode("hello <|endoftext|>", allowed_special="all") == [31373, 220, 50256]
    for enc in both("cl100k"):
        assert enc.encode("hello world") == [15339, 1917]
        assert enc.decode([15339, 1917]) == "hello world"
        assert enc.encode("hello <|endoftext|>", allowed_special="all") == [15339, 220, 100257]


@pytest.mark.parametrize("name", NAMES)
def test_simple_single_token_round_trip(name):
    for enc in both(name):
        for token in range(10_000):
            assert enc.encode_single_token(enc.decode_single_token_bytes(token)) == token


def test_simple_repeated():
    expected = {"0": [15], "00": [405], "000": [830], "0000": [2388], "00000": [20483],
                "000000": [10535], "0000000": [24598], "00000000": [8269],
                "000000000": [10535, 830], "0000000000": [8269, 405], "00000000000": [8269, 830],
                "000000000000": [8269, 2388], "0000000000000": [8269, 20483],
                "00000000000000": [8269, 10535], "000000000000000": [8269, 24598],
                "0000000000000000": [25645], "00000000000000000": [8269, 10535, 830]}
    for enc in both("r50k"):
        assert enc.encode_batch(list(expected)) == list(expected.values())
        for text, ids in expected.items():
            assert enc.encode(text) == ids


def test_large_repeated():
    ours, ref = pair("o200k")
    tokens = ours.encode("x" * 1_000_000)
    assert tokens and tokens == ref.encode("x" * 1_000_000)


def test_simple_regex():
    for enc in both("cl100k"):
        assert enc.encode("rer") == [38149]
        assert enc.encode("'rer") == [2351, 81]
        assert enc.encode("today\n ") == [31213, 198, 220]
        assert enc.encode("today\n \n") == [31213, 27907]
        assert enc.encode("today\n  \n") == [31213, 14211]


def test_basic_encode():
    for enc in both("r50k"):
        assert enc.encode("hello world") == [31373, 995]
    for enc in both("cl100k"):
        assert enc.encode("hello world") == [15339, 1917]
        assert enc.encode(" \x850") == [220, 126, 227, 15]


@pytest.mark.parametrize("name", NAMES)
def test_encode_empty(name):
    for enc in both(name):
        assert enc.encode("") == [] and enc.encode_batch([]) == [] and enc.encode_batch([""]) == [[]]


def test_encode_bytes():
    # tiktoken's assertions are on the private `_encode_bytes`; ours take raw bytes through
    # Tokenizer.encode_batch (the primitive's own policy for invalid UTF-8), decoded by the view.
    tok = load_tokenizer("cl100k", "tiktoken")
    ours, _ = pair("cl100k")
    for i in range(10):
        raw = b"\x80" * i
        ids, counts = tok.encode_batch([raw], device=ours.device)
        assert ours.decode_bytes(np.asarray(ids)[0, :int(counts[0])].tolist()) == raw


@pytest.mark.parametrize("name", NAMES)
@fuzz(40)
@given(raw=st.binary(max_size=64))
def test_hyp_encode_bytes(name, raw):
    tok = load_tokenizer(name, "tiktoken")
    ours, _ = pair(name)
    ids, counts = tok.encode_batch([raw], max_len=64, device=ours.device)
    assert ours.decode_bytes(np.asarray(ids)[0, :int(counts[0])].tolist()) == raw


def test_encode_surrogate_pairs():
    for enc in both("cl100k"):
        assert enc.encode("👍") == [9468, 239, 235]
        assert enc.encode("\ud83d\udc4d") == [9468, 239, 235]   # pair -> code point
        assert enc.encode("\ud83d") == enc.encode("�")          # lone surrogate -> U+FFFD
        assert enc.encode_ordinary("a\udc4db") == enc.encode("a�b")
        assert enc.encode_batch(["\ud83d\udc4d", "\ud83d"]) == [[9468, 239, 235], enc.encode("�")]


@pytest.mark.parametrize("name", NAMES)
def test_catastrophically_repetitive(name):
    ours, ref = pair(name)
    values = []
    for c in ["^", "0", "a", "'s", " ", "\n"]:
        big = c * 10_000
        values += [big, " " + big, " " + big + "\n"]
    ids = ours.encode_batch(values)
    assert ids == ref.encode_batch(values)
    for value, row in zip(values, ids):
        assert ours.decode(row) == value == ref.decode(row)
        assert ours.encode(value) == row


@pytest.mark.parametrize("name", NAMES)
def test_basic_roundtrip(name):
    for value in ("hello", "hello ", "hello  ", " hello", " hello ", " hello  ", "hello world",
                  "请考试我的软件！12345"):
        ids = same(name, lambda e: e.encode(value))
        assert same(name, lambda e: e.encode_ordinary(value)) == ids
        for enc in both(name):
            assert enc.decode(enc.encode(value)) == value
            assert enc.decode(enc.encode_ordinary(value)) == value


@pytest.mark.parametrize("name", NAMES)
@fuzz(60)
@given(text=st.text() | unicode_text)
def test_hyp_roundtrip(name, text):
    ours, ref = pair(name)
    ids = ours.encode(text, disallowed_special=())
    assert ids == ref.encode(text, disallowed_special=())
    assert ours.decode(ids) == text


@pytest.mark.parametrize("name", NAMES)
def test_single_token_roundtrip(name):
    ours, ref = pair(name)
    missing = []
    for token in range(ours.n_vocab + 2):   # two past the end: KeyError for both
        try:
            token_bytes = ours.decode_single_token_bytes(token)
        except KeyError:
            with pytest.raises(KeyError):
                ref.decode_single_token_bytes(token)
            missing.append(token)
            continue
        assert token_bytes == ref.decode_single_token_bytes(token)
        assert ours.encode_single_token(token_bytes) == token
    assert missing[-2:] == [ours.n_vocab, ours.n_vocab + 1]


@pytest.mark.parametrize("name", NAMES)
def test_key_errors(name):
    for fn in (lambda e: e.encode_single_token(b"not one token, surely"),
               lambda e: e.encode_single_token("<|not_a_special|>"),
               lambda e: e.decode_single_token_bytes(10**7),
               lambda e: e.decode_bytes([1, 10**7]),
               lambda e: e.decode([10**7])):
        with pytest.raises(KeyError):
            same(name, fn)
    for special in pair(name)[0].special_tokens_set:   # specials encode/decode as single tokens
        token = same(name, lambda e: e.encode_single_token(special))
        assert same(name, lambda e: e.decode_single_token_bytes(token)) == special.encode()


# ----------------------------------------------------------------------------------------------
# Special tokens
# ----------------------------------------------------------------------------------------------


def test_special_token():
    for enc in both("cl100k"):
        eot = enc.encode_single_token("<|endoftext|>")
        assert eot == enc.eot_token
        fip = enc.encode_single_token("<|fim_prefix|>")
        fim = enc.encode_single_token("<|fim_middle|>")

        text = "<|endoftext|> hello <|fim_prefix|>"
        assert eot not in enc.encode(text, disallowed_special=())
        for kwargs in ({}, {"disallowed_special": "all"}, {"disallowed_special": {"<|endoftext|>"}},
                       {"disallowed_special": {"<|fim_prefix|>"}}):
            with pytest.raises(ValueError):
                enc.encode(text, **kwargs)

        text = "<|endoftext|> hello <|fim_prefix|> there <|fim_middle|>"
        tokens = enc.encode(text, disallowed_special=())
        assert eot not in tokens and fip not in tokens and fim not in tokens
        for kwargs in ({"allowed_special": "all", "disallowed_special": ()},
                       {"allowed_special": "all", "disallowed_special": "all"}):
            tokens = enc.encode(text, **kwargs)
            assert eot in tokens and fip in tokens and fim in tokens
        for allowed, expect in (("<|fim_prefix|>", fip), ("<|endoftext|>", eot),
                                ("<|fim_middle|>", fim)):
            tokens = enc.encode(text, allowed_special={allowed}, disallowed_special=())
            assert [t for t in (eot, fip, fim) if t in tokens] == [expect]


SPECIAL_CASES = [
    {}, {"allowed_special": "all"}, {"disallowed_special": ()}, {"disallowed_special": []},
    {"allowed_special": {"<|endoftext|>"}}, {"allowed_special": {"<|endoftext|>"}, "disallowed_special": ()},
    {"allowed_special": {"<|endofprompt|>"}}, {"disallowed_special": {"<|endofprompt|>"}},
    {"allowed_special": {"<|endoftext|>", "<|not_special|>"}},       # unknown names: ignored
    {"allowed_special": {"<|endoftext|>"}, "disallowed_special": {"<|endoftext|>"}},
    {"allowed_special": "all", "disallowed_special": "all"},
]
SPECIAL_TEXTS = ["<|endoftext|>", "a<|endoftext|>b", "x <|endofprompt|> y <|endoftext|>",
                 "<|endoftext", "<|fim_prefix|><|fim_middle|>", "no specials here"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kwargs", SPECIAL_CASES, ids=str)
def test_special_token_cases_equal_tiktoken(name, kwargs):
    """Every text under every allowed/disallowed setting: same ids or the same ValueError
    (tiktoken's message, verbatim), for encode and encode_batch."""
    for text in SPECIAL_TEXTS:
        try:
            same(name, lambda e: e.encode(text, **kwargs))
        except ValueError as e:
            assert str(e).startswith("Encountered text corresponding to disallowed special token")
    try:
        same(name, lambda e: e.encode_batch(SPECIAL_TEXTS, **kwargs))
    except ValueError:
        pass


@pytest.mark.parametrize("name", NAMES)
@fuzz(40)
@given(data=st.data())
def test_hyp_special_ordinary(name, data):
    ours, ref = pair(name)
    text = data.draw(testing.mixed_text(ours.special_tokens_set) | st.text())
    ids = ours.encode_ordinary(text)
    assert ids == ours.encode(text, disallowed_special=()) == ref.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == ref.encode(text, allowed_special="all")


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_batch_encode(name):
    text1, text2 = "hello world", "goodbye world"
    for enc in both(name):
        assert enc.encode_batch([text1]) == [enc.encode(text1)]
        assert enc.encode_batch([text1, text2]) == [enc.encode(text1), enc.encode(text2)]
        assert enc.encode_ordinary_batch([text1]) == [enc.encode_ordinary(text1)]
        assert enc.encode_ordinary_batch([text1, text2]) == [enc.encode_ordinary(text1),
                                                             enc.encode_ordinary(text2)]
    same(name, lambda e: e.encode_batch([text1, text2], num_threads=2))


@pytest.mark.parametrize("name", NAMES)
@fuzz(30)
@given(batch=st.lists(st.text() | unicode_text, max_size=8))
def test_hyp_batch_roundtrip(name, batch):
    ours, ref = pair(name)
    encoded = ours.encode_batch(batch, allowed_special="all")
    assert encoded == ref.encode_batch(batch, allowed_special="all")
    assert encoded == [ours.encode(t, allowed_special="all") for t in batch]
    assert ours.decode_batch(encoded) == batch
    assert ours.decode_bytes_batch(encoded) == [t.encode() for t in batch]


def test_batch_of_mixed_lengths_is_bucketed_correctly():
    ours, ref = pair("cl100k")
    batch = ["a" * n + " b" for n in (0, 1, 15, 16, 17, 100, 5000, 3)] * 3
    assert ours.encode_batch(batch) == ref.encode_batch(batch)


# ----------------------------------------------------------------------------------------------
# tiktoken's tests/test_offsets.py and test_pickle.py
# ----------------------------------------------------------------------------------------------


def test_basic_offsets():
    cases = [("hello world", [0, 5], {}),
             ("hello world<|endoftext|> green cow", [0, 5, 11, 24, 30], {"allowed_special": "all"}),
             ("我非常渴望与人工智能一起工作",
              [0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13], {}),
             ("நடிகர் சூர்யா", [0, 0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 11, 12, 12], {}),
             (" Ġ除", [0, 1], {})]
    for enc in both("cl100k"):
        for prompt, offsets, kwargs in cases:
            assert enc.decode_with_offsets(enc.encode(prompt, **kwargs)) == (prompt, offsets)


def _common_prefix_len(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


@fuzz(40)
@given(data=st.data())
def test_hyp_offsets(data):
    ours, ref = pair("cl100k")
    valid = st.integers(0, ours.n_vocab - 1).filter(
        lambda x: x in ref._special_tokens.values() or x in ref._mergeable_ranks.values())
    tokens = data.draw(st.lists(valid, min_size=1, max_size=20))
    tokens = ours.encode(ours.decode(tokens, errors="ignore"), allowed_special="all")
    text = ours.decode(tokens, errors="strict")
    reference = [_common_prefix_len(text, ours.decode(tokens[:i], errors="ignore"))
                 for i in range(len(tokens))]
    assert ours.decode_with_offsets(tokens) == ref.decode_with_offsets(tokens) == (text, reference)


def test_custom_special_and_no_eot():
    """test_pickle's custom Encoding (r50k ranks + `<|pickle|>` at 100000), through
    Tokenizer.from_tiktoken; it has no `<|endoftext|>`: eot_token raises KeyError as tiktoken."""
    tiktoken = pytest.importorskip("tiktoken")
    _, r50k = pair("r50k")
    ref = tiktoken.Encoding(name="custom_enc", pat_str=r50k._pat_str,
                            mergeable_ranks=r50k._mergeable_ranks,
                            special_tokens={"<|pickle|>": 100_000})
    ours = bb.Tokenizer.from_tiktoken(ref).as_tiktoken()
    for enc in (ours, ref):
        assert enc.encode("hello world") == [31373, 995]
        assert enc.encode("<|pickle|>", allowed_special="all") == [100_000]
        assert enc.n_vocab == 100_001 and enc.max_token_value == 100_000
        with pytest.raises(KeyError):
            enc.eot_token
        with pytest.raises(KeyError):
            enc.decode_single_token_bytes(60_000)   # a hole between the ranks and the special
        with pytest.raises(ValueError):
            enc.encode("<|pickle|>")


# ----------------------------------------------------------------------------------------------
# HF-style call, against HF tokenizers
# ----------------------------------------------------------------------------------------------

HF_NAMES = ["r50k", "cl100k"]   # gpt2/tokenizer.json, cl100k_hf/tokenizer.json
HF_TEXTS = ["hello world", "", "The quick brown fox jumps over the lazy dog. " * 3,
            "<|endoftext|> again", "日本語のテキスト 🎉 and more", "a"]


@functools.lru_cache(maxsize=None)
def hf_reference(name: str):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(vocab_path(name, "json")))


def hf_expected(name, texts, *, padding, truncation, max_length, pad_to_multiple_of=None,
                padding_side="right", truncation_side="right", bos=False, eos=False, pad_id=0):
    from tokenizers import processors

    hf = hf_reference(name)
    hf.no_padding()
    hf.no_truncation()
    eot = "<|endoftext|>"
    eot_id = hf.token_to_id(eot)
    template = " ".join(([eot] if bos else []) + ["$A"] + ([eot] if eos else []))
    hf.post_processor = processors.TemplateProcessing(single=template, special_tokens=[(eot, eot_id)])
    if truncation:
        hf.enable_truncation(max_length, direction=truncation_side)
    if padding:
        hf.enable_padding(direction=padding_side, pad_id=pad_id, pad_token="<pad>",
                          length=max_length if padding == "max_length" else None,
                          pad_to_multiple_of=pad_to_multiple_of)
    out = hf.encode_batch(texts)
    return [e.ids for e in out], [e.attention_mask for e in out], eot_id


HF_CASES = [
    dict(padding="longest", truncation=False, max_length=None),
    dict(padding=True, truncation=True, max_length=8),
    dict(padding="max_length", truncation=True, max_length=12),
    dict(padding="max_length", truncation=True, max_length=30, padding_side="left"),
    dict(padding="longest", truncation=True, max_length=10, truncation_side="left"),
    dict(padding="longest", truncation=True, max_length=7, padding_side="left",
         truncation_side="left", bos=True, eos=True, pad_id=5),
    dict(padding="longest", truncation=False, max_length=None, pad_to_multiple_of=8, bos=True),
    dict(padding="max_length", truncation=True, max_length=10, pad_to_multiple_of=8, eos=True),
]


@pytest.mark.parametrize("name", HF_NAMES)
@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_hf_call_equals_tokenizers(name, case):
    tok = load_tokenizer(name, "json")
    ids, mask, eot_id = hf_expected(name, HF_TEXTS, **case)
    kwargs = {k: v for k, v in case.items() if k not in ("bos", "eos")}
    out = tok(HF_TEXTS, bos_id=eot_id if case.get("bos") else None,
              eos_id=eot_id if case.get("eos") else None, **kwargs)
    assert isinstance(out["input_ids"], jax.Array)
    assert np.asarray(out["input_ids"]).tolist() == ids
    assert np.asarray(out["attention_mask"]).tolist() == mask


@pytest.mark.parametrize("name", HF_NAMES)
@fuzz(15)
@given(texts=st.lists(unicode_text, min_size=1, max_size=4), max_length=st.integers(2, 24),
       padding=st.sampled_from(["longest", "max_length"]), sides=st.sampled_from(
           [("right", "right"), ("left", "left"), ("left", "right"), ("right", "left")]),
       bos=st.booleans())
def test_hyp_hf_call_equals_tokenizers(name, texts, max_length, padding, sides, bos):
    tok = load_tokenizer(name, "json")
    ids, mask, eot_id = hf_expected(name, texts, padding=padding, truncation=True,
                                    max_length=max_length, padding_side=sides[0],
                                    truncation_side=sides[1], bos=bos)
    out = tok(texts, padding=padding, truncation=True, max_length=max_length,
              padding_side=sides[0], truncation_side=sides[1], bos_id=eot_id if bos else None)
    assert np.asarray(out["input_ids"]).tolist() == ids
    assert np.asarray(out["attention_mask"]).tolist() == mask


def test_hf_call_shapes_and_errors():
    tok = load_tokenizer("cl100k", "tiktoken")
    one = tok("hello world")                                   # a single string: a batch of one
    assert np.asarray(one["input_ids"]).tolist() == [[15339, 1917]]
    assert np.asarray(one["attention_mask"]).tolist() == [[1, 1]]
    same_len = bb.hf_call(tok, ["hello world", "hello world"], return_attention_mask=False)
    assert set(same_len) == {"input_ids"} and same_len["input_ids"].shape == (2, 2)
    assert tok([""], padding=True)["input_ids"].shape == (1, 0)
    with pytest.raises(ValueError, match="Unable to create tensor"):
        tok(["hello world", "a"])                               # ragged without padding
    with pytest.raises(ValueError, match="max_length is required"):
        tok(["a"], truncation=True)
    with pytest.raises(ValueError, match="Unable to create tensor"):   # rows past max_length
        tok(["a b c d e f", "a"], padding="max_length", max_length=2)
