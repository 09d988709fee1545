"""SentencePiece BPE in the piece-parallel kernel (ffi/cuda/char_piece_kernel.cuh, the default
where a call allows it; BLOCKBPE_KERNEL=block selects encode_chars_kernel instead): ids == sentencepiece for Mistral v1 and v7, Llama 2 and Gemma 3 (the
family files: tests/families.py; references as in tests/tables/test_whole_words.py), on the
shared corpora and on text made to reach every case of the kernel: runs of spaces, tabs and
newlines; `▁` (U+2581) in the text; characters without a piece (byte fallback) and invalid
UTF-8 (U+FFFD); multi-byte characters across every chunk edge; words longer than the lane and
warp merges take (their rows left pending, then encoded by encode_chars_kernel); empty rows;
rows of several widths so that a block holds one or many rows, and every chunk size.

Mistral v7's and Gemma 3's user-defined pieces (`[REF]`, `[REFERENCE_DOC_3]`; Gemma's runs of
newlines, tabs and spaces, and its tags), which sentencepiece always matches, go through the
kernel's specials (the kSpecials instantiation); the texts hold them, next to words and at the
rows' ends, and for the other families they are plain text.

With BLOCKBPE_PIECE_FILL=0 (no second launch) a row the kernel leaves pending keeps the count
-3, so the ids of every other row are the new kernel's alone: those are compared with the
reference too, and the rows that must go pending (a word of more than 64 symbols that is no
piece) are checked to be pending. GPU only: skipped where JAX sees no GPU; on the CPU, the
fact about the vocabularies that lets the kernel look a word up by its own text.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax.tables import build
from blockbpe_jax.tables.sets import MISS_CACHE_ROW_INTS

import families
from helpers import EDGES, MIXED, SPACES, corpus_texts, gpu_devices
from miss_cache_rows import STATE, home_row, planted_row

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")

MODELS = ["mistral-v1-spm", "mistral-v7-spm", "llama2-gguf", "gemma3-gguf"]
PENDING = -3  # kCountPending (ffi/binding/encode_params.h)
LONG_WORDS = ["x" * 300, "ab" * 40, "\u65e5" * 70, "q" * 65, " " + "zq" * 33]  # > 64 symbols, no piece


def per_byte_text(raw: bytes) -> str:
    """`raw` with each byte outside valid UTF-8 one U+FFFD (as sentencepiece reads it)."""
    escaped = raw.decode("utf-8", "surrogateescape")
    return "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in escaped)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    """(our tokenizer, the reference's encode of a str)."""
    path = families.require(request.param)
    tok = bb.Tokenizer.from_file(path)
    if request.param.endswith("-gguf"):
        meta = families.gguf_metadata(path)
        proto = families.spm_from_gguf(meta, add_dummy_prefix=request.param == "llama2-gguf")
    else:
        proto = path.read_bytes()
    return tok, spm.SentencePieceProcessor(model_proto=proto).encode


@pytest.fixture
def piece_kernel(monkeypatch):
    """The piece kernels (the default; named, so that a run with BLOCKBPE_KERNEL=block still
    tests them)."""
    monkeypatch.setenv("BLOCKBPE_KERNEL", "piece")
    return monkeypatch


def adversarial() -> list:
    texts = [
        "",
        " ",
        "  ",
        "a  b   c    d",
        "\t",
        "a\tb\t\tc",
        "\t\t x\n\n  y\n",
        "\u2581",
        "\u2581\u2581 \u2581x",
        "a\u2581b",
        " \u2581 ",
        "x \u2581y \u2581\u2581z",
        "\u2581start",
        " lead",
        "  lead two",
        "trail ",
        "\x00\x01\x7f a\x02b",
        "\U0001f600\U0001f44d\U0001f3fd x\u200dy \U00010000",
        "\ua66e \u0378 \U000e0001 \uffff",
        "caf\u00e9 na\u00efve \u00e9\u00e9\u00e9\u00e9",
        "\u65e5\u672c\u8a9e \u4e2d\u6587 \ud55c\uad6d\uc5b4",
        "a" * 32 + " " + "b" * 33 + " " + "c" * 64,
        "ab" * 16 + " " + "cd" * 17,
        "[REF] x [/REF][REFERENCE_DOC_3]y [REF]",
        "[REF]",
        " [REF]",
        "a\n\nb\n\n\n\nc\t\t\td    e",
        "<b>bold</b> <table><tr>\n  <td>x</td>",
        "\n" * 40 + "x" + "\t" * 33 + " " * 35,
        "x\n \n\u2581\u2581\n  \u2581 y",
        "\nfirst line",  # (word bounds: the dummy prefix a word of its own before them)
        "\n\n\u2581x",
        "2023 was 12345 x1y22",
        "\x01\x01a\x02\tb\x7f",
        " \nx",
        "\u2581\nx",
    ]
    # multi-byte characters at every offset of a 16-byte chunk (and of 2, 4, 8)
    for k in range(18):
        texts.append("a" * k + "\u65e5\u672c\u8a9e x")
        texts.append(" " * k + "\U0001f600y \u00e9")
        texts.append("w" * k + " \u2581\u2581 " + "\ufffd")
    # a special's first byte at every offset, so its second is sometimes the next chunk's first
    for k in range(18):
        texts += ["a" * k + special + "b" for special in ("  ", "\n\n", "\t\t", "<b>", "[REF]")]
    texts += [" " * k + "x" for k in (1, 2, 15, 16, 17, 31, 32, 33, 40)]
    texts += ["a" + " " * k + "b" for k in (2, 3, 16, 17, 30)]
    return texts + MIXED + EDGES + SPACES[:30]


RAW = [
    b"\xff\xfe abc \xc3",
    b"a\x80b \x80\x80",
    b"\xe2\x96",
    b"\xe2\x96\x81\xe2\x96 x",
    b"\xed\xa0\x80 surrogate",
    b"\xf4\x90\x80\x80 big",
    b"ok \xc0\xaf overlong",
    b"\xe6\x97\xa5\xe6\x97 \xe6",
]


def encode_rows(tok, items, width=None):
    """(ids, counts) as NumPy arrays from the primitive on the items' bytes, no specials
    allowed; width: the rows' byte width L (default: the longest, as pack_strings rounds it)."""
    dev = gpu_devices()[0]
    data, lengths = bb.pack_strings(items, max_len=width)
    out = bb.encode(
        jax.device_put(data, dev),
        jax.device_put(lengths, dev),
        tok,
        max_tokens=data.shape[1] + 2,
        allowed_special="none",
    )
    return np.asarray(out.ids), np.asarray(out.counts)


def reference_ids(encode, item) -> list[int]:
    return encode(per_byte_text(item) if isinstance(item, bytes) else item)


def check_rows(tok, encode, items, width=None, pending_ok=False):
    """Every row == the reference; with pending_ok, rows of count -3 are skipped (returned)."""
    ids, counts = encode_rows(tok, items, width)
    pending = []
    for i, item in enumerate(items):
        if pending_ok and counts[i] == PENDING:
            pending.append(item)
            continue
        want = reference_ids(encode, item)
        got = ids[i, : counts[i]].tolist()
        assert counts[i] == len(want) and got == want, (
            f"{tok.vocab.name}: row {i} {item[:80]!r}: count {counts[i]}, first difference at "
            f"{next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}"
        )
    return pending


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("chunk", ["2", "4", "8", "16"])
def test_gpu_adversarial(model, piece_kernel, chunk):
    tok, encode = model
    piece_kernel.setenv("BLOCKBPE_PIECE_CHUNK", chunk)
    items = adversarial() + RAW + LONG_WORDS
    check_rows(tok, encode, items)  # (at the width pack_strings gives: 512)
    short = [t for t in items if len(t if isinstance(t, bytes) else t.encode()) <= 120]
    check_rows(tok, encode, short, width=128)  # two rows a block at 16-byte chunks


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_corpora(model, piece_kernel, data_dir):
    tok, encode = model
    texts = corpus_texts(data_dir, 8, seed=91)
    cut = [t.encode()[:4096].decode("utf-8", "ignore") for t in texts]
    check_rows(tok, encode, cut, width=4096)
    check_rows(tok, encode, [t.encode()[:500].decode("utf-8", "ignore") for t in texts] * 5, width=512)
    check_rows(tok, encode, [t.encode()[:60].decode("utf-8", "ignore") for t in texts] * 40, width=64)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_misses_cache(model, piece_kernel, data_dir):
    """The misses' cache (ffi/cuda/miss_cache.cuh) in this kernel, a cache of its own so that
    earlier tests' words are not in it: the ids equal the reference with the cache empty, with
    the words the first call kept found there, and with the cache off (BLOCKBPE_MISS_CACHE=0);
    the first call kept some, words of over 16 bytes among them (a row's second half)."""
    tok, encode = model
    dev = gpu_devices()[0]
    texts = [t.encode()[:2000].decode("utf-8", "ignore") for t in corpus_texts(data_dir, 8, seed=17)]
    texts += adversarial()
    want = [reference_ids(encode, t) for t in texts]
    own = jax.device_put(np.zeros((1 << 12, MISS_CACHE_ROW_INTS), np.int32), dev)
    tables = dataclasses.replace(tok.tables("none", device=dev), miss_cache=own)
    data, lengths = bb.pack_strings(texts, max_len=2048)
    data, lengths = jax.device_put(data, dev), jax.device_put(lengths, dev)

    def ids():
        out = bb.encode(data, lengths, tables, max_tokens=2050)
        got, counts = np.asarray(out.ids), np.asarray(out.counts)
        return [got[i, : counts[i]].tolist() for i in range(len(texts))]

    assert ids() == want
    states = np.asarray(own)[:, STATE]
    assert (states != 0).sum() > 0, "the kernel kept no merged word"
    assert ((states >> 16) > 16).sum() > 0, "the kernel kept no merged word of over 16 bytes"
    assert ids() == want
    piece_kernel.setenv("BLOCKBPE_MISS_CACHE", "0")
    assert ids() == want


LONG_WORD = b" extraordinarily,"  # 17 bytes: a long key of the misses' cache, a miss in every model


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_long_word_in_the_cache(model, piece_kernel):
    """A word of 17 bytes is kept in its row's long half by the kernel that merged it, and a row
    planted there is what the kernel returns for the word (so the long lookup really runs); a
    row with a wrong check word is ignored."""
    tok, encode = model
    dev = gpu_devices()[0]
    text = "a" + LONG_WORD.decode()  # (the row's first word, which may take the prefix, is "a")
    want, head = reference_ids(encode, text), reference_ids(encode, "a")
    word_ids = want[len(head) :]
    assert want[: len(head)] == head and 1 < len(word_ids) <= 21
    rows = 1 << 10
    row, expected_row = home_row(LONG_WORD, rows), planted_row(LONG_WORD, word_ids)
    own = jax.device_put(np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32), dev)
    tables = dataclasses.replace(tok.tables("none", device=dev), miss_cache=own)

    def ids(t):
        data, lengths = bb.pack_strings([text], max_len=64)
        out = bb.encode(jax.device_put(data, dev), jax.device_put(lengths, dev), t, max_tokens=66)
        return np.asarray(out.ids)[0, : int(out.counts[0])].tolist()

    assert ids(tables) == want
    assert np.asarray(own)[row].tolist() == expected_row.tolist()
    for delta, expected in ((0, head + [11, 22, 33]), (1, want)):
        planted = np.zeros((rows, MISS_CACHE_ROW_INTS), np.int32)
        planted[row] = planted_row(LONG_WORD, [11, 22, 33], delta)
        cache = jax.device_put(planted, dev)
        assert ids(dataclasses.replace(tables, miss_cache=cache)) == expected


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_pending_rows(model, piece_kernel):
    """Without the second launch: the new kernel's own rows == the reference, and the rows with
    a word it cannot merge (over 64 symbols, no piece) are the pending ones."""
    tok, encode = model
    piece_kernel.setenv("BLOCKBPE_PIECE_FILL", "0")
    items = adversarial() + RAW + LONG_WORDS
    short = [t for t in items if len(t if isinstance(t, bytes) else t.encode()) <= 500]
    pending = check_rows(tok, encode, short, width=512, pending_ok=True)
    assert set(LONG_WORDS) <= set(pending)
    unexpected = [x for x in pending if not may_be_pending(tok, encode, x)]
    assert unexpected == []
    assert len(pending) < len(short) // 2


