"""The flax_train.py model fed by a grain pipeline that yields raw BYTES; the device tokenizes.

The pipeline is the usual grain shape: a random-access source (disjoint UTF-8-aligned windows
of War and Peace), a seeded shuffle, repeat, and a batch step that packs the windows into
uint8[B, L] + int32[B] lengths with `blockbpe_jax.pack_strings`. No tokenizer runs in the
pipeline: the jitted train step calls `blockbpe_jax.encode`. With `--host-tokenize` the pipeline
does what grain pipelines usually do instead (a tiktoken map step, then padding), for comparison.

    python examples/grain_pipeline.py --tiny --mode bytes
    python examples/grain_pipeline.py --tiny --pack       # documents packed into rows on the device
    python examples/grain_pipeline.py --tiny --pack --host-tokenize   # grain tokenizes and packs
    python examples/grain_pipeline.py --workers 4 --summary grain.json    # GPU

With --pack the records are documents of half a row's bytes. A jitted step on the device tokenizes them
and packs them into the batch's rows by first fit over the document stream (`pack_stream`: grain's
FirstFitPackIterDataset batches, segment ids and positions; the model attends within each
document); documents that do not fit a batch wait on the device for the next one. With
--pack --host-tokenize grain does it all on the host, as a grain user would: a tiktoken map,
then grain's own FirstFitPackIterDataset, then batches of rows. Both see the same document
stream in the same order, so they train on the same rows and give the same loss curve.

Needs grain (`pip install grain`; PyPI has grain 0.2.x) besides flax and optax; without it the
example exits with a message (tests skip it).
"""

from __future__ import annotations

import collections
import math
import sys

import numpy as np

try:
    import grain
except ImportError:  # pragma: no cover - depends on the environment
    grain = None

import jax

import blockbpe_jax as bb
from flax_train import build_parser, resolve_config, run_training
from lm_data import ByteWindows, HostTokenizer, load_tokenizer, read_text_bytes


class WindowSource:
    """grain random-access source: record i is the i-th disjoint window (bytes) of the text."""

    def __init__(self, windows: ByteWindows):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> bytes:
        return self.windows.window(int(i) * self.windows.seq_bytes)


class PackBytes:
    """grain batch_fn: a list of byte strings -> (uint8[B, L], int32[B]) with a fixed L."""

    def __init__(self, max_len: int):
        self.max_len = max_len

    def __call__(self, items):
        return bb.pack_strings(items, max_len=self.max_len)


