"""A tiktoken-format vocabulary is recognised by its contents (the sha256 tiktoken publishes for
each of its files), not by its file name: a renamed copy, or tiktoken's own cache file (named
by a hash), loads with its encoding's name, pattern and specials and runs in exact mode; a
modified file, whatever its name, is not recognised. The CLI's `--pattern NAME|REGEX`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import cli
from blockbpe_jax.vocab import KNOWN_PATTERNS, load_tiktoken_file
from blockbpe_jax.vocab import tiktoken_files

from helpers import CPU, encode_argv

ENCODINGS = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]
URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
TEXTS = [
    "Hello world! It's 2024, and we're testing   spaces\n\n and\r\nnewlines.",
    "Привет, 日本語 and émojis 🎉🎉 — 'LL 'Ve DON'T\t\t12345678",
    "x\n ",
]


def _openai_specs(monkeypatch) -> dict[str, dict]:
    """tiktoken_ext.openai_public's constructors, each with the expected_hash it passes for its
    file (the download stubbed out)."""
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    seen = {}
    monkeypatch.setattr(
        openai_public,
        "load_tiktoken_bpe",
        lambda url, expected_hash=None: seen.setdefault("h", expected_hash),
    )
    specs = {}
    for name in ENCODINGS:
        seen.clear()
        spec = getattr(openai_public, name)()
        specs[name] = dict(spec, sha256=seen["h"])
    return specs


def test_known_contents_are_tiktokens_published_hashes(monkeypatch):
    specs = _openai_specs(monkeypatch)
    for name, spec in specs.items():
        known = tiktoken_files.KNOWN_TIKTOKEN_FILES[spec["sha256"]]
        assert (known.name, known.pattern, known.special_tokens) == (
            name,
            spec["pat_str"],
            spec["special_tokens"],
        )


def _reference(data_dir: Path, name: str, monkeypatch):
    import tiktoken
    import tiktoken.load

    spec = _openai_specs(monkeypatch)[name]
    return tiktoken.Encoding(
        f"{name}_reference",
        pat_str=spec["pat_str"],
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(
            str(data_dir / "vocab" / "tiktoken" / f"{name}.tiktoken")
        ),
        special_tokens=spec["special_tokens"],
    )


@pytest.mark.parametrize("name", ENCODINGS)
def test_renamed_and_cache_named_copies_load_in_exact_mode(tmp_path, data_dir, monkeypatch, name):
    raw = (data_dir / "vocab" / "tiktoken" / f"{name}.tiktoken").read_bytes()
    enc = _reference(data_dir, name, monkeypatch)
    want = [enc.encode_ordinary(t) for t in TEXTS]
    renamed = tmp_path / f"{name.split('_')[0]}.tiktoken"  # e.g. cl100k.tiktoken
    cached = tmp_path / "cache" / hashlib.sha1(URL.format(name).encode()).hexdigest()  # tiktoken's cache
    cached.parent.mkdir()
    for path in (renamed, cached):
        path.write_bytes(raw)
        tok = bb.Tokenizer.from_file(path)
        assert tok.vocab.name == name and tok.vocab.pattern == enc._pat_str
        assert tok.vocab.special_tokens == enc._special_tokens
        ids, counts = tok.encode_batch([t.encode() for t in TEXTS], max_len=256, device=CPU)
        ids, counts = np.asarray(ids), np.asarray(counts)
        assert [ids[i, : counts[i]].tolist() for i in range(len(TEXTS))] == want, path


def test_llama3_rank_file_recognised_by_contents(tmp_path, data_dir):
    raw = (data_dir / "vocab" / "llama3" / "tokenizer.model").read_bytes()
    path = tmp_path / "llama3.tiktoken"
    path.write_bytes(raw)
    v = load_tiktoken_file(path)
    assert v.name == "llama3" and v.pattern == KNOWN_PATTERNS["llama3"]
    assert v.special_tokens["<|eot_id|>"] == 128009 and len(v.special_tokens) == 256


@pytest.mark.parametrize("name", ["cl100k_base", "r50k_base"])
def test_modified_file_not_recognised_whatever_its_name(tmp_path, data_dir, name):
    """One line fewer (a token less), or one blank line more: other bytes, no known pattern,
    even under tiktoken's own file name; exact mode is refused, an explicit pattern works."""
    raw = (data_dir / "vocab" / "tiktoken" / f"{name}.tiktoken").read_bytes()
    for changed in (raw[: raw.rstrip(b"\n").rfind(b"\n") + 1], raw + b"\n"):
        path = tmp_path / f"{name}.tiktoken"
        path.write_bytes(changed)
        tok = bb.Tokenizer.from_file(path)
        assert tok.vocab.pattern is None and tok.vocab.special_tokens == {}
        with pytest.raises(ValueError, match="pattern"):
            tok.encode_batch(["hello world"], device=CPU)
    pattern = name.split("_")[0].replace("p50k", "r50k")
    by_name = load_tiktoken_file(path, pattern=pattern)  # a known pattern's name, or its regex
    assert by_name.pattern == KNOWN_PATTERNS[pattern] and by_name.pattern_name == pattern


