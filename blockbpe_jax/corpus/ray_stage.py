"""The corpus job as a Ray Data pipeline (optional extra `blockbpe_jax[ray]`): `EncodeBatch`, a
stage for `ds.map_batches` that hands a batch's Arrow string column to the engine as it is
(`encode_arrow`'s path) and adds a token column; `ShardSink`, which writes each block's tokens
as flat, Megatron or ArrayRecord shards named by their rows; and `encode_parquet`, the whole
job over parquet files on a Ray cluster, resumable.

The job cuts its inputs into units (consecutive row groups of one file, about `unit_bytes`),
numbered in input order; every row carries its unit and its row in the unit. Whatever blocks
Ray makes of them, and however often a task runs again, a block's tokens land in a part named
by its first (unit, row), written under a temporary name and renamed; a unit's parts, once they
cover its rows, become the shard `<prefix>_<unit>` (renamed, or merged when several). So every
document is in exactly one shard, a shard's bytes do not depend on how Ray cut the blocks, a
killed job run again encodes only the units without a shard, and its output is byte for byte
that of a job never killed. A part or shard is a data file (.bin, or .array_record) and an .idx
renamed after it (for ArrayRecord, the documents' flat offsets, which `ray_job` reads for the
sidecar's counts and then removes): an .idx that exists marks a complete one. The sidecar `<prefix>.json` (what `corpus.job.read_shards` or
`corpus.shards.megatron.read_megatron` read) is written last. One machine without Ray: the CLI.
"""

from __future__ import annotations

import os
import re
import uuid
from functools import partial
from pathlib import Path
from typing import Sequence

import numpy as np

from .shards.array_records import concat_records, write_records
from .shards.megatron import index_bytes, megatron_dtype
from .shards.megatron import merge as merge_megatron
from .token_column import TokenColumn
from .types import CorpusError
from .shards.flat import as_tokens, token_dtype

try:
    from ray.data import Datasink as _Datasink
except ImportError:  # (the stage and the planning work without Ray; the sink needs it)
    _Datasink = object

UNIT, ROW = "blockbpe_unit", "blockbpe_row"  # the columns that place a row in the job
# A unit's column bytes, at most (one row group may be more). The stage pays one synchronous
# encode, one copy of the ids back and one Arrow column per unit: small units are that cost
# over again (docs/performance.md, "The Ray stage's engine path"); a unit's ids on the device
# are about four times its text.
UNIT_BYTES = 256 << 20
FORMATS = ("megatron", "flat", "arrayrecord")
DATA_SUFFIX = {"megatron": ".bin", "flat": ".bin", "arrayrecord": ".array_record"}


class EncodeBatch(TokenColumn):
    """`ds.map_batches(EncodeBatch, fn_constructor_kwargs=dict(vocab=PATH), batch_format=
    "pyarrow", concurrency=N, num_gpus=1)`: each actor loads the vocabulary once; a batch's
    `column` (Arrow strings, no Python string per row) goes to `encode_arrow` and its ids come
    back as the column `output`, list<uint16> when the vocabulary has at most 65536 ids, else
    list<uint32>; every row's ids equal `encode_batch`'s (followed by the end-of-document id
    with append_eod).

    Args:
        vocab: a vocabulary file or folder (`Tokenizer.from_file`).
        column: the text column.
        output: the token column's name.
        keep_text: keep the text column (else it is dropped, to move less data).
        engine: encode_arrow's options (mode, allowed_special, batch_bytes, append_eod, ...).
    """

    def __init__(self, vocab: str, *, column="text", output="input_ids", keep_text=True, **engine):
        from ..tokenizer import Tokenizer

        super().__init__(Tokenizer.from_file(vocab), column, output, keep_text, **engine)


# --------------------------------------------------------------------------------------------
# Units: the job's plan
# --------------------------------------------------------------------------------------------


def plan_units(paths: Sequence[str | os.PathLike], column: str, unit_bytes: int = UNIT_BYTES) -> list[dict]:
    """The parquet inputs (files, or folders of them in path order) cut into units of
    consecutive row groups of about unit_bytes of the column, in input order.

    Args:
        paths: parquet files or folders.
        column: the text column.
        unit_bytes: a unit's uncompressed column bytes, at most (a row group is never cut).

    Returns:
        dicts of unit (its number), path, groups ([first, end) row groups) and rows.
    """
    import pyarrow.parquet as pq

    from .inputs.files import check_inputs

    units = []
    for p in check_inputs(paths):
        if p.suffix != ".parquet":
            raise CorpusError(f"{p}: the Ray job reads parquet files")
        meta = pq.ParquetFile(p).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if column not in names:
            raise CorpusError(f"{p}: no column {column!r}")
        ci = names.index(column)
        start, held, rows = 0, 0, 0
        for g in range(meta.num_row_groups):
            size = meta.row_group(g).column(ci).total_uncompressed_size
            if rows and held + size > unit_bytes:
                units.append(dict(unit=len(units), path=os.fspath(p), groups=[start, g], rows=rows))
                start, held, rows = g, 0, 0
            held, rows = held + size, rows + meta.row_group(g).num_rows
        if rows:  # (a file without rows has no unit, and no shard)
            units.append(
                dict(unit=len(units), path=os.fspath(p), groups=[start, meta.num_row_groups], rows=rows)
            )
    return units


