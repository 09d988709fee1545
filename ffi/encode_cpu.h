// The CPU executor: the steps of the CUDA kernel (cuda_kernels.cu), one string at a time, each
// a sequential loop over the rules in bpe_core.h; every segment is merged by merge_segment.
#pragma once

#include <algorithm>
#include <vector>

#include "bpe_core.h"
#include "encode_params.h"
#include "pretokenize.h"

namespace bbpe {

struct CpuScratch {
  std::vector<uint8_t> is_special, piece_start;
  std::vector<int32_t> tok, rank;
  std::vector<uint8_t> fresh;
};

// Tokenizes text[0..n) into s.tok[0..count); returns count.
inline int encode_string(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s) {
  const VocabView& v = p.vocab;
  s.is_special.resize(n + 1);
  s.piece_start.assign(n + 1, 0);
  s.tok.resize(n + 1);
  std::fill(s.is_special.begin(), s.is_special.end(), 0);
  if (p.special.count > 0) {  // s.tok holds each position's match until initial_token
    for (int i = 0; i < n; ++i) s.tok[i] = special_match_at(p.special, text, n, i);
    accept_special_matches(p.special, s.tok.data(), n, s.is_special.data());
  }
  if (p.mode != kModeBytes)
    pretokenize_sequential(p.mode, text, n, s.is_special.data(), s.piece_start.data());
  for (int i = 0; i < n; ++i)
    s.tok[i] = initial_token(v, p.special, text[i], s.is_special.data(), s.piece_start.data(),
                             s.tok[i], i);
  // Each segment in turn: the whole-piece shortcut, else the merge passes; results are packed
  // to the front of s.tok as we go (a segment never grows).
  s.rank.resize(n + 1);
  s.fresh.resize(n + 1);
  int count = 0;
  for (int start = 0; start < n;) {
    int end = start + 1;
    while (end < n && s.tok[end] != kDeleted && !starts_segment(s.tok[end])) ++end;
    int m = end - start;
    const int32_t whole = s.is_special[start] || m < 2 ? -1 : lookup_piece(v, text + start, m);
    if (whole >= 0) s.tok[start] = whole | kSegStart;
    m = whole >= 0 || s.is_special[start] ? 1 : merge_segment(v, &s.tok[start], &s.rank[start],
                                                               &s.fresh[start], m);
    std::copy(s.tok.begin() + start, s.tok.begin() + start + m, s.tok.begin() + count);
    count += m;
    for (start = end; start < n && s.tok[start] == kDeleted;) ++start;  // rest of a special
  }
  return count;
}

}  // namespace bbpe
