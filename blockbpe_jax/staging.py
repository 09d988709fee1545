"""Host-to-GPU path of `Tokenizer.encode_batch`: strings packed into pinned memory, one copy
on a private CUDA stream, the device buffer handed to JAX through DLPack (no copy).

Why: JAX's transfer of a NumPy argument costs 150-250 us of fixed overhead per array on the
H200 (benchmarks/host_path.py), more than the kernel takes for a 1024 x 512-byte batch.

Safety: a slot (pinned buffer + device buffer, `_blockbpe_cuda.HostStaging`) is reused only
once the encode that read it has finished (its `counts` output is ready); the pinned buffer
is refilled only after its last copy ended (a CUDA event, checked in C++); the consumer's
stream waits on that event through the DLPack `stream` argument. A slot whose consumer can no
longer be queried (a deleted array) is dropped, not reused. At most `MAX_SLOTS` slots per
device, each as large as the largest batch it carried (pinned + device bytes: B * L + 4 B).
"""

from __future__ import annotations

import os
import threading

import jax

from . import ops

MAX_SLOTS = 3  # per device: one being filled, one being encoded, one spare


def available(device) -> bool:
    """Whether `device` is a CUDA GPU this build can stage to (BLOCKBPE_STAGING=0 turns the
    path off: encode_batch then hands NumPy arrays to the jitted call, as off the GPU)."""
    return (ops.HAS_CUDA_MODULE and getattr(device, "platform", None) == "gpu"
            and os.environ.get("BLOCKBPE_STAGING", "1") != "0")


class _DLPackExport:
    """A device view whose `__dlpack__` first orders the slot's copy before the consumer."""

    def __init__(self, array, slot):
        self._array, self._slot = array, slot

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __dlpack__(self, *, stream=None, **kwargs):
        self._slot.wait_on(stream)
        return self._array.__dlpack__(stream=stream, **kwargs)


class Staged:
    """One uploaded batch: `data` uint8[B, L] and `lengths` int32[B] on the device. Call
    `release(consumer)` with an output of the computation that reads them (or None if none
    was dispatched), so the slot can be reused once `consumer` is ready."""

    def __init__(self, pool: "_Pool", slot, data, lengths):
        self._pool, self._slot = pool, slot
        self.data, self.lengths = data, lengths

    def release(self, consumer) -> None:
        self._pool.give_back(self._slot, consumer)
        self._slot = None

    def discard(self) -> None:
        """After a failed call: whether a computation still reads the slot is unknown, so it
        is not reused (it is freed with its last view)."""
        self._pool.drop()
        self._slot = None


class _Pool:
    def __init__(self, device):
        self.device = device
        self.idle: list[tuple[object, object]] = []  # (slot, consumer or None), oldest first
        self.count = 0                               # slots owned, idle or handed out
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            for k, (slot, consumer) in enumerate(self.idle):
                ready = _is_ready(consumer)
                if ready is None:          # unknowable: never reuse it
                    del self.idle[k]
                    self.count -= 1
                    break
                if ready:
                    del self.idle[k]
                    return slot
            if self.count < MAX_SLOTS or not self.idle:
                self.count += 1
                slot = None
            else:
                slot, consumer = self.idle.pop(0)
        if slot is None:
            return ops._blockbpe_cuda.HostStaging(self.device.local_hardware_id)
        try:
            consumer.block_until_ready()
        except Exception:  # noqa: BLE001 - a deleted consumer: replace the slot
            return ops._blockbpe_cuda.HostStaging(self.device.local_hardware_id)
        return slot

    def give_back(self, slot, consumer) -> None:
        with self.lock:
            self.idle.append((slot, consumer))

    def drop(self) -> None:
        with self.lock:
            self.count -= 1


def _is_ready(consumer) -> bool | None:
    if consumer is None:
        return True
    try:
        return consumer.is_ready()
    except Exception:  # noqa: BLE001 - deleted or otherwise unusable
        return None


_pools: dict = {}
_pools_lock = threading.Lock()


def stage_strings(texts, *, max_len: int | None, device) -> Staged:
    """Packs `texts` (like `pack_strings`) straight into pinned memory and uploads them to
    `device` (a CUDA GPU). Raises what `pack_strings` raises for bad items or lengths."""
    with _pools_lock:
        pool = _pools.get(device)
        if pool is None:
            pool = _pools[device] = _Pool(device)
    slot = pool.take()
    try:
        slot.upload(texts, -1 if max_len is None else int(max_len))
    except BaseException:
        pool.give_back(slot, None)  # nothing was copied: the slot is clean
        raise
    try:
        data, lengths = (jax.dlpack.from_dlpack(_DLPackExport(a, slot))
                         for a in slot.device_arrays())
    except BaseException:
        pool.drop()  # a view may exist: do not reuse the slot
        raise
    return Staged(pool, slot, data, lengths)