def may_be_pending(tok, encode, item) -> bool:
    """Whether the kernel may leave the row pending: it can hold a word of over 64 symbols (a
    word is at most a run of spaces and the bytes up to the next space, and the dummy prefix; a
    symbol is at least a byte; specials, `▁` and the other bounds only cut words shorter), or
    its dummy prefix is a segment of its own before a special (the row starts with a piece
    sentencepiece always matches, as v7's `[REF]`)."""
    raw = item if isinstance(item, bytes) else item.encode()
    if any(len(word) + 1 > 64 for word in re.findall(rb" *[^ ]*", raw)):
        return True
    prefix_id = tok.vocab.char_level.prefix_id
    want = reference_ids(encode, item)
    specials = set(tok.vocab.special_tokens.values())
    return prefix_id >= 0 and len(want) > 1 and want[0] == prefix_id and want[1] in specials


def bounded_characters(tok) -> list[str]:
    """ASCII characters whose symbol starts a word wherever it meets another (a byte piece where
    the bounds are on, an isolated character: tables/word_bounds.py), a few of each kind."""
    table = build.build_vocab_tables(tok.vocab).char_table
    isolated = set(table[build.CHAR_TABLE_ISOLATED : build.CHAR_TABLE_HEADER].tolist()) - {-1}
    bytes_bound = table[build.CHAR_TABLE_BOUNDS] >= 0
    found = [chr(x) for x in range(1, 128) if (table[x] < 0 and bytes_bound) or table[x] in isolated]
    common = [ch for ch in found if ch in "\n\t0123456789"]
    return (common + [ch for ch in found if ch not in common])[:8]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_bounded_words_are_not_pending(model, piece_kernel):
    """Rows of 80+ symbols without a space but cut every few characters by a bound (a
    character without a piece, an isolated one) hold no word of over 64 symbols, so the kernel
    encodes them itself; so does it a row whose first character starts a word after the dummy
    prefix (the prefix's token then placed before that word's). Without the second launch:
    none pending, every row equal to the reference."""
    tok, encode = model
    cuts = bounded_characters(tok)
    if not cuts:
        pytest.skip(f"{tok.vocab.name}: no word bounds besides `▁`")
    piece_kernel.setenv("BLOCKBPE_PIECE_FILL", "0")
    items = [("abcdefghijk" + ch) * 8 for ch in cuts] + [ch + "first words" for ch in cuts]
    items += [ch * 3 + "x y" + ch for ch in cuts] + ["".join(cuts) * 12]
    assert check_rows(tok, encode, items, width=512, pending_ok=True) == []


def test_words_spell_their_text(model):
    """The kernel looks a word up by its text where no character of it is U+2581 or an invalid
    byte (and no dummy prefix): that is lookup_word's key, the symbols' token bytes, only if
    every other character's piece spells that character and each byte-fallback piece its byte
    (U+2581 and the space share `▁`, which spells a space). Holds wherever the words are on."""
    tables = build.build_vocab_tables(model[0].vocab)
    if tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] != 1:
        pytest.skip("no whole words: the kernel looks nothing up")
    vocab = model[0].vocab
    tb, cl = vocab.token_bytes, vocab.char_level
    assert all(tb[i] == bytes([b]) for b, i in enumerate(vocab.byte_ids))
    wrong = {ch: i for ch, i in cl.char_ids.items() if ch != "\u2581" and tb[i] != ch.encode()}
    assert wrong == {}
    assert tb[cl.char_ids[" "]] == b" " and cl.char_ids.get("\u2581") == cl.char_ids[" "]
    space = int(tables.char_table[ord(" ")])
    assert sorted(ch for ch, i in cl.char_ids.items() if i == space) == [" ", "\u2581"]
