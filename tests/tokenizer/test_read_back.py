"""The way back from the device (blockbpe_jax/staging.py: read_back, Encoded.numpy): copies of
whole arrays and of prefixes through the pinned buffer, into the caller's page-locked or plain
buffers, after a fork; differential against np.asarray and tiktoken."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from blockbpe_jax import staging
from blockbpe_jax.vocab import KNOWN_PATTERNS

from helpers import gpu_devices, oracle
import staging_shared

needs_gpu = staging_shared.needs_gpu
tok, corpus_texts = (
    staging_shared.tok,
    staging_shared.corpus_texts,
)  # (module-scoped fixtures, requested by name)


def _arrays_to_read(device):
    rng = np.random.default_rng(5)
    host = [
        rng.integers(-(2**31), 2**31 - 1, (7, 33), dtype=np.int32),
        rng.integers(0, 255, 1001, dtype=np.uint8),
        np.zeros((0, 4), np.int32),
        rng.random((3, 5)) > 0.5,
        rng.random(17).astype(np.float32),
    ]
    return host, [jax.device_put(h, device) for h in host]


def test_read_back_off_the_gpu_is_np_asarray(tok):
    host, arrays = _arrays_to_read(jax.devices("cpu")[0])
    got = staging.read_back(arrays + [host[0]])
    for g, h in zip(got, host + [host[0]]):
        assert g.dtype == h.dtype and g.shape == h.shape
        np.testing.assert_array_equal(g, h)
    out = tok.encode_batch(["hello world", ""], device=jax.devices("cpu")[0])
    ids, counts = out.numpy()
    np.testing.assert_array_equal(ids, np.asarray(out.ids))
    np.testing.assert_array_equal(counts, np.asarray(out.counts))


def _check_prefixes(device):
    """read_back's prefixes: only the first n elements of a 1-D array; bad ones refused."""
    whole = np.arange(3 << 20, dtype=np.uint32) * 7  # (past the pinned buffer in full, not as 5 MiB)
    arrays = [jax.device_put(a, device) for a in (whole, whole[:100].astype(np.uint16), np.ones((2, 3)))]
    for n in (0, 1, 77, 5 << 18, whole.size):
        got = staging.read_back(arrays, [n, min(n, 100), None])
        np.testing.assert_array_equal(got[0], whole[:n])
        np.testing.assert_array_equal(got[1], whole[: min(n, 100)].astype(np.uint16))
        np.testing.assert_array_equal(got[2], np.ones((2, 3)))
        assert got[0].dtype == np.uint32 and got[1].dtype == np.uint16
    for bad in ([whole.size + 1, None, None], [-1, None, None], [None, None, 1]):
        with pytest.raises(ValueError, match="read_back: prefix"):
            staging.read_back(arrays, bad)
    # into: the corpus job's kept buffers, page-locked (its DMA alone) or not (through the
    # reader's pinned buffer); results are views of them where the DeviceReader copies
    pinned, plain = staging.pinned_empty(whole.nbytes + 64, device), np.empty(256, np.uint8)
    for n in (0, 5, whole.size):
        got = staging.read_back(arrays[:2], [n, 100], [pinned, plain])
        np.testing.assert_array_equal(got[0], whole[:n])
        np.testing.assert_array_equal(got[1], whole[:100].astype(np.uint16))
        if staging.available(device):
            assert n == 0 or np.shares_memory(got[0], pinned)
            assert np.shares_memory(got[1], plain)
            with pytest.raises(ValueError, match="`into` needs a uint8 buffer of 200 bytes"):
                staging.read_back(arrays[1:2], [100], [np.empty(199, np.uint8)])


def test_read_back_prefixes():
    _check_prefixes(jax.devices("cpu")[0])


@needs_gpu
def test_read_back_prefixes_gpu():
    _check_prefixes(gpu_devices()[0])


@needs_gpu
def test_pinned_buffer_after_a_fork_gpu():
    """A large page-locked buffer (pinned_empty: registered huge-page memory) is still where the
    parent's DMA lands after a fork, the parent having written to it since: had the fork made
    its pages copy-on-write, that write would have moved the parent's page away from the one
    CUDA pinned, and the read back would not show. The child does not touch it."""
    import os
    import warnings

    device = gpu_devices()[0]
    ids = np.arange(3 << 20, dtype=np.uint32) * 3
    on_device = jax.device_put(ids, device)
    buf = staging.pinned_empty(ids.nbytes, device)
    buf[:] = 1
    with warnings.catch_warnings():  # (JAX warns that a fork of a threaded process may deadlock)
        warnings.simplefilter("ignore")
        pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    buf[:] = 2  # (the parent's write after the fork)
    got = staging.read_back([on_device], [None], [buf])[0]
    assert np.shares_memory(got, buf)
    np.testing.assert_array_equal(got, ids)
    np.testing.assert_array_equal(buf.view(np.uint32), ids)


@needs_gpu
def test_read_back_equals_jax_copy_gpu(tok, corpus_texts):
    host, arrays = _arrays_to_read(gpu_devices()[0])
    big = jax.device_put(np.arange(17 << 20, dtype=np.int32), gpu_devices()[0])  # past the pinned buffer
    cpu = jax.device_put(host[0], jax.devices("cpu")[0])
    got = staging.read_back(arrays + [big, cpu] + arrays[:1])
    for k, (g, h) in enumerate(zip(got, host + [np.asarray(big), host[0], host[0]])):
        assert g.dtype == h.dtype and g.shape == h.shape
        assert g.flags.writeable or k == len(host) + 1  # (the CPU array's: np.asarray)
        np.testing.assert_array_equal(g, h)
    enc = oracle("cl100k", "tiktoken", KNOWN_PATTERNS["cl100k"])
    for texts in (corpus_texts[:1], corpus_texts[:300]):
        out = tok.encode_batch(texts)
        ids, counts = out.numpy()
        np.testing.assert_array_equal(ids, np.asarray(out.ids))
        np.testing.assert_array_equal(counts, np.asarray(out.counts))
        for k, t in enumerate(texts):
            assert ids[k, : counts[k]].tolist() == enc.encode_ordinary(t), k
