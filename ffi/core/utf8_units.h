// A str's UTF-8 form from its code units, on the host: the packers' (core/pack_strings.h)
// transcoding, apart from Python so that tests/cpp/utf8_units_sanitized.cc runs it under the
// sanitizers (core/text_view.h picks the writer for a text; core/utf8_ssse3.h writes 16-bit
// and Latin-1 units mostly outside ASCII faster where the CPU has SSSE3).
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/utf8.h"

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

// One character's UTF-8 form (core/utf8.h's rule, its length a constant here) to out; returns
// its end.
template <int kLen>
inline uint8_t* put_utf8_bytes(uint32_t c, uint8_t* out) {
  for (int k = 0; k < kLen; ++k) out[k] = utf8_byte(c, kLen, k);
  return out + kLen;
}
inline uint8_t* put_utf8(uint32_t c, uint8_t* out) {
  switch (utf8_length(c)) {
    case 1: return put_utf8_bytes<1>(c, out);
    case 2: return put_utf8_bytes<2>(c, out);
    case 3: return put_utf8_bytes<3>(c, out);
    default: return put_utf8_bytes<4>(c, out);
  }
}

// Writes the units' UTF-8 form to out (utf8_bytes of them) and returns its end: ASCII 16
// units at a time, any other character alone. kRuns (texts mostly outside ASCII where
// core/utf8_ssse3.h does not serve: no SSSE3, 32-bit units, its writers' last units): a run of
// such characters written one after another until the next ASCII one rather than back through
// the 16-unit test at each, which costs a mispredicted branch a character there (one thread,
// 1M units: Chinese 5.8 -> 1.0 ns a unit, Russian 4.9 -> 2.1). Text with a few such characters
// keeps the plain loop (English with dashes: no gain, and the run loop measured slower in
// some builds).
template <bool kRuns = false, class Unit>
inline uint8_t* write_utf8(const Unit* units, int64_t n, uint8_t* out) {
  int64_t i = 0;
  while (i < n) {
    if (i + 16 <= n) {  // (16 units make at least 16 bytes: the store stays in the string's)
      const int k = ascii_prefix16(units + i, out);
      out += k, i += k;
      if (k == 16) continue;
    }
    out = put_utf8(units[i++], out);  // (the next one that is not ASCII, or one of the last 15)
    if (kRuns)
      while (i < n && units[i] >= 0x80) out = put_utf8(units[i++], out);
  }
  return out;
}

}  // namespace bbpe
