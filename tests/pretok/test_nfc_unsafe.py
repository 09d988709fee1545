"""Which texts NFC may change (native.cpu.nfc_unsafe, ffi/core/nfc_unsafe.h: what HostStaging.upload
answers for an NFC tokenizer's encode_batch, which then reads no counts back when it says no):
any item, str of any width or bytes, with a code point that is not a normalization boundary,
against the tables' own set of them (pretok.nfc_data.unsafe_code_points)."""

from __future__ import annotations

import subprocess

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax import native
from blockbpe_jax.pretok import nfc_data

from helpers import compile_sanitized
from strategies import NFC_TEXT, fuzz, raw_bytes

UNSAFE = nfc_data.unsafe_code_points()


def has_unsafe(item) -> bool:
    """Whether the item has a code point that is not a normalization boundary (invalid bytes
    are none: U+FFFD here)."""
    text = item.decode("utf-8", "replace") if isinstance(item, bytes) else item
    return any(UNSAFE[ord(c)] for c in text)


no_surrogate = NFC_TEXT.map(lambda s: "".join(c for c in s if not 0xD800 <= ord(c) < 0xE000))


@fuzz(300)
@given(
    items=st.lists(
        no_surrogate | no_surrogate.map(lambda s: s.encode("utf-8")) | raw_bytes() | st.text(max_size=200),
        max_size=10,
    )
)
def test_texts_with_a_code_point_nfc_may_change(items):
    """native.cpu.nfc_unsafe (core/nfc_unsafe.h, what HostStaging.upload answers for an NFC
    tokenizer's encode_batch, which then reads no counts back when it says no): whether any
    item, str of any width or bytes, has a code point that is not a normalization boundary."""
    items = [i for i in items if not isinstance(i, str) or not any(0xD800 <= ord(c) < 0xE000 for c in i)]
    assert native.cpu.nfc_unsafe(items, nfc_data.operand()) == any(map(has_unsafe, items)), items
    for k, item in enumerate(items):  # (each alone too: the first one found is not always the only)
        assert native.cpu.nfc_unsafe([item], nfc_data.operand()) == has_unsafe(item), (k, item)


def test_one_code_point_nfc_may_change_anywhere():
    """nfc_unsafe finds one unsafe code point at any place of a long text of safe ones (the
    32-unit steps' shortcuts: 16-bit, 32-bit and UTF-8 text), the first and last unsafe code
    point of every block that has one, and lets their safe neighbours in the block pass."""
    op = nfc_data.operand()
    edges, neighbours = [], []
    for block in range(0x110000 >> 8):
        cps = np.flatnonzero(UNSAFE[block << 8 : (block + 1) << 8]) + (block << 8)
        if cps.size:
            edges += [int(cps[0]), int(cps[-1])]
            neighbours += [
                c for c in (int(cps[0]) - 1, int(cps[-1]) + 1) if c >> 8 == block and not UNSAFE[c]
            ]
    neighbours = [c for c in neighbours if not 0xD800 <= c < 0xE000]
    assert len(edges) > 80 and len(neighbours) > 40
    safe = "жук — 中文 words " * 8
    for tail in ("", "\U0001f600"):  # (16-bit units, then 32-bit ones)
        for k, cp in enumerate(edges + neighbours):
            want = bool(UNSAFE[cp])
            at = (k * 7) % len(safe)
            text = safe[:at] + chr(cp) + safe[at:] + tail
            assert native.cpu.nfc_unsafe([text], op) == want, (hex(cp), at, tail)
            assert native.cpu.nfc_unsafe([text.encode("utf-8", "surrogatepass")], op) == want, (
                hex(cp),
                "bytes",
            )
        assert not native.cpu.nfc_unsafe([safe + tail], op)


def test_the_look_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    """core/nfc_unsafe.h built with AddressSanitizer and UndefinedBehaviorSanitizer
    (tests/cpp/nfc_unsafe_sanitized.cc) over this operand: texts of 16-bit and 32-bit units and
    UTF-8 (invalid bytes among them) of every length to 100 and some long ones, in memory of
    their exact size, against every code point's property: no read past a text, no undefined
    behaviour, every answer right."""
    operand = tmp_path / "nfc_operand.bin"
    nfc_data.operand().astype("<i4").tofile(operand)
    binary = compile_sanitized(
        "nfc_unsafe_sanitized.cc", tmp_path / "nfc_unsafe_sanitized", "address,undefined"
    )
    run = subprocess.run([str(binary), str(operand)], capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "ERROR" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-3000:]
    out = run.stdout.split()
    assert run.stdout.strip().endswith("0 differ") and int(out[0]) > 9000 and int(out[2].lstrip("(")) > 1000
