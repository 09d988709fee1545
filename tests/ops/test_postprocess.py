"""On-device decode, finalize (BOS/EOS, truncation and padding sides) and attention_mask."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.ops.postprocess import attention_mask, decode, finalize

from helpers import device_for, gpu_devices, load_tokenizer, vocab_path

ROUND_TRIP = [("cl100k", "tiktoken"), ("llama3", "tiktoken"), ("llama3", "json")]
CHUNK, MAX_LEN = 128, 8200  # fixed shapes: one compile per vocabulary
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "gpu", id="gpu", marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
    ),
]


@jax.jit
def _encode_decode(data, lengths, tables):
    enc = bb.encode(data, lengths, tables, max_tokens=MAX_LEN)
    return enc, decode(enc.ids, enc.counts, tables, max_bytes=MAX_LEN)


def _round_trip(tables, texts: list[bytes], device=None):
    """Encodes and decodes `texts` in fixed-shape chunks; returns (index, got) of failures."""
    bad = []
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start : start + CHUNK]
        data, lengths = bb.pack_strings(chunk + [b""] * (CHUNK - len(chunk)), max_len=MAX_LEN)
        enc, (out, n) = _encode_decode(jax.device_put(data, device), jax.device_put(lengths, device), tables)
        out, n = np.asarray(out), np.asarray(n)
        assert (np.asarray(enc.counts) <= MAX_LEN).all()
        np.testing.assert_array_equal(n, lengths)  # empty padding rows included
        np.testing.assert_array_equal(out[len(chunk) :], 0)
        for k, text in enumerate(chunk):
            if out[k, : n[k]].tobytes() != text or out[k, n[k] :].any():
                bad.append((start + k, out[k, : n[k]].tobytes()))
    return bad


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("name,fmt", ROUND_TRIP)
def test_decode_round_trips_every_corpus(name, fmt, kind, data_dir):
    device = device_for(kind)
    tables = load_tokenizer(name, fmt).tables(device=device)
    for seed, path in enumerate(testing.corpus_paths(data_dir)):
        texts = testing.excerpts(testing.read_corpus(path), 1, 8192, seed=200 + seed)
        bad = _round_trip(tables, texts, device)
        assert not bad, f"{path.name}: {len(bad)}/{len(texts)} rows differ, first #{bad[0][0]}"


@pytest.mark.parametrize("name", ["cl100k", "llama3"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decode_round_trips_text_with_specials(name, data, data_dir):
    tok = load_tokenizer(name, "tiktoken")
    texts = data.draw(st.lists(testing.mixed_text(tok.vocab.special_tokens), min_size=1, max_size=8))
    raw = [t.encode("utf-8") for t in texts]
    # mixed_text is at most 48 fragments (a Llama-3 special is ~30 bytes): 2048 always fits.
    enc = tok.encode_batch(raw + [b""] * (8 - len(raw)), max_len=2048, max_tokens=2048, allowed_special="all")
    out, n = jax.jit(decode, static_argnames="max_bytes")(
        enc.ids, enc.counts, tok.tables("all"), max_bytes=2048
    )
    assert [np.asarray(out)[k, : int(n[k])].tobytes() for k in range(8)] == raw + [b""] * (8 - len(raw))


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


def test_decode_equals_host_decode_on_random_ids(tok):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, tok.vocab.n_vocab, size=(16, 40)).astype(np.int32)
    specials = np.asarray(list(tok.vocab.special_tokens.values()), np.int32)
    ids[:, ::7] = rng.choice(specials, size=ids[:, ::7].shape)
    ok = np.asarray([tok.vocab.token_bytes[i] is not None for i in range(tok.vocab.n_vocab)])
    ids = np.where(ok[ids], ids, 100)  # no holes
    counts = rng.integers(0, 41, size=16).astype(np.int32)
    out, n = decode(ids, counts, tok, max_bytes=40 * 128)
    assert [np.asarray(out)[k, : int(n[k])].tobytes() for k in range(16)] == tok.decode_bytes(ids, counts)


def test_decode_truncation_errors_and_padding(tok):
    enc = tok.encode_batch(["hello world, hello world", "", "abc"], max_tokens=8, pad_id=-3)
    full = tok.decode_bytes(enc.ids, enc.counts)
    out, n = decode(enc.ids, enc.counts, tok, max_bytes=5)  # pad ids past counts are ignored
    np.testing.assert_array_equal(np.asarray(n), [len(b) for b in full])  # full byte lengths
    assert np.asarray(out)[0].tobytes() == full[0][:5]  # cut at max_bytes
    assert not np.asarray(out)[1:, 3:].any() and np.asarray(out)[2, :3].tobytes() == b"abc"
    # counts > T (encode truncated): the T ids present are decoded.
    short = tok.encode_batch(["hello world, hello world"], max_tokens=2)
    out, n = decode(short.ids, short.counts, tok, max_bytes=32)
    assert int(short.counts[0]) > 2 and np.asarray(out)[0, : int(n[0])].tobytes() == b"hello world"
    # Errors: an id outside [0, V), a hole, a negative count -> byte length -1, zero bytes.
    holes = [i for i, b in enumerate(tok.vocab.token_bytes) if b is None]
    ids = np.asarray([[15339, -1], [15339, tok.vocab.n_vocab], [15339, 0], [15339, 0]], np.int32)
    counts = np.asarray([2, 2, 1, -1], np.int32)
    if holes:
        ids[2, 1], counts[2] = holes[0], 2
    out, n = decode(ids, counts, tok, max_bytes=8)
    expect = [-1, -1, -1 if holes else 5, -1]
    np.testing.assert_array_equal(np.asarray(n), expect)
    assert not np.asarray(out)[np.asarray(expect) < 0].any()


def test_decode_under_vmap(tok):
    enc = tok.encode_batch(["one", "two three", "four five six"], max_tokens=8)
    stacked = jnp.stack([enc.ids, enc.ids[::-1]]), jnp.stack([enc.counts, enc.counts[::-1]])
    f = lambda i, c, t: decode(i, c, t, max_bytes=16)
    out, n = jax.jit(jax.vmap(f, in_axes=(0, 0, None)))(*stacked, tok.tables())
    ref_out, ref_n = f(*(a[1] for a in stacked), tok.tables())
    np.testing.assert_array_equal(np.asarray(out[1]), np.asarray(ref_out))
    np.testing.assert_array_equal(np.asarray(n[1]), np.asarray(ref_n))


# -- finalize / attention_mask ----------------------------------------------------------------


def _reference(full: list[int], width: int, *, max_length, bos, eos, pad_id, padding_side, truncation_side):
    """Plain Python: (row, count, mask) for a row whose full ids are `full`, of which the
    first `width` were kept by encode."""
    pre, suf = list(bos), list(eos)
    keep = max(0, min(len(full), max_length - len(pre) - len(suf)))
    lo = len(full) - keep if truncation_side == "left" else 0
    if keep and lo + keep > width:
        return [pad_id] * max_length, -1, [False] * max_length
    row = pre + full[lo : lo + keep] + suf
    padding = [pad_id] * (max_length - len(row))
    mask = [True] * len(row)
    if padding_side == "left":
        return padding + row, len(full) + len(pre) + len(suf), [False] * len(padding) + mask
    return row + padding, len(full) + len(pre) + len(suf), mask + [False] * len(padding)


def _check_finalize(rows: list[list[int]], width: int, **options):
    ids = np.full((len(rows), width), -9, np.int32)
    for k, r in enumerate(rows):
        ids[k, : min(len(r), width)] = r[:width]
    counts = np.asarray([len(r) for r in rows], np.int32)
    out = finalize(bb.Encoded(jnp.asarray(ids), jnp.asarray(counts)), **options)
    mask = attention_mask(out, padding_side=options["padding_side"])
    bos = (
        options["bos_id"]
        if isinstance(options["bos_id"], list)
        else [options["bos_id"]] * (options["bos_id"] is not None)
    )
    eos = (
        options["eos_id"]
        if isinstance(options["eos_id"], list)
        else [options["eos_id"]] * (options["eos_id"] is not None)
    )
    ref_options = dict(options, bos=bos, eos=eos)
    del ref_options["bos_id"], ref_options["eos_id"]
    got = np.asarray(out.ids).tolist(), np.asarray(out.counts).tolist(), np.asarray(mask).tolist()
    for k, r in enumerate(rows):
        assert (got[0][k], got[1][k], got[2][k]) == _reference(r, width, **ref_options), (k, r)
    return out


SIDES = st.sampled_from(["right", "left"])
SPECIAL = st.none() | st.integers(1000, 1010) | st.lists(st.integers(1000, 1010), max_size=2)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 999), max_size=10), min_size=4, max_size=4),
    max_length=st.sampled_from([4, 6, 9, 12]),
    bos=SPECIAL,
    eos=SPECIAL,
    padding_side=SIDES,
    truncation_side=SIDES,
)
def test_finalize_matches_reference(rows, max_length, bos, eos, padding_side, truncation_side):
    _check_finalize(
        rows,
        6,
        max_length=max_length,
        bos_id=bos,
        eos_id=eos,
        pad_id=-1,
        padding_side=padding_side,
        truncation_side=truncation_side,
    )


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("truncation_side", ["right", "left"])
def test_finalize_real_encodes_and_hf(padding_side, truncation_side, data_dir):
    """On llama3 encodes, against the reference and HF tokenizers' own padding/truncation."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tok = load_tokenizer("llama3", "json")
    bos, eos = tok.vocab.special_tokens["<|begin_of_text|>"], tok.vocab.special_tokens["<|end_of_text|>"]
    raw = testing.read_corpus(testing.corpus_paths(data_dir)[-1])
    texts = [t.decode("utf-8") for t in testing.excerpts(raw[:20000], 1, 120, seed=3)][:32]
    texts[5] = ""
    enc = tok.encode_batch(texts, max_len=256, max_tokens=256)
    rows = [np.asarray(enc.ids[k, : int(enc.counts[k])]).tolist() for k in range(len(texts))]
    options = dict(
        max_length=16,
        bos_id=bos,
        eos_id=eos,
        pad_id=7,
        padding_side=padding_side,
        truncation_side=truncation_side,
    )
    ours = _check_finalize(rows, 256, **options)
    jitted = jax.jit(lambda e: finalize(e, **options))(enc)
    np.testing.assert_array_equal(np.asarray(jitted.ids), np.asarray(ours.ids))

    hf = Tokenizer.from_file(str(vocab_path("llama3", "json")))
    hf.post_processor = TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>",
        special_tokens=[("<|begin_of_text|>", bos), ("<|end_of_text|>", eos)],
    )
    hf.enable_truncation(16, direction=truncation_side)
    hf.enable_padding(direction=padding_side, pad_id=7, length=16)
    ref = hf.encode_batch(texts)
    assert np.asarray(ours.ids).tolist() == [e.ids for e in ref]
    mask = attention_mask(ours.counts, 16, padding_side=padding_side)
    assert np.asarray(mask).astype(int).tolist() == [e.attention_mask for e in ref]


def test_finalize_flags_rows_it_cannot_build():
    enc = bb.Encoded(
        jnp.asarray([[1, 2, 3], [1, 2, 3], [4, 0, 0]], jnp.int32), jnp.asarray([5, 3, -1], jnp.int32)
    )  # row 0 was cut by encode
    left = finalize(enc, max_length=4, truncation_side="left")
    np.testing.assert_array_equal(np.asarray(left.counts), [-1, 3, -1])
    np.testing.assert_array_equal(np.asarray(left.ids), [[0] * 4, [1, 2, 3, 0], [0] * 4])
    right = finalize(enc, max_length=4, bos_id=9)  # first 3 ids fit: fine
    np.testing.assert_array_equal(np.asarray(right.ids[0]), [9, 1, 2, 3])
    assert int(right.counts[0]) == 6 and not np.asarray(attention_mask(right)[2]).any()
    with pytest.raises(ValueError):
        finalize(enc, max_length=1, bos_id=1, eos_id=2)
    with pytest.raises(ValueError):
        finalize(enc, max_length=4, padding_side="middle")
