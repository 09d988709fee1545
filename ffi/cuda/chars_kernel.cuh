// The kernel of SentencePiece-style BPE (symbols = kSymbolsChars, core/char_symbols.h): one
// block per string, merges over character symbols, then the runs.
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/char_symbols.h"
#include "cuda/block_begin.cuh"
#include "cuda/block_common.cuh"
#include "cuda/lane_merges.cuh"
#include "cuda/merge_passes.cuh"
#include "cuda/stage_clock.cuh"

namespace bbpe {
namespace {

// SentencePiece-style BPE (core/char_symbols.h) of the block's string, specials marked (a.tok[i]:
// the special matched at i): character symbols, dense, with the dummy prefixes; word starts
// flagged; words looked up whole, the others merged (short ones lane-parallel or a warp each,
// long ones by the block passes); then the runs. Leaves the tokens in a.tok; returns their count.
template <int kThreads>
__device__ __noinline__ int encode_chars(const EncodeParams& p, BlockArrays& a, int n,
                                         typename Scans<kThreads>::Storage& tmp, StageClock& clock) {
  const VocabView& v = p.vocab;
  const CharView c = char_view(p.chars);
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = char_at(v, c, a.text, n, a.is_special, i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads)
    a.tok[i] = initial_char_token(v, c, p.special, a.text, n, a.is_special, a.tok[i], a.rank, i);
  __syncthreads();
  const auto prefix = [&](int i) {
    return prefix_before(c, a.text, n, a.is_special, i) ? c.prefix_id | kSegStart : kDeleted;
  };
  // (into rank, free now: the symbols stay in the core arrays, shared memory up to kSmemMaxLen)
  n = compact_tokens<kThreads>(a.tok, n, a.rank, prefix, tmp);
  { int32_t* t = a.tok; a.tok = a.rank; a.rank = t; }
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = starts_word(c, a.tok, i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) a.tok[i] |= a.rank[i] ? kSegStart : 0;
  __syncthreads();
  clock.mark(kClockInitial);
  // Words: listed, each looked up whole first (lookup_word: one token on a hit), then the
  // others of up to kShortPieceLen symbols merged as the exact path merges short pieces
  // (merge_listed_pieces: lane-parallel up to kLanePieceLen, else one warp each); longer ones
  // stay whole for the block passes. The results are packed into next_tok.
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int32_t* seg_list = a.next_tok;     // (free until the placement)
  int32_t* merge_list = a.next_rank;  // (free until the passes)
  __shared__ int n_lane_merges, n_wide_merges, next_lane_bin;
  __shared__ int by_len[kLanePieceLen + 1];
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += starts_segment(a.tok[i]);
  int at, n_words;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at, n_words);
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i])) seg_list[at++] = i;
  if (threadIdx.x == 0) n_lane_merges = n_wide_merges = next_lane_bin = 0;
  if (threadIdx.x <= kLanePieceLen) by_len[threadIdx.x] = 0;
  __syncthreads();
  bool has_long = false;
  for (int g = threadIdx.x; g < n_words; g += kThreads) {
    const int s0 = seg_list[g], m = (g + 1 < n_words ? seg_list[g + 1] : n) - s0;
    const int32_t whole = c.whole_words && m > 1 ? lookup_word(v, a.tok + s0, m) : -1;
    int count = m;
    if (whole >= 0) {  // (its own symbols only: other threads read theirs)
      a.tok[s0] = whole | kSegStart;
      count = 1;
    } else if (m > 1 && m <= kShortPieceLen) {
      count = -m;
      if (m <= kLanePieceLen) {
        merge_list[atomicAdd(&n_lane_merges, 1)] = s0;
        atomicAdd(&by_len[m], 1);
      } else {
        merge_list[cap - 1 - atomicAdd(&n_wide_merges, 1)] = s0;
      }
    }
    has_long |= whole < 0 && m > kShortPieceLen;
    a.rank[s0] = count;
  }
  has_long = __syncthreads_or(has_long);
  merge_listed_pieces<kThreads, true>(v, a, merge_list, n_lane_merges, n_wide_merges, cap, seg_list,
                                by_len, &next_lane_bin, tmp);
  mine = 0;
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i])) mine += a.rank[i];
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at, n);
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i]))
      for (int j = 0, count = a.rank[i]; j < count; ++j) a.next_tok[at++] = a.tok[i + j];
  __syncthreads();
  { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
  clock.mark(kClockMerges);
  clock.count(kClockLongBlocks, has_long);
  if (has_long) {
    for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
    __syncthreads();
    n = merge_passes<kThreads, true>(v, a, n, tmp);
  }
  clock.mark(kClockPasses);
  if (c.run_long == 0) return n;
  // Runs: their starts and lengths first (a.rank is free), then one thread per run.
  bool any = false;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    a.rank[i] = starts_run(c, a.tok, i) ? run_length(c, a.tok, i, n) : 0;
    any |= a.rank[i] > 1;
  }
  if (!__syncthreads_or(any)) return n;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int len = a.rank[i];
    if (len < 2) continue;
    for (int k = merge_run(c, a.tok + i, len); k < len; ++k) a.tok[i + k] = kDeleted;
  }
  __syncthreads();
  n = compact_tokens<kThreads>(a.tok, n, a.next_tok, [](int) { return kDeleted; }, tmp);
  { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
  return n;
}

// SentencePiece-style BPE (symbols = kSymbolsChars): one block per string, encode_chars.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) encode_chars_kernel(
    const __grid_constant__ EncodeParams p) {
  BBPE_BLOCK_KERNEL_STATE(kThreads);
  if (done_by_piece_kernel(p, blockIdx.x)) return;
  if (!begin_block<kThreads, true>(p, smem, a, out, n, clock)) return;
  n = encode_chars<kThreads>(p, a, n, tmp, clock);
  for (int j = threadIdx.x; j < min(n, p.max_tokens); j += kThreads) out[j] = token_id(a.tok[j]);
  for (int j = n + threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
  if (threadIdx.x == 0) p.counts[blockIdx.x] = n;
  clock.mark(kClockOutput);  // (the runs and the output)
  clock.count(kClockBlocks, true);
}

}  // namespace
}  // namespace bbpe
