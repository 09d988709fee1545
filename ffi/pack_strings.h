// list[str | bytes] -> zero-padded rows + byte lengths, shared by the CPU module's
// `pack_strings` and the CUDA module's pinned-host staging (one definition of the packing rule).
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nanobind/nanobind.h"

namespace bbpe {

// One string's UTF-8 bytes, borrowed from its Python object (str: its cached UTF-8 form).
using StringView = std::pair<const char*, Py_ssize_t>;

// Reads every item's bytes (no copy) and the row width: `max_len`, or when max_len < 0 the
// longest string rounded up to a power of two, at least 16. Raises TypeError for an item that
// is neither str nor bytes, ValueError for a string longer than max_len. The views borrow
// from `items`, which must outlive them.
inline std::vector<StringView> string_views(const nanobind::list& items, int64_t& max_len) {
  const size_t batch = nanobind::len(items);
  std::vector<StringView> views(batch);
  for (size_t b = 0; b < batch; ++b) {
    PyObject* o = items[b].ptr();
    const char* p = nullptr;
    Py_ssize_t n = 0;
    if (PyUnicode_Check(o)) {
      p = PyUnicode_AsUTF8AndSize(o, &n);
      if (!p) throw nanobind::python_error();
    } else if (PyBytes_Check(o)) {
      p = PyBytes_AS_STRING(o);
      n = PyBytes_GET_SIZE(o);
    } else {
      throw nanobind::type_error(
          ("pack_strings: item " + std::to_string(b) + " is neither str nor bytes").c_str());
    }
    if (max_len >= 0 && n > max_len)
      throw nanobind::value_error(("pack_strings: string " + std::to_string(b) + " has " +
                                   std::to_string(n) + " bytes, more than max_len=" +
                                   std::to_string(max_len)).c_str());
    views[b] = {p, n};
  }
  if (max_len < 0) {
    Py_ssize_t longest = 0;
    for (auto& v : views) longest = std::max(longest, v.second);
    max_len = 16;
    while (max_len < longest) max_len *= 2;
  }
  return views;
}

// Row b of data[B, max_len] gets string b and zeros after it; lengths[b] its byte count.
inline void write_rows(const std::vector<StringView>& views, int64_t max_len, uint8_t* data,
                       int32_t* lengths) {
  for (size_t b = 0; b < views.size(); ++b) {
    uint8_t* row = data + b * max_len;
    std::memcpy(row, views[b].first, views[b].second);
    std::memset(row + views[b].second, 0, max_len - views[b].second);
    lengths[b] = (int32_t)views[b].second;
  }
}

}  // namespace bbpe
