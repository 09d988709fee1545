// SentencePiece-style BPE (Llama 2, Mistral v1-v7, Gemma): the merges run over characters,
// not bytes. The rules below are shared by both executors (BBPE_HD); blockbpe_jax/sentencepiece.py
// builds the tables and checks, at load, the properties of the vocabulary they rely on.
//
//   Initial symbols. Each character of the text whose one-character piece is in the
//   vocabulary becomes that piece (a space is the piece of `▁`: sentencepiece escapes
//   whitespace before it merges). Any other character becomes the byte-fallback pieces
//   <0xXX> of its bytes; they never merge (no pair holds them), which is exact because every
//   character of every piece is itself a piece (checked at load). A byte that is not part of
//   valid UTF-8 is one U+FFFD character, as sentencepiece's normalizer makes it, or its own
//   byte-fallback piece when the vocabulary has no U+FFFD.
//   The dummy prefix: a `▁` before a non-empty text (add_dummy_prefix).
//   Merges: the pair table and the passes of bpe_core.h, a pair's rank being its piece's
//   place in score order (sentencepiece merges the highest score first, leftmost on ties).
//   Words: where no piece has a `▁` after another character (sentencepiece's
//   split_by_whitespace vocabularies; checked at load), no merge crosses into a `▁` that
//   follows another symbol, so each such `▁` starts a segment and the passes merge the words
//   side by side instead of the whole text as one segment.
//   Runs: the pieces made of one repeated character (`▁▁`, `▁▁▁`, ...) share one score, the
//   lowest of all, and sentencepiece breaks that tie by position. They are left out of the
//   pair table and applied after every other merge, to each run of single `▁` symbols, as
//   sentencepiece's leftmost-first order does (merge_run).
#pragma once

#include <cstdint>

#include "bbpe_hd.h"
#include "bpe_core.h"
#include "pretokenize.h"

namespace bbpe {

// The `symbols` attribute: what the merges start from.
constexpr int kSymbolsBytes = 0;  // byte-level BPE (tiktoken, HF ByteLevel)
constexpr int kSymbolsChars = 1;  // SentencePiece-style BPE (this file)

// The char_table operand, int32 (blockbpe_jax/tables.py writes it):
//   [0, 128)        piece id of each ASCII character (-1: none; ' ' -> the piece of `▁`)
//   [128]           piece id of U+FFFD, or -1
//   [129]           piece id of the dummy prefix `▁`, or -1 (no dummy prefix)
//   [130]           piece id that starts a word (`▁`), or -1 (segments are the text between
//                   specials)
//   [131]           run_max: the longest run piece (0: no run pieces)
//   [132 + k]       for k in [0, run_max]: id of the piece of k run characters, or -1
//                   ([132 + 1] is the run character's own piece)
constexpr int kCharTableHeader = 132;
struct CharView {
  const int32_t* ascii_ids;
  int32_t replacement_id;
  int32_t prefix_id;
  int32_t word_start_id;
  int32_t run_max;
  const int32_t* run_ids;
};

// What the initial-symbol step records at a byte before the tokens are made: the piece id of
// the character that starts there (-1: not a piece), or kNotLead.
constexpr int32_t kNotLead = -2;

BBPE_HD int32_t char_at(const VocabView& v, const CharView& c, const uint8_t* text, int n,
                        const uint8_t* sp, int i) {
  uint32_t cp;
  if (sp[i]) return kNotLead;
  const int k = utf8_decode(text, n, sp, i, &cp);
  if (k == 0) return kNotLead;
  if (k == 1) return c.ascii_ids[text[i]];
  return lookup_piece(v, text + i, k);  // the piece table holds the one-character pieces
}

// The lead byte of the valid character that continuation byte i belongs to, or -1.
BBPE_HD int char_lead(const uint8_t* text, int n, const uint8_t* sp, int i) {
  if ((text[i] & 0xC0) != 0x80) return -1;
  for (int d = 1; d <= 3 && i - d >= 0; ++d) {
    const int j = i - d;
    if (sp[j]) return -1;
    if ((text[j] & 0xC0) != 0x80) {
      uint32_t cp;
      return utf8_decode(text, n, sp, j, &cp) > d ? j : -1;
    }
  }
  return -1;
}

// The working token at byte i (chars[j] = char_at(j) for every j): a character's piece at its
// lead byte (kDeleted at its other bytes), byte-fallback pieces, specials as in initial_token.
// Segments start after specials, and at the text's start when there is no dummy prefix (the
// prefix token starts the first segment instead).
BBPE_HD int32_t initial_char_token(const VocabView& v, const CharView& c, const SpecialView& s,
                                   const uint8_t* text, int n, const uint8_t* sp, int32_t match,
                                   const int32_t* chars, int i) {
  if (sp[i] == 2) return s.ids[match] | kSegStart;
  if (sp[i]) return kDeleted;
  const bool seg = i == 0 ? c.prefix_id < 0 : sp[i - 1] != 0;
  const int32_t fallback = v.byte_ids[text[i]];
  int32_t id;
  if (chars[i] != kNotLead) {
    id = chars[i] >= 0 ? chars[i] : fallback;
  } else {
    const int lead = char_lead(text, n, sp, i);
    if (lead >= 0 && chars[lead] >= 0) return kDeleted;
    id = lead >= 0 || c.replacement_id < 0 ? fallback : c.replacement_id;
  }
  return id | (seg ? kSegStart : 0);
}

// Token i (of the dense symbols) starts a word: a `▁` after another symbol.
BBPE_HD bool starts_word(const CharView& c, const int32_t* tok, int i) {
  return i > 0 && c.word_start_id >= 0 && token_id(tok[i]) == c.word_start_id &&
         token_id(tok[i - 1]) != c.word_start_id;
}

// A run starts at token i: a single run character that does not continue a run.
BBPE_HD bool starts_run(const CharView& c, const int32_t* tok, int i) {
  return c.run_max > 0 && token_id(tok[i]) == c.run_ids[1] &&
         (i == 0 || starts_segment(tok[i]) || token_id(tok[i - 1]) != c.run_ids[1]);
}
// Length of the run that starts at token i (of n).
BBPE_HD int run_length(const CharView& c, const int32_t* tok, int i, int n) {
  int j = i + 1;
  while (j < n && token_id(tok[j]) == c.run_ids[1] && !starts_segment(tok[j])) ++j;
  return j - i;
}

// Merges a run of m single run characters in tok[0..m) as sentencepiece does: it takes the
// leftmost mergeable pair first, so a piece grows from the left as long as the next symbol
// extends it to a piece, and a piece completed to its right can join the one before it
// (16 x `▁` in Mistral's vocabulary, which has runs of 1-14 and 16: 14 + 1 + 1 -> 14 + 2 ->
// 16). A stack of piece lengths in tok[0..top) replays that order. Returns the token count.
BBPE_HD_OUTLINE int merge_run(const CharView& c, int32_t* tok, int m) {
  const int32_t flag = tok[0] & kSegStart;
  int top = 0;
  for (int r = 0; r < m; ++r) {
    int32_t len = 1;
    while (top > 0) {
      const int32_t sum = tok[top - 1] + len;
      if (sum > c.run_max || c.run_ids[sum] < 0) break;
      len = sum;
      --top;
    }
    tok[top++] = len;
  }
  for (int k = 0; k < top; ++k) tok[k] = c.run_ids[tok[k]];
  tok[0] |= flag;
  return top;
}

}  // namespace bbpe
