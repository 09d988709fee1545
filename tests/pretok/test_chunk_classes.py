"""Byte classes by chunks (pretok/tables.h chunk_classes) equal the rule byte by byte
(byte_class) at every chunk size the piece kernels use: the host's byte_classes runs only
chunks of 16, so the 2-, 4- and 8-byte chunks of short rows are checked here, on text that
puts code points, invalid bytes and special tokens across chunk edges."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pretok_shim import PATTERN_IDS, SPECIAL, gen_text, special_mask

CHUNKS = (2, 4, 8, 16)
EDGES = [
    b"",
    b"a",
    b"  \n",
    b"ab'cd 'll\t\n\r\n  x",
    "é日😀\u0301a".encode(),
    b"\xe6\x97\xa5\xe6\x97",  # a code point cut short at the end
    b"\x97\xa5abc",  # leading continuation bytes
    b"a\xff\xe2\x96 b\xc3",
    b"\xf0\x9f\x98" + b"\x80" * 5,  # a sequence, then continuation bytes it does not cover
    b"x" * 15 + "é".encode() + b"y" * 15,
]


def texts(seed: int, count: int):
    rng = random.Random(seed)
    yield from EDGES
    for _ in range(count):
        data = gen_text(rng).encode()
        if rng.random() < 0.3:  # invalid bytes dropped in anywhere
            cut = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                cut.insert(rng.randint(0, len(cut)), rng.choice([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF]))
            data = bytes(cut)
        yield data


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_chunk_classes_equal_byte_class(shim, pattern):
    for data in texts(pattern, 300):
        special = special_mask(data)
        for chunk in CHUNKS:
            each, chunks = shim.chunk_classes(pattern, data, chunk, special)
            if not np.array_equal(each, chunks):
                i = int(np.flatnonzero(each != chunks)[0])
                pytest.fail(
                    f"chunk {chunk}, byte {i} of {data!r}: byte_class {each[i]}, chunk_classes {chunks[i]}"
                )


def test_the_check_sees_special_bytes(shim):
    """The special mask reaches the C++ side: its bytes get kClassSpecial, which no other byte has."""
    data = f"ab{SPECIAL}cd".encode()
    each, chunks = shim.chunk_classes(PATTERN_IDS[0], data, 4, special_mask(data))
    inside = slice(2, 2 + len(SPECIAL))
    assert len(set(each[inside].tolist())) == 1 and each[inside][0] not in set(each[:2].tolist())
    assert np.array_equal(each, chunks)
