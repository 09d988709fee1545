// list[str | bytes], or documents of one flat buffer, -> zero-padded rows + byte lengths,
// shared by the CPU module's `pack_strings` / `pack_flat` and the CUDA module's pinned-host
// staging (one definition of the packing rule).
#pragma once

#include <Python.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/host_threads.h"
#include "core/utf8.h"
#include "nanobind/nanobind.h"

namespace bbpe {

// A str's UTF-8 form from its code units (1, 2 or 4 bytes each: CPython's compact forms,
// whose width is that of the str's widest character). CPython makes that form only when asked,
// with the GIL held, on one thread, and keeps it beside the str; here it is counted and
// written by the packing threads with the GIL released. utf8_bytes: the form's length, or -1
// where a unit is a surrogate (which has no UTF-8 form: CPython's encoder refuses it, and so
// does string_views, with that encoder's error); write_utf8: the form itself.
#if defined(__SSE2__)
// utf8_bytes of 16-bit units (a str with a character of U+0100..U+FFFF: curly quotes, dashes,
// most scripts), 8 at a time: per lane, how many are below U+0080 and U+0800, and whether any
// is a surrogate.
inline int64_t utf8_bytes_ucs2(const uint16_t* units, int64_t n) {
  const __m128i m80 = _mm_set1_epi16((short)0xFF80), m800 = _mm_set1_epi16((short)0xF800);
  const __m128i d800 = _mm_set1_epi16((short)0xD800), zero = _mm_setzero_si128();
  int64_t below80 = 0, below800 = 0, i = 0;
  __m128i bad = zero;
  while (i + 8 <= n) {
    __m128i n80 = zero, n800 = zero;  // (lane counts of at most 4096 / 8: 16 bits hold them)
    for (const int64_t stop = std::min(n, i + 4096); i + 8 <= stop; i += 8) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(units + i));
      const __m128i top = _mm_and_si128(v, m800);
      n80 = _mm_sub_epi16(n80, _mm_cmpeq_epi16(_mm_and_si128(v, m80), zero));
      n800 = _mm_sub_epi16(n800, _mm_cmpeq_epi16(top, zero));
      bad = _mm_or_si128(bad, _mm_cmpeq_epi16(top, d800));
    }
    alignas(16) uint16_t a[8], b[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(a), n80);
    _mm_store_si128(reinterpret_cast<__m128i*>(b), n800);
    for (int k = 0; k < 8; ++k) below80 += a[k], below800 += b[k];
  }
  bool surrogate = _mm_movemask_epi8(bad) != 0;
  for (; i < n; ++i) {
    below80 += units[i] < 0x80, below800 += units[i] < 0x800;
    surrogate |= (units[i] & 0xF800) == 0xD800;
  }
  return surrogate ? -1 : n + (n - below80) + (n - below800);
}
#endif

template <class Unit>
inline int64_t utf8_bytes(const Unit* units, int64_t n) {
#if defined(__SSE2__)
  if constexpr (sizeof(Unit) == 2) return utf8_bytes_ucs2(units, n);
#endif
  int64_t extra = 0;
  bool surrogates = false;
  // (in blocks with narrow sums and no branch: the compiler vectorizes the inner loop)
  for (int64_t at = 0; at < n; at += 4096) {
    const int m = (int)std::min<int64_t>(4096, n - at);
    const Unit* u = units + at;
    // (sums that fit the units' own width: m * 3 < 65536 more bytes in a block)
    std::conditional_t<sizeof(Unit) <= 2, uint16_t, uint32_t> more = 0;
    Unit bad = 0;
    for (int i = 0; i < m; ++i) {
      more += u[i] >= 0x80;
      if constexpr (sizeof(Unit) > 1) {
        more += u[i] >= 0x800;
        bad |= (Unit)(u[i] - 0xD800u) < 0x800u;
      }
      if constexpr (sizeof(Unit) > 2) more += u[i] >= 0x10000;
    }
    extra += more, surrogates |= bad != 0;
  }
  return surrogates ? -1 : n + extra;
}

