// The UTF-8 form of 16-bit code units that are mostly ASCII (English with curly quotes and
// dashes: a str whose widest character is in U+0100..U+FFFF), counted and written with AVX-512:
// 32 units a step. core/utf8_units.h's writer takes 16 ASCII units a step and each other
// character alone, after a branch that text with a character outside ASCII every few dozen
// mispredicts; here a step of 32 ASCII units is one narrowing store, and any other step
// computes every unit's bytes in its 32-bit lane (core/utf8.h's rule in vector form) and packs
// them with one byte compress, no branch a character. Built for AVX-512 (F, BW, VBMI2) and BMI2
// whatever the compiler's target (function attributes), taken where the CPU has them
// (has_avx512_utf8); surrogates never reach the writer (the count refuses a str holding one, as
// utf8_bytes does).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "core/utf8_units.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BBPE_UTF8_AVX512 1
#include <immintrin.h>
#endif

namespace bbpe {

#if defined(BBPE_UTF8_AVX512)
#define BBPE_AVX512_UTF8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi2,popcnt")))

// Whether this CPU has what these functions use (Ice Lake and later Xeons, Zen 4 and later;
// BLOCKBPE_UTF8_AVX512=0 turns them off, for A/B runs).
inline bool has_avx512_utf8() {
  static const bool has = [] {
    const char* env = std::getenv("BLOCKBPE_UTF8_AVX512");
    if (env && std::atoi(env) == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2");
  }();
  return has;
}

// utf8_bytes of 16-bit units, 32 a step: how many are at least U+0080 and U+0800, and whether
// any is a surrogate (-1 then). The last step's lanes past n are masked off.
BBPE_AVX512_UTF8_TARGET inline int64_t utf8_bytes_ucs2_avx512(const uint16_t* units, int64_t n) {
  const __m512i c80 = _mm512_set1_epi16(0x80), c800 = _mm512_set1_epi16(0x800);
  const __m512i top5 = _mm512_set1_epi16((short)0xF800), d800 = _mm512_set1_epi16((short)0xD800);
  int64_t extra = 0;
  uint32_t surrogates = 0;
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 in = n - i >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (n - i)) - 1);
    const __m512i v = _mm512_maskz_loadu_epi16(in, units + i);  // (lanes past n: zero, so ASCII)
    extra += __builtin_popcount(_mm512_cmpge_epu16_mask(v, c80)) + __builtin_popcount(_mm512_cmpge_epu16_mask(v, c800));
    surrogates |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(v, top5), d800);
  }
  return surrogates ? -1 : n + extra;
}

// Sixteen units (no surrogate) -> their UTF-8 at out, exactly its bytes stored (a masked
// store); returns how many.
BBPE_AVX512_UTF8_TARGET inline int utf8_of_16_avx512(__m256i units, uint8_t* out) {
  const __m512i c = _mm512_cvtepu16_epi32(units);
  const __mmask16 two_or_more = _mm512_cmpge_epu32_mask(c, _mm512_set1_epi32(0x80));
  const __mmask16 three = _mm512_cmpge_epu32_mask(c, _mm512_set1_epi32(0x800));
  const __m512i x3f = _mm512_set1_epi32(0x3F), x80 = _mm512_set1_epi32(0x80);
  const __m512i last = _mm512_or_si512(_mm512_and_si512(c, x3f), x80);                          // 10xxxxxx
  const __m512i middle = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 6), x3f), x80);  // 10xxxxxx
  const __m512i as_two = _mm512_or_si512(_mm512_or_si512(_mm512_srli_epi32(c, 6), _mm512_set1_epi32(0xC0)),
                                         _mm512_slli_epi32(last, 8));
  const __m512i as_three = _mm512_or_si512(_mm512_or_si512(_mm512_srli_epi32(c, 12), _mm512_set1_epi32(0xE0)),
                                           _mm512_or_si512(_mm512_slli_epi32(middle, 8), _mm512_slli_epi32(last, 16)));
  const __m512i lanes = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(c, two_or_more, as_two), three, as_three);
  // a lane's bytes: its first always, its second where it has two or more, its third where three
  const uint64_t keep = 0x1111111111111111ull | _pdep_u64(two_or_more, 0x2222222222222222ull) |
                        _pdep_u64(three, 0x4444444444444444ull);
  const int len = (int)__builtin_popcountll(keep);  // (16 to 48)
  _mm512_mask_storeu_epi8(out, (1ull << len) - 1, _mm512_maskz_compress_epi8(keep, lanes));
  return len;
}

// write_utf8 (core/utf8_units.h) of 16-bit units (no surrogate), 32 a step: 32 ASCII units
// narrowed and stored at once, any other step as two groups of 16; the last units (fewer than
// 32) by write_utf8. Every store stays within the units' UTF-8 form.
BBPE_AVX512_UTF8_TARGET inline uint8_t* write_utf8_ucs2_avx512(const uint16_t* units, int64_t n, uint8_t* out) {
  const __m512i c80 = _mm512_set1_epi16(0x80);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(units + i);
    if (_mm512_cmpge_epu16_mask(v, c80) == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(v));
      out += 32;
      continue;
    }
    out += utf8_of_16_avx512(_mm512_castsi512_si256(v), out);
    out += utf8_of_16_avx512(_mm512_extracti64x4_epi64(v, 1), out);
  }
  return write_utf8(units + i, n - i, out);
}
#endif

}  // namespace bbpe
