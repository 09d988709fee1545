"""openai/tiktoken's own test suite (tests/ at 0.14.0), its assertions ported (not its code),
run through our view (`Tokenizer.from_tiktoken(enc).as_tiktoken()`) on tiktoken's registry
encodings, which tiktoken loads offline here: `TIKTOKEN_CACHE_DIR` is a folder of copies of the
shared vocabulary files under tiktoken's cache names (sha1 of each blob URL), checked against
tiktoken's hashes. Every registry encoding has its files in ../shared/data (gpt2 from
gpt2/vocab.bpe + encoder.json, the others from tiktoken/*.tiktoken); one whose file is absent
skips, naming it.

Where each tiktoken test is ported (this module: *):
  test_encoding.py  every test here*, on the registry encodings; test_simple_repeated,
    test_large_repeated, test_encode_empty, test_encode_surrogate_pairs,
    test_catastrophically_repetitive, test_hyp_roundtrip, test_single_token_roundtrip also in
    test_tiktoken_api_encoding.py (r50k, cl100k, o200k, compared with tiktoken);
    test_hyp_special_ordinary, test_batch_encode, test_hyp_batch_roundtrip also in
    test_tiktoken_api_specials.py (compared with tiktoken)
  test_offsets.py  test_basic_offsets, test_hyp_offsets: test_tiktoken_api_specials.py
  test_pickle.py  test_pickle*
  test_misc.py, test_simple_public.py  test_simple*, test_encoding_for_model* (our view of the
    encoding tiktoken names for each model keeps its name), test_optional_blobfile_dependency*

Not ported, being on private attributes: test_encoding.py's test_encode_bytes and
test_hyp_encode_bytes (`Encoding._encode_bytes`; the same round trip of raw bytes runs through
`Tokenizer.encode_batch` in test_tiktoken_api_encoding.py). test_offsets.test_hyp_offsets draws
its ids with tiktoken's private `_special_tokens` / `_mergeable_ranks`: its port takes them
from the tiktoken Encoding beside ours.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

from strategies import fuzz

tiktoken = pytest.importorskip("tiktoken")
pytestmark = pytest.mark.usefixtures("data_dir")

_BLOB = "https://openaipublic.blob.core.windows.net/"
FILES = {  # blob URL -> the shared file with its bytes
    _BLOB + "gpt-2/encodings/main/vocab.bpe": "gpt2/merges.txt",
    _BLOB + "gpt-2/encodings/main/encoder.json": "gpt2/vocab.json",
    **{
        _BLOB + f"encodings/{n}.tiktoken": f"tiktoken/{n}.tiktoken"
        for n in ("r50k_base", "p50k_base", "cl100k_base", "o200k_base")
    },
}
NEEDS = {
    "gpt2": ["gpt2/merges.txt", "gpt2/vocab.json"],
    "r50k_base": ["tiktoken/r50k_base.tiktoken"],
    "p50k_base": ["tiktoken/p50k_base.tiktoken"],
    "p50k_edit": ["tiktoken/p50k_base.tiktoken"],
    "cl100k_base": ["tiktoken/cl100k_base.tiktoken"],
    "o200k_base": ["tiktoken/o200k_base.tiktoken"],
    "o200k_harmony": ["tiktoken/o200k_base.tiktoken"],
}
ENCODINGS = ["r50k_base", "cl100k_base"]  # tiktoken's ENCODING_FACTORIES


@pytest.fixture(scope="module", autouse=True)
def offline_registry(data_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("tiktoken_cache")
    for url, rel in FILES.items():
        if (data_dir / "vocab" / rel).is_file():
            shutil.copyfile(data_dir / "vocab" / rel, cache / hashlib.sha1(url.encode()).hexdigest())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        yield data_dir


@functools.cache
def _views(name: str):
    ref = tiktoken.get_encoding(name)
    return bb.Tokenizer.from_tiktoken(ref).as_tiktoken(), ref


def views(name: str):
    """(our view, tiktoken's Encoding) of a registry encoding; skips when its files are absent."""
    from blockbpe_jax._data import find_data_dir

    missing = [rel for rel in NEEDS[name] if not (find_data_dir() / "vocab" / rel).is_file()]
    if missing:
        pytest.skip(f"{name}: vocabulary file(s) absent from the shared data: {', '.join(missing)}")
    return _views(name)


def enc_of(name: str):
    return views(name)[0]


ALL = list(NEEDS)  # tiktoken.list_encoding_names() at 0.14.0


def test_registry_names_are_tiktokens():
    assert sorted(ALL) == sorted(tiktoken.list_encoding_names())


# ----------------------------------------------------------------------------------------------
# test_encoding.py / test_simple_public.py
# ----------------------------------------------------------------------------------------------


def test_simple():
    enc = enc_of("gpt2")
    assert enc.encode("hello world") == [31373, 995]
    assert enc.decode([31373, 995]) == "hello world"
    assert enc.encode("hello <|endoftext|>", allowed_special="all") == [31373, 220, 50256]
    enc = enc_of("cl100k_base")
    assert enc.encode("hello world") == [15339, 1917]
    assert enc.decode([15339, 1917]) == "hello world"
    assert enc.encode("hello <|endoftext|>", allowed_special="all") == [15339, 220, 100257]


@pytest.mark.parametrize("name", ALL)
def test_simple_single_tokens(name):
    """test_simple's loop over every encoding name (test_simple_public: range(10_000))."""
    enc = enc_of(name)
    for token in range(10_000):
        assert enc.encode_single_token(enc.decode_single_token_bytes(token)) == token


def test_simple_repeated():
    enc = enc_of("gpt2")
    for text, ids in [
        ("0", [15]), ("00", [405]), ("000", [830]), ("0000", [2388]), ("00000", [20483]),
        ("000000", [10535]), ("0000000", [24598]), ("00000000", [8269]),
        ("000000000", [10535, 830]), ("0000000000", [8269, 405]), ("00000000000", [8269, 830]),
        ("000000000000", [8269, 2388]), ("0000000000000", [8269, 20483]),
        ("00000000000000", [8269, 10535]), ("000000000000000", [8269, 24598]),
        ("0000000000000000", [25645]), ("00000000000000000", [8269, 10535, 830]),
    ]:  # fmt: skip
        assert enc.encode(text) == ids


def test_large_repeated():
    assert enc_of("o200k_base").encode("x" * 1_000_000)


def test_simple_regex():
    enc = enc_of("cl100k_base")
    assert enc.encode("rer") == [38149]
    assert enc.encode("'rer") == [2351, 81]
    assert enc.encode("today\n ") == [31213, 198, 220]
    assert enc.encode("today\n \n") == [31213, 27907]
    assert enc.encode("today\n  \n") == [31213, 14211]


def test_basic_encode():
    assert enc_of("r50k_base").encode("hello world") == [31373, 995]
    assert enc_of("p50k_base").encode("hello world") == [31373, 995]
    enc = enc_of("cl100k_base")
    assert enc.encode("hello world") == [15339, 1917]
    assert enc.encode(" \x850") == [220, 126, 227, 15]


@pytest.mark.parametrize("name", ALL)
def test_encode_empty(name):
    assert enc_of(name).encode("") == []


def test_encode_surrogate_pairs():
    enc = enc_of("cl100k_base")
    assert enc.encode("👍") == [9468, 239, 235]
    assert enc.encode("\ud83d\udc4d") == [9468, 239, 235]
    assert enc.encode("\ud83d") == enc.encode("�")


@pytest.mark.parametrize("name", ALL)
def test_catastrophically_repetitive(name):
    enc = enc_of(name)
    for c in ["^", "0", "a", "'s", " ", "\n"]:
        big = c * 10_000
        assert big == enc.decode(enc.encode(big))
        big = " " + big
        assert big == enc.decode(enc.encode(big))
        big = big + "\n"
        assert big == enc.decode(enc.encode(big))


@pytest.mark.parametrize("name", ALL)
def test_basic_roundtrip(name):
    enc, ref = views(name)
    for value in (
        "hello",
        "hello ",
        "hello  ",
        " hello",
        " hello ",
        " hello  ",
        "hello world",
        "请考试我的软件！12345",
    ):
        assert value == enc.decode(enc.encode(value)) == enc.decode(enc.encode_ordinary(value))
        assert enc.encode(value) == ref.encode(value)


@pytest.mark.parametrize("name", ALL)
@fuzz(25)
@given(text=st.text())
def test_hyp_roundtrip(name, text):
    enc, ref = views(name)
    assert text == enc.decode(enc.encode(text, disallowed_special=()))
    assert enc.encode_ordinary(text) == ref.encode_ordinary(text)


@pytest.mark.parametrize("name", ["gpt2", "p50k_base", "p50k_edit", "o200k_harmony"])
def test_single_token_roundtrip(name):
    """(r50k_base, cl100k_base, o200k_base: test_tiktoken_api_encoding.py)"""
    enc = enc_of(name)
    for token in range(enc.n_vocab):
        try:
            token_bytes = enc.decode_single_token_bytes(token)
        except KeyError:
            continue
        assert enc.encode_single_token(token_bytes) == token


# -- special tokens ----------------------------------------------------------------------------


def test_special_token():
    enc = enc_of("cl100k_base")
    eot = enc.encode_single_token("<|endoftext|>")
    assert eot == enc.eot_token
    fip = enc.encode_single_token("<|fim_prefix|>")
    fim = enc.encode_single_token("<|fim_middle|>")

    text = "<|endoftext|> hello <|fim_prefix|>"
    assert eot not in enc.encode(text, disallowed_special=())
    for kwargs in (
        {},
        {"disallowed_special": "all"},
        {"disallowed_special": {"<|endoftext|>"}},
        {"disallowed_special": {"<|fim_prefix|>"}},
    ):
        with pytest.raises(ValueError):
            enc.encode(text, **kwargs)

    text = "<|endoftext|> hello <|fim_prefix|> there <|fim_middle|>"
    tokens = enc.encode(text, disallowed_special=())
    assert eot not in tokens and fip not in tokens and fim not in tokens
    for disallowed in ((), "all"):
        tokens = enc.encode(text, allowed_special="all", disallowed_special=disallowed)
        assert eot in tokens and fip in tokens and fim in tokens
    for allowed, want in (("<|fim_prefix|>", fip), ("<|endoftext|>", eot), ("<|fim_middle|>", fim)):
        tokens = enc.encode(text, allowed_special={allowed}, disallowed_special=())
        assert [t in tokens for t in (eot, fip, fim)] == [t == want for t in (eot, fip, fim)]


@pytest.mark.parametrize("name", ["gpt2", "p50k_base", "p50k_edit", "o200k_harmony"])
@fuzz(25)
@given(text=st.text())
def test_hyp_special_ordinary(name, text):
    """(r50k_base, cl100k_base: test_tiktoken_api_specials.py)"""
    enc = enc_of(name)
    assert enc.encode_ordinary(text) == enc.encode(text, disallowed_special=())


@pytest.mark.parametrize("name", ["p50k_edit", "o200k_harmony"])
def test_specials_of_more_encodings(name):
    """The special-token cases on the encodings with more specials, against tiktoken."""
    enc, ref = views(name)
    names = sorted(ref.special_tokens_set)[:6]
    text = " x ".join(names) + " tail"
    for kwargs in (
        {"allowed_special": "all"},
        {"allowed_special": set(names[::2]), "disallowed_special": ()},
    ):
        assert enc.encode(text, **kwargs) == ref.encode(text, **kwargs)
    with pytest.raises(ValueError):
        enc.encode(text)


# -- batches -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_batch_encode(name):
    enc = enc_of(name)
    text1, text2 = "hello world", "goodbye world"
    assert enc.encode_batch([text1]) == [enc.encode(text1)]
    assert enc.encode_batch([text1, text2]) == [enc.encode(text1), enc.encode(text2)]
    assert enc.encode_ordinary_batch([text1]) == [enc.encode_ordinary(text1)]
    assert enc.encode_ordinary_batch([text1, text2]) == [
        enc.encode_ordinary(text1),
        enc.encode_ordinary(text2),
    ]


@pytest.mark.parametrize("name", ENCODINGS + ["p50k_edit", "o200k_harmony"])
@fuzz(25)
@given(batch=st.lists(st.text()))
def test_hyp_batch_roundtrip(name, batch):
    enc = enc_of(name)
    encoded = enc.encode_batch(batch, allowed_special="all")
    assert encoded == [enc.encode(t, allowed_special="all") for t in batch]
    assert enc.decode_batch(encoded) == batch


# ----------------------------------------------------------------------------------------------
# test_pickle.py
# ----------------------------------------------------------------------------------------------


def test_pickle():
    old = enc_of("r50k_base")
    new = pickle.loads(pickle.dumps(old))
    assert old.encode("hello world") == new.encode("hello world")

    r50k = views("r50k_base")[1]
    custom = tiktoken.Encoding(
        name="custom_enc",
        pat_str=r50k._pat_str,
        mergeable_ranks=r50k._mergeable_ranks,
        special_tokens={"<|pickle|>": 100_000},
    )
    old = bb.Tokenizer.from_tiktoken(custom).as_tiktoken()
    new = pickle.loads(pickle.dumps(old))
    assert old.encode("hello world") == new.encode("hello world")
    assert (
        old.encode("<|pickle|>", allowed_special="all")
        == new.encode("<|pickle|>", allowed_special="all")
        == [100_000]
    )


# ----------------------------------------------------------------------------------------------
# test_misc.py / test_simple_public.py
# ----------------------------------------------------------------------------------------------


def test_encoding_for_model():
    for model, name in [
        ("gpt2", "gpt2"),
        ("text-davinci-003", "p50k_base"),
        ("text-davinci-edit-001", "p50k_edit"),
        ("gpt-3.5-turbo-0301", "cl100k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4o", "o200k_base"),
        ("gpt-oss-120b", "o200k_harmony"),
    ]:
        views(name)
        assert bb.Tokenizer.from_tiktoken(tiktoken.encoding_for_model(model)).as_tiktoken().name == name


def test_optional_blobfile_dependency():
    prog = (
        "import sys, blockbpe_jax, blockbpe_jax.compat.tiktoken_api\nassert 'blobfile' not in sys.modules\n"
    )
    subprocess.check_call([sys.executable, "-c", prog], env={**os.environ, "JAX_PLATFORMS": "cpu"})
