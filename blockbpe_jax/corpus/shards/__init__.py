"""The corpus job's outputs (their errors: ../types.py).

flat.py           flat token shards (`.bin` ids + `.idx` offsets + a JSON sidecar), their reader
padded.py         padded .npz/.npy shards
array_records.py  ArrayRecord shards (what grain reads)
megatron.py       Megatron-LM's .bin/.idx pairs and their merge
"""

# What encode_files writes: every token of each document (flat .bin/.idx, ArrayRecord,
# Megatron), or rows padded to max_tokens (npz, npy).
EVERY_TOKEN_FORMATS = ("flat", "arrayrecord", "megatron")
FORMATS = EVERY_TOKEN_FORMATS + ("npz", "npy")
