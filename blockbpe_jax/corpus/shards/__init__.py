"""The corpus job's outputs (their errors: ../types.py).

flat.py           flat token shards (`.bin` ids + `.idx` offsets + a JSON sidecar), their reader
padded.py         padded .npz/.npy shards
array_records.py  ArrayRecord shards (what grain reads)
megatron.py       Megatron-LM's .bin/.idx pairs and their merge
"""
