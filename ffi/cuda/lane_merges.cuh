// Short pieces merged lane-parallel, several pieces to a warp (merge_in_lanes), longer ones a
// warp each (merge_in_warp), and the step that sorts the listed pieces and hands them to those
// (merge_listed_pieces). The rule is merge_segment's (core/bpe_core.h).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "core/bpe_core.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

// Lane-parallel merges of short pieces (exact mode; lengths 2..32, listed in list[0..n)).
// The list is cut into bins of as many whole pieces as fit into 32 lanes, one token per lane
// (next fit, in list order, within groups of 32 entries); the warps claim bins from a shared
// counter. For each bin a warp runs
// merge_segment's rule on all of them at once, pass after pass: each piece's lowest rank
// (a segmented minimum over the piece's lanes), its leftmost-first occurrences of it from the
// candidate bits (leftmost_first_merges, core/bpe_core.h), the merged tokens (merged_id), the
// right halves retired from their lanes, and a pair lookup in every lane whose pair a merge
// changed. A pass thus waits for one round of table probes, not for a thread's walk
// over its piece. The result is what merge_segment gives: tok[s0..) of each piece rewritten
// and rank[s0] = its token count (lens[] holds the lengths).
__device__ __forceinline__ uint32_t lanes_upto(int lane) {  // bits 0..lane
  return lane >= 31 ? ~0u : (2u << lane) - 1;
}

// Where a merge reads a piece's tokens before its first pass: tok[] itself (TokensIn), or the
// byte tokens of the piece's bytes (BytesAsTokens: the piece kernel, which so fills no token
// array for its misses, a lane a byte instead of a thread a piece).
struct TokensIn {
  const int32_t* tok;
  __device__ __forceinline__ int32_t operator()(int i) const { return tok[i]; }
};
struct BytesAsTokens {
  const uint8_t* text;
  const int32_t* byte_ids;
  __device__ __forceinline__ int32_t operator()(int i) const { return __ldg(byte_ids + text[i]); }
};

