"""Where a kernel's warps stall and which source lines run with few lanes, from ncu's source page.

    ncu --import REPORT.ncu-rep --page source --csv --print-source cuda,sass > source.csv
    python3 benchmarks/ncu_source.py source.csv [--top 40] [--by samples|instructions]
                                                 [--sass FILE:FIRST-LAST]

The report needs the SourceCounters section (`--set full`, or `--section SourceCounters
--section WarpStateStats`; `scripts/gpu_check.sh srcprofile` writes such a CSV). Prints the
totals (stall samples, warp-instructions, thread-instructions and the lanes an instruction
averages), each file's share, the stall reasons, and the top lines by stall samples or by
warp-instructions, each with its lanes: a line that runs many warp-instructions with few of
32 lanes points at divergence, such as a loop whose lanes leave and come back in separate
turns. --sass FILE:FIRST-LAST lists the SASS of that file's source lines in address order with
each instruction's count and lanes (how often a loop's body ran per warp, and with how many).
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import pathlib
import re


@dataclasses.dataclass
class Line:
    """One CUDA source line's counters (summed over its SASS by ncu)."""

    source: str
    samples: float
    instructions: float
    thread_instructions: float
    stalls: dict

    @property
    def lanes(self) -> float:
        return self.thread_instructions / self.instructions if self.instructions else 0.0


@dataclasses.dataclass
class Sass:
    """One SASS instruction: its address, the source line it belongs to, its counters."""

    address: int
    file: str
    line: int
    text: str
    instructions: float
    lanes: float


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def read(path) -> tuple[dict, list]:
    """ncu's source page (CSV, `--print-source cuda,sass`) -> ({(file, line): Line}, [Sass]).

    The page is a table per source file ("File Path" rows, then a header, then rows); a CUDA
    line's row has its number first, the SASS rows after it an empty first cell and an address.
    """
    lines: dict = {}
    sass: list = []
    file = header = current = None
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "File Path":
                file = pathlib.PurePosixPath(rec[1]).name
                continue
            if rec[0] == "Function Name":
                continue
            if rec[0] == "Line No":
                header = rec
                continue
            if header is None:
                continue
            row = dict(zip(header, rec))
            if rec[0]:
                current = (file, int(rec[0]))
                lines[current] = Line(
                    source=rec[1].strip(),
                    samples=_number(row.get("Warp Stall Sampling (All Samples)", "0")),
                    instructions=_number(row.get("Instructions Executed", "0")),
                    thread_instructions=_number(row.get("Thread Instructions Executed", "0")),
                    stalls={
                        h[len("stall_") :]: _number(v)
                        for h, v in row.items()
                        if h.startswith("stall_") and "Not Issued" not in h
                    },
                )
            elif current is not None and len(rec) > 3 and rec[2].startswith("0x"):
                sass.append(
                    Sass(
                        address=int(rec[2], 16),
                        file=current[0],
                        line=current[1],
                        text=rec[3].strip(),
                        instructions=_number(row.get("Instructions Executed", "0")),
                        lanes=_number(row.get("Avg. Threads Executed", "0")),
                    )
                )
    return lines, sass


def report(lines: dict, top: int = 40, by: str = "samples") -> list[str]:
    """The totals, each file's share, the stall reasons and the top lines, as text lines."""
    samples = sum(x.samples for x in lines.values()) or 1.0
    inst = sum(x.instructions for x in lines.values()) or 1.0
    threads = sum(x.thread_instructions for x in lines.values())
    out = [
        f"stall samples {samples:.0f}, warp-instructions {inst / 1e6:.2f} M, "
        f"thread-instructions {threads / 1e6:.1f} M, {threads / inst:.1f} lanes an instruction"
    ]
    by_file_samples, by_file_inst = collections.Counter(), collections.Counter()
    reasons = collections.Counter()
    for (file, _), x in lines.items():
        by_file_samples[file] += x.samples
        by_file_inst[file] += x.instructions
        reasons.update(x.stalls)
    for file, s in by_file_samples.most_common(12):
        out.append(
            f"  {file:32s} samples {100 * s / samples:5.1f}%  instructions {100 * by_file_inst[file] / inst:5.1f}%"
        )
    out.append(
        "stall reasons: " + ", ".join(f"{k} {100 * v / samples:.1f}%" for k, v in reasons.most_common(8))
    )
    key = (lambda kv: -kv[1].samples) if by == "samples" else (lambda kv: -kv[1].instructions)
    out.append(f"top lines by {by}: samples, warp-instructions, lanes, the two main stalls")
    for (file, number), x in sorted(lines.items(), key=key)[:top]:
        main = sorted(x.stalls.items(), key=lambda kv: -kv[1])[:2]
        stalls = ", ".join(f"{k} {v:.0f}" for k, v in main if v > 0)
        out.append(
            f"{100 * x.samples / samples:5.1f}% {x.instructions / 1e6:6.2f}M {x.lanes:4.1f}l "
            f"{file}:{number} [{stalls}] {x.source[:100]}"
        )
    return out


def sass_of(sass: list, file: str, first: int, last: int) -> list[str]:
    """The SASS of `file`'s source lines first..last, in address order, with counts and lanes."""
    chosen = sorted((s for s in sass if s.file == file and first <= s.line <= last), key=lambda s: s.address)
    base = min((s.address for s in sass), default=0)

    def relative(text: str) -> str:  # (branch targets as offsets from the kernel's first instruction)
        return re.sub(r"0x[0-9a-f]{9,}", lambda m: hex(int(m.group(0), 16) - base), text)

    return [
        f"{s.address - base:6x} {s.line:5d} {s.instructions / 1e3:9.0f}k {s.lanes:5.1f}l  {relative(s.text)}"
        for s in chosen
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", type=pathlib.Path)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--by", choices=["samples", "instructions"], default="samples")
    ap.add_argument("--sass", default=None, help="FILE:FIRST-LAST, e.g. char_piece_kernel.cuh:315-330")
    args = ap.parse_args(argv)
    lines, sass = read(args.csv)
    if not lines:
        raise SystemExit(
            f"ncu_source: no source lines in {args.csv} (was the report made with SourceCounters?)"
        )
    if args.sass:
        file, _, span = args.sass.rpartition(":")
        first, _, last = span.partition("-")
        if not file or not first.isdigit() or not (last or first).isdigit():
            raise SystemExit(f"ncu_source: --sass wants FILE:FIRST-LAST, got {args.sass!r}")
        print("\n".join(sass_of(sass, file, int(first), int(last or first))))
    else:
        print("\n".join(report(lines, args.top, args.by)))


if __name__ == "__main__":
    main()
