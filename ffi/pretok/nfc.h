// The NFC check of tokenizers whose normalizer is NFC, shared by both executors. Its data is
// the pre-tokenizer operand: marks in the first stage's class table, the combining classes in
// one more class table after the stages' (pretok/tables.h, PretokView::nfc), and the
// composition pairs as their own operand (NfcPairs).
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/utf8.h"
#include "pretok/tables.h"

namespace bbpe {

// NFC (tokenizers whose normalizer is NFC). The primitive does not rewrite text: it checks that
// a string is already in NFC, which almost all real text is, and reports one that is not
// (count kCountNotNormalized) instead of tokenizing it differently from the reference. The
// check is exact (UAX #15): a string is in NFC iff it has no code point whose NFC_Quick_Check
// is No, no two adjacent non-starters out of canonical order, and no code point whose quick
// check is Maybe that would compose with the last starter before it (not blocked: every code
// point in between is a non-starter of a lower combining class).
constexpr uint8_t kMarkMaybe = 0x20;       // NFC_Quick_Check Maybe (second of a composite)
constexpr uint8_t kMarkNonStarter = 0x40;  // Canonical_Combining_Class != 0
constexpr uint8_t kMarkNotNfc = 0x80;      // NFC_Quick_Check No
constexpr int32_t kCountNotNormalized = -2;
// In the combining-class table: a starter whose canonical decomposition ends in a non-starter
// (no code point has class 255). A mark that may compose after one is reported without
// decomposing it (a mark blocked by the decomposition's own leaves the string in NFC, so
// such a string, e.g. U+1E0A U+0301, is reported although it is in NFC: rare; the host
// path, Tokenizer.encode_batch, normalizes and skips the check).
constexpr uint8_t kCccTrail = 255;
BBPE_HD uint8_t nfc_ccc(uint8_t table_byte) { return table_byte == kCccTrail ? 0 : table_byte; }

// The composition pairs (first, second) of the primary composites, sorted: [n][2].
struct NfcPairs {
  const int32_t* pairs;
  int32_t n;
};

// The index of (first, second) in the pairs, or -1.
BBPE_HD int nfc_pair_index(const NfcPairs& np, uint32_t first, uint32_t second) {
  int lo = 0, hi = np.n;  // binary search
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const uint32_t f = (uint32_t)np.pairs[2 * mid], s = (uint32_t)np.pairs[2 * mid + 1];
    if (f < first || (f == first && s < second)) lo = mid + 1;
    else hi = mid;
  }
  return lo < np.n && (uint32_t)np.pairs[2 * lo] == first && (uint32_t)np.pairs[2 * lo + 1] == second ? lo : -1;
}

// Hangul syllables decompose and compose by their arithmetic (Unicode ch. 3.12).
constexpr uint32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28, kHangulSCount = 11172;

// The Hangul syllable that (first, second) compose to (L+V, or LV+T), or 0 where they do not.
BBPE_HD uint32_t hangul_compose(uint32_t first, uint32_t second) {
  if (first - kHangulL < kHangulLCount && second - kHangulV < kHangulVCount)
    return kHangulS + ((first - kHangulL) * kHangulVCount + (second - kHangulV)) * kHangulTCount;
  if (first - kHangulS < kHangulSCount && (first - kHangulS) % kHangulTCount == 0 &&
      second - kHangulT - 1 < kHangulTCount - 1)
    return first + (second - kHangulT);
  return 0;
}

// Whether NFC composes `first` and `second`.
BBPE_HD bool nfc_composes(const NfcPairs& np, uint32_t first, uint32_t second) {
  return hangul_compose(first, second) != 0 || nfc_pair_index(np, first, second) >= 0;
}

// The code point that ends just before byte i (its start in *start), or false where there is
// none in this sub-text (start of text, special byte, or an invalid byte).
BBPE_HD bool nfc_previous(const uint8_t* text, int n, const uint8_t* sp, int i, uint32_t* cp, int* start) {
  for (int d = 1; d <= 4; ++d) {
    const int j = i - d;
    if (j < 0 || (sp && sp[j])) return false;
    if ((text[j] & 0xC0) == 0x80) continue;
    *start = j;
    return utf8_decode(text, n, sp, j, cp) == d;
  }
  return false;
}

// Whether the code point that starts at byte i (if one does) shows that text[0..n) is not in
// NFC. Special-token bytes end a sub-text (each is normalized on its own); invalid bytes stay
// as they are (starters).
BBPE_HD_OUTLINE bool nfc_suspect_at(const PretokView& v, const NfcPairs& np, const uint8_t* text,
                                    int n, const uint8_t* sp, int i) {
  uint32_t cp;
  if (text[i] < 0x80 || (sp && sp[i]) || !utf8_decode(text, n, sp, i, &cp)) return false;
  const ClassTable marks = v.classes(0), ccc_table = v.classes(v.n_stages);
  const uint8_t mark = cp_table_byte(cp, marks);
  if (mark & kMarkNotNfc) return true;
  if (!(mark & (kMarkNonStarter | kMarkMaybe))) return false;
  const uint8_t ccc = nfc_ccc(cp_table_byte(cp, ccc_table));
  uint32_t prev;
  int at = i;
  if (!nfc_previous(text, n, sp, at, &prev, &at)) return false;
  uint8_t prev_byte = prev < 0x80 ? 0 : cp_table_byte(prev, ccc_table);
  if (ccc != 0 && nfc_ccc(prev_byte) > ccc) return true;  // out of canonical order
  if (!(mark & kMarkMaybe)) return false;
  // The last starter before it, unless blocked (a starter or a class >= ccc in between).
  while (nfc_ccc(prev_byte) != 0) {
    if (ccc == 0 || nfc_ccc(prev_byte) >= ccc) return false;
    if (!nfc_previous(text, n, sp, at, &prev, &at)) return false;
    prev_byte = prev < 0x80 ? 0 : cp_table_byte(prev, ccc_table);
  }
  return prev_byte == kCccTrail || nfc_composes(np, prev, cp);
}

}  // namespace bbpe
