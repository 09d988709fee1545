// The pre-tokenizer operand at run time: the step tables of each stage (PretokTables), the
// code point -> class tables, the view both executors take of the operand (PretokView,
// checked against its size on the host) and the class of a byte. blockbpe_jax/pretok/tables.py
// writes the operand and mirrors these layouts; the automata that run over the classes are in
// pretok/automata.h.
//
// Per byte i a class c_i: 0 = a UTF-8 continuation byte (an identity step); 1 = a byte of a
// special token; the rest from the class table.
//
// Invalid UTF-8 (input is raw bytes): a code point starts at every byte that begins a valid,
// complete, shortest-form UTF-8 sequence (no surrogates, <= U+10FFFF, no special byte inside),
// and at every byte that is not covered by such a sequence; each such uncovered byte is ONE
// code point of the table's invalid_class (that of a private-use character).
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/utf8.h"

namespace bbpe {

constexpr int kMaxClasses = 32;       // classes per stage (the compiler merges equal ones)
constexpr int kMaxPretokStages = 4;
constexpr uint8_t kClassNone = 0;     // UTF-8 continuation byte inside a valid sequence
constexpr uint8_t kClassSpecial = 1;  // byte of a special token

// The tables of one stage (built by blockbpe_jax/pretok/tables.py, which mirrors this layout):
//   bwd[c]           map over T: t -> G(t, c)
//   fwd[c * 16 + t]  map over S: s -> F(s, c, t) (next state)
//   flag[c * 16 + t] bit s = piece-start flag of F(s, c, t)
//   ascii[b]         class of an ASCII byte
// Entries of states the automata do not have are identity (never reached from the inits).
struct PretokTables {
  uint64_t fwd[kMaxClasses * 16];
  uint64_t bwd[kMaxClasses];
  uint16_t flag[kMaxClasses * 16];
  uint8_t ascii[128];
  uint8_t bwd_init, fwd_init;
  uint8_t invalid_class;      // class of a byte that is not part of valid UTF-8
  uint8_t inert[4];           // the inert classes' bit mask, little-endian (inert_class_mask)
  uint8_t pad[1];
  uint64_t bwd_live, fwd_live;  // 0xF in the nibble of every state the automaton has
};
static_assert(sizeof(PretokTables) == 5528, "blockbpe_jax/pretok/tables.py mirrors this layout");

// A set of classes (bit c: class c; 0 where the stage has none) such that a sub-text whose
// bytes are all of those classes gets no piece start from the stage but its first
// (blockbpe_jax/pretok/automata.py's inert_classes proves it on the automata): where every
// byte of a text is, the stage's starts are the earlier stages' and the text's first byte,
// and a kernel may skip the stage's automata (cuda/piece_kernel.cuh, stage_starts).
BBPE_HD uint32_t inert_class_mask(const PretokTables& tab) {
  return tab.inert[0] | (uint32_t)tab.inert[1] << 8 | (uint32_t)tab.inert[2] << 16 | (uint32_t)tab.inert[3] << 24;
}

// Code point -> class of one stage, two-stage: stage2[stage1[cp >> 8] * 256 + (cp & 255)].
constexpr int kClassStage1Len = 0x110000 >> 8;
struct ClassTable {
  const uint16_t* stage1;  // [kClassStage1Len]
  const uint8_t* stage2;   // [n_blocks * 256]
  uint32_t n_blocks;
};

// The pre-tokenizer operand: stage k's PretokTables at tables + k, its class table at
// stage1 + k * kClassStage1Len and stage2 + k * n_blocks * 256 (every table has n_blocks
// blocks). A tokenizer whose normalizer is NFC has one more table after the stages' (nfc):
// code point -> Canonical_Combining_Class, in the same format. One whose normalizer has
// Lowercase has int32 lower_deltas[kLowerDeltas] right after the PretokTables and one more
// table, the last: code point -> delta index (pretok/lowercase.h). Its layout is checked
// against the operand's size on the host (pretok_view), and the kernels clamp every index
// they read from it, so no table content can make them read out of bounds.
constexpr int kLowerDeltas = 256;
struct PretokView {
  const PretokTables* tables;
  const uint16_t* stage1;
  const uint8_t* stage2;
  uint32_t n_blocks;
  int32_t n_stages;  // 0: no pre-tokenizer (bytes mode)
  bool nfc;          // the text must be in NFC (nfc_suspect_at; the pairs are an operand)
  bool lower;        // the text is lowercased here (pretok/lowercase.h)
  int32_t lower_table;           // with lower: the index of the delta-index table
  const int32_t* lower_deltas;   // with lower: [kLowerDeltas]
  BBPE_HD ClassTable classes(int k) const {
    return ClassTable{stage1 + (int64_t)k * kClassStage1Len, stage2 + (int64_t)k * n_blocks * 256, n_blocks};
  }
};
// Bytes of an operand for n_tables class tables (stages, + 1 with nfc, + 1 with lowercase) of
// n_blocks blocks, lowercase's deltas included.
BBPE_HD int64_t pretok_operand_bytes(int n_stages, int n_tables, int64_t n_blocks, bool lower) {
  return n_stages * (int64_t)sizeof(PretokTables) + (lower ? kLowerDeltas * 4 : 0) +
         n_tables * (kClassStage1Len * 2 + n_blocks * 256);
}
// The `normalizer` attribute, bits: the operand has NFC tables, it has Lowercase tables, the
// caller normalized the text already (no check, no rewrite).
enum NormalizerAttr : int { kNormNfc = 1, kNormLower = 2, kNormTrusted = 4, kNormAll = 7 };
// The class tables of an operand, from `base` (after the stages' records) to base + bytes:
// Lowercase's deltas (has_lower), then n_tables stage1 arrays, then their blocks. Sets v's
// lower_deltas, stage1, stage2 and n_blocks; false when the size does not fit.
BBPE_HD bool class_tables_view(const uint8_t* base, int64_t bytes, int n_tables, bool has_lower, PretokView* v) {
  const int64_t fixed = pretok_operand_bytes(0, n_tables, 0, has_lower);
  const int64_t per_block = (int64_t)n_tables * 256;
  if (bytes < fixed + per_block || (bytes - fixed) % per_block != 0) return false;
  v->lower_deltas = has_lower ? reinterpret_cast<const int32_t*>(base) : nullptr;
  v->stage1 = reinterpret_cast<const uint16_t*>(base + (has_lower ? kLowerDeltas * 4 : 0));
  v->stage2 = reinterpret_cast<const uint8_t*>(v->stage1) + n_tables * kClassStage1Len * 2;
  v->n_blocks = (uint32_t)((bytes - fixed) / per_block);
  return true;
}
// The view of an operand of `bytes` bytes at `base` (host or device pointer); false when its
// size does not fit the layout.
BBPE_HD bool pretok_view(const uint8_t* base, int64_t bytes, int n_stages, int norm, PretokView* v) {
  v->n_stages = n_stages;
  const bool run = !(norm & kNormTrusted) && n_stages > 0;
  v->nfc = run && (norm & kNormNfc);
  v->lower = run && (norm & kNormLower);
  v->lower_deltas = nullptr;
  if (n_stages == 0) { v->tables = nullptr; v->stage1 = nullptr; v->stage2 = nullptr; v->n_blocks = 0; return true; }
  if (n_stages < 0 || n_stages > kMaxPretokStages || norm < 0 || norm > kNormAll) return false;
  const bool has_lower = norm & kNormLower;
  const int n_tables = n_stages + ((norm & kNormNfc) ? 1 : 0) + (has_lower ? 1 : 0);
  v->lower_table = n_tables - 1;
  const int64_t head = n_stages * (int64_t)sizeof(PretokTables);
  v->tables = reinterpret_cast<const PretokTables*>(base);
  return bytes >= head && class_tables_view(base + head, bytes - head, n_tables, has_lower, v);
}

// The table's byte for a code point: the class in the low bits; in the first stage's table of
// an NFC tokenizer also the marks below.
BBPE_HD uint8_t cp_table_byte(uint32_t cp, const ClassTable& ct) {
  uint32_t blk = ct.stage1[cp >> 8];
  if (blk >= ct.n_blocks) blk = 0;
  return ct.stage2[blk * 256 + (cp & 255)];
}
BBPE_HD uint8_t cp_class(uint32_t cp, const ClassTable& ct) {
  return cp_table_byte(cp, ct) & (kMaxClasses - 1);
}

// Class of byte i (reads bytes i-3..i+3 of the segment).
BBPE_HD_OUTLINE uint8_t byte_class_slow(const PretokTables& tab, const uint8_t* text, int n,
                                        const uint8_t* sp, int i, const ClassTable& ct) {
  uint32_t cp;
  if (utf8_decode(text, n, sp, i, &cp)) return cp_class(cp, ct);
  if (utf8_lead_of(text, n, sp, i) >= 0) return kClassNone;
  return tab.invalid_class & (kMaxClasses - 1);  // invalid byte: one code point
}
BBPE_HD uint8_t byte_class(const PretokTables& tab, const uint8_t* text, int n, const uint8_t* sp,
                           int i, const ClassTable& ct) {
  if (sp && sp[i]) return kClassSpecial;
  const uint8_t b = text[i];
  if (b < 0x80) return tab.ascii[b] & (kMaxClasses - 1);
  return byte_class_slow(tab, text, n, sp, i, ct);
}

// byte_class of kCnt bytes from `base` of text[0..n) (those from base + valid on: kClassNone),
// decoding each code point once. A continuation byte is inside a valid sequence exactly when the
// nearest non-continuation byte before it (at most 3 back, no special byte in between: what
// utf8_lead_of asks) starts a valid sequence that reaches it, so the bytes a sequence covers
// are known from its lead alone; the chunk's leading continuation bytes from the sequence
// before `base`. Two passes: every position (ASCII and special bytes classified, the others
// marked in bit masks), then only the lead bytes, one set bit at a time. (A pass of positions
// that decoded where it met a lead kept a warp in the decode at every position where any of its
// lanes had one: with a few percent of non-ASCII bytes, most positions.) The lead classes
// wait in two packed words until the last pass writes `out` by static indices (kCnt is a
// compile-time count, so a kernel keeps `out` and the packs in registers).
template <int kCnt, class C>
BBPE_HD void chunk_classes(const PretokTables& tab, const uint8_t* text, int n, const uint8_t* sp, int base,
                           int valid, const ClassTable& ct, C* out) {
  static_assert(kCnt >= 1 && kCnt <= 16, "a byte of two 64-bit packs per lead byte");
  const uint8_t invalid = tab.invalid_class & (kMaxClasses - 1);
  uint32_t leads = 0, conts = 0;  // bit k: byte base + k is a non-ASCII lead / continuation byte
  BBPE_UNROLL
  for (int k = 0; k < kCnt; ++k) {
    uint8_t c = kClassNone;
    if (k < valid) {
      const int i = base + k;
      const uint8_t b = text[i];
      if (sp && sp[i]) c = kClassSpecial;
      else if (b < 0x80) c = tab.ascii[b] & (kMaxClasses - 1);
      else if ((b & 0xC0) != 0x80) leads |= 1u << k;
      else conts |= 1u << k;
    }
    out[k] = (C)c;
  }
  if ((leads | conts) == 0) return;
  uint32_t covered = 0;  // continuation bytes inside a valid sequence
  if (conts & 1u) {  // (a leading continuation byte: the sequence before `base` that holds it)
    const int lead = utf8_lead_of(text, n, sp, base);
    uint32_t cp;
    if (lead >= 0) {
      const int reach = lead + utf8_decode(text, n, sp, lead, &cp) - base;  // 1..3
      covered = (1u << reach) - 1;
    }
  }
  uint64_t pack_lo = 0, pack_hi = 0;  // byte k of pack_lo, k - 8 of pack_hi: the class of lead byte k
  for (uint32_t rest = leads; rest; rest &= rest - 1) {
    const int k = ctz32(rest);
    uint32_t cp;
    const int len = utf8_decode(text, n, sp, base + k, &cp);
    const uint64_t c = len ? cp_class(cp, ct) : invalid;
    if (len > 1) covered |= (uint32_t)(((1ull << (len - 1)) - 1) << (k + 1));  // (bits past the chunk: unread)
    if (k < 8) pack_lo |= c << (8 * k);
    else pack_hi |= c << (8 * (k - 8));
  }
  BBPE_UNROLL
  for (int k = 0; k < kCnt; ++k) {
    if ((leads >> k) & 1) out[k] = (C)(((k < 8 ? pack_lo : pack_hi) >> (8 * (k % 8))) & 0xFF);
    else if (((conts & ~covered) >> k) & 1) out[k] = (C)invalid;
  }
}

// byte_class of the bytes [from, to) of text[0..n) (default: all), chunk_classes in chunks of
// 16 (`from` may fall inside a code point).
inline void byte_classes(const PretokTables& tab, const uint8_t* text, int n, const uint8_t* sp,
                         const ClassTable& ct, uint8_t* out, int from = 0, int to = -1) {
  if (to < 0) to = n;
  for (int i = from; i < to; i += 16) {
    uint8_t chunk[16];
    chunk_classes<16>(tab, text, n, sp, i, to - i, ct, chunk);
    for (int k = 0; k < 16 && i + k < to; ++k) out[i + k] = chunk[k];
  }
}

}  // namespace bbpe
