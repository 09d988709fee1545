"""The corpus job's inputs, read as blocks of whole lines or windows of documents.

files.py        input files and streams checked, read as blocks of whole lines
lines.py        lines and JSONL in Python (where the native reader gives up)
compressed.py   .gz and .zst inputs, decompressed ahead (a process or a thread)
zstd_frames.py  a .zst file's frames (also run by its path, in a child process)
parquet.py      a parquet string column, row groups read ahead
device_lines.py a block of lines split where it lives (the GPU), the primitive split_lines
"""
