"""The fuzz campaign's checking (benchmarks/fuzz_campaign.py), in the process that holds the
device: a family's strings, as the pool's chunks bring them (benchmarks/fuzz_chunks.py),
gathered into device batches of one (variant, width), encoded, and compared with their
references on the device; the mismatches described, and the family's tallies.

A batch is about `batch_bytes` of rows of one width (the last one of a group padded with empty
rows), so a family compiles one encode per (mode, width). The references travel with it as
their ids end to end, padded to a power of two (few shapes), and `compare_rows` returns one
flag and the count per row; only a mismatching row's ids come back. Device calls are
asynchronous: PENDING_BATCHES batches are in flight before the oldest is read.
"""

from __future__ import annotations

import base64
import collections
import time

import jax
import jax.numpy as jnp
import numpy as np

import blockbpe_jax as bb
import fuzz_chunks
from fuzz_families import Family

WIDTHS = fuzz_chunks.WIDTHS
KEEP_MISMATCHES = 10
MAX_ROWS = 65536  # rows of a batch of short strings
PENDING_BATCHES = 4  # device batches in flight before this process waits for the oldest


def row_mismatches(ids: np.ndarray, counts: np.ndarray, refs: list[list[int]]) -> np.ndarray:
    """Indices of the rows whose count is not len(ref), whose ids (as many as the output
    holds) are not ref's, or whose padding after them is not 0 (encode's pad_id). On the host:
    the rows a normalizing family encodes on the host path."""
    T = ids.shape[1]
    ids = ids[: len(refs)]
    counts = counts[: len(refs)].astype(np.int64)
    ref_counts = np.fromiter(map(len, refs), np.int64, len(refs))
    same_count = counts == ref_counts
    kept = np.minimum(np.where(same_count, ref_counts, 0), T)
    ours = ids[np.arange(T)[None, :] < kept[:, None]]
    theirs = np.fromiter(
        (i for r, k in zip(refs, kept.tolist()) for i in r[:k]),
        np.int64,
        int(kept.sum()),
    )
    bad = ~same_count | ((ids != 0) & (np.arange(T)[None, :] >= np.clip(counts, 0, T)[:, None])).any(axis=1)
    bad[np.repeat(np.arange(len(refs)), kept)[ours != theirs]] = True
    return np.flatnonzero(bad)


@jax.jit
def compare_rows(ids, counts, ref_counts, ref_offsets, ref_ids, corrupt):
    """On the device: int32[2, B] (row_mismatches' verdict per row, 1 = mismatch; the
    counts), and the ids as compared (`corrupt`: the first non-empty row's first id plus 1).
    ref_ids holds row b's reference at ref_offsets[b] (ref_counts[b] ids), then padding."""
    B, T = ids.shape
    first = jnp.argmax(counts > 0)
    ids = ids.at[first, 0].add(jnp.where(corrupt & (counts[first] > 0), 1, 0).astype(ids.dtype))
    j = jnp.arange(T, dtype=jnp.int32)
    at = jnp.clip(ref_offsets[:, None] + j[None, :], 0, ref_ids.shape[0] - 1)
    want = jnp.where(j[None, :] < ref_counts[:, None], ref_ids[at], 0)
    bad = (counts != ref_counts) | jnp.any(ids != want.astype(ids.dtype), axis=1)
    return jnp.stack([bad.astype(jnp.int32), counts.astype(jnp.int32)]), ids


def describe(key: str, variant, width: int, index: int, raw: bytes, ours, ref) -> dict:
    """A mismatch as the JSON keeps it: enough to reproduce it (the input, base64; the
    string's number for fuzz_chunks.regenerate) and to see it."""
    k = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return {
        "family": key,
        "variant": variant.name,
        "mode": variant.mode,
        "allowed": variant.allowed if isinstance(variant.allowed, str) else sorted(variant.allowed),
        "width": width,
        "string": index,
        "bytes": len(raw),
        "input_base64": base64.b64encode(raw).decode("ascii"),
        "count": len(ours),
        "reference_count": len(ref),
        "first_difference": k,
        "ours": [int(x) for x in ours[max(0, k - 3) : k + 5]],
        "reference": [int(x) for x in ref[max(0, k - 3) : k + 5]],
    }


