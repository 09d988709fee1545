"""Bad arguments to encode, pack_strings and decode: each case raises a clear error of the right type whose message names
the problem. CPU only. Bad vocabulary files: test_bad_inputs_vocab.py.

Cases already checked elsewhere are not repeated here:
tests/ops/test_primitive.py::test_bad_inputs_raise_clear_errors (int32 / 1-D data, int16 lengths,
short lengths, host length 65 > 64, device length -1, max_tokens=0, block_size=128,
mode="regex", unknown special, jitted length 99), test_bad_lengths_on_device,
test_handler_rejects_malformed_tables; tests/vocab/test_vocab_tiktoken.py::test_malformed_tiktoken_line,
test_tiktoken_missing_single_byte, test_tiktoken_empty_file,
test_tiktoken_special_colliding_with_token; tests/vocab/test_vocab_hf_json.py::test_malformed_tokenizer_json,
test_tokenizer_json_not_json, test_unsupported_features_load_with_reason;
tests/fuzz/test_fuzz_rows.py::test_exactly_L_bytes_and_one_more
(L+1 bytes through pack_strings, encode_batch, host and device lengths).

Bugs found while writing this file (data without a byte axis, a bare str to pack_strings, a
negative max_len, negative ids or counts in decode) were fixed in the package; their tests stay.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blockbpe_jax as bb

from helpers import CPU, load_tokenizer

TEXTS = ["hello world", "", "naïve café 12345", "<|endoftext|> x"]


@pytest.fixture(scope="module")
def tok(data_dir):
    return load_tokenizer("cl100k", "tiktoken")


@pytest.fixture(scope="module")
def packed(tok):
    return bb.pack_strings(TEXTS, max_len=32)


# ---------------------------------------------------------------------------------------------
# encode: data and lengths
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "convert, shown",
    [
        (lambda d: d.astype(np.int8), r"int8\[4, 32\]"),
        (lambda d: d.astype(np.uint16), r"uint16\[4, 32\]"),
        (lambda d: d.astype(np.float32), r"float32\[4, 32\]"),
        (lambda d: d.astype(bool), r"bool\[4, 32\]"),
        (lambda d: d[None], r"uint8\[1, 4, 32\]"),
        (lambda d: d.tolist(), r"int32\[4, 32\]"),  # a nested list becomes int32
    ],
)
def test_data_of_wrong_dtype_or_shape(tok, packed, convert, shown):
    data, lengths = packed
    with pytest.raises(TypeError, match=r"data must be uint8\[batch, max_len\], got " + shown):
        bb.encode(convert(data), lengths, tok, max_tokens=8)


@pytest.mark.parametrize("data", [b"hello world", np.uint8(104)], ids=["bytes", "0d"])
def test_data_without_byte_axis(tok, data):
    with pytest.raises(TypeError, match="data must be uint8"):
        bb.encode(data, np.array([1], np.int32), tok, max_tokens=8)


@pytest.mark.parametrize(
    "convert, shown",
    [
        (lambda n: n.astype(np.float32), r"float32\[4\]"),
        (lambda n: n.astype(np.uint32), r"uint32\[4\]"),
        (lambda n: n.astype(bool), r"bool\[4\]"),
        (lambda n: n[:, None], r"int32\[4, 1\]"),
        (lambda n: n[0], r"int32\[\]"),
        (lambda n: np.concatenate([n, n]), r"int32\[8\]"),
    ],
)
def test_lengths_of_wrong_dtype_or_shape(tok, packed, convert, shown):
    data, lengths = packed
    with pytest.raises(TypeError, match=r"lengths must be int32\[4\], got " + shown):
        bb.encode(data, convert(lengths), tok, max_tokens=8)


@pytest.mark.parametrize("row, value", [(0, -1), (3, 33), (1, 2**31 - 1), (2, 2**32 + 3)])
def test_host_lengths_out_of_range(tok, packed, row, value):
    """NumPy lengths are checked in Python (int64 ones too, before any narrowing)."""
    data, lengths = packed
    bad = lengths.astype(np.int64)
    bad[row] = value
    with pytest.raises(ValueError, match=rf"lengths\[{row}\] = {value} is outside \[0, 32\]"):
        bb.encode(data, bad, tok, max_tokens=8)


def test_host_lengths_need_no_read_back(tok, packed, monkeypatch):
    """NumPy lengths were checked in Python, so encode calls the handler that does not copy
    them back (on a GPU a copy and a stream sync per call); lengths on the device, whose
    values Python does not see, keep the checked handler."""
    from blockbpe_jax.ops import primitive as ops

    checked = []
    build = ops._encode_call
    monkeypatch.setattr(ops, "_encode_call", lambda *attrs: checked.append(attrs[-1]) or build(*attrs))
    data, lengths = packed
    on_host = bb.encode(data, lengths, tok, max_tokens=16)
    on_device = bb.encode(jax.device_put(data, CPU), jax.device_put(lengths, CPU), tok, max_tokens=16)
    unchecked = bb.encode(data, lengths, tok, max_tokens=16, check_lengths=False)
    assert checked == [False, True, False]
    for out in (on_device, unchecked):
        np.testing.assert_array_equal(out.ids, on_host.ids)
        np.testing.assert_array_equal(out.counts, on_host.counts)


# The handler's INVALID_ARGUMENT reaches Python as jax.errors.JaxRuntimeError while jax runs the
# call through its Python dispatch path (a signature's first call), but as ValueError once the
# C++ fast path serves it (after a successful call with the same shapes and options).
HANDLER_ERRORS = (jax.errors.JaxRuntimeError, ValueError)


@pytest.mark.parametrize("after_good_call", [False, True], ids=["first_call", "after_good_call"])
@pytest.mark.parametrize("how", ["device_array", "python_list", "unchecked_on_cpu", "jit"])
def test_device_lengths_out_of_range(tok, how, after_good_call):
    """Lengths that are not a host NumPy array are checked by the handler: INVALID_ARGUMENT.
    On CPU that holds for check_lengths=False too (the CPU handler reads lengths for free)."""
    # A batch size of its own per case, so "first call" really is the first of its signature.
    batch = 5 + 2 * ["device_array", "python_list", "unchecked_on_cpu", "jit"].index(how) + after_good_call
    data, lengths = bb.pack_strings((TEXTS * 3)[:batch], max_len=32)
    data = jax.device_put(data, CPU)
    bad = lengths.copy()
    bad[2] = 33
    kwargs = dict(check_lengths=False) if how == "unchecked_on_cpu" else {}
    if how == "jit":
        tables = tok.tables(device=CPU)
        f = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=8))
        call = lambda l: f(data, jax.device_put(l, CPU), tables)
    else:
        convert = (lambda l: l.tolist()) if how == "python_list" else (lambda l: jax.device_put(l, CPU))
        call = lambda l: bb.encode(data, convert(l), tok, max_tokens=8, **kwargs)
    if after_good_call:
        call(lengths).ids.block_until_ready()
    with pytest.raises(
        HANDLER_ERRORS, match=r"INVALID_ARGUMENT: bbpe_encode: lengths\[2\] = 33 is outside \[0, 32\]"
    ):
        call(bad).ids.block_until_ready()


def test_device_length_error_type_after_good_call(tok):
    # Documented (encode's docstring): jax's C++ fast dispatch path surfaces the handler's
    # INVALID_ARGUMENT as ValueError on a repeated call; the message is the same.
    data, lengths = bb.pack_strings(TEXTS[:3], max_len=64)
    data, good = jax.device_put(data, CPU), jax.device_put(lengths, CPU)
    bb.encode(data, good, tok, max_tokens=4).ids.block_until_ready()
    with pytest.raises(
        (jax.errors.JaxRuntimeError, ValueError), match=r"INVALID_ARGUMENT: bbpe_encode: lengths\[0\] = 99"
    ):
        bb.encode(data, good.at[0].set(99), tok, max_tokens=4).ids.block_until_ready()


# ---------------------------------------------------------------------------------------------
# encode: options
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [-1, -(2**40), 8.0, "8", None, True, 2**31])
def test_max_tokens_not_positive_int(tok, packed, max_tokens):
    data, lengths = packed
    with pytest.raises(
        ValueError, match=r"max_tokens must be a positive int below 2\*\*31, got " + repr(max_tokens)
    ):
        bb.encode(data, lengths, tok, max_tokens=max_tokens)


@pytest.mark.parametrize("block_size", [0, 64, 2048, "256", None])
def test_bad_block_size(tok, packed, block_size):
    data, lengths = packed
    with pytest.raises(
        ValueError, match=r"block_size must be one of \(256, 512, 1024\), got " + repr(block_size)
    ):
        bb.encode(data, lengths, tok, max_tokens=8, block_size=block_size)


@pytest.mark.parametrize("mode", [None, "EXACT", "", "byte"])
def test_bad_mode(tok, packed, mode):
    data, lengths = packed
    with pytest.raises(ValueError, match=r"mode must be 'exact' or 'bytes', got " + repr(mode)):
        bb.encode(data, lengths, tok, max_tokens=8, mode=mode)
    with pytest.raises(ValueError, match="mode must be"):
        tok.encode_batch(TEXTS, mode=mode, device=CPU)


@pytest.mark.parametrize(
    "allowed, message",
    [
        ({"<|nope|>"}, r"not special tokens of cl100k_base: \['<\|nope\|>'\]"),
        (["<|endoftext|>", "<|endoftext"], r"not special tokens of cl100k_base: \['<\|endoftext'\]"),
        ({100257}, r"not special tokens of cl100k_base: \[100257\]"),
        ("<|endoftext|>", "got the string '<\\|endoftext\\|>'"),
        ("ALL", "allowed_special must be 'all', 'none' or a collection"),
    ],
)
def test_unknown_allowed_special(tok, packed, allowed, message):
    data, lengths = packed
    with pytest.raises(ValueError, match=message):
        bb.encode(data, lengths, tok, max_tokens=8, allowed_special=allowed)
    with pytest.raises(ValueError, match=message):
        tok.encode_batch(TEXTS, allowed_special=allowed, device=CPU)


@pytest.mark.parametrize("allowed", [5, 2.5, [1, "a"]])
def test_allowed_special_not_a_collection_of_names(tok, packed, allowed):
    data, lengths = packed
    want = "allowed_special must be 'all', 'none' or a collection of special tokens, got"
    with pytest.raises(TypeError, match=want):
        bb.encode(data, lengths, tok, max_tokens=8, allowed_special=allowed)
    with pytest.raises(TypeError, match=want):
        tok.encode_batch(TEXTS, allowed_special=allowed, device=CPU)


@pytest.mark.parametrize("tokenizer", [None, "cl100k_base", 3])
def test_tokenizer_not_a_tokenizer(packed, tokenizer):
    data, lengths = packed
    with pytest.raises(TypeError, match="encode: tokenizer must be a Tokenizer or its EncodeTables, got"):
        bb.encode(data, lengths, tokenizer, max_tokens=8)


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_encode_batch_max_tokens_not_positive(tok, max_tokens):
    """0 is not "the default" (None is): it is refused as encode refuses it."""
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        tok.encode_batch(TEXTS, max_tokens=max_tokens, device=CPU)


def test_allowed_special_with_tables(tok, packed):
    data, lengths = packed
    with pytest.raises(
        ValueError,
        match=r"EncodeTables fix the allowed specials; choose them with "
        r"tok.tables\(allowed_special=...\)",
    ):
        bb.encode(data, lengths, tok.tables(device=CPU), max_tokens=8, allowed_special="all")


def test_vmap_over_tables(tok, packed):
    data, lengths = packed
    tables = tok.tables(device=CPU)
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), tables)
    f = jax.vmap(lambda d, l, t: bb.encode(d, l, t, max_tokens=8))
    with pytest.raises(ValueError, match="the vocabulary tables cannot be vmapped over"):
        f(jnp.stack([data, data]), jnp.stack([lengths, lengths]), stacked)


@pytest.mark.parametrize("pad_id", [2**31, -(2**31) - 1, 1.5, "0"])
def test_pad_id_not_int32(tok, packed, pad_id):
    data, lengths = packed
    with pytest.raises(ValueError, match="pad_id must be an int32"):
        bb.encode(data, lengths, tok, max_tokens=8, pad_id=pad_id)


# ---------------------------------------------------------------------------------------------
# pack_strings
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item", [3, None, 2.5, bytearray(b"ab"), memoryview(b"ab"), ["ab"], np.array([97], np.uint8)]
)
def test_pack_strings_non_str_items(item):
    with pytest.raises(TypeError, match="pack_strings: item 1 is neither str nor bytes"):
        bb.pack_strings(["ok", item, "ok"])


def test_pack_strings_too_long():
    with pytest.raises(ValueError, match="pack_strings: string 2 has 5 bytes, more than max_len=4"):
        bb.pack_strings(["", "abcd", "abcde"], max_len=4)
    with pytest.raises(ValueError, match="string 0 has 2 bytes, more than max_len=1"):
        bb.pack_strings(["é"], max_len=1)  # bytes, not characters
    with pytest.raises(ValueError, match="string 0 has 1 bytes, more than max_len=0"):
        bb.pack_strings(["a"], max_len=0)


def test_pack_strings_lone_surrogate():
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        bb.pack_strings(["ok", "a\ud800b"])


def test_pack_strings_bare_string():
    with pytest.raises(TypeError):
        bb.pack_strings("hello")


@pytest.mark.parametrize("texts", [None, 3])
def test_pack_strings_not_a_sequence(tok, texts):
    with pytest.raises(TypeError, match="pack_strings: texts must be a sequence of str/bytes, got"):
        bb.pack_strings(texts)
    with pytest.raises(TypeError, match="pack_strings: texts must be a sequence of str/bytes, got"):
        tok.encode_batch(texts, device=CPU)


def test_pack_strings_negative_max_len():
    with pytest.raises(ValueError, match="max_len"):
        bb.pack_strings(["hello"], max_len=-5)


# ---------------------------------------------------------------------------------------------
# decode (host) of ids outside the vocabulary
# ---------------------------------------------------------------------------------------------


def test_decode_ids_outside_vocabulary(tok):
    n = tok.vocab.n_vocab
    holes = [i for i, b in enumerate(tok.vocab.token_bytes) if b is None]
    for bad in (n, n + 1000, 2**31 - 1, holes[0]):
        ids = np.array([[15339, bad, 1917]], np.int32)
        with pytest.raises(ValueError, match=rf"decode: ids not in the vocabulary: \[{bad}\]"):
            tok.decode(ids, np.array([3]))
        with pytest.raises(ValueError, match=rf"decode: ids not in the vocabulary: \[{bad}\]"):
            tok.decode_bytes(ids, np.array([3]))
    # Past the count an id is padding and is not looked at.
    assert tok.decode(np.array([[15339, n]], np.int32), np.array([1])) == ["hello"]


def test_decode_negative_id(tok):
    with pytest.raises(ValueError, match=r"decode: ids not in the vocabulary: \[-1\]"):
        tok.decode(np.array([[-1, 15339]], np.int32), np.array([2]))


def test_decode_negative_count(tok):
    with pytest.raises(ValueError, match="count"):
        tok.decode(np.array([[15339, 1917, 0]], np.int32), np.array([-1]))


def test_decode_counts_not_matching_the_rows(tok):
    ids = np.array([[15339, 1917], [15339, 0]], np.int32)
    with pytest.raises(
        ValueError, match=r"decode: counts must have the shape of the ids' rows, \[2\], got \[3\]"
    ):
        tok.decode(ids, np.array([2, 1, 1]))
    with pytest.raises(ValueError, match=r"the ids' rows, \[2\], got \[\]"):
        tok.decode(ids, np.array(2))
    with pytest.raises(TypeError, match="decode: ids and counts must be integers, got float32 and int64"):
        tok.decode(ids.astype(np.float32), np.array([2, 1]))


def test_encode_sharded_without_a_mesh(tok, packed):
    data, lengths = packed
    with pytest.raises(TypeError, match="encode_sharded: mesh must be a jax.sharding.Mesh, got NoneType"):
        bb.encode_sharded(data, lengths, tok.tables(device=CPU), None, max_tokens=8)
