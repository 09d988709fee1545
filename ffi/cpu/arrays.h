// The CPU module's NumPy arrays: operands as nanobind sees them, and arrays made here whose
// memory NumPy frees (shared by cpu_module.cc and corpus_helpers.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"

namespace nb = nanobind;

using U8Array = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using S32Array = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;
using S64Array = nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>;
// The same with N dimensions (const T: read only, else written into).
template <class T, size_t N>
using HostArray = nb::ndarray<T, nb::ndim<N>, nb::c_contig, nb::device::cpu>;

// A NumPy array over `data` (new[]-allocated here), deleted with its last reference.
template <class T>
nb::ndarray<nb::numpy, T> owned_array(T* data, size_t ndim, const size_t* shape) {
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, ndim, shape, owner);
}

// The corpus job's host helpers (corpus_helpers.cc) added to the module.
void bind_corpus_helpers(nb::module_& m);
