"""The corpus job's executables kept on disk by what they are built from, so that a second
process loads them without tracing or lowering anything.

JAX's persistent compilation cache finds an entry by the lowered program: each hit still
traces and lowers its function (Python, the GIL held) and the first one imports MLIR's
dialect modules, so a command's first window waited for that before its first call. Here an
entry's key is what the executable was built from: the job's own key of it (function,
shapes, static options), this package's sources and extension modules, JAX's version and
the device; the entry is JAX's serialized executable (`jax.experimental.serialize_executable`),
pickled: the folder is trusted as the rest of the cache is.

Entries are written only by a process that JAX's persistent cache has not served: an
executable JAX loaded from its cache (or that its in-memory cache hands back after such a load)
serializes without its host code on the CPU backend, and the entry fails when run. The CLI
therefore keeps its executables here instead of in JAX's cache. Off until `enable` (the CLI's
`corpus.job.enable_executable_cache`); `encode_files` in a user's process leaves it off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
from pathlib import Path

from ..disk_cache import save_bytes, used

ENTRY_FORMAT = 2  # (1: entries JAX-loaded executables could write)
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
    run = build()
    if _compiled_here():
        _save(path, run)
    return run


def _compiled_here() -> bool:
    """Whether this process's executables are all compiled here: JAX's persistent cache off,
    and never opened in this process (JAX keeps the open cache in a private name: where it is
    gone, nothing is kept)."""
    import jax

    if jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache:
        return False
    try:
        from jax._src import compilation_cache
    except ImportError:
        return False
    return hasattr(compilation_cache, "_cache") and compilation_cache._cache is None


def _load(path: Path, device):
    from jax.experimental.serialize_executable import deserialize_and_load

    with open(path, "rb") as f:
        fmt, payload = pickle.load(f)
    if fmt != ENTRY_FORMAT:
        raise ValueError(f"{path}: entry format {fmt}")
    run = deserialize_and_load(*payload, backend=device.client, execution_devices=[device])
    used(path)
    return run


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

    from .. import native

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
