"""Exact mode on a rank file with no known pattern is refused with a message that says how to
give it one: from Python (`pattern=`, a known name or a regex) and from the command line
(`--pattern NAME|REGEX`), in one line (the CLI prints it as its one-line error)."""

from __future__ import annotations

import pytest

import blockbpe_jax as bb

pytestmark = pytest.mark.usefixtures("data_dir")


def test_refusal_says_how_to_pass_a_pattern(tmp_path, data_dir):
    path = tmp_path / "mine.tiktoken"  # (r50k's ranks and a blank line: contents no one publishes)
    path.write_bytes((data_dir / "vocab" / "tiktoken" / "r50k_base.tiktoken").read_bytes() + b"\n")
    tok = bb.Tokenizer.from_file(path)
    data, lengths = bb.pack_strings(["hello world"], max_len=16)
    with pytest.raises(ValueError) as err:
        bb.encode(data, lengths, tok, max_tokens=8)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("exact mode is not supported for mine: it has no pre-tokenizer pattern")
    assert "pattern=" in message and "Tokenizer.from_file" in message  # Python
    assert "--pattern NAME|REGEX" in message  # the CLI
    for name in ("cl100k", "o200k", "r50k", "llama3"):  # the known names
        assert name in message
    assert bb.Tokenizer.from_file(path, pattern="r50k").as_tiktoken().encode("hello world") == [31373, 995]
