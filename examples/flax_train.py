"""Train a small Flax NNX causal LM on War and Peace, tokenizing INSIDE the jitted train step.

The host only slices raw UTF-8 bytes out of the book (uint8[B, L] + int32[B] lengths); the
jitted step calls `blockbpe_jax.encode` and feeds the ids to the model, so tokenization runs
on the same device as the model (the CPU FFI handler on CPU, the CUDA kernels on a GPU), with
no host tokenizer in the loop. `--host-tokenize` is the usual pipeline for comparison: the host
tokenizes each batch first (tiktoken by default) and ships ids.

    python examples/flax_train.py --tiny                          # CPU, ~30 s on 2 cores
    python examples/flax_train.py --steps 500 --batch 64          # GPU-sized
    python examples/flax_train.py --host-tokenize --summary b.json   # baseline, same ids

Needs flax (NNX) and optax (`pip install -e .[examples]`); tiktoken for --host-tokenize.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import blockbpe_jax as bb

# --------------------------------------------------------------------------------------------
# Data: random UTF-8-aligned byte windows of the book (the only host work per step)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Model: a small pre-LN decoder-only transformer
# --------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    vocab_size: int
    max_tokens: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4


class Block(nnx.Module):
    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class CausalLM(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, rngs=rngs)
        self.pos = nnx.Embed(cfg.max_tokens, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([Block(cfg.d_model, cfg.n_heads, rngs=rngs) for _ in range(cfg.n_layers)])
        self.ln_f = nnx.LayerNorm(cfg.d_model, rngs=rngs)
        self.head = nnx.Linear(cfg.d_model, cfg.vocab_size, rngs=rngs)

    def __call__(self, ids, segment_ids=None, positions=None):  # int32[B, T] -> float32[B, T, V]
        """Packed rows (`bb.pack`) pass their segment ids and positions: a token attends only
        to earlier tokens of its own document and is placed by its position in it."""
        if segment_ids is None:
            x = self.embed(ids) + self.pos(jnp.arange(ids.shape[1]))[None]
            mask = nnx.make_causal_mask(ids)
        else:
            x = self.embed(ids) + self.pos(positions)
            mask = bb.segment_attention_mask(segment_ids)[:, None]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def lm_loss(model: CausalLM, ids, counts):
    """Mean next-token cross-entropy over the real tokens of each row.

    `counts` are the true token counts from `encode`; a row longer than T was truncated and
    its first T tokens are all valid."""
    valid_len = jnp.minimum(counts, ids.shape[1])
    logits = model(ids[:, :-1]).astype(jnp.float32)
    targets = ids[:, 1:]
    mask = (jnp.arange(targets.shape[1])[None, :] + 1) < valid_len[:, None]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    n = jnp.sum(mask)
    return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.maximum(n, 1), n


def lm_loss_packed(model: CausalLM, packed):
    """The same loss on packed rows: a target counts when it continues its token's segment."""
    seg = packed.segment_ids
    logits = model(packed.tokens[:, :-1], seg[:, :-1], packed.positions[:, :-1]).astype(jnp.float32)
    mask = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, packed.tokens[:, 1:])
    n = jnp.sum(mask)
    return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.maximum(n, 1), n


# --------------------------------------------------------------------------------------------
# Train steps: one takes raw bytes and tokenizes inside, the other takes host-made ids
# --------------------------------------------------------------------------------------------


