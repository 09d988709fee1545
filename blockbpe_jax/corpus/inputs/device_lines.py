"""A block of lines split into documents where the block lives (on the GPU: no host round trip
between reading and encoding): the jittable primitive `split_lines` (the FFI target
bbpe_split_lines; ffi/core/json_lines.h), and `split_block` / `block_documents`, its host-side
use on one block with today's Python path where it gives up.

The split takes what the host reader (ffi/core/jsonl.h, `native.cpu.split_documents`) takes,
with the same rules (ffi/core/json_rules.h), and lays out the same result: the documents back
to back, each followed by the separator, int32 offsets[docs + 1] and each document's line
(counted from the block's first). Where it gives up (a line the rules cannot decide as
json.loads would: invalid JSON or UTF-8, a missing or non-string field, ...), the status names
the first such line, and the host reads that block again as it does where its own reader gives
up (corpus.inputs.lines: fast_block, then line by line), which takes it or raises today's
one-line file:line error."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ... import native
from .lines import fast_block, line_documents

# status int32[6] (ffi/core/json_lines.h, StatusSlot)
CODE, DOCS, BYTES, NEWLINES, BAD_LINE, LINES = range(6)
STATUS_SLOTS = 6
# status[CODE] (SplitCode)
OK, GIVE_UP, TOO_MANY_LINES, TOO_MANY_BYTES = range(4)
MAX_FIELD_BYTES = 256  # longer field names and separators: the host reader's (kMaxFieldBytes)
MAX_SEP_BYTES = 64


def device_field(field: str | None) -> bool:
    """Whether the device split can take the field's name: UTF-8 (no lone surrogate) of at most
    MAX_FIELD_BYTES bytes."""
    try:
        return field is None or len(field.encode("utf-8")) <= MAX_FIELD_BYTES
    except UnicodeEncodeError:
        return False


def split_lines(block, size, *, field: str | None, sep: bytes = b"", max_lines: int, max_bytes: int):
    """The documents of block[:size] (a block of whole lines), split where `block` lives.

    Args:
        block: uint8[N], the block's bytes (a device array for the GPU's split).
        size: int32[], the bytes of `block` used (more than N is taken as N).
        field: the JSONL field whose string each line holds; None: plain lines (one trailing
            '\\r' dropped, empty lines skipped, valid UTF-8).
        sep: the bytes written after each document (at most MAX_SEP_BYTES).
        max_lines: the documents' capacity (and the block's newlines').
        max_bytes: the data's capacity, separators included.

    Returns:
        (data uint8[max_bytes], offsets int32[max_lines + 1], lines int32[max_lines],
        status int32[6]). Where status[CODE] is OK, document d is
        data[offsets[d] : offsets[d + 1] - len(sep)] from line lines[d] (0: the block's first),
        for d < status[DOCS]; else GIVE_UP (status[BAD_LINE]: the first line the rules give up
        on), TOO_MANY_LINES or TOO_MANY_BYTES, and the other results mean nothing.
    """
    if not device_field(field):
        raise ValueError(f"split_lines: the field name must be UTF-8 of at most {MAX_FIELD_BYTES} bytes")
    if len(sep) > MAX_SEP_BYTES:
        raise ValueError(f"split_lines: sep holds at most {MAX_SEP_BYTES} bytes, got {len(sep)}")
    if max_lines < 0 or max_bytes < 0:
        raise ValueError("split_lines: max_lines and max_bytes must be >= 0")
    words = int(native.cpu.split_lines_workspace_words(block.shape[0], max_lines))
    out_types = (
        jax.ShapeDtypeStruct((max_bytes,), jnp.uint8),
        jax.ShapeDtypeStruct((max_lines + 1,), jnp.int32),
        jax.ShapeDtypeStruct((max_lines,), jnp.int32),
        jax.ShapeDtypeStruct((STATUS_SLOTS,), jnp.int32),
        jax.ShapeDtypeStruct((words,), jnp.int32),  # the GPU's per-tile and per-line arrays
    )
    data, offsets, lines, status, _ = jax.ffi.ffi_call("bbpe_split_lines", out_types)(
        block,
        jnp.asarray(size, jnp.int32),
        json=np.int32(field is not None),
        field=field or "",
        sep=np.frombuffer(bytes(sep) + b"\0", np.uint8),  # (an attribute array is never empty)
    )
    return data, offsets, lines, status


@functools.lru_cache(maxsize=64)
def split_lines_jit(field: str | None, sep: bytes, max_lines: int, max_bytes: int):
    """split_lines jitted for these static arguments: a function (block, size) -> its results."""
    return jax.jit(
        functools.partial(split_lines, field=field, sep=sep, max_lines=max_lines, max_bytes=max_bytes)
    )


def _bucket(n: int) -> int:
    """n rounded up to a power of two (at least 64): a few shapes, a few executables."""
    return max(64, 1 << max(0, int(n) - 1).bit_length())


def split_block(block, field: str | None, sep: bytes = b"", device=None):
    """One host block split on `device` (default: JAX's default device), as the host reader
    (`native.cpu.split_documents`) gives it.

    Args:
        block: bytes or uint8 array of whole lines.
        field: the JSONL field, or None for plain lines.
        sep: the separator after each document.
        device: a jax.Device to split on.

    Returns:
        (data uint8[bytes], offsets int64[docs + 1], lines int64[docs], newlines), or None
        where the split gives up (the caller reads the block on the host, as where the host
        reader gives up).
    """
    host = np.frombuffer(block, np.uint8) if isinstance(block, (bytes, bytearray, memoryview)) else block
    newlines = int(np.count_nonzero(host == ord("\n")))
    max_lines = _bucket(newlines + 1)
    max_bytes = _bucket(len(host) + (newlines + 1) * len(sep))
    padded = np.zeros(_bucket(len(host)), np.uint8)
    padded[: len(host)] = host
    device = device or jax.devices()[0]
    data, offsets, lines, status = split_lines_jit(field, bytes(sep), max_lines, max_bytes)(
        jax.device_put(padded, device), jax.device_put(np.int32(len(host)), device)
    )
    status = np.asarray(status)
    if status[CODE] == GIVE_UP:
        return None
    if status[CODE] != OK:  # (the capacities above hold every block)
        raise RuntimeError(f"split_lines: status {status.tolist()} on a block sized for it")
    docs = int(status[DOCS])
    return (
        np.asarray(data)[: status[BYTES]],
        np.asarray(offsets)[: docs + 1].astype(np.int64),
        np.asarray(lines)[:docs].astype(np.int64),
        int(status[NEWLINES]),
    )


def block_documents(block: bytes, path: Path, line_base: int, field: str | None, device=None):
    """The documents of one block of `path` (after `line_base` lines) split on the device, and
    where that gives up, read on the host as the corpus job reads a block its native reader
    gives up on: C-level calls (fast_block), else line by line, which raises the one-line
    file:line CorpusError of a bad input.

    Returns:
        (documents as bytes, their lines in the file, counted from 1).
    """
    split = split_block(block, field, b"", device) if device_field(field) else None
    if split is not None:
        data, offsets, kept, _ = split
        raw = data.tobytes()
        docs = [raw[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        return docs, kept + (line_base + 1)
    fast = fast_block(block, field)
    if fast is not None:
        blobs, kept = fast
        return blobs, kept + (line_base + 1)
    docs = list(line_documents(block.split(b"\n"), path, line_base, field))
    return [d for d, _ in docs], np.array([p for _, p in docs], np.int64)
