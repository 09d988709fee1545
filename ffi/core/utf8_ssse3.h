// The UTF-8 form of 16-bit code units (a str whose widest character is in U+0100..U+FFFF:
// Cyrillic, CJK, curly quotes and dashes) and of 8-bit ones (Latin-1), eight units a step with
// SSSE3's byte shuffle. core/utf8_units.h's write_utf8 writes a character outside ASCII alone,
// which costs a mispredicted branch a character in text made of them (one thread: Russian
// ~2 ns a unit, Chinese ~1). Here each unit's bytes are computed in its lane (the rule of
// core/utf8.h, in vector form: 0xxxxxxx, 110xxxxx 10xxxxxx, 1110xxxx 10xxxxxx 10xxxxxx) and one
// shuffle from a table indexed by the lanes' lengths packs them. Built for SSSE3 whatever the
// compiler's target (a function attribute), taken where the CPU has it (has_ssse3);
// surrogates never reach it (utf8_bytes refuses a str that holds one, and CPython's encoder
// words the error).
#pragma once

#include <cstdint>

#include "core/utf8_units.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BBPE_UTF8_SSSE3 1
#include <immintrin.h>
#endif

namespace bbpe {

#if defined(BBPE_UTF8_SSSE3)
// The shuffles that pack lanes of UTF-8 bytes: `two` for eight 16-bit lanes of one or two
// bytes (index: bit j set where lane j is ASCII, one byte), `three` for four 32-bit lanes of
// one to three bytes (index: two bits a lane, its length less one). A shuffle's unused
// entries are 0x80 (a zero byte); len: the bytes it keeps.
struct Utf8Shuffles {
  uint8_t two[256][16];
  uint8_t two_len[256];
  uint8_t three[256][16];
  uint8_t three_len[256];
};

constexpr Utf8Shuffles make_utf8_shuffles() {
  Utf8Shuffles s{};
  for (int mask = 0; mask < 256; ++mask) {
    int at = 0;
    for (int j = 0; j < 8; ++j) {
      s.two[mask][at++] = (uint8_t)(2 * j);
      if (!((mask >> j) & 1)) s.two[mask][at++] = (uint8_t)(2 * j + 1);
    }
    s.two_len[mask] = (uint8_t)at;
    while (at < 16) s.two[mask][at++] = 0x80;
    at = 0;
    for (int j = 0; j < 4; ++j) {
      const int len = ((mask >> (2 * j)) & 3) + 1;  // (4: no such lane length, never indexed)
      for (int b = 0; b < len && b < 3; ++b) s.three[mask][at++] = (uint8_t)(4 * j + b);
    }
    s.three_len[mask] = (uint8_t)at;
    while (at < 16) s.three[mask][at++] = 0x80;
  }
  return s;
}
inline constexpr Utf8Shuffles kUtf8Shuffles = make_utf8_shuffles();

// Whether this CPU has SSSE3 (every x86-64 CPU since 2006 but the first ones).
inline bool has_ssse3() {
  static const bool has = __builtin_cpu_supports("ssse3");
  return has;
}

// Four units (zero-extended to 32-bit lanes) -> their UTF-8 at out (16 bytes stored, the
// first `returned` of them theirs).
__attribute__((target("ssse3"))) inline int utf8_of_4(__m128i c, uint8_t* out) {
  const __m128i x3f = _mm_set1_epi32(0x3F), x80 = _mm_set1_epi32(0x80);
  const __m128i low6 = _mm_or_si128(_mm_and_si128(c, x3f), x80);                          // 10xxxxxx, the last byte
  const __m128i mid6 = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(c, 6), x3f), x80);       // 10xxxxxx, the middle one
  const __m128i two = _mm_or_si128(_mm_or_si128(_mm_srli_epi32(c, 6), _mm_set1_epi32(0xC0)), _mm_slli_epi32(low6, 8));
  const __m128i three = _mm_or_si128(_mm_or_si128(_mm_srli_epi32(c, 12), _mm_set1_epi32(0xE0)),
                                     _mm_or_si128(_mm_slli_epi32(mid6, 8), _mm_slli_epi32(low6, 16)));
  const __m128i ascii = _mm_cmplt_epi32(c, x80), below800 = _mm_cmplt_epi32(c, _mm_set1_epi32(0x800));
  const __m128i lanes = _mm_or_si128(_mm_and_si128(ascii, c),
                                     _mm_andnot_si128(ascii, _mm_or_si128(_mm_and_si128(below800, two),
                                                                          _mm_andnot_si128(below800, three))));
  // a lane's length less one: 1 where not ASCII, 1 more where not below U+0800, two bits a lane
  const int not_ascii = ~_mm_movemask_ps(_mm_castsi128_ps(ascii)) & 15;
  const int not_two = ~_mm_movemask_ps(_mm_castsi128_ps(below800)) & 15;
  constexpr uint8_t kSpread[16] = {0, 1, 4, 5, 16, 17, 20, 21, 64, 65, 68, 69, 80, 81, 84, 85};  // bit j -> bit 2j
  const int index = kSpread[not_ascii] + kSpread[not_two];
  const __m128i shuffle = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kUtf8Shuffles.three[index]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(lanes, shuffle));
  return kUtf8Shuffles.three_len[index];
}

