"""Load a byte-level BPE vocabulary (tiktoken file, tiktoken Encoding, or HF tokenizer.json)
into one Python model, :class:`Vocab`, from which ``tables/build.py`` builds the device tables.

Two BPE semantics meet here, and the model holds both in the same shape:

* tiktoken ranks a pair by the rank of its concatenated bytes, and the merged token's id *is*
  that rank. So ``merges`` holds every split (prefix, suffix) of every token where both halves
  are tokens too; BPE never forms a pair outside that set.
* HF ``tokenizers`` ranks a pair by its index in ``model.merges``; the merged id is
  ``vocab[a + b]``.

``whole_piece_shortcut`` is tiktoken's rule "a pre-tokenized piece that is itself a token is
returned as that token without merging" (HF: ``ignore_merges: true``, as in Llama 3). Without
it (HF's BPE) a piece is what its merges make of it, even where its bytes are a token: some
tokens (e.g. 588 of Llama 3's) are not what the merges make of their own bytes. The device
tables follow the flag (tables/build.py, ``whole_piece_ids``).

Every validation failure raises :class:`VocabError`, whose message starts with the file and,
where there is one, the 1-based line (``path:12: ...``) or the JSON path
(``path: model.merges[7]: ...``).

Modules: model.py (Vocab, VocabError, shared checks), patterns.py (known pre-tokenizer
patterns), tiktoken_files.py (tiktoken files, known by their contents, and Encodings),
hf_json.py (tokenizer.json).
"""

from ..pretok import HF_BYTELEVEL_PATTERN
from .hf_json import bytes_to_unicode, load_tokenizer_json
from .model import Vocab, VocabError
from .patterns import KNOWN_PATTERNS, pattern_of, recognise_pattern
from .tiktoken_files import (
    KNOWN_TIKTOKEN_FILES,
    LLAMA3_SPECIAL_TOKENS,
    from_tiktoken_encoding,
    known_tiktoken_contents,
    known_tiktoken_file_defaults,
    load_tiktoken_file,
)

__all__ = [
    "VocabError",
    "Vocab",
    "KNOWN_PATTERNS",
    "HF_BYTELEVEL_PATTERN",
    "LLAMA3_SPECIAL_TOKENS",
    "recognise_pattern",
    "pattern_of",
    "KNOWN_TIKTOKEN_FILES",
    "known_tiktoken_contents",
    "bytes_to_unicode",
    "load_tiktoken_file",
    "load_tokenizer_json",
    "from_tiktoken_encoding",
    "known_tiktoken_file_defaults",
]
