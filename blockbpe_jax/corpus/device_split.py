"""The corpus job's blocks of lines split on the device (the option `device_split`; where it
is not given, BLOCKBPE_DEVICE_SPLIT=1 or 0 decides, else it is on where the job's device is a
GPU: `wanted`).

With it on, the reader (corpus.documents) does no byte work on a block of lines or JSONL: on a
CUDA GPU it reads a file's blocks into page-locked buffers (`WindowBuffers.read_block`,
through corpus.inputs.files.BlockBuffers), from which one DMA takes each block to the device
(into one of the engine's slots' device memory, `WindowBuffers.flat_slot`); a block from
anywhere else (decompressed, small files read together) is first copied into the slot's
page-locked memory. Then `bbpe_split_lines` (corpus.inputs.device_lines;
ffi/core/json_lines.h) splits, checks and decodes it there into the documents, each followed by
the packing separator: what the host reader joins into the slot. The status, offsets
and lines come back, and where the job packs short documents (which reads their bytes: native
pack_documents) the documents too, by DMA into a kept page-locked buffer. The window then
carries the device's documents (`SplitBytes`) in place of a slot of host bytes, and the
engine's planning uses them as they are.

Nothing waits for a block's split before the next is dispatched: the reader dispatches up to
IN_FLIGHT blocks (`DeviceSplit.dispatch`: the copy into the slot, the DMA and the split) and
reads the oldest's results only then (`PendingSplit.result`), in order. The device's queue so
holds the next blocks' splits ahead of the encode calls of the windows planned from the ones
read back, and the planner waits for a block's own split only.

A block the split gives up on (a line the shared rules cannot decide as json.loads would) is
read by the host as where its native reader gives up (corpus.documents: `fast_block`, then
line by line), which takes it or raises the host reader's one-line file:line error.

The engine turns the option off where the host normalizes the documents (Lowercase then NFC,
or device_normalizer=False; the others the encode calls apply: corpus/device_normalizer.py);
parquet inputs and `--split file|chunk:N` are not read as lines, so it changes nothing there. Blocks read before
the engine starts (`corpus.job.read_ahead`, while the vocabulary and device load) are split on
the host.
On the CPU backend the same split runs through its CPU executor.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .. import staging
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
# are they (tests turn this off to run the GPU's way: the documents read back into a kept
# buffer, `_host_bytes`).
DOCUMENTS_ON_HOST_ON_CPU = True
# On the CPU backend a block is copied into its slot (tests turn this on to run the GPU's way:
# the reader's blocks in the pool's buffers, each taken to the device from there, the slot's
# host memory never written).
DIRECT_ON_CPU = False


def environment_setting() -> bool | None:
    """BLOCKBPE_DEVICE_SPLIT as set: True for 1, False for 0, None where unset or empty.

    Raises:
        ValueError: it is set to something else.
    """
    env = os.environ.get(ENV, "")
    if env not in ("", "0", "1"):
        raise ValueError(f"{ENV} must be 0 or 1, got {env!r}")
    return env == "1" if env else None


def wanted(option: bool | None, device) -> bool:
    """Whether a job on `device` splits its blocks of lines there: `option` where given, else
    BLOCKBPE_DEVICE_SPLIT (1: on, 0: off) where set, else on where the device is a GPU. (On a
    GPU the split saves the host a third of its CPU and is as fast or faster, docs/corpus.md;
    on the CPU backend the host's own reader does the same work without an XLA call.)

    Raises:
        ValueError: BLOCKBPE_DEVICE_SPLIT is set to something other than 0 or 1.
    """
    if option is not None:
        return bool(option)
    env = environment_setting()
    return env if env is not None else getattr(device, "platform", None) == "gpu"


class SplitBytes:
    """A window's documents where the device split wrote them, standing in for the
    staging.FlatSlot the engine's planning would fill: `to_device()` returns them (no copy),
    there are no host bytes to fill, and no buffer of the engine's pool is held (the JAX
    array is freed with the window). `host_copy`: the kept host buffer the documents were read
    back into (for packing), which corpus.device.WindowBuffers.give_back_flat keeps for the
    next windows once the window's calls have run, or None."""

    host = None
    pooled = False  # (corpus.device.WindowBuffers.give_back_flat keeps no slot for it)

    def __init__(self, data, host_copy=None):
        self.data, self.host_copy = data, host_copy

    def to_device(self):
        return self.data


@functools.lru_cache(maxsize=32)
def _split_jit(field: str | None, sep: bytes, max_lines: int, max_bytes: int):
    """split_lines jitted for one job's static arguments."""
    import jax

    return jax.jit(
        functools.partial(split_lines, field=field, sep=sep, max_lines=max_lines, max_bytes=max_bytes)
    )


# Blocks a job's reader has dispatched to the device split and not yet read back: the reader
# dispatches the next blocks' splits before it waits for the oldest's results, so the device
# queue holds them ahead of the encode calls of the windows planned meanwhile (each in-flight
# block holds a page-locked slot and its split's output on the device).
IN_FLIGHT = 3


