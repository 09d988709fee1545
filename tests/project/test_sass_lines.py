"""scripts/sass_lines.py's reader of nvdisasm -g -c output, on a listing written here in its
layout (sections per function, `//## File` line markers, predicated and plain instructions):
the first matching kernel only, its total, its generic loads and the ranges' opcodes by file
and line."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sass_lines.py"


def tool():
    spec = importlib.util.spec_from_file_location("sass_lines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LISTING = """\
\t.section\t.text._ZN4bbpe11other_kernelEv,"ax",@progbits
\t//## File "/x/ffi/cuda/a.cuh", line 10
        /*0000*/                   LDS R1, [R2] ;
\t.section\t.text._ZN4bbpe17char_piece_kernelILi16ELb1EEEv,"ax",@progbits
_ZN4bbpe17char_piece_kernelILi16ELb1EEEv:
\t//## File "/x/ffi/cuda/a.cuh", line 10
        /*0000*/                   LDS R1, [R2] ;
        /*0010*/               @!P0 BRA `(.L_x_1) ;
\t//## File "/x/ffi/cuda/a.cuh", line 12
        /*0020*/                   LDS.U8 R3, [R4+0x1] ;
.L_x_1:
\t//## File "/x/ffi/cuda/b.cuh", line 11
        /*0030*/                   IMAD R5, R3, 0x4, RZ ;
\t//## File "/x/ffi/cuda/a.cuh", line 30
        /*10040*/              @P1 STS [R6], R5 ;
        /*10050*/                   LD.E R7, desc[UR4][R8.64] ;
        /*10060*/                   LD.E.STRONG.GPU R9, desc[UR4][R8.64] ;
\t.section\t.text._ZN4bbpe17char_piece_kernelILi8ELb1EEEv,"ax",@progbits
\t//## File "/x/ffi/cuda/a.cuh", line 10
        /*0000*/                   LDS R1, [R2] ;
"""


def test_the_kernels_ranges_by_opcode():
    name, total, opcodes = tool().count(LISTING, r"char_piece_kernelILi16E", [("a.cuh", 10, 12)])
    assert name == "_ZN4bbpe17char_piece_kernelILi16ELb1EEEv"
    assert total == 7  # (its own section only: not the kernel before it, nor the one after)
    # (b.cuh's line 11 and a.cuh's 30 are outside the range; the generic load is the kernel's,
    # the atomic's strong one is not counted as one)
    assert dict(opcodes) == {"LDS": 2, "BRA": 1, "generic": 1}


def test_ranges_add_up_and_addresses_past_four_digits_count():
    _, _, opcodes = tool().count(LISTING, r"char_piece_kernelILi16E", [("a.cuh", 12, 30), ("b.cuh", 11, 11)])
    assert dict(opcodes) == {"LDS": 1, "IMAD": 1, "STS": 1, "LD": 2, "generic": 1}


def test_no_matching_kernel_and_a_bad_range_are_refused():
    sass_lines = tool()
    with pytest.raises(SystemExit, match="no kernel matches"):
        sass_lines.count(LISTING, r"piece_kernelILi4E", [])
    with pytest.raises(argparse.ArgumentTypeError, match="FILE:FROM-TO"):
        sass_lines.parse_range("a.cuh:10")
    assert sass_lines.parse_range("a.cuh:10-20") == ("a.cuh", 10, 20)
