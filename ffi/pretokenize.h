// Exact, regex-equivalent pre-tokenizer: piece boundaries of tiktoken / HF tokenizers, as two
// finite automata over code point classes that run sequentially on the CPU and in parallel
// (prefix scans of transition maps) inside one CUDA thread block per string. The automata are
// data: blockbpe_jax/pretok compiles them from the tokenizer's own regex into PretokTables
// (one per stage of a pre-tokenizer pipeline) plus a code point -> class table, and both
// executors run whatever they are given. All logic is BBPE_HD and shared.
//
// The automata (blockbpe_jax/pretok/compiler.py derives them). Per byte i a class c_i
// (byte_class: 0 = a UTF-8 continuation byte, an identity step; 1 = a byte of a special token;
// the rest from the class table):
//   Backward: T[n] = init, T[i] = G(T[i+1], c_i). T[i] summarises text[i..end of sub-text):
//     which parts of the regex can still succeed from there (the lookahead the forward
//     automaton needs).
//   Forward: S[0] = init, (S[i+1], flag_i) = F(S[i], c_i, T[i+1]); flag_i = a piece starts at
//     byte i.
// Both have at most 16 states, so the transition map of a chunk over all states is a uint64 of
// 16 nibbles; composing maps is associative and is what pretokenize_chunked and the CUDA block
// scans compute.
//
// Stages: a pre-tokenizer pipeline (HF Sequence of Splits) runs its stages in order; each
// stage treats the piece starts of the stages before it as sub-text boundaries (both automata
// restart there), and its own flags include them.
//
// Special tokens: bytes with is_special[i] != 0 belong to special tokens. They end the sub-text
// before them (so `$` and `(?!\S)` see an end there) and a new sub-text starts after them, as
// tiktoken and HF pre-tokenize each slice between specials independently. Their flag is
// don't-care (written as 0); the first byte after them always gets a 1.
//
// Invalid UTF-8 (input is raw bytes): a code point starts at every byte that begins a valid,
// complete, shortest-form UTF-8 sequence (no surrogates, <= U+10FFFF, no special byte inside),
// and at every byte that is not covered by such a sequence; each such uncovered byte is ONE
// code point of the table's invalid_class (that of a private-use character).
//
// API (namespace bbpe):
//   host:   pretokenize_sequential(view, text, n, is_special, piece_start)
//           pretokenize_chunked(view, text, n, is_special, chunk_bytes, piece_start[, lookback])
//   device: block_pretokenize<BLOCK_THREADS, ITEMS_PER_THREAD>(...) (BlockPretokenizer)
//   shared: PretokView (the tables of all stages), byte_class, utf8_decode, map_then /
//           map_apply, chunk_bwd_map, chunk_bwd_replay, chunk_fwd_map, chunk_fwd_replay,
//           edge_state.
#pragma once

#include <stdint.h>

#include "bbpe_hd.h"

#include <vector>
#ifdef __CUDACC__
#include <cub/block/block_scan.cuh>
#endif

