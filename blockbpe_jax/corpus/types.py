"""The types the corpus job's readers, engine and writers share: its errors, the rule of its
counting options (`check_positive`) and a window of documents (`Window`, what a reader hands
to the engine and the engine to a writer)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class CorpusError(ValueError):
    """A bad input or output of the corpus job; the message is one line naming the file (and
    line or document)."""


class VerifyError(CorpusError):
    """The shards do not hold what they should (corrupt file, ids that differ from the
    reference)."""


def check_positive(*named: tuple[str, object]) -> None:
    """For each (name, value) given (not None): TypeError unless an int, ValueError unless 1 or
    more. The job's sizes and counts (window bytes, batch bytes, documents per call or shard,
    tokens per shard, lengths): a zero or negative one would mean nothing, or never end."""
    for name, value in named:
        if value is None:
            continue
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")


class Doc(NamedTuple):
    data: bytes
    file_index: int
    position: int  # 1-based line for lines/jsonl, byte offset for chunk, 0 for file
    consumed: int  # input bytes this document accounts for (progress)


class Window(NamedTuple):
    """Consecutive documents of one input file (or of several small ones read together),
    back to back in one buffer (no Python object per document): what the reader hands to the
    encoder."""

    data: np.ndarray  # uint8: the documents' UTF-8 bytes, back to back (each then sep_len bytes)
    offsets: np.ndarray  # int64[n + 1]: document i is data[offsets[i]:offsets[i + 1] - sep_len]
    positions: np.ndarray  # int64, per document: as Doc.position
    file_index: int | np.ndarray  # the input's index, or int64 per document (small inputs read together)
    consumed: int  # input bytes these documents account for (progress)
    sep_len: int = 0  # the separator's bytes after each document (corpus.engine.JoinInto)
    slot: object = None  # the engine's buffer that `data` is in (corpus.engine.JoinInto)

    @classmethod
    def of(cls, blobs: Sequence[bytes], positions: np.ndarray, file_index: int, consumed: int) -> "Window":
        offsets = np.zeros(len(blobs) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, blobs), np.int64, count=len(blobs)), out=offsets[1:])
        return cls(np.frombuffer(b"".join(blobs), np.uint8), offsets, positions, file_index, consumed)

    @property
    def ndocs(self) -> int:
        return len(self.offsets) - 1

    @property
    def file_indices(self) -> np.ndarray:
        """The input of each document."""
        return self.file_index if np.ndim(self.file_index) else np.full(self.ndocs, self.file_index, np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets) - self.sep_len

    @property
    def blobs(self) -> list[bytes]:
        """Each document as bytes (Python objects: for the slow paths only)."""
        raw, gap = self.data.tobytes(), self.sep_len
        return [raw[a : b - gap] for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]
