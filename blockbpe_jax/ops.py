"""The `encode` primitive: an XLA FFI call with one target per backend.

The nanobind modules (`_blockbpe_cpu`, and `_blockbpe_cuda` when it was built) hand their FFI
handlers to JAX at import; one target name serves both backends, so the same `encode` call runs
on CPU and GPU, eagerly or under `jax.jit`. Vocabulary tables are operands (device arrays owned
by the Tokenizer), never attributes: attributes are hashed into the HLO.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _blockbpe_cpu

try:  # the CUDA module exists only where nvcc was found at build time
    from . import _blockbpe_cuda
except ImportError:  # pragma: no cover - depends on the build
    _blockbpe_cuda = None

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

for _name, _capsule in _blockbpe_cpu.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
if _blockbpe_cuda is not None:
    for _name, _capsule in _blockbpe_cuda.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

HAS_CUDA_MODULE = _blockbpe_cuda is not None
SMEM_MAX_LEN = _blockbpe_cpu.smem_max_len
BLOCK_SIZES = (256, 512, 1024)
MODES = {"bytes": 0, "r50k": 1, "cl100k": 2, "o200k": 3, "llama3": 4}


class Encoded(NamedTuple):
    """Padded ids and the true token count of each string.

    `counts[b] > ids.shape[1]` means string b was truncated to `ids.shape[1]` tokens; a count
    of -1 (only from `check_lengths=False`) means its length was outside [0, max_len].
    """

    ids: jax.Array
    counts: jax.Array


def _workspace_bytes(batch: int, max_len: int) -> int:
    # Strings that do not fit in shared memory are tokenized in a global workspace, passed as
    # an extra (discarded) output so XLA allocates it: no allocation inside the handler.
    if max_len <= SMEM_MAX_LEN:
        return 1
    padded = (max(max_len, 1) + 15) // 16 * 16
    return batch * padded * _blockbpe_cpu.workspace_bytes_per_position


@functools.lru_cache(maxsize=None)
def _encode_call(mode: int, pad_id: int, max_piece_len: int, block_size: int, max_tokens: int,
                 checked: bool):
    """A vmappable function (data, lengths, *tables) -> (ids, counts) for fixed attributes."""
    target = "bbpe_encode" if checked else "bbpe_encode_unchecked"

    @jax.custom_batching.custom_vmap
    def call(data, lengths, *tables):
        batch, max_len = data.shape
        out_types = (
            jax.ShapeDtypeStruct((batch, max_tokens), jnp.int32),
            jax.ShapeDtypeStruct((batch,), jnp.int32),
            jax.ShapeDtypeStruct((_workspace_bytes(batch, max_len),), jnp.uint8),
        )
        ids, counts, _ = jax.ffi.ffi_call(target, out_types)(
            data, lengths, *tables, mode=np.int32(mode), pad_id=np.int32(pad_id),
            max_piece_len=np.int32(max_piece_len), block_size=np.int32(block_size))
        return ids, counts

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
        ids, counts = call(data.reshape(lanes * batch, max_len), lengths.reshape(lanes * batch),
                           *tables)
        return (ids.reshape(lanes, batch, max_tokens), counts.reshape(lanes, batch)), (True, True)

    return call


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def resolve_mode(tokenizer: "Tokenizer", mode: str) -> int:
    """Maps mode="exact" to the vocabulary's pattern id (or raises), "bytes" to 0."""
    if mode == "bytes":
        return MODES["bytes"]
    if mode != "exact":
        raise ValueError(f"mode must be 'exact' or 'bytes', got {mode!r}")
    vocab = tokenizer.vocab
    if vocab.unsupported:
        raise ValueError(f"exact mode is not supported for {vocab.source}: {vocab.unsupported}")
    if vocab.pattern_name not in MODES:
        raise ValueError(
            f"exact mode needs a known pre-tokenizer pattern (r50k, cl100k, o200k, llama3); "
            f"{vocab.source} has {vocab.pattern!r}. Use mode='bytes' for byte-level BPE.")
    return MODES[vocab.pattern_name]


def encode(data, lengths, tokenizer: "Tokenizer", *, max_tokens: int, pad_id: int = 0,
           allowed_special="none", mode: str = "exact", block_size: int = 256,
           check_lengths: bool = True) -> Encoded:
    """Tokenizes a batch of byte strings on the device that holds `data`.

    Args:
      data: uint8[B, L] bytes, string b in data[b, :lengths[b]] (the rest is ignored).
      lengths: int32[B] byte lengths, each in [0, L].
      tokenizer: a `Tokenizer` (vocabulary + cached device tables).
      max_tokens: static width T of the output.
      pad_id: written after each string's tokens.
      allowed_special: "all", "none" or a collection of special-token strings that are
        recognised in the text (like tiktoken's `allowed_special`); other specials' text is
        tokenized as ordinary text (tiktoken's `encode_ordinary` when "none").
      mode: "exact" (ids equal to tiktoken / HF with the vocabulary's pre-tokenizer) or "bytes"
        (the BlockBPE paper: no pre-tokenizer, merges run over the whole text between specials).
      block_size: CUDA threads per string (256, 512 or 1024); ignored on CPU.
      check_lengths: on GPU, copy `lengths` back to validate them (one small sync); with False
        the call is a fixed launch (CUDA-graph compatible) and a bad row gets count -1.

    Returns:
      Encoded(ids int32[B, T], counts int32[B]); counts are the full token counts, so
      counts > T flags truncation.
    """
    data = jnp.asarray(data) if not isinstance(data, (jax.Array, jax.core.Tracer)) else data
    lengths = jnp.asarray(lengths) if not isinstance(lengths, (jax.Array, jax.core.Tracer)) else lengths
    if data.dtype != jnp.uint8 or data.ndim != 2:
        raise TypeError(f"encode: data must be uint8[batch, max_len], got {data.dtype}{list(data.shape)}")
    if lengths.dtype != jnp.int32 or lengths.shape != data.shape[:1]:
        raise TypeError(f"encode: lengths must be int32[{data.shape[0]}], got "
                        f"{lengths.dtype}{list(lengths.shape)}")
    if not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
        raise ValueError(f"encode: max_tokens must be a positive int, got {max_tokens!r}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"encode: block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
    if _is_concrete(lengths):
        host = np.asarray(lengths)
        bad = np.flatnonzero((host < 0) | (host > data.shape[1]))
        if bad.size:
            b = int(bad[0])
            raise ValueError(f"encode: lengths[{b}] = {int(host[b])} is outside [0, {data.shape[1]}]")
    mode_id = resolve_mode(tokenizer, mode)
    tables = tokenizer.device_tables(allowed_special)
    max_piece_len = tokenizer.max_piece_len if tokenizer.vocab.whole_piece_shortcut else 0
    call = _encode_call(mode_id, int(pad_id), max_piece_len, int(block_size), int(max_tokens),
                        bool(check_lengths))
    ids, counts = call(data, lengths, *tables)
    return Encoded(ids, counts)
