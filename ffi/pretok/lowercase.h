// Lowercase (tokenizers whose normalizer has HF's Lowercase), shared by both executors. Its data
// is in the pre-tokenizer operand (pretok/tables.h, PretokView::lower): a class-table-format
// table of a delta index per code point and the deltas. blockbpe_jax/pretok/normalizer.py
// builds them from Rust's char::to_lowercase (the reference's rule: per code point, no
// final-sigma context).
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/utf8.h"
#include "pretok/tables.h"

namespace bbpe {

// A code point whose lowercase is one code point of the same UTF-8 length is rewritten in
// place (every cased letter but 27); the row keeps its byte positions, so specials, the
// pre-tokenizer (whose classes are those of the lowercase) and the tile pipeline's tiles are
// unchanged. Any other changed code point (U+0130 -> "i" U+0307, U+2126 -> U+03C9, ...)
// makes the row reported with kCountNotNormalized, as text not in NFC is.
constexpr uint8_t kLowerSame = 0;    // unchanged
constexpr uint8_t kLowerFlag = 255;  // changes in a way the kernels do not rewrite
// Else the index of the delta (lowercase - code point) in PretokView::lower_deltas.

BBPE_HD uint8_t lower_index(const PretokView& v, uint32_t cp) {
  return cp_table_byte(cp, v.classes(v.lower_table));
}

// The lowercase of the code point cp (len UTF-8 bytes) when it is rewritten, else cp.
BBPE_HD uint32_t lower_cp(const PretokView& v, uint32_t cp) {
  if (cp < 0x80) return cp - 'A' < 26u ? cp + 32 : cp;
  const uint8_t k = lower_index(v, cp);
  return k == kLowerSame || k == kLowerFlag ? cp : (uint32_t)((int32_t)cp + v.lower_deltas[k]);
}

// Whether the code point that starts at byte i (if one does) is one the kernels do not
// rewrite. Special-token bytes are not normalized.
BBPE_HD bool lower_suspect_at(const PretokView& v, const uint8_t* text, int n, const uint8_t* sp, int i) {
  uint32_t cp;
  if (text[i] < 0x80 || (sp && sp[i]) || !utf8_decode(text, n, sp, i, &cp)) return false;
  return lower_index(v, cp) == kLowerFlag;
}

// In place: the code point that starts at byte i (if one does) becomes its lowercase. Only
// the bytes of that code point are written. Run for every i at once (one thread each), the
// reads of other code points' bytes are races without effect: a rewrite keeps every byte's
// kind (ASCII, lead of a given length, continuation), and utf8_decode of a code point looks
// at no more than that of the bytes after its own.
BBPE_HD void lower_in_place_at(const PretokView& v, uint8_t* text, int n, const uint8_t* sp, int i) {
  const uint8_t b = text[i];
  if (sp && sp[i]) return;
  if (b < 0x80) {
    if (b - 'A' < 26u) text[i] = b + 32;
    return;
  }
  uint32_t cp;
  const int len = utf8_decode(text, n, sp, i, &cp);
  if (!len) return;
  const uint32_t low = lower_cp(v, cp);
  if (low == cp) return;
  for (int k = 0; k < len; ++k) text[i + k] = utf8_byte(low, len, k);
}

// Byte i of src[0..n) after lowercasing, reading src only (the tile pipeline writes each
// tile's bytes from the row's input, whatever tile a code point's lead byte is in).
BBPE_HD uint8_t lowered_byte(const PretokView& v, const uint8_t* src, int n, const uint8_t* sp, int i) {
  const uint8_t b = src[i];
  if (sp && sp[i]) return b;
  if (b < 0x80) return b - 'A' < 26u ? b + 32 : b;
  const int lead = (b & 0xC0) == 0x80 ? utf8_lead_of(src, n, sp, i) : i;
  uint32_t cp;
  const int len = lead < 0 ? 0 : utf8_decode(src, n, sp, lead, &cp);
  if (!len) return b;
  const uint32_t low = lower_cp(v, cp);
  return low == cp ? b : utf8_byte(low, len, i - lead);
}

}  // namespace bbpe
