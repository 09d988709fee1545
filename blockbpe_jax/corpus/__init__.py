"""The corpus job: files -> documents -> encode calls on the device -> token shards
(docs/corpus.md). `Tokenizer.encode_files` and `blockbpe-jax encode` run it.

job.py               the job: `encode_files`, `encode_files_to_arrays`, `encode_arrow`, `verify`
types.py             what readers, engine and writers share: `CorpusError`, `Window`
documents.py         inputs -> windows of documents (`iter_windows`)
plan.py              a window's encode calls, as rules on numbers (no JAX)
engine.py            `WindowEncoder`: plan, launch, finish, store and write, overlapped
device.py            the window's steps on the device and its buffers
executable_cache.py  the job's executables kept on disk
progress.py          the progress bar
background.py        iterators run ahead on threads
spares.py            buffers of finished work kept for the next (windows', readers')
token_column.py      an Arrow table's text column -> its token column (the Ray stage's, HF datasets')
ray_stage.py         the job as a Ray Data stage; ray_job.py, the job over a Ray cluster
                     (`python -m blockbpe_jax.corpus.ray_job`)
inputs/              files and streams, lines and JSONL, .gz/.zst, parquet
shards/              flat shards, padded .npz/.npy, ArrayRecord, Megatron .bin/.idx
                     (`python -m blockbpe_jax.corpus.shards.megatron`)
"""
