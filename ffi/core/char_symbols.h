// SentencePiece-style BPE (Llama 2, Mistral v1-v7, Gemma): the merges run over characters,
// not bytes. The rules below are shared by both executors (BBPE_HD); blockbpe_jax/char_bpe.py
// builds the tables and checks, at load, the properties of the vocabulary they rely on.
//
//   Initial symbols. Each character of the text whose one-character piece is in the
//   vocabulary becomes that piece (a space is the piece of `▁`: sentencepiece escapes
//   whitespace before it merges). Any other character becomes the byte-fallback pieces
//   <0xXX> of its bytes; they never merge (no pair holds them), which is exact because every
//   character of every piece is itself a piece (checked at load). A byte that is not part of
//   valid UTF-8 is one U+FFFD character, as sentencepiece's normalizer makes it, or its own
//   byte-fallback piece when the vocabulary has no U+FFFD.
//   The dummy prefix: a `▁` before the text (sentencepiece's add_dummy_prefix), or before
//   every segment between specials (HF's Prepend normalizer, which normalizes each segment),
//   or only where the segment does not start with a space (HF's Metaspace): prefix_before.
//   Merges: the pair table and the passes of bpe_core.h, a pair's rank being 2 x its piece's
//   place in score order (sentencepiece merges the highest score first, leftmost on ties) or
//   in the merges list, + the first-only flag (bpe_core.h: runs that grow from the left).
//   Words: a merge can join a `▁` to the symbol before it only if some piece holds that
//   symbol's character followed by `▁` (the "joiners": `▁` itself in Mistral's vocabularies,
//   `▁` and `>` in Gemma's, from `>▁</`; listed at load), so every `▁` after any other symbol
//   starts a segment and the passes merge the words side by side instead of the whole text as
//   one segment. A vocabulary with more joiners than the table holds merges the text whole.
//   Whole words: a segment (a word, or the text between specials) merges on its own, so one
//   whose symbols are those of a piece that merges back into itself encodes to that piece.
//   The piece table holds such pieces (the "self-encoding" ones, found at load by running this
//   executor on each piece's text: blockbpe_jax/tables/whole_words.py) keyed by their token bytes;
//   lookup_word hashes a segment's symbols' token bytes and, on a hit, the segment is that
//   one token, unmerged. A hit is exact because the loader turns the rule on only where a
//   segment's token bytes determine its symbols (every character's piece spells that
//   character, `▁` a space that the text's ' ', U+2581 and the dummy prefix all map to, U+FFFD
//   the replacement piece, each byte-fallback piece its byte): then two segments with the
//   same bytes have the same symbols, hence the same merges.
//   Specials: sentencepiece matches user-defined pieces in the normalized text, where spaces
//   are already `▁`; with escaped_specials a `▁` of a special matches a space too (bpe_core.h,
//   special_text_len), so Gemma's whitespace-run pieces match runs of spaces.
//   Runs: the pieces made of one repeated character (`▁▁`, `▁▁▁`, ...) can be ranked so that
//   merging one of them makes a pair that ranks before the pairs still waiting (sentencepiece
//   gives them one score and breaks the tie by position; HF files converted from scores order
//   them by ids). Passes would then differ from the reference's one-merge-at-a-time order, so
//   those merges are left out of the pair table and, after every other merge (the loader
//   checks that they rank last and touch nothing else), each run of single run characters is
//   split as the reference splits it: a run of m >= T characters starts with a P-character
//   piece and goes on as a run of m - P, shorter runs come from a table. The loader derives
//   T, P and the table by replaying the reference order (blockbpe_jax/char_bpe.py).
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/bpe_core.h"
#include "core/utf8.h"

