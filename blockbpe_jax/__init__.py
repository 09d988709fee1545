"""blockbpe_jax: exact byte-level BPE tokenization on the GPU, as a JAX primitive.

    tok = blockbpe_jax.Tokenizer.from_file("cl100k_base.tiktoken")
    ids, counts = blockbpe_jax.encode(data, lengths, tok, max_tokens=1024)   # jittable

`data` is uint8[B, L] and `lengths` int32[B]; see `encode` for the options. `decode` (ids back
to bytes on the device), `finalize` (BOS/EOS, padding and truncation sides) and
`attention_mask` are jittable too; `pack` packs documents into fixed rows with segment ids and
positions (grain's layout), `pack_stream` the same across batches with carry-over; `encode_sharded` runs encode per device of a mesh.
"""

from .ops import HAS_CUDA_MODULE, Encoded, EncodeTables, encode
from .packing import Packed, PackReport, pack, segment_attention_mask
from .packing_stream import Carry, CarryReport, empty_carry, pack_stream
from .postprocess import attention_mask, decode, finalize
from .ragged import encode_ragged, pack_ragged
from .sharding import encode_sharded
from .tiktoken_api import Encoding as TiktokenEncoding, hf_call
from .tokenizer import Tokenizer, pack_strings
from .vocab import Vocab, VocabError, from_tiktoken_encoding, load_tiktoken_file, load_tokenizer_json

__all__ = [
    "encode",
    "Encoded",
    "EncodeTables",
    "decode",
    "finalize",
    "attention_mask",
    "pack",
    "pack_stream",
    "empty_carry",
    "Carry",
    "CarryReport",
    "Packed",
    "PackReport",
    "segment_attention_mask",
    "encode_sharded",
    "TiktokenEncoding",
    "hf_call",
    "encode_ragged",
    "pack_ragged",
    "Tokenizer",
    "pack_strings",
    "Vocab",
    "VocabError",
    "load_tiktoken_file",
    "load_tokenizer_json",
    "from_tiktoken_encoding",
    "HAS_CUDA_MODULE",
]
__version__ = "0.1.0"
