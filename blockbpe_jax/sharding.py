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
"""

from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from .ops import EncodeTables, Encoded, encode

__all__ = ["encode_sharded", "replicate"]

_shard_map = getattr(jax, "shard_map", None)
if _shard_map is None:  # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map as _shard_map


def replicate(tables: EncodeTables, mesh: jax.sharding.Mesh) -> EncodeTables:
    """The tables with one copy on every device of `mesh` (NamedSharding(mesh, P()))."""
    return jax.device_put(tables, NamedSharding(mesh, P()))


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def encode_sharded(data, lengths, tables, mesh: jax.sharding.Mesh, *, axis: str = "data",
                   **encode_kwargs) -> Encoded:
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
    if axis not in mesh.axis_names:
        raise ValueError(f"encode_sharded: mesh has axes {mesh.axis_names}, not {axis!r}")
    if not isinstance(tables, EncodeTables):
        tables = tables.tables(encode_kwargs.pop("allowed_special", None) or "none")
    n = mesh.shape[axis]
    if data.shape[0] % n:
        raise ValueError(f"encode_sharded: batch {data.shape[0]} is not a multiple of the "
                         f"{n} devices on mesh axis {axis!r}; pad it with empty rows (length 0)")
    rows = NamedSharding(mesh, P(axis))
    if _is_concrete(data):
        data = jax.device_put(data, rows)
    if _is_concrete(lengths):
        lengths = jax.device_put(lengths, rows)
    if all(_is_concrete(a) for a in jax.tree.leaves(tables)):
        tables = replicate(tables, mesh)

    def local(d, l, t):
        return tuple(encode(d, l, t, **encode_kwargs))

    ids, counts = _shard_map(local, mesh=mesh, in_specs=(P(axis), P(axis), P()),
                             out_specs=(P(axis), P(axis)))(data, lengths, tables)
    return Encoded(ids, counts)
