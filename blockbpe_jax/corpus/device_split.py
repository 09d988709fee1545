"""The corpus job's blocks of lines split on the device (the option `device_split`, off by
default; BLOCKBPE_DEVICE_SPLIT=1 turns it on where the option is not given).

With it on, the reader (corpus.documents) does no byte work on a block of lines or JSONL: it
copies the block as read into one of the engine's page-locked slots (`WindowBuffers.flat_slot`),
one DMA takes it to the device, and `bbpe_split_lines` (corpus.inputs.device_lines;
ffi/core/json_lines.h) splits, checks and decodes it there into the documents, each followed by
the packing separator: what the host reader joins into the slot today. Only the status,
offsets and lines come back. The window then carries the device's documents (`SplitBytes`)
in place of a slot of host bytes, and the engine's planning uses them as they are.

A block the split gives up on (a line the shared rules cannot decide as json.loads would) is
read by the host as where its native reader gives up (corpus.documents: `fast_block`, then
line by line), which takes it or raises today's one-line file:line error.

The engine turns the option off for tokenizers that normalize (NFC runs on the host's bytes,
corpus.engine.plan_window); parquet inputs and `--split file|chunk:N` are not read as lines,
so it changes nothing there. Blocks read before the engine starts (`corpus.job.read_ahead`,
while the vocabulary and device load) are split on the host, as they are not joined today.
On the CPU backend the same split runs through its CPU executor.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .device import pow2
from .inputs.device_lines import (
    BYTES,
    CODE,
    DOCS,
    GIVE_UP,
    NEWLINES,
    OK,
    TOO_MANY_LINES,
    device_field,
    split_lines,
)

ENV = "BLOCKBPE_DEVICE_SPLIT"
# A block's first guess of lines: its slot's bytes / LINE_BYTES (a block with more lines is
# split again with room for all of them, and the job keeps that room).
LINE_BYTES = 64
# On the CPU backend the split's documents are host memory already: the window's host bytes
# are they (tests turn this off to run the GPU's way: a host stand-in, `_host_bytes`).
DOCUMENTS_ON_HOST_ON_CPU = True


def wanted(option: bool | None) -> bool:
    """The option's value: `option` where given, else whether BLOCKBPE_DEVICE_SPLIT is 1."""
    return bool(option) if option is not None else os.environ.get(ENV, "0") == "1"


class SplitBytes:
    """A window's documents where the device split wrote them, standing in for the
    staging.FlatSlot the engine's planning would fill: `to_device()` returns them (no copy),
    there are no host bytes to fill, and no buffer of the engine's pool is held (the JAX
    array is freed with the window)."""

    host = None
    pooled = False  # (corpus.device.WindowBuffers.give_back_flat keeps nothing)

    def __init__(self, data):
        self.data = data

    def to_device(self):
        return self.data


@functools.lru_cache(maxsize=32)
def _split_jit(field: str | None, sep: bytes, max_lines: int, max_bytes: int, count_separators: bool):
    """split_lines jitted for one job's static arguments, with the number of times the
    separator occurs in its documents' bytes (their own separators included) when asked."""
    import jax
    import jax.numpy as jnp

    def run(block, size):
        data, offsets, lines, status = split_lines(
            block, size, field=field, sep=sep, max_lines=max_lines, max_bytes=max_bytes
        )
        found = jnp.int32(0)
        if count_separators:
            starts = data.shape[0] - len(sep) + 1
            hit = jnp.arange(starts, dtype=jnp.int32) + len(sep) <= status[BYTES]
            for k, b in enumerate(sep):
                hit &= data[k : k + starts] == b
            found = jnp.sum(hit, dtype=jnp.int32)
        return data, offsets, lines, status, found

    return jax.jit(run)


