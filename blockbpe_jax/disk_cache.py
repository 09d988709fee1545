"""Where blockbpe_jax keeps what it caches on disk, and how an entry is written.

One root for every cache: $BLOCKBPE_CACHE_DIR, default $XDG_CACHE_HOME/blockbpe_jax (else
~/.cache/blockbpe_jax); "" turns caching off. Below it one folder per kind: ranks/ (parsed
rank files, vocab/tiktoken_files.py), pretok/ (compiled pre-tokenizer automata), tables/ (built
vocabulary tables), and for the CLI executables/ (the corpus job's, executable_cache.py) and
xla/ (JAX's compilation cache).
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import numpy as np


def cache_dir(kind: str) -> Path | None:
    """The folder of one kind of cache entry, or None when caching is off."""
    root = os.environ.get("BLOCKBPE_CACHE_DIR")
    if root == "":
        return None
    base = (
        Path(root)
        if root
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "blockbpe_jax"
    )
    return base / kind


def save_npz(path: Path, arrays: dict, *, compressed: bool = False) -> None:
    """Writes an .npz entry (`save_bytes`)."""
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    save_bytes(path, buf.getvalue())


def save_bytes(path: Path, data: bytes) -> None:
    """Writes an entry atomically (a reader never sees half of one, and writers on threads or
    in other processes each write their own file first); does nothing where the disk is
    read-only: a cache is an optimisation."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        pass
