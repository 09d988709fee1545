"""A table's text column encoded into a token column through the corpus engine's Arrow path
(`Tokenizer.encode_arrow`: no Python string per row): what the Ray stage
(`corpus.ray_stage.EncodeBatch`, which loads its tokenizer from a path) and HF datasets' map
function (`compat.hf_datasets.EncodeColumn`) add."""

from __future__ import annotations

import numpy as np

from .shards.flat import token_dtype
from .types import CorpusError


def token_column(ids: np.ndarray, offsets: np.ndarray):
    """The ids as an Arrow list<uint16|uint32> column, row j = ids[offsets[j]:offsets[j + 1]],
    over the arrays' own memory.

    Args:
        ids: the documents' ids back to back (uint16 or uint32).
        offsets: int64 offsets, one per document plus one.

    Returns:
        a pyarrow ListArray.
    """
    import pyarrow as pa

    if offsets[-1] >= 2**31:
        raise CorpusError(f"a batch of {int(offsets[-1])} tokens: make the batches smaller")
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids))


class TokenColumn:
    """`column` (Arrow strings) of a pyarrow table encoded by `tok` and added as the column
    `output`, list<uint16> when the vocabulary has at most 65536 ids, else list<uint32>; every
    row's ids equal `encode_batch`'s.

    Args:
        tok: the Tokenizer.
        column: the text column.
        output: the token column's name.
        keep_text: keep the text column (else it is dropped, to move less data).
        engine: encode_arrow's options (mode, allowed_special, batch_bytes, ...).
    """

    def __init__(self, tok, column="text", output="input_ids", keep_text=True, **engine):
        self.tok, self.column, self.output, self.keep_text, self.engine = (
            tok,
            column,
            output,
            keep_text,
            engine,
        )

    def __call__(self, batch):
        """Args:
            batch: a pyarrow Table holding `column`.

        Returns:
            the table with the token column added.
        """
        import pyarrow as pa

        if batch.num_rows:
            ids, offsets = self.tok.encode_arrow(batch.column(self.column), **self.engine)
        else:
            ids, offsets = np.zeros(0, token_dtype(self.tok.vocab.n_vocab)), np.zeros(1, np.int64)
        tokens = token_column(ids, offsets)
        if not self.keep_text:
            batch = batch.drop_columns([self.column])
        return batch.append_column(pa.field(self.output, tokens.type), tokens)
