"""The corpus job's executables kept on disk by what they are built from, so that a second
process loads them without tracing or lowering anything.

JAX's persistent compilation cache finds an entry by the lowered program: each hit still
traces and lowers its function (Python, the GIL held) and the first one imports MLIR's
dialect modules, so a command's first window waited for that before its first call. Here an
entry's key is what the executable was built from: the job's own key of it (function,
shapes, static options), this package's sources and extension modules, JAX's version and
the device; the entry is JAX's serialized executable (`jax.experimental.serialize_executable`),
pickled: the folder is trusted as the rest of the cache is.

Off until `enable` (the CLI's `corpus.enable_compilation_cache` turns it on, in executables/
beside xla/); `encode_files` in a user's process leaves it off, as JAX's cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
from pathlib import Path

from .disk_cache import save_bytes

ENTRY_FORMAT = 1
_directory: Path | None = None


def enable(directory: Path | None) -> None:
    """Keeps executables in `directory` from now on (None: off)."""
    global _directory
    _directory = directory


def load_or_build(key, build, device):
    """The executable `build()` makes for `key` on `device`: loaded from its entry when there
    is one, else built (and its entry written)."""
    path = _entry(key, device)
    if path is None:
        return build()
    if path.exists():
        try:
            return _load(path, device)
        except Exception:  # noqa: BLE001 (a damaged or foreign entry is built again and replaced)
            pass
    jax_cache_off = _jax_cache_switch()
    if jax_cache_off is None:
        return build()
    # (compiled here, not loaded from JAX's own cache: an executable JAX loaded serializes
    # without its host code on the CPU backend, and its entry fails when run)
    with jax_cache_off(False):
        run = build()
    _save(path, run)
    return run


def _jax_cache_switch():
    """JAX's thread-local switch of its persistent cache (a private name: where it is gone,
    nothing is kept here)."""
    try:
        from jax._src.config import enable_compilation_cache
    except ImportError:
        return None
    return enable_compilation_cache if callable(enable_compilation_cache) else None


def _load(path: Path, device):
    from jax.experimental.serialize_executable import deserialize_and_load

    with open(path, "rb") as f:
        fmt, payload = pickle.load(f)
    if fmt != ENTRY_FORMAT:
        raise ValueError(f"{path}: entry format {fmt}")
    return deserialize_and_load(*payload, backend=device.client, execution_devices=[device])


def _save(path: Path, run) -> None:
    """Writes the entry; an executable that cannot be serialized leaves none."""
    from jax.experimental.serialize_executable import serialize

    try:
        data = pickle.dumps((ENTRY_FORMAT, serialize(run)))
    except (ValueError, NotImplementedError, TypeError, AttributeError, pickle.PicklingError):
        return
    save_bytes(path, data)


def _entry(key, device) -> Path | None:
    if _directory is None:
        return None
    h = hashlib.sha256(_build_digest())
    h.update(repr((device.platform, device.device_kind, device.client.platform_version, key)).encode())
    return _directory / f"{h.hexdigest()[:40]}.pkl"


@functools.lru_cache(maxsize=1)
def _build_digest() -> bytes:
    """What every executable also depends on: this package's Python sources (the jitted
    functions), its extension modules (the FFI handlers: size and time), JAX's and jaxlib's
    versions and the flags that change what XLA builds."""
    import jax
    import jaxlib

    from . import native

    package = Path(__file__).parent
    h = hashlib.sha256(
        repr((ENTRY_FORMAT, jax.__version__, jaxlib.__version__, sys.version_info[:2])).encode()
    )
    h.update(repr((jax.config.jax_enable_x64, os.environ.get("XLA_FLAGS", ""))).encode())
    for source in sorted(package.rglob("*.py")):
        h.update(source.relative_to(package).as_posix().encode() + b"\0" + source.read_bytes())
    for module in (native.cpu, native.cuda):
        if module is not None:
            st = os.stat(module.__file__)
            h.update(repr((module.__file__, st.st_size, st.st_mtime_ns)).encode())
    return h.digest()