// kFirstOnly: the ranks carry the first-only flag (core/bpe_core.h, first_only_candidates).
// Count: the type of rank[] (the piece kernel keeps its counts in bytes: <= kShortPieceLen);
// Entry: the type of list[] and lens[] (the piece kernel's: 16-bit block positions).
// first_token(i): the token at position i before the first pass (TokensIn{tok} or BytesAsTokens).
template <bool kFirstOnly, class Count, class Entry, class First>
__device__ void merge_in_lanes(const VocabView& v, int32_t* tok, Count* rank, const Entry* list,
                               const Entry* lens, int n, int* next_bin, First first_token) {
  const int lane = threadIdx.x & 31;
  // Every warp walks the same bins (next fit over groups of 32 list entries) and merges the
  // ones it claims from the shared counter next_bin (zero on entry): a warp that is done takes
  // the next bin, so the slowest warp no longer has a fixed share.
  int claim = 0;
  if (lane == 0) claim = atomicAdd(next_bin, 1);
  claim = __shfl_sync(~0u, claim, 0);
  int bin = 0;
  for (int first = 0; first < n; first += 32) {
    const int g = first + lane;
    const bool listed = g < n;
    const int s0 = listed ? list[g] : 0;
    const int len = listed ? lens[g] : 0;  // (not -rank[s0]: other warps rewrite that)
    int end = len;  // inclusive prefix sum of the lengths over the lanes
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(~0u, end, d);
      if (lane >= d) end += o;
    }
    const int n_listed = __popc(__ballot_sync(~0u, listed));
    for (int done = 0, base = 0; done < n_listed;) {
      // Next fit: pieces done..k-1 go into the lanes (the prefix sums grow, so the pieces
      // that fit are a run of lanes from `done`; the first one always fits).
      const uint32_t fits = __ballot_sync(~0u, listed && lane >= done && end - base <= 32);
      const int k = 32 - __clz(fits);
      if (bin++ != claim) {  // another warp's bin
        base = __shfl_sync(~0u, end, k - 1);
        done = k;
        continue;
      }
      if (lane == 0) claim = atomicAdd(next_bin, 1);
      claim = __shfl_sync(~0u, claim, 0);
      const int at = end - len - base;  // lane of this piece's first token, if in this round
      const uint32_t starts = __reduce_or_sync(~0u, lane >= done && lane < k ? 1u << at : 0u);
      const int used = __shfl_sync(~0u, end, k - 1) - base;
      // Tokens stay in their lanes: a merge keeps the left token's lane and retires the right
      // one's (alive: the lanes that still hold a token), so a piece's lanes [head, tail) and
      // its list lane are fixed for the bin. (Moving the kept tokens down after every pass cost
      // a quarter of a pass: shared memory, two warp barriers, the starts and the fresh bits
      // rebuilt.)
      const int piece_lane = lane < used ? done + __popc(starts & lanes_upto(lane)) - 1 : lane;
      const int piece_s0 = __shfl_sync(~0u, s0, piece_lane);
      const int piece_at = __shfl_sync(~0u, at, piece_lane);
      const int head = 31 - __clz(starts & lanes_upto(lane));
      const uint32_t later = starts & ~lanes_upto(lane);
      const int tail = later ? __ffs(later) - 1 : used;
      const uint32_t below = lanes_upto(lane) >> 1;  // lanes 0..lane - 1
      int32_t t = lane < used ? first_token(piece_s0 + lane - piece_at) : 0;
      int32_t r = kNoRank;
      uint32_t alive = used >= 32 ? ~0u : (1u << used) - 1;
      for (uint32_t merged = ~0u;;) {  // the lanes the last pass merged into (all: the first pass)
        // This lane's pair: its token and the next living one, if that is in the same piece;
        // looked up again where either token is new.
        const bool living = (alive >> lane) & 1;
        const uint32_t after = alive & ~lanes_upto(lane);
        const int next = after ? __ffs(after) - 1 : lane;
        const int32_t right = __shfl_sync(~0u, t, next);
        const bool has_right = living && after && next < tail;
        if (!has_right) r = kNoRank;
        else if (((merged >> lane) | (merged >> next)) & 1) r = lookup_pair(v, token_id(t), token_id(right), nullptr);
        // The piece's lowest rank: a suffix minimum within the piece (shuffles down that stop
        // at its tail), read at its head. (A reduction with each piece's lane mask costs a
        // round per distinct mask: with one mask per idle lane it took a fifth of the kernel.)
        int32_t low = r;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int32_t o = __shfl_down_sync(~0u, low, d);
          if (lane + d < tail) low = min(low, o);
        }
        const int32_t lowest = __shfl_sync(~0u, low, head);
        const bool cand = r != kNoRank && r == lowest;
        // The candidates in token order (bit i: the pair of the i-th living token), where the
        // leftmost-first rule reads neighbours.
        const int order = __popc(alive & below);
        uint32_t cands = __reduce_or_sync(~0u, cand ? 1u << order : 0u);
        if (kFirstOnly)
          cands = first_only_candidates(cands, __reduce_or_sync(~0u, cand && first_only_rank(r) ? 1u << order : 0u));
        const bool merges = cand && ((leftmost_first_merges(cands) >> order) & 1);
        merged = __ballot_sync(~0u, merges);
        if (merged == 0) {  // (uniform) write back
          // (Each lane's first_token read of tok[] is long done, its value passed on through
          // the shuffles, but racecheck sees no order in shuffles: the lanes' write-back into
          // positions other lanes read is ordered explicitly.)
          __syncwarp();
          if (living) {
            tok[piece_s0 + __popc(alive & below & ~(lanes_upto(head) >> 1))] = t;
            if (lane == head) rank[piece_s0] = (Count)__popc(alive & lanes_upto(tail - 1) & ~(lanes_upto(head) >> 1));
          }
          break;
        }
        if (merges) t = merged_id(v, r, t, right) | (t & kSegStart);
        // The right halves retire: a living lane whose previous living lane merged.
        const uint32_t before = alive & below;
        const bool retires = living && before && ((merged >> (31 - __clz(before))) & 1);
        alive &= ~__ballot_sync(~0u, retires);
      }
      base = __shfl_sync(~0u, end, k - 1);
      done = k;
    }
  }
}

// One piece of kLanePieceLen + 1 .. kShortPieceLen tokens merged by a warp, merge_segment's
// rule pass after pass (as merge_in_lanes, with one piece): lane l holds tokens l and l + 32,
// so a pass's candidate and merge bits are two ballots (bit k: pair k), its lookups two a lane
// at once, and the compaction goes through the warp's 32 slots in two rounds (kept tokens
// 0..31, then 32..63). Returns the token count; tok[0..count) is rewritten. (A warp, not one
// thread: a thread's passes over such a piece in global memory kept its whole block waiting.)
// first_token(k): the piece's token k before the first pass (TokensIn{tok} or BytesAsTokens).
template <bool kFirstOnly, class First>
__device__ int merge_in_warp(const VocabView& v, int32_t* tok, int m, int2* slots, First first_token) {
  static_assert(kShortPieceLen <= 64, "two tokens a lane");
  constexpr int32_t kStale = -1;  // the rank of a pair whose left token a merge made
  const int lane = threadIdx.x & 31;
  int32_t t[2], r[2] = {kStale, kStale};
#pragma unroll
  for (int h = 0; h < 2; ++h) t[h] = lane + 32 * h < m ? first_token(lane + 32 * h) : 0;
  int used = m;
  for (uint64_t fresh = ~0ull;;) {  // bit k: pair k needs its rank (token k or k + 1 is new)
    // (every lane takes part in each shuffle: none sits in a conditional)
    const int32_t hi_first = __shfl_sync(~0u, t[1], 0);
    const int32_t lo_next = __shfl_down_sync(~0u, t[0], 1), hi_next = __shfl_down_sync(~0u, t[1], 1);
    const int32_t right[2] = {lane == 31 ? hi_first : lo_next, hi_next};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = lane + 32 * h;
      if (k + 1 >= used) r[h] = kNoRank;
      else if ((fresh >> k) & 1) r[h] = lookup_pair(v, token_id(t[h]), token_id(right[h]), nullptr);
    }
    const int32_t lowest = __reduce_min_sync(~0u, min(r[0], r[1]));
    if (lowest == kNoRank) break;  // (uniform)
    uint64_t cands = __ballot_sync(~0u, r[0] == lowest) | (uint64_t)__ballot_sync(~0u, r[1] == lowest) << 32;
    if (kFirstOnly && first_only_rank(lowest)) cands = first_only_candidates(cands, cands);
    const uint64_t merges = leftmost_first_merges(cands);
    const uint64_t keep = (used == 64 ? ~0ull : (1ull << used) - 1) & ~(merges << 1);
    int to[2];  // where a kept token goes, else -1
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = lane + 32 * h;
      if ((merges >> k) & 1) t[h] = merged_id(v, lowest, t[h], right[h]) | (t[h] & kSegStart), r[h] = kStale;
      to[h] = (keep >> k) & 1 ? __popcll(keep & ((1ull << k) - 1)) : -1;
    }
    used = __popcll(keep);
