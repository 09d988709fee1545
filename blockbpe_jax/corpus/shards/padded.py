"""The padded layout of the corpus job (`--format npz|npy`): per shard, ids int32[N, T] with
pad_id after each document's tokens, its true counts, input file and position in it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class PaddedWriter:
    """The padded layout: per shard ids int32[N, T] (pad_id after counts[i]), true counts,
    file_index, position; one .npz, or one .npy per array; `<prefix>manifest.json`."""

    keeps_ids = True  # add() keeps views of the ids until its shard is written

    def __init__(
        self, directory: Path, name: str, fmt: str, max_tokens: int | None, pad_id: int, shard_docs: int
    ):
        self.dir, self.name, self.fmt, self.max_tokens, self.pad_id = directory, name, fmt, max_tokens, pad_id
        self.shard_docs = shard_docs
        self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending = self.truncated = self.true_tokens = 0
        self.shards: list[dict] = []
        self.written: list[Path] = []

    def add(self, ids: np.ndarray, counts: np.ndarray, window) -> None:
        """As FlatWriter.add; `window` (types.Window) gives each document's input and position."""
        file_index = window.file_indices.astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        start = 0
        while start < len(counts):
            take = min(len(counts) - start, self.shard_docs - self.pending)
            sl = slice(start, start + take)
            self.rows.append(
                (
                    ids[offsets[start] : offsets[start + take]],
                    counts[sl],
                    file_index[sl],
                    window.positions[sl],
                )
            )
            self.pending += take
            start += take
            if self.pending == self.shard_docs:
                self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        counts = np.concatenate([r[1] for r in self.rows]).astype(np.int32)
        width = self.max_tokens or max(1, int(counts.max()))
        ids = np.full((len(counts), width), self.pad_id, dtype=np.int32)
        flat = np.concatenate([r[0] for r in self.rows])
        kept = np.minimum(counts, width)
        rows = np.repeat(np.arange(len(counts)), counts)
        cols = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
        keep = cols < width
        ids[rows[keep], cols[keep]] = flat[keep]
        arrays = dict(
            ids=ids,
            counts=counts,
            file_index=np.concatenate([r[2] for r in self.rows]),
            position=np.concatenate([r[3] for r in self.rows]).astype(np.int64),
        )
        stem = f"{self.name}{len(self.shards):05d}"
        if self.fmt == "npz":
            names = [f"{stem}.npz"]
            np.savez(self.dir / names[0], **arrays)
        else:
            names = [f"{stem}.{key}.npy" for key in arrays]
            for name, arr in zip(names, arrays.values()):
                np.save(self.dir / name, arr)
        self.written += [self.dir / n for n in names]
        self.shards.append(
            dict(files=names, documents=int(len(counts)), width=int(width), tokens=int(kept.sum()))
        )
        self.truncated += int((counts > width).sum()) if self.max_tokens else 0
        self.true_tokens += int(counts.sum())
        self.rows, self.pending = [], 0

    def finish(self, meta: dict) -> dict:
        self._flush()
        manifest = dict(
            **meta,
            format=self.fmt,
            pad_id=self.pad_id,
            max_tokens=self.max_tokens,
            shards=self.shards,
            arrays=dict(
                ids="int32[N, T] token ids, pad_id after counts[i] tokens",
                counts="int32[N] true token counts (> T: truncated to T)",
                file_index="int32[N] index into inputs",
                position="int64[N] line (lines, jsonl) or byte offset (chunk) "
                "of the document in its input; 0 for file",
            ),
        )
        manifest["documents"] = sum(s["documents"] for s in self.shards)
        manifest["tokens"] = self.true_tokens  # (shards' "tokens": those kept)
        manifest["truncated_documents"] = self.truncated
        (self.dir / f"{self.name}manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest

    def abort(self) -> None:
        for p in self.written:
            p.unlink(missing_ok=True)