namespace bbpe {

// The `symbols` attribute: what the merges start from.
constexpr int kSymbolsBytes = 0;  // byte-level BPE (tiktoken, HF ByteLevel)
constexpr int kSymbolsChars = 1;  // SentencePiece-style BPE (this file)

// The char_table operand, int32 (blockbpe_jax/tables.py writes it):
//   [0, 128)        piece id of each ASCII character (-1: none; ' ' -> the piece of `▁`)
//   [128]           piece id of U+FFFD, or -1
//   [129]           piece id of the dummy prefix `▁`, or -1 (no dummy prefix)
//   [130]           where the prefix goes: kPrefix* bits
//   [131]           piece id that starts a word (`▁`), or -1 (segments are the text between
//                   specials)
//   [132]           the run character's piece id (with a run rule)
//   [133]           the piece id that starts a run of T or more characters
//   [134]           1: a `▁` (E2 96 81) in a special token also matches a space
//   [135, 143)      the joiners: piece ids after which a `▁` does not start a word, -1 after
//                   the last
//   [143]           1: the piece table holds whole words (lookup_word), else 0
//   [144]           the id of the byte-fallback piece <0x00> where the 256 byte pieces' ids
//                   run on from it and no merge holds one (is_bound), else -1
//   [145, 161)      the isolated characters' piece ids (is_isolated), -1 after the last
//   [161 + m*W + k] for m in [0, T): the ids of a run of m characters, -1 after the last
// T, P (the length of piece [133]) and W are attributes, not table entries: the host checks
// them against the operand's size without reading device memory. T = 0: no run rule.
constexpr int kCharTablePrefix = 129;
constexpr int kCharTableEscaped = 134;
constexpr int kCharTableJoiners = 135;
constexpr int kMaxJoiners = 8;
constexpr int kCharTableWholeWords = kCharTableJoiners + kMaxJoiners;
constexpr int kCharTableBounds = kCharTableWholeWords + 1;
constexpr int kCharTableIsolated = kCharTableBounds + 1;
constexpr int kMaxIsolated = 16;
constexpr int kCharTableHeader = kCharTableIsolated + kMaxIsolated;
constexpr int32_t kPrefixEverySegment = 1;   // also after each special token (else: text start)
constexpr int32_t kPrefixUnlessSpace = 2;    // not where the segment starts with ' ' or `▁`
constexpr int32_t kPrefixBeforeSpecial = 4;  // at the text start even before a special token
struct CharTable {  // the operand and its attributes, as the FFI handler checked them
  const int32_t* data;
  int32_t run_long, run_step, run_width;
};
struct CharView {  // the same, read (char_view): what the rules below use
  const int32_t* ascii_ids;
  int32_t replacement_id;
  int32_t prefix_id;
  int32_t prefix_rule;
  int32_t word_start_id;
  int32_t run_id;        // the run character's piece
  int32_t run_long_id;   // piece that starts a run of T or more
  int32_t run_long;      // T (0: no run rule)
  int32_t run_step;      // P
  int32_t run_width;     // W
  const int32_t* run_table;  // [T][W]
  const int32_t* joiners;    // [kMaxJoiners]
  bool whole_words;          // segments are looked up whole first (lookup_word)
  int32_t bounds_base;       // <0x00>'s id where byte pieces are words of their own, else -1
  const int32_t* isolated;   // [kMaxIsolated]
};
BBPE_HD CharView char_view(const CharTable& t) {
  const int32_t* c = t.data;
  return CharView{c, c[128], c[kCharTablePrefix], c[130], c[131], c[132], c[133], t.run_long, t.run_step,
                  t.run_width, c + kCharTableHeader, c + kCharTableJoiners, c[kCharTableWholeWords] == 1,
                  c[kCharTableBounds], c + kCharTableIsolated};
}

// Whether a `▁` of a special token also matches a space (special_match_at's `escaped`).
BBPE_HD bool specials_escaped(const CharTable& t) { return t.data[kCharTableEscaped] == 1; }

// Whether a dummy-prefix `▁` goes right before byte i of text[0..n) (specials marked in sp;
// nullptr: a text without specials, as utf8.h reads it too).
BBPE_HD bool prefix_before(const CharView& c, const uint8_t* text, int n, const uint8_t* sp, int i) {
  if (c.prefix_id < 0 || (sp && sp[i] == 1)) return false;
  if (i == 0) {
    if (sp && sp[0] && !(c.prefix_rule & kPrefixBeforeSpecial)) return false;
  } else if (!(c.prefix_rule & kPrefixEverySegment) || !sp || !sp[i - 1] || sp[i]) {
    return false;
  }
  const bool space = text[i] == ' ' || (i + 2 < n && text[i] == 0xE2 && text[i + 1] == 0x96 &&
                                        text[i + 2] == 0x81 && !(sp && (sp[i + 1] || sp[i + 2])));
  return !(space && (c.prefix_rule & kPrefixUnlessSpace));
}

// What the initial-symbol step records at a byte before the tokens are made: the piece id of
// the character that starts there (-1: not a piece), or kNotLead.
constexpr int32_t kNotLead = -2;

BBPE_HD int32_t char_at(const VocabView& v, const CharView& c, const uint8_t* text, int n,
                        const uint8_t* sp, int i) {
  uint32_t cp;
  if (sp && sp[i]) return kNotLead;
  const int k = utf8_decode(text, n, sp, i, &cp);
  if (k == 0) return kNotLead;
  if (k == 1) return c.ascii_ids[text[i]];
  return lookup_piece(v, text + i, k);  // the piece table holds the one-character pieces
}

// Whether the symbols at byte i (not a special's) start a segment: at the text's start and after
// a special, except where a dummy prefix goes before the byte (that token starts it instead).
BBPE_HD bool starts_char_segment(const CharView& c, const uint8_t* text, int n, const uint8_t* sp, int i) {
  return (i == 0 || sp[i - 1]) && !prefix_before(c, text, n, sp, i);
}

// The symbol of a byte that starts no valid UTF-8 sequence: U+FFFD's piece (as the reference
// reads the text), else the byte's fallback piece.
BBPE_HD int32_t invalid_byte_symbol(const VocabView& v, const CharView& c, uint8_t byte) {
  return c.replacement_id >= 0 ? c.replacement_id : v.byte_ids[byte];
}

// The working token at byte i (chars[j] = char_at(j) for every j): a character's piece at its
// lead byte (kDeleted at its other bytes), byte-fallback pieces, specials as in initial_token.
// Segments start at the text's start and after specials, except where a prefix token goes
// before the byte: that token starts the segment instead.
BBPE_HD int32_t initial_char_token(const VocabView& v, const CharView& c, const SpecialView& s,
                                   const uint8_t* text, int n, const uint8_t* sp, int32_t match,
                                   const int32_t* chars, int i) {
  if (sp[i] == 2) return s.ids[match] | kSegStart;
  if (sp[i]) return kDeleted;
  const bool seg = starts_char_segment(c, text, n, sp, i);
  const int32_t fallback = v.byte_ids[text[i]];
  int32_t id;
  if (chars[i] != kNotLead) {
    id = chars[i] >= 0 ? chars[i] : fallback;
  } else {
    const int lead = utf8_lead_of(text, n, sp, i);
    if (lead >= 0 && chars[lead] >= 0) return kDeleted;
    id = lead >= 0 ? fallback : invalid_byte_symbol(v, c, text[i]);
  }
  return id | (seg ? kSegStart : 0);
}

// The initial symbols of the character at byte i of text[0..n) (no special byte at i; sp as
// for prefix_before), for a walk over the text from character to character: the character's
// piece, or the byte-fallback pieces of its bytes when it has none, or, for a byte that starts
// no valid sequence, the piece of U+FFFD (else its byte-fallback piece). Writes them to
// sym[0..*count) and returns the bytes the character covers (1..4). The walk makes the symbols
// that char_at and initial_char_token make byte by byte: a character's continuation bytes are
// those a walk steps over, and a byte the walk lands on that starts no valid sequence is one
// that no earlier lead reaches (utf8_lead_of's -1).
BBPE_HD int char_symbols_at(const VocabView& v, const CharView& c, const uint8_t* text, int n, const uint8_t* sp,
                            int i, int32_t* sym, int* count) {
  const int32_t piece = char_at(v, c, text, n, sp, i);
  *count = 1;
  if (piece == kNotLead) {
    sym[0] = invalid_byte_symbol(v, c, text[i]);
    return 1;
  }
  const uint8_t b0 = text[i];
  const int len = b0 < 0x80 ? 1 : (b0 < 0xE0 ? 2 : (b0 < 0xF0 ? 3 : 4));  // (a valid sequence's)
  if (piece >= 0) {
    sym[0] = piece;
    return len;
  }
  for (int k = 0; k < len; ++k) sym[k] = v.byte_ids[text[i + k]];
  *count = len;
  return len;
}

// Word bounds. No merge crosses a point where the symbols on either side can never be in one
// piece, so each side merges on its own, and the text cut there into words (segments) encodes
// to the same tokens. Three such points are known at load (blockbpe_jax/tables/word_bounds.py):
//   a `▁` after a symbol that no piece joins to a following `▁` (the joiners): the words of
//   sentencepiece's own pre-split, the most common;
//   either side of a byte-fallback piece, where no merge holds one (sentencepiece needs every
//   character of a piece to be a piece, so a character without one is bytes that never merge;
//   Llama 2's and Mistral's newline is one): is_bound, the id alone;
//   where an isolated character's symbol meets a different one: an ASCII character every piece
//   holding which is a run of it (Gemma 4's newline and tab, Llama 2's digits), and whose piece
//   no other character shares.

// Whether `id` is a byte-fallback piece that no merge holds.
BBPE_HD bool is_bound(const CharView& c, int32_t id) {
  return c.bounds_base >= 0 && (uint32_t)(id - c.bounds_base) < 256u;
}

// Whether `id` is an isolated character's piece (all entries compared: no chain of reads).
BBPE_HD bool is_isolated(const CharView& c, int32_t id) {
  bool found = false;
  for (int k = 0; k < kMaxIsolated; ++k) found |= c.isolated[k] == id;
  return found && id >= 0;
}

// Whether a `▁` symbol `at` after the symbol `before` starts a word (the joiners' rule).
BBPE_HD bool space_starts_word(const CharView& c, int32_t before, int32_t at) {
  if (c.word_start_id < 0 || at != c.word_start_id) return false;
  for (int k = 0; k < kMaxJoiners && c.joiners[k] >= 0; ++k)
    if (c.joiners[k] == before) return false;
  return true;
}

// Whether the symbol `at` after the symbol `before` (token ids) starts a word: one of the bounds
// above, the isolation of either symbol given (is_isolated's answers, which the piece kernel
// reads off their bytes).
BBPE_HD bool word_starts_between(const CharView& c, int32_t before, int32_t at, bool before_isolated,
                                 bool at_isolated) {
  return space_starts_word(c, before, at) || is_bound(c, before) || is_bound(c, at) ||
         (before != at && (before_isolated || at_isolated));
}

// The symbol of ASCII byte b where no special covers it, as char_symbols_at makes it: its piece,
// else its byte piece. The piece kernel's ASCII runs read it from a table of the 128.
BBPE_HD int32_t ascii_symbol(const VocabView& v, const CharView& c, uint8_t b) {
  const int32_t piece = c.ascii_ids[b];
  return piece >= 0 ? piece : v.byte_ids[b];
}

// The same rule on facts known per symbol, for a walk whose symbols come from a small set it
// looks up (the piece kernel's ASCII bytes): symbol_facts once per symbol of the set, then
// word_starts_between_facts(before, its facts, at, its facts) == word_starts_between.
enum : uint8_t { kFactWordStart = 1, kFactJoiner = 2, kFactBound = 4, kFactIsolated = 8 };
BBPE_HD uint8_t symbol_facts(const CharView& c, int32_t id, bool isolated) {
  uint8_t facts = isolated ? kFactIsolated : 0;
  if (c.word_start_id >= 0 && id == c.word_start_id) facts |= kFactWordStart;
  for (int k = 0; k < kMaxJoiners && c.joiners[k] >= 0; ++k)
    if (c.joiners[k] == id) facts |= kFactJoiner;
  if (is_bound(c, id)) facts |= kFactBound;
  return facts;
}
BBPE_HD bool word_starts_between_facts(int32_t before, uint8_t before_facts, int32_t at, uint8_t at_facts) {
  return ((at_facts & kFactWordStart) && !(before_facts & kFactJoiner)) || ((before_facts | at_facts) & kFactBound) ||
         (before != at && ((before_facts | at_facts) & kFactIsolated));
}

// Token i (of the dense symbols) starts a word.
BBPE_HD bool starts_word(const CharView& c, const int32_t* tok, int i) {
  if (i == 0) return false;
  const int32_t before = token_id(tok[i - 1]), at = token_id(tok[i]);
  return word_starts_between(c, before, at, is_isolated(c, before), is_isolated(c, at));
}

// The piece whose token bytes the symbols tok[0..m) spell, when the piece table holds it (a
// self-encoding piece: the segment's encoding), else -1. The bytes are read from token_data
// into a short key or, past kShortKeyLen bytes, hashed and compared again on a hash hit
// (core/bpe_core.h, lookup_piece's two kinds of keys); a key longer than max_piece_len misses.
BBPE_HD int32_t lookup_word(const VocabView& v, const int32_t* tok, int m) {
  uint32_t h = kPieceHashSeed;
  ShortKey key{0, 0};
  int n = 0;
  for (int k = 0; k < m; ++k) {
    const int32_t id = token_id(tok[k]);
    const int32_t from = v.token_offsets[id], to = v.token_offsets[id + 1];
    if (n + (to - from) > v.max_piece_len) return -1;
    for (int32_t b = from; b < to; ++b, ++n) {
      const uint8_t byte = v.token_data[b];
      h = piece_hash_step(h, byte);
      if (n < kShortKeyLen) short_key_put(key, n, byte);
    }
  }
  if (n <= kShortKeyLen) return lookup_short_key(v, key, n);
  return lookup_long_key(v, h, n, [&](const uint8_t* q) {
    int diff = 0;
    for (int k = 0; k < m; ++k) {
      const int32_t id = token_id(tok[k]);
      for (int32_t b = v.token_offsets[id]; b < v.token_offsets[id + 1]; ++b) diff |= v.token_data[b] ^ *q++;
    }
    return diff == 0;
  });
}

// A run starts at token i: a single run character that does not continue a run.
BBPE_HD bool starts_run(const CharView& c, const int32_t* tok, int i) {
  return c.run_long > 0 && token_id(tok[i]) == c.run_id &&
         (i == 0 || starts_segment(tok[i]) || token_id(tok[i - 1]) != c.run_id);
}
// Length of the run that starts at token i (of n).
BBPE_HD int run_length(const CharView& c, const int32_t* tok, int i, int n) {
  int j = i + 1;
  while (j < n && token_id(tok[j]) == c.run_id && !starts_segment(tok[j])) ++j;
  return j - i;
}

// Rewrites the run of m single run characters in tok[0..m) as its pieces; returns how many.
BBPE_HD_OUTLINE int merge_run(const CharView& c, int32_t* tok, int m) {
  const int32_t flag = tok[0] & kSegStart;
  const int room = m;  // (a table of the loader's never needs more; a hand-made one gets cut)
  int out = 0;
  for (; m >= c.run_long; m -= c.run_step) tok[out++] = c.run_long_id;
  const int32_t* row = c.run_table + (size_t)m * c.run_width;
  for (int k = 0; k < c.run_width && row[k] >= 0 && out < room; ++k) tok[out++] = row[k];
  tok[0] |= flag;
  return out;
}

// The runs of one segment's tokens tok[0..m), after its merges, rewritten as the reference
// splits them (merge_run); returns the segment's new count. A run never crosses a segment start
// (starts_run, run_length), so the segments' runs are the text's.
BBPE_HD int merge_segment_runs(const CharView& c, int32_t* tok, int m) {
  if (c.run_long == 0) return m;
  int out = 0;
  for (int i = 0; i < m;) {
    const int len = starts_run(c, tok, i) ? run_length(c, tok, i, m) : 1;
    for (int k = 0; k < len; ++k) tok[out + k] = tok[i + k];
    out += len > 1 ? merge_run(c, tok + out, len) : 1;
    i += len;
  }
  return out;
}

}  // namespace bbpe
