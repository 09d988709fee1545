"""tiktoken's contract to the letter: the view (`tok.as_tiktoken()`) raises the exception type
tiktoken raises for every bad argument (ValueError messages verbatim), and returns what it
returns for odd but accepted ones (numpy ids, bools, tuples, a str as a batch of characters).
`Tokenizer.encode_batch` given a lone surrogate gives the view's ids (U+FFFD, as tiktoken).
"""

from __future__ import annotations

import numpy as np
import pytest

import blockbpe_jax as bb

from helpers import CPU, load_tokenizer, pair, same

pytestmark = pytest.mark.usefixtures("data_dir")

EOT = "<|endoftext|>"
CALLS = {
    # allowed_special: "all" or a set (frozenset) of str; anything else is a TypeError
    "allowed list": lambda e: e.encode("a" + EOT, allowed_special=[EOT]),
    "allowed list, no check": lambda e: e.encode("a" + EOT, allowed_special=[EOT], disallowed_special=()),
    "allowed tuple": lambda e: e.encode("a" + EOT, allowed_special=(EOT,), disallowed_special=()),
    "allowed dict keys": lambda e: e.encode("a" + EOT, allowed_special={EOT: 1}.keys()),
    "allowed 'none'": lambda e: e.encode("a", allowed_special="none"),
    "allowed None": lambda e: e.encode("a", allowed_special=None, disallowed_special=()),
    "allowed non-str": lambda e: e.encode("a", allowed_special={1}, disallowed_special=()),
    "allowed frozenset": lambda e: e.encode("a" + EOT, allowed_special=frozenset([EOT])),
    "allowed unknown name": lambda e: e.encode("a<|x|>", allowed_special={"<|x|>"}),
    "allowed list, empty batch": lambda e: e.encode_batch([], allowed_special=[EOT], disallowed_special=()),
    "allowed list, empty batch, check": lambda e: e.encode_batch([], allowed_special=[EOT]),
    # disallowed_special: any collection of strings, specials or not ("all": every special)
    "disallowed str": lambda e: e.encode("a<b", disallowed_special=EOT),
    "disallowed list": lambda e: e.encode("a" + EOT, disallowed_special=[EOT]),
    "disallowed not special": lambda e: e.encode("hello", disallowed_special={"ell"}),
    "disallowed both": lambda e: e.encode("hello " + EOT, disallowed_special={"lo ", EOT}),
    "disallowed None": lambda e: e.encode("hello", disallowed_special=None),
    # text: a str
    "encode bytes": lambda e: e.encode(b"hello"),
    "encode None": lambda e: e.encode(None),
    "encode int, no check": lambda e: e.encode(5, disallowed_special=()),
    "encode_ordinary bytes": lambda e: e.encode_ordinary(b"hello"),
    "encode_ordinary None": lambda e: e.encode_ordinary(None),
    "encode_batch non-str": lambda e: e.encode_batch(["a", 5]),
    "encode_batch bytes, no check": lambda e: e.encode_batch([b"a"], disallowed_special=()),
    "encode_batch of a str": lambda e: e.encode_batch("abc"),
    "encode_ordinary_batch None": lambda e: e.encode_ordinary_batch(["a", None]),
    "encode_ordinary_batch of a str": lambda e: e.encode_ordinary_batch("ab"),
    # surrogates: replaced by encode, refused by encode_to_numpy
    "encode lone surrogate": lambda e: e.encode("a\ud83d b"),
    "encode pair": lambda e: e.encode("a\ud83d\udc4d b"),
    "encode_batch lone surrogate": lambda e: e.encode_batch(
        ["a\ud83d", "\udc4d" + EOT], allowed_special="all"
    ),
    "encode_to_numpy": lambda e: e.encode_to_numpy("hello world").tolist(),
    "encode_to_numpy lone surrogate": lambda e: e.encode_to_numpy("a\ud83d b").tolist(),
    "encode_to_numpy pair": lambda e: e.encode_to_numpy("a\ud83d\udc4d b").tolist(),
    "encode_to_numpy bytes": lambda e: e.encode_to_numpy(b"ab").tolist(),
    "encode_to_numpy disallowed": lambda e: e.encode_to_numpy(EOT).tolist(),
    "encode_to_numpy dtype": lambda e: str(e.encode_to_numpy(EOT, allowed_special="all").dtype),
    # single tokens
    "single_token int": lambda e: e.encode_single_token(5),
    "single_token None": lambda e: e.encode_single_token(None),
    "single_token bytearray": lambda e: e.encode_single_token(bytearray(b"hello")),
    "single_token surrogate": lambda e: e.encode_single_token("\ud83d"),
    "single_token not one": lambda e: e.encode_single_token("hello world"),
    # ids: unsigned 32-bit integers (OverflowError outside, TypeError for non-integers)
    "decode negative": lambda e: e.decode([-1]),
    "decode 2**32": lambda e: e.decode([2**32]),
    "decode 2**40": lambda e: e.decode([2**40]),
    "decode 2**32-1": lambda e: e.decode([2**32 - 1]),
    "decode missing": lambda e: e.decode([10**7]),
    "decode str": lambda e: e.decode(["a"]),
    "decode float": lambda e: e.decode([1.5]),
    "decode bool": lambda e: e.decode([True]),
    "decode numpy ints": lambda e: e.decode([np.int64(15339)]),
    "decode numpy array": lambda e: e.decode(np.array([15339, 1917])),
    "decode uint32 array": lambda e: e.decode(np.array([15339, 1917], np.uint32)),
    "decode tuple": lambda e: e.decode((15339, 1917)),
    "decode None": lambda e: e.decode(None),
    "decode int": lambda e: e.decode(5),
    "decode bad errors name": lambda e: e.decode([15339], errors="bogus"),
    "decode_bytes negative": lambda e: e.decode_bytes([-1]),
    "decode_single negative": lambda e: e.decode_single_token_bytes(-1),
    "decode_single 2**40": lambda e: e.decode_single_token_bytes(2**40),
    "decode_single str": lambda e: e.decode_single_token_bytes("1"),
    "decode_single float": lambda e: e.decode_single_token_bytes(1.0),
    "decode_single numpy": lambda e: e.decode_single_token_bytes(np.int64(5)),
    "decode_single bool": lambda e: e.decode_single_token_bytes(True),
    "decode_tokens_bytes negative": lambda e: e.decode_tokens_bytes([-1]),
    "decode_with_offsets invalid UTF-8": lambda e: e.decode_with_offsets([9468, 239]),
    "decode_with_offsets negative": lambda e: e.decode_with_offsets([-1]),
    "decode_batch negative": lambda e: e.decode_batch([[-1]]),
    "decode_bytes_batch missing": lambda e: e.decode_bytes_batch([[10**7]]),
    # is_special_token asserts an int
    "is_special str": lambda e: e.is_special_token("a"),
    "is_special numpy": lambda e: e.is_special_token(np.int64(100257)),
    "is_special negative": lambda e: e.is_special_token(-1),
}