// Eight units below U+0800 in 16-bit lanes (ascii: 0xFFFF where a lane is ASCII) -> their
// UTF-8 at out (16 bytes stored); returns its length.
__attribute__((target("ssse3"))) inline int utf8_of_8_below800(__m128i v, __m128i ascii, uint8_t* out) {
  const __m128i lead = _mm_or_si128(_mm_srli_epi16(v, 6), _mm_set1_epi16(0xC0));
  const __m128i last = _mm_or_si128(_mm_and_si128(v, _mm_set1_epi16(0x3F)), _mm_set1_epi16(0x80));
  const __m128i lanes = _mm_or_si128(_mm_and_si128(ascii, v), _mm_andnot_si128(ascii, _mm_or_si128(lead, _mm_slli_epi16(last, 8))));
  const int mask = _mm_movemask_epi8(_mm_packs_epi16(ascii, _mm_setzero_si128())) & 0xFF;
  const __m128i shuffle = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kUtf8Shuffles.two[mask]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(lanes, shuffle));
  return kUtf8Shuffles.two_len[mask];
}

// Eight units at units[0..8) -> their UTF-8 at out; returns its length (at most 24; up to
// 28 bytes past out are stored). Eight ASCII units, eight of one or two bytes and eight of
// three (a CJK run) each take one path of their own; a mix, two groups of four.
__attribute__((target("ssse3"))) inline int utf8_of_8_ucs2(const uint16_t* units, uint8_t* out) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(units)), zero = _mm_setzero_si128();
  const __m128i ascii = _mm_cmpeq_epi16(_mm_and_si128(v, _mm_set1_epi16((short)0xFF80)), zero);
  const __m128i below800 = _mm_cmpeq_epi16(_mm_and_si128(v, _mm_set1_epi16((short)0xF800)), zero);
  const int ascii_mask = _mm_movemask_epi8(ascii), below800_mask = _mm_movemask_epi8(below800);
  if (ascii_mask == 0xFFFF) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(v, zero));
    return 8;
  }
  if (below800_mask == 0xFFFF) return utf8_of_8_below800(v, ascii, out);
  if (below800_mask == 0) {  // three bytes each: lead and middle bytes in one vector, last bytes in another
    const __m128i low6 = _mm_or_si128(_mm_and_si128(v, _mm_set1_epi16(0x3F)), _mm_set1_epi16(0x80));  // 10xxxxxx
    const __m128i lead = _mm_or_si128(_mm_srli_epi16(v, 12), _mm_set1_epi16(0xE0));
    const __m128i mid = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 6), _mm_set1_epi16(0x3F)), _mm_set1_epi16(0x80));
    const __m128i lead_mid = _mm_or_si128(lead, _mm_slli_epi16(mid, 8));  // unit j: bytes 2j, 2j + 1
    const __m128i last = _mm_packus_epi16(low6, zero);                      // unit j: byte j
    // units 0-3: their lead and middle bytes (0..7) beside their last bytes (8..11); units 4-7 alike
    const __m128i a = _mm_unpacklo_epi64(lead_mid, last), b = _mm_unpackhi_epi64(lead_mid, _mm_slli_si128(last, 4));
    const __m128i order = _mm_setr_epi8(0, 1, 8, 2, 3, 9, 4, 5, 10, 6, 7, 11, -128, -128, -128, -128);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(a, order));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 12), _mm_shuffle_epi8(b, order));
    return 24;
  }
  const int first = utf8_of_4(_mm_unpacklo_epi16(v, zero), out);
  return first + utf8_of_4(_mm_unpackhi_epi16(v, zero), out + first);
}

// write_utf8 (core/utf8_units.h) of 16-bit units mostly outside ASCII (Cyrillic, CJK; text
// with a few such characters is faster with write_utf8's 16-unit ASCII steps), eight units a
// step; the last units (fewer than 32: a step stores up to 28 bytes past where it writes,
// which the units left must fill) by write_utf8.
__attribute__((target("ssse3"))) inline uint8_t* write_utf8_ucs2_ssse3(const uint16_t* units, int64_t n, uint8_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 8) out += utf8_of_8_ucs2(units + i, out);
  return write_utf8<true>(units + i, n - i, out);
}

// write_utf8 of 8-bit units (Latin-1: a str whose widest character is in U+0080..U+00FF, as
// French or German text without curly quotes), eight units a step, every step the same (one or
// two bytes each: write_utf8's 16-unit ASCII test fails at every accented letter); the last
// units (fewer than 16: a step stores 16 bytes, which the units left must fill) by write_utf8.
__attribute__((target("ssse3"))) inline uint8_t* write_utf8_latin1_ssse3(const uint8_t* units, int64_t n, uint8_t* out) {
  const __m128i zero = _mm_setzero_si128(), high = _mm_set1_epi16((short)0xFF80);
  int64_t i = 0;
  for (; i + 16 <= n; i += 8) {
    const __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(units + i)), zero);
    out += utf8_of_8_below800(v, _mm_cmpeq_epi16(_mm_and_si128(v, high), zero), out);
  }
  return write_utf8<true>(units + i, n - i, out);
}
#endif

}  // namespace bbpe
