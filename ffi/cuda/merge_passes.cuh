// Block-wide steps over a whole token array: the merge passes (segmented minimum,
// leftmost-first selection, compaction; the rules of core/bpe_core.h) and the compaction of
// a token array without its deleted positions.
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "core/bpe_core.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

// A segment walks where it holds a run of at least kWalkRun adjacent candidates that covers a
// multiple of kWalkRun (so every run of 2 * kWalkRun - 1 or more, found by checks at every
// kWalkRun-th position): a pass over them all at once takes at least kWalkRun / 2 passes for such
// a run, and one thread's pass over the segment costs about as much as a few dozen block passes.
// Shorter runs (Gemma 4's `aaa` in words of random letters: a hundred passes of a word of
// thousands of symbols) stay with the block passes.
constexpr int kWalkRun = 32;
// Whether the kWalkRun - 1 pairs before pair i all have rank `lowest` (false for i < kWalkRun - 1;
// the caller has pair i's: with them, a run of kWalkRun candidates ending at i).
__device__ bool long_candidate_run(const int32_t* rank, int i, int32_t lowest) {
  if (i < kWalkRun - 1) return false;
  bool all = true;
  for (int k = 1; k < kWalkRun; ++k) all &= rank[i - k] == lowest;
  return all;
}

// A pass of the segments whose lowest rank is first-only and that hold a long run of adjacent
// candidates: a pass over them all at once would merge only each run's first candidate (one
// merge of a 48k-symbol run a pass), where the reference goes on along the run (core/bpe_core.h,
// first_only_walk_goes_on, run_chunk_length). So the thread that holds such a segment's start
// applies merge_segment_pass to it alone, leaving kDeleted after its tokens; the other segments
// wait for the next pass (segments do not interact). Then tokens and ranks are compacted;
// returns the new count. walk_end[s]: segment s's end, with kWalks where it walks; [lo, hi):
// this thread's positions.
constexpr int32_t kWalks = (int32_t)0x80000000u;
template <int kThreads>
__device__ __noinline__ int walk_segments(const VocabView& v, BlockArrays& a, const int32_t* seg_min,
                                          const int32_t* walk_end, int lo, int hi,
                                          typename Scans<kThreads>::Storage& tmp) {
  for (int s = lo; s < hi; ++s) {
    if ((walk_end[s] & kWalks) == 0) continue;  // (set at walking segments' starts only)
    const int end = walk_end[s] & ~kWalks, lowest = seg_min[s];
    int at = s;
    while (a.rank[at] != lowest) ++at;
    // (fresh marks: the segment's own bytes of a.merged, free in this pass)
    const int m = merge_segment_pass<true>(v, a.tok + s, a.rank + s, reinterpret_cast<uint8_t*>(a.merged + s),
                                           end - s, lowest, at - s);
    for (int i = s + m; i < end; ++i) a.tok[i] = kDeleted;
  }
  __syncthreads();
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += a.tok[i] != kDeleted;
  int first, total;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, first, total);
  for (int i = lo, j = first; i < hi; ++i) {
    if (a.tok[i] == kDeleted) continue;
    a.next_tok[j] = a.tok[i];
    a.next_rank[j++] = a.rank[i];
  }
  __syncthreads();
  int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t;
  t = a.rank; a.rank = a.next_rank; a.next_rank = t;
  return total;
}

