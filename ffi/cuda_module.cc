// CUDA FFI targets and the nanobind module that registers them (kernels in cuda_kernels.cu).
#include "nanobind/nanobind.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "xla/ffi/api/api.h"

namespace nb = nanobind;

XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked);
#ifdef BBPE_STAGE_CLOCKS
namespace bbpe {
std::vector<std::pair<std::string, unsigned long long>> read_stage_clocks();  // cuda_kernels.cu
}
#endif

NB_MODULE(_blockbpe_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["bbpe_encode"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCuda));
    d["bbpe_encode_unchecked"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCudaUnchecked));
    return d;
  });
#ifdef BBPE_STAGE_CLOCKS
  m.def("read_stage_clocks", &bbpe::read_stage_clocks,
        "Reads and zeroes the kernel's stage clocks (a BLOCKBPE_STAGE_CLOCKS=ON build only).");
#endif
}
