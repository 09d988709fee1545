"""The encode primitive as a JAX citizen: jit, vmap, shapes, truncation, padding, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax.ops.primitive import TABLE_OPERANDS
from blockbpe_jax.tables.build import CHAR_TABLE_HEADER
from blockbpe_jax.tables.sets import MISS_CACHE_ROW_INTS

from helpers import BACKENDS, device_for, load_tokenizer, vocab_path

TEXTS = [
    "Hello world, this is BlockBPE.",
    "",
    "aaaaaaaaaaaaaaaaaaaaaaaaa",
    "  spaces   and\ttabs\n\n",
    "ünïcödé ✓ 日本語 🎉",
    "1234567890 numbers 3.14159",
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


def _packed(device):
    data, lengths = bb.pack_strings(TEXTS, max_len=64)
    return jax.device_put(data, device), jax.device_put(lengths, device)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_equals_eager_and_tiktoken(tok, backend):
    from blockbpe_jax import testing

    kind, bs = backend
    data, lengths = _packed(device_for(kind))
    eager = bb.encode(data, lengths, tok, max_tokens=64, mode="bytes", block_size=bs)
    jitted = jax.jit(lambda d, l: bb.encode(d, l, tok, max_tokens=64, mode="bytes", block_size=bs))(
        data, lengths
    )
    np.testing.assert_array_equal(np.asarray(eager.ids), np.asarray(jitted.ids))
    np.testing.assert_array_equal(np.asarray(eager.counts), np.asarray(jitted.counts))
    enc = testing.tiktoken_oracle("cl100k", tok, testing.BYTES_MODE_PATTERN)
    for k, text in enumerate(TEXTS):
        assert np.asarray(eager.ids)[k, : int(eager.counts[k])].tolist() == enc.encode_ordinary(text)
    assert eager.ids.devices() == {device_for(kind)}


def test_numpy_inputs_go_to_the_default_device(tok):
    # NumPy inputs ride along with the jitted call (no separate device_put): same ids, on
    # JAX's default device; Tokenizer.encode_batch takes this path off the GPU (on a GPU it
    # stages through pinned memory, tests/tokenizer/test_staging.py).
    data, lengths = bb.pack_strings(TEXTS, max_len=64)
    out = bb.encode(data, lengths, tok, max_tokens=64)
    ref = bb.encode(jax.device_put(data), jax.device_put(lengths), tok, max_tokens=64)
    np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(ref.ids))
    np.testing.assert_array_equal(np.asarray(out.counts), np.asarray(ref.counts))
    assert out.ids.devices() == {jax.devices()[0]}
    batch = tok.encode_batch(TEXTS, max_len=64)
    np.testing.assert_array_equal(np.asarray(batch.ids), np.asarray(ref.ids))


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_folds_lanes_into_the_batch(tok, backend):
    kind, bs = backend
    data, lengths = _packed(device_for(kind))
    stacked = jnp.stack([data, data[::-1]])
    stacked_len = jnp.stack([lengths, lengths[::-1]])
    f = lambda d, l: bb.encode(d, l, tok, max_tokens=32, mode="bytes", block_size=bs)
    out = jax.jit(jax.vmap(f))(stacked, stacked_len)
    assert out.ids.shape == (2, len(TEXTS), 32)
    for lane in range(2):
        ref = f(stacked[lane], stacked_len[lane])
        np.testing.assert_array_equal(np.asarray(out.ids[lane]), np.asarray(ref.ids))
        np.testing.assert_array_equal(np.asarray(out.counts[lane]), np.asarray(ref.counts))
    # Only the lengths batched: the data is broadcast to every lane.
    cut = jnp.stack([lengths, jnp.minimum(lengths, 5)])
    out = jax.vmap(f, in_axes=(None, 0))(data, cut)
    np.testing.assert_array_equal(np.asarray(out.ids[1]), np.asarray(f(data, jnp.minimum(lengths, 5)).ids))


def test_vmap_keeps_one_copy_of_the_tables(tok):
    data, lengths = _packed(jax.devices("cpu")[0])
    f = lambda d, l: bb.encode(d, l, tok, max_tokens=8, mode="bytes")
    hlo = jax.jit(jax.vmap(f)).lower(jnp.stack([data] * 4), jnp.stack([lengths] * 4)).as_text()
    pair_rows = tok.host_tables()[0].shape[0]
    assert f"tensor<{pair_rows}x4xi32>" in hlo  # the table is an operand once, as is
    assert f"tensor<4x{pair_rows}x4xi32>" not in hlo  # and never tiled per lane


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_padding_and_empty_strings(tok, backend):
    kind, bs = backend
    data, lengths = _packed(device_for(kind))
    full = bb.encode(data, lengths, tok, max_tokens=64, mode="bytes", block_size=bs)
    short = bb.encode(data, lengths, tok, max_tokens=3, pad_id=-7, mode="bytes", block_size=bs)
    counts = np.asarray(full.counts)
    np.testing.assert_array_equal(np.asarray(short.counts), counts)  # true counts, not clipped
    assert (counts > 3).any()  # so truncation is visible as counts > max_tokens
    for k in range(len(TEXTS)):
        n = min(3, counts[k])
        assert np.asarray(short.ids)[k, :n].tolist() == np.asarray(full.ids)[k, :n].tolist()
        assert (np.asarray(short.ids)[k, n:] == -7).all()
    assert counts[1] == 0 and (np.asarray(full.ids)[1] == 0).all()


def test_bad_inputs_raise_clear_errors(tok):
    data, lengths = _packed(jax.devices("cpu")[0])
    with pytest.raises(TypeError, match="uint8"):
        bb.encode(data.astype(jnp.int32), lengths, tok, max_tokens=8)
    with pytest.raises(TypeError, match="uint8"):
        bb.encode(data[0], lengths, tok, max_tokens=8)
    with pytest.raises(TypeError, match="int32"):
        bb.encode(data, lengths.astype(jnp.int64 if jax.config.x64_enabled else jnp.int16), tok, max_tokens=8)
    with pytest.raises(TypeError, match="lengths"):
        bb.encode(data, lengths[:2], tok, max_tokens=8)
    host_lengths = np.asarray(lengths).copy()
    host_lengths[0] = 65
    with pytest.raises(ValueError, match=r"lengths\[0\] = 65 is outside \[0, 64\]"):
        bb.encode(data, host_lengths, tok, max_tokens=8)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"lengths\[2\] = -1 is outside"):
        bb.encode(data, lengths.at[2].set(-1), tok, max_tokens=8).ids.block_until_ready()
    with pytest.raises(ValueError, match="max_tokens"):
        bb.encode(data, lengths, tok, max_tokens=0)
    with pytest.raises(ValueError, match="block_size"):
        bb.encode(data, lengths, tok, max_tokens=8, block_size=128)
    with pytest.raises(ValueError, match="mode"):
        bb.encode(data, lengths, tok, max_tokens=8, mode="regex")
    with pytest.raises(ValueError, match="not special tokens"):
        bb.encode(data, lengths, tok, max_tokens=8, allowed_special={"<|nope|>"})
    # Under jit the lengths are not known in Python: the handler itself refuses them.
    f = jax.jit(lambda d, l: bb.encode(d, l, tok, max_tokens=8, mode="bytes"))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT.*lengths\[3\] = 99"):
        f(data, lengths.at[3].set(99)).ids.block_until_ready()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_lengths_on_device(tok, backend):
    kind, bs = backend
    data, lengths = _packed(device_for(kind))
    bad = lengths.at[1].set(999)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT.*lengths\[1\] = 999"):
        bb.encode(data, bad, tok, max_tokens=8, block_size=bs).ids.block_until_ready()
    if kind == "gpu":  # unchecked: a fixed launch; the bad row is flagged, the others are right
        out = bb.encode(data, bad, tok, max_tokens=8, block_size=bs, check_lengths=False)
        good = bb.encode(data, lengths, tok, max_tokens=8, block_size=bs)
        counts = np.asarray(out.counts)
        assert counts[1] == -1 and (np.asarray(out.ids)[1] == 0).all()
        np.testing.assert_array_equal(np.delete(counts, 1), np.delete(np.asarray(good.counts), 1))


def test_handler_rejects_malformed_tables(tok):
    data, lengths = _packed(jax.devices("cpu")[0])
    tables = list(tok.host_tables())
    out = (
        jax.ShapeDtypeStruct((data.shape[0], 8), jnp.int32),
        jax.ShapeDtypeStruct((data.shape[0],), jnp.int32),
        jax.ShapeDtypeStruct((1,), jnp.uint8),
    )
    attrs = dict(
        pretok_stages=np.int32(0),
        symbols=np.int32(0),
        run_long=np.int32(0),
        run_step=np.int32(0),
        run_width=np.int32(0),
        normalizer=np.int32(0),
        pad_id=np.int32(0),
        max_piece_len=np.int32(0),
        rank_is_id=np.int32(1),
        block_size=np.int32(256),
    )
    call = lambda tabs: jax.ffi.ffi_call("bbpe_encode", out)(data, lengths, *tabs, **attrs)[
        0
    ].block_until_ready()
    call(tables)  # well-formed: fine

    def edit(tabs, name, array):  # the operands with one replaced
        at = TABLE_OPERANDS.index(name)
        return [*tabs[:at], array, *tabs[at + 1 :]]

    # a misses' cache (which the CPU ignores)
    call(edit(tables, "miss_cache", np.zeros((8, MISS_CACHE_ROW_INTS), np.int32)))
    for name, bad, message in [
        ("pair_table", np.zeros((0, 4), np.int32), "pair_table"),
        ("pair_table", np.zeros((3, 4), np.int32), "power of two"),
        ("byte_ids", np.zeros(10, np.int32), "byte_ids"),
        ("piece_table", tables[2].reshape(-1, 4), r"piece_table must be int32\[Q, 8\]"),
        ("token_offsets", np.zeros(1, np.int32), "empty"),
        ("special_starts", np.zeros(8, np.uint8), r"special_starts must be uint8\[\d+\]"),
        ("miss_cache", np.zeros((4, 8), np.int32), rf"miss_cache must be int32\[C, {MISS_CACHE_ROW_INTS}\]"),
        (
            "miss_cache",
            np.zeros((3, MISS_CACHE_ROW_INTS), np.int32),
            rf"miss_cache must be int32\[C, {MISS_CACHE_ROW_INTS}\] with C a power of two",
        ),
    ]:
        with pytest.raises(jax.errors.JaxRuntimeError, match=message):
            call(edit(tables, name, bad))
    # The pre-tokenizer operand must fit the layout of the stages named.
    exact = list(tok.host_tables())
    attrs["pretok_stages"] = np.int32(1)
    pretok = exact[TABLE_OPERANDS.index("pretok")]
    for op, stages in [(np.zeros(5, np.uint8), 1), (pretok, 2), (pretok, 9)]:
        attrs["pretok_stages"] = np.int32(stages)
        with pytest.raises(jax.errors.JaxRuntimeError, match="pre-tokenizer operand|pretok_stages"):
            call(edit(exact, "pretok", op))
    attrs["pretok_stages"] = np.int32(0)
    with pytest.raises(jax.errors.JaxRuntimeError, match="nfc_pairs must be int32"):
        call(edit(exact, "nfc_pairs", np.zeros(3, np.int32)))
    # Merges over characters (symbols=1) need the character tables' layout, and no pre-tokenizer.
    attrs["symbols"] = np.int32(1)
    H = CHAR_TABLE_HEADER
    for char_table in (
        exact[TABLE_OPERANDS.index("char_table")],
        np.zeros(H - 1, np.int32),
        np.full(H + 1, -1, np.int32),
    ):
        with pytest.raises(jax.errors.JaxRuntimeError, match=rf"char_table must be int32\[{H} \+ T \* W\]"):
            call(edit(exact, "char_table", char_table))
    call(edit(exact, "char_table", np.full(H, -1, np.int32)))  # a well-formed table without runs
    for long, step, width in ((3, 4, 2), (3, 0, 2), (3, 2, 0), (-1, 1, 1)):  # P > T, P = 0, W = 0
        attrs.update(run_long=np.int32(long), run_step=np.int32(step), run_width=np.int32(width))
        with pytest.raises(jax.errors.JaxRuntimeError, match="char_table must be"):
            call(edit(exact, "char_table", np.full(H + max(long * width, 0), -1, np.int32)))
    attrs.update(run_long=np.int32(3), run_step=np.int32(2), run_width=np.int32(2))
    call(edit(exact, "char_table", np.full(H + 6, -1, np.int32)))  # a well-formed run layout
    attrs.update(run_long=np.int32(0), run_step=np.int32(0), run_width=np.int32(0))
    attrs["pretok_stages"] = np.int32(1)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"symbols=1 \(characters\) takes pretok_stages=0"):
        call(edit(exact, "char_table", np.full(H, -1, np.int32)))
    attrs["symbols"] = np.int32(2)
    with pytest.raises(jax.errors.JaxRuntimeError, match="symbols must be 0"):
        call(tables)
    # The attributes are read by name: a missing, extra or mistyped one is named.
    attrs["symbols"] = np.int32(0)
    call(tables)
    for change, message in [
        (lambda a: a.pop("pad_id"), "9 attributes, expected 10"),
        (lambda a: a.update(sep_id=np.int32(0)), "11 attributes, expected 10"),
        (lambda a: (a.pop("pad_id"), a.update(pad=np.int32(0))), "attribute pad_id missing"),
        (lambda a: a.update(block_size=np.float32(256.5)), "attribute block_size missing or not an int32"),
    ]:
        broken_attrs = dict(attrs)
        change(broken_attrs)
        with pytest.raises(jax.errors.JaxRuntimeError, match=message):
            jax.ffi.ffi_call("bbpe_encode", out)(data, lengths, *tables, **broken_attrs)[
                0
            ].block_until_ready()


def test_tables_first_built_inside_jit_are_concrete(data_dir):
    import blockbpe_jax.tokenizer as tk

    fresh = tk.Tokenizer(load_tokenizer("r50k", "tiktoken").vocab)  # empty table cache
    data, lengths = _packed(jax.devices("cpu")[0])
    f = jax.jit(lambda d, l: bb.encode(d, l, fresh, max_tokens=16, mode="bytes"))
    first = f(data, lengths)
    later = bb.encode(data, lengths, fresh, max_tokens=16, mode="bytes")  # no leaked tracer
    np.testing.assert_array_equal(np.asarray(first.ids), np.asarray(later.ids))
    assert all(
        isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) for a in fresh.tables().operands()
    )


def test_tables_follow_the_data_device(tok):
    cpu = jax.devices("cpu")[0]
    data, lengths = _packed(cpu)
    out = bb.encode(data, lengths, tok, max_tokens=8, mode="bytes")
    assert out.ids.devices() == {cpu}
    ids, _ = tok.encode_batch(TEXTS, device=cpu, mode="bytes")
    assert ids.devices() == {cpu}


def test_loading_from_the_usual_places(data_dir, tmp_path, monkeypatch):
    import tiktoken
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(vocab_path("o200k", "json")))
    from_object = bb.Tokenizer.from_hf(hf)
    from_file = load_tokenizer("o200k", "json")
    assert from_object.vocab.token_bytes == from_file.vocab.token_bytes
    assert from_object.vocab.merges == from_file.vocab.merges
    text = "Hello wörld 12345 'll\n\n  x"
    ids, counts = from_object.encode_batch([text])
    assert np.asarray(ids)[0, : int(counts[0])].tolist() == hf.encode(text, add_special_tokens=False).ids
    # A tiktoken encoding name through tiktoken's offline cache (TIKTOKEN_CACHE_DIR).
    import hashlib
    import shutil

    src = data_dir / "vocab" / "tiktoken" / "r50k_base.tiktoken"
    blob_url = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
    shutil.copy(src, tmp_path / hashlib.sha1(blob_url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tiktoken.registry.ENCODINGS.pop("r50k_base", None)
    by_name = bb.Tokenizer.from_tiktoken_name("r50k_base")
    assert by_name.vocab.token_bytes == load_tokenizer("r50k", "tiktoken").vocab.token_bytes
