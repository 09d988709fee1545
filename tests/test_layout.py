"""The layout's rules, checked: no import circles inside the package, and no source file much
over 400 lines (generated files excepted)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "blockbpe_jax"
MAX_LINES = 420
SOURCE_GLOBS = (
    "blockbpe_jax/**/*.py",
    "ffi/**/*.h",
    "ffi/**/*.cuh",
    "ffi/**/*.cu",
    "ffi/**/*.cc",
    "tests/*.py",
    "benchmarks/*.py",
    "examples/*.py",
    "scripts/*.py",
)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level (imports inside functions and
    `if TYPE_CHECKING:` blocks are not circles at import time). A submodule importing its own
    parent package (`from . import sibling`) is not an edge: the parent is being imported."""
    mods = _modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                targets = subs + ([target] if len(subs) < len(node.names) else [])
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name and not name.startswith(t + ".")}
    return graph


def test_no_import_circles():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    # The check above must be able to fail: a two-module circle in a throwaway package.
    pkg = tmp_path / "blockbpe_jax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import y\nx = 1\n")
    (pkg / "b.py").write_text("from .a import x\ny = 2\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    graph = import_graph()
    assert graph["blockbpe_jax.a"] == {"blockbpe_jax.b"} and graph["blockbpe_jax.b"] == {"blockbpe_jax.a"}
    try:
        test_no_import_circles()
    except AssertionError as e:
        assert "blockbpe_jax.a -> blockbpe_jax.b -> blockbpe_jax.a" in str(e)
    else:
        raise AssertionError("the circle was not found")


def test_no_source_file_much_over_400_lines():
    long = []
    for pattern in SOURCE_GLOBS:
        for path in ROOT.glob(pattern):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, "split these by job: " + "; ".join(long)