// Writes units[0..16) to out[0..16) as bytes and returns how many of them, from the first,
// are ASCII (the bytes after those are anything: the caller writes them again). With SSE2
// (every x86-64) a few instructions for 16 characters of the mostly-ASCII text most strs
// hold, several times fewer than a character at a time; elsewhere a loop.
template <class Unit>
inline int ascii_prefix16(const Unit* units, uint8_t* out) {
#if defined(__SSE2__)
  const __m128i* in = reinterpret_cast<const __m128i*>(units);
  const __m128i zero = _mm_setzero_si128();
  __m128i bytes, ascii;  // the units as bytes; 0xFF where a unit is ASCII
  if constexpr (sizeof(Unit) == 1) {
    bytes = _mm_loadu_si128(in);
    ascii = _mm_cmpgt_epi8(bytes, _mm_set1_epi8(-1));  // (signed: ASCII bytes are the non-negative ones)
  } else if constexpr (sizeof(Unit) == 2) {
    const __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1), high = _mm_set1_epi16((short)0xFF80);
    bytes = _mm_packus_epi16(a, b);
    ascii = _mm_packs_epi16(_mm_cmpeq_epi16(_mm_and_si128(a, high), zero), _mm_cmpeq_epi16(_mm_and_si128(b, high), zero));
  } else {
    const __m128i high = _mm_set1_epi32((int)0xFFFFFF80u);
    __m128i v[4], eq[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm_loadu_si128(in + k);
      eq[k] = _mm_cmpeq_epi32(_mm_and_si128(v[k], high), zero);
    }
    bytes = _mm_packus_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3]));
    ascii = _mm_packs_epi16(_mm_packs_epi32(eq[0], eq[1]), _mm_packs_epi32(eq[2], eq[3]));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), bytes);
  const unsigned mask = (unsigned)_mm_movemask_epi8(ascii);
  return mask == 0xFFFFu ? 16 : __builtin_ctz(~mask);
#else
  int k = 0;
  while (k < 16 && units[k] < 0x80) out[k] = (uint8_t)units[k], ++k;
  return k;
#endif
}

template <class Unit>
inline void write_utf8(const Unit* units, int64_t n, uint8_t* out) {
  int64_t i = 0;
  while (i < n) {
    if (i + 16 <= n) {  // (16 units make at least 16 bytes: the store stays in the string's)
      const int k = ascii_prefix16(units + i, out);
      out += k, i += k;
      if (k == 16) continue;
    }
    const uint32_t c = units[i++];  // (the next one that is not ASCII, or one of the last 15)
    const int len = utf8_length(c);
    for (int k = 0; k < len; ++k) *out++ = utf8_byte(c, len, k);
  }
}

// One item's text: its UTF-8 bytes where they exist already (bytes, an ASCII str, a str whose
// UTF-8 form CPython made before), else the str's code units (kind: their width), borrowed
// from the item either way.
struct StringView {
  const void* data = nullptr;
  int64_t units = 0;  // (kind 0: bytes)
  int64_t bytes = 0;  // UTF-8 bytes; -1: a surrogate (kind > 0, once measured)
  int kind = 0;       // 0: UTF-8; 1, 2, 4: code units of that many bytes
  // Its UTF-8 bytes to out[0..bytes).
  void write(uint8_t* out) const {
    switch (kind) {
      case 0: if (bytes) std::memcpy(out, data, (size_t)bytes); break;
      case 1: write_utf8(static_cast<const uint8_t*>(data), units, out); break;
      case 2: write_utf8(static_cast<const uint16_t*>(data), units, out); break;
      default: write_utf8(static_cast<const uint32_t*>(data), units, out); break;
    }
  }
  void measure() {
    if (kind == 1) bytes = utf8_bytes(static_cast<const uint8_t*>(data), units);
    else if (kind == 2) bytes = utf8_bytes(static_cast<const uint16_t*>(data), units);
    else if (kind == 4) bytes = utf8_bytes(static_cast<const uint32_t*>(data), units);
  }
};

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
// caller's (StringViews::items), kept alive until it returns.
inline void write_rows_unlocked(const std::vector<StringView>& views, int64_t max_len, uint8_t* data,
                                int32_t* lengths, int64_t first, int64_t last,
                                int64_t bytes_per_thread = int64_t(1) << 19) {
  auto write = [&](int64_t lo, int64_t hi) {  // rows [first + lo, first + hi)
    for (int64_t b = first + lo; b < first + hi; ++b) {
      uint8_t* row = data + b * max_len;
      views[b].write(row);
      std::memset(row + views[b].bytes, 0, max_len - views[b].bytes);
      lengths[b] = (int32_t)views[b].bytes;
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