def read_units(batch, column: str):
    """`map_batches` over a dataset of units (`plan_units`' dicts): their rows' column, with
    each row's unit and row in the unit.

    Args:
        batch: a pyarrow Table of units.
        column: the text column.

    Returns:
        a pyarrow Table of column, UNIT, ROW.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for u in batch.to_pylist():
        t = pq.ParquetFile(u["path"]).read_row_groups(list(range(*u["groups"])), columns=[column])
        n = t.num_rows
        t = t.append_column(UNIT, pa.array(np.full(n, u["unit"], np.int64)))
        tables.append(t.append_column(ROW, pa.array(np.arange(n, dtype=np.int64))))
    return pa.concat_tables(tables)


# --------------------------------------------------------------------------------------------
# Parts and shards
# --------------------------------------------------------------------------------------------


def shard_dtype(fmt: str, n_vocab: int) -> np.dtype:
    """The ids' dtype: flat and ArrayRecord shards' (uint16 up to 65536 ids) or Megatron's
    (int32 written as the same bytes of uint32)."""
    if fmt != "megatron":
        return token_dtype(n_vocab)
    return np.dtype("<u2") if megatron_dtype(n_vocab).itemsize == 2 else np.dtype("<u4")


def index_of(fmt: str, n_vocab: int, offsets: np.ndarray) -> bytes:
    """The .idx's bytes: Megatron's index, else the int64 offsets (flat; ArrayRecord's parts)."""
    return (
        index_bytes(megatron_dtype(n_vocab), offsets)
        if fmt == "megatron"
        else offsets.astype("<i8").tobytes()
    )


def _write_pair(data_path: Path, idx_path: Path, write_data, index: bytes) -> None:
    """Both files under temporary names, then renamed, the .idx last: a .idx that exists is a
    complete pair, whatever stopped the writer.

    Args:
        data_path: the data file (.bin or .array_record).
        idx_path: the .idx.
        write_data: writes the data file at the path it is given.
        index: the .idx's bytes.
    """
    tag = f".tmp-{uuid.uuid4().hex}"
    tmp_data, tmp_idx = data_path.with_name(data_path.name + tag), idx_path.with_name(idx_path.name + tag)
    try:
        write_data(tmp_data)
        tmp_idx.write_bytes(index)
        os.replace(tmp_data, data_path)
        os.replace(tmp_idx, idx_path)
    finally:
        tmp_data.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)


class ShardSink(_Datasink):
    """`ds.write_datasink(ShardSink(...))` for rows holding the token column, UNIT and ROW: each
    run of consecutive rows of one unit in a block is written as the part
    `<prefix>.parts/u<unit>_r<row>.bin/.idx` (.array_record/.idx for ArrayRecord; a task run
    again writes the same parts again). `consolidate` makes the shards of them.

    Args:
        out_prefix: DIR/NAME of the output.
        fmt: "flat", "megatron" or "arrayrecord".
        n_vocab: the vocabulary's size (the shards' dtype).
        tokens: the token column's name.
    """

    def __init__(self, out_prefix: str | os.PathLike, fmt: str, n_vocab: int, tokens: str = "input_ids"):
        if fmt not in FORMATS:
            raise CorpusError(f"format {fmt!r}: the Ray job writes {', '.join(FORMATS)} shards")
        self.prefix, self.fmt, self.n_vocab, self.tokens = os.fspath(out_prefix), fmt, n_vocab, tokens

    def write(self, blocks, ctx=None) -> None:
        for block in blocks:
            self.write_block(block)

    def write_block(self, table) -> None:
        """Writes one block's parts (a pyarrow Table)."""
        if not table.num_rows:
            return
        units = table.column(UNIT).to_numpy()
        rows = table.column(ROW).to_numpy()
        cuts = np.flatnonzero((np.diff(units) != 0) | (np.diff(rows) != 1)) + 1
        tokens = table.column(self.tokens).combine_chunks()
        ends = tokens.offsets.to_numpy().astype(np.int64)
        values = tokens.values.to_numpy()
        dtype = shard_dtype(self.fmt, self.n_vocab)
        parts = Path(f"{self.prefix}.parts")
        parts.mkdir(parents=True, exist_ok=True)
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), table.num_rows]):
            offsets = ends[a : b + 1] - ends[a]
            data = as_tokens(values[ends[a] : ends[b]], dtype)
            stem = parts / f"u{int(units[a]):06d}_r{int(rows[a]):010d}"
            if self.fmt == "arrayrecord":
                write_data = partial(write_records, data=data, offsets=offsets)
            else:
                write_data = partial(_write_bytes, data=data)
            _write_pair(
                stem.with_suffix(DATA_SUFFIX[self.fmt]),
                stem.with_suffix(".idx"),
                write_data,
                index_of(self.fmt, self.n_vocab, offsets),
            )

    def get_name(self) -> str:
        return "BlockBPEShards"


