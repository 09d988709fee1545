"""A vocabulary's tables as the kernels read them, and a tokenizer's sets of them.

build.py     the NumPy builders of the device tables (a contract with ffi/)
cache.py     the built tables kept on disk (disk_cache.py), keyed by vocabulary and builder
sets.py      `TableSets`: a tokenizer's tables per device and per set of allowed specials
specials.py  special tokens on the host: where they occur in a text, the end-of-text id
lru.py       `BoundedCache`, the least-recently-used cache sets.py and specials.py keep
"""
