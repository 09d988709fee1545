"""The native block reader (ffi/core/jsonl.h) on threads, against the Python reader: a block
split at line starts over any number of threads, long lines' fields (and long plain lines)
decoded in pieces by all of them, and the documents joined with a separator after each into one
buffer, the corpus job's way (test_jsonl.py: the parser itself)."""

from __future__ import annotations

import random

import pytest

from test_jsonl import FIELD, check_same, native_reader


@pytest.mark.parametrize("field", [FIELD, None])
def test_threads_split_at_line_boundaries(field):
    rng = random.Random(0)
    words = ["a", "é", "日本", "🎉", "\\n", "\\u00e9", '\\"', "\\ud83d\\ude00", " "]
    lines = []
    for i in range(40_000):
        text = "".join(rng.choice(words) for _ in range(rng.randrange(0, 40)))
        lines.append(
            f'{{"id": {i}, "text": "{text}", "m": [1, {{"x": null}}]}}'
            if rng.random() > 0.05
            else rng.choice(["", "  ", "\r"])
        )
    block = "\n".join(lines).encode()
    assert len(block) > 2 << 20
    one = check_same(block, field, must_accept=True)
    for threads in (2, 3, 8, 64):
        assert native_reader(block, field, threads) == one
        assert native_reader(block, field, threads, sep=b"<|endoftext|>") == one
    bad = block[: len(block) * 3 // 4] + b"\xff" + block[len(block) * 3 // 4 :]
    assert native_reader(bad, field, 8) is None


def _long_field(rng: random.Random, size: int, words: list[str]) -> str:
    out, n = [], 0
    while n < size:
        out.append(rng.choice(words))
        n += len(out[-1])
    return "".join(out)


LONG_WORDS = ["abc ", "é", "日本", "🎉", "\\n", "\\u00e9", '\\"', "\\\\", "\\ud83d\\ude00", " ", "\\/"]


def test_long_lines_are_decoded_in_pieces():
    """Lines over 1 MiB have their field decoded in pieces by all threads (jsonl.h,
    decode_deferred): cut where no escape or surrogate pair runs across; with escapes on every
    few bytes (no cut found) one piece; the field twice (the last wins); long and short lines
    mixed: the documents are json.loads' with any thread count."""
    rng = random.Random(5)
    dense = _long_field(rng, 1 << 20, ["\\u00e9", "\\\\"])  # an escape every few bytes: no cut
    run = "\\\\" * 300  # 300 escaped backslashes
    backslash_runs = _long_field(rng, 3 << 20, [run, run + "\\n", run + '\\"', '\\"', "ab"])
    lines = [
        f'{{"text": "{_long_field(rng, 3 << 20, LONG_WORDS)}", "n": 1}}',
        '{"text": "short"}',
        f'{{"text": "{dense}"}}',
        f'{{"text": "{_long_field(rng, 2 << 20, LONG_WORDS)}", "text": "{_long_field(rng, 1500000, LONG_WORDS)}"}}',
        f'{{"a": "{_long_field(rng, 2 << 20, LONG_WORDS)}", "text": "x"}}',  # long, but not the field
        '{"text": ""}',
        # a long field's end after runs of hundreds of backslashes before quotes; a short field
        # before a long value
        f'{{"text": "{backslash_runs}"}}',
        f'{{"text": "x\\"y", "b": "{_long_field(rng, 2 << 20, LONG_WORDS)}"}}',
    ]
    block = "\n".join(lines).encode() + b"\n"
    one = check_same(block, FIELD, must_accept=True, threads=1)
    for threads in (2, 7, 16):
        assert native_reader(block, FIELD, threads) == one
        assert native_reader(block, FIELD, threads, sep=b"</s>") == one  # (pieces, then the separator)
    # A bad byte, a lone surrogate or a raw quote anywhere in a long field: given up (the
    # Python reader then raises) or the same documents.
    for insert in (b"\x00", b"\\ud800x", b'"', b"\xff", b"\\q", b"\\u12"):
        for _ in range(4):
            at = rng.randrange(100, 3 << 20)
            check_same(block[:at] + insert + block[at:], FIELD, must_accept=False, threads=16)


def test_long_plain_lines_are_checked_in_pieces():
    """Plain lines over 1 MiB are checked and copied in pieces by all threads, cut between
    characters: with any thread count the documents are the Python reader's (CRLF, empty lines,
    multi-byte characters at every offset, a line of only 4-byte characters); an invalid byte or
    a truncated or stray sequence anywhere in a long line gives up, as one thread's check does."""
    rng = random.Random(9)
    words = ["tiny", "é", "日本", "🎉", "\\", '"', "x" * 50, "\t"]
    lines = [
        "".join(rng.choice(words) for _ in range(600_000)).encode() + b"\r",
        b"short",
        b"",
        "🎉".encode() * 400_000,  # (no ASCII at all)
        "".join(rng.choice(words) for _ in range(400_000)).encode(),
    ]
    block = b"\n".join(lines) + b"\n"
    assert max(map(len, lines)) > 2 << 20
    one = check_same(block, None, must_accept=True, threads=1)
    for threads in (2, 7, 16):
        assert native_reader(block, None, threads) == one
        assert native_reader(block, None, threads, sep=b"|") == one
    for insert in (b"\xff", b"\xe6\x97", b"\x80", b"\xf0\x9f\x8e"):
        for _ in range(4):
            at = rng.randrange(10, 3 << 20)
            bad = block[:at] + insert + block[at:]
            assert native_reader(bad, None, 16) == native_reader(bad, None, 1)
            check_same(bad, None, must_accept=False, threads=16)
