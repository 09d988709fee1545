"""The flax_train.py model fed by a grain pipeline that yields raw BYTES; the device tokenizes.

The pipeline is the usual grain shape: a random-access source (disjoint UTF-8-aligned windows
of War and Peace), a seeded shuffle, repeat, and a batch step that packs the windows into
uint8[B, L] + int32[B] lengths with `blockbpe_jax.pack_strings`. No tokenizer runs in the
pipeline: the jitted train step calls `blockbpe_jax.encode`. With `--host-tokenize` the pipeline
does what grain pipelines usually do instead (a tiktoken map step, then padding), for comparison.

    python examples/grain_pipeline.py --tiny --mode bytes
    python examples/grain_pipeline.py --tiny --pack       # documents packed into rows on the device
    python examples/grain_pipeline.py --workers 4 --summary grain.json    # GPU

With --pack the records are documents of half a row's bytes, twice as many per batch, and the
train step tokenizes them and packs them into the batch's rows (`bb.pack`, first fit: segment
ids and positions; the model attends within each document).

Needs grain (`pip install grain`; PyPI has grain 0.2.x) besides flax and optax; without it the
example exits with a message (tests skip it).
"""

from __future__ import annotations

import sys

import numpy as np

try:
    import grain
except ImportError:  # pragma: no cover - depends on the environment
    grain = None

import jax

import blockbpe_jax as bb
from flax_train import ByteWindows, HostTokenizer, build_parser, load_tokenizer, read_text_bytes, \
    resolve_config, run_training


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


def make_pipeline(windows: ByteWindows, cfg: dict, seed: int, workers: int, tokenize_with=None,
                  per_batch: int | None = None):
    ds = grain.MapDataset.source(WindowSource(windows)).shuffle(seed=seed).repeat()
    if tokenize_with is not None:  # baseline: tokenize in the pipeline (host CPU)
        ds = ds.map(tokenize_with)
        batch_fn = PadIds(cfg["max_tokens"])
    else:
        batch_fn = PackBytes(windows.seq_bytes)
    it = ds.to_iter_dataset().batch(per_batch or cfg["batch"], drop_remainder=True, batch_fn=batch_fn)
    if workers > 0:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return it


class TiktokenMap:
    """grain map step for the baseline: bytes -> list of ids, with the same vocabulary."""

    def __init__(self, enc):
        self.enc = enc

    def __call__(self, text: bytes):
        return self.enc.encode_ordinary(text.decode("utf-8"))


def main(argv=None) -> int:
    parser = build_parser(__doc__)
    parser.add_argument("--workers", type=int, default=0,
                        help="grain worker processes (mp_prefetch); 0 = in this process")
    parser.add_argument("--pack", action="store_true",
                        help="records of half a row, packed into the rows inside the step")
    args = parser.parse_args(argv)
    if grain is None:
        print("grain_pipeline.py needs grain (pip install grain); it is not installed here",
              file=sys.stderr)
        return 3
    if args.workers > 0:
        # grain's worker processes read absl flags, which a plain script never parses.
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS(sys.argv[:1])
    cfg = resolve_config(args)
    tok = load_tokenizer(args)
    windows = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="train")
    print(f"grain {getattr(grain, '__version__', '?')}: {len(windows)} windows of "
          f"{cfg['seq_bytes']} bytes, workers={args.workers}", flush=True)
    if args.pack:
        if args.host_tokenize:
            parser.error("--pack packs on the device: no --host-tokenize")
        docs = ByteWindows(read_text_bytes(args), cfg["seq_bytes"] // 2, split="train")
        pipeline = make_pipeline(docs, cfg, args.seed, args.workers, per_batch=2 * cfg["batch"])
        run_training(args, cfg, tok, iter(pipeline), "grain_pipeline", feeds="packed",
                     tokenize_desc="in-step, packed (grain yields documents)")
    elif not args.host_tokenize:
        pipeline = make_pipeline(windows, cfg, args.seed, args.workers)
        run_training(args, cfg, tok, iter(pipeline), "grain_pipeline", tokenize_desc="in-step (grain yields bytes)")
    else:
        if args.host_tokenizer != "tiktoken":
            parser.error("with grain, --host-tokenize uses --host-tokenizer tiktoken")
        host = HostTokenizer(tok, kind="tiktoken", mode=args.mode, max_tokens=cfg["max_tokens"],
                             device=jax.devices()[0])
        pipeline = make_pipeline(windows, cfg, args.seed, args.workers, TiktokenMap(host.enc))
        run_training(args, cfg, tok, iter(pipeline), "grain_pipeline", feeds="ids",
                     tokenize_desc="grain map (tiktoken on the host)", host_check=host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
