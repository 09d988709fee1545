"""Every ```python block of README.md and docs/*.md runs, on the CPU, as written.

How the blocks run:

- The blocks of one file run in order, as one program: they share one namespace, so a block
  may use what an earlier block of the same file defined (`tok`, `texts`, ...). Each block is
  one test (`README.md:40` names the block whose fence opens on line 40); a block after a
  failed one in the same file is skipped, since it may depend on it (the failed block's test
  fails).
- The working directory is a fresh temporary folder holding links to the shared data
  (BLOCKBPE_DATA or ../shared/data; absent: every block skips): every file of `vocab/tiktoken/`
  and `corpus/` by its name (`cl100k_base.tiktoken`, `war_and_peace_en.txt`), and every folder
  of `vocab/` by its name (`llama3/`). So a block names a file as a user with the file beside
  them would. Blocks that write (`DIR/shard`) write there.
- Blocks that would need a GPU or several devices are written to run anywhere: the primitive
  runs where its data lives, and a mesh over `jax.devices()` is a mesh of one on the CPU.
- A block that imports an optional package that is not installed (ModuleNotFoundError for a
  module outside blockbpe_jax), or that calls pytest.skip (tests/families.py's `require`),
  skips with that reason; the next blocks of the file still run.
- A block can be marked not runnable only by a comment on the line before its fence,
  `<!-- no-run: reason -->`; such blocks are listed in NO_RUN below (the test fails when the
  markers and the list differ) and are printed by `pytest -rs` as skips.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
NO_RUN_MARK = re.compile(r"^<!--\s*no-run:\s*(.*?)\s*-->$")

# (file, line of the fence) -> reason, for every block marked `<!-- no-run: reason -->`.
NO_RUN: dict[tuple[str, int], str] = {}


@dataclass
class Block:
    file: str  # relative to the repository root
    line: int  # the line of its opening fence
    code: str
    no_run: str | None = None  # the marker's reason

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}"


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """The ```python blocks of a Markdown file, in order, with their no-run markers."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = next((s.strip() for s in reversed(lines[: line - 1]) if s.strip()), "")
        marker = NO_RUN_MARK.match(before)
        rel = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        found.append(Block(rel, line, m.group(1), marker.group(1) if marker else None))
    return found


@dataclass
class Outcome:
    status: str  # "passed", "skipped" or "failed"
    detail: str = ""
    output: str = field(default="", repr=False)


def run_blocks(blocks: list[Block], workdir: Path) -> dict[str, Outcome]:
    """Runs the blocks in order in one namespace, in `workdir`; block name -> Outcome."""
    namespace: dict = {"__name__": "__docs__"}
    outcomes: dict[str, Outcome] = {}
    failed = None
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        for block in blocks:
            if block.no_run is not None:
                outcomes[block.name] = Outcome("skipped", f"marked no-run: {block.no_run}")
                continue
            if failed is not None:
                outcomes[block.name] = Outcome("skipped", f"an earlier block of the file failed ({failed})")
                continue
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(block.code, block.name, "exec"), namespace)
            except ModuleNotFoundError as e:
                if (e.name or "").split(".")[0] == "blockbpe_jax":
                    failed = block.name
                    outcomes[block.name] = Outcome("failed", traceback.format_exc(), out.getvalue())
                else:
                    outcomes[block.name] = Outcome("skipped", f"needs the package {e.name!r}")
            except pytest.skip.Exception as e:
                outcomes[block.name] = Outcome("skipped", str(e))
            except BaseException:  # noqa: BLE001 (every error of a block is its test's failure)
                failed = block.name
                outcomes[block.name] = Outcome("failed", traceback.format_exc(), out.getvalue())
            else:
                outcomes[block.name] = Outcome("passed", output=out.getvalue())
    finally:
        os.chdir(previous)
    return outcomes


def link_shared_data(data_dir: Path, workdir: Path) -> None:
    """Links the shared vocabularies and corpora into `workdir` by their names."""
    entries = [*(data_dir / "vocab" / "tiktoken").iterdir(), *(data_dir / "corpus").iterdir()]
    entries += [p for p in (data_dir / "vocab").iterdir() if p.is_dir() and p.name != "tiktoken"]
    for p in entries:
        target = workdir / p.name
        if not target.exists():
            target.symlink_to(p.resolve(), target_is_directory=p.is_dir())


ALL_BLOCKS = [b for path in DOC_FILES for b in blocks_of(path)]


@pytest.fixture(scope="module")
def file_outcomes(data_dir, tmp_path_factory):
    """file -> {block name -> Outcome}, each file's blocks run once, on first use."""
    done: dict[str, dict[str, Outcome]] = {}

    def outcomes(file: str) -> dict[str, Outcome]:
        if file not in done:
            workdir = tmp_path_factory.mktemp("docs_" + re.sub(r"\W", "_", file))
            link_shared_data(data_dir, workdir)
            done[file] = run_blocks([b for b in ALL_BLOCKS if b.file == file], workdir)
        return done[file]

    return outcomes


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.name)
def test_block_runs(block, file_outcomes):
    outcome = file_outcomes(block.file)[block.name]
    if outcome.status == "skipped":
        pytest.skip(f"{block.name}: {outcome.detail}")
    assert outcome.status == "passed", (
        f"the code block at {block.name} fails as written:\n{outcome.detail}"
        + (f"\nits output:\n{outcome.output}" if outcome.output else "")
    )


def test_every_doc_has_its_blocks_found():
    """The README and the manuals that show code have blocks here (a fence typo would hide
    a block from this test)."""
    files = {b.file for b in ALL_BLOCKS}
    for name in ("README.md", "docs/api.md", "docs/corpus.md", "docs/multi_device.md"):
        assert name in files, f"{name}: no ```python block found"
    for path in DOC_FILES:
        opened = len(re.findall(r"^```python", path.read_text(encoding="utf-8"), re.M))
        assert opened == len(blocks_of(path)), f"{path.name}: a ```python fence without its closing fence"


