"""benchmarks/ncu_source.py, the reader of ncu's source page, on a page written here in ncu's
layout (a table per source file, each CUDA line followed by its SASS): the counters per line
and per instruction, the lanes an instruction averages, the report's order and the SASS of a
line range in address order with branch targets made relative."""

from __future__ import annotations

import csv

import pytest

from helpers import benchmark_module

HEADER = [
    "Line No",
    "Source",
    "Address",
    "Source",
    "Warp Stall Sampling (All Samples)",
    "Warp Stall Sampling (Not-issued Samples)",
    "# Samples",
    "Instructions Executed",
    "Thread Instructions Executed",
    "Predicated-On Thread Instructions Executed",
    "Avg. Threads Executed",
    "stall_barrier",
    "stall_wait",
    "stall_barrier (Not Issued)",
]
BASE = 0x7F0000001000


def tool():
    return benchmark_module("ncu_source")


def cuda(line, source, samples, inst, threads, barrier, wait):
    return [
        str(line),
        source,
        "-",
        "-",
        str(samples),
        "0",
        str(samples),
        str(inst),
        str(threads),
        "0",
        "0",
    ] + [
        str(barrier),
        str(wait),
        "999",
    ]


def sass(offset, text, inst, lanes):
    return [
        "",
        "",
        hex(BASE + offset),
        text,
        "0",
        "0",
        "0",
        str(inst),
        str(inst * lanes),
        "0",
        str(lanes),
        "0",
        "0",
        "0",
    ]


@pytest.fixture
def page(tmp_path):
    rows = [
        ["File Path", "/src/ffi/cuda/kernel.cuh"],
        ["Function Name", "void kernel<16>(Params)"],
        HEADER,
        cuda(10, "for (; i < end; ++i) {", 30, 2000, 32000, 0, 25),
        sass(0x20, "ISETP.GE.AND P0, PT, R1, R2, PT", 1000, 16),
        sass(0x30, f"@P0 BRA {hex(BASE + 0x80)}", 1000, 16),
        cuda(12, "__syncthreads();", 60, 100, 3200, 55, 1),
        sass(0x10, "BAR.SYNC.DEFER_BLOCKING 0x0", 100, 32),
        [],
        ["File Path", "/src/ffi/core/table.h"],
        HEADER,
        cuda(5, "return t[i];", 10, 400, 12800, 0, 9),
        sass(0x40, "LDG.E R3, desc[UR4][R4.64]", 400, 32),
    ]
    path = tmp_path / "source.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def test_lines_and_their_sass_are_read(page):
    lines, instructions = tool().read(page)
    loop = lines[("kernel.cuh", 10)]
    assert (loop.samples, loop.instructions, loop.lanes) == (30, 2000, 16)
    assert loop.stalls == {"barrier": 0, "wait": 25}  # (the not-issued columns left out)
    assert lines[("table.h", 5)].lanes == 32
    assert [(s.file, s.line, s.instructions, s.lanes) for s in instructions] == [
        ("kernel.cuh", 10, 1000, 16),
        ("kernel.cuh", 10, 1000, 16),
        ("kernel.cuh", 12, 100, 32),
        ("table.h", 5, 400, 32),
    ]


def test_report_orders_lines_by_samples_or_instructions(page):
    lines, _ = tool().read(page)
    text = tool().report(lines, top=3)
    assert text[0].startswith("stall samples 100, warp-instructions 0.00 M")
    assert "19.2 lanes an instruction" in text[0]  # ((32000 + 3200 + 12800) / (2000 + 100 + 400))
    by_samples = [t for t in text if "kernel.cuh:" in t or "table.h:" in t]
    assert [t.split()[3] for t in by_samples] == ["kernel.cuh:12", "kernel.cuh:10", "table.h:5"]
    by_inst = [t for t in tool().report(lines, top=3, by="instructions") if ".cuh:" in t or ".h:" in t]
    assert [t.split()[3] for t in by_inst] == ["kernel.cuh:10", "table.h:5", "kernel.cuh:12"]
    assert any(t.startswith("stall reasons: barrier 55.0%, wait 35.0%") for t in text)


def test_sass_of_a_line_range_in_address_order(page):
    _, instructions = tool().read(page)
    listed = tool().sass_of(instructions, "kernel.cuh", 10, 12)
    # (offsets from the kernel's first instruction, the barrier at 0x10; the page lists it later)
    assert [t.split()[0] for t in listed] == ["0", "10", "20"]
    assert listed[2].endswith("@P0 BRA 0x70")  # (the branch target made relative too)
    assert tool().sass_of(instructions, "kernel.cuh", 11, 11) == []


def test_a_page_without_source_counters_is_refused(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text('"File Path","/src/x.cu"\n')
    with pytest.raises(SystemExit, match="no source lines"):
        tool().main([str(empty)])
    with pytest.raises(SystemExit, match="FILE:FIRST-LAST"):
        tool().main([str(one_line_page(tmp_path)), "--sass", "kernel.cuh"])


def one_line_page(tmp_path):
    path = tmp_path / "one.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["File Path", "/src/k.cuh"], HEADER, cuda(1, "x;", 1, 1, 32, 0, 1)])
    return path
