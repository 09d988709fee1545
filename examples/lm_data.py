"""The data side shared by the examples: UTF-8-aligned byte windows of a text (the only host
work per step), the vocabulary (optionally cut to its first ranks) and the host-tokenizing
baseline."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

import blockbpe_jax as bb


def default_corpus() -> Path:
    from blockbpe_jax import testing

    return testing.data_dir() / "corpus" / "war_and_peace_en.txt"


def default_vocab() -> Path:
    from blockbpe_jax import testing

    return testing.data_dir() / "vocab" / "tiktoken" / "r50k_base.tiktoken"


class ByteWindows:
    """Windows of at most `seq_bytes` bytes of a text, starting and ending on UTF-8 character
    boundaries. `split` keeps the first 90% of the text for training, the rest for evaluation."""

    def __init__(self, raw: bytes, seq_bytes: int, split: str = "train", holdout: float = 0.1):
        buf = np.frombuffer(raw, dtype=np.uint8)
        cut = int(len(buf) * (1.0 - holdout))
        buf = buf[:cut] if split == "train" else buf[cut:]
        if len(buf) <= seq_bytes + 4:
            raise ValueError(f"text too short ({len(buf)} bytes) for windows of {seq_bytes} bytes")
        self.buf = buf
        self.seq_bytes = seq_bytes
        is_start = np.ones(len(buf) + 1, dtype=bool)  # position len(buf) is a boundary too
        is_start[:-1] = (buf & 0xC0) != 0x80
        # prev_boundary[i]: the largest character boundary <= i.
        self.prev_boundary = np.maximum.accumulate(np.where(is_start, np.arange(len(buf) + 1), 0))
        last = len(buf) - seq_bytes
        self.starts = np.flatnonzero(is_start[: last + 1])

    def __len__(self) -> int:  # disjoint windows per epoch (used by the grain source)
        return len(self.buf) // self.seq_bytes

    def window(self, start: int) -> bytes:
        start = int(self.starts[min(np.searchsorted(self.starts, start), len(self.starts) - 1)])
        end = int(self.prev_boundary[min(start + self.seq_bytes, len(self.buf))])
        return self.buf[start:end].tobytes()

    def batch_at(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """uint8[B, seq_bytes] + int32[B] for windows starting at `starts` (char boundaries)."""
        cols = np.arange(self.seq_bytes)
        data = self.buf[starts[:, None] + cols[None, :]]
        lengths = self.prev_boundary[starts + self.seq_bytes] - starts
        data = np.where(cols[None, :] < lengths[:, None], data, 0).astype(np.uint8)
        return data, lengths.astype(np.int32)

    def sample(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
        return self.batch_at(rng.choice(self.starts, size=batch))


def read_text_bytes(args) -> bytes:
    from blockbpe_jax import testing

    return testing.read_corpus(args.data or default_corpus())


def random_batches(windows: ByteWindows, batch: int, seed: int):
    rng = np.random.default_rng(seed)
    while True:
        yield windows.sample(rng, batch)


def load_tokenizer(args) -> bb.Tokenizer:
    if args.tiktoken:
        import tiktoken

        tok = bb.Tokenizer.from_tiktoken(tiktoken.get_encoding(args.tiktoken))
    else:
        tok = bb.Tokenizer.from_file(args.vocab or default_vocab())
    if args.vocab_size:
        tok = truncate_vocabulary(tok, args.vocab_size)
    return tok


def truncate_vocabulary(tok: bb.Tokenizer, n: int) -> bb.Tokenizer:
    """The first `n` ranks of a tiktoken-style vocabulary, without specials.

    tiktoken ids are merge ranks and every token is the merge of two lower-ranked tokens, so
    the first n ranks are themselves a BPE vocabulary: BPE with only the first n - 256 merges
    (still exact: tiktoken with those ranks gives the same ids). It shrinks the softmax, which
    dominates a tiny model's step on a CPU."""
    import base64
    import tempfile

    v = tok.vocab
    if n >= v.n_vocab:
        return tok
    if n < 256 or any(b is None or len(b) != 1 for b in v.token_bytes[:256]):
        raise SystemExit(
            f"--vocab-size needs a tiktoken-style vocabulary whose first 256 ids are "
            f"the bytes, and n >= 256; {v.source} is not one"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "truncated.tiktoken"
        path.write_bytes(
            b"".join(
                base64.b64encode(v.token_bytes[i]) + b" %d\n" % i
                for i in range(n)
                if v.token_bytes[i] is not None and i not in v.special_ids
            )
        )
        return bb.Tokenizer.from_file(path, name=f"{v.name}[:{n}]", special_tokens={}, pattern=v.pattern)


class HostTokenizer:
    """The baseline: tokenize each batch on the host, pad to T, ship ids to the device.

    "tiktoken" builds a tiktoken.Encoding over the tokenizer's own ranks (ids), with the
    vocabulary's pattern in exact mode or tiktoken-equivalent bytes mode `(?s:.+)`. That equals
    our ids for tiktoken-style vocabularies (ranks == ids); for other tokenizer.json files use
    "blockbpe-cpu" (our CPU handler, then a host -> device copy)."""

    def __init__(self, tok: bb.Tokenizer, *, kind: str, mode: str, max_tokens: int, device):
        self.tok, self.kind, self.mode, self.max_tokens, self.device = tok, kind, mode, max_tokens, device
        if kind == "tiktoken":
            import tiktoken

            v = tok.vocab
            special = v.special_ids
            ranks = {b: i for i, b in enumerate(v.token_bytes) if b is not None and i not in special}
            pattern = v.pattern if mode == "exact" else r"(?s:.+)"
            if pattern is None:
                raise SystemExit(f"--host-tokenizer tiktoken: {v.source} has no pre-tokenizer pattern")
            self.enc = tiktoken.Encoding(
                f"{v.name}_host",
                pat_str=pattern,
                mergeable_ranks=ranks,
                special_tokens=dict(v.special_tokens),
            )
        elif kind != "blockbpe-cpu":
            raise SystemExit(f"unknown --host-tokenizer {kind!r}")

    def __call__(self, data: np.ndarray, lengths: np.ndarray):
        if self.kind == "blockbpe-cpu":
            cpu = jax.devices("cpu")[0]
            ids, counts = bb.encode(
                jax.device_put(data, cpu),
                jax.device_put(lengths, cpu),
                self.tok.tables("none", cpu),
                max_tokens=self.max_tokens,
                mode=self.mode,
            )
            ids, counts = np.asarray(ids), np.asarray(counts)
        else:
            texts = [data[b, : lengths[b]].tobytes().decode("utf-8") for b in range(len(lengths))]
            rows = self.enc.encode_ordinary_batch(texts)
            ids = np.zeros((len(rows), self.max_tokens), dtype=np.int32)
            counts = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
            for b, r in enumerate(rows):
                r = r[: self.max_tokens]
                ids[b, : len(r)] = r
        return jax.device_put(ids, self.device), jax.device_put(counts, self.device)
