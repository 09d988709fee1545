"""Rank files (.tiktoken) loading (blockbpe_jax.vocab): synthetic files with holes, and
malformed files (VocabError naming the file and line)."""

from __future__ import annotations

import re

import pytest

from blockbpe_jax.tables.build import build_vocab_tables
from blockbpe_jax.tables.probe import lookup_piece
from blockbpe_jax.vocab import VocabError, load_tiktoken_file

from synthetic import b64, tiktoken_lines, write


# --------------------------------------------------------------------------------------------
# Malformed inputs: VocabError naming the file and line / JSON path
# --------------------------------------------------------------------------------------------

_BAD_TIKTOKEN_LINES = {
    "one_field": ("YWJj", "expected '<base64 token> <rank>'"),
    "three_fields": (f"{b64(b'xy')} 300 1", "expected '<base64 token> <rank>'"),
    "tab_separated": (f"{b64(b'xy')}\t300", "expected '<base64 token> <rank>'"),
    "not_base64": ("@@@@ 300", "not valid base64"),
    "bad_padding": ("eHk 300", "not valid base64"),
    "empty_token": (" 300", "expected"),
    "rank_not_int": (f"{b64(b'xy')} 3x0", "not a non-negative integer"),
    "negative_rank": (f"{b64(b'xy')} -3", "not a non-negative integer"),
    "duplicate_token": (f"{b64(b'ab')} 300", "duplicate token b'ab' (first on line 257)"),
    "duplicate_rank": (f"{b64(b'xy')} 257", "duplicate rank 257 (first on line 258)"),
    "huge_rank": (f"{b64(b'xy')} 99999999999", "exceeds"),
}


@pytest.mark.parametrize("case", list(_BAD_TIKTOKEN_LINES))
def test_malformed_tiktoken_line(tmp_path, case):
    bad_line, message = _BAD_TIKTOKEN_LINES[case]
    lines = tiktoken_lines()
    path = write(tmp_path / "bad.tiktoken", "\n".join(lines + [bad_line]) + "\n")
    with pytest.raises(VocabError) as info:
        load_tiktoken_file(path)
    assert f"{path}:{len(lines) + 1}:" in str(info.value)
    assert message in str(info.value)


def test_valid_synthetic_tiktoken_with_holes(tmp_path):
    lines = tiktoken_lines()[:-1] + [f"{b64(b'bc')} 300", ""]  # rank 258..299 unused
    v = load_tiktoken_file(
        write(tmp_path / "mine.tiktoken", "\r\n".join(lines)), special_tokens={"<|x|>": 400}
    )
    assert v.name == "mine" and v.pattern is None and v.pattern_name is None
    assert v.n_vocab == 401 and v.token_bytes[258:300] == (None,) * 42 and v.token_bytes[400] == b"<|x|>"
    assert (
        v.merges[(97, 98)] == (256, 256)
        and v.merges[(256, 99)] == (257, 257)
        and v.merges[(97, 300)] == (257, 257)
    )
    t = build_vocab_tables(v)
    assert t.token_offsets[259] == t.token_offsets[300]  # holes take no bytes
    assert lookup_piece(t, b"<|x|>") is None  # specials are not whole-piece tokens


