// Special tokens, the rules both executors share (BBPE_HD, as core/bpe_core.h): where a special
// matches the text (literally, or for SentencePiece models with a `▁` as a space), which
// positions can start one at all (SpecialStarts), and the leftmost-first choice among matches.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"

namespace bbpe {

// Special tokens, built by blockbpe_jax/tables.py.
struct SpecialView {
  const int32_t* offsets;  // [count + 1] into data; sorted longest first
  const uint8_t* data;
  const int32_t* ids;
  int32_t count;
};

// How many bytes of text[i..n) special k matches, or -1. With `escaped` (SentencePiece
// models, char_symbols.h), each `▁` (E2 96 81) of the special also matches a space:
// sentencepiece matches user-defined pieces in the normalized text, where spaces are `▁`.
BBPE_HD int special_text_len(const SpecialView& s, int k, const uint8_t* text, int n, int i,
                             bool escaped) {
  const uint8_t* d = s.data + s.offsets[k];
  const int len = s.offsets[k + 1] - s.offsets[k];
  if (len <= 0) return -1;
  int j = i;
  for (int q = 0; q < len; ++j) {
    if (j >= n) return -1;
    if (escaped && text[j] == ' ' && q + 2 < len && d[q] == 0xE2 && d[q + 1] == 0x96 &&
        d[q + 2] == 0x81) {
      q += 3;
    } else if (d[q] == text[j]) {
      ++q;
    } else {
      return -1;
    }
  }
  return j - i;
}

// Index of the allowed special token whose bytes start at text[i] (longest first), or -1.
// first_bytes (optional): each special's first byte, copied near the caller (SpecialStarts), so
// that the specials that cannot match are passed over without reading the table.
BBPE_HD int special_match_at(const SpecialView& s, const uint8_t* text, int n, int i,
                             bool escaped = false, const uint8_t* first_bytes = nullptr) {
  if (escaped) {
    for (int k = 0; k < s.count; ++k) {
      if (!first_bytes && s.offsets[k + 1] <= s.offsets[k]) continue;
      const uint8_t first = first_bytes ? first_bytes[k] : s.data[s.offsets[k]];  // (most fail here)
      if (first != text[i] && !(first == 0xE2 && text[i] == ' ')) continue;
      if (special_text_len(s, k, text, n, i, true) >= 0) return k;  // (-1 for an empty special)
    }
    return -1;
  }
  for (int k = 0; k < s.count; ++k) {
    if (first_bytes && first_bytes[k] != text[i]) continue;
    const int beg = s.offsets[k], len = s.offsets[k + 1] - beg;
    if (len <= 0 || i + len > n || s.data[beg] != text[i]) continue;
    bool same = true;
    for (int j = 1; same && j < len; ++j) same = s.data[beg + j] == text[i + j];
    if (same) return k;
  }
  return -1;
}

BBPE_HD int special_len(const SpecialView& s, int k) { return s.offsets[k + 1] - s.offsets[k]; }

// Which positions can start a special: the pair (text[i], text[i + 1]) must begin one. Most
// positions fail this test, before special_match_at scans the specials one by one (Gemma 3
// always matches its 165 user-defined pieces, 30 of them runs of `▁` that every space of the
// text would try). Exact: a position it rejects matches no special.
struct SpecialStarts {
  static constexpr int kSlots = 15;        // first bytes with their own set of second bytes
  static constexpr uint8_t kAlways = 0xFF;  // a first byte past those: always scanned
  static constexpr int kFirstBytes = 512;  // specials whose first byte is kept (all of them or none)
  uint8_t slot[256];                       // 0: no special starts with this byte
  uint32_t second[kSlots][8];              // slot s: the bytes that may follow, a 256-bit set
  uint8_t first[kFirstBytes];              // special k's first byte (0 for an empty one)
};

BBPE_HD bool is_escaped_space(const uint8_t* d, int q, int len) {  // `▁` at d[q] (char_symbols.h)
  return q + 2 < len && d[q] == 0xE2 && d[q + 1] == 0x96 && d[q + 2] == 0x81;
}

// f(first, second) for every pair of text bytes that special k can start with (second -1: any
// byte, or the text's end), as special_text_len matches it: literally, or with `escaped`, a
// `▁` of the special as one space.
template <class F>
BBPE_HD void special_start_pairs(const SpecialView& s, int k, bool escaped, F&& f) {
  const uint8_t* d = s.data + s.offsets[k];
  const int len = s.offsets[k + 1] - s.offsets[k];
  if (len <= 0) return;
  const auto from = [&](int first, int q) {  // the text's second byte meets the special's d[q]
    if (q >= len) {
      f(first, -1);
    } else {
      f(first, d[q]);
      if (escaped && is_escaped_space(d, q, len)) f(first, ' ');
    }
  };
  from(d[0], 1);
  if (escaped && is_escaped_space(d, 0, len)) from(' ', 3);
}

// Slots for the first bytes marked nonzero, in byte order (build_special_starts' steps).
BBPE_HD void assign_special_slots(SpecialStarts& t) {
  int next = 0;
  for (int b = 0; b < 256; ++b)
    if (t.slot[b]) t.slot[b] = next < SpecialStarts::kSlots ? (uint8_t)++next : SpecialStarts::kAlways;
}

// or_word(word, bits) ORs bits into one of t.second's words (atomically on the GPU).
template <class Or>
BBPE_HD void mark_special_start(SpecialStarts& t, int first, int second, Or&& or_word) {
  const int s = t.slot[first];
  if (s == 0 || s == SpecialStarts::kAlways) return;
  if (second < 0) {
    for (int w = 0; w < 8; ++w) or_word(t.second[s - 1][w], 0xFFFFFFFFu);
  } else {
    or_word(t.second[s - 1][second >> 5], 1u << (second & 31));
  }
}

BBPE_HD bool special_may_start(const SpecialStarts& t, const uint8_t* text, int n, int i) {
  const int s = t.slot[text[i]];
  if (s == 0) return false;
  if (s == SpecialStarts::kAlways || i + 1 >= n) return true;
  const uint8_t b = text[i + 1];
  return (t.second[s - 1][b >> 5] >> (b & 31)) & 1u;
}

BBPE_HD uint8_t special_first_byte(const SpecialView& s, int k) {
  return s.offsets[k + 1] > s.offsets[k] ? s.data[s.offsets[k]] : 0;
}

// special_match_at with the table's help: what both executors call at every position.
BBPE_HD int special_match_with(const SpecialStarts& t, const SpecialView& s, const uint8_t* text, int n, int i,
                               bool escaped) {
  if (!special_may_start(t, text, n, i)) return -1;
  return special_match_at(s, text, n, i, escaped, s.count <= SpecialStarts::kFirstBytes ? t.first : nullptr);
}

// The table, built by the thread `self` of `stride` threads taking every stride-th special:
// one thread on the CPU (build_special_starts below); a block's threads on the GPU, with its
// barrier as `sync` and an atomic OR as `or_word` (cuda/block_begin.cuh).
template <class Sync, class Or>
BBPE_HD void build_special_starts(const SpecialView& s, bool escaped, SpecialStarts& t, int self, int stride,
                                  Sync&& sync, Or&& or_word) {
  for (int b = self; b < 256; b += stride) t.slot[b] = 0;
  for (int w = self; w < SpecialStarts::kSlots * 8; w += stride) t.second[w / 8][w % 8] = 0;
  sync();
  for (int k = self; k < s.count; k += stride)
    special_start_pairs(s, k, escaped, [&](int first, int) { t.slot[first] = 1; });
  sync();
  if (self == 0) assign_special_slots(t);
  sync();
  for (int k = self; k < s.count; k += stride)
    special_start_pairs(s, k, escaped, [&](int first, int second) { mark_special_start(t, first, second, or_word); });
  if (s.count <= SpecialStarts::kFirstBytes)
    for (int k = self; k < s.count; k += stride) t.first[k] = special_first_byte(s, k);
  sync();
}

inline void build_special_starts(const SpecialView& s, bool escaped, SpecialStarts& t) {
  build_special_starts(s, escaped, t, 0, 1, [] {}, [](uint32_t& word, uint32_t bits) { word |= bits; });
}

// Bytes of text that special k, matched at i, covers (an escaped match's length depends on
// the text).
BBPE_HD int matched_len(const SpecialView& s, int k, const uint8_t* text, int n, int i, bool escaped) {
  return escaped ? special_text_len(s, k, text, n, i, true) : special_len(s, k);
}

// Marks the match at i (match[i] = its special) as accepted: is_special 2 at its first byte,
// 1 at its others. Returns its length.
BBPE_HD int accept_match_at(const SpecialView& s, const int32_t* match, int n, int i, uint8_t* is_special,
                            const uint8_t* text, bool escaped) {
  const int len = matched_len(s, match[i], text, n, i, escaped);
  is_special[i] = 2;
  for (int j = 1; j < len; ++j) is_special[i + j] = 1;
  return len;
}

// Whether another match starts inside the bytes of the match at i: only then can leftmost
// first reject a match (when no match does, every match counts).
BBPE_HD bool match_holds_another(const SpecialView& s, const int32_t* match, int n, int i, const uint8_t* text,
                                 bool escaped) {
  const int len = matched_len(s, match[i], text, n, i, escaped);
  for (int j = i + 1; j < i + len; ++j)
    if (match[j] >= 0) return true;
  return false;
}

// Leftmost-first resolution of special-token matches. match[i] is special_match_at(..., i) for
// every i (or -1). Walking left to right, a match counts unless it starts inside an earlier
// one that counted. Writes is_special[i] = 2 at the first byte of each accepted match and 1 at
// its other bytes; other entries are left as they are (callers zero them first). `text` and
// `escaped` as for special_match_at (an escaped match's length depends on the text).
BBPE_HD void accept_special_matches(const SpecialView& s, const int32_t* match, int n,
                                    uint8_t* is_special, const uint8_t* text = nullptr,
                                    bool escaped = false) {
  for (int i = 0; i < n;) {
    if (match[i] < 0) { ++i; continue; }
    i += accept_match_at(s, match, n, i, is_special, text, escaped);
  }
}

}  // namespace bbpe
