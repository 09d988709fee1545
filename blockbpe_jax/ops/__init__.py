"""The primitive and what runs around it on the device.

primitive.py       `encode` (the XLA FFI call) on `EncodeTables`; `encode_window`; the host encoder
postprocess.py     `decode`, `finalize` (BOS/EOS, padding, truncation), `attention_mask`
packing.py         `pack`: documents into fixed rows with segment ids and positions
packing_stream.py  `pack_stream`: the same across batches, with carry-over
ragged.py          `encode_ragged`, `pack_ragged`: flat bytes + offsets in
sharding.py        `encode_sharded`: encode per device of a mesh
"""
