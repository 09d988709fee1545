"""The device side of a corpus-job window (corpus/engine.py plans the calls): the jitted steps
(`device_functions`), the window buffers (`WindowBuffers`) and the window's encode calls as one
FFI call, compiled per buffer sizes ahead of the calls (`CompiledWindows`).
"""

from __future__ import annotations

import functools
import os
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .spares import Spares


def pow2(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def size_bucket(n: int) -> int:
    """A length for at most `n` items: eight sizes per octave (at most 1/8 more than n), at
    least 4096 (a multiple of 4096: `_prefix_count`'s blocks)."""
    if n <= 4096:
        return 4096
    step = max(4096, 1 << (n.bit_length() - 4))
    return -(-n // step) * step


@functools.lru_cache(maxsize=1)
def device_functions():
    """The jitted steps of a window on the device (built on first use: importing this module
    does not import JAX).

    A window's bytes go to the device once (`WindowBuffers.flat_of`), with a table of its
    documents in plan order (each call's `rows` entries in turn). Its calls, one FFI call for
    all of them (`encode_window`; two where some rows are packed: those have their own
    tables), write into one int32 buffer `raw`: call i's padded ids [rows, T] row-major, then
    its counts [rows] (packed rows: where each document's separator is), each call after the
    previous one. The layout depends only on the plan, so the host knows where every
    document's ids and count are before anything ran. The host copies back the counts
    (`gather`), and `finalize` gathers the ids of every document, in input order, back to
    back, cast to the shard dtype: the host copies back only those."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from ..ops import primitive

    @functools.partial(
        jax.jit,
        static_argnames=("workspace_bytes", "sep_id", "mode", "block_size", "assume_nfc"),
        donate_argnums=3,
    )
    def encode_window(flat, table, tables, raw, **static):
        """A window's calls (their plan set beforehand, `CompiledWindows`) into raw: each call's
        rows gathered from flat by its table entries, its ids and counts (or, packed rows, its
        documents' separator positions) at its place in raw."""
        return primitive.encode_window(flat, table, raw, tables, **static)

    @jax.jit
    def gather(raw, positions):
        return raw.at[positions].get(mode="clip")

    def _prefix_count(marks):
        """Inclusive prefix sums of 0/1 int32 marks (length a multiple of 4096). On a GPU,
        XLA's cumsum (one CUB scan). On the CPU backend a scan over millions of elements is
        slow (~50 ns each), so there it is a matmul by a triangular matrix per 64 elements,
        again per 64 block sums, and a scan over the 4096x fewer sums that are left (exact:
        float32 holds every integer below 2**24). The matmuls are not used on the GPU: XLA
        autotunes each dot when it compiles, and every window size is compiled."""
        upper = jnp.triu(jnp.ones((64, 64), jnp.float32))

        def within(x):  # x[m * 64]: (inclusive sums in each 64 as float32 [m, 64], their totals)
            inner = jnp.dot(x.astype(jnp.float32).reshape(-1, 64), upper, precision=lax.Precision.HIGHEST)
            return inner, inner[:, -1]

        def by_matmul(marks):
            inner, totals = within(marks)
            inner2, totals2 = within(totals)
            inclusive = (inner2 + (jnp.cumsum(totals2) - totals2)[:, None]).reshape(-1)  # of totals
            return (inner + (inclusive - totals)[:, None]).reshape(-1).astype(jnp.int32)

        return lax.platform_dependent(marks, cpu=by_matmul, default=lambda m: jnp.cumsum(m, dtype=jnp.int32))

    @functools.partial(jax.jit, static_argnames=("size", "dtype"))
    def finalize(raw, layout, *, size, dtype):
        """The window's ids back to back in input order, cast to `dtype`, padded to `size`.
        layout int32[2, D]: for the non-empty documents in input order, where their ids go in
        the output and how far they are from their place in raw (src - start); `size` where
        D has more entries than there are documents."""
        starts, shift = layout[0], layout[1]
        # output position j reads raw[j + shift[d]], d the number of starts at or before j,
        # minus 1: the non-empty document that holds j
        marks = jnp.zeros(size, jnp.int32).at[starts].set(1, mode="drop")
        d = jnp.maximum(_prefix_count(marks) - 1, 0)
        return raw.at[jnp.arange(size, dtype=jnp.int32) + shift[d]].get(mode="clip").astype(dtype)

    @functools.partial(jax.jit, static_argnames="size")
    def grow(raw, *, size):
        return jnp.zeros(size, raw.dtype).at[: raw.size].set(raw)

    return types.SimpleNamespace(
        encode_window=encode_window,
        gather=gather,
        finalize=finalize,
        grow=grow,
    )


# The kinds of kept buffers: a window's `raw` (on its device), its bytes (staging.FlatSlot, for its
# device), its ids read back (host memory), the device split's documents read back (host
# memory, corpus.device_split) and the reader's blocks the split copies to its device
RAW, FLAT, IDS, DOCS, READ = "raw", "flat", "host ids", "host documents", "read blocks"


class WindowBuffers:
    """Sizes of a job's window buffers, as high-water marks over its windows (`raw` and the
    document table: powers of two, the first twice the first window's need; the bytes: half
    again the need; the window call's workspace): the window call's executable depends on
    them, so a job should see one or two of each. Buffers of finished windows are kept for the next windows
    and jobs (at most `KEEP[kind]`): a new `raw` costs its zeroing, more than the
    window's steps on the CPU backend; a new `staging.FlatSlot` its page-locked allocation (or page
    faults), more than its copy."""

    # At least as many as a job has in flight, so that the next job allocates none (a 48 MiB
    # page-locked buffer takes ~8 ms, its device memory ~0.3): a window's bytes from the
    # reader's block (joined into them) until its ids are read back (the reader's, one queued,
    # three to five planned or being planned, dispatched, finishing, up to two being read
    # back: 7-9 at once on the CPU backend), its `raw` from its dispatch until then, its host
    # ids until they are written.
    # The device split's blocks in flight hold a slot each too (corpus.device_split.IN_FLIGHT),
    # and its windows their documents read back from the split until the ids are read back.
    # The reader's buffers (corpus.inputs.files.BlockBuffers): BLOCK_BUFFERS a job.
    KEEP = {FLAT: 16, RAW: 6, IDS: 6, DOCS: 12, READ: 8}
    _spare = Spares()  # by (kind, device)
    _lock = threading.Lock()

    def __init__(self, device):
        self.device, self.slots, self.docs = device, 1 << 12, 1 << 10
        # (a table of 8192 entries is 64 KB: a job seldom outgrows it, and growing it would
        # compile the window call again)
        self.flat_bytes, self.entries, self.id_slots, self.work = 0, 1 << 13, 0, 0
        self.flat_made = 0  # FlatSlots of flat_bytes this job allocated

    def raw_slots(self, slots: int) -> int:
        """The size of `raw` for a window that needs `slots`: the job's (twice the need when
        it grows: the next windows rarely need more)."""
        with self._lock:
            if slots > self.slots:
                self.slots = 2 * pow2(slots, 1)
            return self.slots

    def take(self, size: int, zeros):
        """A `raw` of `size` slots (`raw_slots`): a kept one, else `zeros(size)`."""
        raw = self._reuse(RAW, size)
        return raw if raw is not None else zeros(size)

    def flat_slot(self, need: int):
        """A window's byte buffers (`staging.FlatSlot`) of at least `need` bytes (the job's size: half
        again the largest need so far, since a window that outgrows it compiles the window call
        again), a finished window's when one is kept. Else new ones: as many more as this job
        made so far (up to KEEP), at once on threads, the others kept for its next windows (a
        job that needs eight waits for four rounds of allocations, not eight)."""
        need = max(need, 1)  # (a window of empty documents: an empty buffer has no address to key its plan)
        with self._lock:
            if need > self.flat_bytes:
                self.flat_bytes, self.flat_made = size_bucket(need + need // 2), 0
            size = self.flat_bytes
            slot = self._reuse(FLAT, size)
            if slot is not None:
                return slot
            new = 1 + max(0, min(self.flat_made, self.KEEP[FLAT] - 1 - self.flat_made))
            self.flat_made += new
        from ..staging import FlatSlot

        if new == 1:
            return FlatSlot(size, self.device)
        with ThreadPoolExecutor(new, "blockbpe-allocate") as pool:  # (they allocate without the GIL)
            slots = list(pool.map(lambda _: FlatSlot(size, self.device), range(new)))
        for spare in slots[1:]:
            self._keep(FLAT, spare)
        return slots[0]

    def flat_of(self, data: np.ndarray):
        """A slot holding a window's bytes (the window call reads each document's bytes only,
        so what follows them in the slot is never read)."""
        slot = self.flat_slot(data.size)
        slot.host[: data.size] = data
        return slot

    def give_back_flat(self, slot) -> None:
        """A window's slot, once its encode calls have run (its device bytes were read). The
        device split's documents (corpus.device_split.SplitBytes) are no buffer of the pool;
        their host copy (`host_documents`) is."""
        if getattr(slot, "pooled", True):
            self._keep(FLAT, slot)
        elif getattr(slot, "host_copy", None) is not None:
            self._keep(DOCS, slot.host_copy)
            slot.host_copy = None

    def host_documents(self, nbytes: int) -> np.ndarray:
        """A host buffer of `nbytes` for the device split's documents read back
        (`staging.read_back(into=...)`): page-locked on a CUDA GPU, a kept one when there is one
        of this size (the split's capacity: one size a job, mostly)."""
        return self._host_buffer(DOCS, nbytes)

    def read_block(self, nbytes: int) -> np.ndarray:
        """A host buffer of `nbytes` for the reader's blocks (corpus.inputs.files.BlockBuffers)
        while the device split copies them to the device straight from where they were read:
        page-locked on a CUDA GPU, a kept one when there is one of this size (a job's blocks
        are one size, mostly)."""
        return self._host_buffer(READ, nbytes)

    def give_back_read_block(self, buffer: np.ndarray) -> None:
        """A reader's buffer, once the job's reading is over, for the next jobs."""
        self._keep(READ, buffer)

    def table(self, entries: int) -> np.ndarray:
        """A document table for `entries` rows: int32[2, E] zeros (start, length: zero entries
        are empty rows), E at least `entries`."""
        with self._lock:
            if entries > self.entries:
                self.entries = 2 * pow2(entries, 1)
            return np.zeros((2, self.entries), np.int32)

    def ids(self, total: int) -> int:
        """Length of a window's ids in input order (`finalize`'s size) for `total` tokens: on a
        GPU the job's, a power of two, half again the most so far (one executable for most
        jobs; the host reads back only the first `total`). On the CPU backend finalize's work
        grows with its size and costs more than its compile (the pow2 size took the pipeline
        from 0.58 to 0.78 s on 100 MB, 2-core box): there, `size_bucket(total)`."""
        if self.device.platform == "cpu":
            return size_bucket(total)
        with self._lock:
            if total > self.id_slots:
                self.id_slots = pow2(total + total // 2, 4096)
            return self.id_slots

    def workspace(self, need: int) -> int:
        """encode_window's workspace for calls that need `need` bytes: the job's (a quarter
        more than the most so far, so that windows share one executable)."""
        with self._lock:
            if need > self.work:
                self.work = size_bucket(need + need // 4) if need > 1 else 1
            return self.work

    def doc_slots(self, n: int) -> int:
        with self._lock:
            self.docs = max(self.docs, pow2(n, 1))
            return self.docs

    def grown(self, slots: int) -> int:
        with self._lock:
            self.slots = max(self.slots, pow2(slots, 1))
            return self.slots

    def give_back(self, raw) -> None:
        self._keep(RAW, raw)

    def host_ids(self, nbytes: int) -> np.ndarray:
        """A host buffer for a window's ids read back (`staging.read_back(into=...)`):
        page-locked on a CUDA GPU, a kept one when there is one of this size."""
        return self._host_buffer(IDS, nbytes)

    def give_back_ids(self, buffer: np.ndarray) -> None:
        """A window's ids buffer, once the writer has copied them out."""
        self._keep(IDS, buffer)

    def _host_buffer(self, kind: str, nbytes: int) -> np.ndarray:
        """A kept host buffer of `kind` and `nbytes`, else a new one: page-locked on a CUDA GPU."""
        from .. import staging

        kept = self._reuse(kind, nbytes)
        return kept if kept is not None else staging.pinned_empty(nbytes, self.device)

    def _reuse(self, kind: str, size: int):
        """A kept buffer of `kind` for this device and of `size`, taken out of the pool, or None."""
        return self._spare.take((kind, self.device), size)

    def _keep(self, kind: str, buffer) -> None:
        """Keeps a finished window's buffer, dropping the oldest beyond KEEP of its kind
        (whatever their device)."""
        self._spare.keep((kind, self.device), buffer, self.KEEP[kind], group=kind)


def compile_ahead(wanted) -> None:
    """Compiles the (key, build) pairs whose key has no executable yet, together, on threads
    (XLA compiles with the GIL released), where jit would compile each step at its first call,
    one after the other on the dispatching thread (~0.2 s each on the GPU host). The
    executables are kept across jobs, by key: what they depend on."""
    with _ahead_lock:
        missing = {key: build for key, build in wanted if key not in _ahead}
    if not missing:
        return
    if len(missing) == 1:
        built = [build() for build in missing.values()]
    else:
        with ThreadPoolExecutor(min(len(missing), os.cpu_count() or 1)) as pool:
            built = list(pool.map(lambda build: build(), missing.values()))
    with _ahead_lock:
        _ahead.update(zip(missing, built))


def compiled(key, build):
    """The executable of `key`, compiled now if no call to compile_ahead did."""
    run = _ahead.get(key)
    if run is None:
        compile_ahead([(key, build)])
        run = _ahead[key]
    return run


def kept_on_disk(key, build, device) -> tuple:
    """compile_ahead's (key, build) of an executable that a later process may load instead of
    building (executable_cache, when the CLI turned it on)."""
    from . import executable_cache

    return key, functools.partial(executable_cache.load_or_build, key, build, device)


_ahead: dict = {}  # key -> executable (compile_ahead)
_ahead_lock = threading.Lock()


def _specs(device, *shapes_and_dtypes):
    import jax

    on = jax.sharding.SingleDeviceSharding(device)
    return [jax.ShapeDtypeStruct(shape, dtype, sharding=on) for shape, dtype in shapes_and_dtypes]


class CompiledWindows:
    """`encode_window` for one job's tables, device and options (sep_id: the packed rows' call,
    -1 for the others), compiled per window buffer sizes (bytes, table entries, raw slots,
    workspace), which a job's windows share (`WindowBuffers`): one or two executables a job."""

    def __init__(self, tables, device, *, sep_id: int = -1, **static):
        import jax

        from .. import native
        from ..ops import primitive

        self.tables, self.device, self.sep_id = tables, device, sep_id
        self.static = dict(static, sep_id=sep_id)
        self.stages = primitive.window_stages(tables, static["mode"])
        leaves, structure = jax.tree_util.tree_flatten(tables)
        # (the structure holds the tables' static fields, which become FFI attributes)
        self.options = (
            "encode_window",
            device,
            tuple(sorted(self.static.items())),
            structure,
            tuple((x.shape, x.dtype) for x in leaves),
        )
        self._plans = native.cpu if device.platform == "cpu" else native.cuda

    def scratch(self, calls: np.ndarray) -> int:
        """Workspace bytes the largest of these calls (int64[C, 6]) needs: on a GPU its rows,
        their counts and the kernel's arrays; the CPU handler keeps its own (1)."""
        from .. import native

        if self.device.platform == "cpu" or not len(calls):
            return 1
        return max(native.cpu.window_scratch_bytes(int(c[0]), int(c[1]), *self.stages) for c in calls)

    def _compile(self, shape):
        flat_bytes, entries, slots, workspace = shape
        flat, table, raw = _specs(
            self.device, ((flat_bytes,), np.uint8), ((2, entries), np.int32), ((slots,), np.int32)
        )
        step = device_functions().encode_window
        return step.lower(flat, table, self.tables, raw, workspace_bytes=workspace, **self.static).compile()

    def ahead(self, flat_bytes: int, entries: int, slots: int, workspace: int) -> tuple:
        """compile_ahead's (key, build) of one shape."""
        shape = (flat_bytes, entries, slots, workspace)
        return kept_on_disk((self.options, shape), functools.partial(self._compile, shape), self.device)

    def __call__(self, flat, table, raw, calls: np.ndarray, workspace: int):
        """raw with the calls (int64[C, 6], ffi/binding/window_ffi.h: rows, width, T, at,
        entry, docs) encoded into it; workspace: at least `scratch(calls)`."""
        run = compiled(*self.ahead(flat.size, table.shape[1], raw.size, workspace))
        self._plans.set_window_plan(
            flat.unsafe_buffer_pointer(), self.sep_id, np.ascontiguousarray(calls, np.int64)
        )
        return run(flat, table, self.tables, raw)


class CompiledReads:
    """A window's reads on the device, compiled ahead like its encode call: `gather` (values
    of raw at positions: the counts), `finalize` (the ids in input order, `dtype`), and the
    `zeros` a new raw starts as."""

    def __init__(self, device, dtype):
        self.device, self.dtype = device, dtype

    def gather_ahead(self, raw_slots: int, n: int):
        def build():
            return (
                device_functions()
                .gather.lower(*_specs(self.device, ((raw_slots,), np.int32), ((n,), np.int32)))
                .compile()
            )

        return kept_on_disk(("gather", self.device, raw_slots, n), build, self.device)

    def finalize_ahead(self, raw_slots: int, entries: int, size: int):
        def build():
            args = _specs(self.device, ((raw_slots,), np.int32), ((2, entries), np.int32))
            return device_functions().finalize.lower(*args, size=size, dtype=self.dtype).compile()

        key = ("finalize", self.device, raw_slots, entries, size, np.dtype(self.dtype))
        return kept_on_disk(key, build, self.device)

    def zeros_ahead(self, size: int):
        def build():
            import jax
            import jax.numpy as jnp

            on = jax.sharding.SingleDeviceSharding(self.device)
            return jax.jit(lambda: jnp.zeros(size, jnp.int32), out_shardings=on).lower().compile()

        return kept_on_disk(("zeros", self.device, size), build, self.device)

    def gather(self, raw, positions):
        return compiled(*self.gather_ahead(raw.size, positions.size))(raw, positions)

    def zeros(self, size: int):
        """A new `raw`: int32 zeros of `size` on the device."""
        return compiled(*self.zeros_ahead(size))()

    def finalize(self, raw, layout, size: int):
        return compiled(*self.finalize_ahead(raw.size, layout.shape[1], size))(raw, layout)
