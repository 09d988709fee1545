"""Megatron-LM's indexed dataset as a layout of the corpus job (`--format megatron`): the
MMIDIDX `.bin`/`.idx` pair that Megatron-LM's `IndexedDataset` (and NeMo, MaxText) read, its
writer, a streaming merge of several pairs into one, and a reader.

Layout, for `<prefix>` = DIR/NAME (shards end as flat shards do):
    NAME_00000.bin   the documents' ids back to back, little-endian uint16 when n_vocab < 65500
                     (Megatron's DType.optimal_dtype rule), else int32
    NAME_00000.idx   the index, all little-endian:
                       b"MMIDIDX\\x00\\x00", version u64 (1), dtype code u8 (8 uint16, 4 int32),
                       sequence count u64 (S), document count u64 (D = documents + 1),
                       sequence lengths int32[S] (tokens), sequence pointers int64[S] (bytes
                       into the .bin), document indices int64[D] (sequence k starts document j
                       when document_indices[j] == k; [0] == 0, [-1] == S)
    NAME.json        the sidecar (format blockbpe-megatron-v1), written last.
Megatron takes `DIR/NAME_00000` (no suffix) as a data path. Each document is one sequence
(an empty document: a sequence of 0 tokens), so S = documents and document j is sequence j:
GPTDataset reads sequence lengths by document index and expects that.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from ..types import CorpusError, VerifyError
from .flat import FlatWriter, sidecar_path

MEGATRON_FORMAT = "blockbpe-megatron-v1"
MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents: 34 bytes
# Megatron's DType enum: the code in the header names the .bin's dtype
DTYPE_CODES = {
    "uint8": 1,
    "int8": 2,
    "int16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 6,
    "float32": 7,
    "uint16": 8,
}
CHUNK = 1 << 22  # index entries converted at a time by merge (its memory: ~32 MiB)


def megatron_dtype(n_vocab: int) -> np.dtype:
    """The .bin's dtype as Megatron's preprocess_data picks it (`DType.optimal_dtype`): uint16
    when the vocabulary has fewer than 65500 ids, else int32.

    Args:
        n_vocab: the vocabulary's size (largest id + 1).

    Returns:
        little-endian uint16 or int32.
    """
    return np.dtype("<u2") if n_vocab < 65500 else np.dtype("<i4")


def index_bytes(dtype: np.dtype, offsets: np.ndarray) -> bytes:
    """The .idx of one pair, each document a sequence.

    Args:
        dtype: the .bin's dtype (uint16 or int32).
        offsets: int64 token offsets, one per document plus one, from 0.

    Returns:
        the file's bytes.
    """
    lengths = np.diff(offsets)
    if lengths.size and int(lengths.max()) >= 2**31:
        raise CorpusError(f"a document of {int(lengths.max())} tokens: Megatron's lengths are int32")
    n = len(lengths)
    head = _HEADER.pack(MAGIC, VERSION, DTYPE_CODES[dtype.name], n, n + 1)
    pointers = offsets[:-1].astype("<i8") * dtype.itemsize
    return b"".join(
        [head, lengths.astype("<i4").tobytes(), pointers.tobytes(), np.arange(n + 1, dtype="<i8").tobytes()]
    )


class _IndexOfOffsets:
    """What FlatWriter's shard thread writes as a shard's .idx (`offsets.tofile(path)`, once the
    shard's .bin is complete), standing in for the int64 offsets: the Megatron index instead."""

    def __init__(self, offsets: np.ndarray, dtype: np.dtype):
        self.offsets, self.dtype = offsets, dtype

    def tofile(self, path: Path) -> None:
        Path(path).write_bytes(index_bytes(self.dtype, self.offsets))


class MegatronWriter(FlatWriter):
    """Megatron pairs `<prefix>_<k>.bin`/`.idx`, written as flat shards are (the same threads,
    limits and sidecar), with Megatron's dtype and index. int32 ids are written as the engine's
    uint32 ids, which are the same bytes for ids below 2**31 (no copy)."""

    fmt = "megatron"

    def __init__(self, prefix: Path, n_vocab: int, shard_tokens: int, shard_docs: int | None):
        super().__init__(prefix, n_vocab, shard_tokens, shard_docs)
        self.megatron_dtype = megatron_dtype(n_vocab)
        self.dtype = np.dtype("<u2") if self.megatron_dtype.itemsize == 2 else np.dtype("<u4")

    def _finish_shard(self, shard, offsets: np.ndarray, idx_path: Path) -> None:
        super()._finish_shard(shard, _IndexOfOffsets(offsets, self.megatron_dtype), idx_path)

    def _layout(self) -> dict:
        return dict(
            format=MEGATRON_FORMAT,
            dtype=self.megatron_dtype.name,
            dtype_code=DTYPE_CODES[self.megatron_dtype.name],
            byteorder="little",
            index="Megatron-LM MMIDIDX version 1, one sequence per document",
        )

    def _close(self) -> None:
        super()._close()
        self.shards[-1]["prefix"] = self.shards[-1]["bin"][: -len(".bin")]  # (Megatron's data path)


# --------------------------------------------------------------------------------------------
# Reading a pair
# --------------------------------------------------------------------------------------------


class MegatronIndex(NamedTuple):
    """One pair's index, its arrays memory-mapped from the .idx."""

    idx_path: Path
    dtype: np.dtype
    lengths: np.ndarray  # int32[S] tokens per sequence
    pointers: np.ndarray  # int64[S] byte offsets into the .bin
    document_indices: np.ndarray  # int64[D]

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    @property
    def bin_bytes(self) -> int:
        """The .bin's size its index implies."""
        if not len(self.lengths):
            return 0
        return int(self.pointers[-1]) + int(self.lengths[-1]) * self.dtype.itemsize


def read_index(prefix: str | os.PathLike) -> MegatronIndex:
    """The index of the pair `<prefix>.bin`/`<prefix>.idx`, checked against its header, its
    size and its .bin (VerifyError naming the file otherwise).

    Args:
        prefix: the pair's path without suffix (what Megatron takes as a data path).

    Returns:
        its MegatronIndex.
    """
    idx_path, bin_path = Path(f"{os.fspath(prefix)}.idx"), Path(f"{os.fspath(prefix)}.bin")
    for p in (idx_path, bin_path):
        if not p.is_file():
            raise VerifyError(f"{p}: missing")
    with open(idx_path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size or head[:9] != MAGIC:
        raise VerifyError(f"{idx_path}: not a Megatron index (no MMIDIDX header)")
    _, version, code, n_seq, n_doc = _HEADER.unpack(head)
    names = {c: n for n, c in DTYPE_CODES.items()}
    if version != VERSION or code not in names:
        raise VerifyError(f"{idx_path}: version {version}, dtype code {code}: not one this reader knows")
    size = _HEADER.size + 12 * n_seq + 8 * n_doc
    if idx_path.stat().st_size != size:
        raise VerifyError(
            f"{idx_path}: {idx_path.stat().st_size} bytes, its header says {size} "
            "(truncated, or a multimodal index with sequence modes)"
        )
    raw = np.memmap(idx_path, dtype=np.uint8, mode="r")
    at = _HEADER.size
    lengths = raw[at : at + 4 * n_seq].view("<i4")
    pointers = raw[at + 4 * n_seq : at + 12 * n_seq].view("<i8")
    docs = raw[at + 12 * n_seq : size].view("<i8")
    index = MegatronIndex(idx_path, np.dtype(names[code]).newbyteorder("<"), lengths, pointers, docs)
    if n_doc < 1 or docs[0] != 0 or docs[-1] != n_seq:
        raise VerifyError(f"{idx_path}: document indices do not run from 0 to {n_seq} sequences")
    at = 0  # the sequences lie back to back from byte 0 (checked CHUNK at a time)
    for lo in range(0, n_seq, CHUNK):
        ends = at + np.cumsum(lengths[lo : lo + CHUNK], dtype=np.int64) * index.dtype.itemsize
        starts = np.concatenate([[at], ends[:-1]])
        bad = np.flatnonzero(pointers[lo : lo + CHUNK] != starts)
        if bad.size:
            raise VerifyError(f"{idx_path}: sequence {lo + int(bad[0])} does not follow the one before")
        at = int(ends[-1])
    if bin_path.stat().st_size != at:
        raise VerifyError(f"{bin_path}: {bin_path.stat().st_size} bytes, its index says {at}")
    return index


def pair_prefixes(prefix: str | os.PathLike) -> list[str]:
    """The pairs a prefix names: a corpus job's output (`<prefix>.json`, format
    blockbpe-megatron-v1): its shards in order; else the one pair `<prefix>.bin`/`.idx`.

    Args:
        prefix: DIR/NAME of a job's output, or a pair's path without suffix.

    Returns:
        the pairs' paths without suffix.
    """
    path = sidecar_path(prefix)
    if path.is_file() and not Path(f"{os.fspath(prefix)}.idx").is_file():
        meta = json.loads(path.read_text())
        if meta.get("format") != MEGATRON_FORMAT:
            raise CorpusError(f"{path}: not a Megatron sidecar (format is not {MEGATRON_FORMAT!r})")
        return [os.fspath(path.parent / s["bin"][: -len(".bin")]) for s in meta["shards"]]
    return [os.fspath(prefix)]


def read_megatron(prefix: str | os.PathLike) -> Iterator[np.ndarray]:
    """Every document's ids, in order (views of the memory-mapped .bin files).

    Args:
        prefix: DIR/NAME of a job's output (all its pairs), or one pair's path without suffix.

    Returns:
        an iterator of 1-D arrays in the pair's dtype.
    """
    for p in pair_prefixes(prefix):
        index = read_index(p)
        size = index.bin_bytes
        data = np.memmap(f"{p}.bin", dtype=index.dtype, mode="r") if size else np.zeros(0, index.dtype)
        # (read_index checked that the sequences lie back to back)
        ends = np.concatenate([index.pointers // index.dtype.itemsize, [size // index.dtype.itemsize]])
        for a, b in zip(index.document_indices[:-1].tolist(), index.document_indices[1:].tolist()):
            yield data[ends[a] : ends[b]]


# --------------------------------------------------------------------------------------------
# Merging pairs
# --------------------------------------------------------------------------------------------


def merge(prefixes: Sequence[str | os.PathLike], out_prefix: str | os.PathLike, *, overwrite=False) -> dict:
    """Concatenates Megatron pairs, in order, into `<out_prefix>.bin`/`.idx` (what Megatron's
    merge_datasets.py makes), streaming: the .bin files are copied by the kernel and the
    indices converted CHUNK entries at a time, so neither the ids nor the indices are held in
    memory. Inputs of another dtype, or a multimodal index, are refused.

    Args:
        prefixes: pairs' paths without suffix, or corpus-job outputs (DIR/NAME: their shards).
        out_prefix: the merged pair's path without suffix.
        overwrite: replace an existing output (else CorpusError).

    Returns:
        {"prefix", "dtype", "sequences", "documents", "tokens", "inputs"}.
    """
    pairs = [p for prefix in prefixes for p in pair_prefixes(prefix)]
    if not pairs:
        raise CorpusError("merge: no pairs given")
    indices = [read_index(p) for p in pairs]
    dtypes = {i.dtype.name for i in indices}
    if len(dtypes) > 1:
        raise CorpusError(f"merge: the pairs' dtypes differ ({', '.join(sorted(dtypes))})")
    out_bin, out_idx = Path(f"{os.fspath(out_prefix)}.bin"), Path(f"{os.fspath(out_prefix)}.idx")
    for p in (out_bin, out_idx):
        if p.exists() and not overwrite:
            raise CorpusError(f"{p}: output exists (use overwrite)")
        if any(p.exists() and p.samefile(f"{q}{p.suffix}") for q in pairs):
            raise CorpusError(f"{p}: the output is one of the inputs")
    out_bin.parent.mkdir(parents=True, exist_ok=True)
    dtype = indices[0].dtype
    n_seq = sum(len(i.lengths) for i in indices)
    n_doc = sum(len(i.document_indices) - 1 for i in indices) + 1
    try:
        with open(out_idx, "wb") as f:
            f.write(_HEADER.pack(MAGIC, VERSION, DTYPE_CODES[dtype.name], n_seq, n_doc))
            for i in indices:
                _write_chunks(f, i.lengths, 0)
            base = 0
            for i in indices:
                _write_chunks(f, i.pointers, base)
                base += i.bin_bytes
            f.write(np.zeros(1, "<i8").tobytes())
            base = 0
            for i in indices:
                _write_chunks(f, i.document_indices[1:], base)
                base += len(i.lengths)
        with open(out_bin, "wb") as out:
            for p, i in zip(pairs, indices):
                with open(f"{p}.bin", "rb") as src:
                    _copy_file(src, out, i.bin_bytes)
    except BaseException:
        out_bin.unlink(missing_ok=True)
        out_idx.unlink(missing_ok=True)
        raise
    return dict(
        prefix=os.fspath(out_prefix),
        dtype=dtype.name,
        sequences=n_seq,
        documents=n_doc - 1,
        tokens=sum(i.tokens for i in indices),
        inputs=pairs,
    )


def _write_chunks(f, values: np.ndarray, base: int) -> None:
    """values + base, written CHUNK at a time in values' dtype (the memmap read piecewise)."""
    for lo in range(0, len(values), CHUNK):
        part = values[lo : lo + CHUNK]
        f.write((part + part.dtype.type(base) if base else np.asarray(part)).tobytes())


def _copy_file(src, out, nbytes: int) -> None:
    """nbytes of src appended to out, by the kernel where it can (copy_file_range)."""
    out.flush()
    left = nbytes
    try:
        while left:
            n = os.copy_file_range(src.fileno(), out.fileno(), min(left, 1 << 30))
            if n == 0:
                break
            left -= n
    except (AttributeError, OSError):
        pass  # (a file system or platform without it: the rest copied by reads and writes)
    if left:
        src.seek(nbytes - left)
        out.seek(0, os.SEEK_END)
        while left:
            buf = src.read(min(left, 16 << 20))
            if not buf:
                raise CorpusError(f"{src.name}: shorter than its index says")
            out.write(buf)
            left -= len(buf)


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m blockbpe_jax.corpus.shards.megatron OUT IN...`: merges the pairs (or corpus-job
    outputs) IN into the pair OUT; 2 with one line on a bad input.

    Args:
        argv: the arguments (default: sys.argv[1:]).

    Returns:
        the exit status.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python3 -m blockbpe_jax.corpus.shards.megatron",
        description="Merge Megatron .bin/.idx pairs, in the order given, into one (streaming).",
    )
    parser.add_argument("output", help="the merged pair's path without suffix")
    parser.add_argument(
        "inputs", nargs="+", help="pairs' paths without suffix, or DIR/NAME of encode outputs"
    )
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        info = merge(args.inputs, args.output, overwrite=args.overwrite)
    except (CorpusError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{info['prefix']}: {info['documents']} documents, {info['tokens']} tokens ({info['dtype']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
