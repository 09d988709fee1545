"""HF `datasets`: a text column's ids added as a column, through the corpus engine's Arrow path.

`encode_dataset(tok, ds, "text")` (`Tokenizer.encode_dataset`) is `ds.map` over Arrow batches
(`with_format("arrow")`): each batch's column, a pyarrow ChunkedArray over the dataset's own
buffers, goes to `corpus.job.encode_arrow` as it is, so no Python string is made per row, and the
ids come back as one list<int32> Arrow column. It is `map`, so the
result is a new Dataset with the column added, cached on disk where the dataset is (its
fingerprint hashes `EncodeColumn`, which pickles by the tokenizer's content: the same
vocabulary loaded again hits the cache), and `num_proc` splits the rows over processes.
`EncodeColumn` is the map function itself, for a caller's own `map` (or `IterableDataset.map`).
"""

from __future__ import annotations

import numpy as np

from ..corpus.token_column import TokenColumn
from ..corpus.types import CorpusError

INPUT_IDS = "input_ids"
BATCH_ROWS = 4096  # rows per map batch: each engine call costs about a millisecond of setup
ID_TYPES = ("int32", "int64", "uint32", "uint16")


class EncodeColumn(TokenColumn):
    """A batched map function for Arrow batches: `ds.with_format("arrow").map(EncodeColumn(tok),
    batched=True)` adds `input_ids`, every row's ids equal to `encode_batch`'s (the Ray stage's
    `EncodeBatch`'s `TokenColumn` over a Tokenizer already loaded). It pickles (and hashes, for datasets' cache)
    by the tokenizer's content.

    Args:
        tok: the Tokenizer.
        column: the text column (string or large_string).
        output: the ids column's name.
        keep_text: keep the text column.
        dtype: the ids' type, one of ID_TYPES (int32 by default; uint16 needs a vocabulary of
            at most 65536 ids).
        engine: encode_arrow's options (mode, allowed_special, max_len, batch_bytes, device,
            append_eod: the end-of-text id, or an explicit id, after every row's ids).
    """

    def __init__(
        self, tok, column="text", output=INPUT_IDS, *, keep_text=True, dtype="int32", **engine
    ):  # (the Ray stage's EncodeBatch loads its vocabulary from a path: an actor's own copy)
        if dtype not in ID_TYPES:
            raise ValueError(f"encode_dataset: dtype must be one of {ID_TYPES}, got {dtype!r}")
        if dtype == "uint16" and tok.vocab.n_vocab > 1 << 16:
            raise ValueError(f"encode_dataset: dtype uint16 cannot hold {tok.vocab.n_vocab} ids")
        self.tok, self.column, self.output, self.keep_text = tok, column, output, keep_text
        self.dtype, self.engine = dtype, engine

    def __call__(self, batch, indices=None):
        """Args:
            batch: a pyarrow Table holding `column` (map's Arrow format hands the whole batch,
                and keeps only the table returned).
            indices: the rows' indices in the dataset (map's `with_indices`), to name a None row.

        Returns:
            the table with the ids column (list<dtype>) added.
        """
        import pyarrow as pa

        column = batch.column(self.column)
        if column.null_count:
            k = int(np.flatnonzero(np.asarray(column.is_null()))[0])
            raise CorpusError(
                f"encode_dataset: row {k if indices is None else indices[k]} of column "
                f"{self.column!r} is None (filter those rows or fill them first: "
                f"ds.filter(lambda t: t is not None, input_columns={self.column!r}))"
            )
        kind = pa.list_(pa.from_numpy_dtype(np.dtype(self.dtype)))  # (the stage's: uint16|uint32)
        out = super().__call__(batch)
        return out.set_column(
            out.num_columns - 1, pa.field(self.output, kind), out.column(self.output).cast(kind)
        )


def encode_dataset(
    tok,
    ds,
    column: str = "text",
    *,
    output: str = INPUT_IDS,
    dtype: str = "int32",
    batch_size: int = BATCH_ROWS,
    num_proc: int | None = None,
    keep_text: bool = True,
    map_kwargs: dict | None = None,
    **engine,
):
    """`ds` with the ids of `column` added as `output` (`EncodeColumn` through `ds.map`).

    Args:
        tok: the Tokenizer.
        ds: a datasets.Dataset or DatasetDict (each split encoded).
        column: the text column (string or large_string; a None row raises CorpusError
            naming it).
        output: the new column's name (one that exists is refused).
        dtype: the ids' type: int32 (default), int64, uint32 or uint16.
        batch_size: rows per map batch.
        num_proc: map's processes (each encodes its rows with its own engine; for CPU hosts
            whose process has not started JAX: on a GPU, leave it None).
        keep_text: keep the text column.
        map_kwargs: more of `Dataset.map`'s options (desc, cache_file_name, load_from_cache_file,
            keep_in_memory, ...).
        engine: encode_arrow's options (mode, allowed_special, max_len, batch_bytes, device,
            append_eod: the end-of-text id, or an explicit id, after every row's ids).

    Returns:
        a new Dataset (or DatasetDict) in `ds`'s format, with the column added.
    """
    import datasets
    import pyarrow as pa

    if isinstance(ds, datasets.DatasetDict):
        kw = dict(output=output, dtype=dtype, batch_size=batch_size, num_proc=num_proc, keep_text=keep_text)
        return datasets.DatasetDict(
            {k: encode_dataset(tok, v, column, **kw, map_kwargs=map_kwargs, **engine) for k, v in ds.items()}
        )
    if not isinstance(ds, datasets.Dataset):
        raise TypeError(
            f"encode_dataset: expected a datasets.Dataset or DatasetDict, got {type(ds).__name__} (an "
            f"IterableDataset: ds.with_format('arrow').map(EncodeColumn(tok), batched=True))"
        )
    if column not in ds.column_names:
        raise KeyError(f"encode_dataset: no column {column!r} (the columns: {ds.column_names})")
    if output in ds.column_names:
        raise ValueError(f"encode_dataset: the dataset has a column {output!r} already (output=...)")
    kind = ds.data.schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise TypeError(f"encode_dataset: column {column!r} is {kind}, not a string column")
    fn = EncodeColumn(tok, column, output, keep_text=keep_text, dtype=dtype, **engine)
    if len(ds) == 0:  # (map calls no function on no rows, so the column would be missing)
        out = ds.add_column(output, [], feature=datasets.List(datasets.Value(dtype)))
        return out.remove_columns(column) if not keep_text else out
    out = ds.with_format("arrow").map(
        fn,
        batched=True,
        batch_size=batch_size,
        with_indices=True,
        num_proc=num_proc,
        **(map_kwargs or {}),
    )
    form = ds.format  # (its columns: every column unless the caller chose some)
    columns = form["columns"]
    if columns == ds.column_names:
        columns = None
    elif columns is not None:
        columns = [c for c in columns if c in out.column_names] + [output]
    return out.with_format(form["type"], columns, form["output_all_columns"], **form["format_kwargs"])
