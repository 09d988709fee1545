"""The `encode` primitive: an XLA FFI call with one target per backend.

The native modules register their FFI handlers under one target name at import (native.py),
so the same `encode` call runs on CPU and GPU, eagerly or under `jax.jit`. Vocabulary tables
are operands (`EncodeTables`, device arrays built by whoever owns the vocabulary), never
attributes: attributes are hashed into the HLO. This module knows tables, not tokenizers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .. import native
from ..native import HAS_CUDA_MODULE  # noqa: F401 (part of this module's interface)

BLOCK_SIZES = (256, 512, 1024)
BYTES_MODE_STAGES = 0  # pretok_stages of bytes mode: no pre-tokenizer


@dataclasses.dataclass(frozen=True)
class EncodeTables:
    """A tokenizer's device tables for one set of allowed specials: a pytree.

    Pass it to a jitted function as an argument (`jax.jit(f)(data, lengths, tok.tables())`):
    a Tokenizer closed over by a jitted function gets its tables embedded in the program as
    constants (tens of MB of HLO, slow compiles); arguments are not copied.
    """

    pair_table: jax.Array
    byte_ids: jax.Array
    piece_table: jax.Array
    token_offsets: jax.Array
    token_data: jax.Array
    special_offsets: jax.Array
    special_data: jax.Array
    special_ids: jax.Array
    special_starts: jax.Array  # where the specials can start (ffi/core/special_tokens.h, SpecialStarts)
    pretok: jax.Array  # the pre-tokenizer's tables (uint8, ffi/pretok/tables.h)
    nfc_pairs: jax.Array  # NFC composition pairs int32[K, 2] (a stand-in row without NFC)
    char_table: jax.Array  # SentencePiece BPE's character tables (ffi/core/char_symbols.h)
    miss_cache: jax.Array  # the GPU kernels' cache of merged pieces (ffi/cuda/miss_cache.cuh)
    name: str
    exact_stages: int  # pre-tokenizer stages in `pretok` for mode="exact", or -1
    symbols: int  # 0: byte-level BPE; 1: SentencePiece BPE (merges over characters)
    char_runs: tuple  # its run rule's (T, P, W) attributes (ffi/core/char_symbols.h)
    nfc: bool  # exact mode checks that the text is in NFC (its normalizer)
    lowercase: bool  # exact mode lowercases the text (its normalizer has Lowercase)
    exact_error: str | None  # why exact mode is unavailable, if it is
    max_piece_len: int  # 0 disables the whole-piece shortcut
    rank_is_id: bool  # every pair's rank is its merged id (saves a probe per merge)
    specials: tuple  # the allowed special tokens

    def operands(self) -> tuple:
        return tuple(getattr(self, name) for name in TABLE_OPERANDS)


_META_FIELDS = (
    "name",
    "exact_stages",
    "symbols",
    "char_runs",
    "nfc",
    "lowercase",
    "exact_error",
    "max_piece_len",
    "rank_is_id",
    "specials",
)
# The encode call's operands after the batch's: EncodeTables' arrays, in their order, which is
# the native list's (ffi/binding/table_operands.h, BBPE_TABLE_OPERANDS).
TABLE_OPERANDS = tuple(f.name for f in dataclasses.fields(EncodeTables) if f.name not in _META_FIELDS)
if TABLE_OPERANDS != tuple(native.cpu.table_operands):
    raise ImportError(
        f"blockbpe_jax.ops.primitive: EncodeTables' arrays {TABLE_OPERANDS} are not the native module's table "
        f"operands {tuple(native.cpu.table_operands)}: rebuild it"
    )
jax.tree_util.register_dataclass(
    EncodeTables, data_fields=list(TABLE_OPERANDS), meta_fields=list(_META_FIELDS)
)


class TableSource(Protocol):
    """What `encode` accepts besides EncodeTables: an object that builds them (a Tokenizer)."""

    def tables(self, allowed_special, device) -> EncodeTables: ...


# Encoded.flat_numpy: padded ids of at least this many bytes are compacted on the device (a
# copy of the rows' ids alone, for an executable per batch shape); smaller ones cross whole.
FLAT_ON_DEVICE_BYTES = 1 << 22


class Encoded(NamedTuple):
    """Padded ids and the true token count of each string.

    `counts[b] > ids.shape[1]` means string b was truncated to `ids.shape[1]` tokens; a count
    of -1 (only from `check_lengths=False`) means its length was outside [0, max_len]; -2
    (tokenizers whose normalizer is NFC or has Lowercase, exact mode) means the string may not be
    in NFC or has a code point whose lowercase the device does not write in place, and was not
    tokenized: normalize it first (`Tokenizer.normalize`; `encode_batch` does).
    """

    ids: jax.Array
    counts: jax.Array

    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts) as NumPy arrays, waiting for them. On a CUDA GPU one pinned copy per
        array (staging.read_back), several times quicker than np.asarray for short strings."""
        from ..staging import read_back

        ids, counts = read_back([self.ids, self.counts])
        return ids, counts

    def flat_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts) as NumPy arrays with the ids flat: int32[sum(kept)], row b's
        kept[b] = clip(counts[b], 0, T) ids back to back, from sum(kept[:b]). Large batches
        (padded ids of FLAT_ON_DEVICE_BYTES or more) are compacted on the device first
        (`flat_ids`: an executable per shape), so that only their ids cross to the
        host, not the padding: for rows a quarter full, a quarter of `numpy()`'s copy; smaller
        ones are copied whole and compacted here. Waits for them. `ids` must be [B, T]."""
        from ..staging import read_back
        from .flat_ids import flat_ids, flat_rows

        if np.ndim(self.ids) != 2 or np.ndim(self.counts) != 1:
            raise ValueError(
                f"flat_numpy: ids must be [B, T] with counts [B], got {list(np.shape(self.ids))}"
            )
        if not isinstance(self.ids, jax.Array) or np.size(self.ids) * 4 < FLAT_ON_DEVICE_BYTES:
            ids, counts = read_back([self.ids, self.counts])
            return flat_rows(ids, counts), counts
        (counts,) = read_back([self.counts])
        total = int(np.clip(counts, 0, self.ids.shape[1]).sum())
        if total == 0:
            return np.zeros(0, self.ids.dtype), counts
        size = max(1024, 1 << (total - 1).bit_length())  # (a few sizes: a few executables)
        (ids,) = read_back([flat_ids(self.ids, self.counts, size=size)], [total])
        return ids, counts


# Bounded: max_tokens and pad_id are the caller's (a function per value, each holding its
# executables); the last 256 kept, far more than a program's few shapes.
@functools.lru_cache(maxsize=256)
def _encode_call(
    pretok_stages: int,
    symbols: int,
    char_runs: tuple,
    normalizer: int,
    pad_id: int,
    max_piece_len: int,
    rank_is_id: bool,
    block_size: int,
    max_tokens: int,
    checked: bool,
):
    """A vmappable function (data, lengths, *tables) -> (ids, counts) for fixed attributes."""
    target = "bbpe_encode" if checked else "bbpe_encode_unchecked"

    @jax.custom_batching.custom_vmap
    def call(data, lengths, *tables):
        batch, max_len = data.shape

        def ffi(workspace_bytes):
            out_types = (
                jax.ShapeDtypeStruct((batch, max_tokens), jnp.int32),
                jax.ShapeDtypeStruct((batch,), jnp.int32),
                jax.ShapeDtypeStruct((workspace_bytes,), jnp.uint8),
            )
            attributes = _ffi_attributes(
                (pretok_stages, symbols, char_runs, normalizer, pad_id, max_piece_len, rank_is_id), block_size
            )
            ids, counts, _ = jax.ffi.ffi_call(target, out_types)(data, lengths, *tables, **attributes)
            return ids, counts

        # The CUDA kernel's arrays that do not fit in shared memory come as an extra, discarded
        # output, so that XLA allocates them (no allocation in the handler), with room for the
        # NFC pre-pass's where the call may normalize NFC (its normalizer's NFC bit, untrusted).
        # Only the CUDA kernel uses this workspace: the CPU handler gets a one-byte stand-in.
        nfc = (normalizer & 5) == 1  # kNormNfc without kNormTrusted (ffi/pretok/tables.h)
        return jax.lax.platform_dependent(
            cpu=lambda: ffi(1),
            default=lambda: ffi(native.workspace_bytes(batch, max_len, pretok_stages, symbols, nfc)),
        )

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, data, lengths, *tables):
        # Fold the vmapped axis into the batch: one launch, tables shared by every lane.
        if any(in_batched[2:]):
            raise ValueError("encode: the vocabulary tables cannot be vmapped over")
        data_b, lengths_b = in_batched[:2]
        if not data_b:
            data = jnp.broadcast_to(data, (axis_size, *data.shape))
        if not lengths_b:
            lengths = jnp.broadcast_to(lengths, (axis_size, *lengths.shape))
        lanes, batch, max_len = data.shape
        ids, counts = call(data.reshape(lanes * batch, max_len), lengths.reshape(lanes * batch), *tables)
        return (ids.reshape(lanes, batch, max_tokens), counts.reshape(lanes, batch)), (True, True)

    # jit: eager calls then hit a compilation cache (a bare platform_dependent, re-traced per
    # eager call, compiled a new executable every time: 1.6 MiB and milliseconds per call).
    return jax.jit(call)


def resolve_mode(tables: EncodeTables, mode: str) -> int:
    """The pretok_stages attribute: mode="exact" -> the pre-tokenizer's stages (or raises),
    "bytes" -> 0."""
    if mode not in ("exact", "bytes"):
        raise ValueError(f"mode must be 'exact' or 'bytes', got {mode!r}")
    if tables.symbols:
        if mode == "bytes":
            raise ValueError(
                f"mode='bytes' is byte-level BPE without a pre-tokenizer; "
                f"{tables.name} is a SentencePiece BPE model (merges over "
                f"characters): use mode='exact'"
            )
        return BYTES_MODE_STAGES
    if mode == "bytes":
        return BYTES_MODE_STAGES
    if tables.exact_stages < 0:
        raise ValueError(
            f"exact mode is not supported for {tables.name}: {tables.exact_error}. "
            f"Use mode='bytes' for byte-level BPE without a pre-tokenizer."
        )
    return tables.exact_stages


def encode(
    data,
    lengths,
    tokenizer: TableSource | EncodeTables,
    *,
    max_tokens: int,
    pad_id: int = 0,
    allowed_special=None,
    mode: str = "exact",
    block_size: int = 256,
    check_lengths: bool = True,
    assume_nfc: bool = False,
    assume_normalized: bool = False,
) -> Encoded:
    """Tokenizes a batch of byte strings on the device that holds `data` (NumPy inputs: JAX's
    default device; they travel with the call, which is cheaper than a separate device_put).

    Args:
      data: uint8[B, L] bytes, string b in data[b, :lengths[b]] (the rest is ignored).
      lengths: int32[B] byte lengths, each in [0, L].
      tokenizer: a `Tokenizer`, or its `EncodeTables` (`tok.tables(...)`, a pytree: pass that
        as an argument of jitted functions so the tables are not embedded as constants).
      max_tokens: static width T of the output.
      pad_id: written after each string's tokens.
      allowed_special: "all", "none" (default) or a collection of special-token strings that
        are recognised in the text (like tiktoken's `allowed_special`); other specials' text is
        tokenized as ordinary text (tiktoken's `encode_ordinary` when "none"). With
        EncodeTables they are fixed by the tables (`tok.tables(allowed_special)`).
      mode: "exact" (ids equal to tiktoken / HF with the vocabulary's pre-tokenizer) or "bytes"
        (the BlockBPE paper: no pre-tokenizer, merges run over the whole text between specials).
      block_size: CUDA threads per string (256, 512 or 1024); ignored on CPU.
      check_lengths: on GPU, copy `lengths` back to validate them (one small sync; NumPy
        lengths are validated on the host instead, with no copy back); with False
        the call launches without a host sync and a bad row gets count -1 (XLA does not
        capture either in a CUDA graph). A bad
        device length raises jax.errors.JaxRuntimeError ("INVALID_ARGUMENT: ..."); jax's C++
        fast dispatch path (a repeated call with the same signature) surfaces the same message
        as a ValueError.
      assume_nfc: for tokenizers whose normalizer is NFC: the caller has normalized the text
        (`Tokenizer.normalize`; `encode_batch` does), so the device's check that reports a
        string not in NFC with count -2 is skipped.
      assume_normalized: the same for any normalizer (NFC, Lowercase or both, in its order): the
        text is the normalizer's output, so it is neither checked nor lowercased on the device.
        Without it, a Lowercase tokenizer's text is lowercased on the device, and a string with a
        code point whose lowercase changes its UTF-8 length (U+0130, U+2126, ...: 27 in all) gets
        count -2.

    Returns:
      Encoded(ids int32[B, T], counts int32[B]); counts are the full token counts, so
      counts > T flags truncation.
    """
    if np.ndim(data) != 2:
        raise TypeError(
            f"encode: data must be uint8[batch, max_len], got "
            f"{getattr(data, 'dtype', type(data).__name__)}{list(np.shape(data))}"
        )
    checked_here = isinstance(lengths, np.ndarray) and lengths.ndim == 1
    if checked_here:
        # Host lengths are checked here, so the handler need not read them back; device ones
        # by the handler (check_lengths).
        bad = np.flatnonzero((lengths < 0) | (lengths > np.shape(data)[-1]))
        if bad.size:
            b = int(bad[0])
            raise ValueError(f"encode: lengths[{b}] = {int(lengths[b])} is outside [0, {np.shape(data)[-1]}]")
    # NumPy arrays go to the jitted call as they are: its dispatch moves them to the default
    # device with less overhead than a separate device_put (benchmarks/host_path.py).
    keep = (jax.Array, jax.core.Tracer, np.ndarray)
    data = data if isinstance(data, keep) else jnp.asarray(data)
    lengths = lengths if isinstance(lengths, keep) else jnp.asarray(lengths)
    if data.dtype != jnp.uint8 or data.ndim != 2:
        raise TypeError(f"encode: data must be uint8[batch, max_len], got {data.dtype}{list(data.shape)}")
    if lengths.dtype != jnp.int32 or lengths.shape != data.shape[:1]:
        raise TypeError(
            f"encode: lengths must be int32[{data.shape[0]}], got {lengths.dtype}{list(lengths.shape)}"
        )
    if (
        not isinstance(max_tokens, (int, np.integer))
        or isinstance(max_tokens, bool)
        or not 1 <= max_tokens < 2**31
    ):
        raise ValueError(f"encode: max_tokens must be a positive int below 2**31, got {max_tokens!r}")
    if not isinstance(pad_id, (int, np.integer)) or not -(2**31) <= pad_id < 2**31:
        raise ValueError(f"encode: pad_id must be an int32, got {pad_id!r}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"encode: block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
    if isinstance(tokenizer, EncodeTables):
        tables = tokenizer
        if allowed_special is not None:
            raise ValueError(
                "encode: EncodeTables fix the allowed specials; choose them with "
                "tok.tables(allowed_special=...) instead"
            )
    else:
        if not callable(getattr(tokenizer, "tables", None)):
            raise TypeError(
                f"encode: tokenizer must be a Tokenizer or its EncodeTables, got {type(tokenizer).__name__}"
            )
        # Tables go where the data is (a concrete single-device array); under a trace, to
        # JAX's default device.
        concrete = isinstance(data, jax.Array) and not isinstance(data, jax.core.Tracer)
        devices = data.devices() if concrete else ()
        device = next(iter(devices)) if len(devices) == 1 else None
        tables = tokenizer.tables("none" if allowed_special is None else allowed_special, device)
    call = _encode_call(
        *_attributes(tables, mode, pad_id, assume_nfc or assume_normalized),
        int(block_size),
        int(max_tokens),
        bool(check_lengths) and not checked_here,
    )
    ids, counts = call(data, lengths, *tables.operands())
    return Encoded(ids, counts)


def _ffi_attributes(attributes: tuple, block_size: int) -> dict:
    """The FFI call's attributes as keywords, from `_attributes`' tuple and the block size."""
    stages, symbols, runs, normalizer, pad_id, piece_len, rank_is_id = attributes
    return dict(
        pretok_stages=np.int32(stages),
        symbols=np.int32(symbols),
        run_long=np.int32(runs[0]),
        run_step=np.int32(runs[1]),
        run_width=np.int32(runs[2]),
        normalizer=np.int32(normalizer),
        pad_id=np.int32(pad_id),
        max_piece_len=np.int32(piece_len),
        rank_is_id=np.int32(rank_is_id),
        block_size=np.int32(block_size),
    )


def encode_window(
    data,
    table,
    raw,
    tables: EncodeTables,
    *,
    sep_id: int,
    workspace_bytes: int,
    mode: str,
    block_size: int,
    assume_nfc: bool,
):
    """Every encode call of one corpus-job window in one FFI call (ffi/binding/window_ffi.h),
    jittable: the calls' plan is set beforehand under data's address and `sep_id`
    (`set_window_plan`); each call's rows come from data (uint8[N]) by the document table
    (int32[2, E]: start, length) and its ids and counts (or separator slots) go into raw
    (int32[R], returned with them: pass it donated). workspace_bytes: the largest call's
    scratch on a GPU (`native.cpu.window_scratch_bytes`), 1 on the CPU."""
    attributes = _ffi_attributes(_attributes(tables, mode, 0, assume_nfc), block_size)
    operands = tables.operands()
    out_types = (
        jax.ShapeDtypeStruct(raw.shape, jnp.int32),
        jax.ShapeDtypeStruct((workspace_bytes,), jnp.uint8),
    )
    call = jax.ffi.ffi_call("bbpe_encode_window", out_types, input_output_aliases={2: 0})
    raw, _ = call(data, table, raw, *operands, **attributes, sep_id=np.int32(sep_id))
    return raw


def window_stages(tables: EncodeTables, mode: str) -> tuple[int, int]:
    """(pretok_stages, symbols) of encode_window's calls: what sizes their scratch."""
    return resolve_mode(tables, mode), tables.symbols


def _attributes(tables: EncodeTables, mode: str, pad_id: int, trusted: bool) -> tuple:
    """The FFI call's attributes but block_size (ffi/binding/encode_ffi.h): pretok_stages,
    symbols, char_runs, normalizer, pad_id, max_piece_len, rank_is_id. trusted: the text is
    the normalizer's output (assume_nfc / assume_normalized)."""
    # normalizer attribute (ffi/pretok/tables.h, NormalizerAttr): which tables, and trusted
    normalizer = (1 if tables.nfc else 0) | (2 if tables.lowercase else 0)
    if normalizer and trusted:
        normalizer |= 4
    return (
        resolve_mode(tables, mode),
        tables.symbols,
        tables.char_runs,
        normalizer,
        int(pad_id),
        tables.max_piece_len,
        bool(tables.rank_is_id),
    )


def host_encoder(tables: EncodeTables, *, mode: str = "exact", assume_normalized: bool = False):
    """`encode` on the host without XLA (a jitted call costs tens of microseconds, more than
    encoding a short string): the CPU executor's encode with `tables` (host tables,
    `tok.tables(..., host=True)`) bound once. Returns a `native.cpu.HostEncoder` whose
    `.encode(list[str | bytes])` gives list[list[int]] (the ids of `encode` without padding or
    truncation; the GIL released, strings split over host threads). Bad tables: ValueError."""
    stages, symbols, runs, normalizer, _pad, piece_len, rank_is_id = _attributes(
        tables, mode, 0, assume_normalized
    )
    return native.cpu.HostEncoder(
        *tables.operands(),
        pretok_stages=stages,
        symbols=symbols,
        run_long=runs[0],
        run_step=runs[1],
        run_width=runs[2],
        normalizer=normalizer,
        max_piece_len=piece_len,
        rank_is_id=int(rank_is_id),
    )
