"""Batch-sharded `encode` over several devices: each device tokenizes its own rows.

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    out = encode_sharded(data, lengths, tok.tables(), mesh, max_tokens=1024)
    # out.ids / out.counts are sharded like data's rows: NamedSharding(mesh, P("data"))

Why shard_map: `encode` is an XLA custom call, and XLA's SPMD partitioner does not know how to
split a custom call, so `jax.jit(encode)` over batch-sharded inputs (NamedSharding(mesh,
P("data")) on data and lengths) is compiled as one replicated call: the inputs are
all-gathered and every device tokenizes the whole batch. Wrapping the call in `jax.shard_map`
tells XLA that rows are independent: each device runs the primitive on its local shard with
its own replica of the tables, and nothing is gathered. Inside a larger jitted step whose
inputs are NamedSharding'd by batch, call `encode_sharded` there (with traced inputs it only
builds the shard_map; pass the tables replicated, `replicate(tables, mesh)`, or as arguments
of the jitted step).

Multi-process jobs (`jax.distributed.initialize`): every process calls, with the same static
arguments,

    mine = process_shard(all_texts)                    # or the texts this host read itself
    out = encode_process_local(mine, tok, mesh, max_len=4096, max_tokens=1024)
    # out.ids: the GLOBAL int32[B, T] over all processes, NamedSharding(mesh, P("data"))

Each process packs its own texts, tokenizes them on its own devices (no cross-process
computation) and the global arrays are assembled with `jax.make_array_from_process_local_data`
/ `jax.make_array_from_single_device_arrays`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from .primitive import EncodeTables, Encoded, encode
from ..text_rows import pack_strings

__all__ = ["encode_sharded", "replicate", "encode_process_local", "process_shard", "run_local_processes"]

_shard_map = getattr(jax, "shard_map", None)
if _shard_map is None:  # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map as _shard_map


def replicate(tables: EncodeTables, mesh: jax.sharding.Mesh) -> EncodeTables:
    """The tables with one copy on every device of `mesh` (NamedSharding(mesh, P()))."""
    return jax.device_put(tables, NamedSharding(mesh, P()))


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def encode_sharded(
    data, lengths, tables, mesh: jax.sharding.Mesh, *, axis: str = "data", **encode_kwargs
) -> Encoded:
    """`encode` with the batch split over the mesh axis `axis`; tables replicated.

    Args:
      data, lengths: as for `encode` (uint8[B, L], int32[B]); B must be a multiple of the axis
        size. Concrete arrays are placed batch-sharded first (a no-op if they already are).
      tables: `EncodeTables` (`tok.tables(allowed_special)`) or a `Tokenizer` (then
        `allowed_special=` is taken from encode_kwargs).
      mesh: a `jax.sharding.Mesh` with the axis `axis` (other axes: the batch is replicated
        over them).
      **encode_kwargs: `max_tokens` (required), `pad_id`, `mode`, `block_size`,
        `check_lengths`, as for `encode`.

    Returns:
      Encoded(ids int32[B, T], counts int32[B]) sharded as NamedSharding(mesh, P(axis)).
    """
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"encode_sharded: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"encode_sharded: mesh has axes {mesh.axis_names}, not {axis!r}")
    if not isinstance(tables, EncodeTables):
        tables = tables.tables(encode_kwargs.pop("allowed_special", None) or "none")
    n = mesh.shape[axis]
    if data.shape[0] % n:
        raise ValueError(
            f"encode_sharded: batch {data.shape[0]} is not a multiple of the "
            f"{n} devices on mesh axis {axis!r}; pad it with empty rows (length 0)"
        )
    rows = NamedSharding(mesh, P(axis))
    if _is_concrete(data):
        data = jax.device_put(data, rows)
    if _is_concrete(lengths):
        lengths = jax.device_put(lengths, rows)
    if all(_is_concrete(a) for a in jax.tree.leaves(tables)):
        tables = replicate(tables, mesh)

    def local(d, l, t):
        return tuple(encode(d, l, t, **encode_kwargs))

    ids, counts = _shard_map(
        local, mesh=mesh, in_specs=(P(axis), P(axis), P()), out_specs=(P(axis), P(axis))
    )(data, lengths, tables)
    return Encoded(ids, counts)


def process_shard(
    items: Sequence, *, process_index: int | None = None, process_count: int | None = None
) -> Sequence:
    """This process's contiguous share of a global list: ceil(n / P) items for each process
    (process k: items[k*c:(k+1)*c]; the last ones may get fewer, or none)."""
    k = jax.process_index() if process_index is None else process_index
    p = jax.process_count() if process_count is None else process_count
    c = -(-len(items) // p)
    return items[k * c : (k + 1) * c]


def encode_process_local(
    texts,
    tables,
    mesh: jax.sharding.Mesh,
    *,
    max_tokens: int,
    max_len: int | None = None,
    rows: int | None = None,
    axis: str = "data",
    **encode_kwargs,
) -> Encoded:
    """Each process encodes its local texts on its local devices; returns the GLOBAL batch.

    Call it in every process of a `jax.distributed` job with the same `max_len`, `max_tokens`,
    `rows` and mesh (shapes are static: a process cannot learn the others' sizes without a
    collective; differing values give a shape error or a hang, not a result).

    Args:
      texts: this process's strings (str/bytes), packed with `pack_strings(max_len=max_len)`;
        or a tuple (data uint8[n, max_len], lengths int32[n]) of host arrays already packed.
      tables: a `Tokenizer` (tables on each local device from its per-device cache;
        `allowed_special=` from encode_kwargs) or `EncodeTables` (copied to each local device).
      mesh: a mesh over the devices of all processes with the axis `axis`; the rows of this
        process go to its devices along `axis` (as `make_array_from_process_local_data` lays
        them out; other axes replicate them).
      max_tokens, max_len: static widths T and L (max_len required for strings).
      rows: local rows (default: len(texts)); the local batch is padded with empty rows
        (length 0, count 0) up to it, and it must be a multiple of this process's devices
        along `axis`.
      **encode_kwargs: `pad_id`, `mode`, `block_size`, `check_lengths`, as for `encode`.

    Returns:
      Encoded(ids int32[B, T], counts int32[B]), global arrays sharded as
      NamedSharding(mesh, P(axis)); B = rows x the processes along `axis`. With `make_mesh`
      (devices ordered by process), process k's local row j is global row k * rows + j.
      Read another process's rows with `multihost_utils.process_allgather`.
    """
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"encode_process_local: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"encode_process_local: mesh has axes {mesh.axis_names}, not {axis!r}")
    if isinstance(texts, tuple) and len(texts) == 2 and all(isinstance(a, np.ndarray) for a in texts):
        data, lengths = texts
        if max_len is not None and data.shape[1] != max_len:
            raise ValueError(
                f"encode_process_local: data is {data.shape[1]} bytes wide, not max_len={max_len}"
            )
    else:
        if max_len is None:
            raise ValueError(
                "encode_process_local: max_len is required for strings (every "
                "process must pack to the same width)"
            )
        data, lengths = pack_strings(list(texts), max_len=max_len)
    n = data.shape[0]
    rows = n if rows is None else rows
    if n > rows:
        raise ValueError(f"encode_process_local: {n} local texts exceed rows={rows}")
    if n < rows:  # empty rows: length 0, count 0
        data = np.concatenate([data, np.zeros((rows - n, data.shape[1]), data.dtype)])
        lengths = np.concatenate([lengths, np.zeros(rows - n, lengths.dtype)])
    sharding = NamedSharding(mesh, P(axis))
    gdata = jax.make_array_from_process_local_data(sharding, data)
    glens = jax.make_array_from_process_local_data(sharding, lengths)
    allowed = encode_kwargs.pop("allowed_special", None) or "none"
    ids, counts = [], []
    for sd, sl in zip(gdata.addressable_shards, glens.addressable_shards):
        assert sd.device == sl.device and sd.index[0] == sl.index[0]
        t = (
            jax.device_put(tables, sd.device)
            if isinstance(tables, EncodeTables)
            else tables.tables(allowed, device=sd.device)
        )
        out = encode(sd.data, sl.data, t, max_tokens=max_tokens, **encode_kwargs)
        ids.append(out.ids)
        counts.append(out.counts)
    b = gdata.shape[0]
    return Encoded(
        jax.make_array_from_single_device_arrays((b, max_tokens), sharding, ids),
        jax.make_array_from_single_device_arrays((b,), sharding, counts),
    )


def free_port() -> int:
    """A TCP port free on localhost now (for the coordinator of a local multi-process job)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_local_processes(
    argv_for: Callable[[int, int], list[str]],
    n: int,
    *,
    log_dir,
    timeout_s: float,
    env_for: Callable[[int], dict] | None = None,
):
    """Starts n processes on this machine, `argv_for(k, port)` each (port: a free coordinator
    port for `jax.distributed.initialize`), and waits for all of them.

    A process that fails leaves the others blocked in a collective, so on a timeout every one
    still running is killed. Returns (exit codes, or None after a timeout; the last 3000
    characters of each process's output, from log_dir/process{k}.log)."""
    port = free_port()
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    try:
        for k in range(n):
            log = open(log_dir / f"process{k}.log", "w+")
            logs.append(log)
            env = env_for(k) if env_for is not None else dict(os.environ)
            procs.append(subprocess.Popen(argv_for(k, port), env=env, stdout=log, stderr=subprocess.STDOUT))
        codes = [p.wait(timeout=timeout_s) for p in procs]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = []
    for log in logs:
        log.seek(0)
        text.append(log.read()[-3000:])
        log.close()
    return codes, text


def exit_distributed(code: int, *, timeout_s: float = 30.0):
    """Ends a process of a multi-process job: `jax.distributed.shutdown()`, then exits with code.

    Call it after the job's last collective (e.g. `multihost_utils.sync_global_devices`) and
    after writing results. The runtime's teardown (shutdown, the Gloo threads at interpreter
    exit) can block when a peer leaves first, with all the work done; the shutdown is given
    timeout_s, and the process leaves through `os._exit`, which waits for no thread."""
    sys.stdout.flush()
    sys.stderr.flush()
    t = threading.Thread(target=jax.distributed.shutdown, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        print(f"jax.distributed.shutdown() still blocked after {timeout_s} s; exiting", file=sys.stderr)
        sys.stderr.flush()
    os._exit(code)
