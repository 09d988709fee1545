"""Two processes on JAX's distributed runtime (localhost, CPU, 2 devices each) encode their
own shards with `encode_process_local`; every process gathers the global batch and checks all
rows against tiktoken (tests/multihost_worker.py does the work and writes a JSON report)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("multihost_worker.py")
N_PROCESSES, LOCAL_DEVICES, TIMEOUT_S = 2, 2, 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_encode_their_shards_into_one_global_batch(data_dir, tmp_path):
    env = dict(os.environ, BLOCKBPE_DATA=str(data_dir), JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "")
                          + f" --xla_force_host_platform_device_count={LOCAL_DEVICES}").strip())
    env.pop("CUDA_VISIBLE_DEVICES", None)
    port = _free_port()
    procs, logs = [], []
    for k in range(N_PROCESSES):
        log = open(tmp_path / f"worker{k}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), "--port", str(port), "--process-id", str(k),
             "--num-processes", str(N_PROCESSES), "--out", str(tmp_path / f"result{k}.json")],
            env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for p in procs:     # both, on a timeout or an error in either (the other would block)
            if p.poll() is None:
                p.kill()
                p.wait()
    text = []
    for k, log in enumerate(logs):
        log.seek(0)
        text.append(f"--- worker {k} ---\n" + log.read()[-3000:])
        log.close()
    assert codes is not None, f"workers still running after {TIMEOUT_S} s\n" + "\n".join(text)
    assert codes == [0] * N_PROCESSES, f"exit codes {codes}\n" + "\n".join(text)

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
        assert r["local_rows"] == [[k * rows + i * half, k * rows + (i + 1) * half]
                                   for i in range(LOCAL_DEVICES)]
        assert r["truncated_rows"] > 0
        assert r["total_tokens_jit"] == r["total_tokens_ref"]
    assert reports[0]["local_texts"] > reports[1]["local_texts"]   # uneven shards, padded rows
