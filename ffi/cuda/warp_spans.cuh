// Spans of huge pieces in sub-spans, one warp each (encode_span_in_warps, used by
// cuda/huge_pieces.cuh's encode_span; the merge itself: cuda/sub_spans.cuh).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"
#include "cuda/span_frames.cuh"
#include "cuda/sub_spans.cuh"
#include "cuda/tile_rows.cuh"

namespace bbpe {
namespace {

// The kernels that merge spans run kHugeThreads threads whatever the call's block size, a warp
// per sub-span of a tile's span (up to kSpanLead + kTileBytes + kStitchMargin bytes; the
// second round's are wider than kSubSpans sub-spans and go to the block).
constexpr size_t kSubSpanBytes = sub_span_bytes(kSubSpans);
// The dynamic shared memory of the kernels that merge huge pieces.
constexpr size_t kHugeSmemBytes = kSubSpanBytes > kSmemPieceBytes ? kSubSpanBytes : kSmemPieceBytes;

// Span `w` of the tile (at: live) in sub-spans (merge_in_sub_spans, in `smem`:
// kSubSpanBytes); false, before writing anything, where it does not fit them or a boundary
// does not stitch (block-uniform). Else as encode_span.
template <int kThreads>
__device__ bool encode_span_in_warps(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                     const SpanAt& at, int32_t* smem) {
  int32_t* ids = span_array(at, kSpanIds);
  int32_t* starts = span_array(at, kSpanStarts);
  const int lo = at.bytes.lo;
  const auto piece = [&](int) { return SubText{r.a.text + lo, at.bytes.hi - lo}; };
  const auto emit = [&](int, int j, int32_t id, int32_t start) {
    ids[j] = id;
    starts[j] = start + lo;
  };
  const auto done = [&](int, int n) {
    if (n < 0) return;
    TileInfo& info = r.info[tile];
    info.span_count[w] = n;
    info.emit_from[w] = 0;
    info.emit_to[w] = n;
  };
  return merge_in_sub_spans<kThreads>(p.vocab, 1, piece, smem, kSubSpans, emit, done) == 0;
}

}  // namespace
}  // namespace bbpe
