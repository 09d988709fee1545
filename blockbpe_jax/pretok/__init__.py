"""Pre-tokenizers as data: regexes compiled into the automata the kernels run.

regex_syntax.py  the regex family of BPE pre-tokenizers -> syntax tree
nfa.py           syntax tree -> NFA with ordered choices
compiler.py      NFA -> the backward/forward automata (minimised), code point classes
automata.py      Automata, their minimisation and sequential run (the tests' reference)
tables.py        automata -> the kernels' operand (ffi/pretok/tables.h)
normalizer.py    a tokenizer.json normalizer (NFC, Lowercase) for the kernels and the host
nfc_data.py      the NFC normalization operand (ffi/pretok/nfc_normalize.h), its CPU batch call
pipeline.py      a tokenizer's stages (tiktoken pattern, HF pre_tokenizer) + compile cache
unicode.py       the Unicode tables, each at its reference's version (unicode_*.npz)
versions.py      the installed references' Unicode versions against the tables' (warnings)
"""

from .compiler import PretokenizerUnsupported, compile_pattern
from .pipeline import (
    BYTES_MODE,
    HF_BYTELEVEL_PATTERN,
    Pretokenizer,
    Stage,
    device_normalizes,
    from_hf,
    from_tiktoken_pattern,
    nfc_from_hf,
    nfc_pairs,
    normalizer_from_hf,
)
from .normalizer import Normalizer
from .versions import UnicodeVersionWarning

__all__ = [
    "PretokenizerUnsupported",
    "compile_pattern",
    "Pretokenizer",
    "Stage",
    "from_hf",
    "nfc_from_hf",
    "nfc_pairs",
    "device_normalizes",
    "normalizer_from_hf",
    "Normalizer",
    "UnicodeVersionWarning",
    "from_tiktoken_pattern",
    "BYTES_MODE",
    "HF_BYTELEVEL_PATTERN",
]
