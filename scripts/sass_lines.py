"""A kernel's machine code (SASS) counted by source line, without a GPU: what a change to a
device function does to the instructions of the lines it touches, before a device call.

    python3 scripts/sass_lines.py [--kernel REGEX] [--range FILE:FROM-TO ...] [--opcodes N]
        [TREE [OTHER]]

Compiles TREE's ffi/cuda/encode_cuda.cu as scripts/compare_codegen.py does (CMakeLists.txt's
flags, line info among them; TREE and OTHER a git revision, a directory holding an ffi/, or
"work", the default TREE), disassembles it with nvdisasm and counts the instructions of the
first kernel whose mangled name matches REGEX (default: char_piece_kernel<16, true>, Gemma
3's), in total, its generic loads and stores, and on each --range (a file's base name and its
lines, e.g. char_piece_kernel.cuh:321-350; several add up), by opcode. With OTHER, the same for
it beside (its own --range values follow a `--` separator where its lines moved: `--range
A:1-9 -- --range A:3-11`).

nvdisasm is not part of the CUDA toolkit these machines have: the wheel nvidia-cuda-nvdisasm
holds it (`pip download --no-deps nvidia-cuda-nvdisasm`, unzip, nvidia/cu13/bin/nvdisasm);
the NVDISASM variable or PATH finds it. These are static counts (each instruction once, a loop
body once): they say what a straight-line stretch costs a thread, not what a loop does.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from compare_codegen import CUDA_FLAGS, export, include_flags  # noqa: E402

LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?")
SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")


def parse_range(text: str) -> tuple[str, int, int]:
    """'file.cuh:10-20' -> ('file.cuh', 10, 20)."""
    m = re.fullmatch(r"([^:]+):(\d+)-(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"a range is FILE:FROM-TO, not {text!r}")
    return m.group(1), int(m.group(2)), int(m.group(3))


def count(
    disassembly: str, kernel: str, ranges: list[tuple[str, int, int]]
) -> tuple[str, int, collections.Counter]:
    """(the kernel's name, its instructions, the ranges' instructions by opcode) from nvdisasm
    -g -c output: the first .text section whose name matches `kernel`. Under the key "generic":
    the kernel's generic loads and stores (LD, ST) but atomics' strong ones, wherever they are:
    a shared-memory access through a pointer made from an integer becomes one."""
    name, total, opcodes = None, 0, collections.Counter()
    where = (None, 0)
    for line in disassembly.splitlines():
        m = SECTION.match(line)
        if m:
            if name is not None:
                break  # (the kernel's section ended)
            if re.search(kernel, m.group(1)):
                name = m.group(1)
            continue
        if name is None:
            continue
        m = LINE.search(line)
        if m:
            where = (pathlib.Path(m.group(1)).name, int(m.group(2)))
            continue
        m = INSTRUCTION.match(line)
        if m:
            total += 1
            if m.group(1) in ("LD", "ST") and ".STRONG" not in (m.group(2) or ""):
                opcodes["generic"] += 1
            if any(where[0] == f and lo <= where[1] <= hi for f, lo, hi in ranges):
                opcodes[m.group(1)] += 1
    if name is None:
        raise SystemExit(f"no kernel matches {kernel!r}")
    return name, total, opcodes


def disassemble(tree: str, nvdisasm: str) -> str:
    """The tree's encode_cuda.cu (compare_codegen's export and flags), disassembled."""
    with tempfile.TemporaryDirectory() as tmp:
        ffi = export(tree, pathlib.Path(tmp))
        cubin = pathlib.Path(tmp) / "encode.cubin"
        subprocess.run(
            [
                "nvcc",
                *CUDA_FLAGS,
                "-I" + str(ffi),
                *include_flags(),
                "-cubin",
                str(ffi / "cuda/encode_cuda.cu"),
                "-o",
                str(cubin),
            ],
            check=True,
            capture_output=True,
        )
        return subprocess.run(
            [nvdisasm, "-g", "-c", str(cubin)], check=True, capture_output=True, text=True
        ).stdout


def report(label: str, name: str, total: int, opcodes: collections.Counter, top: int) -> None:
    print(f"{label}: {name}")
    generic = opcodes.pop("generic", 0)
    print(
        f"  {total} instructions, {generic} generic loads or stores; in the ranges {sum(opcodes.values())}: "
        + ", ".join(f"{op} {n}" for op, n in opcodes.most_common(top))
    )


def main(argv: list[str]) -> None:
    parts = argv[argv.index("--") + 1 :] if "--" in argv else None
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default=r"char_piece_kernelILi16ELb1E")
    ap.add_argument("--range", dest="ranges", type=parse_range, action="append", default=[])
    ap.add_argument("--opcodes", type=int, default=10, help="the most frequent opcodes to print")
    ap.add_argument("tree", nargs="?", default="work")
    ap.add_argument("other", nargs="?")
    args = ap.parse_args(argv[: argv.index("--")] if parts is not None else argv)
    other_ranges = ap.parse_args(parts).ranges if parts is not None else args.ranges
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        raise SystemExit("nvdisasm not found: set NVDISASM (the wheel nvidia-cuda-nvdisasm holds it)")
    for label, tree, ranges in [("tree", args.tree, args.ranges)] + (
        [("other", args.other, other_ranges)] if args.other else []
    ):
        report(f"{label} {tree}", *count(disassemble(tree, nvdisasm), args.kernel, ranges), args.opcodes)


if __name__ == "__main__":
    main(sys.argv[1:])