# A block's copy into its page-locked slot, in parts of at least COPY_PART bytes on up to
# COPY_THREADS threads (NumPy copies without the GIL): one core's copy of a 32 MiB block takes
# about as long as the device's split of it.
COPY_PART = 4 << 20
COPY_THREADS = min(8, os.cpu_count() or 1)


def copy_in_parts(into: np.ndarray, source: np.ndarray) -> None:
    """into[:] = source (uint8 arrays of one size), in parts on threads where it is large."""
    parts = min(COPY_THREADS, source.size // COPY_PART)
    if parts < 2:
        into[:] = source
        return
    step = -(-source.size // parts)
    list(
        _copy_pool().map(
            lambda a: into.__setitem__(slice(a, a + step), source[a : a + step]), range(0, source.size, step)
        )
    )


@functools.lru_cache(maxsize=1)
def _copy_pool():
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(COPY_THREADS, "blockbpe-copy")


class DeviceSplit:
    """A job's splitting of blocks on its device (made by the engine, handed to the reader
    through corpus.engine.JoinInto).

    The reader calls `dispatch` for a block (its bytes copied into a page-locked slot, one
    DMA, the split dispatched: nothing waits) and reads a
    block's results (`PendingSplit.result`) only once `in_flight` blocks are dispatched ahead
    of it, oldest first (corpus.documents: `_line_windows`).

    Args:
        device: the job's jax.Device.
        buffers: the engine's corpus.device.WindowBuffers (the page-locked slots blocks are
            copied into).
        sep: the separator after each document (the packing separator; b"" when the job
            does not pack).
        in_flight: blocks dispatched and not yet read back, at most (>= 1; None: IN_FLIGHT).
    """

    def __init__(self, device, buffers, sep: bytes, in_flight: int | None = None):
        in_flight = IN_FLIGHT if in_flight is None else in_flight
        if in_flight < 1:
            raise ValueError(f"DeviceSplit: in_flight must be >= 1, got {in_flight}")
        self.device, self.buffers, self.sep = device, buffers, bytes(sep)
        self.in_flight = in_flight
        self.host_documents = device.platform == "cpu" and DOCUMENTS_ON_HOST_ON_CPU
        # blocks in page-locked memory go to the device straight from it
        self.direct = staging.available(device) or (device.platform == "cpu" and DIRECT_ON_CPU)
        self.direct_blocks = 0  # blocks that did (the tests count them)
        self.max_lines = 0  # the job's line capacity (grows for blocks of very short lines)
        self.blocks = self.given_up = 0  # blocks split on the device; of those, given up on
        self.pending = 0  # blocks dispatched, not yet read back
        self.most_pending = 0  # the most at once over the job (the tests hold it to in_flight)

    def takes(self, field: str | None) -> bool:
        """Whether the device split can take the field's name (else the host reader reads)."""
        return device_field(field)

    def read_pool(self):
        """The pool of page-locked memory the reader's blocks should be read into
        (corpus.inputs.files.BlockBuffers' `page_locked`): the engine's WindowBuffers where
        blocks go to the device straight from it, else None."""
        return self.buffers if self.direct else None

    def split(self, block, field: str | None):
        """`dispatch(block, field).result()`: a block split and read back at once."""
        return self.dispatch(block, field).result()

    def dispatch(self, block, field: str | None, page_locked: bool = False) -> "PendingSplit":
        """A block of whole lines sent to the device and its split dispatched; nothing waits
        for the device.

        Args:
            block: the block's bytes (a buffer of the reader's, reused after this returns:
                they are on the device by then, in the device memory of a slot the split
                holds until its results are read).
            field: the JSONL field, or None for plain lines.
            page_locked: whether the block is in page-locked memory (`read_pool`'s): then
                one DMA takes it to the device from there; else it is first copied into the
                slot's page-locked memory.

        Returns:
            the PendingSplit whose `result()` gives the block's documents.
        """
        host_block = np.frombuffer(block, np.uint8)
        slot = self.buffers.flat_slot(host_block.size)
        try:
            if page_locked and self.direct:
                on_device = slot.to_device(host_block)
                self.direct_blocks += 1
            else:
                copy_in_parts(slot.host[: host_block.size], host_block)
                on_device = slot.to_device()  # (one DMA on a CUDA GPU)
            pending = PendingSplit(self, slot, on_device, host_block.size, field)
        except BaseException:
            self.buffers.give_back_flat(slot)
            raise
        self.pending += 1
        self.most_pending = max(self.most_pending, self.pending)
        return pending

    def _dispatch_step(self, on_device, size: int, field, slot_bytes: int) -> tuple:
        """The jitted split of on_device[:size] with the job's capacities, dispatched ->
        (data, offsets, lines, status) as JAX arrays. (Their copies back are not started here:
        offsets and lines have room for max_lines, and `PendingSplit.result` reads only the
        documents' part of them once the status says how many.)"""
        import jax

        self.max_lines = max(self.max_lines, pow2(slot_bytes // LINE_BYTES, 64))
        # (a document is at most its line's bytes without the newline: a separator per line
        # more than the block's bytes holds them all)
        max_bytes = slot_bytes + self.max_lines * len(self.sep)
        step = _split_jit(field, self.sep, self.max_lines, max_bytes)
        return step(on_device, jax.device_put(np.int32(size), self.device))

    def _host_bytes(self, data, nbytes: int) -> tuple:
        """What the window's host bytes must be for the engine's planning, which reads them
        only to pack short documents (native pack_documents: each document's separator in
        place, and no separator inside a short document, else it is encoded alone) ->
        (host bytes, the kept buffer they are in or None). Without a separator: nothing (a
        view of one zero byte, the documents' size). On the CPU backend: the documents
        themselves. Else the documents read back into a kept host buffer (page-locked on a
        CUDA GPU: one DMA, no host core copies or scans them here)."""
        if not self.sep:
            return np.broadcast_to(np.zeros(1, np.uint8), (nbytes,)), None
        if self.host_documents:
            return np.asarray(data)[:nbytes], None
        into = self.buffers.host_documents(data.shape[0])
        if staging.available(self.device):
            host = staging.read_back([data], [nbytes], [into])[0]
        else:  # (the CPU backend run the GPU's way, DOCUMENTS_ON_HOST_ON_CPU off)
            host = into[:nbytes]
            host[:] = np.asarray(data)[:nbytes]
        return host, into


class PendingSplit:
    """One block's split, dispatched (`DeviceSplit.dispatch`), its results not yet read.
    Holds the block's slot (its device bytes, `on_device`, are the split's input) until
    `result()` or `discard()`; one of them must be called, once, by the thread that reads."""

    def __init__(self, owner: DeviceSplit, slot, on_device, size: int, field):
        self.owner, self.slot, self.on_device, self.size, self.field = owner, slot, on_device, size, field
        self.block = None  # (result(), where the split gives up: the block's bytes)
        self.out = owner._dispatch_step(on_device, size, field, slot.size)

    def _block_bytes(self) -> np.ndarray:
        """The block's bytes, read back from the device (the reader's buffer they came from
        may hold another block by now): for the rare blocks the split asks more of."""
        return staging.read_back([self.on_device], [self.size])[0]

    def result(self):
        """The block's documents (waits for this block's split only).

        Returns:
            (host bytes uint8[bytes], offsets int64[docs + 1], each document's line from the
            block's first int64[docs], the block's newlines, separator bytes, SplitBytes), as
            corpus.documents' native split returns them, or None where the split gives up
            (then `block` holds the block's bytes, for the host reader). The host bytes are
            what the engine's planning reads (`DeviceSplit._host_bytes`).
        """
        owner = self.owner
        try:
            data, offsets, lines, status = self.out
            (status,) = staging.read_back([status])
            while status[CODE] == TOO_MANY_LINES:  # (more lines than the job's capacity: grown)
                newlines = int(np.count_nonzero(self._block_bytes() == ord("\n")))
                owner.max_lines = max(2 * owner.max_lines, pow2(newlines + 1, 64))
                data, offsets, lines, status = owner._dispatch_step(
                    self.on_device, self.size, self.field, self.slot.size
                )
                (status,) = staging.read_back([status])
            if status[CODE] == GIVE_UP:
                self.block = bytes(self._block_bytes())
        finally:
            self._release()
        owner.blocks += 1
        if status[CODE] == GIVE_UP:
            owner.given_up += 1
            return None
        if status[CODE] != OK:  # (max_bytes holds every block's documents: _dispatch_step)
            raise RuntimeError(f"device split: status {status.tolist()} on a block sized for it")
        docs, nbytes = int(status[DOCS]), int(status[BYTES])
        # (one DMA each on a CUDA GPU, of the documents' part only: staging.read_back)
        offsets, kept = staging.read_back([offsets, lines], [docs + 1, docs])
        offsets, kept = offsets.astype(np.int64), kept.astype(np.int64)
        host, host_copy = owner._host_bytes(data, nbytes)
        return host, offsets, kept, int(status[NEWLINES]), len(owner.sep), SplitBytes(data, host_copy)

    def discard(self) -> None:
        """Waits for the split (it reads the slot) and gives the slot back, its results unread
        (the reader stopped early)."""
        try:
            np.asarray(self.out[3])
        finally:
            self._release()

    def _release(self) -> None:
        """The slot back to the pool, once: the split that reads it has run (its status is
        back), so the pool may hand it out again."""
        if self.slot is not None:
            self.owner.buffers.give_back_flat(self.slot)
            self.slot = None
            self.owner.pending -= 1
