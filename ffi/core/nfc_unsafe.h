// Whether a text has a code point NFC may change (one with kNfcPropUnsafe in the NFC
// operand, pretok/nfc_normalize.h: not a normalization boundary), on the host: the packers' look
// for an NFC tokenizer's batch (StringView::nfc_unsafe, core/text_view.h), which reads no counts
// back when no text has one. A text without one is in NFC, and the executors neither rewrite
// nor report it (nfc_may_change_at tests this first). Text of safe code points is passed 32
// units a step: the step's smallest and largest code point from kNfcFirstUnsafe on against
// the span of unsafe code points in each 256-block they cross.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/utf8.h"
#include "pretok/nfc_normalize.h"

namespace bbpe {

// Where in each block of NFC properties (NfcData: 256 code points a block) the code points
// with kNfcPropUnsafe lie, each block's span found the first time it is asked about: a run of
// text whose code points lie in one 256-block and outside that block's span needs no lookup
// per code point (Cyrillic letters, CJK ideographs and General Punctuation lie outside the
// combining marks of their blocks).
class NfcUnsafeSpans {
 public:
  explicit NfcUnsafeSpans(const NfcData& d) : d_(d), span_(d.n_blocks, -1) {}

  const NfcData& data() const { return d_; }

  // Whether a code point in [lo, hi] may have kNfcPropUnsafe: each 256-block's part of the
  // range against that block's span (a range over more than eight blocks: yes).
  bool range_may_hold(uint32_t lo, uint32_t hi) {
    if ((hi >> 8) - (lo >> 8) >= 8) return true;
    for (uint32_t b = lo >> 8; b <= hi >> 8; ++b)
      if (may_hold(std::max(lo, b << 8), std::min(hi, b << 8 | 255))) return true;
    return false;
  }

  // Whether a code point in [lo, hi] (one 256-block: lo >> 8 == hi >> 8) may have kNfcPropUnsafe.
  bool may_hold(uint32_t lo, uint32_t hi) {
    uint32_t blk = lo < 0x110000 ? (uint32_t)d_.stage1[lo >> 8] : 0;
    if (blk >= d_.n_blocks) blk = 0;  // (as nfc_prop reads it)
    int32_t& span = span_[blk];
    if (span < 0) span = find(blk);
    return (lo & 255) <= (uint32_t)(span >> 16) && (hi & 255) >= (uint32_t)(span & 0xFFFF);
  }

 private:
  // The block's first unsafe offset | its last << 16 (first 256, last 0 where it has none:
  // no range meets that).
  int32_t find(uint32_t blk) const {
    int first = 256, last = 0;
    for (int k = 0; k < 256; ++k)
      if (d_.props[blk * 256 + k] & kNfcPropUnsafe) first = std::min(first, k), last = k;
    return first | last << 16;
  }

