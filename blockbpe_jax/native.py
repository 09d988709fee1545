"""The compiled modules, in one place: `cpu` (always built) and `cuda` (None where nvcc was not
found at build time). Importing this registers their XLA FFI targets with JAX, once; every
other module reaches native code through here.
"""

from __future__ import annotations

import jax

from . import _blockbpe_cpu as cpu

try:  # the CUDA module exists only where nvcc was found at build time
    from . import _blockbpe_cuda as cuda
except ImportError:  # pragma: no cover - depends on the build
    cuda = None

for _name, _capsule in {**cpu.registrations(), **cpu.split_lines_registrations()}.items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
if cuda is not None:
    for _name, _capsule in {**cuda.registrations(), **cuda.split_lines_registrations()}.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

HAS_CUDA_MODULE = cuda is not None


def workspace_bytes(batch: int, max_len: int, pretok_stages: int, symbols: int, nfc: bool = False) -> int:
    """Bytes of the CUDA kernel's arrays that do not live in shared memory (ffi/binding/encode_params.h);
    nfc: and of the NFC pre-pass's, for a call that normalizes NFC (ffi/cuda/nfc_prepass.cuh)."""
    size = cpu.nfc_workspace_bytes if nfc else cpu.workspace_bytes
    return int(size(batch, max_len, pretok_stages, symbols))
