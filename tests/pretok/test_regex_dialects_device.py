"""The dialect tests of test_regex_dialects.py through the kernels (the CPU's here, the GPU's on
the device): tokens of a vocabulary holding every substring of the texts are the pieces, so the
ids compare the pieces with tiktoken's and HF tokenizers'."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.vocab import bytes_to_unicode

from helpers import device_for, gpu_devices
from strategies import n_examples, regex_for_dialect, regex_patterns, regex_text
from synthetic import BYTE_LEVEL, bpe_json_doc, pre_tokenizer, split, write_json
from test_regex_dialects import ANY, DIGITS_SPLIT, FLAVOURS, compiled, substring_ranks

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")


def substring_tokenizer_files(tmp_path, pattern: str, flavour: str, texts: list[str]):
    """(our tokenizer file, the engine's encode): a .tiktoken file with `pattern` | any
    character, or a tokenizer.json whose pre-tokenizer is Split(pattern) + ByteLevel and whose
    BPE looks every piece up whole (ignore_merges)."""
    ranks = substring_ranks(texts)
    if flavour == "tiktoken":
        path = tmp_path / "substrings.tiktoken"
        path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
        full = f"(?:{pattern})|{ANY}"
        tok = bb.Tokenizer.from_file(path, name="substrings", pattern=full, special_tokens={})
        enc = tiktoken.Encoding("substrings", pat_str=full, mergeable_ranks=ranks, special_tokens={})
        return tok, enc.encode_ordinary
    u = bytes_to_unicode()
    vocab = {"".join(u[b] for b in t): r for t, r in ranks.items()}
    by_rank = sorted(ranks, key=ranks.get)
    merges = ["".join(u[b] for b in t[:-1]) + " " + u[t[-1]] for t in by_rank if len(t) > 1]
    doc = bpe_json_doc(vocab, merges, pre_tokenizer([split(pattern), BYTE_LEVEL]), ignore_merges=True)
    path = write_json(tmp_path / "substrings.json", doc)
    hf = tokenizers.Tokenizer.from_file(str(path))
    return bb.Tokenizer.from_file(path), lambda t: hf.encode(t, add_special_tokens=False).ids


def check_on_device(tmp_path, template: str, flavour: str, texts: list[str], kind: str) -> bool:
    pattern = regex_for_dialect(template, flavour)
    if compiled(pattern, flavour) is None:
        return False
    tok, reference = substring_tokenizer_files(tmp_path, pattern, flavour, texts)
    longest = max(len(t.encode("utf-8")) for t in texts)
    ids, counts = tok.encode_batch(texts, device=device_for(kind), max_tokens=max(8, longest + 2))
    ids, counts = np.asarray(ids), np.asarray(counts)
    for k, text in enumerate(texts):
        got = ids[k, : counts[k]].tolist()
        assert got == reference(text), f"{kind} {flavour} {pattern!r} on {text!r}"
    return True


DEVICE_CASES = [
    (DIGITS_SPLIT, ["3119", "12345 678", "1234567"]),
    (r"\s+$|\s+(?!\S)|\S+|\s", ["a  \n\n  ", "x\n", " a b  "]),
    (r"a\Z|a$|.", ["a\na\n", "ba\n\n\n", "a"]),
    (r"(?i)\p{Lu}+|[^\p{Lu}\s]+|.", ["aAkK\u212a", "\u1c89\u1c8aΣσς"]),
    (r"x{2}?y|.", ["xxy xy xxxy"]),
]


@pytest.mark.parametrize("kind", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("case", range(len(DEVICE_CASES)))
def test_dialect_cases_on_device_gpu(tmp_path, kind, flavour, case):
    """The audit's cases through the kernels (the CPU one here, the GPU's on the device)."""
    if kind == "gpu" and not gpu_devices():
        pytest.skip("no GPU visible to JAX")
    template, texts = DEVICE_CASES[case]
    assert check_on_device(tmp_path, template, flavour, texts, kind)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("flavour", FLAVOURS)
@settings(
    max_examples=n_examples(20),
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(template=regex_patterns(), texts=st.lists(regex_text.filter(bool), min_size=1, max_size=6))
def test_fuzz_dialect_gpu(tmp_path, flavour, template, texts):
    """The differential fuzz test through the GPU kernels."""
    template = (
        template if compiled(regex_for_dialect(template, flavour), flavour) else f"(?:{template})(?D:.)"
    )
    assume(check_on_device(tmp_path, template, flavour, texts, "gpu"))
