"""Functions a spawned child process runs for tests/tokenizer/test_pickling.py (importable by name: a
spawn child imports the module, not the test's)."""

from __future__ import annotations


def encode_in_child(args):
    """(a pickled Tokenizer or its tiktoken view, texts) -> (ids, whether this process started
    a JAX backend while encoding)."""
    encoder, texts = args
    from jax._src import xla_bridge

    ids = encoder.encode_ordinary_batch(texts) if hasattr(encoder, "encode_ordinary_batch") else None
    if ids is None:  # a Tokenizer: through its default view
        ids = encoder.as_tiktoken().encode_ordinary_batch(texts)
    return ids, xla_bridge.backends_are_initialized()