def make_steps(tok: bb.Tokenizer, *, mode: str, max_tokens: int, block_size: int = 256):
    """The jitted steps. The vocabulary tables (`tok.tables()`, a pytree of device arrays) are
    an ARGUMENT of each step: closed over, they would be baked into the program as constants."""

    def tokenize(tables, data, lengths):
        # check_lengths=False: the lengths come from our own packer, so skip the handler's
        # read-back of them (a device->host sync per call on a GPU): a fixed launch.
        return bb.encode(data, lengths, tables, max_tokens=max_tokens, mode=mode,
                         block_size=block_size, check_lengths=False)

    def update(model, optimizer, ids, counts):
        (loss, n), grads = nnx.value_and_grad(lm_loss, has_aux=True)(model, ids, counts)
        optimizer.update(model, grads)
        return loss, n, jnp.sum(counts > max_tokens)

    @nnx.jit
    def train_step_bytes(model, optimizer, tables, data, lengths):
        ids, counts = tokenize(tables, data, lengths)  # on the device, inside the step
        return update(model, optimizer, ids, counts)

    @nnx.jit
    def train_step_ids(model, optimizer, ids, counts):
        return update(model, optimizer, ids, counts)

    def update_packed(model, optimizer, packed):
        (loss, n), grads = nnx.value_and_grad(lm_loss_packed, has_aux=True)(model, packed)
        optimizer.update(model, grads)
        return loss, n

    @nnx.jit(static_argnames=("rows", "window"))
    def train_step_packed(model, optimizer, tables, carry, data, lengths, rows, window):
        # Documents tokenized, then packed into `rows` rows of T tokens by first fit over the
        # stream (grain's FirstFitPackIterDataset); what does not fit waits in `carry`, on the
        # device, for the next step.
        packed, carry, rep = bb.packing.pack_stream(
            carry, tokenize(tables, data, lengths), seq_len=max_tokens, rows=rows, window=window)
        loss, n = update_packed(model, optimizer, packed)
        stats = jnp.stack([rep.tokens_lost + packed.report.tokens_truncated,
                           (~rep.batch_full).astype(jnp.int32)])
        return (loss, n, stats), carry, rep.documents_carried

    @nnx.jit
    def train_step_packed_rows(model, optimizer, tokens, segment_ids, positions):
        # Rows packed on the host (grain's own packer): the same loss on the same layout.
        loss, n = update_packed(model, optimizer, bb.Packed(tokens, segment_ids, positions, None))
        return loss, n, jnp.zeros(2, jnp.int32)

    @nnx.jit
    def eval_bytes(model, tables, data, lengths):
        ids, counts = tokenize(tables, data, lengths)
        return lm_loss(model, ids, counts)[0]

    return (jax.jit(tokenize), train_step_bytes, train_step_ids, eval_bytes, train_step_packed,
            train_step_packed_rows)


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
            self.enc = tiktoken.Encoding(f"{v.name}_host", pat_str=pattern, mergeable_ranks=ranks,
                                         special_tokens=dict(v.special_tokens))
        elif kind != "blockbpe-cpu":
            raise SystemExit(f"unknown --host-tokenizer {kind!r}")

    def __call__(self, data: np.ndarray, lengths: np.ndarray):
        if self.kind == "blockbpe-cpu":
            cpu = jax.devices("cpu")[0]
            ids, counts = bb.encode(jax.device_put(data, cpu), jax.device_put(lengths, cpu),
                                    self.tok.tables("none", cpu), max_tokens=self.max_tokens,
                                    mode=self.mode)
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


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

TINY = dict(d_model=64, n_layers=2, n_heads=2, batch=8, seq_bytes=256, steps=300, lr=3e-3)
FULL = dict(d_model=256, n_layers=4, n_heads=4, batch=32, seq_bytes=1024, steps=300, lr=1e-3)


