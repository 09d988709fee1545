"""blockbpe_jax: exact byte-level BPE tokenization on the GPU, as a JAX primitive.

    tok = blockbpe_jax.Tokenizer.from_file("cl100k_base.tiktoken")
    ids, counts = blockbpe_jax.encode(data, lengths, tok, max_tokens=1024)   # jittable

The public API, by the module that defines it:

    Tokenizer, pack_strings                      tokenizer.py: a vocabulary's tokenizer; strings -> uint8[B, L]
    Vocab, VocabError, load_tiktoken_file,       vocab/: every vocabulary format -> one model
      load_tokenizer_json, from_tiktoken_encoding
    encode, Encoded, EncodeTables,               ops/primitive.py: the XLA FFI primitive (jittable)
      HAS_CUDA_MODULE
    decode, finalize, attention_mask             ops/postprocess.py: ids back to bytes, BOS/EOS, padding
    pack, segment_attention_mask, Packed,        ops/packing.py: documents packed into fixed rows
      PackReport
    pack_stream, empty_carry, Carry, CarryReport ops/packing_stream.py: the same across batches
    encode_ragged, pack_ragged                   ops/ragged.py: flat bytes + offsets in
    encode_sharded                               ops/sharding.py: encode per device of a mesh
    TiktokenEncoding, hf_call                    compat/: tiktoken's Encoding, the HF-style call

The corpus job is `Tokenizer.encode_files` (blockbpe_jax.corpus); the command line,
`blockbpe-jax` (blockbpe_jax.cli).
"""

from .compat.tiktoken_api import Encoding as TiktokenEncoding, hf_call
from .ops.packing import Packed, PackReport, pack, segment_attention_mask
from .ops.packing_stream import Carry, CarryReport, empty_carry, pack_stream
from .ops.postprocess import attention_mask, decode, finalize
from .ops.primitive import HAS_CUDA_MODULE, Encoded, EncodeTables, encode
from .ops.ragged import encode_ragged, pack_ragged
from .ops.sharding import encode_sharded
from .text_rows import pack_strings
from .tokenizer import Tokenizer
from .vocab import Vocab, VocabError, from_tiktoken_encoding, load_tiktoken_file, load_tokenizer_json

__all__ = [
    "Tokenizer",
    "pack_strings",
    "Vocab",
    "VocabError",
    "load_tiktoken_file",
    "load_tokenizer_json",
    "from_tiktoken_encoding",
    "encode",
    "Encoded",
    "EncodeTables",
    "HAS_CUDA_MODULE",
    "decode",
    "finalize",
    "attention_mask",
    "pack",
    "segment_attention_mask",
    "Packed",
    "PackReport",
    "pack_stream",
    "empty_carry",
    "Carry",
    "CarryReport",
    "encode_ragged",
    "pack_ragged",
    "encode_sharded",
    "TiktokenEncoding",
    "hf_call",
]
__version__ = "0.1.0"
