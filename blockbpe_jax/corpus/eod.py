"""The end-of-document id after every document (Megatron's `preprocess_data --append-eod`):
which id (`eod_id`), the ids with it appended (`with_eod`), and `AppendEod`, a writer of the
corpus job that appends it before handing the ids to the writer it wraps. The CLI, the corpus
job, `encode_arrow` (and through it the Ray stage and HF datasets) share them."""

from __future__ import annotations

import numpy as np

from .types import CorpusError


def eod_id(tok, append_eod) -> int | None:
    """The id to append after every document, or None.

    Args:
        tok: the Tokenizer.
        append_eod: False or None (nothing appended), True (the vocabulary's end-of-text
            special, as `Tokenizer.eot_token`), or an id below n_vocab.

    Returns:
        the id, or None.

    Raises:
        CorpusError: True for a vocabulary without an end-of-text special, or an id out of range.
    """
    if append_eod is None or append_eod is False:
        return None
    if append_eod is True:
        try:
            return int(tok.eot_token)
        except KeyError as e:
            raise CorpusError(f"append_eod: {e.args[0]}") from None
    if isinstance(append_eod, (int, np.integer)):
        n_vocab = tok.vocab.n_vocab
        if not 0 <= int(append_eod) < n_vocab:
            raise CorpusError(
                f"append_eod: id {int(append_eod)} is not a token of {tok.vocab.name} (0..{n_vocab - 1})"
            )
        return int(append_eod)
    raise CorpusError(f"append_eod: True, False or a token id, got {append_eod!r}")


def with_eod(ids: np.ndarray, counts: np.ndarray, eod: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents' ids back to back, `eod` inserted after each.

    Args:
        ids: the documents' ids back to back.
        counts: tokens per document.
        eod: the id to append.

    Returns:
        (ids, counts): a new array of ids.size + len(counts) ids in ids' dtype, counts + 1.
    """
    ends = np.cumsum(counts, dtype=np.int64)
    return np.insert(ids, ends, np.asarray(eod, ids.dtype)), np.asarray(counts) + 1


class AppendEod:
    """A corpus job writer (flat, Megatron, ArrayRecord, padded, in memory) whose documents
    each end with `eod`: `add` inserts it into a copy of the window's ids and hands that on;
    everything else is the wrapped writer's.

    Args:
        writer: the writer to wrap.
        eod: the id to append.
    """

    keeps_ids = False  # (add copies the ids: the engine may reuse their buffer once it returns)

    def __init__(self, writer, eod: int):
        self.writer, self.eod = writer, eod
        self.writes_later = getattr(writer, "writes_later", False)
        self.writes_files = getattr(writer, "writes_files", True)

    def add(self, ids: np.ndarray, counts: np.ndarray, window, *done) -> None:
        """As the wrapped writer's add (with `done` where it writes later)."""
        ids, counts = with_eod(ids, counts, self.eod)
        self.writer.add(ids, counts, window, *done)

    def __getattr__(self, name):  # finish, abort, drain, shards, ...: the wrapped writer's
        return getattr(self.writer, name)
