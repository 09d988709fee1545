"""Special tokens as a tokenizer's host side sees them: the end-of-text id by family."""

from __future__ import annotations

# The end-of-text special by family, the first one found wins: OpenAI's and Qwen's, Llama 3's,
# DeepSeek's, SentencePiece's and Mistral's, Gemma's.
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "</s>", "<eos>")


def eot_token(vocab) -> int:
    """The id of the first of `EOT_NAMES` that `vocab` has as a special token; KeyError (as
    tiktoken's `Encoding.eot_token`) naming the vocabulary when it has none."""
    specials = vocab.special_tokens
    for name in EOT_NAMES:
        if name in specials:
            return specials[name]
    shown = sorted(specials)[:8]
    raise KeyError(
        f"{vocab.name} has no end-of-text special token (looked for {', '.join(EOT_NAMES)}); "
        f"its specials: {shown}{' ...' if len(specials) > len(shown) else ''}: pass the id you mean"
    )


def n_vocab(vocab) -> int:
    """The largest id + 1 (tiktoken's `max_token_value + 1`)."""
    tb = vocab.token_bytes
    return next((i + 1 for i in range(len(tb) - 1, -1, -1) if tb[i] is not None), 0)
