"""Long rows on the GPU: the tile pipeline (ffi/cuda/tile_rows.cuh, "Long rows").

Rows wider than 8192 bytes (or than a tile, in batches of at most 16 rows) in exact mode with a
one-stage pre-tokenizer are spread over one block per 2048-byte tile (kTileBytes; a build
option). Every test here encodes on the GPU and compares, row by row and padding included, with
the CPU executor (no blocks, the reference) and with tiktoken: prose of 8 KiB .. 8 MiB, adversarial pieces, pieces and special tokens
crossing tile boundaries at every offset near them, empty rows and rows of different lengths
in one batch, counts over the capacity, bad lengths without the host check, and NFC
normalization. Skips where JAX sees no GPU.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import native, testing

from helpers import gpu_devices, load_tokenizer, vocab_path
from long_rows_shared import TILE, assert_equals_tiktoken, assert_gpu_equals_cpu, cpu, cut, run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")]


@pytest.fixture(scope="module")
def prose() -> bytes:
    return testing.read_corpus(testing.data_dir() / "corpus" / "war_and_peace_en.txt")


@pytest.mark.parametrize("name", ["cl100k", "o200k", "r50k"])
def test_prose_rows_of_many_lengths(name, prose):
    tok = load_tokenizer(name, "tiktoken")
    lengths = [0, 1, 100, 4095, 4096, 4097, 8191, 8192, 8193, 12288, 20000, 65536, 150001]
    lengths = sorted({*lengths, TILE - 1, TILE, TILE + 1})  # (the build's tiles: BLOCKBPE_TILE_BYTES)
    rows = [cut(prose, 7919 * k, n) for k, n in enumerate(lengths)]
    want = assert_gpu_equals_cpu(tok, rows, max_len=150016)
    assert_equals_tiktoken(name, rows, want)


def test_one_mebibyte_and_eight(prose):
    for n in (1 << 20, 8 << 20):
        row = cut(prose, 12345, n)
        got = run(
            load_tokenizer("cl100k", "tiktoken"), [row], device=gpu_devices()[0], max_len=n, max_tokens=n // 2
        )
        assert_equals_tiktoken("cl100k", [row], got)


@pytest.mark.parametrize("kind", sorted(testing.ADVERSARIAL))
def test_adversarial_rows(kind):
    rng = random.Random(kind)
    rows = [testing.ADVERSARIAL[kind](rng, n) for n in (9000, 20000, 40000)]
    rows.append(b"x " + rows[0] + b" y")
    want = assert_gpu_equals_cpu(
        load_tokenizer("cl100k", "tiktoken"), rows, max_len=40960, block_sizes=(256, 1024)
    )
    assert_equals_tiktoken("cl100k", rows, want)


SEGMENTS = [
    b"abcdefghij" * 7,
    b" " * 70,
    b"1234567890" * 3,
    b" \n \n\t  \r\n ",
    "日本語のテキスト".encode(),
    "🎉👩‍👩‍👧".encode(),
    b"'s'll'VE",
    b"Hello World",
    b"\xf0\x9f\x8e",
    b"\xff\xfe",
]


@pytest.mark.parametrize("max_len", [TILE + 1, 6000, 8192])
def test_few_rows_of_a_few_kib_take_the_tiles(max_len, prose):
    """Up to kFewRows (16) rows wider than a tile go through the tile pipeline below 8 KiB too
    (one block per row would leave the GPU idle and merge a piece of several KiB in one block);
    17 rows keep one block per row (the workspace says which). Both equal the CPU and tiktoken,
    huge pieces (spans) included."""
    tiled = native.workspace_bytes(16, max_len, 1, 0) // 16
    assert tiled > native.workspace_bytes(17, max_len, 1, 0) // 17
    rng = random.Random(max_len)
    kinds = sorted(testing.ADVERSARIAL)
    rows = [cut(prose, 977 * k, max_len - k) for k in range(4)]
    rows += [
        cut(testing.ADVERSARIAL[kinds[k % len(kinds)]](rng, max_len), 0, max_len - 3 * k) for k in range(13)
    ]
    tok = load_tokenizer("cl100k", "tiktoken")
    for batch in (rows[:1], rows[:16], rows):
        want = assert_gpu_equals_cpu(tok, batch, max_len=max_len, block_sizes=(256, 1024))
        assert_equals_tiktoken("cl100k", batch, want)


def test_pieces_crossing_tile_boundaries(prose):
    """Each segment placed so that it starts at every offset from 40 bytes before a tile
    boundary to 40 after it (the first and the second boundary)."""
    rows = []
    for seg in SEGMENTS:
        for boundary in (TILE, 2 * TILE):
            for d in range(-40, 41, 3):
                before = cut(prose, boundary + d, boundary + d)
                before = before + b"x" * (boundary + d - len(before))
                rows.append(before + seg + cut(prose, 999, 3000))
    assert_gpu_equals_cpu(load_tokenizer("o200k", "tiktoken"), rows, max_len=12288, block_sizes=(256, 512))


def test_specials_straddling_tile_boundaries(prose):
    tok = load_tokenizer("cl100k", "tiktoken")
    eot = b"<|endoftext|>"
    rows = []
    for boundary in (TILE, 3 * TILE):
        for d in range(-len(eot) - 2, 3):
            head = cut(prose, 0, boundary + d)
            head = head + b"y" * (boundary + d - len(head))
            rows.append(head + eot + b"<|fim_prefix|>" + cut(prose, 5000, 2000))
    rows.append((eot + b"a") * 1000)  # a match in every tile, all accepted
    rows.append(eot * 1000)
    rows.append(b"<|endoftext|" * 1000)  # near misses
    want = assert_gpu_equals_cpu(tok, rows, max_len=16384, allowed_special="all")
    assert_equals_tiktoken("cl100k", rows, want, allowed=tok.vocab.special_tokens)
    # not allowed: the same text is ordinary text
    want = assert_gpu_equals_cpu(tok, rows, max_len=16384, allowed_special="none", block_sizes=(256,))
    assert_equals_tiktoken("cl100k", rows, want)


def test_overlapping_specials_accept_leftmost_first():
    """Specials whose matches overlap in chains ('@#@' in '@#@#@#...'): which ones count
    depends on every earlier one, across tiles (the acceptance entering a tile at another
    offset than the tile's own walk never meets it again)."""
    import tiktoken.load

    path = vocab_path("cl100k")
    ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    base = load_tokenizer("cl100k", "tiktoken")
    specials = {"@#@": 100300, "#@#@#": 100301, "<|endoftext|>": 100257}
    enc = tiktoken.Encoding(
        "overlap", pat_str=base.vocab.pattern, mergeable_ranks=ranks, special_tokens=specials
    )
    tok = bb.Tokenizer.from_tiktoken(enc)
    rows = []
    for shift in range(0, 7):
        rows.append(b"z" * shift + b"@#" * 9000)
        rows.append(b"q" * (TILE - shift) + b"#@#@#@#@#@" * 900 + b"@#@")
    want = assert_gpu_equals_cpu(tok, rows, max_len=20480, allowed_special="all")
    for k, row in enumerate(rows):
        ref = enc.encode(row.decode(), allowed_special="all")
        assert want[1][k] == len(ref) and want[0][k, : len(ref)].tolist() == ref, k


def test_llama3_many_specials(prose):
    tok = load_tokenizer("llama3", "json")
    specials = sorted(tok.vocab.special_tokens)
    rng = random.Random(3)
    rows = []
    for n in (9000, 30000):
        parts, size = [], 0
        while size < n:
            part = (
                rng.choice(specials).encode()
                if rng.random() < 0.2
                else cut(prose, rng.randrange(10**6), rng.randrange(1, 700))
            )
            parts.append(part)
            size += len(part)
        rows.append(b"".join(parts))
    assert_gpu_equals_cpu(tok, rows, max_len=32768, allowed_special="all")


def test_counts_over_capacity_and_padding(prose):
    tok = load_tokenizer("cl100k", "tiktoken")
    rows = [cut(prose, 100 * k, n) for k, n in enumerate([10000, 30000, 0, 5000, 30000])]
    for max_tokens in (1, 100, 2500, 20000):
        want = assert_gpu_equals_cpu(
            tok, rows, max_len=32768, max_tokens=max_tokens, block_sizes=(256,), pad_id=123
        )
        assert want[1][1] > 2500


def test_bad_lengths_without_the_host_check(prose):
    tok = load_tokenizer("cl100k", "tiktoken")
    rows = [cut(prose, 0, 9000), cut(prose, 500, 12000), b"", cut(prose, 50, 100)]
    lengths = [9000, -3, 0, 16385]
    got = run(
        tok,
        rows,
        device=gpu_devices()[0],
        max_len=16384,
        max_tokens=4000,
        check_lengths=False,
        lengths=lengths,
    )
    want = run(tok, rows[:1], device=cpu(), max_len=16384, max_tokens=4000)
    assert got[1].tolist()[1:] == [-1, 0, -1]
    assert got[1][0] == want[1][0] and np.array_equal(got[0][0], want[0][0])
    assert (got[0][1:] == -7).all()


@pytest.fixture(scope="module")
def nfc_tok():
    """llama3's vocabulary with an NFC normalizer (a one-stage pre-tokenizer)."""
    from tokenizers import Tokenizer

    path = vocab_path("llama3", "json")  # (skips where the file is absent)
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = {"type": "NFC"}
    tok = bb.Tokenizer.from_hf(Tokenizer.from_str(json.dumps(doc)))
    assert tok.tables(device=cpu()).nfc and tok.tables(device=cpu()).exact_stages == 1
    return tok


def test_nfc_on_long_rows(nfc_tok, prose):
    """Rows not in NFC are normalized by the executors (ffi/pretok/nfc_normalize.h) before the
    tiles: the ids of the NFC row beside each."""
    body = cut(prose, 0, 20000)
    rows = [body]
    for at in (0, TILE - 1, TILE, 2 * TILE + 1, len(body) - 2):
        rows.append(body[:at] + "e\u0301".encode() + body[at:])  # not NFC
        rows.append(body[:at] + "\u00e9".encode() + body[at:])  # NFC
    # (no specials: with them the CUDA pre-pass reports the rows it would rewrite)
    want = assert_gpu_equals_cpu(
        nfc_tok, rows, max_len=20480, allowed_special="none", block_sizes=(256, 1024)
    )
    assert (want[1] > 0).all()
    assert np.array_equal(want[0][1::2], want[0][2::2]) and np.array_equal(want[1][1::2], want[1][2::2])
