// list[str | bytes], or documents of one flat buffer, -> zero-padded rows + byte lengths,
// shared by the CPU module's `pack_strings` / `pack_flat` and the CUDA module's pinned-host
// staging (one definition of the packing rule).
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/host_threads.h"
#include "nanobind/nanobind.h"

namespace bbpe {

// One string's UTF-8 bytes, borrowed from its Python object (str: its cached UTF-8 form).
using StringView = std::pair<const char*, Py_ssize_t>;

// max_len < 0: the longest view rounded up to a power of two, at least 16.
inline void default_width(const std::vector<StringView>& views, int64_t& max_len) {
  if (max_len >= 0) return;
  Py_ssize_t longest = 0;
  for (auto& v : views) longest = std::max(longest, v.second);
  max_len = 16;
  while (max_len < longest) max_len *= 2;
}

// The items' bytes (no copy), borrowed from `items`: a private list of them (a new reference
// to each), so they stay valid while it lives, whatever other threads do to the caller's
// sequence once the GIL is released.
struct StringViews {
  nanobind::list items;
  std::vector<StringView> views;
};

// Reads every item's bytes and the row width: `max_len`, or when max_len < 0 the longest
// string rounded up to a power of two, at least 16. Raises TypeError for an item that is
// neither str nor bytes, ValueError for a string longer than max_len.
inline StringViews string_views(nanobind::handle texts, int64_t& max_len) {
  PyObject* list = PySequence_List(texts.ptr());
  if (!list) throw nanobind::python_error();
  StringViews out{nanobind::steal<nanobind::list>(list), {}};
  const nanobind::list& items = out.items;
  const size_t batch = nanobind::len(items);
  std::vector<StringView>& views = out.views;
  views.resize(batch);
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
  default_width(views, max_len);
  return out;
}

// Rows [first, last) of data[rows, max_len]: row b gets string b and zeros after it, lengths[b]
// its byte count. Rows are independent, so a batch of several MiB is written by several
// threads: one core's memcpy and memset speed is what encode_batch's host side waits for at
// 1024 x 4096. Needs no GIL (a thread without it may call this): the views' owners are the
// caller's (StringViews::items), kept alive until it returns.
inline void write_rows_unlocked(const std::vector<StringView>& views, int64_t max_len, uint8_t* data,
                                int32_t* lengths, int64_t first, int64_t last,
                                int64_t bytes_per_thread = int64_t(1) << 19) {
  auto write = [&](int64_t lo, int64_t hi) {  // rows [first + lo, first + hi)
    for (int64_t b = first + lo; b < first + hi; ++b) {
      uint8_t* row = data + b * max_len;
      if (views[b].second) std::memcpy(row, views[b].first, views[b].second);
      std::memset(row + views[b].second, 0, max_len - views[b].second);
      lengths[b] = (int32_t)views[b].second;
    }
  };
  over_ranges(last - first, (last - first) * max_len, bytes_per_thread, write);
}

// Every row (rows = views.size()), called with the GIL held, which it releases meanwhile.
inline void write_rows(const std::vector<StringView>& views, int64_t max_len, uint8_t* data, int32_t* lengths) {
  nanobind::gil_scoped_release unlocked;
  write_rows_unlocked(views, max_len, data, lengths, 0, (int64_t)views.size());
}

}  // namespace bbpe
