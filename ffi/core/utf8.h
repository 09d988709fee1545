// UTF-8 as both executors read it: where a valid code point starts, which lead byte a
// continuation byte belongs to, and a code point's bytes. Shared by the pre-tokenizer (a code point's class), the NFC
// check and SentencePiece-style symbols (char_symbols.h); the input is raw bytes, so invalid
// sequences are expected and have one fixed reading (see pretok/tables.h, byte_class).
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"

namespace bbpe {

// UTF-8. Length (1..4) of the valid, complete, shortest-form, non-surrogate sequence that
// starts at byte i of text[0..n) and contains no special byte; 0 if there is none. Looks at
// bytes i..i+3 only.
BBPE_HD int utf8_decode(const uint8_t* text, int n, const uint8_t* sp, int i, uint32_t* cp) {
  const uint32_t b0 = text[i];
  if (b0 < 0x80) { *cp = b0; return 1; }
  if (b0 < 0xC2 || b0 > 0xF4) return 0;  // continuation byte, overlong lead, or > U+10FFFF
  const int len = b0 < 0xE0 ? 2 : (b0 < 0xF0 ? 3 : 4);
  if (i + len > n) return 0;
  uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 == 0xE0) lo = 0xA0;
  else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  else if (b0 == 0xF0) lo = 0x90;
  else if (b0 == 0xF4) hi = 0x8F;
  uint32_t v = b0 & (len == 2 ? 0x1F : (len == 3 ? 0x0F : 0x07));
  for (int k = 1; k < len; ++k) {
    const uint32_t b = text[i + k];
    if (k == 1 ? (b < lo || b > hi) : ((b & 0xC0) != 0x80)) return 0;
    if (sp && sp[i + k]) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return len;
}

// The lead byte of the valid sequence that continuation byte i belongs to, or -1: the nearest
// non-continuation byte before it (at most 3 back, no special byte in between), if the valid
// sequence that starts there reaches byte i. A byte neither starting nor inside a valid
// sequence is invalid UTF-8.
BBPE_HD int utf8_lead_of(const uint8_t* text, int n, const uint8_t* sp, int i) {
  int lead = -1;
  if ((text[i] & 0xC0) == 0x80) {
    for (int d = 1; d <= 3; ++d) {
      const int j = i - d;
      if (j < 0 || (sp && sp[j])) break;
      if ((text[j] & 0xC0) != 0x80) {
        uint32_t cpj;
        if (utf8_decode(text, n, sp, j, &cpj) > d) lead = j;
        break;
      }
    }
  }
  return lead;
}

// The UTF-8 byte k (0-based) of cp, which is len bytes long.
BBPE_HD uint8_t utf8_byte(uint32_t cp, int len, int k) {
  if (len == 1) return (uint8_t)cp;
  const int shift = 6 * (len - 1 - k);
  if (k > 0) return (uint8_t)(0x80 | ((cp >> shift) & 0x3F));
  const uint8_t lead = len == 2 ? 0xC0 : (len == 3 ? 0xE0 : 0xF0);
  return (uint8_t)(lead | (cp >> shift));
}

// Bytes of cp's UTF-8 form.
BBPE_HD int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : (cp < 0x800 ? 2 : (cp < 0x10000 ? 3 : 4)); }

}  // namespace bbpe
