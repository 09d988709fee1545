"""Host-to-GPU path of `Tokenizer.encode_batch`: strings packed into pinned memory, one copy
on a private CUDA stream into a device buffer that JAX sees through DLPack (no JAX transfer);
the way back for results, `read_back` (`Encoded.numpy`); and the corpus job's window bytes,
`FlatSlot` (one DMA from page-locked memory into device memory kept with the slot).

Why: JAX's transfer of a NumPy argument costs 150-250 us of fixed overhead per array on the
H200 (benchmarks/host_path.py), more than the kernel takes for a 1024 x 512-byte batch; an
import through DLPack costs 50-100 us and deleting the imported arrays after use as much
again, so a slot imports its device buffer once per batch shape and refills it in place.

Safety, since JAX arrays are meant to be immutable and these are refilled underneath:
- the views never leave this module (encode only reads them);
- a slot (`_blockbpe_cuda.HostStaging`: pinned buffer, device buffer, stream, event) is
  refilled only once the encode that read it has finished (its `counts` output is ready);
  a slot whose consumer can no longer be queried (a deleted array) is dropped, not reused;
- the encode that reads a batch waits for its copy on the GPU: its handler makes XLA's stream
  wait for the copy's event (ffi/cuda/staged_uploads.h), so the host dispatches the encode
  while the copy runs; any other reader of the views (`Staged.data`) waits on the host. A
  slot whose copy no encode waited for is an error at its next fill, not silently reused.
At most `MAX_SLOTS` slots per device, each as large as the largest batch it carried (pinned
and device bytes: B * L + 4 B, rounded up).
"""

from __future__ import annotations

import atexit
import os
import threading

import jax

from . import native

MAX_SLOTS = 3  # per device: one being filled, one being encoded, one spare
# BLOCKBPE_STAGING_HOST_WAIT=1: the host waits for each copy before dispatching the encode (the
# path before the handler waited on the GPU; for A/B runs).
_HOST_WAITS = os.environ.get("BLOCKBPE_STAGING_HOST_WAIT", "0") == "1"


def available(device) -> bool:
    """Whether `device` is a CUDA GPU this build can stage to (BLOCKBPE_STAGING=0 turns the
    path off: encode_batch then hands NumPy arrays to the jitted call, as off the GPU)."""
    return (
        native.HAS_CUDA_MODULE
        and getattr(device, "platform", None) == "gpu"
        and os.environ.get("BLOCKBPE_STAGING", "1") != "0"
    )


class _Slot:
    """A HostStaging and the JAX arrays viewing its device buffer, per batch shape."""

    MAX_SHAPES = 64  # shapes whose views a slot keeps

    def __init__(self, device):
        self.native = native.cuda.HostStaging(device.local_hardware_id)
        self.shape_views: dict[tuple[int, int], tuple] = {}
        self.generation = -1  # the device buffer the views see
        self.encode_waits = False  # the last fill went to an encode that waits for its copy

    def fill(self, texts, max_len: int) -> tuple[int, int]:
        """Checks `texts` and starts packing and copying them (on the slot's own thread, while
        the caller goes on to dispatch the encode); returns the shape (B, L) for `views`."""
        if self.encode_waits and self.native.copy_pending:
            raise RuntimeError(
                "blockbpe_jax staging: a staged batch was handed to a computation that did not "
                "wait for its copy (its results may be wrong); please report this"
            )
        self.encode_waits = False
        return self.native.upload(texts, max_len)

    def views(self, batch: int, width: int, *, wait: bool = True) -> tuple:
        """(data uint8[B, L], lengths int32[B]) of the last fill: once its copy has ended, or
        with wait=False at once, for an encode (whose handler waits for the copy). The views
        of a shape are imported once per device buffer: a view sees every later fill of its
        shape."""
        if wait:
            self.native.wait()
        else:
            self.encode_waits = True
        if self.native.generation != self.generation:  # the buffer grew: new views
            self.shape_views.clear()
            self.generation = self.native.generation
        key = (batch, width)
        found = self.shape_views.get(key)
        if found is None:
            if len(self.shape_views) >= self.MAX_SHAPES:
                del self.shape_views[next(iter(self.shape_views))]
            found = tuple(jax.dlpack.from_dlpack(a) for a in self.native.device_arrays())
            self.shape_views[key] = found
        return found


