// Exact, regex-equivalent pre-tokenizer: piece boundaries of tiktoken / HF tokenizers for the
// GPT-2 (r50k, p50k), cl100k, o200k and Llama-3 patterns, as two finite automata over code
// point classes that run sequentially on the CPU and in parallel (prefix scans of transition
// maps) inside one CUDA thread block per string. All logic is BBPE_HD and shared.
//
// ---------------------------------------------------------------------------------------------
// Patterns (ids of the `pattern` argument; 0 is the paper's bytes mode):
//   1 kPatR50k   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
//                 (r50k_base, p50k_base, gpt2; HF's ByteLevel(use_regex) regex
//                 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                 gives the same pieces)
//   2 kPatCl100k '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|
//                  ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s     (tiktoken cl100k_base)
//   3 kPatO200k  the 7-alternative o200k_base pattern (DESIGN.md), tiktoken and HF o200k_hf alike
//   4 kPatLlama3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+          (Llama 3)
//
// ORACLE DISAGREEMENT (found while testing): the HF port of cl100k
// (shared/data/vocab/cl100k_hf/tokenizer.json) does not use tiktoken's cl100k regex but the
// Llama-3 regex above (no `\s++$`). The two differ only on a whitespace run that reaches the
// end of a sub-text and contains \r or \n: tiktoken cl100k gives "\n  " as one piece at the end
// of "x\n  ", HF cl100k_hf gives "\n" + "  ". So: tiktoken cl100k_base -> pattern 2; HF
// cl100k_hf/tokenizer.json -> pattern 4 (pick the id from the vocabulary's own regex string).
// With the cl100k vocabulary the ids happen to agree all the same (no cl100k token has spaces
// after a newline), but the pieces do not.
// No other disagreement: tiktoken (Rust regex) and HF (Oniguruma) agree on every code point's
// class (both are Unicode 16.0.0, see unicode_table.h), and both fold (?i:s) to s, S and
// U+017F LATIN SMALL LETTER LONG S (the only non-ASCII match of any contraction letter).
// Not oracles: Python's `regex` module is Unicode 17.0 (e.g. U+0295 is Lo there, Ll in 16.0),
// and Oniguruma reads tiktoken's possessive `\p{N}{1,3}+` as `(\p{N}{1,3})+` (the tests run
// tiktoken's patterns through Oniguruma with `{1,3}+` -> `{1,3}` and `$` -> `\z`).
//
// API (namespace bbpe):
//   host:   pretokenize_sequential(pattern, text, n, is_special, piece_start[, ut]) -> bool
//           pretokenize_direct(...same...)  (the step functions without tables; tests)
//           pretokenize_chunked(pattern, text, n, is_special, chunk_bytes, piece_start
//                               [, lookback, ut])
//           host_unicode_tables(), host_pretok_tables(pattern)
//   device: block_pretokenize<BLOCK_THREADS, ITEMS_PER_THREAD>(pattern, text, n, is_special,
//               piece_start, ut, BlockPretokenizer<..>::TempStorage&) -> bool
//           block_pretokenize<BLOCK_THREADS>(pattern, text, n, is_special, piece_start)
//           device_unicode_tables()
//   shared: byte_class, utf8_decode, cp_class, Pat*::bwd/fwd (the automata), the step tables
//           (fill_pretok_table), map_then / map_apply, chunk_bwd_map, chunk_bwd_replay,
//           chunk_fwd_map, chunk_fwd_replay, edge_state.
//
// Special tokens: bytes with is_special[i] != 0 belong to special tokens. They end the sub-text
// before them (so `$` and `(?!\S)` see an end there) and a new sub-text starts after them, as
// tiktoken and HF pre-tokenize each slice between specials independently. Their flag is
// don't-care (written as 0); the first byte after them always gets a 1.
//
// Invalid UTF-8 (input is raw bytes): a code point starts at every byte that begins a valid,
// complete, shortest-form UTF-8 sequence (no surrogates, <= U+10FFFF, no special byte inside),
// and at every byte that is not covered by such a sequence; each such uncovered byte is ONE
// code point of class C_SYM, i.e. it behaves like an ordinary symbol such as a private-use
// character (not \s, \p{L}, \p{N}, \p{M}). Valid input is unaffected. The tests check this
// against the oracles with every invalid byte replaced by a private-use character.
//
// piece_start[i] = 1 iff a piece starts at byte i (0 for UTF-8 continuation bytes).
//
// ---------------------------------------------------------------------------------------------
// The automata. Per byte i: a class c_i (byte_class: C_NONE for continuation bytes, which are
// identity steps, so every "per code point" statement below also holds per byte).
//   Backward: T[n] = init, T[i] = G(T[i+1], c_i). T[i] summarises text[i..end of sub-text): the
//     class of the next code point plus the little lookahead the regexes need: whether the
//     whitespace run starting there contains \r/\n, whether it reaches the end (cl100k's
//     \s++$), the contraction that follows an apostrophe ('s 'd 'm 't = 1 more letter,
//     'll 've 're = 2), and for o200k whether the letter run there can complete the first
//     alternative (see o200k below).
//   Forward: S[0] = FREE, (S[i+1], flag_i) = F(S[i], c_i, T[i+1]). S says which alternative
//     the current piece is in and how far; flag_i (piece start) depends only on (S[i], c_i,
//     T[i+1]). Regex leftmost-first semantics are encoded by deciding, at a piece start, which
//     alternative matches, using only c_i and T[i+1].
// Both have at most 16 states (o200k's backward automaton uses exactly 16), so the transition
// map of a chunk over all states is a uint64 of 16 nibbles; composing maps is associative and
// is what pretokenize_chunked and the CUDA block scans compute. State counts (bwd/fwd):
//   bytes 1/2, r50k 8/8, cl100k 11/10, llama3 11/10 (one unused), o200k 16/13.
#pragma once

#include <stdint.h>

#include "bbpe_hd.h"

#include "unicode_table.h"

#include <vector>
#ifdef __CUDACC__
#include <cub/block/block_scan.cuh>
#endif

