// The CPU module's NumPy arrays: operands as nanobind sees them, arrays made here whose memory
// NumPy frees, and the check of a batch's row offsets (shared by the module's files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

// Rows of a flat buffer, row r = data[off[r], off[r + 1]): the offsets run from 0 to the
// buffer's `total` bytes without falling, each row at most max_row bytes (`limit` in words).
inline void check_row_offsets(const char* what, const int64_t* off, int64_t rows, int64_t total, int64_t max_row,
                              const char* limit) {
  if (rows < 0 || off[0] != 0 || off[rows] != total)
    throw nb::value_error((std::string(what) + ": offsets must run from 0 to len(data)").c_str());
  for (int64_t r = 0; r < rows; ++r)
    if (off[r + 1] < off[r] || off[r + 1] - off[r] > max_row)
      throw nb::value_error(
          (std::string(what) + ": offsets must be non-decreasing, rows under " + limit + " bytes").c_str());
}

// The corpus job's host helpers (corpus_helpers.cc) added to the module.
void bind_corpus_helpers(nb::module_& m);
// The special tokens' host helpers (special_tables.cc) added to the module.
void bind_special_tables(nb::module_& m);