  const NfcData& d_;
  std::vector<int32_t> span_;  // per block; -1: not looked at yet
};

// Whether units[i] is a code point with kNfcPropUnsafe.
template <class Unit>
inline bool unit_nfc_unsafe(const Unit* units, int64_t i, NfcUnsafeSpans& spans) {
  const uint32_t u = units[i];
  return u >= kNfcFirstUnsafe && spans.may_hold(u, u) && (nfc_prop(spans.data(), u) & kNfcPropUnsafe);
}

// Whether a code unit of units[0..n) is a code point with kNfcPropUnsafe (StringView::nfc_unsafe),
// 32 units a step: none where the step's units from kNfcFirstUnsafe on lie, by their smallest
// and largest, outside the spans of the blocks they cross (Cyrillic letters, CJK ideographs,
// punctuation: one lookup a step), else those units looked up one by one. With SSE2, 16-bit
// units' smallest, largest and which are wide come from a few instructions a step.
template <class Unit>
inline bool units_nfc_unsafe(const Unit* units, int64_t n, NfcUnsafeSpans& spans) {
  constexpr int64_t kStep = 32;
  int64_t at = 0;
#if defined(__SSE2__)
  if constexpr (sizeof(Unit) == 2) {
    // (unsigned 16-bit order as signed: every unit less 0x8000; a unit below kNfcFirstUnsafe
    // counts as the largest for the smallest)
    const __m128i bias = _mm_set1_epi16((short)0x8000), below = _mm_set1_epi16((short)(kNfcFirstUnsafe - 1 - 0x8000));
    const __m128i top = _mm_set1_epi16(0x7FFF);
    const auto lane0 = [](__m128i x) { return (uint32_t)(_mm_cvtsi128_si32(x) & 0xFFFF) ^ 0x8000u; };
    for (; at + kStep <= n; at += kStep) {
      const __m128i* v = reinterpret_cast<const __m128i*>(units + at);
      __m128i hi = _mm_set1_epi16((short)0x8000), lo = top;
      uint64_t wide_bits = 0;  // two bits a unit
      for (int k = 0; k < 4; ++k) {
        const __m128i x = _mm_xor_si128(_mm_loadu_si128(v + k), bias), wide = _mm_cmpgt_epi16(x, below);
        wide_bits |= (uint64_t)(uint32_t)_mm_movemask_epi8(wide) << (16 * k);
        hi = _mm_max_epi16(hi, x);
        lo = _mm_min_epi16(lo, _mm_or_si128(_mm_and_si128(wide, x), _mm_andnot_si128(wide, top)));
      }
      if (!wide_bits) continue;
      hi = _mm_max_epi16(hi, _mm_shuffle_epi32(hi, 0x4E)), lo = _mm_min_epi16(lo, _mm_shuffle_epi32(lo, 0x4E));
      hi = _mm_max_epi16(hi, _mm_shuffle_epi32(hi, 0xB1)), lo = _mm_min_epi16(lo, _mm_shuffle_epi32(lo, 0xB1));
      hi = _mm_max_epi16(hi, _mm_shufflelo_epi16(hi, 0xB1)), lo = _mm_min_epi16(lo, _mm_shufflelo_epi16(lo, 0xB1));
      if (!spans.range_may_hold(lane0(lo), lane0(hi))) continue;
      for (uint64_t bits = wide_bits; bits; bits &= bits - 1) {
        const int bit = __builtin_ctzll(bits);
        bits &= bits - 1;  // (a unit's second bit)
        if (unit_nfc_unsafe(units, at + bit / 2, spans)) return true;
      }
    }
  }
#endif
  for (; at < n; at += kStep) {
    const int64_t end = std::min(n, at + kStep);
    uint32_t hi = 0, lo = 0xFFFFFFFFu;
    for (int64_t i = at; i < end; ++i)
      if (units[i] >= kNfcFirstUnsafe) hi = std::max(hi, (uint32_t)units[i]), lo = std::min(lo, (uint32_t)units[i]);
    if (hi < kNfcFirstUnsafe || !spans.range_may_hold(lo, hi)) continue;
    for (int64_t i = at; i < end; ++i)
      if (unit_nfc_unsafe(units, i, spans)) return true;
  }
  return false;
}

// Whether UTF-8 text[0..bytes) has a code point with kNfcPropUnsafe, read as the executors read
// the packed bytes (an invalid byte is no code point): only bytes from kNfcFirstUnsafeLead on
// can start one (SSE2: 32 bytes a step).
inline bool utf8_nfc_unsafe(const uint8_t* text, int64_t bytes, NfcUnsafeSpans& spans) {
  for (int64_t at = 0; at < bytes; at += 32) {
    const int64_t end = std::min(bytes, at + 32);
    uint64_t leads = 0;  // bit i: byte at + i is kNfcFirstUnsafeLead or more
#if defined(__SSE2__)
    if (end - at == 32) {  // (such a byte's maximum with the lead is itself)
      const __m128i lead = _mm_set1_epi8((char)kNfcFirstUnsafeLead);
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text + at));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text + at + 16));
      leads = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(a, lead), a)) |
              (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(b, lead), b)) << 16;
    } else
#endif
      for (int64_t i = at; i < end; ++i) leads |= (uint64_t)(text[i] >= kNfcFirstUnsafeLead) << (i - at);
    for (; leads; leads &= leads - 1) {
      const int64_t i = at + __builtin_ctzll(leads);
      uint32_t cp;
      if (utf8_decode(text + i, (int)std::min<int64_t>(4, bytes - i), nullptr, 0, &cp) && spans.may_hold(cp, cp) &&
          (nfc_prop(spans.data(), cp) & kNfcPropUnsafe))
        return true;
    }
  }
  return false;
}

}  // namespace bbpe
