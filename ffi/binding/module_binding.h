// What both native modules define alike: `registrations()`, the FFI targets' names and their
// handlers (native.py registers them with JAX), and `set_window_plan` (binding/window_ffi.h):
// Python's plan of a corpus window's calls, int64[C, 6], left beside the window's bytes for the
// next bbpe_encode_window call.
#pragma once

#include <cstdint>

#include "binding/window_ffi.h"
#include "core/json_lines.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"

namespace bbpe {

// `registrations()`: each FFI target's name and its handler (an XLA_FFI_Handler symbol).
inline void bind_registrations(nanobind::module_& m, void* encode, void* encode_unchecked, void* encode_window) {
  namespace nb = nanobind;
  m.def("registrations", [encode, encode_unchecked, encode_window]() {
    nb::dict d;
    d["bbpe_encode"] = nb::capsule(encode);
    d["bbpe_encode_unchecked"] = nb::capsule(encode_unchecked);
    d["bbpe_encode_window"] = nb::capsule(encode_window);
    return d;
  });
}

// `split_lines_registrations()`: the block split's FFI target (binding/split_lines_ffi.h), and
// `split_lines_workspace_words`, the int32 words of its workspace result.
inline void bind_split_lines_registration(nanobind::module_& m, void* split_lines) {
  namespace nb = nanobind;
  m.def("split_lines_registrations", [split_lines]() {
    nb::dict d;
    d["bbpe_split_lines"] = nb::capsule(split_lines);
    return d;
  });
  m.def(
      "split_lines_workspace_words",
      [](int64_t block_bytes, int64_t max_lines) { return jsonl::split_workspace(block_bytes, max_lines).words; },
      nb::arg("block_bytes"), nb::arg("max_lines"),
      "int32 words of bbpe_split_lines' workspace for a block of that capacity and max_lines.");
}

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
