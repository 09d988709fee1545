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
#include "core/text_view.h"
#include "nanobind/nanobind.h"

namespace bbpe {

// max_len < 0: the longest view rounded up to a power of two, at least 16.
inline void default_width(const std::vector<StringView>& views, int64_t& max_len) {
  if (max_len >= 0) return;
  int64_t longest = 0;
  for (auto& v : views) longest = std::max(longest, v.bytes);
  max_len = 16;
  while (max_len < longest) max_len *= 2;
}

// The items' texts (no copy), borrowed from `items`: a private list of them (a new reference
// to each), so they stay valid while it lives, whatever other threads do to the caller's
// sequence once the GIL is released.
struct StringViews {
  nanobind::list items;
  std::vector<StringView> views;
};

// A str's view: its UTF-8 form where it has one (ASCII: its own bytes), else its code units.
inline StringView str_view(PyObject* o) {
  const int64_t n = PyUnicode_GET_LENGTH(o);
  if (PyUnicode_IS_ASCII(o)) return {PyUnicode_DATA(o), n, n, 0};
  if (PyUnicode_IS_COMPACT(o)) {
    const auto* compact = reinterpret_cast<const PyCompactUnicodeObject*>(o);
    if (compact->utf8) return {compact->utf8, compact->utf8_length, compact->utf8_length, 0};
    return {PyUnicode_DATA(o), n, -1, (int)PyUnicode_KIND(o)};
  }
  Py_ssize_t size = 0;  // (a legacy str: CPython's UTF-8 form)
  const char* p = PyUnicode_AsUTF8AndSize(o, &size);
  if (!p) throw nanobind::python_error();
  return {p, size, size, 0};
}

constexpr int64_t kMeasureUnitsPerThread = int64_t(1) << 18;  // (a batch of a few MiB: eight threads)

// Reads every item's text and the row width: `max_len`, or when max_len < 0 the longest
// string rounded up to a power of two, at least 16. Raises, for the first item that has one,
// TypeError for an item that is neither str nor bytes, UnicodeEncodeError (CPython's own) for
// a str with a surrogate, ValueError for a string longer than max_len. The UTF-8 forms of
// non-ASCII strs are measured on the host threads, the GIL released.
inline StringViews string_views(nanobind::handle texts, int64_t& max_len) {
  PyObject* list = PySequence_List(texts.ptr());
  if (!list) throw nanobind::python_error();
  StringViews out{nanobind::steal<nanobind::list>(list), {}};
  const nanobind::list& items = out.items;
  const size_t batch = nanobind::len(items);
  std::vector<StringView>& views = out.views;
  views.resize(batch);
  size_t read = 0;  // the items before the first that is neither str nor bytes
  int64_t units = 0;  // code units to measure
  for (; read < batch; ++read) {
    PyObject* o = items[read].ptr();
    if (PyUnicode_Check(o)) {
      views[read] = str_view(o);
      if (views[read].kind) units += views[read].units;
    } else if (PyBytes_Check(o)) {
      const int64_t n = PyBytes_GET_SIZE(o);
      views[read] = {PyBytes_AS_STRING(o), n, n, 0};
    } else {
      break;
    }
  }
  if (units) {
    nanobind::gil_scoped_release unlocked;
    over_ranges((int64_t)read, units, kMeasureUnitsPerThread, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) views[b].measure();
    });
  }
  for (size_t b = 0; b < read; ++b) {
    if (views[b].bytes < 0) {  // (CPython's encoder names the surrogate and its position)
      Py_ssize_t size = 0;
      const char* p = PyUnicode_AsUTF8AndSize(items[b].ptr(), &size);
      if (!p) throw nanobind::python_error();
      views[b] = {p, size, size, 0};
    }
    if (max_len >= 0 && views[b].bytes > max_len)
      throw nanobind::value_error(("pack_strings: string " + std::to_string(b) + " has " +
                                   std::to_string(views[b].bytes) + " bytes, more than max_len=" +
                                   std::to_string(max_len)).c_str());
  }
  if (read < batch)
    throw nanobind::type_error(("pack_strings: item " + std::to_string(read) + " is neither str nor bytes").c_str());
  default_width(views, max_len);
  return out;
}

// Rows [first, last) of data[rows, max_len]: row b gets string b and zeros after it, lengths[b]
// its byte count. Rows are independent, so a batch of several MiB is written by several
// threads: one core's memcpy and memset speed is what encode_batch's host side waits for at
// 1024 x 4096. Needs no GIL (a thread without it may call this): the views' owners are the
// caller's (StringViews::items), kept alive until it returns. streaming: rows a device reads
// next, written with non-temporal stores (core/stream_stores.h), each thread's fenced.
inline void write_rows_unlocked(const std::vector<StringView>& views, int64_t max_len, uint8_t* data,
                                int32_t* lengths, int64_t first, int64_t last,
                                int64_t bytes_per_thread = int64_t(1) << 19, bool streaming = false) {
  auto write = [&](int64_t lo, int64_t hi) {  // rows [first + lo, first + hi)
    for (int64_t b = first + lo; b < first + hi; ++b) {
      views[b].write_row(data + b * max_len, max_len, streaming);
      lengths[b] = (int32_t)views[b].bytes;
    }
    if (streaming) stream_fence();
  };
  over_ranges(last - first, (last - first) * max_len, bytes_per_thread, write);
}

// Every row (rows = views.size()), called with the GIL held, which it releases meanwhile.
inline void write_rows(const std::vector<StringView>& views, int64_t max_len, uint8_t* data, int32_t* lengths) {
  nanobind::gil_scoped_release unlocked;
  write_rows_unlocked(views, max_len, data, lengths, 0, (int64_t)views.size());
}

}  // namespace bbpe
