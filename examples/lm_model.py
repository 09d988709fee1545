"""The model side shared by the examples: a small pre-LN decoder-only transformer (Flax NNX),
its next-token losses on padded and on packed rows, the optimizer, and the jitted train steps
(one tokenizes raw bytes inside the step, the others take host-made ids or rows)."""

from __future__ import annotations

from dataclasses import dataclass

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import blockbpe_jax as bb


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
        return bb.encode(
            data,
            lengths,
            tables,
            max_tokens=max_tokens,
            mode=mode,
            block_size=block_size,
            check_lengths=False,
        )

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

    @functools.partial(jax.jit, static_argnames=("rows", "window"))
    def pack_step(tables, carry, data, lengths, rows, window):
        # Documents tokenized, then packed into `rows` rows of T tokens by first fit over the
        # stream (grain's FirstFitPackIterDataset); what does not fit waits in `carry`, on the
        # device, for the next step. The rows then go through the same train step as rows
        # packed on the host, so both runs compute bit for bit the same losses.
        packed, carry, rep = bb.pack_stream(
            carry, tokenize(tables, data, lengths), seq_len=max_tokens, rows=rows, window=window
        )
        stats = jnp.stack(
            [rep.tokens_lost + packed.report.tokens_truncated, (~rep.batch_full).astype(jnp.int32)]
        )
        return (packed.tokens, packed.segment_ids, packed.positions), stats, carry, rep.documents_carried

    @nnx.jit
    def train_step_packed_rows(model, optimizer, tokens, segment_ids, positions):
        # Rows packed on the host (grain's own packer): the same loss on the same layout.
        loss, n = update_packed(model, optimizer, bb.Packed(tokens, segment_ids, positions, None))
        return loss, n, jnp.zeros(2, jnp.int32)

    @nnx.jit
    def eval_bytes(model, tables, data, lengths):
        ids, counts = tokenize(tables, data, lengths)
        return lm_loss(model, ids, counts)[0]

    return (
        jax.jit(tokenize),
        train_step_bytes,
        train_step_ids,
        eval_bytes,
        pack_step,
        train_step_packed_rows,
    )


def make_model_and_optimizer(cfg: dict, vocab_size: int, seed: int):
    mcfg = ModelConfig(
        vocab_size=vocab_size,
        max_tokens=cfg["max_tokens"],
        d_model=cfg["d_model"],
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
    )
    warmup = max(1, min(20, cfg["steps"] // 10))
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg["lr"], warmup, max(cfg["steps"], warmup + 1), end_value=cfg["lr"] * 0.1
    )
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))

    model = CausalLM(mcfg, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    # Commit the state to the device: the train step's outputs are committed, and inputs
    # that differ in committedness from the first call's would compile the step twice.
    state = jax.device_put(nnx.state((model, optimizer)), jax.devices()[0])
    nnx.update((model, optimizer), state)
    return model, optimizer
