"""`ops.host_encoder`: the CPU encode on host strings without XLA (the tiktoken-style API's path
on the CPU) gives the jitted primitive's ids, and checks its tables; `Encoding(device="auto")`
sends long texts to the accelerator and keeps the batch's order."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import native
from blockbpe_jax.ops import primitive as ops
from blockbpe_jax.compat.tiktoken_api import _utf8

from helpers import load_tokenizer, oracle
from strategies import unicode_text

pytestmark = pytest.mark.usefixtures("data_dir")
CPU = jax.devices("cpu")[0]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


def primitive_ids(tok, texts, *, allowed="none", mode="exact") -> list[list[int]]:
    data, lengths = bb.pack_strings(texts)
    width = 2 * data.shape[1] + 2  # (room for every id: no truncation)
    enc = ops.encode(
        jax.device_put(data, CPU), jax.device_put(lengths, CPU), tok.tables(allowed, CPU),
        max_tokens=width, mode=mode,
    )  # fmt: skip
    ids, counts = np.asarray(enc.ids), np.asarray(enc.counts)
    return [ids[i, : counts[i]].tolist() for i in range(len(texts))]


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(unicode_text, min_size=1, max_size=6), mode=st.sampled_from(["exact", "bytes"]))
def test_equals_the_primitive(tok, texts, mode):
    got = ops.host_encoder(tok.tables("none", host=True), mode=mode).encode(texts)
    assert got == primitive_ids(tok, texts, mode=mode)
    # bytes in, the same ids as their str
    assert (
        ops.host_encoder(tok.tables("none", host=True), mode=mode).encode([t.encode() for t in texts]) == got
    )


def test_specials_long_pieces_and_many_threads(tok):
    """Specials allowed; pieces over the tree-merge threshold; a batch large enough to be split
    over host threads (rows in order)."""
    texts = ["a <|endoftext|> b", "x" * 300 + " many words " * 20, "", "héllo 🎉", "日本語" * 700]
    texts += [f"row {i}: " + "abcdefghij"[i % 10] * (i * 37 % 3000) for i in range(200)]
    for allowed in ("none", "all"):
        got = ops.host_encoder(tok.tables(allowed, host=True)).encode(texts)
        assert got == primitive_ids(tok, texts, allowed=allowed)


@settings(max_examples=40, deadline=None)
@given(
    alphabet=st.sampled_from(
        ["a", "ab", "abcdefghij", " ", " \t\n", "日本語中文", "🎉🙂👍", "aé中🎉", "0123456789"]
    ),
    runs=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 700)), min_size=1, max_size=8),
)
def test_long_pieces_equal_tiktoken(tok, alphabet, runs):
    """One long pre-tokenizer piece (runs of one character, or alternating ones, of a small
    alphabet: the tree merge's case, with its overlapping candidates) == tiktoken."""
    text = "".join(alphabet[k % len(alphabet)] * n for k, n in runs)
    text += "".join(alphabet[(k * 7 + j) % len(alphabet)] for j, (k, _) in enumerate(runs * 50))
    ref = oracle("cl100k", "tiktoken", tok.vocab.pattern)
    assert tok.as_tiktoken().encode_ordinary(text) == ref.encode_ordinary(text)


@pytest.fixture(scope="module", params=["nfc", "sentencepiece"])
def other_family(request, data_dir, tmp_path_factory):
    """A tokenizer with a normalizer (llama3's vocabulary with NFC: the API normalizes, the
    encoder trusts it) and a SentencePiece-style one (merges over characters: encode_chars)."""
    if request.param == "nfc":
        from synthetic import nfc_tokenizer

        return nfc_tokenizer(data_dir)[0]
    from synthetic import gguf_bytes, tiny_spm

    path = tmp_path_factory.mktemp("spm") / "tiny.gguf"
    path.write_bytes(gguf_bytes(tiny_spm()))
    return bb.Tokenizer.from_file(path)


@settings(max_examples=30, deadline=None)
@given(
    texts=st.lists(
        unicode_text | st.sampled_from(["e\u0301", "ab>  <b", "\u2581 ab", "Å" * 40]), min_size=1, max_size=6
    )
)
def test_other_families_equal_encode_batch(other_family, texts):
    """The tiktoken API's host path (unpadded strings) == encode_batch on the CPU device (padded
    rows), for a normalizing tokenizer and one whose merges run over characters."""
    ids, counts = other_family.encode_batch(texts, device=CPU).numpy()
    assert other_family.as_tiktoken().encode_ordinary_batch(texts) == [
        ids[i, : counts[i]].tolist() for i in range(len(texts))
    ]


def test_one_long_text_over_threads(tok, data_dir):
    """One string of over 32 KiB has its segments merged on several threads (cut at segment
    starts, joined in order): == tiktoken, with and without specials allowed, long pieces and
    specials wherever the cuts fall."""
    from blockbpe_jax.testing import read_corpus

    prose = read_corpus(data_dir / "corpus" / "war_and_peace_en.txt").decode()[:150_000]
    parts = [
        prose[k : k + 3000] + "<|endoftext|>" + "ab" * 700 + " 日本語" * 300 for k in range(0, 150_000, 3000)
    ]
    text = "".join(parts)
    ref = oracle("cl100k", "tiktoken", tok.vocab.pattern)
    assert ops.host_encoder(tok.tables("none", host=True)).encode([text]) == [ref.encode_ordinary(text)]
    got = ops.host_encoder(tok.tables("all", host=True)).encode([text])
    assert got == [ref.encode(text, allowed_special="all")]
    assert tok.as_tiktoken().encode_ordinary(text) == ref.encode_ordinary(text)


def test_short_keys_are_confirmed_by_their_row_long_keys_by_token_data(tok):
    """The executor's whole-piece lookup (core/bpe_core.h's lookup_piece, the kernels' too):
    each of a piece of 9, 16 and 17 bytes, one token, gets another id in its piece-table row.
    The encoder then gives that id for each; with token_data blanked as well, still for the 9-
    and 16-byte pieces (their rows hold their bytes) but not for the 17-byte one (its hash hit
    is confirmed against token_data: a miss, so it is merged, to its own id)."""
    tables = tok.tables("none", host=True)
    v = tok.vocab
    pieces = {}
    for i in v.mergeable_ids:
        b = v.token_bytes[i]
        word = len(b) in (9, 16, 17) and b[:1] == b" " and b[1:].isalpha() and b.isascii()
        if word and len(b) not in pieces:
            pieces[len(b)] = (b.decode(), i)
    assert sorted(pieces) == [9, 16, 17]
    encoder = ops.host_encoder(tables)
    assert encoder.encode([text for text, _ in pieces.values()]) == [[i] for _, i in pieces.values()]
    other = int(v.byte_ids[ord("!")])
    piece_table = tables.piece_table.copy()
    for _, i in pieces.values():
        (row,) = np.flatnonzero(piece_table[:, 4] == i)
        piece_table[row, 4] = other
    edited = dataclasses.replace(tables, piece_table=piece_table)
    blanked = dataclasses.replace(edited, token_data=np.zeros_like(tables.token_data))
    for n, (text, i) in pieces.items():
        assert ops.host_encoder(edited).encode([text]) == [[other]]
        assert ops.host_encoder(blanked).encode([text]) == [[other] if n <= 16 else [i]], n


def test_checks(tok):
    tables = tok.tables("none", host=True)
    with pytest.raises(ValueError, match="pair_table must be int32"):
        ops.host_encoder(dataclasses.replace(tables, pair_table=np.zeros((3, 4), np.int32)))
    # (the [2Q, 4] view has the same bytes: refused by its shape, not read as another layout)
    for piece_table in (tables.piece_table.reshape(-1, 4), tables.piece_table[:3]):
        with pytest.raises(ValueError, match=r"piece_table must be int32\[Q, 8\] with Q a power of two"):
            ops.host_encoder(dataclasses.replace(tables, piece_table=piece_table))
    with pytest.raises(TypeError):  # no silent conversion of a wrong dtype
        ops.host_encoder(dataclasses.replace(tables, pair_table=tables.pair_table.astype(np.int64)))
    with pytest.raises(ValueError, match="pretok_stages must be in"):
        native.cpu.HostEncoder(*tables.operands(), 99, 0, 0, 0, 0, 0, 0, 1)
    encoder = ops.host_encoder(tables)
    assert encoder.encode([]) == [] and encoder.encode([""]) == [[]] and encoder.encode(["", b""]) == [[], []]
    with pytest.raises(TypeError, match="item 1 is neither str nor bytes"):
        encoder.encode(["fine", 7])
    with pytest.raises(UnicodeEncodeError):  # (the tiktoken API replaces lone surrogates first)
        encoder.encode(["\ud800"])


def test_tiktoken_api_makes_no_xla_call_on_the_cpu(tok, monkeypatch):
    """The tiktoken-style API on the CPU encodes through the host encoder, with the ids of
    encode_batch (taken before encode_batch is made to fail)."""
    texts = ["Hello world", "ünïcödé 日本語", "x" * 5000, "lone \ud800 surrogate"]
    want = primitive_ids(tok, [_utf8(t) for t in texts])  # (lone surrogates -> U+FFFD)
    monkeypatch.setattr(bb.Tokenizer, "encode_batch", lambda *a, **k: pytest.fail("an XLA call"))
    assert tok.as_tiktoken().encode_ordinary_batch(texts) == want


def test_auto_sends_long_texts_to_the_accelerator(tok, monkeypatch):
    """device="auto": texts of LONG_TEXT_BYTES UTF-8 bytes or more go through encode_batch on the
    accelerator (here the CPU device stands in for it), the rest through the host encoder; the
    batch comes back in its order with the ids of one path for all."""
    enc = tok.as_tiktoken(device="auto")
    assert enc.device == CPU
    if jax.devices()[0].platform == "cpu":
        assert enc._long_texts_on is None  # nothing to send long texts to
    enc._long_texts_on = CPU
    monkeypatch.setattr(enc, "LONG_TEXT_BYTES", 40)
    calls = []
    batch = bb.Tokenizer.encode_batch
    monkeypatch.setattr(
        bb.Tokenizer, "encode_batch", lambda self, t, **k: calls.append(len(t)) or batch(self, t, **k)
    )
    texts = ["short", "a long text of more than forty bytes " * 3, "", "x" * 39, "y" * 40, "日本語" * 4]
    texts += ["日本語" * 5, "é" * 19, "é" * 20, "🎉" * 10, "\ud800" * 14]  # 45, 38, 40, 40, 42 bytes
    want = tok.as_tiktoken().encode_ordinary_batch(texts)
    assert enc.encode_ordinary_batch(texts) == want
    assert sum(calls) == 6  # the long ones, whatever their buckets
    calls.clear()  # one text at a time (routed by its length first)
    assert [enc.encode_ordinary(t) for t in texts] == want
    assert calls == [1] * 6
    with pytest.raises(ValueError, match="device must be"):
        tok.as_tiktoken(device="gpu")


def test_threads_share_the_tables(tok):
    """The host encoder releases the GIL: calls from several threads at once, on the same
    tables, give each its own ids."""
    from concurrent.futures import ThreadPoolExecutor

    enc = tok.as_tiktoken()
    texts = [f"thread text {i}: " + "wörds and 日本語 " * (i % 23) for i in range(200)]
    want = [enc.encode_ordinary(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(enc.encode_ordinary, texts)) == want
