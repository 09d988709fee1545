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
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from lm_data import ByteWindows, HostTokenizer, load_tokenizer, random_batches, read_text_bytes
from lm_data import default_corpus, default_vocab  # noqa: F401 (re-exported: tests import them from here)
from lm_model import make_model_and_optimizer, make_steps

import blockbpe_jax as bb

# The model, its losses and train steps are in lm_model.py, the byte windows, vocabulary and
# host baseline in lm_data.py; grain_pipeline.py drives the same training with grain.

# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

TINY = dict(d_model=64, n_layers=2, n_heads=2, batch=8, seq_bytes=256, steps=300, lr=3e-3)
FULL = dict(d_model=256, n_layers=4, n_heads=4, batch=32, seq_bytes=1024, steps=300, lr=1e-3)


def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=description.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, help="train steps (default 300)")
    p.add_argument("--batch", type=int, help="strings per step (default 8 tiny / 32)")
    p.add_argument("--seq-bytes", type=int, help="bytes per string (default 256 tiny / 1024)")
    p.add_argument("--max-tokens", type=int, help="tokens per string, T (default 0.4 * seq_bytes)")
    p.add_argument("--tiny", action="store_true", help="CPU-sized model and batch")
    p.add_argument(
        "--mode",
        choices=("exact", "bytes"),
        default="exact",
        help="tokenization: exact (== tiktoken) or bytes (BlockBPE paper); default exact",
    )
    p.add_argument(
        "--host-tokenize",
        action="store_true",
        help="baseline: tokenize on the host, then ship ids (no on-device tokenization)",
    )
    p.add_argument("--host-tokenizer", choices=("tiktoken", "blockbpe-cpu"), default="tiktoken")
    p.add_argument("--vocab", type=Path, help="vocabulary file (default: shared r50k_base.tiktoken)")
    p.add_argument("--tiktoken", metavar="NAME", help="a tiktoken encoding name (tiktoken's cache)")
    p.add_argument(
        "--vocab-size",
        type=int,
        help="keep only the first N ranks (a smaller exact BPE); default 4096 with "
        "--tiny, else the whole vocabulary",
    )
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
    for key, val in (
        ("steps", args.steps),
        ("batch", args.batch),
        ("seq_bytes", args.seq_bytes),
        ("lr", args.lr),
        ("d_model", args.d_model),
        ("n_layers", args.layers),
        ("n_heads", args.heads),
    ):
        if val is not None:
            base[key] = val
    if args.vocab_size is None and args.tiny and not args.vocab and not args.tiktoken:
        args.vocab_size = 4096
    base["max_tokens"] = args.max_tokens or max(8, -(-base["seq_bytes"] * 2 // 5 // 8) * 8)
    return base


class Recorder:
    """Collects per-step (loss, tokens, truncated) device scalars; fetches them only when
    logging, so the host never waits on the device between steps."""

    def __init__(self, log_every: int, batch: int):
        self.log_every, self.batch = log_every, batch
        self.pending: list = []
        self.losses: list[float] = []
        self.tokens = 0
        self.truncated = 0  # summed per-step counts: a scalar, or a vector (packed steps)
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
        recent = self.losses[-len(vals) :]
        rate = ""
        if self.t_start is not None and step > 1:
            el = time.perf_counter() - self.t_start
            rate = f"  {(step - 1) / el:7.2f} steps/s"
        print(f"step {step:5d}  loss {np.mean(recent):7.4f}{rate}", flush=True)


def run_training(
    args,
    cfg: dict,
    tok: bb.Tokenizer,
    batches,
    label: str,
    *,
    feeds: str = "bytes",
    tokenize_desc: str = "in-step",
    host_check=None,
) -> dict:
    """Trains on `batches` and returns the summary dict. Shared with grain_pipeline.py.

    feeds="bytes": batches are (uint8[B, L], int32[B]) raw bytes, tokenized inside the step.
    feeds="ids": batches are (int32[B, T], int32[B]) ids and counts made on the host.
    feeds="packed": batches is a feeder of documents (grain_pipeline.DocumentFeeder): raw bytes,
    tokenized and packed on the device (`pack_stream`, first fit with carry-over) into
    cfg["batch"] rows of T tokens by a jitted pack step, then trained on by the packed_rows step.
    feeds="packed_rows": batches are dicts of rows packed on the host by grain (tokens,
    tokens_segment_ids, tokens_positions: int32[batch, T]).
    host_check(data, lengths) -> (ids, counts), if given, must equal the in-step ids."""
    device = jax.devices()[0]
    tables = tok.tables("none", device)  # device arrays, built once, passed to every step
    tokenize, step_bytes, step_ids, eval_bytes, pack_step, step_rows = make_steps(
        tok, mode=args.mode, max_tokens=cfg["max_tokens"], block_size=args.block_size
    )
    model, optimizer = make_model_and_optimizer(cfg, tok.vocab.n_vocab, args.seed)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    print(
        f"{label}: device={device.platform}:{device.device_kind} vocab={tok.vocab.name} "
        f"(n_vocab={tok.vocab.n_vocab}) mode={args.mode} params={n_params / 1e6:.2f}M "
        f"batch={cfg['batch']}x{cfg['seq_bytes']}B T={cfg['max_tokens']} "
        f"tokenize={tokenize_desc}",
        flush=True,
    )

    eval_set = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="eval")
    picks = np.linspace(0, len(eval_set.starts) - 1, 4 * cfg["batch"]).astype(int).reshape(4, -1)
    eval_batches = [eval_set.batch_at(eval_set.starts[row]) for row in picks]  # fixed, disjoint

    def evaluate() -> float:
        return float(
            np.mean(
                [float(eval_bytes(model, tables, jnp.asarray(d), jnp.asarray(n))) for d, n in eval_batches]
            )
        )

    # Sanity: the baseline's ids equal the in-step ids (same vocabulary, same mode).
    if host_check is not None:
        d0, n0 = eval_batches[0]
        ids_dev, cnt_dev = tokenize(tables, jnp.asarray(d0), jnp.asarray(n0))
        ids_host, cnt_host = host_check(d0, n0)
        same = bool(
            np.array_equal(np.asarray(cnt_dev), np.asarray(cnt_host))
            and np.array_equal(np.asarray(ids_dev), np.asarray(ids_host))
        )
        print(f"host-tokenized ids equal in-step ids: {same}", flush=True)
        if not same:
            raise SystemExit("host and device tokenization differ; refusing to compare them")

    packed = feeds in ("packed", "packed_rows")
    if feeds == "packed":  # size the stream from the tokens per document of a sample
        d, n = batches.sample(64)
        counts = np.asarray(tokenize(tables, jnp.asarray(d), jnp.asarray(n))[1])
        batches.plan(
            rows=cfg["batch"],
            seq_len=cfg["max_tokens"],
            tokens_per_document=float(np.clip(counts, 1, cfg["max_tokens"]).mean()),
        )
        carry = jax.device_put(bb.empty_carry(batches.capacity, cfg["max_tokens"]), device)
        print(f"packing: {batches.describe()}", flush=True)

    eval_before = evaluate()
    rec = Recorder(args.log_every, cfg["batch"])
    t0 = time.perf_counter()
    compile_s = None
    for step in range(1, cfg["steps"] + 1):
        if feeds == "packed":  # documents, tokenized and packed on the device
            a, b = (jax.device_put(x, device) for x in batches.next_batch())
            rows, stats, carry, carried = pack_step(
                tables, carry, a, b, rows=cfg["batch"], window=batches.window
            )
            out = (*step_rows(model, optimizer, *rows)[:2], stats)
            batches.dispatched(carried)
        elif feeds == "packed_rows":
            rows = next(batches)
            out = step_rows(
                model,
                optimizer,
                *(
                    jax.device_put(rows[k], device)
                    for k in ("tokens", "tokens_segment_ids", "tokens_positions")
                ),
            )
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
    print(
        f"loss {summary['first10_mean']:.3f} (first {k}) -> {summary['last10_mean']:.3f} (last {k}); "
        f"eval {eval_before:.3f} -> {eval_after:.3f}; {summary['steps_per_s']:.2f} steps/s "
        f"after {compile_s:.1f} s compile; "
        + (
            f"tokens dropped by packing {int(rec.truncated[0])}, batches ended early {int(rec.truncated[1])}"
            if feeds == "packed"
            else ""
            if packed
            else f"truncated rows {int(rec.truncated)}"
        ),
        flush=True,
    )
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary written to {args.summary}")
    return summary


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    cfg = resolve_config(args)
    tok = load_tokenizer(args)
    windows = ByteWindows(read_text_bytes(args), cfg["seq_bytes"], split="train")
    batches = random_batches(windows, cfg["batch"], args.seed)
    if not args.host_tokenize:
        run_training(args, cfg, tok, batches, "flax_train")
    else:  # the baseline: the host tokenizes every batch before the step
        host = HostTokenizer(
            tok,
            kind=args.host_tokenizer,
            mode=args.mode,
            max_tokens=cfg["max_tokens"],
            device=jax.devices()[0],
        )
        run_training(
            args,
            cfg,
            tok,
            (host(d, n) for d, n in batches),
            "flax_train",
            feeds="ids",
            tokenize_desc=f"host/{args.host_tokenizer}",
            host_check=host,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