class Staged:
    """One batch being uploaded: `data` uint8[B, L] and `lengths` int32[B] on the device (the
    first access waits for the copy). `run` calls a computation on them and hands the slot
    back; or call `release(consumer)` with an output of the computation that reads them,
    `discard()` when the call failed, or `cancel()` when no computation was dispatched."""

    def __init__(self, pool: "_Pool", slot: _Slot, shape: tuple[int, int]):
        self._pool, self._slot, self._shape = pool, slot, shape
        self._arrays = None

    @property
    def data(self):
        return self._views()[0]

    @property
    def lengths(self):
        return self._views()[1]

    def _views(self) -> tuple:
        if self._arrays is None:
            self._arrays = self._slot.views(*self._shape)
        return self._arrays

    def run(self, call, consumer=lambda out: out.counts):
        """`call(data, lengths)`, where `call` hands them straight to `encode` (whose handler
        waits for the copy on the GPU); the slot then goes back with `consumer(out)`, an output
        of the computation that reads it (discarded instead if the call fails)."""
        try:
            data, lengths = self._arrays or self._slot.views(*self._shape, wait=_HOST_WAITS)
            out = call(data, lengths)
        except BaseException:
            self.discard()
            raise
        self.release(consumer(out))
        return out

    def release(self, consumer) -> None:
        self._pool.give_back(self._slot, consumer)
        self._slot = None

    def cancel(self) -> None:
        """Nothing reads the slot: it is free again (the next fill waits for this copy)."""
        self.release(None)

    def discard(self) -> None:
        """Whether a computation still reads the slot is unknown: it is not reused (it is
        freed with its last view)."""
        self._pool.drop()
        self._slot = None


class _Pool:
    def __init__(self, device):
        self.device = device
        self.idle: list[tuple[_Slot, object]] = []  # (slot, consumer or None), oldest first
        self.count = 0  # slots owned, idle or handed out
        self.lock = threading.Lock()

    def take(self) -> _Slot:
        """A slot no computation reads any more."""
        with self.lock:
            for k, (slot, consumer) in enumerate(self.idle):
                ready = _is_ready(consumer)
                if ready is None:  # unknowable: never reuse it
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
            return _Slot(self.device)
        try:
            consumer.block_until_ready()
        except Exception:  # noqa: BLE001 - a deleted consumer: replace the slot
            return _Slot(self.device)
        return slot

    def give_back(self, slot: _Slot, consumer) -> None:
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
_readers: dict = {}  # device -> (DeviceReader, its lock)
_pools_lock = threading.Lock()


@atexit.register
def _free_slots() -> None:
    # Before JAX's own exit handlers (registered earlier, run later): the views go, then the
    # pinned and device buffers, while the CUDA context is still there.
    with _pools_lock:
        for pool in _pools.values():
            for slot, _ in pool.idle:
                slot.shape_views, slot.native = {}, None
        _pools.clear()
        _readers.clear()