def test_tiktoken_missing_single_byte(tmp_path):
    lines = [line for line in tiktoken_lines() if line != f"{b64(b'A')} 65"]
    path = write(tmp_path / "nobyte.tiktoken", "\n".join(lines))
    with pytest.raises(VocabError, match=r"missing single-byte tokens for 1 byte values \(0x41\)") as info:
        load_tiktoken_file(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_tiktoken_empty_file(tmp_path, content):
    path = write(tmp_path / "empty.tiktoken", content)
    with pytest.raises(VocabError, match="empty") as info:
        load_tiktoken_file(path)
    assert str(path) in str(info.value)


def test_tiktoken_special_colliding_with_token(tmp_path):
    path = write(tmp_path / "v.tiktoken", "\n".join(tiktoken_lines()))
    with pytest.raises(VocabError, match="already the mergeable token b'abc'") as info:
        load_tiktoken_file(path, special_tokens={"<|x|>": 257})
    assert str(path) in str(info.value)
    # Two special strings may share an id (as in tiktoken): the first one listed decodes.
    v = load_tiktoken_file(path, special_tokens={"<|x|>": 300, "<|y|>": 300})
    assert v.special_tokens == {"<|x|>": 300, "<|y|>": 300} and v.token_bytes[300] == b"<|x|>"


# --------------------------------------------------------------------------------------------
# The parsed rank file kept on disk (tiktoken_files._ranks)
# --------------------------------------------------------------------------------------------


def _same_vocab(a, b) -> bool:
    return (a.token_bytes, a.byte_ids, a.special_tokens, dict(a.merges)) == (
        b.token_bytes,
        b.byte_ids,
        b.special_tokens,
        dict(b.merges),
    )


@pytest.fixture
def rank_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "ranks"


def test_rank_file_parsed_once(tmp_path, rank_cache, monkeypatch):
    """A second load of the same bytes (under any name) comes from the kept parse, equal to
    the parse; other bytes are another entry; with caching off nothing is written."""
    from blockbpe_jax.vocab import tiktoken_files

    lines = tiktoken_lines()[:-1] + [f"{b64(b'bc')} 300", ""]  # (a hole, CRLF line ends)
    path = write(tmp_path / "mine.tiktoken", "\r\n".join(lines))
    parsed = load_tiktoken_file(path, special_tokens={"<|x|>": 400})
    (entry,) = rank_cache.iterdir()
    real_parse = tiktoken_files._ranks_by_line
    monkeypatch.setattr(tiktoken_files, "_ranks_by_line", lambda *a: pytest.fail("parsed again"))
    again = load_tiktoken_file(
        write(tmp_path / "other.tiktoken", "\r\n".join(lines)), special_tokens={"<|x|>": 400}
    )
    assert _same_vocab(parsed, again) and again.merges[(97, 300)] == (257, 257)
    monkeypatch.setattr(tiktoken_files, "_ranks_by_line", real_parse)
    changed = load_tiktoken_file(
        write(tmp_path / "changed.tiktoken", "\r\n".join(lines).replace(" 300", " 301"))
    )
    assert changed.token_bytes[301] == b"bc" and len(list(rank_cache.iterdir())) == 2
    monkeypatch.setenv("BLOCKBPE_CACHE_DIR", "")
    load_tiktoken_file(write(tmp_path / "third.tiktoken", "\n".join(tiktoken_lines())))
    assert len(list(rank_cache.iterdir())) == 2


def test_damaged_rank_entry_parsed_again(tmp_path, rank_cache):
    """An entry damaged anywhere (a flipped byte at 24 places, cut short, garbage) gives the
    parse's vocabulary, never other tokens (np.load checks each member's CRC)."""
    path = write(tmp_path / "mine.tiktoken", "\n".join(tiktoken_lines() + [f"{b64(b'xyz')} 260"]) + "\n")
    want = load_tiktoken_file(path)
    (entry,) = rank_cache.iterdir()
    good = entry.read_bytes()
    damaged = [good[: len(good) // 2], b"garbage"]
    for k in range(24):
        at = k * (len(good) - 1) // 23
        damaged.append(good[:at] + bytes([good[at] ^ 0x5A]) + good[at + 1 :])
    for bad in damaged:
        entry.write_bytes(bad)
        assert _same_vocab(load_tiktoken_file(path), want)


def test_malformed_rank_file_never_kept(tmp_path, rank_cache):
    bad_line, message = _BAD_TIKTOKEN_LINES["duplicate_rank"]
    path = write(tmp_path / "bad.tiktoken", "\n".join(tiktoken_lines() + [bad_line]) + "\n")
    for _ in range(2):
        with pytest.raises(VocabError, match=re.escape(message)):
            load_tiktoken_file(path)
    assert not rank_cache.exists() or not any(rank_cache.iterdir())
