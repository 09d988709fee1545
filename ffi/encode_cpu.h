// The CPU executor: the same steps as the CUDA kernel (cuda_kernels.cu), one string at a time,
// each step a sequential loop over the rules in bpe_core.h.
#pragma once

#include <algorithm>
#include <vector>

#include "bpe_core.h"
#include "encode_params.h"
#include "pretokenize.h"

namespace bbpe {

struct CpuScratch {
  std::vector<uint8_t> is_special, piece_start;
  std::vector<int32_t> tok, next_tok, rank, next_rank, merged;
};

// Marks allowed special tokens, leftmost match first, longest match at a position; writes
// their tokens (special id, segment start) and kDeleted over the rest of their bytes.
inline void mark_specials(const SpecialView& sp, const uint8_t* text, int n, uint8_t* is_special,
                          int32_t* tok) {
  std::fill(is_special, is_special + n, 0);
  if (sp.count == 0) return;
  for (int i = 0; i < n;) {
    const int k = special_match_at(sp, text, n, i);
    if (k < 0) { ++i; continue; }
    const int len = special_len(sp, k);
    tok[i] = sp.ids[k] | kSegStart;
    for (int j = 0; j < len; ++j) {
      is_special[i + j] = 1;
      if (j > 0) tok[i + j] = kDeleted;
    }
    i += len;
  }
}

// Tokenizes text[0..n) into s.tok[0..count); returns count.
inline int encode_string(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s) {
  const VocabView& v = p.vocab;
  s.is_special.resize(n + 1);
  s.piece_start.assign(n + 1, 0);
  s.tok.resize(n + 1);
  mark_specials(p.special, text, n, s.is_special.data(), s.tok.data());
  if (p.mode != kModeBytes)
    pretokenize_sequential(p.mode, text, n, s.is_special.data(), s.piece_start.data());

  for (int i = 0; i < n; ++i) {
    if (s.is_special[i]) continue;
    const bool seg = byte_starts_segment(i, s.is_special.data(), s.piece_start.data());
    s.tok[i] = v.byte_ids[text[i]] | (seg ? kSegStart : 0);
  }
  // Whole-piece shortcut: a segment whose bytes are a token becomes that token.
  if (v.max_piece_len > 0) {
    for (int i = 0; i < n; ++i) {
      if (s.is_special[i] || !starts_segment(s.tok[i])) continue;
      int end = i + 1;
      while (end < n && end - i <= v.max_piece_len && !s.is_special[end] &&
             !byte_starts_segment(end, s.is_special.data(), s.piece_start.data()))
        ++end;
      if (end - i < 2 || end - i > v.max_piece_len) continue;
      const int32_t id = lookup_piece(v, text + i, end - i);
      if (id < 0) continue;
      s.tok[i] = id | kSegStart;
      for (int j = i + 1; j < end; ++j) s.tok[j] = kDeleted;
    }
  }
  n = (int)(std::remove(s.tok.begin(), s.tok.begin() + n, kDeleted) - s.tok.begin());

  s.rank.resize(n + 1);
  for (int i = 0; i < n; ++i) s.rank[i] = rank_at(v, s.tok.data(), i, n);

  // Merge passes until no pair merges.
  s.merged.resize(n + 1);
  s.next_tok.resize(n + 1);
  s.next_rank.resize(n + 1);
  for (;;) {
    // Each segment's minimum rank (segments are short; two sweeps over each).
    bool any = false;
    for (int start = 0; start < n;) {
      int end = start + 1;
      int32_t seg_min = s.rank[start];
      while (end < n && !starts_segment(s.tok[end])) seg_min = std::min(seg_min, s.rank[end++]);
      bool prev_merged = false;
      for (int i = start; i < end; ++i) {
        const bool cand = s.rank[i] != kNoRank && s.rank[i] == seg_min;
        const bool merges = cand && !prev_merged;
        s.merged[i] = merges ? merged_id(v, s.tok[i], s.tok[i + 1]) : -1;
        prev_merged = merges;
        any |= merges;
      }
      start = end;
    }
    if (!any) break;
    // Compaction, re-ranking only the pairs a merge touched (as the kernel does).
    int j = 0;
    for (int i = 0; i < n; ++i) {
      const bool is_merge = s.merged[i] >= 0;
      const int32_t t = is_merge ? (s.merged[i] | (s.tok[i] & kSegStart)) : s.tok[i];
      const int k = is_merge ? i + 2 : i + 1;  // the next surviving token
      int32_t r;
      if (k >= n || starts_segment(s.tok[k])) {
        r = kNoRank;
      } else if (is_merge || s.merged[k] >= 0) {
        const int32_t right = s.merged[k] >= 0 ? s.merged[k] : s.tok[k];
        r = lookup_pair(v, token_id(t), token_id(right), nullptr);
      } else {
        r = s.rank[i];
      }
      s.next_tok[j] = t;
      s.next_rank[j] = r;
      ++j;
      if (is_merge) ++i;  // skip the right half
    }
    n = j;
    std::swap(s.tok, s.next_tok);
    std::swap(s.rank, s.next_rank);
  }
  return n;
}

}  // namespace bbpe
