"""encode_sharded on 4 CPU host devices: equal to the unsharded encode, rows stay sharded.

The device count is fixed when JAX initialises, so the checks run in a fresh interpreter
(this file run as a script) with XLA_FLAGS=--xla_force_host_platform_device_count=4.
"""

from __future__ import annotations

import os
import subprocess
import sys


def test_encode_sharded_on_four_host_devices(data_dir):
    env = dict(
        os.environ,
        BLOCKBPE_DATA=str(data_dir),
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip(),
    )
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "sharded checks passed" in run.stdout


def _worker() -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import blockbpe_jax as bb
    from blockbpe_jax import testing
    from blockbpe_jax.ops.sharding import encode_sharded, replicate

    assert jax.device_count() == 4, jax.devices()
    tok = bb.Tokenizer.from_file(testing.data_dir() / "vocab" / testing.VOCAB_FILES["cl100k"][0])
    raw = testing.read_corpus(testing.corpus_paths()[-1])[:100000]
    texts = testing.excerpts(raw, 1, 400, seed=5)[:63] + [b""]  # 64 rows, an empty one
    data, lengths = bb.pack_strings(texts, max_len=512)
    tables = tok.tables()
    ref = bb.encode(data, lengths, tables, max_tokens=96)  # some rows truncated
    assert (np.asarray(ref.counts) > 96).any()

    def check(out, mesh, what):
        rows = NamedSharding(mesh, P("data"))
        for name, a in zip(("ids", "counts"), out):
            assert a.sharding.is_equivalent_to(rows, a.ndim), (what, name, a.sharding)
            assert len(a.addressable_shards) == 4 and a.addressable_shards[0].data.shape[0] == 16
        np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(ref.ids), err_msg=what)
        np.testing.assert_array_equal(np.asarray(out.counts), np.asarray(ref.counts), err_msg=what)

    mesh = jax.make_mesh((4,), ("data",))
    check(encode_sharded(data, lengths, tables, mesh, max_tokens=96), mesh, "eager")

    # Inside jit, with inputs already batch-sharded and tables replicated: no all-gather.
    step = jax.jit(lambda d, l, t: encode_sharded(d, l, t, mesh, max_tokens=96))
    rows = NamedSharding(mesh, P("data"))
    args = jax.device_put(data, rows), jax.device_put(lengths, rows), replicate(tables, mesh)
    check(step(*args), mesh, "jit")
    hlo = step.lower(*args).compile().as_text()
    assert "all-gather" not in hlo and hlo.count('custom_call_target="bbpe_encode') == 1

    # A 2-D mesh: batch over "data" (2), replicated over "model" (2); a Tokenizer argument.
    mesh2 = jax.make_mesh((2, 2), ("data", "model"))
    out = encode_sharded(data, lengths, tok, mesh2, max_tokens=96, allowed_special="all")
    assert out.ids.sharding.is_equivalent_to(NamedSharding(mesh2, P("data")), 2)
    np.testing.assert_array_equal(np.asarray(out.ids), np.asarray(ref.ids))

    try:
        encode_sharded(data[:62], lengths[:62], tables, mesh, max_tokens=96)
    except ValueError as e:
        assert "multiple" in str(e)
    else:
        raise AssertionError("a batch of 62 on 4 devices must be refused")
    print("sharded checks passed")


if __name__ == "__main__":
    _worker()