def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, help="train steps (default 300)")
    p.add_argument("--batch", type=int, help="strings per step (default 8 tiny / 32)")
    p.add_argument("--seq-bytes", type=int, help="bytes per string (default 256 tiny / 1024)")
    p.add_argument("--max-tokens", type=int, help="tokens per string, T (default 0.4 * seq_bytes)")
    p.add_argument("--tiny", action="store_true", help="CPU-sized model and batch")
    p.add_argument("--mode", choices=("exact", "bytes"), default="exact",
                   help="tokenization: exact (== tiktoken) or bytes (BlockBPE paper); default exact")
    p.add_argument("--host-tokenize", action="store_true",
                   help="baseline: tokenize on the host, then ship ids (no on-device tokenization)")
    p.add_argument("--host-tokenizer", choices=("tiktoken", "blockbpe-cpu"), default="tiktoken")
    p.add_argument("--vocab", type=Path, help="vocabulary file (default: shared r50k_base.tiktoken)")
    p.add_argument("--tiktoken", metavar="NAME", help="a tiktoken encoding name (tiktoken's cache)")
    p.add_argument("--vocab-size", type=int,
                   help="keep only the first N ranks (a smaller exact BPE); default 4096 with "
                        "--tiny, else the whole vocabulary")
    p.add_argument("--data", type=Path, help="UTF-8 text (default: shared War and Peace)")
    p.add_argument("--lr", type=float)
    p.add_argument("--d-model", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--block-size", type=int, default=256, choices=(256, 512, 1024))
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--summary", type=Path, help="write a JSON summary here")
    return p


def resolve_config(args) -> dict:
    base = dict(TINY if args.tiny else FULL)
    for key, val in (("steps", args.steps), ("batch", args.batch), ("seq_bytes", args.seq_bytes),
                     ("lr", args.lr), ("d_model", args.d_model), ("n_layers", args.layers),
                     ("n_heads", args.heads)):
        if val is not None:
            base[key] = val
    if args.vocab_size is None and args.tiny and not args.vocab and not args.tiktoken:
        args.vocab_size = 4096
    base["max_tokens"] = args.max_tokens or max(8, -(-base["seq_bytes"] * 2 // 5 // 8) * 8)
    return base


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
        raise SystemExit(f"--vocab-size needs a tiktoken-style vocabulary whose first 256 ids are "
                         f"the bytes, and n >= 256; {v.source} is not one")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "truncated.tiktoken"
        path.write_bytes(b"".join(base64.b64encode(v.token_bytes[i]) + b" %d\n" % i
                                  for i in range(n) if v.token_bytes[i] is not None
                                  and i not in v.special_ids))
        return bb.Tokenizer.from_file(path, name=f"{v.name}[:{n}]", special_tokens={},
                                      pattern=v.pattern)


def make_model_and_optimizer(cfg: dict, vocab_size: int, seed: int):
    mcfg = ModelConfig(vocab_size=vocab_size, max_tokens=cfg["max_tokens"], d_model=cfg["d_model"],
                       n_layers=cfg["n_layers"], n_heads=cfg["n_heads"])
    warmup = max(1, min(20, cfg["steps"] // 10))
    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg["lr"], warmup, max(cfg["steps"], warmup + 1),
                                                  end_value=cfg["lr"] * 0.1)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))

    model = CausalLM(mcfg, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    # Commit the state to the device: the train step's outputs are committed, and inputs
    # that differ in committedness from the first call's would compile the step twice.
    state = jax.device_put(nnx.state((model, optimizer)), jax.devices()[0])
    nnx.update((model, optimizer), state)
    return model, optimizer


class Recorder:
    """Collects per-step (loss, tokens, truncated) device scalars; fetches them only when
    logging, so the host never waits on the device between steps."""

    def __init__(self, log_every: int, batch: int):
        self.log_every, self.batch = log_every, batch
        self.pending: list = []
        self.losses: list[float] = []
        self.tokens = 0
        self.truncated = 0   # summed per-step counts: a scalar, or a vector (packed steps)
        self.t_start = None  # set after step 1 (compile)
        self.steps_timed = 0

    def add(self, step: int, out) -> None:
        self.pending.append(out)
        if step == 1 or step % self.log_every == 0:
            self.flush(step)

    def flush(self, step: int) -> None:
        if not self.pending:
            return
        vals = jax.device_get(self.pending)
        self.pending = []
        for loss, n, trunc in vals:
            self.losses.append(float(loss))
            self.tokens += int(n)
            self.truncated = self.truncated + np.asarray(trunc, np.int64)
        recent = self.losses[-len(vals):]
        rate = ""
        if self.t_start is not None and step > 1:
            el = time.perf_counter() - self.t_start
            rate = f"  {(step - 1) / el:7.2f} steps/s"
        print(f"step {step:5d}  loss {np.mean(recent):7.4f}{rate}", flush=True)


def run_training(args, cfg: dict, tok: bb.Tokenizer, batches, label: str, *, feeds: str = "bytes",
                 tokenize_desc: str = "in-step", host_check=None) -> dict:
    """Trains on `batches` and returns the summary dict. Shared with grain_pipeline.py.

    feeds="bytes": batches are (uint8[B, L], int32[B]) raw bytes, tokenized inside the step.
    feeds="ids": batches are (int32[B, T], int32[B]) ids and counts made on the host.
    feeds="packed": batches is a feeder of documents (grain_pipeline.DocumentFeeder): raw bytes,
    tokenized and packed (`pack_stream`, first fit with carry-over) into cfg["batch"] rows of T
    tokens inside the step.
    feeds="packed_rows": batches are dicts of rows packed on the host by grain (tokens,
    tokens_segment_ids, tokens_positions: int32[batch, T]).
    host_check(data, lengths) -> (ids, counts), if given, must equal the in-step ids."""
    device = jax.devices()[0]
    tables = tok.tables("none", device)  # device arrays, built once, passed to every step
    tokenize, step_bytes, step_ids, eval_bytes, step_packed, step_rows = make_steps(
        tok, mode=args.mode, max_tokens=cfg["max_tokens"], block_size=args.block_size)
    model, optimizer = make_model_and_optimizer(cfg, tok.vocab.n_vocab, args.seed)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    print(f"{label}: device={device.platform}:{device.device_kind} vocab={tok.vocab.name} "
          f"(n_vocab={tok.vocab.n_vocab}) mode={args.mode} params={n_params / 1e6:.2f}M "
          f"batch={cfg['batch']}x{cfg['seq_bytes']}B T={cfg['max_tokens']} "
          f"tokenize={tokenize_desc}", flush=True)

    eval_set = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="eval")
    picks = np.linspace(0, len(eval_set.starts) - 1, 4 * cfg["batch"]).astype(int).reshape(4, -1)
    eval_batches = [eval_set.batch_at(eval_set.starts[row]) for row in picks]  # fixed, disjoint

    def evaluate() -> float:
        return float(np.mean([float(eval_bytes(model, tables, jnp.asarray(d), jnp.asarray(n)))
                              for d, n in eval_batches]))

    # Sanity: the baseline's ids equal the in-step ids (same vocabulary, same mode).
    if host_check is not None:
        d0, n0 = eval_batches[0]
        ids_dev, cnt_dev = tokenize(tables, jnp.asarray(d0), jnp.asarray(n0))
        ids_host, cnt_host = host_check(d0, n0)
        same = bool(np.array_equal(np.asarray(cnt_dev), np.asarray(cnt_host)) and
                    np.array_equal(np.asarray(ids_dev), np.asarray(ids_host)))
        print(f"host-tokenized ids equal in-step ids: {same}", flush=True)
        if not same:
            raise SystemExit("host and device tokenization differ; refusing to compare them")

    packed = feeds in ("packed", "packed_rows")
    if feeds == "packed":   # size the stream from the tokens per document of a sample
        d, n = batches.sample(64)
        counts = np.asarray(tokenize(tables, jnp.asarray(d), jnp.asarray(n))[1])
        batches.plan(rows=cfg["batch"], seq_len=cfg["max_tokens"],
                     tokens_per_document=float(np.clip(counts, 1, cfg["max_tokens"]).mean()))
        carry = jax.device_put(bb.packing.empty_carry(batches.capacity, cfg["max_tokens"]), device)
        print(f"packing: {batches.describe()}", flush=True)

    eval_before = evaluate()
    rec = Recorder(args.log_every, cfg["batch"])
    t0 = time.perf_counter()
    compile_s = None
    for step in range(1, cfg["steps"] + 1):
        if feeds == "packed":   # documents, packed into cfg["batch"] rows inside the step
            a, b = (jax.device_put(x, device) for x in batches.next_batch())
            out, carry, carried = step_packed(model, optimizer, tables, carry, a, b,
                                              rows=cfg["batch"], window=batches.window)
            batches.dispatched(carried)
        elif feeds == "packed_rows":
            rows = next(batches)
            out = step_rows(model, optimizer, *(jax.device_put(rows[k], device) for k in (
                "tokens", "tokens_segment_ids", "tokens_positions")))
        else:
            a, b = (jax.device_put(x, device) for x in next(batches))
            if feeds == "ids":
                out = step_ids(model, optimizer, a, b)
            else:
                out = step_bytes(model, optimizer, tables, a, b)
        if step == 1:
            jax.block_until_ready(out)
            compile_s = time.perf_counter() - t0
            rec.t_start = time.perf_counter()
        rec.add(step, out)
    jax.block_until_ready(out)
    elapsed = time.perf_counter() - rec.t_start
    rec.flush(cfg["steps"])
    eval_after = evaluate()

    losses = rec.losses
    k = min(10, max(1, len(losses) // 4))
    timed = max(cfg["steps"] - 1, 1)
    summary = dict(
        example=label,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=f"{device.platform}:{device.device_kind}",
        jax=jax.__version__,
        vocab=tok.vocab.name,
        mode=args.mode,
        tokenize=tokenize_desc,
        config=cfg,
        params=n_params,
        steps=cfg["steps"],
        first_loss=losses[0],
        last_loss=losses[-1],
        first10_mean=float(np.mean(losses[:k])),
        last10_mean=float(np.mean(losses[-k:])),
        eval_loss_before=eval_before,
        eval_loss_after=eval_after,
        compile_s=compile_s,
        steps_per_s=timed / elapsed,
        bytes_per_s=timed * cfg["batch"] * cfg["seq_bytes"] / elapsed,
        target_tokens=rec.tokens,
        truncated_rows=None if packed else int(rec.truncated),
        packing_tokens_dropped=int(rec.truncated[0]) if feeds == "packed" else None,
        packing_batches_ended_early=int(rec.truncated[1]) if feeds == "packed" else None,
        packing=batches.describe() if feeds == "packed" else None,
        losses=[round(x, 4) for x in losses],
    )
    print(f"loss {summary['first10_mean']:.3f} (first {k}) -> {summary['last10_mean']:.3f} (last {k}); "
          f"eval {eval_before:.3f} -> {eval_after:.3f}; {summary['steps_per_s']:.2f} steps/s "
          f"after {compile_s:.1f} s compile; "
          + (f"tokens dropped by packing {int(rec.truncated[0])}, batches ended early "
             f"{int(rec.truncated[1])}" if feeds == "packed" else
             "" if packed else f"truncated rows {int(rec.truncated)}"),
          flush=True)
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary written to {args.summary}")
    return summary


def read_text_bytes(args) -> bytes:
    from blockbpe_jax import testing

    return testing.read_corpus(args.data or default_corpus())


def random_batches(windows: ByteWindows, batch: int, seed: int):
    rng = np.random.default_rng(seed)
    while True:
        yield windows.sample(rng, batch)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    cfg = resolve_config(args)
    tok = load_tokenizer(args)
    windows = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="train")
    batches = random_batches(windows, cfg["batch"], args.seed)
    if not args.host_tokenize:
        run_training(args, cfg, tok, batches, "flax_train")
    else:  # the baseline: the host tokenizes every batch before the step
        host = HostTokenizer(tok, kind=args.host_tokenizer, mode=args.mode,
                             max_tokens=cfg["max_tokens"], device=jax.devices()[0])
        run_training(args, cfg, tok, (host(d, n) for d, n in batches), "flax_train", feeds="ids",
                     tokenize_desc=f"host/{args.host_tokenizer}", host_check=host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
