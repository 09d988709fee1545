// The kernel of byte-level BPE, one block per string (encode_kernel), and the steps after the
// pre-tokenizer that the tile pipeline of long rows runs too (encode_segments).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_begin.cuh"
#include "cuda/block_common.cuh"
#include "cuda/lane_merges.cuh"
#include "cuda/merge_passes.cuh"
#include "cuda/stage_clock.cuh"
#include "cuda/sub_spans.cuh"
#include "pretok/lowercase.h"
#include "pretok/nfc.h"

namespace bbpe {
namespace {

// The steps after the pre-tokenizer, for one block's string: a.tok[i] holds the special
// matched at i, is_special and piece_start are marked. The tokens go to out[0..out_cap) (the
// rest is left alone); returns their count. cap >= n: the room of next_rank for the merge
// list. has_long: whether the block passes ran. In the tile pipeline the "string" is the
// stretch of a long row from a segment start to the next segment start after a tile.
// warp_list (warp_piece_launch, else nullptr): the pieces longer than kShortPieceLen are listed
// there and merged in sub-spans after it (merge_warp_pieces, cuda/sub_spans.cuh).
template <int kThreads>
__device__ __forceinline__ int encode_segments(const EncodeParams& p, BlockArrays& a, int n, int cap,
                                               int32_t* out, int out_cap, bool& has_long,
                                               typename Scans<kThreads>::Storage& tmp,
                                               StageClock& clock, WarpPieceList* warp_list = nullptr) {
  const VocabView& v = p.vocab;
  // Initial tokens; from here on piece_start flags every segment start (specials included).
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int32_t t = initial_token(v, p.special, a.text[i], a.is_special, a.piece_start, a.tok[i], i);
    a.tok[i] = t;
    a.piece_start[i] = starts_segment(t);
  }
  __syncthreads();
  clock.mark(kClockInitial);

  // 1. The segment starts are listed (one scan over the threads' stretches of bytes), and
  //    the threads take the segments round robin (an even share each, whatever the piece
  //    lengths): a special token stays one token; a segment the piece table holds becomes its
  //    token (lookup_piece); a short pre-tokenizer piece that misses goes on the
  //    merge list for step 2; longer ones (and in bytes mode, the paper's algorithm, all of
  //    them) are left to the block passes, but with warp_list they go there for step 2 and to
  //    the block passes only if they do not stitch. rank[start] holds the segment's token
  //    count, or minus its length while it waits for step 2 (only the segment's thread touches
  //    rank[start] here; piece_start is read-only from now on).
  const int short_len = p.pretok_stages == kModeBytes ? 0 : kShortPieceLen;
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int32_t* seg_list = a.next_tok;     // free until the placement
  int32_t* merge_list = a.next_rank;  // free until the passes: pieces for merge_in_lanes from
                                      // the front, for merge_in_warp from the back
  __shared__ int n_lane_merges, n_wide_merges, next_lane_bin;
  __shared__ int by_len[kLanePieceLen + 1];  // lane-list pieces per length, then where each goes
  int my_starts = 0;
  for (int s0 = lo; s0 < hi; ++s0) my_starts += a.piece_start[s0];
  int first_seg, n_segs;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_starts, first_seg, n_segs);
  for (int s0 = lo; my_starts > 0 && s0 < hi; ++s0)
    if (a.piece_start[s0]) seg_list[first_seg++] = s0;
  if (threadIdx.x == 0) n_lane_merges = n_wide_merges = next_lane_bin = 0;
  if (threadIdx.x == 0 && warp_list) warp_list->count = 0;
  if (threadIdx.x <= kLanePieceLen) by_len[threadIdx.x] = 0;
  __syncthreads();
  has_long = false;
  for (int g = threadIdx.x; g < n_segs; g += kThreads) {
    const int s0 = seg_list[g], end = g + 1 < n_segs ? seg_list[g + 1] : n;
    int count = 1;
    if (!a.is_special[s0]) {
      const int m = end - s0;
      const int32_t whole = m < 2 ? -1 : lookup_piece(v, a.text + s0, m);
      if (whole >= 0) {
        a.tok[s0] = whole | kSegStart;
      } else {
        count = m;
        if (m > 1 && m <= short_len) {
          count = -m;  // to merge in step 2
          if (m <= kLanePieceLen) {
            merge_list[atomicAdd(&n_lane_merges, 1)] = s0;
            atomicAdd(&by_len[m], 1);
          }
          else merge_list[cap - 1 - atomicAdd(&n_wide_merges, 1)] = s0;
        } else if (warp_list && m > 1) {
          const int slot = atomicAdd(&warp_list->count, 1);
          if (slot < kMaxWarpPieces) warp_list->s0[slot] = s0, warp_list->len[slot] = m, count = -m;
        }
        has_long |= count > 1;  // (not listed for step 2 or merge_warp_pieces)
      }
    }
    a.rank[s0] = count;
  }
  has_long = __syncthreads_or(has_long);
  // (the order of the lists does not matter: pieces are independent)
  const int n_lane = n_lane_merges, n_wide = n_wide_merges;
  clock.mark(kClockSegments);

