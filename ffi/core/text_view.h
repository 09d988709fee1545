// One item's text for the packers (core/pack_strings.h reads them from Python's objects): UTF-8
// bytes, or a str's code units written as UTF-8 by the writer that suits them
// (core/utf8_units.h, core/utf8_ssse3.h, core/utf8_avx512.h), and the padded row it makes,
// plainly or with non-temporal stores (core/stream_stores.h). Apart from Python, like the
// writers, so that tests/cpp/utf8_units_sanitized.cc runs it under the sanitizers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/stream_stores.h"
#include "core/utf8_avx512.h"
#include "core/utf8_ssse3.h"
#include "core/utf8_units.h"

namespace bbpe {

// Its UTF-8 bytes where they exist already (bytes, an ASCII str, a str whose UTF-8 form
// CPython made before), else the str's code units (kind: their width), borrowed from the item
// either way.
struct StringView {
  const void* data = nullptr;
  int64_t units = 0;  // (kind 0: bytes)
  int64_t bytes = 0;  // UTF-8 bytes; -1: a surrogate (kind > 0, once measured)
  int kind = 0;       // 0: UTF-8; 1, 2, 4: code units of that many bytes

  // Its UTF-8 bytes to out[0..bytes).
  void write(uint8_t* out) const {
    if (kind == 0) {
      if (bytes) std::memcpy(out, data, (size_t)bytes);
      return;
    }
    write_units(0, units, out);
  }
  // The UTF-8 of code units [from, from + n) to out; returns its end (kind > 0, measured).
  uint8_t* write_units(int64_t from, int64_t n, uint8_t* out) const {
    // (The choices by the text's extra bytes a unit, from the writers' speeds on one thread:
    // docs/performance.md, "Strings as they come".)
    const int64_t extra = bytes - units;
#if defined(BBPE_UTF8_SSSE3)
    if (kind == 1 && 64 * extra >= units && has_ssse3())  // (an accented letter in 64 or more)
      return write_utf8_latin1_ssse3(static_cast<const uint8_t*>(data) + from, n, out);
    if (kind == 2 && 2 * extra >= units && has_ssse3())  // (mostly outside ASCII: Cyrillic, CJK)
      return write_utf8_ucs2_ssse3(static_cast<const uint16_t*>(data) + from, n, out);
#endif
#if defined(BBPE_UTF8_AVX512)
    if (kind == 2 && has_avx512_utf8())  // (mostly ASCII: English with curly quotes or dashes)
      return write_utf8_ucs2_avx512(static_cast<const uint16_t*>(data) + from, n, out);
#endif
    return 2 * extra >= units ? write_kind<true>(from, n, out) : write_kind<false>(from, n, out);
  }
  template <bool kRuns>
  uint8_t* write_kind(int64_t from, int64_t n, uint8_t* out) const {
    if (kind == 1) return write_utf8<kRuns>(static_cast<const uint8_t*>(data) + from, n, out);
    if (kind == 2) return write_utf8<kRuns>(static_cast<const uint16_t*>(data) + from, n, out);
    return write_utf8<kRuns>(static_cast<const uint32_t*>(data) + from, n, out);
  }
  void measure() {
    if (kind == 1) bytes = utf8_bytes(static_cast<const uint8_t*>(data), units);
#if defined(BBPE_UTF8_AVX512)
    else if (kind == 2 && has_avx512_utf8()) bytes = utf8_bytes_ucs2_avx512(static_cast<const uint16_t*>(data), units);
#endif
    else if (kind == 2) bytes = utf8_bytes(static_cast<const uint16_t*>(data), units);
    else if (kind == 4) bytes = utf8_bytes(static_cast<const uint32_t*>(data), units);
  }

  // A padded row, row[0..width) (width >= bytes): the UTF-8 bytes, then zeros. streaming:
  // with non-temporal stores (core/stream_stores.h; the caller fences), a str's code units
  // transcoded a piece at a time into this thread's buffer first (the stores need whole
  // 16-byte blocks, which a transcoded character's bytes seldom are).
  void write_row(uint8_t* row, int64_t width, bool streaming) const {
    if (!streaming) {
      write(row);
      std::memset(row + bytes, 0, (size_t)(width - bytes));
      return;
    }
    StreamWriter out(row, row + width);
    if (kind == 0) {
      out.put(static_cast<const uint8_t*>(data), bytes);
    } else {
      constexpr int64_t kPieceUnits = 4096;  // (at most 16 KiB of UTF-8)
      thread_local std::vector<uint8_t> piece;
      piece.resize((size_t)(4 * kPieceUnits));
      for (int64_t u = 0; u < units; u += kPieceUnits) {
        const uint8_t* end = write_units(u, std::min(kPieceUnits, units - u), piece.data());
        out.put(piece.data(), end - piece.data());
      }
    }
    out.zeros();
  }
};

}  // namespace bbpe