def test_no_run_markers_are_listed():
    """Blocks marked `<!-- no-run: reason -->` are exactly NO_RUN, each with a reason."""
    marked = {(b.file, b.line): b.no_run for b in ALL_BLOCKS if b.no_run is not None}
    for key, reason in marked.items():
        assert reason, f"{key[0]}:{key[1]}: a no-run marker needs a reason"
    assert marked == NO_RUN, f"no-run blocks (update NO_RUN with the reason): {marked}"


def test_a_broken_block_fails(tmp_path):
    """The runner reports a block that raises as failed, skips the blocks after it, and
    shares names between the blocks of a file."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# t\n\n```python\nx = 1\n```\n\n```python\nassert x == 1\ny = undefined_name\n```\n\n"
        "```python\nprint(x)\n```\n\n<!-- no-run: needs a cluster -->\n```python\nraise SystemExit\n```\n",
        encoding="utf-8",
    )
    blocks = blocks_of(doc, root=tmp_path)
    assert [(b.line, b.no_run) for b in blocks] == [(3, None), (7, None), (12, None), (17, "needs a cluster")]
    outcomes = run_blocks(blocks, tmp_path)
    assert [o.status for o in outcomes.values()] == ["passed", "failed", "skipped", "skipped"]
    assert "NameError" in outcomes["doc.md:7"].detail and "undefined_name" in outcomes["doc.md:7"].detail
    assert "doc.md:7" in outcomes["doc.md:12"].detail


def test_a_missing_optional_package_skips(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nimport no_such_package_here\n```\n\n```python\nz = 2\n```\n\n"
        "```python\nimport blockbpe_jax.no_such_module\n```\n",
        encoding="utf-8",
    )
    outcomes = run_blocks(blocks_of(doc, root=tmp_path), tmp_path)
    assert [o.status for o in outcomes.values()] == ["skipped", "passed", "failed"]


def test_readme_layout_names_every_module():
    """The README's "Layout" names every folder of ffi/ and every module and subpackage of
    blockbpe_jax/ as they are in the tree (and the top-level folders)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"[\w.]+/?", layout))
    package = ROOT / "blockbpe_jax"
    wanted = {p.name for p in package.glob("*.py") if p.name != "__main__.py"}
    wanted |= {p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()}
    wanted |= {p.name + "/" for p in (ROOT / "ffi").iterdir() if p.is_dir()}
    wanted |= {d + "/" for d in ("ffi", "blockbpe_jax", "tests", "benchmarks", "examples", "scripts", "docs")}
    missing = sorted(wanted - named)
    assert not missing, f"README.md's Layout does not name {missing}: describe them there"