@pytest.mark.parametrize("call", CALLS, ids=list(CALLS))
def test_same_result_or_exception_type(call):
    try:
        same("cl100k", CALLS[call])
    except Exception:  # noqa: BLE001 - `same` checked the type (and ValueError's message)
        pass


def test_key_error_text():
    ours, ref = pair("cl100k")
    for enc in (ours, ref):
        with pytest.raises(KeyError, match="Invalid token for decoding: 10000000"):
            enc.decode([10**7])


@pytest.mark.parametrize("name", ["cl100k", "llama3"])
def test_tokenizer_encode_batch_lone_surrogates(name):
    """Tokenizer.encode_batch (padded arrays): surrogates as tiktoken treats them (pairs
    joined, lone ones U+FFFD), never a bare UnicodeEncodeError; pack_strings names the item."""
    tok = load_tokenizer(name, "tiktoken")
    view = tok.as_tiktoken()
    texts = ["ok", "a\ud83d b", "\ud83d\udc4d pair", "\udfff", "é\ud800é"]
    ids, counts = tok.encode_batch(texts, device=CPU)
    ids, counts = np.asarray(ids), np.asarray(counts)
    got = [ids[k, : counts[k]].tolist() for k in range(len(texts))]
    assert got == view.encode_ordinary_batch(texts)
    assert got[1] == view.encode_ordinary("a\ufffd b") and got[2] == view.encode_ordinary("\U0001f44d pair")
    with pytest.raises(UnicodeEncodeError, match=r"surrogates not allowed: texts\[1\] holds a surrogate"):
        bb.pack_strings(texts)  # (the packer alone: loud, naming the item)