def read_back(arrays, prefixes=None, into=None) -> list:
    """NumPy copies of finished JAX arrays. Arrays that each live on one CUDA GPU this build can
    stage to are copied by `_blockbpe_cuda.DeviceReader` (one DMA each through a pinned buffer
    on a private stream): JAX's own copy of a fresh array costs a fixed 130-250 us per call on
    the H100 machine, more than encoding a short string (those copies are new, writable
    arrays). Any other array: np.asarray. prefixes: per array, None (all of it) or n: only its
    first n elements (of a 1-D array), and only those are copied. into: per array, None or a
    host byte buffer (uint8, large enough) that a DeviceReader copy goes to, viewed as the
    result: page-locked (`pinned_empty`), the DMA alone, no second copy."""
    import numpy as np

    arrays = list(arrays)
    prefixes = [None] * len(arrays) if prefixes is None else list(prefixes)
    into = [None] * len(arrays) if into is None else list(into)
    for a, n in zip(arrays, prefixes):
        if n is not None and not (np.ndim(a) == 1 and 0 <= n <= a.shape[0]):
            raise ValueError(f"read_back: prefix {n} of an array of shape {list(np.shape(a))}")
    shapes = [a.shape if n is None else (n,) for a, n in zip(arrays, prefixes)]
    out = [None] * len(arrays)
    by_device: dict = {}
    for k, a in enumerate(arrays):
        devices = a.devices() if isinstance(a, jax.Array) and not a.is_deleted() else ()
        if len(devices) != 1 or not available(next(iter(devices))):
            out[k] = np.asarray(a) if prefixes[k] is None else np.asarray(a)[: prefixes[k]]
        elif a.size == 0 or prefixes[k] == 0:  # (no buffer to read)
            out[k] = np.empty(shapes[k], a.dtype)
        else:
            by_device.setdefault(next(iter(devices)), []).append(k)
    for device, ks in by_device.items():
        jax.block_until_ready([arrays[k] for k in ks])
        with _pools_lock:
            if device not in _readers:
                _readers[device] = (native.cuda.DeviceReader(device.local_hardware_id), threading.Lock())
            reader, lock = _readers[device]
        for k in ks:
            if into[k] is None:
                out[k] = np.empty(shapes[k], arrays[k].dtype)
            else:
                nbytes = int(np.prod(shapes[k])) * arrays[k].dtype.itemsize
                if into[k].dtype != np.uint8 or into[k].ndim != 1 or into[k].size < nbytes:
                    raise ValueError(f"read_back: `into` needs a uint8 buffer of {nbytes} bytes")
                out[k] = into[k][:nbytes].view(arrays[k].dtype).reshape(shapes[k])
        with lock:  # (the arrays stay referenced, so alive, through the copy)
            reader.read([arrays[k].unsafe_buffer_pointer() for k in ks], [out[k] for k in ks])
    return out


def pinned_empty(nbytes: int, device):
    """A host byte buffer for `read_back(into=...)`: page-locked where `device` is a CUDA GPU
    this build stages to (one DMA per read), else plain NumPy memory."""
    import numpy as np

    return native.cuda.pinned_empty(nbytes) if available(device) else np.empty(nbytes, np.uint8)


def stage_strings(texts, *, max_len: int | None, device) -> Staged:
    """Packs `texts` (like `pack_strings`) straight into pinned memory and uploads them to
    `device` (a CUDA GPU), both in the background. Raises at once what `pack_strings` raises
    for bad items or lengths."""
    return _stage(device, lambda slot: slot.fill(texts, -1 if max_len is None else int(max_len)))


def _stage(device, fill) -> Staged:
    with _pools_lock:
        pool = _pools.get(device)
        if pool is None:
            pool = _pools[device] = _Pool(device)
    slot = pool.take()
    try:
        shape = fill(slot)
    except (TypeError, ValueError, IndexError):
        pool.give_back(slot, None)  # rejected by the packer before any copy: the slot is clean
        raise
    except BaseException:
        pool.drop()
        raise
    return Staged(pool, slot, shape)


class StagedBatch:
    """A packed batch and the call that encodes it: `encode()` once (or `dispatch()`, then
    `finish()` of its result), or `cancel()`. finish: a last step on the dispatched result
    that waits for it (a normalizing tokenizer's reported rows, encoded again), or None."""

    def __init__(self, run, *, staged=None, arrays=None, finish=None):
        self._run, self._staged, self._arrays, self._finish = run, staged, arrays, finish

    @property
    def finishes(self) -> bool:
        """Whether `finish` waits for the result (else it returns it as it is)."""
        return self._finish is not None

    def encode(self):
        return self.finish(self.dispatch())

    def dispatch(self):
        """The call launched (its slot given back to the pool), its result not waited for."""
        if self._staged is None:
            return self._run(*self._arrays)
        staged, self._staged = self._staged, None
        return staged.run(self._run)

    def finish(self, out):
        return out if self._finish is None else self._finish(out)

    def ready(self, out) -> bool:
        """Whether `finish(out)` would not wait: no finish, or the result computed."""
        return self._finish is None or _is_ready(out.counts) is True

    def cancel(self) -> None:
        if self._staged is not None:
            self._staged.cancel()
            self._staged = None


