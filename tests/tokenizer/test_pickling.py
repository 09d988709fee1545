"""`Tokenizer` and its tiktoken view pickle as tiktoken's `Encoding` does: by content (the
unpickled tokenizer needs no file), its locks, tables and caches rebuilt at their first use
(tiktoken's own tests/test_pickle.py is ported in test_tiktoken_suite.py). A spawn pool (macOS'
default start method, and what a process holding CUDA needs) and
`datasets.Dataset.map(num_proc=2)` (its fingerprint hashes the function by pickling it) take
it; a spawned child encodes on the host without starting any JAX backend (no GPU needed).
"""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import blockbpe_jax as bb

import families
from helpers import REPO, load_tokenizer, vocab_path
from pickling_worker import encode_in_child

pytestmark = pytest.mark.usefixtures("data_dir")

TEXTS = ["hello world", "x <|endoftext|> y", "日本語のテキスト 123", "", "  spaces  \n\n"]


def _ids(tok, texts, allowed_special="none"):
    ids, counts = tok.encode_batch(texts, allowed_special=allowed_special, device=bb_cpu())
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[k, : counts[k]].tolist() for k in range(len(texts))]


def bb_cpu():
    import jax

    return jax.devices("cpu")[0]


@pytest.mark.parametrize("name,fmt", [("cl100k", "tiktoken"), ("llama3", "json"), ("r50k", "json")])
def test_tokenizer_round_trip(name, fmt):
    tok = load_tokenizer(name, fmt)
    _ids(tok, TEXTS)  # tables built, device tables cached, merges derived: all left behind
    tok.tables("all", host=True)
    copy = pickle.loads(pickle.dumps(tok))
    assert isinstance(copy, bb.Tokenizer) and copy is not tok
    assert copy.vocab.token_bytes == tok.vocab.token_bytes
    assert copy.vocab.special_tokens == tok.vocab.special_tokens
    assert dict(copy.vocab.merges) == dict(tok.vocab.merges)
    for allowed in ("none", "all"):
        assert _ids(copy, TEXTS, allowed) == _ids(tok, TEXTS, allowed)
    view = pickle.loads(pickle.dumps(tok.as_tiktoken()))
    assert view.encode_batch(TEXTS, allowed_special="all") == tok.as_tiktoken().encode_batch(
        TEXTS, allowed_special="all"
    )
    assert view.device.platform == "cpu" and view.name == tok.as_tiktoken().name


def test_pickle_needs_no_file(tmp_path):
    src = vocab_path("cl100k", "tiktoken")
    path = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(src, path)
    blob = pickle.dumps(bb.Tokenizer.from_file(path))
    # deterministic: the same file loaded twice pickles to the same bytes (datasets' hash)
    assert pickle.dumps(bb.Tokenizer.from_file(path)) == blob
    path.unlink()
    copy = pickle.loads(blob)
    assert _ids(copy, TEXTS) == _ids(load_tokenizer("cl100k", "tiktoken"), TEXTS)


def test_sentencepiece_family_pickles():
    tok = bb.Tokenizer.from_file(families.require("mistral-v3-spm"))
    copy = pickle.loads(pickle.dumps(tok))
    texts = ["Hello world", "  two  spaces", "unicode: 日本"]
    assert _ids(copy, texts) == _ids(tok, texts)


def test_spawn_pool_encodes_without_a_backend():
    tok = load_tokenizer("cl100k", "tiktoken")
    view = tok.as_tiktoken()
    want = view.encode_ordinary_batch(TEXTS)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map_async(encode_in_child, [(view, TEXTS), (tok, TEXTS)]).get(timeout=300)
    for ids, started_backend in results:
        assert ids == want
        assert not started_backend, "a spawned child started a JAX backend to encode on the host"


DATASETS_SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import datasets
    from datasets.fingerprint import Hasher
    import blockbpe_jax as bb

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    datasets.utils.logging.get_logger().addHandler(Keep())
    logging.getLogger().addHandler(Keep())

    path, texts = sys.argv[1], sys.argv[2:]
    tok = bb.Tokenizer.from_file(path)
    enc = tok.as_tiktoken()

    def fn(batch):
        return {"ids": enc.encode_ordinary_batch(batch["text"])}

    enc.encode_ordinary_batch(texts)  # used before the fork: on the CPU it starts no JAX backend
    ds = datasets.Dataset.from_dict({"text": texts * 8})
    out = ds.map(fn, batched=True, batch_size=4, num_proc=2)
    got = out["ids"]
    # the same content hashes the same, loaded twice (datasets' cache can hit across sessions)
    same_hash = Hasher.hash(tok) == Hasher.hash(bb.Tokenizer.from_file(path))
    ids, counts = tok.encode_batch(texts * 8)
    want = [ids[k, : counts[k]].tolist() for k in range(len(got))]
    bad = [r for r in records if "hashed properly" in r]
    print("RESULT", got == want, same_hash, bad)
    """
)


def test_datasets_map_num_proc():
    pytest.importorskip("datasets")
    path = vocab_path("cl100k", "tiktoken")
    proc = subprocess.run(
        [sys.executable, "-c", DATASETS_SCRIPT, str(path), *TEXTS],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    assert line == "RESULT True True []", (line, proc.stderr[-3000:])
    assert "hashed properly" not in proc.stderr
    assert "os.fork()" not in proc.stderr  # JAX's warning of a fork after its backends started
