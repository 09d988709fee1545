// NFC normalization of a row (UTF-8 in, NFC UTF-8 out), shared by both executors: the CPU
// module's batch entry and the CUDA pre-pass write the same bytes. The check of pretok/nfc.h
// says whether a row may change; this rewrites it (UAX #15: full canonical decomposition,
// canonical ordering, canonical composition), with the data of the reference's Unicode
// version (blockbpe_jax/pretok/nfc_data.py writes the operand from unicode_nfc9.npz).
//
// Invalid UTF-8 (the input is raw bytes): every byte not covered by a valid sequence (the
// reading of core/utf8.h) stays as it is and acts as a starter that neither decomposes nor
// composes, so marks on either side of it are normalized separately: what Python's NFC does to
// the text decoded with surrogateescape (each such byte one lone surrogate, a starter).
// Special-token bytes (sp, optional) are boundaries the same way and are copied as they are.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/utf8.h"
#include "pretok/nfc.h"
#include "pretok/tables.h"

namespace bbpe {

// The operand, int32 (blockbpe_jax/pretok/nfc_data.py mirrors this layout):
//   [0] kNfcDataMagic  [1] n_blocks  [2] n_flat  [3] n_pairs
//   stage1[kClassStage1Len]   the block of each 256 code points (as pretok/tables.h's tables)
//   props[n_blocks * 256]     per code point: Canonical_Combining_Class (bits 0-7), the bits
//                             below (8-11), and from bit 12 the offset + 1 in flat of its full
//                             canonical decomposition (0: none)
//   flat[n_flat]              decompositions, each its length then its code points
//   pairs[n_pairs * 2]        the composition pairs, sorted (pretok/nfc.h's NfcPairs)
//   composites[n_pairs]       the composite of each pair
//   (one int of padding where the count would be even: passed as the encode call's nfc_pairs
//   operand, an odd count tells it from the pairs of the check, which come in twos; the host
//   cannot read the magic in device memory)
constexpr int32_t kNfcDataMagic = 0x4E464331;  // "NFC1"
constexpr int kNfcDataHeader = 4;
// Not a normalization boundary: NFC may change the text around this code point (it or its
// decomposition's first code point is a non-starter or may compose with a starter before it,
// or NFC_Quick_Check is No). Text up to a code point without this bit normalizes on its own.
constexpr int32_t kNfcPropUnsafe = 1 << 8;
constexpr int32_t kNfcPropQcNo = 1 << 9;     // NFC_Quick_Check No: the code point alone changes
constexpr int32_t kNfcPropQcMaybe = 1 << 10; // NFC_Quick_Check Maybe: may compose with a starter
constexpr int32_t kNfcPropTrail = 1 << 11;   // a starter whose decomposition ends in a non-starter
constexpr int kNfcPropDecompShift = 12;
constexpr int kNfcMaxDecomp = 4;  // the longest full canonical decomposition (Unicode 9.0)

struct NfcData {
  const int32_t* stage1;
  const int32_t* props;
  uint32_t n_blocks;
  const int32_t* flat;
  int32_t n_flat;
  NfcPairs pairs;
  const int32_t* composites;
};

// The operand in an encode call (ints 0: none; the executors then check NFC, pretok/nfc.h).
struct NfcOperand {
  const int32_t* data = nullptr;
  int64_t ints = 0;
};

// Ints of an operand with these counts (before the padding).
BBPE_HD int64_t nfc_data_ints(int64_t n_blocks, int64_t n_flat, int64_t n_pairs) {
  return kNfcDataHeader + kClassStage1Len + n_blocks * 256 + n_flat + 3 * n_pairs;
}

// The view of an operand of n_ints int32 at base (host or device pointer); false when its
// header does not fit its size. Lookups clamp every index they read, so no content can make
// them read out of bounds.
BBPE_HD bool nfc_data_view(const int32_t* base, int64_t n_ints, NfcData* d) {
  if (n_ints < kNfcDataHeader || base[0] != kNfcDataMagic) return false;
  const int64_t n_blocks = base[1], n_flat = base[2], n_pairs = base[3];
  if (n_blocks < 1 || n_flat < 1 || n_pairs < 1) return false;
  const int64_t ints = nfc_data_ints(n_blocks, n_flat, n_pairs);
  if (n_ints != ints + (ints % 2 == 0 ? 1 : 0)) return false;
  d->stage1 = base + kNfcDataHeader;
  d->props = d->stage1 + kClassStage1Len;
  d->n_blocks = (uint32_t)n_blocks;
  d->flat = d->props + n_blocks * 256;
  d->n_flat = (int32_t)n_flat;
  d->pairs = NfcPairs{d->flat + n_flat, (int32_t)n_pairs};
  d->composites = d->pairs.pairs + 2 * n_pairs;
  return true;
}

BBPE_HD int32_t nfc_prop(const NfcData& d, uint32_t cp) {
  if (cp >= 0x110000) return 0;
  uint32_t blk = (uint32_t)d.stage1[cp >> 8];
  if (blk >= d.n_blocks) blk = 0;
  return d.props[blk * 256 + (cp & 255)];
}
BBPE_HD uint8_t nfc_prop_ccc(int32_t prop) { return (uint8_t)(prop & 255); }

// The composite of (first, second), or -1 where NFC does not compose them.
BBPE_HD int64_t nfc_compose(const NfcData& d, uint32_t first, uint32_t second) {
  const uint32_t syllable = hangul_compose(first, second);
  if (syllable) return syllable;
  const int k = nfc_pair_index(d.pairs, first, second);
  return k < 0 ? -1 : d.composites[k];
}

// Writes the full canonical decomposition of cp to out (room for kNfcMaxDecomp); its length
// (Hangul syllables by their arithmetic, pretok/nfc.h).
BBPE_HD int nfc_decompose(const NfcData& d, uint32_t cp, uint32_t* out) {
  if (cp - kHangulS < kHangulSCount) {
    const uint32_t s = cp - kHangulS, t = s % kHangulTCount;
    out[0] = kHangulL + s / (kHangulVCount * kHangulTCount);
    out[1] = kHangulV + (s % (kHangulVCount * kHangulTCount)) / kHangulTCount;
    if (t == 0) return 2;
    out[2] = kHangulT + t;
    return 3;
  }
  const int64_t at = (int64_t)((uint32_t)nfc_prop(d, cp) >> kNfcPropDecompShift) - 1;
  if (at < 0 || at >= d.n_flat) { out[0] = cp; return 1; }
  int len = d.flat[at];
  if (len < 1 || len > kNfcMaxDecomp || at + len >= d.n_flat) { out[0] = cp; return 1; }
  for (int k = 0; k < len; ++k) out[k] = (uint32_t)d.flat[at + 1 + k];
  return len;
}

// NFC of the code points buf[0..n) in place (a segment: no code point after the first has a
// boundary before it); returns the new count. Canonical ordering is a stable insertion sort
// of each run of non-starters by class (runs are short in real text); composition is UAX #15's
// (a character composes with the last starter unless blocked by one of a class >= its own, or
// by a starter, in between).
BBPE_HD_OUTLINE int nfc_reorder_compose(const NfcData& d, uint32_t* buf, int n) {
  for (int i = 1; i < n; ++i) {
    const uint32_t c = buf[i];
    const uint8_t cc = nfc_prop_ccc(nfc_prop(d, c));
    if (cc == 0) continue;
    int j = i;
    while (j > 0) {
      const uint8_t prev = nfc_prop_ccc(nfc_prop(d, buf[j - 1]));
      if (prev <= cc) break;  // a starter (0) or an equal or lower class stops the move
      buf[j] = buf[j - 1];
      --j;
    }
    buf[j] = c;
  }
  if (n == 0) return 0;
  int starter = 0, out = 1;
  int last_cc = nfc_prop_ccc(nfc_prop(d, buf[0])) == 0 ? 0 : 256;  // no starter yet: blocked
  for (int i = 1; i < n; ++i) {
    const uint32_t c = buf[i];
    const int cc = nfc_prop_ccc(nfc_prop(d, c));
    const int64_t composite = last_cc < 256 ? nfc_compose(d, buf[starter], c) : -1;
    if (composite >= 0 && (last_cc < cc || last_cc == 0)) {
      buf[starter] = (uint32_t)composite;
      continue;
    }
    if (cc == 0) starter = out;
    last_cc = cc;
    buf[out++] = c;
  }
  return out;
}

// Writes the UTF-8 of cp at out[w..); false (nothing written) where it does not fit in cap.
// out null: only counts (the CUDA pre-pass sizes each part of a row before writing it).
BBPE_HD bool nfc_put_utf8(uint8_t* out, int cap, int* w, uint32_t cp) {
  const int len = utf8_length(cp);
  if (*w + len > cap) return false;
  if (out)
    for (int k = 0; k < len; ++k) out[*w + k] = utf8_byte(cp, len, k);
  *w += len;
  return true;
}

// Copies text[from..to) to out[w..) (out null: only counts); false where it does not fit.
BBPE_HD bool nfc_put_bytes(uint8_t* out, int cap, int* w, const uint8_t* text, int from, int to) {
  if (*w + (to - from) > cap) return false;
  if (out)
    for (int k = from; k < to; ++k) out[*w + k - from] = text[k];
  *w += to - from;
  return true;
}

// Result of nfc_normalize_row beside a length.
constexpr int kNfcScratchTooSmall = -1;  // a segment decomposes to more than the scratch holds
constexpr int kNfcOutputTooSmall = -2;   // out has less room than the result (never at 3n)

// The executors' scratch for a segment, in code points: a row with a segment that decomposes
// to more (a starter with hundreds of combining marks after it) is reported, on the CPU as on
// the GPU (where a row whose segment outgrows a thread's smaller scratch is rewritten with
// this much in shared memory), so both give the same counts.
constexpr int kNfcSegmentScratch = 256 + kNfcMaxDecomp;

// Writes the segment text[seg..end) (valid UTF-8, no special byte) normalized at out[*w..)
// (out null: only counts), through scratch. 0 or one of the negative results above.
BBPE_HD_OUTLINE int nfc_write_segment(const NfcData& d, const uint8_t* text, int n, const uint8_t* sp, int seg,
                                      int end, uint8_t* out, int cap, int* w, uint32_t* scratch, int scratch_cap) {
  int m = 0;
  for (int k = seg; k < end;) {
    uint32_t cp;
    const int len = utf8_decode(text, n, sp, k, &cp);
    if (len == 0) return kNfcOutputTooSmall;  // not reached: the caller's segments are valid
    if (m + kNfcMaxDecomp > scratch_cap) return kNfcScratchTooSmall;
    m += nfc_decompose(d, cp, scratch + m);
    k += len;
  }
  m = nfc_reorder_compose(d, scratch, m);
  for (int k = 0; k < m; ++k)
    if (!nfc_put_utf8(out, cap, w, scratch[k])) return kNfcOutputTooSmall;
  return 0;
}

// Whether the code point that starts at byte i (if one does) may show that text[0..n) is not in
// NFC: the quick check of pretok/nfc.h (UAX #15: Quick_Check No; two adjacent non-starters out
// of canonical order; a Maybe that composes with the last starter before it, unblocked) on this
// operand's data. It errs only towards yes (a Maybe after a starter whose decomposition ends in
// a mark), so a row without such a position is in NFC and needs no rewrite.
BBPE_HD_OUTLINE bool nfc_may_change_at(const NfcData& d, const uint8_t* text, int n, const uint8_t* sp, int i) {
  uint32_t cp;
  if (text[i] < 0x80 || (sp && sp[i]) || !utf8_decode(text, n, sp, i, &cp)) return false;
  const int32_t prop = nfc_prop(d, cp);
  if (!(prop & kNfcPropUnsafe)) return false;
  if (prop & kNfcPropQcNo) return true;
  const uint8_t ccc = nfc_prop_ccc(prop);
  uint32_t prev;
  int at = i;
  if (!nfc_previous(text, n, sp, at, &prev, &at)) return false;  // nothing before it to act on
  int32_t prev_prop = nfc_prop(d, prev);
  if (ccc != 0 && nfc_prop_ccc(prev_prop) > ccc) return true;  // out of canonical order
  if (!(prop & kNfcPropQcMaybe)) return false;
  while (nfc_prop_ccc(prev_prop) != 0) {  // back to the last starter, unless blocked
    if (ccc == 0 || nfc_prop_ccc(prev_prop) >= ccc) return false;
    if (!nfc_previous(text, n, sp, at, &prev, &at)) return false;
    prev_prop = nfc_prop(d, prev);
  }
  return (prev_prop & kNfcPropTrail) || nfc_compose(d, prev, cp) >= 0;
}

// The lead byte of U+0300, the first code point with kNfcPropUnsafe: a byte below it never
// starts one (ASCII, continuation bytes, and the leads of U+0080..U+02FF, which are starters
// that neither decompose to a non-starter nor compose backwards in any Unicode version; a
// test checks the operand), so the checks skip such bytes, and text made of them, at once.
constexpr uint8_t kNfcFirstUnsafeLead = 0xCC;

// Whether any code point of text[0..n) may change under NFC (nfc_may_change_at): a row for
// which this is false is in NFC and is used as it is.
BBPE_HD bool nfc_row_may_change(const NfcData& d, const uint8_t* text, int n, const uint8_t* sp) {
  for (int i = 0; i < n; ++i)
    if (text[i] >= kNfcFirstUnsafeLead && nfc_may_change_at(d, text, n, sp, i)) return true;
  return false;
}

// The length of the code point at byte i if it has kNfcPropUnsafe (no boundary before it),
// else 0 (ASCII, a special or invalid byte, or a code point NFC text splits before).
BBPE_HD int nfc_unsafe_at(const NfcData& d, const uint8_t* text, int n, const uint8_t* sp, int i) {
  if (text[i] < 0x80 || (sp && sp[i])) return 0;
  uint32_t cp;
  const int len = utf8_decode(text, n, sp, i, &cp);
  return len && (nfc_prop(d, cp) & kNfcPropUnsafe) ? len : 0;
}

// NFC of text[0..n) to out (cap bytes; null: nothing written, the length counted); returns
// the output's length, or one of the negative results above. `scratch` (scratch_cap code
// points) holds one segment's decomposition: a starter and the code points after it up to the
// next boundary; 2 * n + kNfcMaxDecomp is always enough, since every code point decomposes to
// at most 1.5 times as many code points as its UTF-8 bytes (two bytes to at most three code
// points, three to at most four).
//
// Output bound: cap = 3 * n always suffices. NFC of a code point alone is at most 3 times its
// UTF-8 length (UAX #15's table of maximum expansion factors; U+1D160, 4 bytes, becomes 12),
// canonical ordering keeps the length, and composition never lengthens the text (a composite
// is never longer in UTF-8 than its pair: tests/pretok/test_nfc_normalize.py checks every
// pair and every code point). The bound is checked all the same, so a wrong operand can
// never write past cap.
//
// Fast path: text is copied as it is up to the segment of a code point with kNfcPropUnsafe
// (from the last boundary before it to the first after it), which alone is normalized; a row
// without such a code point is one copy.
BBPE_HD_OUTLINE int nfc_normalize_row(const NfcData& d, const uint8_t* text, int n, const uint8_t* sp,
                                      uint8_t* out, int cap, uint32_t* scratch, int scratch_cap) {
  int w = 0;
  int copied = 0;  // text[0..copied) is written
  int seg = 0;     // where a segment starting before byte i would start: the last boundary
  int i = 0;
  while (i < n) {
    const uint8_t b = text[i];
    if (b < 0x80 && !(sp && sp[i])) {  // ASCII: a boundary
      seg = i++;
      continue;
    }
    uint32_t cp;
    const int len = (sp && sp[i]) ? 0 : utf8_decode(text, n, sp, i, &cp);
    if (len == 0) {  // an invalid or special byte: copied; a segment may start after it
      seg = ++i;
      continue;
    }
    if (!(nfc_prop(d, cp) & kNfcPropUnsafe)) {
      seg = i;
      i += len;
      continue;
    }
    int end = i + len;  // the segment runs to the next boundary
    for (int more; end < n && (more = nfc_unsafe_at(d, text, n, sp, end)) != 0;) end += more;
    if (!nfc_put_bytes(out, cap, &w, text, copied, seg)) return kNfcOutputTooSmall;
    const int r = nfc_write_segment(d, text, n, sp, seg, end, out, cap, &w, scratch, scratch_cap);
    if (r < 0) return r;
    copied = seg = i = end;
  }
  if (!nfc_put_bytes(out, cap, &w, text, copied, n)) return kNfcOutputTooSmall;
  return w;
}

// A row in parts that normalize on their own, for rewriting it on many threads (the CUDA
// pre-pass; the CPU module's nfc_normalize with `part` bytes, which the tests hold to the
// whole row's NFC). Part k starts at the first boundary in [k * part, (k + 1) * part): an
// ASCII byte, or a lead byte of a code point without kNfcPropUnsafe or of no valid sequence
// (nfc_normalize_row's boundaries; continuation bytes are skipped, as a valid sequence before
// them may hold them); part 0 at 0. A part without a boundary in its range is empty (-1), and
// the part before it runs on to the next start. Since no segment crosses a boundary and no
// code point straddles one, the parts' normalized bytes, joined, are the row's.
BBPE_HD int nfc_part_start(const NfcData& d, const uint8_t* text, int n, int part, int k) {
  if (k == 0) return 0;
  const int64_t from = (int64_t)k * part;
  const int to = (int)(from + part < n ? from + part : n);
  for (int i = (int)from; i < to; ++i)
    if (text[i] < 0x80 || (text[i] >= 0xC0 && nfc_unsafe_at(d, text, n, nullptr, i) == 0)) return i;
  return -1;
}

// Where part k (starting at start >= 0) ends: the next part's start, or n.
BBPE_HD int nfc_part_end(const NfcData& d, const uint8_t* text, int n, int part, int k) {
  for (int64_t j = k + 1; j * part < n; ++j) {
    const int start = nfc_part_start(d, text, n, part, (int)j);
    if (start >= 0) return start;
  }
  return n;
}

}  // namespace bbpe
