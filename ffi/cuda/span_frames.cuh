// Spans of huge pieces (cuda/huge_pieces.cuh): the test hooks' flags, where a span's arrays
// are (its tile's frame, or a reach frame in the second round), and the block's merge of a
// piece, in shared memory once it fits.
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/span_stitch.h"
#include "cuda/block_common.cuh"
#include "cuda/merge_passes.cuh"
#include "cuda/tile_rows.cuh"

namespace bbpe {
namespace {

// Flags the CUDA handler's test hooks add to EncodeParams::stitch_margin (a margin >= 0):
// no second round; no whole-piece merge (a piece that needs it puts out no tokens, so that a
// test can tell that every boundary was stitched).
constexpr int kNoSecondRound = 1024, kNoFallback = 2048, kNoWarpSpans = 4096;
static_assert(kStitchMargin < kNoSecondRound, "the flags sit above every margin");
__device__ __forceinline__ int stitch_margin(const EncodeParams& p) {
  return p.stitch_margin < 0 ? 0 : p.stitch_margin % kNoSecondRound;
}
__device__ __forceinline__ bool second_round(const EncodeParams& p) {
  return p.stitch_margin >= 0 && !(p.stitch_margin & kNoSecondRound);
}
BBPE_HD bool warp_spans(const EncodeParams& p) {
  return p.stitch_margin < 0 || !(p.stitch_margin & kNoWarpSpans);
}

// Span `w` of a tile (0: its chunk of the huge piece covering its start, 1: of the huge piece
// starting in it) and where its arrays are: kFrameArrays arrays of the tile's frame, from the
// span's first byte on (frame position 0 is the row's byte tile * kTileBytes - kSpanLead).
// After huge_spans, array 4 holds the span's ids and array 1 their start offsets in the row.
// `reach`: span 0 as the second round encodes it, in the tile's reach frame (info.reach - 1;
// position 0 is the row's byte tile * kTileBytes - kSpanLead - kReachBack).
struct SpanAt {
  bool live;
  int piece_lo;  // the piece's first byte (its tile owns it)
  StitchSpan bytes;
  bool reach;
  int32_t* base;
};
__device__ __forceinline__ SpanAt span_at(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                          bool reach) {
  const TileInfo& info = r.info[tile];
  SpanAt at{};
  at.piece_lo = w == 0 ? info.cont_lo : info.huge_lo;
  at.live = at.piece_lo >= 0;
  if (!at.live) return at;
  const int hi = w == 0 ? info.cont_hi : info.huge_hi, margin = stitch_margin(p);
  at.bytes = stitch_span(at.piece_lo, hi, tile, margin);
  at.reach = reach && w == 0;
  if (at.reach) {
    at.bytes.lo = stitch_span(at.piece_lo, hi, tile, margin + kReachBack).lo;
    at.base = r.reach + (info.reach - 1) * reach_positions() * kFrameArrays +
              (at.bytes.lo - tile * kTileBytes + kSpanLead + kReachBack);
  } else {
    at.base = r.frames + tile * frame_positions() * kFrameArrays + (at.bytes.lo - tile * kTileBytes + kSpanLead);
  }
  return at;
}
// The span as the output takes it (after the second round: its flags no longer change).
__device__ __forceinline__ SpanAt span_at(const EncodeParams& p, const RowArrays& r, int tile, int w) {
  return span_at(p, r, tile, w, w == 0 && r.info[tile].reach > 0);
}
__device__ __forceinline__ int32_t* span_array(const SpanAt& at, int k) {
  return at.base + k * (at.reach ? reach_positions() : frame_positions());
}
constexpr int kSpanIds = 4, kSpanStarts = 1;

// Shared memory of the kernels that merge huge pieces: the five token arrays of a whole span.
// A pass sweeps its arrays three times, between barriers; in global memory every sweep waits on
// L2, and a span of a huge piece takes about one pass per distinct rank in it (thousands).
constexpr int kSmemPieceTokens = kSpanLead + kTileBytes + kStitchMargin;
constexpr size_t kSmemPieceBytes = 5 * sizeof(int32_t) * kSmemPieceTokens;
__device__ __forceinline__ BlockArrays smem_piece_arrays(BlockArrays a, int32_t* smem) {
  a.tok = smem;
  a.rank = smem + kSmemPieceTokens;
  a.next_tok = smem + 2 * kSmemPieceTokens;
  a.next_rank = smem + 3 * kSmemPieceTokens;
  a.merged = smem + 4 * kSmemPieceTokens;
  return a;
}
__device__ __forceinline__ int32_t* piece_smem() {  // (the kernels' dynamic shared memory)
  extern __shared__ __align__(16) int32_t dynamic_smem[];
  return dynamic_smem;
}

// BPE of one piece text[0..n) (n >= 1) with the block passes: in a's arrays while it is longer
// than kSmemPieceTokens tokens, then in shared memory (smem, kSmemPieceBytes); returns the
// count, the tokens (flagged) in a.tok, wherever that is then.
template <int kThreads>
__device__ __forceinline__ int merge_piece(const VocabView& v, BlockArrays& a, const uint8_t* text, int n,
                                           int32_t* smem, typename Scans<kThreads>::Storage& tmp) {
  if (n <= kSmemPieceTokens) a = smem_piece_arrays(a, smem);
  for (int i = threadIdx.x; i < n; i += kThreads) a.tok[i] = v.byte_ids[text[i]] | (i == 0 ? kSegStart : 0);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
  __syncthreads();
  if (n > kSmemPieceTokens) {
    n = merge_passes<kThreads>(v, a, n, tmp, kSmemPieceTokens);
    if (n > kSmemPieceTokens) return n;  // no pair left to merge
    const BlockArrays s = smem_piece_arrays(a, smem);
    for (int i = threadIdx.x; i < n; i += kThreads) {
      s.tok[i] = a.tok[i];
      s.rank[i] = a.rank[i];
    }
    __syncthreads();
    a = s;
  }
  return merge_passes<kThreads>(v, a, n, tmp);
}

}  // namespace
}  // namespace bbpe