# Batches that finish (StagedBatch.finishes) dispatched and not yet finished: beyond this many,
# the oldest is waited for. With one, each batch's finish waited for the batch dispatched just
# before it, whose copy and encode were still running: the host stalled a batch's latency.
MAX_UNFINISHED = 2


def pipelined(prepare, batches):
    """`prepare(batch).encode()` of each batch, in order, as a generator, with each batch
    prepared (packed, its copy started) before the batch before it is encoded. A batch whose
    `finish` waits for its result (StagedBatch.finishes) is finished once its result is ready
    or once MAX_UNFINISHED batches after it are dispatched, so that the device has work while
    the host waits. An error preparing or dispatching a batch is raised after the result of
    the batch before it."""
    ahead: list[StagedBatch] = []  # prepared, not yet dispatched; oldest first
    held: list = []  # (batch, its dispatched result), oldest first: yielded in this order

    def release(every: bool = False):
        while held and (every or len(held) > MAX_UNFINISHED or held[0][0].ready(held[0][1])):
            batch, out = held.pop(0)
            yield batch.finish(out) if batch.finishes else out

    def dispatch_oldest():
        batch = ahead.pop(0)
        try:
            out = batch.dispatch()
        except BaseException:
            yield from release(every=True)
            raise
        held.append((batch, out))
        yield from release()

    try:
        for batch in batches:
            try:
                ahead.append(prepare(batch))
            except BaseException:
                while ahead:
                    yield from dispatch_oldest()
                yield from release(every=True)
                raise
            if len(ahead) == 2:
                yield from dispatch_oldest()
        while ahead:
            yield from dispatch_oldest()
        yield from release(every=True)
    finally:  # the consumer stopped early, or the iterable raised
        for batch in ahead:
            batch.cancel()


class FlatSlot:
    """A window's bytes on their way to the device: `host`, the buffer the planning thread
    writes them into, and `to_device()`, their copy there. On a CUDA GPU `host` is page-locked
    and the copy one DMA into device memory kept with the slot (`_blockbpe_cuda.DeviceBytes`,
    seen by JAX through DLPack, imported once): JAX's own transfer of a NumPy array would first
    copy the window into its staging memory on the host, on the cores that read and plan.
    Elsewhere, `jax.device_put` of plain memory. Refilled only once the calls that read its
    device bytes have run (`corpus.device.WindowBuffers.give_back_flat`)."""

    def __init__(self, size: int, device):
        self.size, self.device = size, device
        self.host = pinned_empty(size, device)
        self._native = native.cuda.DeviceBytes(device.local_hardware_id, size) if available(device) else None
        self._view = None

    def to_device(self, source=None):
        """The bytes of `host` on the device (returns once they are there, on a CUDA GPU); or
        those of `source` (uint8[n], n <= size) in place of host's first n: on a CUDA GPU one
        DMA straight from it (page-locked memory for the link's speed: the device split's
        blocks where the reader read them), `host` left as it was; elsewhere a new array."""
        if self._native is None:
            if source is None:
                return jax.device_put(self.host, self.device)
            import numpy as np

            padded = np.zeros(self.size, np.uint8)
            padded[: source.size] = source
            return jax.device_put(padded, self.device)
        if source is not None and source.size > self.size:
            raise ValueError(f"FlatSlot.to_device: {source.size} bytes for a slot of {self.size}")
        if self._view is None:
            self._view = jax.dlpack.from_dlpack(self._native.array())
        self._native.fill(self.host if source is None else source)
        return self._view
