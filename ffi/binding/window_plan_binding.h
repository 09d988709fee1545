// `set_window_plan` of both modules (binding/window_ffi.h): Python's plan of a window's calls,
// int64[C, 6], left beside the window's bytes for the next bbpe_encode_window call.
#pragma once

#include <cstdint>

#include "binding/window_ffi.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"

namespace bbpe {

inline void bind_set_window_plan(nanobind::module_& m) {
  namespace nb = nanobind;
  using Calls = nb::ndarray<const int64_t, nb::ndim<2>, nb::shape<-1, 6>, nb::c_contig, nb::device::cpu>;
  m.def(
      "set_window_plan",
      [](uintptr_t bytes, int32_t sep_id, Calls calls) {
        set_window_plan(bytes, sep_id, calls.data(), calls.shape(0));
      },
      nb::arg("bytes"), nb::arg("sep_id"), nb::arg("calls").noconvert(),
      "The calls (int64[C, 6], binding/window_ffi.h: rows, width, T, at, entry, docs) of the next\n"
      "bbpe_encode_window call of this module's platform with this sep_id whose window bytes start\n"
      "at address `bytes` (device memory on a GPU).");
}

}  // namespace bbpe
