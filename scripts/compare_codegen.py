"""Whether two source trees of ffi/ compile to the same code: for moving or renaming C++/CUDA
code without changing what runs.

    python3 scripts/compare_codegen.py OLD [NEW]

OLD and NEW are git revisions, directories holding an ffi/, or "work" (the default NEW: this
checkout).

Each tree's ffi/ is compiled without a GPU, with the flags of CMakeLists.txt, once as is and
once with BBPE_STAGE_CLOCKS: every .cu to PTX and through ptxas -v (registers, stack, spills,
shared memory per kernel), every .cc to x86 assembly. Before comparing, what a move or a
rename changes by itself is normalized away: line info, mangled names (demangled; nvcc's
per-file prefix of the unnamed namespace; --renames OLD_NAME NEW_NAME pairs, one per line),
register, label and depot numbering, and the order of functions and sections. Prints one line
per compared artifact and exits 1 when any differs (the normalized files stay in --keep DIR).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
CUDA_FLAGS = [
    "-O3",
    "-DNDEBUG",
    "-std=c++17",
    "-arch=sm_90",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "-lineinfo",
]
HOST_FLAGS = [
    "-O3",
    "-DNDEBUG",
    "-std=gnu++17",
    "-fPIC",
    "-fvisibility=hidden",
    "-fno-stack-protector",
    "-Os",
    "-ffunction-sections",
    "-fdata-sections",
]
VARIANTS = {"plain": [], "stage_clocks": ["-DBBPE_STAGE_CLOCKS"]}
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}")
INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}")
MANGLED = re.compile(r"_Z[A-Za-z0-9_]+")


def include_flags() -> list[str]:
    import jax.ffi
    import nanobind

    roots = [pathlib.Path(shutil.which("nvcc")).resolve().parent.parent, pathlib.Path("/usr/local/cuda")]
    cuda_inc = next(
        d
        for r in roots
        for d in [*r.glob("targets/*/include"), r / "include"]
        if (d / "cuda_runtime_api.h").exists()
    )
    return [
        "-I" + jax.ffi.include_dir(),
        "-I" + sysconfig.get_paths()["include"],
        "-I" + nanobind.include_dir(),
        "-isystem",
        str(cuda_inc),
        "-isystem",
        str(cuda_inc / "cccl"),
    ]


def export(rev: str, dest: pathlib.Path) -> pathlib.Path:
    if rev == "work" or pathlib.Path(rev).is_dir():
        shutil.copytree(REPO / "ffi" if rev == "work" else pathlib.Path(rev) / "ffi", dest / "ffi")
    else:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "ffi"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "x", "-C", str(dest)], input=archive, check=True)
    return dest / "ffi"


def compile_tree(ffi: pathlib.Path, out: pathlib.Path, defines: list[str]) -> dict[str, str]:
    """PTX, ptxas report and host assembly of every source file, concatenated per kind."""
    inc = ["-I" + str(ffi)] + include_flags()
    kinds = collections.defaultdict(str)
    for cu in sorted(ffi.rglob("*.cu")):
        ptx = out / (cu.stem + ".ptx")
        subprocess.run(
            ["nvcc", *CUDA_FLAGS, *defines, *inc, "-ptx", str(cu), "-o", str(ptx)],
            check=True,
            capture_output=True,
        )
        res = subprocess.run(
            [
                "ptxas",
                "-arch=sm_90",
                "-O3",
                "-v",
                "-warn-spills",
                str(ptx),
                "-o",
                str(out / (cu.stem + ".cubin")),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        kinds["ptx"] += ptx.read_text()
        kinds["ptxas"] += res.stderr + res.stdout
    for cc in sorted(ffi.rglob("*.cc")):
        asm = out / (cc.stem + ".s")
        subprocess.run(
            ["g++", *HOST_FLAGS, *defines, *inc, "-S", str(cc), "-o", str(asm)],
            check=True,
            capture_output=True,
        )
        kinds["host_asm"] += asm.read_text()
    return kinds


class Names:
    """Mangled names -> demangled, with the file-dependent prefixes and the renames applied."""

    def __init__(self, renames: list[tuple[str, str]]):
        self.renames = [(re.compile(r"\b" + re.escape(a) + r"\b"), b) for a, b in renames]

    def canonical(self, s: str) -> str:
        s = INTERNAL.sub("INTERNAL", ANON.sub("ANON", s))
        for rx, new in self.renames:
            s = rx.sub(new, s)
        return s

    def __call__(self, text: str) -> str:
        tokens = sorted(set(MANGLED.findall(text)))
        split = {t: re.match(r"(.*?)(_param_\d+)?$", t).groups() for t in tokens}
        bases = sorted({b for b, _ in split.values()})
        out = subprocess.run(
            ["c++filt"], input="\n".join(bases), capture_output=True, text=True, check=True
        ).stdout.split("\n")
        plain = dict(zip(bases, out))
        names = {t: "<" + self.canonical(plain[b]) + ">" + (p or "") for t, (b, p) in split.items()}
        text = MANGLED.sub(lambda m: names[m.group(0)], text)
        return INTERNAL.sub("INTERNAL", ANON.sub("ANON", text))


def renumber(text: str, pattern: str, prefix) -> str:
    seen: dict[str, str] = {}
    counts: collections.Counter = collections.Counter()

    def one(m):
        if m.group(0) not in seen:
            kind = m.group(1)
            seen[m.group(0)] = prefix(kind, counts[kind])
            counts[kind] += 1
        return seen[m.group(0)]

    return re.sub(pattern, one, text)


def norm_ptx(text: str, names: Names) -> str:
    text = re.sub(r"\n\s*\.section\s+\.debug\w*\s*\{.*?\n\s*\}", "\n", text, flags=re.S)
    text = names("\n".join(l for l in text.split("\n") if not re.match(r"\s*(\.loc|\.file|//|$)", l)))
    items, cur, depth = collections.Counter(), [], 0
    for line in text.split("\n"):
        cur.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and (line.rstrip().endswith(";") or line.strip() == "}"):
            item = "\n".join(cur).strip()
            cur = []
            if re.match(r"\.(version|target|address_size)", item):
                continue
            item = re.sub(r"\$L__BB\d+_", "$L__BB_", item)
            item = re.sub(r"__local_depot\d+", "__local_depot", item)
            item = renumber(item, r"%(rd|rs|r|p|fd|f|hh|h|b)\d+", lambda k, n: f"%{k}{n}")
            items[item] += 1
    return "".join(f"#x{c}\n{t}\n" for t, c in sorted(items.items()))


def norm_ptxas(text: str, names: Names) -> str:
    """Per kernel: its registers / stack / shared memory and every callee's frame and spills."""
    text = names(text)
    kernels, entry, last = collections.defaultdict(list), "(module)", None
    for line in text.split("\n"):
        line = line.strip()
        m = re.match(r"ptxas info\s*: Compiling entry function '(.*)' for", line)
        if m:
            entry = m.group(1)
        elif line.startswith("ptxas info") and "Function properties for" in line:
            last = line.split("Function properties for", 1)[1].strip()
        elif line and last is not None and not line.startswith("ptxas"):
            kernels[entry].append(f"{last}: {line}")
            last = None
        elif line and "Compile time" not in line:
            kernels[entry].append(line)
    return "".join(f"== {k}\n" + "".join(f"  {l}\n" for l in sorted(v)) for k, v in sorted(kernels.items()))


