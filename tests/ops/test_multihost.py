"""Two processes on JAX's distributed runtime (localhost, CPU, 2 devices each) encode their
own shards with `encode_process_local`; every process gathers the global batch and checks all
rows against tiktoken (tests/multihost_worker.py does the work and writes a JSON report).
The same through benchmarks/sharded.py --processes 2 at a tiny size (its 2-GPU run is that
script with one GPU per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from blockbpe_jax.ops.sharding import run_local_processes

WORKER = Path(__file__).resolve().parents[1] / "multihost_worker.py"
SHARDED = Path(__file__).resolve().parents[2] / "benchmarks" / "sharded.py"
N_PROCESSES, LOCAL_DEVICES, TIMEOUT_S = 2, 2, 120


def _cpu_env(data_dir, local_devices: int = LOCAL_DEVICES) -> dict:
    env = dict(
        os.environ,
        BLOCKBPE_DATA=str(data_dir),
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=(
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={local_devices}"
        ).strip(),
    )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _run(argv_for, data_dir, tmp_path, local_devices: int = LOCAL_DEVICES):
    env = _cpu_env(data_dir, local_devices)
    codes, logs = run_local_processes(
        argv_for, N_PROCESSES, log_dir=tmp_path, timeout_s=TIMEOUT_S, env_for=lambda k: env
    )
    text = "\n".join(f"--- process {k} ---\n{log}" for k, log in enumerate(logs))
    assert codes is not None, f"processes still running after {TIMEOUT_S} s\n" + text
    assert codes == [0] * N_PROCESSES, f"exit codes {codes}\n" + text


def test_two_processes_encode_their_shards_into_one_global_batch(data_dir, tmp_path):
    _run(
        lambda k, port: [
            sys.executable,
            str(WORKER),
            "--port",
            str(port),
            "--process-id",
            str(k),
            "--num-processes",
            str(N_PROCESSES),
            "--out",
            str(tmp_path / f"result{k}.json"),
        ],
        data_dir,
        tmp_path,
    )
    reports = [json.loads((tmp_path / f"result{k}.json").read_text()) for k in range(N_PROCESSES)]
    rows = reports[0]["rows_per_process"]
    b = rows * N_PROCESSES
    for k, r in enumerate(reports):
        assert r["process_id"] == k and r["process_count"] == N_PROCESSES
        assert r["device_count"] == N_PROCESSES * LOCAL_DEVICES
        assert r["local_device_count"] == LOCAL_DEVICES
        assert r["errors"] == [] and r["equal_to_tiktoken"]
        assert r["mismatched_rows"] == 0 and r["mismatched_rows_tables"] == 0
        assert r["rows_checked"] == b and r["rows_per_process"] == rows
        assert r["global_shape"] == {"ids": [b, 96], "counts": [b]}
        assert r["gathered_shape"] == [b, 96] and r["spec"] == ["data"]
        # Process k holds global rows k*rows .. (k+1)*rows, half on each local device.
        half = rows // LOCAL_DEVICES
        assert r["local_rows"] == [
            [k * rows + i * half, k * rows + (i + 1) * half] for i in range(LOCAL_DEVICES)
        ]
        assert r["truncated_rows"] > 0
        assert r["total_tokens_jit"] == r["total_tokens_ref"]
    assert reports[0]["local_texts"] > reports[1]["local_texts"]  # uneven shards, padded rows


def test_sharded_benchmark_two_processes(data_dir, tmp_path):
    """benchmarks/sharded.py --processes 2 (one device per process, as on a 2-GPU machine):
    both processes time the global encode and check every row against tiktoken."""
    import subprocess

    out = tmp_path / "out"
    env = _cpu_env(data_dir, 1)
    proc = subprocess.run(
        [
            sys.executable,
            str(SHARDED),
            "--processes",
            "2",
            "--platform",
            "cpu",
            "--rows",
            "6",
            "--bytes",
            "300",
            "--reps",
            "2",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 30,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads((out / "sharded_multiprocess.json").read_text())
    assert r["processes"] == 2 and len(r["per_process"]) == 2
    for k, p in enumerate(r["per_process"]):
        assert p["process_id"] == k and p["process_count"] == 2 and p["local_device_count"] == 1
        assert p["rows_checked"] == 12 and p["mismatched_rows"] == 0 and p["errors"] == []
        assert p["global_shape"] == [12, 300] and p["median_s"] > 0
    assert r["ids_equal_tiktoken"] is True


def test_exit_distributed_exits_with_the_code_and_flushed_output():
    """sharding.exit_distributed: the process ends with the given code and its printed output
    (flushed first: os._exit skips the interpreter's flush), also with no distributed runtime."""
    code = (
        "from blockbpe_jax.ops.sharding import exit_distributed; print('report', end=''); exit_distributed(3)"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout) == (3, "report"), done.stderr