namespace bbpe {

enum PretokPattern : int {
  kPatBytes = 0,   // no pre-tokenizer: one piece per sub-text between specials
  kPatR50k = 1,    // also p50k_base and gpt2
  kPatCl100k = 2,  // tiktoken cl100k_base (HF cl100k_hf uses kPatLlama3's regex)
  kPatO200k = 3,
  kPatLlama3 = 4,
};

// ---------------------------------------------------------------------------------------------
// Code point classes (pattern independent; each pattern's steps interpret them).
enum CpClass : uint8_t {
  C_NONE = 0,  // UTF-8 continuation byte inside a valid sequence: not a code point
  C_SPECIAL,   // byte of a special token
  C_SYM,       // anything else: punctuation, symbols, controls, Cf, Co, unassigned, invalid bytes
  C_APOS,      // '
  C_SLASH,     // /
  C_SPACE,     // ' '
  C_NL,        // \r \n
  C_WS,        // other White_Space
  C_N,         // \p{N}
  C_M,         // \p{M}
  C_LU,        // Lu | Lt without a contraction role
  C_LL,        // Ll without a contraction role
  C_LB,        // Lm | Lo ("both" in o200k's upper and lower sets)
  C_LU_C1,     // S D M T
  C_LU_L,      // L
  C_LU_E,      // E
  C_LU_RV,     // R V
  C_LL_C1,     // s d m t
  C_LL_L,      // l
  C_LL_E,      // e
  C_LL_RV,     // r v
  C_LONG_S,    // U+017F: Ll, and (?i:s) matches it
  C_COUNT
};

BBPE_HD bool cls_ws(uint8_t c) { return c == C_SPACE || c == C_NL || c == C_WS; }
BBPE_HD bool cls_letter(uint8_t c) { return c >= C_LU; }
BBPE_HD bool cls_upper(uint8_t c) { return c == C_LU || (c >= C_LU_C1 && c <= C_LU_RV); }
BBPE_HD bool cls_lower(uint8_t c) { return c == C_LL || (c >= C_LL_C1 && c <= C_LL_RV) || c == C_LONG_S; }

BBPE_HD uint8_t ascii_class(uint32_t c) {
  if (c >= 'a' && c <= 'z') {
    switch (c) {
      case 's': case 'd': case 'm': case 't': return C_LL_C1;
      case 'l': return C_LL_L;
      case 'e': return C_LL_E;
      case 'r': case 'v': return C_LL_RV;
      default: return C_LL;
    }
  }
  if (c >= 'A' && c <= 'Z') {
    switch (c) {
      case 'S': case 'D': case 'M': case 'T': return C_LU_C1;
      case 'L': return C_LU_L;
      case 'E': return C_LU_E;
      case 'R': case 'V': return C_LU_RV;
      default: return C_LU;
    }
  }
  if (c >= '0' && c <= '9') return C_N;
  switch (c) {
    case ' ': return C_SPACE;
    case '\n': case '\r': return C_NL;
    case '\t': case 0x0B: case 0x0C: return C_WS;
    case '\'': return C_APOS;
    case '/': return C_SLASH;
    default: return C_SYM;
  }
}

BBPE_HD uint8_t cp_class(uint32_t cp, const UnicodeTables& ut) {
  if (cp < 128) return ascii_class(cp);
  if (cp == 0x17F) return C_LONG_S;
  switch (unicode_general_class(cp, ut)) {
    case UCLS_LU: case UCLS_LT: return C_LU;
    case UCLS_LL: return C_LL;
    case UCLS_LM: case UCLS_LO: return C_LB;
    case UCLS_M: return C_M;
    case UCLS_N: return C_N;
    case UCLS_WS: return C_WS;
    default: return C_SYM;
  }
}

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

// Class of byte i (see CpClass). Reads bytes i-3..i+3 of the segment.
BBPE_HD_OUTLINE uint8_t byte_class(const uint8_t* text, int n, const uint8_t* sp, int i,
                           const UnicodeTables& ut) {
  if (sp && sp[i]) return C_SPECIAL;
  const uint8_t b = text[i];
  if (b < 0x80) return ascii_class(b);
  uint32_t cp;
  if (utf8_decode(text, n, sp, i, &cp)) return cp_class(cp, ut);
  if ((b & 0xC0) == 0x80) {
    // A continuation byte is covered iff the nearest non-continuation byte before it (at most
    // 3 back, no special byte in between) starts a valid sequence that reaches it.
    for (int d = 1; d <= 3; ++d) {
      const int j = i - d;
      if (j < 0 || (sp && sp[j])) break;
      if ((text[j] & 0xC0) != 0x80) {
        uint32_t cpj;
        if (utf8_decode(text, n, sp, j, &cpj) > d) return C_NONE;
        break;
      }
    }
  }
  return C_SYM;  // invalid byte: one code point that behaves like a symbol
}

// ---------------------------------------------------------------------------------------------
// Contraction letters. A letter's "tag" in the backward state says what an apostrophe just
// before it would start: TG_C1 = [sdmt] (1 more code point), TG_C2 = r/v followed by e, TG_LC2
// = l followed by l (2 more), TG_L0 = an l not followed by l, TG_E = an e (so an r/v before it
// can see it). The regex crate and Oniguruma both match (?i:s) with s, S, U+017F and the other
// contraction letters only with their ASCII cases.
enum LetterTag : uint8_t { TG_P = 0, TG_C1, TG_C2, TG_L0, TG_LC2, TG_E, TG_COUNT };

// ci: case-insensitive contractions (cl100k, o200k, llama3); r50k is case-sensitive.
BBPE_HD uint8_t letter_tag(uint8_t c, bool ci, int next_tag /* -1: next is not a letter */) {
  int k;  // 0 plain, 1 sdmt, 2 l, 3 e, 4 rv
  switch (c) {
    case C_LL_C1: k = 1; break;
    case C_LL_L: k = 2; break;
    case C_LL_E: k = 3; break;
    case C_LL_RV: k = 4; break;
    case C_LU_C1: k = ci ? 1 : 0; break;
    case C_LU_L: k = ci ? 2 : 0; break;
    case C_LU_E: k = ci ? 3 : 0; break;
    case C_LU_RV: k = ci ? 4 : 0; break;
    case C_LONG_S: k = ci ? 1 : 0; break;
    default: k = 0;
  }
  switch (k) {
    case 1: return TG_C1;
    case 2: return (next_tag == TG_L0 || next_tag == TG_LC2) ? TG_LC2 : TG_L0;
    case 3: return TG_E;
    case 4: return next_tag == TG_E ? TG_C2 : TG_P;
    default: return TG_P;
  }
}
// Code points a contraction takes after the apostrophe (0: none).
BBPE_HD int tag_contraction(int tag) {
  return tag == TG_C1 ? 1 : ((tag == TG_C2 || tag == TG_LC2) ? 2 : 0);
}

// Forward step result: next state in the low nibble, piece-start flag in bit 4.
BBPE_HD uint8_t fwd_result(int next, bool start) { return (uint8_t)(next | (start ? 16 : 0)); }

// ---------------------------------------------------------------------------------------------
// Bytes mode: one piece per sub-text. bwd: 1 state; fwd: FREE, IN.
struct PatBytes {
  static constexpr int kBwdStates = 1, kFwdStates = 2;
  BBPE_HD static uint8_t bwd_init() { return 0; }
  BBPE_HD static uint8_t fwd_init() { return 0; }
  BBPE_HD static uint8_t bwd(uint8_t t, uint8_t) { return t; }
  BBPE_HD static uint8_t fwd(uint8_t s, uint8_t c, uint8_t) {
    if (c == C_NONE) return s;
    if (c == C_SPECIAL) return fwd_result(0, false);
    return fwd_result(1, s == 0);
  }
};

// ---------------------------------------------------------------------------------------------
// r50k: '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
// Pieces: a contraction (only where a piece starts at the apostrophe); runs of letters, of
// digits, of other symbols (\p{M} is a symbol here), each optionally led by ONE space; and
// whitespace: a whitespace run followed by \S splits off its last code point (which leads the
// next piece if it is a space, else is a piece alone); a run at the end is one piece.
// bwd (8): NS (end of sub-text or whitespace: "not \S"), S (a \S that is not a letter),
//          LET+tag (6 letter tags, lowercase contraction letters only).
// fwd (8): FREE (next code point starts a piece), L, N, S, WS (runs), PRE (a space that
//          leads the next code point's run), C1, C2 (contraction code points left).
struct PatR50k {
  enum { B_NS = 0, B_S = 1, B_LET = 2 };
  enum { F_FREE = 0, F_L, F_N, F_S, F_WS, F_PRE, F_C1, F_C2 };
  static constexpr int kBwdStates = 8, kFwdStates = 8;
  BBPE_HD static uint8_t bwd_init() { return B_NS; }
  BBPE_HD static uint8_t fwd_init() { return F_FREE; }
  BBPE_HD static bool sym(uint8_t c) { return c == C_SYM || c == C_APOS || c == C_SLASH || c == C_M; }
  BBPE_HD static uint8_t bwd(uint8_t t, uint8_t c) {
    if (c == C_NONE) return t;
    if (c == C_SPECIAL || cls_ws(c)) return B_NS;
    if (cls_letter(c)) return (uint8_t)(B_LET + letter_tag(c, false, t >= B_LET ? t - B_LET : -1));
    return B_S;
  }
  BBPE_HD static int run_state(uint8_t c) {
    return cls_letter(c) ? F_L : (c == C_N ? F_N : (cls_ws(c) ? F_WS : F_S));
  }
  BBPE_HD static uint8_t fwd(uint8_t s, uint8_t c, uint8_t t) {
    if (c == C_NONE) return s;
    if (c == C_SPECIAL) return fwd_result(F_FREE, false);
    switch (s) {  // does c continue the current piece?
      case F_L: if (cls_letter(c)) return fwd_result(F_L, false); break;
      case F_N: if (c == C_N) return fwd_result(F_N, false); break;
      case F_S: if (sym(c)) return fwd_result(F_S, false); break;
      case F_WS: if (cls_ws(c) && t == B_NS) return fwd_result(F_WS, false); break;
      case F_PRE: return fwd_result(run_state(c), false);
      case F_C2: return fwd_result(F_C1, false);
      case F_C1: return fwd_result(F_FREE, false);
      default: break;
    }
    // A piece starts at c.
    if (c == C_APOS) {
      const int k = t >= B_LET ? tag_contraction(t - B_LET) : 0;
      return fwd_result(k == 1 ? F_C1 : (k == 2 ? F_C2 : F_S), true);
    }
    if (c == C_SPACE) return fwd_result(t != B_NS ? F_PRE : F_WS, true);
    return fwd_result(run_state(c), true);
  }
};

// ---------------------------------------------------------------------------------------------
// cl100k (kCl = true) and llama3 (kCl = false). The two regexes differ only in cl100k's
// `\s++$` (llama3's `\s*[\r\n]+`, `\s+` and the non-possessive quantifiers match the same
// pieces as cl100k's `\s*[\r\n]`, `\s`, possessive ones).
// Pieces: a contraction (case-insensitive, only where a piece starts at the apostrophe);
// [^\r\n\p{L}\p{N}]? + letters (any one non-letter/digit/newline code point, including a
// space, tab, apostrophe or mark, leads a following letter run); 1-3 digits; " "? + symbols
// (\p{M} included) + any \r\n after them; whitespace: [cl100k only: a run reaching the end is
// one piece]; a run containing \r/\n up to its last \r/\n; else a run followed by \S leaves
// its last code point to the next piece.
// bwd (11): WPL/WNL (whitespace run without / with \r\n; llama3's end of sub-text is WPL),
//           END (cl100k: end of sub-text, or a whitespace run reaching it), N, S, LET+tag (6).
// fwd (10): FREE, L, N1, N2 (digits so far), S, SNL (newlines after symbols), WSNL (run up to
//           its last \r\n), WSRUN (run that leaves its last code point), C1, C2.
template <bool kCl>
struct PatCl {
  enum { B_WPL = 0, B_WNL, B_END, B_N, B_S, B_LET };
  enum { F_FREE = 0, F_L, F_N1, F_N2, F_S, F_SNL, F_WSNL, F_WSRUN, F_C1, F_C2 };
  static constexpr int kBwdStates = 11, kFwdStates = 10;
  BBPE_HD static uint8_t bwd_init() { return kCl ? B_END : B_WPL; }
  BBPE_HD static uint8_t fwd_init() { return F_FREE; }
  BBPE_HD static bool sym(uint8_t c) { return c == C_SYM || c == C_APOS || c == C_SLASH || c == C_M; }
  BBPE_HD static uint8_t bwd(uint8_t t, uint8_t c) {
    if (c == C_NONE) return t;
    if (c == C_SPECIAL) return bwd_init();
    if (cls_ws(c)) {
      if (kCl && t == B_END) return B_END;
      return (c == C_NL || t == B_WNL) ? B_WNL : B_WPL;
    }
    if (c == C_N) return B_N;
    if (cls_letter(c)) return (uint8_t)(B_LET + letter_tag(c, true, t >= B_LET ? t - B_LET : -1));
    return B_S;
  }
  BBPE_HD static uint8_t fwd(uint8_t s, uint8_t c, uint8_t t) {
    if (c == C_NONE) return s;
    if (c == C_SPECIAL) return fwd_result(F_FREE, false);
    const bool next_letter = t >= B_LET;
    const bool next_not_S = t <= B_END;  // whitespace or end of sub-text
    switch (s) {
      case F_L: if (cls_letter(c)) return fwd_result(F_L, false); break;
      case F_N1: if (c == C_N) return fwd_result(F_N2, false); break;
      case F_N2: if (c == C_N) return fwd_result(F_FREE, false); break;
      case F_S:
        if (sym(c)) return fwd_result(F_S, false);
        if (c == C_NL) return fwd_result(F_SNL, false);
        break;
      case F_SNL: if (c == C_NL) return fwd_result(F_SNL, false); break;
      case F_WSNL: if (cls_ws(c) && (c == C_NL || t == B_WNL)) return fwd_result(F_WSNL, false); break;
      case F_WSRUN: if (cls_ws(c) && next_not_S) return fwd_result(F_WSRUN, false); break;
      case F_C2: return fwd_result(F_C1, false);
      case F_C1: return fwd_result(F_FREE, false);
      default: break;
    }
    // A piece starts at c; pick the alternative that matches first.
    if (c == C_APOS) {
      const int k = next_letter ? tag_contraction(t - B_LET) : 0;
      if (k) return fwd_result(k == 1 ? F_C1 : F_C2, true);
      return fwd_result(next_letter ? F_L : F_S, true);
    }
    if (cls_letter(c)) return fwd_result(F_L, true);
    if (c == C_N) return fwd_result(F_N1, true);
    if (sym(c)) return fwd_result(next_letter ? F_L : F_S, true);
    // whitespace
    if (c != C_NL && next_letter) return fwd_result(F_L, true);
    if (c == C_SPACE && t == B_S) return fwd_result(F_S, true);
    if (kCl && t == B_END) return fwd_result(F_WSRUN, true);  // \s++$
    if (c == C_NL || t == B_WNL) return fwd_result(F_WSNL, true);
    return fwd_result(F_WSRUN, true);
  }
};
using PatCl100k = PatCl<true>;
using PatLlama3 = PatCl<false>;

// ---------------------------------------------------------------------------------------------
// o200k:  P?U*W+C? | P?U+W*C? | \p{N}{1,3} | " "?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ |
//         \s+(?!\S) | \s+
// with P = [^\r\n\p{L}\p{N}] (includes \p{M}), U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
// W = [\p{Ll}\p{Lm}\p{Lo}\p{M}], C = (?i:'s|'t|'re|'ve|'m|'ll|'d). Write UP = Lu|Lt (only in
// U), LO = Ll (only in W), B = Lm|Lo|M (in both). From a position q, let R = the maximal run of
// U code points. The first alternative (O1) succeeds at q iff R contains a B or R is followed
// by an LO ("Xt(q)" below); then it ends after R plus the W run that follows, if R is followed
// by LO, else right after the last B in R (backtracking of U*). Otherwise the second (O2)
// takes R (all UP). The optional C then follows. A prefix P code point leads a letter piece
// iff the next code point is in L|M; a \p{M} at a piece start, not followed by a run where O1
// succeeds, is a piece by itself (O1 without the prefix: U* = "", W+ = the mark), + C?.
// bwd (16): WPL (whitespace w/o \r\n, or end), WNL, N, S, LET + tag + 6 * Xt (12: the letter
//           tags for contractions, and Xt of the run starting at this letter/mark).
// fwd (13): FREE, UPH (O1, in R), WPH (O1, in the W run), O2, LEND (a lone mark; C may follow),
//           C1, C2, N1, N2, S, SNL ([\r\n/]* after symbols), WSNL, WSRUN.
struct PatO200k {
  enum { B_WPL = 0, B_WNL, B_N, B_S, B_LET };
  enum { F_FREE = 0, F_UPH, F_WPH, F_O2, F_LEND, F_C1, F_C2, F_N1, F_N2, F_S, F_SNL, F_WSNL, F_WSRUN };
  static constexpr int kBwdStates = 16, kFwdStates = 13;
  BBPE_HD static uint8_t bwd_init() { return B_WPL; }
  BBPE_HD static uint8_t fwd_init() { return F_FREE; }
  BBPE_HD static bool sym(uint8_t c) { return c == C_SYM || c == C_APOS || c == C_SLASH; }
  BBPE_HD static uint8_t let_state(int tag, int xt) { return (uint8_t)(B_LET + tag + TG_COUNT * xt); }
  BBPE_HD static uint8_t bwd(uint8_t t, uint8_t c) {
    if (c == C_NONE) return t;
    if (c == C_SPECIAL) return B_WPL;
    if (cls_ws(c)) return (c == C_NL || t == B_WNL) ? B_WNL : B_WPL;
    if (c == C_N) return B_N;
    if (sym(c)) return B_S;
    if (c == C_M || c == C_LB) return let_state(TG_P, 1);
    const int next_tag = t >= B_LET ? (t - B_LET) % TG_COUNT : -1;
    const int tag = letter_tag(c, true, next_tag);
    if (cls_lower(c)) return let_state(tag, 1);
    // upper: Xt is that of the run after it
    const int xt = t >= B_LET ? (t - B_LET) / TG_COUNT : 0;
    return let_state(tag, xt);
  }
  BBPE_HD static uint8_t fwd(uint8_t s, uint8_t c, uint8_t t) {
    if (c == C_NONE) return s;
    if (c == C_SPECIAL) return fwd_result(F_FREE, false);
    const bool next_letter = t >= B_LET;                    // next is in L|M
    const bool next_xt = t >= B_LET + TG_COUNT;             // ... and O1 succeeds there
    const int contraction = next_letter ? tag_contraction((t - B_LET) % TG_COUNT) : 0;
    const bool next_not_S = t <= B_WNL;
    const bool letter_state = s == F_UPH || s == F_WPH || s == F_O2 || s == F_LEND;
    switch (s) {
      case F_UPH:
        if (cls_upper(c) && next_xt) return fwd_result(F_UPH, false);
        if (c == C_LB || c == C_M) return fwd_result(F_UPH, false);
        if (cls_lower(c)) return fwd_result(F_WPH, false);
        break;
      case F_WPH:
        if (cls_lower(c) || c == C_LB || c == C_M) return fwd_result(F_WPH, false);
        break;
      case F_O2: if (cls_upper(c)) return fwd_result(F_O2, false); break;
      case F_C2: return fwd_result(F_C1, false);
      case F_C1: return fwd_result(F_FREE, false);
      case F_N1: if (c == C_N) return fwd_result(F_N2, false); break;
      case F_N2: if (c == C_N) return fwd_result(F_FREE, false); break;
      case F_S:
        if (sym(c) || c == C_M) return fwd_result(F_S, false);
        if (c == C_NL) return fwd_result(F_SNL, false);
        break;
      case F_SNL: if (c == C_NL || c == C_SLASH) return fwd_result(F_SNL, false); break;
      case F_WSNL: if (cls_ws(c) && (c == C_NL || t == B_WNL)) return fwd_result(F_WSNL, false); break;
      case F_WSRUN: if (cls_ws(c) && next_not_S) return fwd_result(F_WSRUN, false); break;
      default: break;
    }
    // The letter part of the piece ended before c: the optional contraction.
    if (letter_state && c == C_APOS && contraction)
      return fwd_result(contraction == 1 ? F_C1 : F_C2, false);
    // A piece starts at c.
    const int letter_next = next_xt ? F_UPH : F_O2;  // state after a prefix code point
    if (cls_upper(c)) return fwd_result(next_xt ? F_UPH : F_O2, true);
    if (cls_lower(c)) return fwd_result(F_WPH, true);
    if (c == C_LB) return fwd_result(F_UPH, true);
    if (c == C_M) return fwd_result(next_xt ? F_UPH : F_LEND, true);
    if (c == C_N) return fwd_result(F_N1, true);
    if (sym(c)) return fwd_result(next_letter ? letter_next : F_S, true);
    if (c != C_NL && next_letter) return fwd_result(letter_next, true);
    if (c == C_SPACE && t == B_S) return fwd_result(F_S, true);
    if (c == C_NL || t == B_WNL) return fwd_result(F_WSNL, true);
    return fwd_result(F_WSRUN, true);
  }
};

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
// Step tables: the step functions of one pattern tabulated for the parallel paths, so that a
// chunk map is a chain of map_then (one code path for every pattern, small device code).
//   bwd[c]          map over t: t -> G(t, c)
//   fwd[c * 16 + t] map over s: s -> F(s, c, t)   (next state)
//   flag[c * 16 + t] bit s = piece-start flag of F(s, c, t)
// Entries of states a pattern does not have are identity (never reached from its init states).
//   ascii[b]         byte_class of an ASCII byte b (a lookup instead of ascii_class's branches)
constexpr int kTabFwdEntries = C_COUNT * 16;
constexpr int kTabEntries = kTabFwdEntries + C_COUNT + 128;  // fill_pretok_table indices
struct PretokTables {
  uint64_t fwd[kTabFwdEntries];
  uint64_t bwd[C_COUNT];
  uint16_t flag[kTabFwdEntries];
  uint8_t ascii[128];
  uint8_t bwd_init, fwd_init;
  uint64_t bwd_live, fwd_live;  // 0xF in the nibble of every state the automaton has
};

template <class P>
BBPE_HD void fill_pretok_table_entry(PretokTables& tab, int k) {
  if (k < kTabFwdEntries) {
    const uint8_t c = (uint8_t)(k >> 4), t = (uint8_t)(k & 15);
    uint64_t m = kMapIdentity;
    uint16_t f = 0;
    for (int s = 0; s < P::kFwdStates; ++s) {
      const uint8_t r = t < P::kBwdStates ? P::fwd((uint8_t)s, c, t) : (uint8_t)s;
      m = (m & ~(15ull << (4 * s))) | ((uint64_t)(r & 15) << (4 * s));
      f |= (uint16_t)((r >> 4) << s);
    }
    tab.fwd[k] = m;
    tab.flag[k] = f;
  } else if (k >= kTabFwdEntries + C_COUNT) {
    if (k < kTabEntries) tab.ascii[k - kTabFwdEntries - C_COUNT] = ascii_class((uint32_t)(k - kTabFwdEntries - C_COUNT));
  } else {
    const uint8_t c = (uint8_t)(k - kTabFwdEntries);
    uint64_t m = kMapIdentity;
    for (int t = 0; t < P::kBwdStates; ++t)
      m = (m & ~(15ull << (4 * t))) | ((uint64_t)P::bwd((uint8_t)t, c) << (4 * t));
    tab.bwd[c] = m;
    if (c == 0) {
      tab.bwd_init = P::bwd_init();
      tab.fwd_init = P::fwd_init();
      tab.bwd_live = live_states(P::kBwdStates);
      tab.fwd_live = live_states(P::kFwdStates);
    }
  }
}

// Fills entry k (0 <= k < kTabEntries) of the tables of `pattern`; false for unknown patterns.
BBPE_HD bool fill_pretok_table(int pattern, PretokTables& tab, int k) {
  switch (pattern) {
    case kPatBytes: fill_pretok_table_entry<PatBytes>(tab, k); return true;
    case kPatR50k: fill_pretok_table_entry<PatR50k>(tab, k); return true;
    case kPatCl100k: fill_pretok_table_entry<PatCl100k>(tab, k); return true;
    case kPatO200k: fill_pretok_table_entry<PatO200k>(tab, k); return true;
    case kPatLlama3: fill_pretok_table_entry<PatLlama3>(tab, k); return true;
    default: return false;
  }
}

// byte_class with the ASCII lookup of the tables (same result).
BBPE_HD uint8_t byte_class_tab(const PretokTables& tab, const uint8_t* text, int n,
                               const uint8_t* sp, int i, const UnicodeTables& ut) {
  const uint8_t b = text[i];
  if (b < 0x80 && !(sp && sp[i])) return tab.ascii[b];
  return byte_class(text, n, sp, i, ut);
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
template <class C>
BBPE_HD uint64_t chunk_bwd_map(const PretokTables& tab, const C* cls, int cnt) {
  ChunkMap acc(tab.bwd_live);
  for (int i = cnt - 1; i >= 0; --i)
    if (cls[i] != C_NONE) acc.then(tab.bwd[cls[i]]);
  return acc.map();
}

// Backward replay from T after the chunk. Turns each class into the key of its forward step,
// key[i] = cls[i] * 16 + T[i+1] (cls and key may be the same array); returns T at the
// chunk's start.
template <class C, class K>
BBPE_HD uint8_t chunk_bwd_replay(const PretokTables& tab, const C* cls, int cnt, uint8_t t_end,
                                 K* key) {
  uint8_t t = t_end;
  for (int i = cnt - 1; i >= 0; --i) {
    const uint8_t c = (uint8_t)cls[i];
    key[i] = (K)(c * 16 + t);
    t = map_apply(tab.bwd[c], t);
  }
  return t;
}

// Forward map of a chunk: nibble x = S after the chunk when S before it is x.
template <class K>
BBPE_HD uint64_t chunk_fwd_map(const PretokTables& tab, const K* key, int cnt) {
  ChunkMap acc(tab.fwd_live);
  for (int i = 0; i < cnt; ++i)
    if (key[i] >= 16) acc.then(tab.fwd[key[i]]);  // (keys < 16 are C_NONE: identity)
  return acc.map();
}

// Forward replay from S before the chunk: writes flags[i] for i < valid; returns S after it.
template <class K>
BBPE_HD uint8_t chunk_fwd_replay(const PretokTables& tab, const K* key, int cnt, uint8_t s,
                                 uint8_t* flags, int valid) {
  for (int i = 0; i < cnt; ++i) {
    if (i < valid) flags[i] = (uint8_t)((tab.flag[key[i]] >> s) & 1);
    s = map_apply(tab.fwd[key[i]], s);
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

// The Unicode tables as host arrays.
inline const UnicodeTables& host_unicode_tables() {
  static const uint8_t stage1[] = BBPE_UTAB_STAGE1_INIT;
  static const uint8_t stage2[] = BBPE_UTAB_STAGE2_INIT;
  static const UnicodeTables t{stage1, stage2};
  return t;
}

// The step tables of a pattern (0..4), built once; nullptr for unknown patterns.
inline const PretokTables* host_pretok_tables(int pattern) {
  struct All {
    PretokTables tab[5];
    All() {
      for (int p = 0; p < 5; ++p)
        for (int k = 0; k < kTabEntries; ++k) fill_pretok_table(p, tab[p], k);
    }
  };
  static const All all;
  return pattern >= 0 && pattern < 5 ? &all.tab[pattern] : nullptr;
}

// Reference: one pass backward, one pass forward, with the step tables (this is what the CPU
// handler runs). Returns false (and writes nothing) for an unknown pattern id.
inline bool pretokenize_sequential(int pattern, const uint8_t* text, int n,
                                   const uint8_t* is_special_byte, uint8_t* piece_start,
                                   const UnicodeTables& ut = host_unicode_tables()) {
  const PretokTables* tabp = host_pretok_tables(pattern);
  if (!tabp) return false;
  if (n <= 0) return true;
  const PretokTables& tab = *tabp;
  std::vector<uint16_t> key(n);
  uint8_t t = tab.bwd_init;
  for (int i = n - 1; i >= 0; --i) {
    const uint8_t c = byte_class_tab(tab, text, n, is_special_byte, i, ut);
    key[i] = (uint16_t)(c * 16 + t);
    t = map_apply(tab.bwd[c], t);
  }
  uint8_t s = tab.fwd_init;
  for (int i = 0; i < n; ++i) {
    piece_start[i] = (uint8_t)((tab.flag[key[i]] >> s) & 1);
    s = map_apply(tab.fwd[key[i]], s);
  }
  return true;
}

// The same with the step functions themselves instead of the tables (slower; for tests).
struct PretokDirect {
  const uint8_t* cls;
  int n;
  uint8_t* out;
  template <class P>
  void run() {
    std::vector<uint8_t> tn(n);
    uint8_t t = P::bwd_init();
    for (int i = n - 1; i >= 0; --i) {
      tn[i] = t;
      t = P::bwd(t, cls[i]);
    }
    uint8_t s = P::fwd_init();
    for (int i = 0; i < n; ++i) {
      const uint8_t r = P::fwd(s, cls[i], tn[i]);
      out[i] = (uint8_t)(r >> 4);
      s = (uint8_t)(r & 15);
    }
  }
};
inline bool pretokenize_direct(int pattern, const uint8_t* text, int n,
                               const uint8_t* is_special_byte, uint8_t* piece_start,
                               const UnicodeTables& ut = host_unicode_tables()) {
  if (pattern < 0 || pattern > 4) return false;
  if (n <= 0) return true;
  std::vector<uint8_t> cls(n);
  for (int i = 0; i < n; ++i) cls[i] = byte_class(text, n, is_special_byte, i, ut);
  PretokDirect f{cls.data(), n, piece_start};
  switch (pattern) {
    case kPatBytes: f.run<PatBytes>(); break;
    case kPatR50k: f.run<PatR50k>(); break;
    case kPatCl100k: f.run<PatCl100k>(); break;
    case kPatO200k: f.run<PatO200k>(); break;
    default: f.run<PatLlama3>(); break;
  }
  return true;
}

// Host emulation of the parallel decomposition, chunks of chunk_bytes (>= 1) bytes, the
// whole string as one tile: per-chunk maps; each chunk's edge state from edge_state (at most
// `lookback` chunks away) or, if that fails for any chunk, from exclusive scans of the maps
// (backward from the last chunk, then forward); replays.
inline bool pretokenize_chunked(int pattern, const uint8_t* text, int n,
                                const uint8_t* is_special_byte, int chunk_bytes,
                                uint8_t* piece_start, int lookback = kPretokLookback,
                                const UnicodeTables& ut = host_unicode_tables()) {
  const PretokTables* tabp = host_pretok_tables(pattern);
  if (!tabp) return false;
  if (n <= 0) return true;
  const PretokTables& tab = *tabp;
  const int chunk = chunk_bytes < 1 ? 1 : chunk_bytes;
  const int nch = (n + chunk - 1) / chunk;
  std::vector<uint8_t> cls(n), edge(nch);
  std::vector<uint16_t> key(n);
  std::vector<uint64_t> map(nch);
  for (int i = 0; i < n; ++i) cls[i] = byte_class_tab(tab, text, n, is_special_byte, i, ut);
  auto cnt = [&](int c) { return (c + 1) * chunk <= n ? chunk : n - c * chunk; };
  // edge[c] = T after chunk c.
  for (int c = 0; c < nch; ++c) map[c] = chunk_bwd_map(tab, &cls[c * chunk], cnt(c));
  bool ok = true;
  for (int c = 0; c < nch; ++c)
    ok &= edge_state(map.data(), c + 1, 1, nch - 1 - c, tab.bwd_live, tab.bwd_init, lookback, &edge[c]);
  if (!ok) {
    uint64_t acc = kMapIdentity;
    for (int c = nch - 1; c >= 0; --c) { edge[c] = map_apply(acc, tab.bwd_init); acc = map_then(acc, map[c]); }
  }
  for (int c = 0; c < nch; ++c) chunk_bwd_replay(tab, &cls[c * chunk], cnt(c), edge[c], &key[c * chunk]);
  // edge[c] = S before chunk c.
  for (int c = 0; c < nch; ++c) map[c] = chunk_fwd_map(tab, &key[c * chunk], cnt(c));
  ok = true;
  for (int c = 0; c < nch; ++c)
    ok &= edge_state(map.data(), c - 1, -1, c, tab.fwd_live, tab.fwd_init, lookback, &edge[c]);
  if (!ok) {
    uint64_t acc = kMapIdentity;
    for (int c = 0; c < nch; ++c) { edge[c] = map_apply(acc, tab.fwd_init); acc = map_then(acc, map[c]); }
  }
  for (int c = 0; c < nch; ++c)
    chunk_fwd_replay(tab, &key[c * chunk], cnt(c), edge[c], &piece_start[c * chunk], cnt(c));
  return true;
}

// ---------------------------------------------------------------------------------------------
// CUDA: one thread block per string.
#ifdef __CUDACC__

static __device__ const uint8_t kBbpeDeviceStage1[] = BBPE_UTAB_STAGE1_INIT;
static __device__ const uint8_t kBbpeDeviceStage2[] = BBPE_UTAB_STAGE2_INIT;
// The Unicode tables as __device__ const arrays (global memory, cached).
__device__ __forceinline__ UnicodeTables device_unicode_tables() {
  return UnicodeTables{kBbpeDeviceStage1, kBbpeDeviceStage2};
}

struct MapThenOp {
  __device__ __forceinline__ uint64_t operator()(uint64_t a, uint64_t b) const { return map_then(a, b); }
};

// BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>: thread k owns the ITEMS_PER_THREAD
// consecutive bytes [k * IPT, (k+1) * IPT) of a tile of BLOCK_THREADS * IPT bytes, i.e. exactly
// the chunks of pretokenize_chunked(chunk_bytes = IPT); a code point belongs to the thread that
// owns its lead byte. Steps (the same helpers as pretokenize_chunked):
//   0. the step tables of the pattern go to shared memory (copied from `prebuilt`, else filled);
//   1. byte_class(_tab) of each owned byte (reads up to 3 bytes either side, from text);
//   2. chunk_bwd_map; T after the chunk from the next chunks' maps (edge_state: usually the
//      very next map is constant), or, when some chunk of the tile needs more than
//      kPretokLookback maps, from an exclusive suffix scan of the maps (warp shuffles, see
//      suffix_state) applied to the state carried in from later tiles; chunk_bwd_replay;
//   3. chunk_fwd_map; S before the chunk from the previous chunks' maps (edge_state), or an
//      exclusive scan in thread order (cub::BlockScan) applied to the state carried in from
//      earlier tiles; chunk_fwd_replay writes the flags.
// Strings longer than a tile run step 2 over the tiles from the last to the first, parking
// T[i+1] in piece_start[i], then step 3 from the first tile to the last (a thread re-reads
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
    PretokTables tab;                       // 3,696 B
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
    const uint8_t t = map_apply(map_then(tmp.warp_excl[warp], exc), carry);
    const uint64_t agg = tmp.block_agg;
    __syncthreads();  // before warp_maps / warp_excl / block_agg are written again
    carry = map_apply(agg, carry);
    return t;
  }

  // Forward scan: S before this thread's chunk, given S before the tile (carry, updated to S
  // after the tile).
  __device__ __forceinline__ uint8_t prefix_state(uint64_t m, uint8_t& carry) {
    uint64_t excl, agg;
    MapScan(tmp.scan).ExclusiveScan(m, excl, kMapIdentity, MapThenOp(), agg);
    __syncthreads();  // before tmp.scan is used again
    const uint8_t s = map_apply(excl, carry);
    carry = map_apply(agg, carry);
    return s;
  }

  // prebuilt: the pattern's step tables, built on the host (the encode kernel gets them as a
  // kernel parameter) and copied here (3.7 KB), or nullptr to fill them here (about 400
  // entries, each evaluating the automata for every state).
  __device__ __forceinline__ bool run(int pattern, const uint8_t* text, int n, const uint8_t* sp,
                                      uint8_t* out, const UnicodeTables& ut,
                                      const PretokTables* prebuilt = nullptr) {
    if (pattern < 0 || pattern > 4) return false;
    if (prebuilt) {
      static_assert(sizeof(PretokTables) % 8 == 0, "copied as 8-byte words");
      const uint64_t* src = reinterpret_cast<const uint64_t*>(prebuilt);
      uint64_t* dst = reinterpret_cast<uint64_t*>(&tmp.tab);
      for (int k = threadIdx.x; k < (int)(sizeof(PretokTables) / 8); k += BLOCK_THREADS) dst[k] = src[k];
    } else {
      fill_tables(pattern, tmp.tab);
    }
    __syncthreads();
    if (n <= 0) return true;
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x;
    // key[i]: the class of byte i, then (after the backward replay) its forward-step key.
    uint16_t key[ITEMS_PER_THREAD];
    const int ntiles = (n + kTile - 1) / kTile;
    uint8_t carry = tab.bwd_init;
    for (int tile = ntiles - 1; tile >= 0; --tile) {
      const int base = tile * kTile + k * ITEMS_PER_THREAD;
      const int live = live_chunks(n, tile);
#pragma unroll
      for (int i = 0; i < ITEMS_PER_THREAD; ++i)
        key[i] = base + i < n ? byte_class_tab(tab, text, n, sp, base + i, ut) : (uint8_t)C_NONE;
      // T after this chunk: from the maps of the next chunks (edge_state), else a block scan.
      const uint64_t m = chunk_bwd_map(tab, key, ITEMS_PER_THREAD);
      tmp.maps[k] = m;
      __syncthreads();
      uint8_t t_end = carry;
      const bool ok = k >= live || edge_state(tmp.maps, k + 1, 1, live - 1 - k, tab.bwd_live, carry,
                                              kPretokLookback, &t_end);
      const bool scan = __syncthreads_or(!ok);
      if (scan) t_end = suffix_state(m, carry);
      const uint8_t t_start = chunk_bwd_replay(tab, key, ITEMS_PER_THREAD, t_end, key);
      if (!scan && tile > 0) carry = hand_over(k == 0, t_start);
      if (ntiles > 1) {
#pragma unroll
        for (int i = 0; i < ITEMS_PER_THREAD; ++i)
          if (base + i < n) out[base + i] = (uint8_t)(key[i] & 15);  // T[i+1], parked
      }
    }
    carry = tab.fwd_init;
    for (int tile = 0; tile < ntiles; ++tile) {
      const int base = tile * kTile + k * ITEMS_PER_THREAD;
      const int live = live_chunks(n, tile);
      if (ntiles > 1) {  // (one tile: key still holds tile 0's keys)
#pragma unroll
        for (int i = 0; i < ITEMS_PER_THREAD; ++i)
          key[i] = base + i < n ? byte_class_tab(tab, text, n, sp, base + i, ut) * 16 + out[base + i] : 0;
      }
      // S before this chunk: from the maps of the chunks before it, else a block scan.
      const uint64_t m = chunk_fwd_map(tab, key, ITEMS_PER_THREAD);
      tmp.maps[k] = m;
      __syncthreads();
      uint8_t s0 = carry;
      const bool ok = k >= live || edge_state(tmp.maps, k - 1, -1, k, tab.fwd_live, carry,
                                              kPretokLookback, &s0);
      const bool scan = __syncthreads_or(!ok);
      if (scan) s0 = prefix_state(m, carry);
      const uint8_t s_end = chunk_fwd_replay(tab, key, ITEMS_PER_THREAD, s0, out + base, n - base);
      if (!scan && tile + 1 < ntiles) carry = hand_over(k == live - 1, s_end);
    }
    return true;
  }

  // The step tables evaluated here (no prebuilt copy): every pattern's automata, 60 KB of
  // machine code, kept out of line (the encode kernel always passes prebuilt tables).
  __device__ __noinline__ static void fill_tables(int pattern, PretokTables& tab) {
    for (int k = threadIdx.x; k < kTabEntries; k += BLOCK_THREADS) fill_pretok_table(pattern, tab, k);
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
};

// Marks piece starts of text[0..n) into piece_start[0..n) (see the top of this file). Any
// n >= 0 (n <= BLOCK_THREADS * ITEMS_PER_THREAD is one tile). Unknown pattern ids leave
// piece_start untouched and return false (uniformly). Launch with blockDim.x == BLOCK_THREADS.
template <int BLOCK_THREADS, int ITEMS_PER_THREAD>
__device__ __forceinline__ bool block_pretokenize(
    int pattern, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    const UnicodeTables& ut,
    typename BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>::TempStorage& tmp,
    const PretokTables* prebuilt = nullptr) {
  return BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>(tmp).run(pattern, text, n, is_special,
                                                                     piece_start, ut, prebuilt);
}

// Convenience form: the device Unicode tables and a static __shared__ TempStorage (about
// 4.2 KB), tiles of 4096 bytes by default (256x16, 512x8, 1024x4).
template <int BLOCK_THREADS, int ITEMS_PER_THREAD = (BLOCK_THREADS >= 4096 ? 1 : 4096 / BLOCK_THREADS)>
__device__ __forceinline__ bool block_pretokenize(int pattern, const uint8_t* text, int n,
                                                  const uint8_t* is_special, uint8_t* piece_start) {
  __shared__ typename BlockPretokenizer<BLOCK_THREADS, ITEMS_PER_THREAD>::TempStorage tmp;
  const UnicodeTables ut = device_unicode_tables();
  return block_pretokenize<BLOCK_THREADS, ITEMS_PER_THREAD>(pattern, text, n, is_special,
                                                            piece_start, ut, tmp);
}

#endif  // __CUDACC__

}  // namespace bbpe
