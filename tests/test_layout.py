"""The layout's rules, checked: no import circles inside the package, no source file much
over 400 lines (generated files excepted), and no warp collective that some lanes may skip."""

from __future__ import annotations

import ast
import re
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


# A warp collective (a shuffle, vote or reduction over a full mask) in an operand that `?:`,
# `&&` or `||` may skip runs only in the lanes that evaluate it: the others never arrive and
# the warp hangs (session 33's first merge_in_warp: lane 31 out of a __shfl_down_sync).
_COLLECTIVE = re.compile(r"__(?:shfl\w*|ballot|any|all|reduce_\w+|match_\w+)_sync\s*\(")


def conditional_collectives(code: str) -> list[str]:
    """The statements of CUDA source `code` (comments dropped) with a collective that a `?:`,
    `&&` or `||` may skip: walking back from the call through its statement, such an operator
    before it at its own level or an enclosing one (a closed group before it, say another
    call's arguments, is skipped whole, and so is the rest of an argument list past a comma)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.S)
    found = []
    for m in _COLLECTIVE.finditer(code):
        depth, sibling, i = 0, False, m.start() - 1  # sibling: past a comma of its level
        while i >= 0 and code[i] not in ";{}":
            c = code[i]
            if c == ")":
                depth += 1
            elif c == "(":
                sibling = sibling and depth > 0
                depth = max(depth - 1, 0)
            elif depth == 0 and c == ",":
                sibling = True
            elif depth == 0 and not sibling and (c == "?" or code[i - 1 : i + 1] in ("&&", "||")):
                break
            elif depth == 0 and not sibling and c == ":" and ":" not in (code[i - 1], code[i + 1]):
                break
            i -= 1
        if i >= 0 and code[i] not in ";{}":
            start = max(code.rfind(";", 0, i), code.rfind("{", 0, i), code.rfind("}", 0, i)) + 1
            end = code.find(";", m.end())
            found.append(" ".join(code[start:end].split()))
    return found


def test_no_warp_collective_in_a_conditional_operand():
    found = []
    for pattern in ("ffi/**/*.cuh", "ffi/**/*.cu"):
        for path in ROOT.glob(pattern):
            found += [f"{path.relative_to(ROOT)}: {s}" for s in conditional_collectives(path.read_text())]
    assert not found, "every lane must reach each collective: " + "; ".join(found)


def test_the_collective_check_finds_them():
    bad = [
        "const int r = lane == 31 ? x : __shfl_down_sync(~0u, t, 1);",
        "if (ok && __any_sync(~0u, flag)) return;",
        "y = a || __ballot_sync(~0u, b) != 0;",
        "const int32_t right[2] = {lane == 31 ? hi : __shfl_down_sync(~0u, t, 1), 0};",
        "if (ok) x = f(a && g(b, __shfl_sync(~0u, t, 0)));",
    ]
    good = [
        "const int d = __shfl_down_sync(~0u, t, 1);  // lane 31: its own",
        "const int r = lane == 31 ? x : d;",
        "cands = first_only_candidates(cands, __ballot_sync(~0u, cand && first_only_rank(r)));",
        "f = __ballot_sync(~0u, a && b) | (uint64_t)__ballot_sync(~0u, c) << 32;",
        "x = f(a ? b : c, __shfl_sync(~0u, t, 0));",
        'static_assert(N > 0, "n"); std::vector<int> v; x = ::bbpe::g(__reduce_min_sync(~0u, y));',
    ]
    assert all(conditional_collectives(b) for b in bad)
    assert not any(conditional_collectives(g) for g in good)
