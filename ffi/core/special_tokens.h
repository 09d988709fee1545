// Special tokens, the rules both executors share (BBPE_HD, as core/bpe_core.h): where a special
// matches the text (literally, or for SentencePiece models with a `▁` as a space), which
// positions can start one at all and the specials that are runs of one character
// (SpecialStarts), and the leftmost-first choice among matches, cluster by cluster.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"

namespace bbpe {

struct SpecialStarts;

// Special tokens, built by blockbpe_jax/tables/build.py.
struct SpecialView {
  const int32_t* offsets;  // [count + 1] into data; sorted longest first
  const uint8_t* data;
  const int32_t* ids;
  int32_t count;
  const SpecialStarts* starts = nullptr;  // their SpecialStarts, built at load (the special_starts operand)
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
// that the specials that cannot match are passed over without reading the table. text_len
// (optional): where a special matches, the bytes of text it covers.
BBPE_HD int special_match_at(const SpecialView& s, const uint8_t* text, int n, int i,
                             bool escaped = false, const uint8_t* first_bytes = nullptr,
                             int* text_len = nullptr) {
  if (escaped) {
    for (int k = 0; k < s.count; ++k) {
      if (!first_bytes && s.offsets[k + 1] <= s.offsets[k]) continue;
      const uint8_t first = first_bytes ? first_bytes[k] : s.data[s.offsets[k]];  // (most fail here)
      if (first != text[i] && !(first == 0xE2 && text[i] == ' ')) continue;
      const int len = special_text_len(s, k, text, n, i, true);  // (-1 for an empty special)
      if (len >= 0) {
        if (text_len) *text_len = len;
        return k;
      }
    }
    return -1;
  }
  for (int k = 0; k < s.count; ++k) {
    if (first_bytes && first_bytes[k] != text[i]) continue;
    const int beg = s.offsets[k], len = s.offsets[k + 1] - beg;
    if (len <= 0 || i + len > n || s.data[beg] != text[i]) continue;
    bool same = true;
    for (int j = 1; same && j < len; ++j) same = s.data[beg + j] == text[i + j];
    if (same) {
      if (text_len) *text_len = len;
      return k;
    }
  }
  return -1;
}

BBPE_HD int special_len(const SpecialView& s, int k) { return s.offsets[k + 1] - s.offsets[k]; }

// Which positions can start a special: the pair (text[i], text[i + 1]) must begin one. Most
// positions fail this test, before special_match_at scans the specials one by one (Gemma 3
// always matches its 165 user-defined pieces, 30 of them runs of `▁` that every space of the
// text would try). Exact: a position it rejects matches no special.
//
// Runs: where every special that a first byte can start is a run of one unit (Gemma 3's runs of
// 1..31 newlines, 1..31 tabs and 2..31 `▁`), the special matched at a position depends only on
// how many units start there. run_special holds such a slot's special of each unit count, and
// run_match_at counts the units instead of comparing the specials (at a newline, Gemma 3's 31
// newline runs, one by one). A unit is one byte, or with `escaped` a `▁` of the special, which a
// space or a `▁` of the text matches (special_text_len).
struct SpecialStarts {
  static constexpr int kSlots = 15;        // first bytes with their own set of second bytes
  static constexpr uint8_t kAlways = 0xFF;  // a first byte past those: always scanned
  static constexpr int kFirstBytes = 512;  // specials whose first byte is kept (all of them or none)
  static constexpr int kMaxRun = 32;       // runs of up to this many units go in run_special
  uint8_t slot[256];                       // 0: no special starts with this byte
  uint32_t second[kSlots][8];              // slot s: the bytes that may follow, a 256-bit set
  uint8_t first[kFirstBytes];              // special k's first byte (0 for an empty one)
  uint32_t run_kinds;                      // slot s: the RunKind bits of its specials, at bit 2 * (s - 1)
  uint32_t run_special[kSlots][kMaxRun / 2];  // slot s, u units: 1 + the special (16 bits; 0: none)
};

// What a special is, for run_special: one byte repeated, `▁` repeated (with `escaped`), or
// neither (or a run longer than kMaxRun, or an index past 16 bits). A slot whose specials are all
// of one of the two run kinds (its bits in run_kinds: 1 or 2) is matched by run_match_at.
enum RunKind : int { kRunOfBytes = 1, kRunOfSpaces = 2, kNotRun = 3 };

inline bool is_escaped_space(const uint8_t* d, int q, int len) {  // `▁` at d[q] (char_symbols.h)
  return q + 2 < len && d[q] == 0xE2 && d[q + 1] == 0x96 && d[q + 2] == 0x81;
}

// Special k's RunKind, and its count of units (`units`: bytes, or `▁`s).
inline int special_run_kind(const SpecialView& s, int k, bool escaped, int& units) {
  const uint8_t* d = s.data + s.offsets[k];
  const int len = s.offsets[k + 1] - s.offsets[k];
  units = 0;
  if (len <= 0 || k >= 0xFFFF) return kNotRun;
  bool same = true;
  for (int q = 1; same && q < len; ++q) same = d[q] == d[0];
  if (same) {
    units = len;
    return units <= SpecialStarts::kMaxRun ? kRunOfBytes : kNotRun;
  }
  if (!escaped || len % 3 != 0) return kNotRun;
  for (int q = 0; q < len; q += 3)
    if (!is_escaped_space(d, q, len)) return kNotRun;
  units = len / 3;
  return units <= SpecialStarts::kMaxRun ? kRunOfSpaces : kNotRun;
}

// f(first, second) for every pair of text bytes that special k can start with (second -1: any
// byte, or the text's end), as special_text_len matches it: literally, or with `escaped`, a
// `▁` of the special as one space.
template <class F>
inline void special_start_pairs(const SpecialView& s, int k, bool escaped, F&& f) {
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

// The second byte `second` (-1: any, or the text's end) after the first byte `first`.
inline void mark_special_start(SpecialStarts& t, int first, int second) {
  const int s = t.slot[first];
  if (s == 0 || s == SpecialStarts::kAlways) return;
  if (second < 0) {
    for (int w = 0; w < 8; ++w) t.second[s - 1][w] = 0xFFFFFFFFu;
  } else {
    t.second[s - 1][second >> 5] |= 1u << (second & 31);
  }
}

// Special k (of that RunKind and units) in the run table of the slot of `first`. The tables
// hold distinct specials (one per name), so a slot's runs have one special per unit count; were
// two the same bytes, the slot would be left to special_match_at.
inline void mark_special_run(SpecialStarts& t, int first, int k, int kind, int units) {
  const int s = t.slot[first];
  if (s == 0 || s == SpecialStarts::kAlways) return;
  if (kind != kNotRun) {
    const int shift = 16 * ((units - 1) & 1);
    uint32_t& word = t.run_special[s - 1][(units - 1) >> 1];
    const uint32_t mine = (uint32_t)k + 1, was = (word >> shift) & 0xFFFFu;
    word |= mine << shift;
    if (was != 0 && was != mine) kind = kNotRun;
  }
  t.run_kinds |= (uint32_t)kind << 2 * (s - 1);
}

BBPE_HD bool special_may_start(const SpecialStarts& t, const uint8_t* text, int n, int i) {
  const int s = t.slot[text[i]];
  if (s == 0) return false;
  if (s == SpecialStarts::kAlways || i + 1 >= n) return true;
  const uint8_t b = text[i + 1];
  return (t.second[s - 1][b >> 5] >> (b & 31)) & 1u;
}

inline uint8_t special_first_byte(const SpecialView& s, int k) {
  return s.offsets[k + 1] > s.offsets[k] ? s.data[s.offsets[k]] : 0;
}

// The special that run_special holds for slot s and that many units, or 0xFFFF.
BBPE_HD unsigned run_special_of(const SpecialStarts& t, int s, int units) {
  const uint32_t word = t.run_special[s - 1][(units - 1) >> 1];
  return ((word >> 16 * ((units - 1) & 1)) - 1u) & 0xFFFFu;
}

// kRunOfBytes or kRunOfSpaces where the specials that `first` starts are all runs of that kind,
// else kNotRun.
BBPE_HD int run_slot_kind(const SpecialStarts& t, uint8_t first) {
  const int s = t.slot[first];
  if (s == 0 || s == SpecialStarts::kAlways) return kNotRun;
  const int kind = (int)(t.run_kinds >> 2 * (s - 1)) & 3;
  return kind == kRunOfBytes || kind == kRunOfSpaces ? kind : kNotRun;
}

// The special of run slot s that matches at i, as special_match_at chooses it (of the runs of at
// most as many units as start at i, the first in the table), or -1; text_len: its bytes of text.
// spaces: the slot's unit is a `▁` (a space or a `▁` of the text), else the byte text[i].
BBPE_HD int run_match_at(const SpecialStarts& t, int s, bool spaces, const uint8_t* text, int n, int i,
                         int& text_len) {
  const uint8_t unit = spaces ? ' ' : text[i];
  unsigned best = 0xFFFFu;
  for (int units = 1, j = i; units <= SpecialStarts::kMaxRun; ++units) {
    if (j < n && text[j] == unit) {
      ++j;
    } else if (spaces && j + 2 < n && text[j] == 0xE2 && text[j + 1] == 0x96 && text[j + 2] == 0x81) {
      j += 3;
    } else {
      break;
    }
    const unsigned k = run_special_of(t, s, units);
    if (k < best) {
      best = k;
      text_len = j - i;
    }
  }
  return best == 0xFFFFu ? -1 : (int)best;
}

// special_match_at with the table's help: what both executors call at every position. Where a
// special matches, text_len is the bytes of text it covers.
BBPE_HD int special_match_with(const SpecialStarts& t, const SpecialView& s, const uint8_t* text, int n, int i,
                               bool escaped, int& text_len) {
  if (!special_may_start(t, text, n, i)) return -1;
  const int kind = run_slot_kind(t, text[i]);
  if (kind != kNotRun) return run_match_at(t, t.slot[text[i]], kind == kRunOfSpaces, text, n, i, text_len);
  return special_match_at(s, text, n, i, escaped, s.count <= SpecialStarts::kFirstBytes ? t.first : nullptr,
                          &text_len);
}

// The table of the specials `s`, built once per set of specials at load (the CPU module's
// special_starts makes the special_starts operand; every executor reads it as it is):
// the first bytes that start a special get slots in byte order, then each special marks the
// second bytes it may start with and, where it is a run, its entry of run_special.
inline void build_special_starts(const SpecialView& s, bool escaped, SpecialStarts& t) {
  t = SpecialStarts{};
  for (int k = 0; k < s.count; ++k) special_start_pairs(s, k, escaped, [&](int first, int) { t.slot[first] = 1; });
  int next = 0;
  for (int b = 0; b < 256; ++b)
    if (t.slot[b]) t.slot[b] = next < SpecialStarts::kSlots ? (uint8_t)++next : SpecialStarts::kAlways;
  for (int k = 0; k < s.count; ++k) {
    int units = 0;
    const int kind = special_run_kind(s, k, escaped, units);
    special_start_pairs(s, k, escaped, [&](int first, int second) {
      mark_special_start(t, first, second);
      mark_special_run(t, first, k, kind, units);
    });
    if (s.count <= SpecialStarts::kFirstBytes) t.first[k] = special_first_byte(s, k);
  }
}

// Leftmost-first resolution of the matches. lens[i]: the bytes of text that the special matched
// at i covers (special_match_with's text_len), 0 where none matched. Walking left to right, a
// match counts unless it starts inside an earlier one that counted. That walk steps on every
// position that no earlier match reaches past (jumping past one would take a match that does),
// whatever came before it: so it is cut there into clusters, each walked from its first match
// (accept_special_cluster) independently of the others, in parallel on the GPU
// (cuda/block_begin.cuh). is_special: 2 at the first byte of each accepted match, 1 at its
// other bytes; other entries are left as they are (callers zero them first). `lens` is anything
// indexed as an array of lengths: an int32_t pointer, or a view that unpacks what the caller
// keeps beside each length (the piece kernels' SpecialMatchLens, cuda/chunk_specials.cuh).

// Whether a match starting before i reaches past i (longest: no match is longer).
template <class Lens>
BBPE_HD bool special_covered(const Lens& lens, int i, int longest) {
  for (int j = i - 1; j >= 0 && j > i - longest; --j)
    if (lens[j] > i - j) return true;
  return false;
}

// An accepted match of len bytes at `at`, marked: 2 at its first byte, 1 at its others.
BBPE_HD void mark_accepted_special(uint8_t* is_special, int at, int len) {
  is_special[at] = 2;
  for (int j = at + 1; j < at + len; ++j) is_special[j] = 1;
}

// The walk from the match at i, which no earlier match covers, to the next position that no
// match reaches past (or the end): its accepted matches marked in is_special.
template <class Lens>
BBPE_HD void accept_special_cluster(const Lens& lens, int n, int i, uint8_t* is_special) {
  int at = i, reach = i;  // reach: the furthest end of the matches that start in [i, at)
  do {
    const int len = lens[at], step = len > 0 ? len : 1;
    if (len > 0) mark_accepted_special(is_special, at, len);
    for (int j = at; j < at + step; ++j)
      if (j + lens[j] > reach) reach = j + lens[j];
    at += step;
  } while (at < n && reach > at);
}

// The whole resolution, one cluster after another (the CPU's order; any order gives the same).
BBPE_HD void accept_special_matches(const int32_t* lens, int n, uint8_t* is_special) {
  int longest = 0;
  for (int i = 0; i < n; ++i) longest = lens[i] > longest ? lens[i] : longest;
  for (int i = 0; i < n; ++i)
    if (lens[i] > 0 && !special_covered(lens, i, longest)) accept_special_cluster(lens, n, i, is_special);
}

// The same resolution over matches listed in byte order (a pass that lists the few it finds
// rather than keep a length for every byte): m.first(e) and m.len(e) (> 0) are the e-th match's
// first byte and the bytes of text it covers, for e in [0, count). A match counts unless it
// starts before `reach`, the end of the last one counted; returns the new reach, so that a long
// list can be resolved in parts, in order (0 before the first).
template <class Matches>
BBPE_HD int accept_listed_specials(const Matches& m, int count, int reach, uint8_t* is_special) {
  for (int e = 0; e < count; ++e) {
    const int at = m.first(e), len = m.len(e);
    if (at < reach) continue;
    mark_accepted_special(is_special, at, len);
    reach = at + len;
  }
  return reach;
}

// The specials of a whole text on the host (the CPU executor, cpu/encode_cpu.h, and the host's
// normalizer, which leaves them as they are: cpu/nfc_batch.cc): match[i] the special matched at
// i (-1: none), lens[i] the bytes of text it covers (0: none), and the accepted ones marked in
// is_special (zeroed by the caller).
inline void match_specials_in(const SpecialStarts& t, const SpecialView& s, const uint8_t* text, int n,
                              bool escaped, int32_t* match, int32_t* lens, uint8_t* is_special) {
  for (int i = 0; i < n; ++i) {
    int len = 0;
    match[i] = special_match_with(t, s, text, n, i, escaped, len);
    lens[i] = match[i] >= 0 ? len : 0;
  }
  accept_special_matches(lens, n, is_special);
}

}  // namespace bbpe