class PadIds:
    """grain batch_fn for the host-tokenized baseline: lists of ids -> (int32[B, T], int32[B])."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens

    def __call__(self, rows):
        ids = np.zeros((len(rows), self.max_tokens), dtype=np.int32)
        counts = np.array([len(r) for r in rows], dtype=np.int32)
        for b, r in enumerate(rows):
            r = r[: self.max_tokens]
            ids[b, : len(r)] = r
        return ids, counts


def make_pipeline(windows: ByteWindows, cfg: dict, seed: int, workers: int, tokenize_with=None):
    ds = grain.MapDataset.source(WindowSource(windows)).shuffle(seed=seed).repeat()
    if tokenize_with is not None:  # baseline: tokenize in the pipeline (host CPU)
        ds = ds.map(tokenize_with)
        batch_fn = PadIds(cfg["max_tokens"])
    else:
        batch_fn = PackBytes(windows.seq_bytes)
    it = ds.to_iter_dataset().batch(cfg["batch"], drop_remainder=True, batch_fn=batch_fn)
    if workers > 0:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return it


def make_document_stream(docs: ByteWindows, seed: int, workers: int, tokenize_with=None):
    """One record per document (bytes, or tokenize_with's output), in the order both --pack
    paths see them: a map step does not change the order, with or without worker processes."""
    ds = grain.MapDataset.source(WindowSource(docs)).shuffle(seed=seed).repeat()
    if tokenize_with is not None:
        ds = ds.map(tokenize_with)
    it = ds.to_iter_dataset()
    if workers > 0:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return it


def grain_packed_rows(docs: ByteWindows, cfg: dict, seed: int, workers: int, enc):
    """The host-tokenized --pack baseline: tiktoken in grain's map step (the workers), then
    grain's own first-fit packer and batches of rows, in this process."""
    stream = make_document_stream(docs, seed, workers, TiktokenIds(enc, cfg["max_tokens"]))
    rows = grain.experimental.FirstFitPackIterDataset(
        stream, length_struct={"tokens": cfg["max_tokens"]}, num_packing_bins=cfg["batch"], shuffle_bins=False
    )
    return iter(rows.batch(cfg["batch"], drop_remainder=True))


class DocumentFeeder:
    """The host side of the --pack device path: documents from grain, as many per step as keep
    the device's stream ahead of the packer.

    The step packs the first `window` documents of its stream (the carry left on the device,
    then the new ones) and keeps the rest for the next step. A batch equals grain's only if it
    ends full, so each step gets enough new documents to bring the stream to `target`, above
    what a batch takes. How many the carry holds is read one step late (the count of the step
    before the one just dispatched, done or nearly), never waiting on the step in flight; the
    documents the last step took are estimated from the one before."""

    def __init__(self, documents, max_bytes: int):
        self.documents, self.max_bytes = documents, max_bytes
        self.buffer: collections.deque = collections.deque()
        self.fed: list[int] = []  # new documents given to step k (k from 0)
        self.carried: dict[int, int] = {}  # documents carried after step k (read late)
        self.pending: dict = {}

    def sample(self, n: int):
        """The next n documents, packed (they stay first in line for the steps)."""
        while len(self.buffer) < n:
            self.buffer.append(next(self.documents))
        return bb.pack_strings(list(self.buffer)[:n], max_len=self.max_bytes)

    def plan(self, *, rows: int, seq_len: int, tokens_per_document: float) -> None:
        # A batch takes at most about rows * seq_len / tokens_per_document documents (first fit
        # leaves some room): a stream 30% longer (and a few) leaves a margin for short ones.
        self.takes = rows * seq_len / tokens_per_document
        self.target = self.window = self.slots = self.capacity = math.ceil(1.3 * self.takes) + 4

    def describe(self) -> dict:
        return dict(
            window=self.window,
            new_documents_per_step_max=self.slots,
            carry_capacity=self.capacity,
            documents_per_batch_estimate=round(self.takes, 1),
        )

    def _stream_estimate(self) -> int:
        """Documents expected in the carry after the last step fed."""
        known = max(self.carried, default=-1)
        q = self.carried.get(known, 0)
        took = self.takes
        if known >= 1 and known - 1 in self.carried:
            took = self.carried[known - 1] + self.fed[known] - q
        for k in range(known + 1, len(self.fed)):
            q = max(0, q + self.fed[k] - round(took))
        return q

    def next_batch(self):
        n = int(np.clip(self.target - self._stream_estimate(), 0, self.slots))
        while len(self.buffer) < n:
            self.buffer.append(next(self.documents))
        docs = [self.buffer.popleft() for _ in range(n)]
        self.fed.append(n)
        return bb.pack_strings(docs + [b""] * (self.slots - n), max_len=self.max_bytes)

    def dispatched(self, carried) -> None:
        """The carried-documents count (a device scalar) of the step just dispatched."""
        k = len(self.fed) - 1
        self.pending[k] = carried
        for j in [j for j in self.pending if j < k]:
            self.carried[j] = int(self.pending.pop(j))


class TiktokenIds:
    """grain map step of the --pack baseline: bytes -> {"tokens": int32 ids}, cut at T like
    the device's encode (grain's packer refuses longer elements)."""

    def __init__(self, enc, max_tokens: int):
        self.enc, self.max_tokens = enc, max_tokens

    def __call__(self, text: bytes):
        ids = self.enc.encode_ordinary(text.decode("utf-8"))[: self.max_tokens]
        return {"tokens": np.asarray(ids, np.int32)}


class TiktokenMap:
    """grain map step for the baseline: bytes -> list of ids, with the same vocabulary."""

    def __init__(self, enc):
        self.enc = enc

    def __call__(self, text: bytes):
        return self.enc.encode_ordinary(text.decode("utf-8"))


def main(argv=None) -> int:
    parser = build_parser(__doc__)
    parser.add_argument(
        "--workers", type=int, default=0, help="grain worker processes (mp_prefetch); 0 = in this process"
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="documents of half a row, packed into the rows (first fit, "
        "carry-over): in the step, or by grain with --host-tokenize",
    )
    args = parser.parse_args(argv)
    if grain is None:
        print("grain_pipeline.py needs grain (pip install grain); it is not installed here", file=sys.stderr)
        return 3
    if args.workers > 0:
        # grain's worker processes read absl flags, which a plain script never parses.
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS(sys.argv[:1])
    cfg = resolve_config(args)
    tok = load_tokenizer(args)
    windows = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="train")
    print(
        f"grain {getattr(grain, '__version__', '?')}: {len(windows)} windows of "
        f"{cfg['seq_bytes']} bytes, workers={args.workers}",
        flush=True,
    )
    if args.host_tokenize and args.host_tokenizer != "tiktoken":
        parser.error("with grain, --host-tokenize uses --host-tokenizer tiktoken")
    if args.pack:
        docs = ByteWindows(read_text_bytes(args), cfg["seq_bytes"] // 2, split="train")
        if args.host_tokenize:
            host = HostTokenizer(
                tok, kind="tiktoken", mode=args.mode, max_tokens=cfg["max_tokens"], device=jax.devices()[0]
            )
            rows = grain_packed_rows(docs, cfg, args.seed, args.workers, host.enc)
            run_training(
                args,
                cfg,
                tok,
                rows,
                "grain_pipeline",
                feeds="packed_rows",
                tokenize_desc="grain map (tiktoken) + grain FirstFitPackIterDataset",
                host_check=host,
            )
        else:
            feeder = DocumentFeeder(iter(make_document_stream(docs, args.seed, args.workers)), docs.seq_bytes)
            run_training(
                args,
                cfg,
                tok,
                feeder,
                "grain_pipeline",
                feeds="packed",
                tokenize_desc="on the device, packed (grain yields documents)",
            )
    elif not args.host_tokenize:
        pipeline = make_pipeline(windows, cfg, args.seed, args.workers)
        run_training(
            args, cfg, tok, iter(pipeline), "grain_pipeline", tokenize_desc="in-step (grain yields bytes)"
        )
    else:
        host = HostTokenizer(
            tok, kind="tiktoken", mode=args.mode, max_tokens=cfg["max_tokens"], device=jax.devices()[0]
        )
        pipeline = make_pipeline(windows, cfg, args.seed, args.workers, TiktokenMap(host.enc))
        run_training(
            args,
            cfg,
            tok,
            iter(pipeline),
            "grain_pipeline",
            feeds="ids",
            tokenize_desc="grain map (tiktoken on the host)",
            host_check=host,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
