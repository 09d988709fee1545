"""scripts/gpu_check.sh's `variant_path`, which its variant stages use: a variant whose package
is the one imported gets its PYTHONPATH; a variant folder without its Python files (a namespace
directory that Python passes over for another package of the same name) fails loudly; "base"
is the tree's own PYTHONPATH. Run on stub packages, with an interpreter that reads no site
folder (an editable install's finder would answer every import of the package itself)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def variant_path_function() -> str:
    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    m = re.search(r"^variant_path\(\) \{.*?^\}\n", text, re.M | re.S)
    assert m, "scripts/gpu_check.sh defines variant_path"
    return m.group(0)


def run_variant_path(tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python3.chmod(0o755)
    tree = tmp_path / "tree"  # the tree's own package, second on the path
    (tree / "blockbpe_jax").mkdir(parents=True, exist_ok=True)
    (tree / "blockbpe_jax" / "__init__.py").write_text("")
    script = variant_path_function() + f'PYTHONPATH={tree}\nvariant_path "{name}"\n'
    return subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_whole_variant_is_put_first(tmp_path):
    package = tmp_path / ".variants" / "good" / "blockbpe_jax"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    r = run_variant_path(tmp_path, "good")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{tmp_path}/.variants/good:{tmp_path}/tree"


def test_a_variant_without_its_python_files_fails_loudly(tmp_path):
    package = tmp_path / ".variants" / "modules_only" / "blockbpe_jax"
    package.mkdir(parents=True)
    (package / "_blockbpe_cuda.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    r = run_variant_path(tmp_path, "modules_only")
    assert r.returncode == 1
    assert r.stdout == ""
    assert "variant modules_only: its package is not the one imported" in r.stderr


def test_base_is_the_trees_own_path(tmp_path):
    r = run_variant_path(tmp_path, "base")
    assert r.returncode == 0
    assert r.stdout.strip() == f"{tmp_path}/tree"