def test_contents_hashed_once(tmp_path, data_dir, monkeypatch):
    """The file's bytes go through sha256 once (for both the recognition and the rank cache)."""
    path = data_dir / "vocab" / "tiktoken" / "o200k_base.tiktoken"
    fed = []
    real = hashlib.sha256

    class Counting:
        def __init__(self, data=b""):
            self._h = real()
            self.update(data)

        def update(self, data):
            fed.append(len(data))
            self._h.update(data)

        def digest(self):
            return self._h.digest()

        def hexdigest(self):
            return self._h.hexdigest()

    monkeypatch.setattr(tiktoken_files.hashlib, "sha256", Counting)
    load_tiktoken_file(path)
    assert sum(fed) < path.stat().st_size + 65536, fed  # (+ the parser's source, once)


# --------------------------------------------------------------------------------------------
# --pattern NAME|REGEX on the command line
# --------------------------------------------------------------------------------------------


def run_cli(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def unknown_cl100k(tmp_path, data_dir) -> Path:
    """cl100k's ranks with a blank line more: bytes tiktoken does not publish."""
    path = tmp_path / "mine.tiktoken"
    path.write_bytes((data_dir / "vocab" / "tiktoken" / "cl100k_base.tiktoken").read_bytes() + b"\n")
    return path


def test_cli_pattern_by_name_and_regex(capsys, tmp_path, unknown_cl100k):
    rc, out, err = run_cli(capsys, "info", "--vocab", unknown_cl100k, "--json")
    assert rc == 0 and json.loads(out)["exact_mode"] is False, err
    rc, out, err = run_cli(capsys, "info", "--vocab", unknown_cl100k, "--pattern", "cl100k", "--json")
    info = json.loads(out)
    assert rc == 0 and info["pattern_name"] == "cl100k" and info["exact_mode"] is True, err
    regex = r"\S+|\s+"
    rc, out, err = run_cli(capsys, "info", "--vocab", unknown_cl100k, "--pattern", regex, "--json")
    info = json.loads(out)
    assert rc == 0 and info["pattern"] == regex and info["exact_mode"] is True, err


def test_cli_pattern_encode_then_verify_from_sidecar(capsys, tmp_path, unknown_cl100k):
    pytest.importorskip("tiktoken")
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{t}\n" for t in TEXTS for _ in range(3)))
    out = tmp_path / "out"
    rc, _, err = run_cli(
        capsys, *encode_argv(src, out, unknown_cl100k, "--pattern", "cl100k", "--device", "cpu")
    )
    assert rc == 0, err
    sidecar = json.loads((out / "shard.json").read_text())
    assert sidecar["vocab_arg"]["pattern"] == "cl100k"
    rc, stdout, err = run_cli(capsys, "verify", out / "shard")  # the sidecar's vocabulary and pattern
    assert rc == 0 and "verify: ok" in stdout, err


@pytest.mark.parametrize(
    "value, needle",
    [
        ("gpt5", "--pattern: 'gpt5' is not a known pattern name"),
        ("(?<=x)y", "--pattern: "),
        (r"\p{L}+", "--pattern: "),
        ("(", "--pattern: "),
    ],
)
def test_cli_bad_pattern_is_one_line_usage_error(capsys, unknown_cl100k, value, needle):
    rc, _, err = run_cli(capsys, "info", "--vocab", unknown_cl100k, "--pattern", value)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "error:" in lines[0] and needle in lines[0], err


def test_cli_pattern_refused_for_tokenizer_json(capsys, data_dir):
    path = data_dir / "vocab" / "gpt2" / "tokenizer.json"
    rc, _, err = run_cli(capsys, "info", "--vocab", path, "--pattern", "r50k")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "--pattern applies to tiktoken-format rank files" in lines[0], err
