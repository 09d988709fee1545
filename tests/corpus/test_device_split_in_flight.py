"""The corpus job's device split without a per-block wait (corpus/device_split.py: `dispatch`,
`PendingSplit.result`; corpus/documents.py: `_line_windows`): the next blocks' splits are
dispatched before a block's results are read back, at most `in_flight` at once, read back in
order, their slots given back once read (also when the job stops at a bad line); and the job's
output with every bound equals the host reader's."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from blockbpe_jax.corpus import device_split as device_split_module
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared
from corpus_shared import utf8_cut
from helpers import gpu_devices
import test_corpus_device_split
from test_corpus_device_split import FIELD, assert_same

# the fixtures of corpus_shared and test_corpus_device_split, requested by name below
root, cl100k, war_and_peace = corpus_shared.root, corpus_shared.cl100k, corpus_shared.war_and_peace
splits = test_corpus_device_split.splits
GPU = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@pytest.fixture
def events(monkeypatch) -> list:
    """("dispatch", block) and ("result", block) in the order the jobs of a test make them
    (blocks numbered per DeviceSplit in dispatch order), and ("pending", n) after each
    dispatch: the blocks then dispatched and not read back."""
    log: list = []
    dispatch, result = device_split_module.DeviceSplit.dispatch, device_split_module.PendingSplit.result

    def dispatching(self, block, field, page_locked=False):
        pending = dispatch(self, block, field, page_locked)
        pending.number = getattr(self, "dispatched", 0)
        self.dispatched = pending.number + 1
        log.append(("dispatch", pending.number))
        log.append(("pending", self.pending))
        return pending

    def reading(self):
        log.append(("result", self.number))
        return result(self)

    monkeypatch.setattr(device_split_module.DeviceSplit, "dispatch", dispatching)
    monkeypatch.setattr(device_split_module.PendingSplit, "result", reading)
    return log


def jsonl_of_war_and_peace(war_and_peace: bytes, tmp_path, n: int = 300_000):
    """War and Peace's paragraphs as JSONL (escapes: quotes, newlines inside documents,
    non-ASCII as \\u escapes on every other line), with empty documents among them."""
    paragraphs = utf8_cut(war_and_peace, n).decode().split("\n\n")
    lines = []
    for i, p in enumerate(paragraphs):
        lines.append(json.dumps({"id": i, FIELD: p}, ensure_ascii=i % 2 == 0))
        if i % 9 == 4:
            lines.append(json.dumps({FIELD: ""}))
    path = tmp_path / "wp.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "kind,in_flight,pack_width",
    [("cpu", n, w) for n in (1, 2, 3, 5) for w in (0, 16384)]
    + [pytest.param("gpu", n, w, marks=GPU) for n in (1, 3) for w in (0, 16384)],
)
def test_in_flight_bound_and_order(
    cl100k, war_and_peace, tmp_path, splits, events, monkeypatch, kind, in_flight, pack_width
):
    """Every block's split is dispatched `in_flight - 1` blocks ahead of the block read back
    (so, with in_flight >= 2, block k + 1's before block k's results are read), never more
    than in_flight pending; the results read in dispatch order; every slot given back; the
    same ids and offsets as the host reader. With packing the documents are read back into
    kept buffers as on a GPU (DOCUMENTS_ON_HOST_ON_CPU off; on a GPU by DMA into page-locked
    ones), which later windows reuse."""
    monkeypatch.setattr(device_split_module, "IN_FLIGHT", in_flight)
    monkeypatch.setattr(device_split_module, "DOCUMENTS_ON_HOST_ON_CPU", False)
    path = jsonl_of_war_and_peace(war_and_peace, tmp_path)
    device = jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]
    assert_same(cl100k, [path], jsonl_field=FIELD, window_bytes=8 << 10, pack_width=pack_width, device=device)
    (split,) = splits
    blocks = split.blocks
    assert blocks > 20 and split.given_up == 0 and split.in_flight == in_flight
    assert split.pending == 0 and split.most_pending == in_flight
    dispatched = [b for what, b in events if what == "dispatch"]
    read = [b for what, b in events if what == "result"]
    assert dispatched == read == list(range(blocks))
    assert max(n for what, n in events if what == "pending") == in_flight
    for k in range(blocks):  # (block k read once min(k + in_flight, blocks) were dispatched)
        before = events.index(("result", k))
        assert sum(1 for what, _ in events[:before] if what == "dispatch") == min(k + in_flight, blocks)


@pytest.mark.parametrize("in_flight", [1, 3])
def test_stopping_at_a_bad_line_gives_the_slots_back(
    cl100k, war_and_peace, tmp_path, splits, monkeypatch, in_flight
):
    """A bad line (the device gives up on its block, the host raises the file:line error)
    with blocks after it dispatched: the same error as the host reader, and the splits still
    in flight waited for and their slots given back."""
    monkeypatch.setattr(device_split_module, "IN_FLIGHT", in_flight)
    path = jsonl_of_war_and_peace(war_and_peace, tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[600] = b'{"text": "unterminated}'
    path.write_bytes(b"\n".join(lines))
    error = assert_same(cl100k, [path], jsonl_field=FIELD, window_bytes=8 << 10)
    assert isinstance(error, str) and error.startswith(f"{path}:601: ")
    (split,) = splits
    assert split.given_up == 1 and split.pending == 0
    assert split.blocks > 5  # (blocks before the bad one were read back)


def test_in_flight_must_be_positive(cl100k):
    from blockbpe_jax.corpus.device import WindowBuffers
    import jax

    device = jax.devices("cpu")[0]
    with pytest.raises(ValueError, match="in_flight must be >= 1"):
        device_split_module.DeviceSplit(device, WindowBuffers(device), b"", in_flight=0)


def test_copy_in_parts(monkeypatch):
    """The block's copy into its slot on threads: every part, with parts that do not divide it."""
    monkeypatch.setattr(device_split_module, "COPY_PART", 1000)
    monkeypatch.setattr(device_split_module, "COPY_THREADS", 3)
    rng = np.random.default_rng(1)
    for n in [0, 999, 2000, 3001, 10_007]:
        source = rng.integers(0, 256, n, dtype=np.uint8)
        into = np.zeros(n + 5, np.uint8)
        device_split_module.copy_in_parts(into[:n], source)
        assert np.array_equal(into[:n], source) and not into[n:].any()


def test_job_error_in_flight_is_a_corpus_error(cl100k, tmp_path, splits, monkeypatch):
    """A document over --max-len in a block read back while later ones are in flight: the
    job's one-line error naming its line, no slot left pending."""
    monkeypatch.setattr(device_split_module, "IN_FLIGHT", 4)
    docs = ["short"] * 3000
    docs[2000] = "x" * 5000
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({FIELD: d}) + "\n" for d in docs))
    with pytest.raises(CorpusError, match=rf"^{path}:2001: document of 5000 bytes"):
        corpus.encode_files_to_arrays(
            cl100k, [path], jsonl_field=FIELD, window_bytes=4 << 10, max_len=4096, device_split=True
        )
    (split,) = splits
    assert split.pending == 0 and split.most_pending == 4
