// Long rows, the tile pipeline after tile_encode: pre-tokenizer pieces longer than a tile
// ("huge": a run of letters, CJK, emoji or whitespace can make one piece of the whole row).
// Merged by the one block whose tile they start in, their passes would cost (distinct ranks)
// x (piece length / threads); instead every tile a huge piece covers encodes its chunk of the
// piece as a span that reaches about kStitchMargin bytes into the neighbouring chunks, and
// neighbouring spans are stitched at a token both encodings share (core/span_stitch.h
// says why that is the piece's BPE). A piece with a boundary that has no shared token is
// merged whole by the tile it starts in, as before, so ids never depend on the stitch.
//   huge_spans  (tile): the tile's chunk of the piece covering its start (span 0) and
//                 of the piece starting in it (span 1), merged in warp sub-spans
//                 (encode_span_in_warps) or by the block; its ids and their start offsets
//                 go into the tile's span frame;
//   huge_stitch   (tile): the boundary at the tile's end, if a huge piece crosses it: the first
//                 token of the left span that the right one has; what each span emits;
//                 a boundary without one marks the right span for a second round;
//   huge_reach    (tile): second round, the tile's span 0 encoded again from kReachBack bytes
//                 earlier, in a reach frame of the row (kReachShare tiles share one);
//   huge_stitch   (second pass) the boundaries either side of a span encoded again; one that
//                 still has no shared token sends the piece to
//   huge_fallback (tile): the piece starting in the tile, merged whole when a stitch failed.
// tile_output copies, per tile: span 0's share, the tile's other segments, span 1's share
// (or the whole merged piece).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <climits>
#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/span_stitch.h"
#include "cuda/block_common.cuh"
#include "cuda/span_frames.cuh"
#include "cuda/tile_rows.cuh"
#include "cuda/warp_spans.cuh"