class DeviceSplit:
    """A job's splitting of blocks on its device (made by the engine, handed to the reader
    through corpus.engine.JoinInto).

    Args:
        device: the job's jax.Device.
        buffers: the engine's corpus.device.WindowBuffers (the page-locked slots blocks are
            copied into).
        sep: the separator after each document (the packing separator; b"" when the job
            does not pack).
    """

    def __init__(self, device, buffers, sep: bytes):
        self.device, self.buffers, self.sep = device, buffers, bytes(sep)
        self.host_documents = device.platform == "cpu" and DOCUMENTS_ON_HOST_ON_CPU
        self.max_lines = 0  # the job's line capacity (grows for blocks of very short lines)
        self.blocks = self.given_up = 0  # blocks split on the device; of those, given up on

    def takes(self, field: str | None) -> bool:
        """Whether the device split can take the field's name (else the host reader reads)."""
        return device_field(field)

    def split(self, block, field: str | None):
        """A block of whole lines split on the device.

        Args:
            block: the block's bytes (a buffer of the reader's, reused after this returns).
            field: the JSONL field, or None for plain lines.

        Returns:
            (host bytes uint8[bytes], offsets int64[docs + 1], each document's line from the
            block's first int64[docs], the block's newlines, separator bytes, SplitBytes), as
            corpus.documents' native split returns them, or None where the split gives up. The
            host bytes are what the engine's planning reads (`_host_bytes`).
        """
        host_block = np.frombuffer(block, np.uint8)
        size = host_block.size
        slot = self.buffers.flat_slot(size)
        try:
            slot.host[:size] = host_block
            on_device = slot.to_device()  # (one DMA on a CUDA GPU)
            data, offsets, lines, status, found = self._run(on_device, host_block, field, slot.size)
        finally:
            # The split has run (its status is back): the slot's bytes are read, the pool may
            # hand it out again.
            self.buffers.give_back_flat(slot)
        self.blocks += 1
        if status[CODE] == GIVE_UP:
            self.given_up += 1
            return None
        if status[CODE] != OK:  # (max_bytes holds every block's documents: see _run)
            raise RuntimeError(f"device split: status {status.tolist()} on a block sized for it")
        docs, nbytes = int(status[DOCS]), int(status[BYTES])
        offsets = np.asarray(offsets)[: docs + 1].astype(np.int64)
        kept = np.asarray(lines)[:docs].astype(np.int64)
        host = self._host_bytes(data, offsets, nbytes, int(found))
        return host, offsets, kept, int(status[NEWLINES]), len(self.sep), SplitBytes(data)

    def _run(self, on_device, host_block: np.ndarray, field, slot_bytes: int):
        """The split of on_device[:len(host_block)] -> (data, offsets, lines, status on the
        host, separators found), its line capacity grown once where the block has more lines."""
        import jax

        self.max_lines = max(self.max_lines, pow2(slot_bytes // LINE_BYTES, 64))
        size = np.int32(host_block.size)
        while True:
            # (a document is at most its line's bytes without the newline: a separator per
            # line more than the block's bytes holds them all)
            max_bytes = slot_bytes + self.max_lines * len(self.sep)
            step = _split_jit(
                field, self.sep, self.max_lines, max_bytes, bool(self.sep) and not self.host_documents
            )
            data, offsets, lines, status, found = step(on_device, jax.device_put(size, self.device))
            for out in (offsets, lines, found):
                out.copy_to_host_async()
            status = np.asarray(status)
            if status[CODE] != TOO_MANY_LINES:
                return data, offsets, lines, status, np.asarray(found)
            newlines = int(np.count_nonzero(host_block == ord("\n")))
            self.max_lines = max(2 * self.max_lines, pow2(newlines + 1, 64))

    def _host_bytes(self, data, offsets: np.ndarray, nbytes: int, found: int) -> np.ndarray:
        """What the window's host bytes must be for the engine's planning, which reads them
        only to pack short documents (native pack_documents: each document's separator in
        place, and no separator inside a document, else it is encoded alone). Without a
        separator: nothing (a view of one zero byte, the documents' size). On the CPU
        backend: the documents themselves. On a GPU where the separator occurs only as the
        documents' own (`found`, counted on the device, equals their number): a stand-in with
        the separators in place and zeros for the documents' bytes, which pack_documents
        decides alike. Else (a document holds the separator's bytes): the documents copied
        back."""
        if not self.sep:
            return np.broadcast_to(np.zeros(1, np.uint8), (nbytes,))
        if self.host_documents or found != len(offsets) - 1:
            return np.asarray(data)[:nbytes]
        stand_in = np.zeros(nbytes, np.uint8)
        ends = offsets[1:] - len(self.sep)
        stand_in[(ends[:, None] + np.arange(len(self.sep))).ravel()] = np.tile(
            np.frombuffer(self.sep, np.uint8), len(ends)
        )
        return stand_in
