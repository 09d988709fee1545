"""core/host_threads.h's worker pool under the host encoder and the packer: calls from many
Python threads at once (one gets the pool, the others start threads of their own), a forked
child (the pool's workers are the parent's) and the pool turned off all give the ids and rows
of one sequential call."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax.ops import primitive as ops

from helpers import compile_sanitized, load_tokenizer

pytestmark = pytest.mark.usefixtures("data_dir")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("cl100k", "tiktoken")


def batches(n: int) -> list[list[str]]:
    """n batches of 100-200 texts of 0.3-3 KB (over 16 KiB each: split over threads)."""
    rng = np.random.default_rng(3)
    words = ["wörds", "and", "日本語", "1234", "  ", "\n", "it's", "🎉", "tokens"]
    return [
        [" ".join(rng.choice(words, int(k))) for k in rng.integers(50, 500, int(rng.integers(100, 200)))]
        for _ in range(n)
    ]


def test_concurrent_callers(tok):
    encoder = ops.host_encoder(tok.tables("none", host=True))
    work = batches(24)
    want = [encoder.encode(b) for b in work]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            assert list(pool.map(encoder.encode, work)) == want
    big = [["x" * 3000 + str(k)] * 1500 for k in range(8)]  # 4.5 MB a batch: the packer's threads
    packed = [bb.pack_strings(b) for b in big]
    with ThreadPoolExecutor(8) as pool:
        for got, (data, lengths) in zip(pool.map(bb.pack_strings, big), packed):
            np.testing.assert_array_equal(got[0], data)
            np.testing.assert_array_equal(got[1], lengths)


def _child(tok, work, want, queue):
    encoder = ops.host_encoder(tok.tables("none", host=True))
    queue.put([encoder.encode(b) for b in work] == want)


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # (the child makes no JAX call)
def test_forked_child(tok):
    encoder = ops.host_encoder(tok.tables("none", host=True))
    work = batches(4)
    want = [encoder.encode(b) for b in work]  # (the parent's pool started)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(tok, work, want, queue))
    child.start()
    child.join(120)
    if child.exitcode is None:  # (hung: waiting for workers it does not have)
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=1) is True


def test_pool_turned_off(tok, tmp_path):
    work = batches(3)
    encoder = ops.host_encoder(tok.tables("none", host=True))
    want = [encoder.encode(b) for b in work]
    (tmp_path / "work.json").write_text(json.dumps(work))
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[2]); from helpers import load_tokenizer; "
        "from blockbpe_jax.ops import primitive as ops; tok = load_tokenizer('cl100k', 'tiktoken'); "
        "enc = ops.host_encoder(tok.tables('none', host=True)); "
        "print(json.dumps([enc.encode(b) for b in json.load(open(sys.argv[1]))]))"
    )
    env = dict(os.environ, BLOCKBPE_WORKER_POOL="0")
    tests = os.path.dirname(os.path.dirname(__file__))
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "work.json"), tests],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == want


@pytest.mark.parametrize("spin_us", ["50", "0"], ids=["spinning", "sleeping"])
def test_pool_under_thread_sanitizer(tmp_path, spin_us):
    """The pool's hand-offs (a job published, workers spinning or asleep, the join) are
    data-race free by ThreadSanitizer, whether the workers spin after a job or sleep at once."""
    out = compile_sanitized("host_threads_sanitized.cc", tmp_path / "host_threads_sanitized", "thread")
    # (eight threads whatever the machine has: a pool of seven workers even on two cores)
    env = dict(
        os.environ, BLOCKBPE_WORKER_SPIN_US=spin_us, BLOCKBPE_HOST_THREADS="8", TSAN_OPTIONS="halt_on_error=1"
    )
    run = subprocess.run([str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr[-3000:]