def _write_bytes(path: Path, data: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(memoryview(data).cast("B"))


def _pair_documents(fmt: str, idx_path: Path) -> int:
    if fmt != "megatron":
        return idx_path.stat().st_size // 8 - 1
    with open(idx_path, "rb") as f:
        return int.from_bytes(f.read(26)[18:26], "little")


def shard_names(out_prefix: str | os.PathLike, unit: int, fmt: str = "flat") -> tuple[Path, Path]:
    """A unit's shard: (its data file, its .idx)."""
    p = Path(out_prefix)
    return p.with_name(f"{p.name}_{unit:05d}{DATA_SUFFIX[fmt]}"), p.with_name(f"{p.name}_{unit:05d}.idx")


def consolidate(out_prefix: str | os.PathLike, units: list[dict], fmt: str) -> list[int]:
    """Makes the shard of every unit whose parts cover its rows (one part renamed, several
    merged), and removes those parts.

    Args:
        out_prefix: DIR/NAME of the output.
        units: the plan.
        fmt: "flat", "megatron" or "arrayrecord".

    Returns:
        the units still without a shard.
    """
    parts = Path(f"{os.fspath(out_prefix)}.parts")
    found: dict[int, dict[int, Path]] = {}
    for p in parts.glob("u*_r*.idx") if parts.is_dir() else ():
        m = re.fullmatch(r"u(\d+)_r(\d+)\.idx", p.name)
        if m:
            found.setdefault(int(m[1]), {})[int(m[2])] = p.with_suffix("")
    missing, suffix = [], DATA_SUFFIX[fmt]
    for u in units:
        k, data_path, idx_path = u["unit"], *shard_names(out_prefix, u["unit"], fmt)
        if idx_path.exists():
            continue
        chain, at = (
            [],
            0,
        )  # (any chain of parts from row 0 holds the unit's rows: each part's ids are those of its rows)
        while at < u["rows"] and at in found.get(k, {}):
            chain.append(found[k][at])
            at += _pair_documents(fmt, chain[-1].with_suffix(".idx"))
        if at != u["rows"] or (not chain and u["rows"]):
            missing.append(k)
            continue
        if len(chain) == 1:
            os.replace(chain[0].with_suffix(suffix), data_path)
            os.replace(chain[0].with_suffix(".idx"), idx_path)
        elif fmt == "megatron":
            tmp = data_path.with_name(f"{data_path.stem}.tmp-{uuid.uuid4().hex}")
            merge_megatron([os.fspath(c) for c in chain], tmp)
            os.replace(f"{tmp}.bin", data_path)
            os.replace(f"{tmp}.idx", idx_path)
        else:
            _concat_parts(chain, fmt, data_path, idx_path)
        for p in found.pop(k, {}).values():
            p.with_suffix(suffix).unlink(missing_ok=True)
            p.with_suffix(".idx").unlink(missing_ok=True)
    return missing


def _concat_parts(chain: list[Path], fmt: str, data_path: Path, idx_path: Path) -> None:
    """Flat or ArrayRecord parts joined into one shard: the .bin files copied (the records
    written again), the offsets shifted."""
    from .shards.megatron import _copy_file

    offsets, base = [np.zeros(1, np.int64)], 0
    for c in chain:
        idx = np.fromfile(c.with_suffix(".idx"), "<i8")
        offsets.append(idx[1:] + base)
        base += int(idx[-1])
    suffix = DATA_SUFFIX[fmt]
    tmp = data_path.with_name(f"{data_path.name}.tmp-{uuid.uuid4().hex}")
    if fmt == "arrayrecord":
        concat_records([c.with_suffix(suffix) for c in chain], tmp)
    else:
        with open(tmp, "wb") as out:
            for c in chain:
                with open(c.with_suffix(suffix), "rb") as src:
                    _copy_file(src, out, c.with_suffix(suffix).stat().st_size)
    os.replace(tmp, data_path)
    tmp = idx_path.with_name(f"{idx_path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_bytes(np.concatenate(offsets).astype("<i8").tobytes())
    os.replace(tmp, idx_path)  # (last: a shard's .idx marks it complete)