class Batch:
    """Strings of one (variant, width) with their references, gathered from chunks' groups."""

    def __init__(self):
        self.index, self.strings, self.ref_counts, self.ref_ids = [], [], [], []
        self.size = 0

    def add(self, group: fuzz_chunks.Group, lo: int, hi: int) -> None:
        """Strings lo..hi of `group`."""
        offsets = np.concatenate([[0], np.cumsum(group.ref_counts, dtype=np.int64)])
        self.index.append(group.index[lo:hi])
        self.strings += group.strings[lo:hi]
        self.ref_counts.append(group.ref_counts[lo:hi])
        self.ref_ids.append(group.ref_ids[offsets[lo] : offsets[hi]])
        self.size += hi - lo

    def refs(self, k: int, counts: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> list[int]:
        return ids[offsets[k] : offsets[k] + counts[k]].tolist()


class FamilyCheck:
    """One family's checking in this process: its device tables, its batches being gathered
    and in flight, and its tallies."""

    def __init__(self, family: Family, n: int, device, batch_bytes: int, corrupt: bool):
        self.family, self.n, self.device, self.corrupt = family, n, device, corrupt
        self.variants = {v.name: v for v in family.variants}
        self.tables = {v.name: family.tok.tables(v.allowed, device=device) for v in family.variants}
        self.rows = {w: max(16, min(MAX_ROWS, batch_bytes // w)) for w in WIDTHS}
        self.gathering: dict = collections.defaultdict(Batch)
        self.in_flight: collections.deque = collections.deque()
        self._fns: dict = {}
        self.t_start = time.perf_counter()
        self.chunks = 0
        self.tally = collections.Counter()
        self.per_variant: dict = collections.defaultdict(collections.Counter)
        self.first: list[dict] = []

    def _encode_fn(self, mode: str, T: int):
        if (mode, T) not in self._fns:
            self._fns[mode, T] = jax.jit(
                lambda d, l, tabs: tuple(bb.encode(d, l, tabs, max_tokens=T, mode=mode, check_lengths=False))
            )
        return self._fns[mode, T]

    def add_chunk(self, chunk: fuzz_chunks.Chunk) -> None:
        """A chunk's groups into their batches; every batch filled goes to the device."""
        self.chunks += 1
        self.tally["generate_s"] += chunk.generate_s
        for name, s in chunk.reference_s.items():
            self.tally["reference_s"] += s
            self.per_variant[name]["reference_s"] += s
        for group in chunk.groups:
            lo, n = 0, len(group.strings)
            while lo < n:
                batch = self.gathering[group.variant, group.width]
                hi = min(n, lo + self.rows[group.width] - batch.size)
                batch.add(group, lo, hi)
                lo = hi
                if batch.size == self.rows[group.width]:
                    self._send(group.variant, group.width, self.gathering.pop((group.variant, group.width)))

    def _send(self, name: str, width: int, batch: Batch) -> None:
        """A batch to the device (encode, then compare), asynchronously."""
        t = time.perf_counter()
        variant, rows, T = self.variants[name], self.rows[width], width + 1
        strings = batch.strings + [b""] * (rows - batch.size)
        data, lengths = bb.pack_strings(strings, max_len=width)
        ref_counts = np.zeros(rows, np.int32)
        ref_counts[: batch.size] = np.concatenate(batch.ref_counts)
        flat = np.concatenate(batch.ref_ids)
        ref_ids = np.zeros(max(1 << 16, 1 << int(len(flat)).bit_length()), np.int32)  # few shapes
        ref_ids[: len(flat)] = flat
        ref_offsets = np.zeros(rows, np.int32)
        np.cumsum(ref_counts[:-1], out=ref_offsets[1:])
        data, lengths, ref_counts_d, ref_offsets_d, ref_ids_d = jax.device_put(
            (data, lengths, ref_counts, ref_offsets, ref_ids), self.device
        )
        ids, counts = self._encode_fn(variant.mode, T)(data, lengths, self.tables[name])
        verdict, ids = compare_rows(ids, counts, ref_counts_d, ref_offsets_d, ref_ids_d, self.corrupt)
        self.in_flight.append((name, width, batch, verdict, ids, ref_counts, ref_offsets, flat))
        self.tally["send_s"] += time.perf_counter() - t
        while len(self.in_flight) > PENDING_BATCHES:
            self._receive()

    def _receive(self) -> None:
        """The oldest batch in flight: its verdict read, its mismatches described."""
        name, width, batch, verdict, ids_d, ref_counts, ref_offsets, flat = self.in_flight.popleft()
        t = time.perf_counter()
        verdict = np.asarray(verdict)
        self.tally["wait_s"] += time.perf_counter() - t
        n, variant, T = batch.size, self.variants[name], width + 1
        bad_rows, counts = np.flatnonzero(verdict[0, :n]), verdict[1, :n]
        host_rows = 0
        tok = self.family.tok
        if bad_rows.size and tok.normalizes and variant.mode == "exact":
            reported = bad_rows[counts[bad_rows] == -2]
            host_rows = int(reported.size)
            if host_rows:  # the host path for the rows the device reports (normalizing families)
                # (its own widths: a normalizer may lengthen a string, Lowercase's `İ` -> `i̇`)
                again = tok.encode_batch(
                    [batch.strings[i] for i in reported],
                    mode=variant.mode,
                    allowed_special=variant.allowed,
                    device=self.device,
                )
                refs = [batch.refs(i, ref_counts, ref_offsets, flat) for i in reported]
                still = reported[row_mismatches(np.asarray(again.ids), np.asarray(again.counts), refs)]
                bad_rows = np.union1d(np.setdiff1d(bad_rows, reported), still)
        index = np.concatenate(batch.index)
        if bad_rows.size and len(self.first) < KEEP_MISMATCHES:
            keep = bad_rows[: KEEP_MISMATCHES - len(self.first)]
            ours = np.asarray(ids_d[jnp.asarray(keep)])
            for row, k in zip(ours, keep.tolist()):
                count = int(counts[k])
                self.first.append(
                    describe(
                        self.family.key,
                        variant,
                        width,
                        int(index[k]),
                        batch.strings[k],
                        row[: max(0, min(count, T))].tolist(),
                        batch.refs(k, ref_counts, ref_offsets, flat),
                    )
                )
        corrupted = int(self.corrupt and (counts > 0).any())
        nbytes = sum(map(len, batch.strings))
        for tally in (self.tally, self.per_variant[name]):
            tally.update(
                strings=n,
                bytes=nbytes,
                mismatches=int(bad_rows.size),
                host_rows=host_rows,
                corrupted_rows=corrupted,
            )
        self.tally["batches"] += 1
        self.tally["truncated_rows"] += int((counts > T).sum())

    def finish(self, complete: bool) -> dict:
        """The family's last batches sent (only when `complete`: a run out of time drops what it
        has not sent, so that stopping costs at most the batches in flight) and read; its summary."""
        for name, width in sorted(self.gathering):
            batch = self.gathering.pop((name, width))
            if complete:
                self._send(name, width, batch)
        while self.in_flight:
            self._receive()
        t = self.tally
        summary = {
            "family": self.family.key,
            "tokenizer": self.family.tok.vocab.name,
            "reference": self.family.reference,
            "strings": t["strings"],
            "strings_requested": self.n,
            "complete": complete,
            "bytes": t["bytes"],
            "mismatches": t["mismatches"],
            "chunks": self.chunks,
            "batches": t["batches"],
            "host_rows": t["host_rows"],
            "truncated_rows": t["truncated_rows"],
            "corrupted_rows": t["corrupted_rows"],
            "seconds": time.perf_counter() - self.t_start,
            "pool_generate_s": t["generate_s"],
            "pool_reference_s": t["reference_s"],
            "send_s": t["send_s"],
            "wait_s": t["wait_s"],
            "variants": {},
            "first_mismatches": self.first,
        }
        for v in self.family.variants:
            c = self.per_variant[v.name]
            summary["variants"][v.name] = {
                "mode": v.mode,
                "allowed": v.allowed if isinstance(v.allowed, str) else sorted(v.allowed),
                "invalid_utf8": v.invalid,
                "share": v.share,
                **{k: c[k] for k in ("strings", "bytes", "mismatches", "reference_s")},
            }
        return summary