def norm_host_asm(text: str, names: Names) -> str:
    text = names("\n".join(l for l in text.split("\n") if not re.match(r"\s*\.(file|loc|ident|set)\b", l)))
    # Merged string constants sit in a section named after the first function that used them.
    text = re.sub(r"\.section\s+\.rodata\..*\.str1\.(\d+),", r".section .rodata.STR.str1.\1,", text)
    chunks, cur = collections.Counter(), []
    for line in text.split("\n") + [".section END"]:
        if re.match(r"\s*\.section\b", line) and cur:
            chunks[renumber("\n".join(cur), r"\.L([A-Za-z_]*)\d+", lambda k, n: f".L{k}_{n}")] += 1
            cur = []
        cur.append(line)
    return "".join(f"#x{c}\n{t}\n" for t, c in sorted(chunks.items()))


NORMALIZE = {"ptx": norm_ptx, "ptxas": norm_ptxas, "host_asm": norm_host_asm}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="git revision, directory holding ffi/, or 'work'")
    ap.add_argument("new", nargs="?", default="work", help="the same; default: 'work'")
    ap.add_argument("--renames", help="file of 'old_name new_name' lines (C++ names, demangled)")
    ap.add_argument("--keep", help="directory for the normalized outputs")
    args = ap.parse_args()
    renames = []
    if args.renames:
        renames = [tuple(l.split()) for l in open(args.renames) if l.strip() and not l.startswith("#")]
    keep = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="codegen_"))
    keep.mkdir(parents=True, exist_ok=True)
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("old", "new"):
            (pathlib.Path(tmp) / side).mkdir()
        trees = {s: export(getattr(args, s), pathlib.Path(tmp) / s) for s in ("old", "new")}
        for variant, defines in VARIANTS.items():
            norm = {}
            for side, ffi in trees.items():
                out = pathlib.Path(tmp) / f"{side}_{variant}"
                out.mkdir()
                kinds = compile_tree(ffi, out, defines)
                norm[side] = {
                    k: NORMALIZE[k](v, Names(renames) if side == "old" else Names([]))
                    for k, v in kinds.items()
                }
            for kind in NORMALIZE:
                a, b = norm["old"].get(kind, ""), norm["new"].get(kind, "")
                for side, text in (("old", a), ("new", b)):
                    (keep / f"{variant}_{kind}_{side}.txt").write_text(text)
                ok = a == b and bool(a)
                same &= ok
                print(f"{variant:13s} {kind:9s} {'identical' if ok else 'DIFFERS'}")
    print(f"normalized outputs: {keep}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
