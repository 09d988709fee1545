// CUDA FFI targets and the nanobind module that registers them (kernels in cuda_kernels.cu).
#include "nanobind/nanobind.h"
#include "xla/ffi/api/api.h"

namespace nb = nanobind;

XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked);

NB_MODULE(_blockbpe_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["bbpe_encode"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCuda));
    d["bbpe_encode_unchecked"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCudaUnchecked));
    return d;
  });
}
