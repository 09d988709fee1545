"""What the corpus job's test files (tests/corpus/, tests/compat/test_hf_datasets.py) share: the
fixtures (the shared data directory, cl100k and r50k tokenizers, War and Peace, rows of the
corpora with tiktoken's ids), the reference ids, and the normalizer's two paths compared
(on the device or on the host: `assert_paths_agree`, the `engines` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax._data import find_data_dir
from blockbpe_jax.corpus import engine as engine_module
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.types import CorpusError

from helpers import gpu_devices


@pytest.fixture(scope="module")
def root() -> Path:
    path = find_data_dir()
    if path is None:
        pytest.skip("shared data not found (set BLOCKBPE_DATA or place it at ../shared/data)")
    return path


@pytest.fixture(scope="module")
def cl100k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/cl100k_base.tiktoken")


@pytest.fixture(scope="module")
def r50k(root) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(root / "vocab/tiktoken/r50k_base.tiktoken")


@pytest.fixture(scope="module")
def war_and_peace(root) -> bytes:
    return (root / "corpus/war_and_peace_en.txt").read_bytes()


def utf8_cut(raw: bytes, n: int) -> bytes:
    while n < len(raw) and (raw[n] & 0xC0) == 0x80:
        n -= 1
    return raw[:n]


def encode_batch_ids(tok, docs: list[bytes]) -> list[list[int]]:
    """The reference: `encode_batch` on the short documents together, long ones alone."""
    out: dict[int, list[int]] = {}
    short = [i for i, d in enumerate(docs) if len(d) <= 4096]
    groups = [short] + [[i] for i in range(len(docs)) if len(docs[i]) > 4096]
    for group in groups:
        if group:
            ids, counts = tok.encode_batch([docs[i] for i in group])
            ids, counts = np.asarray(ids), np.asarray(counts)
            assert (counts <= ids.shape[1]).all()
            out.update({i: ids[r, : counts[r]].tolist() for r, i in enumerate(group)})
    return [out[i] for i in range(len(docs))]


CL100K = "vocab/tiktoken/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def texts(root, war_and_peace) -> list[str]:
    questions = [
        json.loads(x)["question"] for x in (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    ]
    lines = [x for x in utf8_cut(war_and_peace[100_000:], 60_000).decode().split("\n") if x]
    return questions[:500] + ["", "ünïcödé — ✓ 日本語 🎉", " "] + lines + questions[500:]


@pytest.fixture(scope="module")
def want(root, texts) -> list[list[int]]:
    pytest.importorskip("tiktoken")
    from blockbpe_jax.testing import tiktoken_oracle

    tok = bb.Tokenizer.from_file(root / CL100K)
    return tiktoken_oracle("cl100k", tok, tok.vocab.pattern).encode_ordinary_batch(texts)


# The normalizer on the device or on the host (test_corpus_nfc.py, test_corpus_lowercase.py)
FIELD = "text"
DEVICES = [pytest.param("cpu", id="cpu")] + [
    pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"))
]


def device_of(kind: str):
    return jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]


def instances_made(monkeypatch, cls) -> list:
    """The objects of class cls made while the test runs, in order (its __init__ wrapped)."""
    made = []
    init = cls.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(cls, "__init__", recording)
    return made


@pytest.fixture
def engines(monkeypatch) -> list:
    """The WindowEncoders the jobs of a test make (which normalizer path each took, and how
    many documents it normalized on the host after the device reported them)."""
    return instances_made(monkeypatch, engine_module.WindowEncoder)


def outcome(tok, paths, device_normalizer, **options):
    """(ids, offsets) of the job in memory, or the text of the CorpusError it raises."""
    try:
        return corpus.encode_files_to_arrays(tok, paths, device_normalizer=device_normalizer, **options)
    except CorpusError as e:
        return str(e)


def assert_paths_agree(tok, paths, engines, **options):
    """The job with the normalizer on the device (device split off and on) gives what the
    host's normalizer gives; returns that."""
    host = outcome(tok, paths, False, device_split=False, **options)
    assert not engines[-1].device_normalizer and engines[-1].host_normalizes
    for split in (False, True):
        device = outcome(tok, paths, None, device_split=split, **options)
        e = engines[-1]
        assert e.device_normalizer and not e.host_normalizes and (e.device_split is not None) == split
        assert_same_outcome(device, host)
    return host


def assert_same_outcome(got, want) -> None:
    """Two `outcome`s alike: the same error text, or the same ids (and dtype) and offsets."""
    if isinstance(got, str) or isinstance(want, str):
        assert got == want
    else:
        assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])
        assert np.array_equal(got[1], want[1])


def write_jsonl(path, docs, ensure_ascii=False):
    path.write_text(
        "".join(json.dumps({"id": i, FIELD: d}, ensure_ascii=ensure_ascii) + "\n" for i, d in enumerate(docs))
    )
    return path
