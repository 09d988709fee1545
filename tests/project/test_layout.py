"""The layout's rules, checked: no import circles inside the package (imports inside
functions included), a handful of modules at the package's top, one job per file (a long file
says why in its opening comment), and no warp collective that some lanes may skip."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "blockbpe_jax"
MAX_TOP_MODULES = 12  # modules at the top of blockbpe_jax/ besides __init__.py (packages hold the rest)
LONG_FILE = 500  # lines; a longer file's opening comment says why it is one file ("Why one file: ...")
WHY_ONE_FILE = "Why one file:"
SOURCE_GLOBS = (
    "blockbpe_jax/**/*.py",
    "ffi/**/*.h",
    "ffi/**/*.cuh",
    "ffi/**/*.cu",
    "ffi/**/*.cc",
    "tests/**/*.py",
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


def _imports(tree: ast.AST):
    """Every import statement of a module, at any depth (in functions and classes too: they
    run when called, and a circle through them is still a circle), except those of an
    `if TYPE_CHECKING:` block (never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _imports(node)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, wherever the import statement is (module
    level or inside a function). Importing `a.b.c` runs `a` and `a.b` first, so the packages on
    the way are edges too; a submodule's own ancestors are not (`from . import sibling` while
    the parent is being imported)."""
    mods = _modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                targets = subs + ([target] if len(subs) < len(node.names) else [])
            else:
                targets = [a.name for a in node.names]
            for t in targets:
                parts = t.split(".")
                for k in range(1, len(parts) + 1):
                    on_the_way = ".".join(parts[:k])
                    if on_the_way in mods and on_the_way != name and not name.startswith(on_the_way + "."):
                        graph[name].add(on_the_way)
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


def _throwaway_package(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    pkg = tmp_path / "blockbpe_jax"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)


def _circle_found() -> str:
    try:
        test_no_import_circles()
    except AssertionError as e:
        return str(e)
    raise AssertionError("the circle was not found")


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    # The check above must be able to fail: a two-module circle in a throwaway package.
    _throwaway_package(
        tmp_path, monkeypatch, {"a.py": "from .b import y\nx = 1\n", "b.py": "from .a import x\ny = 2\n"}
    )
    graph = import_graph()
    assert graph["blockbpe_jax.a"] == {"blockbpe_jax.b"} and graph["blockbpe_jax.b"] == {"blockbpe_jax.a"}
    assert "blockbpe_jax.a -> blockbpe_jax.b -> blockbpe_jax.a" in _circle_found()


def test_the_circle_check_sees_lazy_imports_and_packages(tmp_path, monkeypatch):
    # A circle closed by an import inside a function, and one through a package's __init__.py
    # (importing p.c runs p first); an `if TYPE_CHECKING:` import is no edge.
    lazy = {"a.py": "from .b import y\n", "b.py": "def f():\n    from . import a\n"}
    _throwaway_package(tmp_path / "lazy", monkeypatch, lazy)
    assert "blockbpe_jax.a -> blockbpe_jax.b -> blockbpe_jax.a" in _circle_found()
    through = {"p/__init__.py": "from .. import d\n", "p/c.py": "", "d.py": "from .p import c\n"}
    _throwaway_package(tmp_path / "through", monkeypatch, through)
    assert "blockbpe_jax.d -> blockbpe_jax.p -> blockbpe_jax.d" in _circle_found()
    typing_only = {
        "a.py": "from .b import y\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
    }
    _throwaway_package(tmp_path / "typing", monkeypatch, typing_only)
    test_no_import_circles()


def test_a_handful_of_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of blockbpe_jax/: {top}"


def opening_comment(text: str) -> str:
    """A source file's opening comment: its module docstring (Python) or the comment lines and
    blocks before its first line of code (C++, CUDA; and a Python file's leading # lines)."""
    try:
        doc = ast.get_docstring(ast.parse(text), clean=False)
    except SyntaxError:
        doc = None
    if doc is not None:
        return doc
    lines = []
    in_block = False
    for line in text.splitlines():
        s = line.strip()
        if in_block:
            lines.append(s)
            in_block = "*/" not in s
        elif s.startswith(("//", "#!", "# ")) or s == "#" or not s:
            lines.append(s)
        elif s.startswith("/*"):
            lines.append(s)
            in_block = "*/" not in s
        else:
            break
    return "\n".join(lines)


def test_one_job_per_file():
    # Files are cut by job, not by length: a file over LONG_FILE lines is one job that reads
    # better whole, and its opening comment says so ("Why one file: ...").
    unexplained = []
    for pattern in SOURCE_GLOBS:
        for path in ROOT.glob(pattern):
            text = path.read_text()
            n = len(text.splitlines())
            if n > LONG_FILE and WHY_ONE_FILE not in opening_comment(text):
                unexplained.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not unexplained, f"split these by job, or say why each is one ({WHY_ONE_FILE!r}): " + "; ".join(
        unexplained
    )


def test_the_opening_comment_is_found():
    assert "Why one file: x" in opening_comment('"""Doc.\n\nWhy one file: x."""\nimport os\n')
    cpp = "// A kernel.\n// Why one file: x.\n#pragma once\nint f();\n"
    assert "Why one file: x" in opening_comment(cpp)
    assert "Why one file" not in opening_comment("// A kernel.\nint f();\n// Why one file: x.\n")
    assert "Why one file: x" in opening_comment("/* A kernel.\n   Why one file: x. */\nint f();\n")


# A warp collective (a shuffle, vote or reduction over a full mask) in an operand that `?:`,
# `&&` or `||` may skip runs only in the lanes that evaluate it: the others never arrive and
# the warp hangs (as an early merge_in_warp did: lane 31 out of a __shfl_down_sync).
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