// Merge passes over a.tok / a.rank (n tokens); returns the final count, or the count once it
// is at most stop_at (the caller moves the tokens and goes on). kFirstOnly: the ranks carry the
// first-only flag (core/bpe_core.h; the SentencePiece kernel).
template <int kThreads, bool kFirstOnly = false>
__device__ __noinline__ int merge_passes(const VocabView& v, BlockArrays& a, int n,
                            typename Scans<kThreads>::Storage& tmp, int stop_at = 0) {
  // Pair i is a candidate: its rank is its segment's lowest (and, at a first-only rank, the
  // pair before it is not a candidate: first_only_demoted; that pair is in the same segment
  // whenever it has the same rank, and a.rank stays as it is until the compaction).
  const auto at_lowest = [&](int i, int32_t lowest) { return a.rank[i] != kNoRank && a.rank[i] == lowest; };
  const auto demoted = [&](int i, int32_t lowest) {
    return kFirstOnly && i > 0 && first_only_demoted(lowest, a.rank[i - 1]);
  };
  const auto candidate = [&](int i, int32_t lowest) { return at_lowest(i, lowest) && !demoted(i, lowest); };
  while (n > stop_at) {
    // walk_end[s]: segment s's end, with kWalks where it walks (next_rank: free until step 3)
    int32_t* walk_end = a.next_rank;
    const int per = (n + kThreads - 1) / kThreads;
    const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
    // 1. Segment minima, written at each segment's start index (into next_tok: free now).
    int32_t* seg_min = a.next_tok;
    SegMin local{-1, kNoRank};
    for (int i = lo; i < hi; ++i) {
      local = seg_min_combine(local, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      if (kFirstOnly) walk_end[i] = 0;  // (the scan's barrier orders it before the ends' writes)
    }
    SegMin carry;
    typename Scans<kThreads>::SegMinScan(tmp.seg).ExclusiveScan(local, carry, SegMin{-1, kNoRank},
                                                                SegMinOp());
    SegMin run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      if (i + 1 == n || starts_segment(a.tok[i + 1])) {
        seg_min[run.start] = run.rank;
        if (kFirstOnly) walk_end[run.start] = i + 1;
      }
    }
    __syncthreads();
    // 2. Candidates, leftmost-first selection and surviving counts in one scan. At a first-only
    // rank, a segment with a long run of adjacent candidates walks this pass instead (below).
    MergeCarry mine = merge_carry_identity();
    bool walk = false;
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      const int32_t lowest = seg_min[run.start];
      const bool lowest_here = at_lowest(i, lowest), waits = demoted(i, lowest);
      mine = merge_carry_push(mine, lowest_here && !waits);
      if (kFirstOnly && lowest_here && waits && i % kWalkRun == 0 && long_candidate_run(a.rank, i, lowest)) {
        atomicOr(&walk_end[run.start], kWalks);
        walk = true;
      }
    }
    if (kFirstOnly && __syncthreads_or(walk)) {
      n = walk_segments<kThreads>(v, a, seg_min, walk_end, lo, hi, tmp);
      continue;
    }
    MergeCarry before, total;
    typename Scans<kThreads>::CarryScan(tmp.carry).ExclusiveScan(
        mine, before, merge_carry_identity(), MergeCarryOp(), total);
    const int next_n = total.kept[0];
    if (next_n == n) break;  // uniform across the block: no pair merged anywhere
    bool prev = before.out[0];
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      const bool merges = !prev && candidate(i, seg_min[run.start]);
      a.merged[i] = merges ? merged_id(v, a.rank[i], a.tok[i], a.tok[i + 1]) : -1;
      prev = merges;
    }
    __syncthreads();
    // 3. Compaction into the other buffers; re-rank the pairs a merge touched.
    int j = before.kept[0];
    prev = before.out[0];
    for (int i = lo; i < hi; ++i) {
      const bool was_right_half = prev;
      prev = a.merged[i] >= 0;
      if (was_right_half) continue;
      const bool is_merge = a.merged[i] >= 0;
      const int32_t t = is_merge ? (a.merged[i] | (a.tok[i] & kSegStart)) : a.tok[i];
      const int k = is_merge ? i + 2 : i + 1;
      int32_t r;
      if (k >= n || starts_segment(a.tok[k])) {
        r = kNoRank;
      } else if (is_merge || a.merged[k] >= 0) {
        const int32_t right = a.merged[k] >= 0 ? a.merged[k] : a.tok[k];
        r = lookup_pair(v, token_id(t), token_id(right), nullptr);
      } else {
        r = a.rank[i];
      }
      a.next_tok[j] = t;
      a.next_rank[j] = r;
      ++j;
    }
    __syncthreads();
    int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t;
    t = a.rank; a.rank = a.next_rank; a.next_rank = t;
    n = next_n;
  }
  return n;
}

// Copies the tokens of src[0..n) that are not kDeleted, in order, to dst[0..), each after
// the token before(i) gives for its position where that is not kDeleted; returns how many
// (block-uniform).
template <int kThreads, typename Before>
__device__ int compact_tokens(const int32_t* src, int n, int32_t* dst, Before before,
                              typename Scans<kThreads>::Storage& tmp) {
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += (src[i] != kDeleted) + (before(i) != kDeleted);
  int first, total;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, first, total);
  for (int i = lo, j = first; i < hi; ++i) {
    const int32_t extra = before(i);
    if (extra != kDeleted) dst[j++] = extra;
    if (src[i] != kDeleted) dst[j++] = src[i];
  }
  __syncthreads();
  return total;
}

}  // namespace
}  // namespace bbpe