  // 2. The listed pieces: up to 32 bytes lane-parallel, a warp's lanes shared by several
  //    pieces (merge_in_lanes); the rare longer ones by one warp each (merge_in_warp); the
  //    warp list's in warp sub-spans.
  merge_listed_pieces<kThreads>(v, a, merge_list, n_lane, n_wide, cap, seg_list, by_len,
                                &next_lane_bin, tmp);
  if (warp_list && warp_list->count > 0)
    has_long |= merge_warp_pieces<kThreads>(v, a, warp_list, warp_piece_subs(p.max_len));
  int my_tokens = 0;
  for (int s0 = lo; s0 < hi; ++s0)
    if (a.piece_start[s0]) my_tokens += a.rank[s0];
  int out_at;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_tokens, out_at, n);
  clock.mark(kClockMerges);

  // Placement: straight into the output when every segment is done, else into the other
  // token buffer for the passes.
  int32_t* dst = has_long ? a.next_tok : out;
  const int dst_cap = has_long ? n : out_cap;
  for (int s0 = lo; s0 < hi; ++s0) {
    if (!a.piece_start[s0]) continue;
    for (int j = 0, count = a.rank[s0]; j < count; ++j, ++out_at)
      if (out_at < dst_cap) dst[out_at] = has_long ? a.tok[s0 + j] : token_id(a.tok[s0 + j]);
  }
  if (has_long) {
    __syncthreads();
    { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
    for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
    __syncthreads();
    n = merge_passes<kThreads>(v, a, n, tmp);
    for (int j = threadIdx.x; j < min(n, out_cap); j += kThreads) out[j] = token_id(a.tok[j]);
  }
  return n;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) encode_kernel(
    const __grid_constant__ EncodeParams p) {
  BBPE_BLOCK_KERNEL_STATE(kThreads);
  const int64_t b = blockIdx.x;
  if (done_by_piece_kernel(p, b)) return;
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  if (!begin_block<kThreads>(p, smem, a, out, n, clock)) return;
  if (p.pretok.nfc || p.pretok.lower) {  // a string that may not be normalized is reported
    bool suspect = false;
    for (int i = threadIdx.x; i < n; i += kThreads)
      suspect |= (p.pretok.nfc && nfc_suspect_at(p.pretok, p.nfc_pairs, a.text, n, a.is_special, i)) ||
                 (p.pretok.lower && lower_suspect_at(p.pretok, a.text, n, a.is_special, i));
    if (__syncthreads_or(suspect)) {
      for (int j = threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
      if (threadIdx.x == 0) p.counts[b] = kCountNotNormalized;
      return;
    }
    if (p.pretok.lower) {
      for (int i = threadIdx.x; i < n; i += kThreads) lower_in_place_at(p.pretok, a.text, n, a.is_special, i);
      __syncthreads();
    }
  }
  if (p.pretok_stages != kModeBytes) {
    pretokenize_block<kThreads>(p.pretok, a.text, n, a.is_special, a.piece_start, tmp.pretok);
    __syncthreads();
  }
  clock.mark(kClockPretokenize);
  bool has_long;
  WarpPieceList* warp_list = warp_piece_launch(p)  // (after the row's arrays)
      ? reinterpret_cast<WarpPieceList*>(smem + smem_bytes_per_string(p.max_len, p.pretok_stages, p.symbols))
      : nullptr;
  n = encode_segments<kThreads>(p, a, n, cap, out, p.max_tokens, has_long, tmp, clock, warp_list);
  for (int j = n + threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
  if (threadIdx.x == 0) p.counts[b] = n;
  clock.mark(has_long ? kClockPasses : kClockOutput);
  clock.count(kClockBlocks, true);
  clock.count(kClockLongBlocks, has_long);
}

}  // namespace
}  // namespace bbpe