namespace bbpe {
namespace {

// Encodes span `w` of the tile (at: live) in its frame, in sub-spans where it can; its
// counts and emit range into the tile's TileInfo.
template <int kThreads>
__device__ __forceinline__ void encode_span(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                            const SpanAt& at, typename Scans<kThreads>::Storage& tmp) {
  if (warp_spans(p) && encode_span_in_warps<kThreads>(p, r, tile, w, at, piece_smem())) return;
  BlockArrays a{};
  a.tok = span_array(at, 0);
  a.rank = span_array(at, kSpanStarts);
  a.next_tok = span_array(at, 2);
  a.next_rank = span_array(at, 3);
  a.merged = span_array(at, kSpanIds);
  const int n = merge_piece<kThreads>(p.vocab, a, r.a.text + at.bytes.lo, at.bytes.hi - at.bytes.lo, piece_smem(), tmp);
  int32_t* ids = span_array(at, kSpanIds);  // (merged: free after the passes)
  for (int j = threadIdx.x; j < n; j += kThreads) ids[j] = token_id(a.tok[j]);
  __syncthreads();
  // Start offsets: the tokens' byte lengths summed (a.rank may be the starts' array: free).
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  const int32_t* offsets = p.vocab.token_offsets;
  int mine = 0;
  for (int j = lo; j < hi; ++j) mine += offsets[ids[j] + 1] - offsets[ids[j]];
  int at_byte, total;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at_byte, total);
  int32_t* starts = span_array(at, kSpanStarts);
  at_byte += at.bytes.lo;
  for (int j = lo; j < hi; ++j) {
    starts[j] = at_byte;
    at_byte += offsets[ids[j] + 1] - offsets[ids[j]];
  }
  if (threadIdx.x == 0) {
    TileInfo& info = r.info[tile];
    info.span_count[w] = n;
    info.emit_from[w] = 0;
    info.emit_to[w] = n;
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_spans(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  for_huge_tiles(p, [&](const RowArrays& r, const TileAt& t) {
    if (threadIdx.x == 0) {
      r.info[t.tile].reach = 0;
      if (t.tile == 0) r.info[0].reach_used = 0;
    }
    for (int w = 0; w < 2; ++w) {  // (both live only where one huge piece ends and another starts)
      const SpanAt at = span_at(p, r, t.tile, w, false);
      if (at.live) encode_span<kThreads>(p, r, t.tile, w, at, tmp);
    }
  });
}

// Second round: span 0 of a tile whose left boundary had no shared token, from kReachBack
// bytes earlier (its span in the tile frame stays as it was: huge_stitch reads it).
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_reach(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  for_huge_tiles(p, [&](const RowArrays& r, const TileAt& t) {
    if (r.info[t.tile].reach <= 0 || r.info[r.info[t.tile].cont_lo / kTileBytes].fallback) return;
    encode_span<kThreads>(p, r, t.tile, 0, span_at(p, r, t.tile, 0, true), tmp);
  });
}

// The boundary at the end of the tile, when a huge piece crosses it: the left span is the
// tile's chunk of that piece, the right one span 0 of the next tile. The left span's
// tokens searched start after the end of the span that stitched the tile's left boundary
// (below), so the stitches of one piece are independent of each other.
// First pass (kSecond false): the spans of huge_spans; a boundary without a shared token
// marks the right span for huge_reach (or, without the second round, the piece for the
// fallback). Second pass: the boundaries with a span encoded again on either side, every
// span as the output takes it; without a shared token the piece falls back.
template <int kThreads, bool kSecond>
__global__ void __launch_bounds__(kThreads) huge_stitch(const __grid_constant__ EncodeParams p) {
  __shared__ int best;
  for_huge_tiles(p, [&](const RowArrays& r, const TileAt& t) {
    const TileInfo& info = r.info[t.tile];
    const int x = (t.tile + 1) * kTileBytes;
    const int wl = info.huge_lo >= 0 ? 1 : (info.cont_lo >= 0 && info.cont_hi > x ? 0 : -1);
    if (wl < 0) return;
    // (First pass: flags set for other tiles in this pass must not change which frame is read.
    // Both: whether a tile is skipped depends only on flags no tile of the pass writes.)
    const bool reach_l = kSecond && wl == 0 && info.reach > 0, reach_r = kSecond && r.info[t.tile + 1].reach > 0;
    if (kSecond && !reach_l && !reach_r) return;
    const SpanAt left = span_at(p, r, t.tile, wl, reach_l), right = span_at(p, r, t.tile + 1, 0, reach_r);
    const int n_left = info.span_count[wl], n_right = r.info[t.tile + 1].span_count[0];
    const int32_t* l_ids = span_array(left, kSpanIds);
    const int32_t* l_starts = span_array(left, kSpanStarts);
    const int32_t* r_ids = span_array(right, kSpanIds);
    const int32_t* r_starts = span_array(right, kSpanStarts);
    if (threadIdx.x == 0) best = INT_MAX;
    __syncthreads();
    // The left span's tokens that start inside the right span (a shared token lies in both)
    // and after the end of the left span of the tile's own left boundary, which ends its
    // stitch token there: a span reaching back covers that boundary too, and the stitches
    // must stay in order without reading each other's results.
    const int from =
        first_start_at(l_starts, 0, n_left, max(right.bytes.lo, t.tile * kTileBytes + stitch_margin(p)));
    for (int i = from + threadIdx.x; i < n_left; i += kThreads)
      if (shared_token(r_ids, r_starts, n_right, l_starts[i], l_ids[i]) >= 0) atomicMin(&best, i);
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (best == INT_MAX || p.stitch_margin < 0) {
      const int slot = !kSecond && second_round(p) ? atomicAdd(&r.info[0].reach_used, 1) : -1;
      if (slot >= 0 && slot < reach_frames_per_row(p.max_len)) r.info[t.tile + 1].reach = slot + 1;
      else r.info[left.piece_lo / kTileBytes].fallback = 1;
      return;
    }
    r.info[t.tile].emit_to[wl] = best + 1;
    r.info[t.tile + 1].emit_from[0] = shared_token(r_ids, r_starts, n_right, l_starts[best], l_ids[best]) + 1;
  });
}

// The huge piece that starts in the tile, merged whole (the row's arrays over the piece are
// free: tile_encode stopped before it) when one of its boundaries could not be stitched.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_fallback(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  for_huge_tiles(p, [&](const RowArrays& r, const TileAt& t) {
    TileInfo& info = r.info[t.tile];
    if (info.huge_lo < 0 || !info.fallback) return;
    if (p.stitch_margin >= 0 && (p.stitch_margin & kNoFallback)) {
      if (threadIdx.x == 0) info.huge_count = 0;
      return;
    }
    const int lo = info.huge_lo;
    BlockArrays a = r.a;
    a.tok += lo; a.rank += lo; a.next_tok += lo; a.next_rank += lo; a.merged += lo;
    const int n = merge_piece<kThreads>(p.vocab, a, r.a.text + lo, info.huge_hi - lo, piece_smem(), tmp);
    int32_t* out = r.a.merged + lo;  // (merged: free after the passes)
    for (int j = threadIdx.x; j < n; j += kThreads) out[j] = token_id(a.tok[j]);
    if (threadIdx.x == 0) info.huge_count = n;
  });
}

// The tokens tile k puts out: its huge pieces' shares and the segments that start in it.
__device__ __forceinline__ int tile_token_count(const RowArrays& r, int k) {
  const TileInfo& info = r.info[k];
  int c = info.count;
  if (info.cont_lo >= 0 && !r.info[info.cont_lo / kTileBytes].fallback) c += info.emit_to[0] - info.emit_from[0];
  if (info.huge_lo >= 0) c += info.fallback ? info.huge_count : info.emit_to[1] - info.emit_from[1];
  return c;
}

// Copies the tile's tokens, in the row's order, to ids[at..) (up to max_tokens).
template <int kThreads>
__device__ __forceinline__ void copy_tile_tokens(const EncodeParams& p, const RowArrays& r, int tile,
                                                 int32_t* ids, int at) {
  const TileInfo& info = r.info[tile];
  auto put = [&](const int32_t* src, int n) {
    for (int j = threadIdx.x; j < n && at + j < p.max_tokens; j += kThreads) ids[at + j] = src[j];
    at += n;
  };
  if (info.cont_lo >= 0 && !r.info[info.cont_lo / kTileBytes].fallback)
    put(span_array(span_at(p, r, tile, 0), kSpanIds) + info.emit_from[0], info.emit_to[0] - info.emit_from[0]);
  put(r.a.merged + info.first, info.count);
  if (info.huge_lo >= 0 && info.fallback) put(r.a.merged + info.huge_lo, info.huge_count);
  else if (info.huge_lo >= 0)
    put(span_array(span_at(p, r, tile, 1), kSpanIds) + info.emit_from[1], info.emit_to[1] - info.emit_from[1]);
}

}  // namespace
}  // namespace bbpe