namespace bbpe {

constexpr int kMaxClasses = 32;       // classes per stage (the compiler merges equal ones)
constexpr int kMaxPretokStages = 4;
constexpr uint8_t kClassNone = 0;     // UTF-8 continuation byte inside a valid sequence
constexpr uint8_t kClassSpecial = 1;  // byte of a special token
// A key (class * 16 + T[i+1]) with this bit: a piece of an earlier stage starts at the byte,
// so both automata restart there (see the Stages paragraph above).
constexpr uint16_t kKeyBoundary = kMaxClasses * 16;

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
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
  uint8_t pad[5];
  uint64_t bwd_live, fwd_live;  // 0xF in the nibble of every state the automaton has
};
static_assert(sizeof(PretokTables) == 5528, "blockbpe_jax/pretok/tables.py mirrors this layout");

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
// code point -> Canonical_Combining_Class, in the same format. Its layout is checked against
// the operand's size on the host (pretok_view), and the kernels clamp every index they read
// from it, so no table content can make them read out of bounds.
struct PretokView {
  const PretokTables* tables;
  const uint16_t* stage1;
  const uint8_t* stage2;
  uint32_t n_blocks;
  int32_t n_stages;  // 0: no pre-tokenizer (bytes mode)
  bool nfc;          // the text must be in NFC (nfc_suspect_at; the pairs are an operand)
  BBPE_HD ClassTable classes(int k) const {
    return ClassTable{stage1 + (int64_t)k * kClassStage1Len, stage2 + (int64_t)k * n_blocks * 256, n_blocks};
  }
};
// Bytes of an operand for n_tables class tables (stages, + 1 with nfc) of n_blocks blocks.
BBPE_HD int64_t pretok_operand_bytes(int n_stages, int n_tables, int64_t n_blocks) {
  return n_stages * (int64_t)sizeof(PretokTables) + n_tables * (kClassStage1Len * 2 + n_blocks * 256);
}
// The `nfc` attribute: the operand has no NFC tables, or has them and the text is checked, or
// has them and the caller normalized the text already (no check).
enum NfcAttr : int { kNfcNone = 0, kNfcCheck = 1, kNfcTrusted = 2 };
// The view of an operand of `bytes` bytes at `base` (host or device pointer); false when its
// size does not fit the layout.
BBPE_HD bool pretok_view(const uint8_t* base, int64_t bytes, int n_stages, int nfc, PretokView* v) {
  v->n_stages = n_stages;
  v->nfc = nfc == kNfcCheck && n_stages > 0;
  if (n_stages == 0) { v->tables = nullptr; v->stage1 = nullptr; v->stage2 = nullptr; v->n_blocks = 0; return true; }
  if (n_stages < 0 || n_stages > kMaxPretokStages || nfc < kNfcNone || nfc > kNfcTrusted) return false;
  const int n_tables = n_stages + (nfc != kNfcNone ? 1 : 0);
  const int64_t fixed = pretok_operand_bytes(n_stages, n_tables, 0);
  const int64_t per_block = (int64_t)n_tables * 256;
  if (bytes < fixed + per_block || (bytes - fixed) % per_block != 0) return false;
  v->tables = reinterpret_cast<const PretokTables*>(base);
  v->stage1 = reinterpret_cast<const uint16_t*>(base + n_stages * sizeof(PretokTables));
  v->stage2 = base + n_stages * sizeof(PretokTables) + n_tables * kClassStage1Len * 2;
  v->n_blocks = (uint32_t)((bytes - fixed) / per_block);
  return true;
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
  const uint8_t b = text[i];
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

// ---------------------------------------------------------------------------------------------
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

// Whether NFC composes `first` and `second` (Hangul syllables by their arithmetic).
BBPE_HD bool nfc_composes(const NfcPairs& np, uint32_t first, uint32_t second) {
  if (first >= 0x1100 && first <= 0x1112 && second >= 0x1161 && second <= 0x1175) return true;  // L+V
  if (first >= 0xAC00 && first <= 0xD7A3 && (first - 0xAC00) % 28 == 0 && second >= 0x11A8 &&
      second <= 0x11C2)
    return true;  // LV+T
  int lo = 0, hi = np.n;  // binary search
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const uint32_t f = (uint32_t)np.pairs[2 * mid], s = (uint32_t)np.pairs[2 * mid + 1];
    if (f < first || (f == first && s < second)) lo = mid + 1;
    else hi = mid;
  }
  return lo < np.n && (uint32_t)np.pairs[2 * lo] == first && (uint32_t)np.pairs[2 * lo + 1] == second;
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

// ---------------------------------------------------------------------------------------------
// Transition maps: nibble x of a map = image of state x. map_then(a, b) = "a, then b".
constexpr uint64_t kMapIdentity = 0xFEDCBA9876543210ull;
BBPE_HD uint64_t map_constant(uint8_t x) { return 0x1111111111111111ull * x; }
BBPE_HD uint64_t live_states(int count) { return count >= 16 ? ~0ull : (1ull << (4 * count)) - 1; }
// Whether every live state has the same image.
BBPE_HD bool map_is_constant(uint64_t m, uint64_t live) {
  return ((m ^ map_constant((uint8_t)(m & 15))) & live) == 0;
}
BBPE_HD uint8_t map_apply(uint64_t m, uint8_t x) { return (uint8_t)((m >> (4 * x)) & 15); }
BBPE_HD_OUTLINE uint64_t map_then(uint64_t a, uint64_t b) {
  uint64_t r = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int x = 0; x < 16; ++x) r |= (uint64_t)map_apply(b, map_apply(a, (uint8_t)x)) << (4 * x);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Steps. A class value may carry kMaxClasses (a piece of an earlier stage starts at the byte):
// the backward automaton then restarts before it (constant map to init) and the forward one
// steps it from init. kBoundaries = false (the first stage, which has no earlier pieces)
// compiles the check away: it sits in the innermost loops.
template <bool kBoundaries = true>
BBPE_HD uint64_t bwd_step(const PretokTables& tab, uint8_t cls) {
  return (kBoundaries && (cls & kMaxClasses)) ? map_constant(tab.bwd_init & 15)
                                              : tab.bwd[cls & (kMaxClasses - 1)];
}
template <bool kBoundaries = true>
BBPE_HD uint64_t fwd_step(const PretokTables& tab, uint16_t key) {
  const uint64_t m = tab.fwd[key & (kKeyBoundary - 1)];
  return (kBoundaries && (key & kKeyBoundary)) ? map_constant(map_apply(m, tab.fwd_init & 15)) : m;
}
template <bool kBoundaries = true>
BBPE_HD uint8_t fwd_flag(const PretokTables& tab, uint16_t key, uint8_t s) {
  if (kBoundaries && (key & kKeyBoundary)) s = tab.fwd_init & 15;
  return (uint8_t)((tab.flag[key & (kKeyBoundary - 1)] >> s) & 1);
}
// The class of byte i for stage `stage`, with the boundary mark of the earlier stages' flags.
BBPE_HD uint8_t stage_class(const PretokTables& tab, const uint8_t* text, int n, const uint8_t* sp,
                            int i, const ClassTable& ct, bool boundary) {
  const uint8_t c = byte_class(tab, text, n, sp, i, ct);
  return (boundary && c > kClassSpecial) ? (uint8_t)(c | kMaxClasses) : c;
}

// ---------------------------------------------------------------------------------------------
// Chunk helpers (a chunk = cnt consecutive bytes, given by their classes). pretokenize_chunked
// and the CUDA block function use exactly these.

// A chunk's map, composed step by step. The automata forget their past within a code point
// or two: once every live state has the same image, the rest of the chunk steps that one
// state (a map_apply per byte instead of a map_then). The result differs from the full
// composition only at dead states, which no caller ever applies it to.
struct ChunkMap {
  uint64_t live;                // the automaton's states (map_is_constant looks at these)
  uint64_t m = kMapIdentity;    // the map so far, while it is not constant
  bool constant = false;
  uint8_t state = 0;            // the one image, once it is
  BBPE_HD explicit ChunkMap(uint64_t live_states) : live(live_states) {}
  BBPE_HD void then(uint64_t step) {
    if (constant) {
      state = map_apply(step, state);
    } else {
      m = map_then(m, step);
      constant = map_is_constant(m, live);
      state = (uint8_t)(m & 15);
    }
  }
  BBPE_HD uint64_t map() const { return constant ? map_constant(state) : m; }
};

// Backward map of a chunk: nibble x = T at the chunk's first byte when T after its end is x.
template <bool kBoundaries = true, class C>
BBPE_HD uint64_t chunk_bwd_map(const PretokTables& tab, const C* cls, int cnt) {
  ChunkMap acc(tab.bwd_live);
  for (int i = cnt - 1; i >= 0; --i)
    if (cls[i] != kClassNone) acc.then(bwd_step<kBoundaries>(tab, (uint8_t)cls[i]));
  return acc.map();
}

// Backward replay from T after the chunk. Turns each class into the key of its forward step,
// key[i] = cls[i] * 16 + T[i+1] (cls and key may be the same array); returns T at the
// chunk's start.
template <bool kBoundaries = true, class C, class K>
BBPE_HD uint8_t chunk_bwd_replay(const PretokTables& tab, const C* cls, int cnt, uint8_t t_end,
                                 K* key) {
  uint8_t t = t_end;
  for (int i = cnt - 1; i >= 0; --i) {
    const uint8_t c = (uint8_t)cls[i];
    key[i] = (K)(c * 16 + t);
    t = map_apply(bwd_step<kBoundaries>(tab, c), t);
  }
  return t;
}

// Forward map of a chunk: nibble x = S after the chunk when S before it is x.
template <bool kBoundaries = true, class K>
BBPE_HD uint64_t chunk_fwd_map(const PretokTables& tab, const K* key, int cnt) {
  ChunkMap acc(tab.fwd_live);
  for (int i = 0; i < cnt; ++i)
    if (key[i] >= 16) acc.then(fwd_step<kBoundaries>(tab, (uint16_t)key[i]));  // (keys < 16: continuation bytes)
  return acc.map();
}

// Forward replay from S before the chunk: writes flags[i] for i < valid; returns S after it.
template <bool kBoundaries = true, class K>
BBPE_HD uint8_t chunk_fwd_replay(const PretokTables& tab, const K* key, int cnt, uint8_t s,
                                 uint8_t* flags, int valid) {
  for (int i = 0; i < cnt; ++i) {
    if (i < valid) flags[i] = fwd_flag<kBoundaries>(tab, (uint16_t)key[i], s);
    s = map_apply(fwd_step<kBoundaries>(tab, (uint16_t)key[i]), s);
  }
  return s;
}

// The state at a chunk's edge without a scan. A chunk's map is usually constant (see
// ChunkMap), so the state after a chunk (backward pass) or before it (forward pass) is the
// image of the nearest constant map among the next (resp. previous) chunks, stepped through
// the maps in between. maps[at], maps[at + step], ... are the `count` chunks between this one
// and the tile's edge, nearest first, and `carry` is the state at that edge. Returns false
// when more than max_steps maps would have to be stepped through (always for max_steps < 0,
// which the tests use to force the scan); the caller then scans.
constexpr int kPretokLookback = 8;
BBPE_HD bool edge_state(const uint64_t* maps, int at, int step, int count, uint64_t live,
                        uint8_t carry, int max_steps, uint8_t* state) {
  if (max_steps < 0) return false;
  int j = 0;
  while (j < count && !map_is_constant(maps[at + j * step], live)) {
    if (++j > max_steps) return false;
  }
  uint8_t x = j < count ? (uint8_t)(maps[at + j * step] & 15) : carry;  // (state 0 is live)
  while (--j >= 0) x = map_apply(maps[at + j * step], x);
  *state = x;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Reference: per stage one pass backward, one pass forward (this is what the CPU handler
// runs). piece_start must be zero when there are no stages.
inline void pretokenize_sequential(const PretokView& v, const uint8_t* text, int n,
                                   const uint8_t* is_special_byte, uint8_t* piece_start) {
  if (n <= 0) return;
  std::vector<uint16_t> key(n);
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    const ClassTable ct = v.classes(st);
    uint8_t t = tab.bwd_init & 15;
    for (int i = n - 1; i >= 0; --i) {
      const uint8_t c = stage_class(tab, text, n, is_special_byte, i, ct, st > 0 && piece_start[i]);
      key[i] = (uint16_t)(c * 16 + t);
      t = map_apply(bwd_step(tab, c), t);
    }
    uint8_t s = tab.fwd_init & 15;
    for (int i = 0; i < n; ++i) {
      piece_start[i] = fwd_flag(tab, key[i], s);
      s = map_apply(fwd_step(tab, key[i]), s);
    }
  }
}

// Host emulation of the parallel decomposition, chunks of chunk_bytes (>= 1) bytes, the
// whole string as one tile: per-chunk maps; each chunk's edge state from edge_state (at most
// `lookback` chunks away) or, if that fails for any chunk, from exclusive scans of the maps
// (backward from the last chunk, then forward); replays.
inline void pretokenize_chunked(const PretokView& v, const uint8_t* text, int n,
                                const uint8_t* is_special_byte, int chunk_bytes,
                                uint8_t* piece_start, int lookback = kPretokLookback) {
  if (n <= 0) return;
  const int chunk = chunk_bytes < 1 ? 1 : chunk_bytes;
  const int nch = (n + chunk - 1) / chunk;
  std::vector<uint8_t> cls(n), edge(nch);
  std::vector<uint16_t> key(n);
  std::vector<uint64_t> map(nch);
  auto cnt = [&](int c) { return (c + 1) * chunk <= n ? chunk : n - c * chunk; };
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    const ClassTable ct = v.classes(st);
    for (int i = 0; i < n; ++i)
      cls[i] = stage_class(tab, text, n, is_special_byte, i, ct, st > 0 && piece_start[i]);
    // edge[c] = T after chunk c.
    for (int c = 0; c < nch; ++c) map[c] = chunk_bwd_map(tab, &cls[c * chunk], cnt(c));
    bool ok = true;
    for (int c = 0; c < nch; ++c)
      ok &= edge_state(map.data(), c + 1, 1, nch - 1 - c, tab.bwd_live, tab.bwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = nch - 1; c >= 0; --c) { edge[c] = map_apply(acc, tab.bwd_init & 15); acc = map_then(acc, map[c]); }
    }
    for (int c = 0; c < nch; ++c) chunk_bwd_replay(tab, &cls[c * chunk], cnt(c), edge[c], &key[c * chunk]);
    // edge[c] = S before chunk c.
    for (int c = 0; c < nch; ++c) map[c] = chunk_fwd_map(tab, &key[c * chunk], cnt(c));
    ok = true;
    for (int c = 0; c < nch; ++c)
      ok &= edge_state(map.data(), c - 1, -1, c, tab.fwd_live, tab.fwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = 0; c < nch; ++c) { edge[c] = map_apply(acc, tab.fwd_init & 15); acc = map_then(acc, map[c]); }
    }
    for (int c = 0; c < nch; ++c)
      chunk_fwd_replay(tab, &key[c * chunk], cnt(c), edge[c], &piece_start[c * chunk], cnt(c));
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA: one thread block per string.
#ifdef __CUDACC__

struct MapThenOp {
  __device__ __forceinline__ uint64_t operator()(uint64_t a, uint64_t b) const { return map_then(a, b); }
};

// BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>: thread k owns the ITEMS_PER_THREAD
// consecutive bytes [k * IPT, (k+1) * IPT) of a tile of BLOCK_THREADS * IPT bytes, i.e. exactly
// the chunks of pretokenize_chunked(chunk_bytes = IPT); a code point belongs to the thread that
// owns its lead byte. Steps (the same helpers as pretokenize_chunked):
//   0. the stage's step tables go to shared memory (copied from the operand);
//   1. stage_class of each owned byte (reads up to 3 bytes either side, from text, and the
//      earlier stages' flag of the byte);
//   2. chunk_bwd_map; T after the chunk from the next chunks' maps (edge_state: usually the
//      very next map is constant), or, when some chunk of the tile needs more than
//      kPretokLookback maps, from an exclusive suffix scan of the maps (warp shuffles, see
//      suffix_state) applied to the state carried in from later tiles; chunk_bwd_replay;
//   3. chunk_fwd_map; S before the chunk from the previous chunks' maps (edge_state), or an
//      exclusive scan in thread order (cub::BlockScan) applied to the state carried in from
//      earlier tiles; chunk_fwd_replay writes the flags.
// Strings longer than a tile run step 2 over the tiles from the last to the first, parking
// T[i+1] (and bit 4: the earlier stages' flag) in piece_start[i], then step 3 from the first tile to the last (a thread re-reads
// only bytes it wrote itself). One tile keeps everything in registers.
// text, is_special (nullable) and piece_start may be in shared or global memory; piece_start
// must not alias them. Every thread of the block must call it (it synchronizes).
template <int BLOCK_THREADS, int ITEMS_PER_THREAD>
struct BlockPretokenizer {
  static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "whole warps, at most 1024");
  static_assert(ITEMS_PER_THREAD >= 1, "ITEMS_PER_THREAD >= 1");
  static constexpr int kWarps = BLOCK_THREADS / 32;
  // Forward scan: cub::BlockScan with the map-composition operator. The warp-scan algorithm:
  // the raking one composes 32 maps serially per raking thread and spills at 1024 threads
  // (64 registers); warp scans need ~40 registers and 320 B of shared memory.
  using MapScan = cub::BlockScan<uint64_t, BLOCK_THREADS, cub::BLOCK_SCAN_WARP_SCANS>;
  struct TempStorage {
    PretokTables tab;                       // 5,528 B
    union {
      uint64_t maps[BLOCK_THREADS];         // every chunk's map, for edge_state
      struct {                              // the scans, when edge_state does not reach:
        typename MapScan::TempStorage scan; // forward scan
        uint64_t warp_maps[kWarps];         // backward scan: warp aggregates ...
        uint64_t warp_excl[kWarps];         // ... and their suffix scan
        uint64_t block_agg;
      };
    };
    uint8_t tile_edge;                      // the state handed to the next tile
  };
  static constexpr int kTile = BLOCK_THREADS * ITEMS_PER_THREAD;

  TempStorage& tmp;
  __device__ __forceinline__ explicit BlockPretokenizer(TempStorage& t) : tmp(t) {}

  // Inclusive suffix scan within a warp: lane l gets M_31 ; M_30 ; ... ; M_l (";" = then: the
  // later chunk's map is applied first, as the backward automaton runs from the end).
  __device__ __forceinline__ static uint64_t warp_suffix(uint64_t x, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint64_t o = __shfl_down_sync(0xffffffffu, x, d);
      if (lane + d < 32) x = map_then(o, x);
    }
    return x;
  }

  // Backward scan: T after this thread's chunk, given T after the tile (carry, updated to T
  // at the tile's start). An exclusive SUFFIX scan of the chunk maps over the block. cub scans
  // only in thread order, and a reversed-composition operator does not help (a prefix in
  // thread order covers the chunks before a thread, the backward pass needs those after it),
  // so this is the warp-scan algorithm mirrored: shuffles down within warps, then one warp
  // scans the warp aggregates from the last warp down (2 * kWarps * 8 B of shared memory, no
  // round trip of every map through shared memory).
  __device__ __forceinline__ uint8_t suffix_state(uint64_t m, uint8_t& carry) {
    uint64_t after, agg;
    suffix_maps(m, after, agg);
    return state_then_carry(after, agg, carry);
  }
  // A scan's result for this thread: the state through its part of the scan (map `part`);
  // carry moves through the whole tile (agg).
  __device__ __forceinline__ static uint8_t state_then_carry(uint64_t part, uint64_t agg, uint8_t& carry) {
    const uint8_t x = map_apply(part, carry);
    carry = map_apply(agg, carry);
    return x;
  }
  // The maps of that scan: the chunks after this thread's (after) and the whole tile (agg).
  __device__ __forceinline__ void suffix_maps(uint64_t m, uint64_t& after, uint64_t& agg) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint64_t inc = warp_suffix(m, lane);
    uint64_t exc = __shfl_down_sync(0xffffffffu, inc, 1);
    if (lane == 31) exc = kMapIdentity;
    if (lane == 0) tmp.warp_maps[warp] = inc;
    __syncthreads();
    if (warp == 0) {
      const uint64_t a = warp_suffix(lane < kWarps ? tmp.warp_maps[lane] : kMapIdentity, lane);
      uint64_t ae = __shfl_down_sync(0xffffffffu, a, 1);
      if (lane == 31) ae = kMapIdentity;
      if (lane < kWarps) tmp.warp_excl[lane] = ae;
      if (lane == 0) tmp.block_agg = a;
    }
    __syncthreads();
    after = map_then(tmp.warp_excl[warp], exc);
    agg = tmp.block_agg;
    __syncthreads();  // before warp_maps / warp_excl / block_agg are written again
  }

  // Forward scan: S before this thread's chunk, given S before the tile (carry, updated to S
  // after the tile).
  __device__ __forceinline__ uint8_t prefix_state(uint64_t m, uint8_t& carry) {
    uint64_t excl, agg;
    prefix_maps(m, excl, agg);
    return state_then_carry(excl, agg, carry);
  }
  // The maps of that scan: the chunks before this thread's (before) and the whole tile (agg).
  __device__ __forceinline__ void prefix_maps(uint64_t m, uint64_t& before, uint64_t& agg) {
    MapScan(tmp.scan).ExclusiveScan(m, before, kMapIdentity, MapThenOp(), agg);
    __syncthreads();  // before tmp.scan is used again
  }

  // A stage's step tables to shared memory (every thread calls it; it synchronizes).
  __device__ __forceinline__ void load_tables(const PretokTables* tables) {
    static_assert(sizeof(PretokTables) % 8 == 0, "copied as 8-byte words");
    const uint64_t* src = reinterpret_cast<const uint64_t*>(tables);
    uint64_t* dst = reinterpret_cast<uint64_t*>(&tmp.tab);
    for (int k = threadIdx.x; k < (int)(sizeof(PretokTables) / 8); k += BLOCK_THREADS) dst[k] = src[k];
    __syncthreads();
  }

  // T after this thread's chunk (map m; live chunks in the tile), given T after the tile
  // (carry): from the maps of the next chunks (edge_state), else a block scan (scan = true;
  // carry becomes T at the tile's start).
  __device__ __forceinline__ uint8_t state_after_chunk(uint64_t m, int live, uint8_t& carry, bool& scan) {
    const int k = threadIdx.x;
    tmp.maps[k] = m;
    __syncthreads();
    uint8_t t_end = carry;
    const bool ok = k >= live || edge_state(tmp.maps, k + 1, 1, live - 1 - k, tmp.tab.bwd_live, carry,
                                            kPretokLookback, &t_end);
    scan = __syncthreads_or(!ok);
    if (scan) t_end = suffix_state(m, carry);
    return t_end;
  }
  // S before this thread's chunk, given S before the tile (carry): from the maps of the chunks
  // before it, else a block scan (scan = true; carry becomes S after the tile).
  __device__ __forceinline__ uint8_t state_before_chunk(uint64_t m, int live, uint8_t& carry, bool& scan) {
    const int k = threadIdx.x;
    tmp.maps[k] = m;
    __syncthreads();
    uint8_t s0 = carry;
    const bool ok = k >= live || edge_state(tmp.maps, k - 1, -1, k, tmp.tab.fwd_live, carry,
                                            kPretokLookback, &s0);
    scan = __syncthreads_or(!ok);
    if (scan) s0 = prefix_state(m, carry);
    return s0;
  }
  // The forward-step key of byte i from its parked backward state (and boundary mark).
  __device__ __forceinline__ uint16_t parked_key(const ClassTable& ct, const uint8_t* text, int n,
                                                 const uint8_t* sp, int i, uint8_t parked) const {
    return (uint16_t)(byte_class(tmp.tab, text, n, sp, i, ct) * 16 + (parked & 15) +
                      ((parked & 16) ? kKeyBoundary : 0));
  }

  // One stage: tables = its step tables (global memory; copied to shared memory here), ct =
  // its class table, kBoundaries = out holds the flags of earlier stages (else it is written
  // without being read).
  template <bool kBoundaries>
  __device__ __forceinline__ void run(const PretokTables* tables, const ClassTable& ct,
                                      const uint8_t* text, int n, const uint8_t* sp, uint8_t* out) {
    load_tables(tables);
    if (n <= 0) return;
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x;
    // key[i]: the class of byte i, then (after the backward replay) its forward-step key.
    uint16_t key[ITEMS_PER_THREAD];
    const int ntiles = (n + kTile - 1) / kTile;
    uint8_t carry = tab.bwd_init & 15;
    for (int tile = ntiles - 1; tile >= 0; --tile) {
      const int base = tile * kTile + k * ITEMS_PER_THREAD;
      const int live = live_chunks(n, tile);
#pragma unroll
      for (int i = 0; i < ITEMS_PER_THREAD; ++i)
        key[i] = base + i < n ? stage_class(tab, text, n, sp, base + i, ct, kBoundaries && out[base + i])
                              : kClassNone;
      bool scan;
      const uint8_t t_end = state_after_chunk(chunk_bwd_map<kBoundaries>(tab, key, ITEMS_PER_THREAD),
                                              live, carry, scan);
      const uint8_t t_start = chunk_bwd_replay<kBoundaries>(tab, key, ITEMS_PER_THREAD, t_end, key);
      if (!scan && tile > 0) carry = hand_over(k == 0, t_start);
      if (ntiles > 1) {
#pragma unroll
        for (int i = 0; i < ITEMS_PER_THREAD; ++i)  // T[i+1] and the boundary mark, parked
          if (base + i < n) out[base + i] = (uint8_t)((key[i] & 15) | ((key[i] & kKeyBoundary) ? 16 : 0));
      }
    }
    carry = tab.fwd_init & 15;
    for (int tile = 0; tile < ntiles; ++tile) {
      const int base = tile * kTile + k * ITEMS_PER_THREAD;
      const int live = live_chunks(n, tile);
      if (ntiles > 1) {  // (one tile: key still holds tile 0's keys)
#pragma unroll
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
          if (base + i < n) key[i] = parked_key(ct, text, n, sp, base + i, out[base + i]);
          else key[i] = 0;
        }
      }
      bool scan;
      const uint8_t s0 = state_before_chunk(chunk_fwd_map<kBoundaries>(tab, key, ITEMS_PER_THREAD),
                                            live, carry, scan);
      const uint8_t s_end = chunk_fwd_replay<kBoundaries>(tab, key, ITEMS_PER_THREAD, s0, out + base, n - base);
      if (!scan && tile + 1 < ntiles) carry = hand_over(k == live - 1, s_end);
    }
    __syncthreads();  // before tmp.tab is overwritten by the next stage
  }

  // Chunks of the tile that hold bytes of the string (the rest are past its end).
  __device__ __forceinline__ static int live_chunks(int n, int tile) {
    const int left = n - tile * kTile;
    return left >= kTile ? BLOCK_THREADS : (left + ITEMS_PER_THREAD - 1) / ITEMS_PER_THREAD;
  }

  // The state at the tile's edge, from the one thread whose chunk is there.
  __device__ __forceinline__ uint8_t hand_over(bool mine, uint8_t state) {
    if (mine) tmp.tile_edge = state;
    __syncthreads();
    return tmp.tile_edge;  // (rewritten only after two more barriers)
  }

  // The tile pipeline of long rows (cuda_kernels.cu): one block per tile of one row, a single
  // stage (its tables loaded with load_tables). The states at a tile's edges come from the
  // other tiles' maps, composed between launches, so a row takes three passes over its tiles:
  //   tile_bwd_map: the tile's backward map (x = T after the tile -> T at its start);
  //   tile_fwd_map: given T after the tile, the backward replay, T[i+1] parked in park[i],
  //                 and the tile's forward map (x = S before the tile -> S after it);
  //   tile_flags:   given S before the tile, the flags of its bytes over the parked states.
  // Each computes what run() computes for the same tile; the maps come from full block scans.
  __device__ __forceinline__ void tile_classes(const ClassTable& ct, const uint8_t* text, int n,
                                               const uint8_t* sp, int base, uint16_t* key) {
#pragma unroll
    for (int i = 0; i < ITEMS_PER_THREAD; ++i)
      key[i] = base + i < n ? byte_class(tmp.tab, text, n, sp, base + i, ct) : kClassNone;
  }

  __device__ __forceinline__ uint64_t tile_bwd_map(const ClassTable& ct, const uint8_t* text, int n,
                                                   const uint8_t* sp, int tile) {
    uint16_t key[ITEMS_PER_THREAD];
    tile_classes(ct, text, n, sp, tile * kTile + (int)threadIdx.x * ITEMS_PER_THREAD, key);
    uint64_t after, agg;
    suffix_maps(chunk_bwd_map<false>(tmp.tab, key, ITEMS_PER_THREAD), after, agg);
    return agg;
  }

  __device__ __forceinline__ uint64_t tile_fwd_map(const ClassTable& ct, const uint8_t* text, int n,
                                                   const uint8_t* sp, int tile, uint8_t t_after,
                                                   uint8_t* park) {
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x, base = tile * kTile + k * ITEMS_PER_THREAD, live = live_chunks(n, tile);
    uint16_t key[ITEMS_PER_THREAD];
    tile_classes(ct, text, n, sp, base, key);
    bool scan;
    const uint8_t t_end = state_after_chunk(chunk_bwd_map<false>(tab, key, ITEMS_PER_THREAD), live,
                                            t_after, scan);
    chunk_bwd_replay<false>(tab, key, ITEMS_PER_THREAD, t_end, key);
#pragma unroll
    for (int i = 0; i < ITEMS_PER_THREAD; ++i)
      if (base + i < n) park[base + i] = (uint8_t)(key[i] & 15);
    uint64_t before, agg;
    prefix_maps(chunk_fwd_map<false>(tab, key, ITEMS_PER_THREAD), before, agg);
    return agg;
  }

  // (out holds the parked states of the tile's bytes and receives their flags.)
  __device__ __forceinline__ void tile_flags(const ClassTable& ct, const uint8_t* text, int n,
                                             const uint8_t* sp, int tile, uint8_t s_before, uint8_t* out) {
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x, base = tile * kTile + k * ITEMS_PER_THREAD, live = live_chunks(n, tile);
    uint16_t key[ITEMS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ITEMS_PER_THREAD; ++i)
      key[i] = base + i < n ? parked_key(ct, text, n, sp, base + i, out[base + i]) : 0;
    bool scan;
    const uint8_t s0 = state_before_chunk(chunk_fwd_map<false>(tab, key, ITEMS_PER_THREAD), live,
                                          s_before, scan);
    if (k < live) chunk_fwd_replay<false>(tab, key, ITEMS_PER_THREAD, s0, out + base, n - base);
  }
};

// Marks piece starts of text[0..n) into piece_start[0..n) (see the top of this file): every
// stage of the pre-tokenizer in turn. Any n >= 0 (n <= BLOCK_THREADS * ITEMS_PER_THREAD is one
// tile). Launch with blockDim.x == BLOCK_THREADS; every thread must call it.
template <int BLOCK_THREADS, int ITEMS_PER_THREAD>
__device__ __forceinline__ void block_pretokenize(
    const PretokView& v, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    typename BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>::TempStorage& tmp) {
  BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD> bp(tmp);
  if (v.n_stages > 0) bp.template run<false>(v.tables, v.classes(0), text, n, is_special, piece_start);
  for (int st = 1; st < v.n_stages; ++st)
    bp.template run<true>(v.tables + st, v.classes(st), text, n, is_special, piece_start);
}

#endif  // __CUDACC__

}  // namespace bbpe