#pragma unroll
    for (int d = 0; d < 2; ++d) {  // (round 0 takes every kept token of t[0]: to <= its index)
      __syncwarp();
#pragma unroll
      for (int h = d; h < 2; ++h)
        if (to[h] >= 32 * d && to[h] < 32 * d + 32) slots[to[h] - 32 * d] = make_int2(t[h], r[h]);
      __syncwarp();
      if (lane + 32 * d < used) { const int2 x = slots[lane]; t[d] = x.x; r[d] = x.y; }
    }
    fresh = __ballot_sync(~0u, lane < used && r[0] == kStale) |
            (uint64_t)__ballot_sync(~0u, lane + 32 < used && r[1] == kStale) << 32;
    fresh |= fresh >> 1;
  }
  __syncwarp();  // (every lane's last read of the slots before the caller writes them again)
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (lane + 32 * h < used) tok[lane + 32 * h] = t[h];
  return used;
}

// A counting sort's offsets, longest first: by_len[m] (m = 2..kLanePieceLen), the listed
// pieces of m tokens, becomes the place of the first of them in the sorted list. Called by the
// block's first warp (lane l: length kLanePieceLen - l).
__device__ __forceinline__ void longest_first_offsets(int* by_len) {
  static_assert(kLanePieceLen <= 33, "a lane for each length");
  const int lane = threadIdx.x & 31;
  const int m = kLanePieceLen - lane;
  const int count = m >= 2 ? by_len[m] : 0;
  int before = count;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(~0u, before, d);
    if (lane >= d) before += o;
  }
  if (m >= 2) by_len[m] = before - count;
}

// Step 2 of both kernels: the pieces listed in merge_list (n_lane of 2..kLanePieceLen tokens
// from the front, by_len[m] of them of length m; n_wide longer ones from the back,
// merge_list[cap - 1 - g]), each with rank[s0] = minus its length, are merged in place; then
// rank[s0] = the piece's token count. sorted_list is free scratch (one entry per lane piece).
// The lane list is sorted by length, longest first (a counting sort into sorted_list): a bin
// then holds pieces of similar lengths and pass counts, the longest bins are claimed first,
// and a warp that finishes early claims the next one (simulated on War and Peace: ~20 instead
// of 29 rounds of passes for the slowest warp; H200: 1024 x 4096 cl100k 226-235 -> 202-216 us).
template <int kThreads, bool kFirstOnly = false>
__device__ __forceinline__ void merge_listed_pieces(const VocabView& v, BlockArrays& a,
                                                    const int32_t* merge_list, int n_lane,
                                                    int n_wide, int cap, int32_t* sorted_list,
                                                    int* by_len, int* next_lane_bin,
                                                    typename Scans<kThreads>::Storage& tmp) {
  if (threadIdx.x < 32) longest_first_offsets(by_len);
  __syncthreads();
  int32_t* lane_list = sorted_list;
  int32_t* lane_lens = a.merged;  // (free until the passes)
  for (int g = threadIdx.x; g < n_lane; g += kThreads) {
    const int s0 = merge_list[g], m = -a.rank[s0];
    const int at = atomicAdd(&by_len[m], 1);
    lane_list[at] = s0;
    lane_lens[at] = m;
  }
  __syncthreads();
  // The longer pieces first, a warp each: the lane bins go to whichever warps are free.
  for (int g = (int)threadIdx.x / 32; g < n_wide; g += kThreads / 32) {
    const int s0 = merge_list[cap - 1 - g];
    const int count =
        merge_in_warp<kFirstOnly>(v, a.tok + s0, -a.rank[s0], tmp.lanes + (threadIdx.x & ~31), TokensIn{a.tok + s0});
    if (threadIdx.x % 32 == 0) a.rank[s0] = count;  // (every lane read it before the first shuffle)
  }
  merge_in_lanes<kFirstOnly>(v, a.tok, a.rank, lane_list, lane_lens, n_lane, next_lane_bin, TokensIn{a.tok});
  __syncthreads();
}

}  // namespace
}  // namespace bbpe
