// Windows of huge pieces in sub-windows, one warp each (encode_window_in_warps, used by
// cuda/huge_pieces.cuh's encode_window; the merge itself: cuda/sub_windows.cuh).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"
#include "cuda/sub_windows.cuh"
#include "cuda/tile_rows.cuh"
#include "cuda/window_frames.cuh"

namespace bbpe {
namespace {

// The kernels that merge windows run kHugeThreads threads whatever the call's block size, a warp
// per sub-window of a tile's window (up to kWindowLead + kTileBytes + kStitchMargin bytes; the
// second round's are wider than kSubWindows sub-windows and go to the block).
constexpr size_t kSubWindowBytes = sub_window_bytes(kSubWindows);
// The dynamic shared memory of the kernels that merge huge pieces.
constexpr size_t kHugeSmemBytes = kSubWindowBytes > kSmemPieceBytes ? kSubWindowBytes : kSmemPieceBytes;

// Window `w` of the tile (at: live) in sub-windows (merge_in_sub_windows, in `smem`:
// kSubWindowBytes); false, before writing anything, where it does not fit them or a boundary
// does not stitch (block-uniform). Else as encode_window.
template <int kThreads>
__device__ bool encode_window_in_warps(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                       const WindowAt& at, int32_t* smem) {
  int32_t* ids = window_array(at, kWindowIds);
  int32_t* starts = window_array(at, kWindowStarts);
  const int lo = at.bytes.lo;
  const auto piece = [&](int) { return SubText{r.a.text + lo, at.bytes.hi - lo}; };
  const auto emit = [&](int, int j, int32_t id, int32_t start) {
    ids[j] = id;
    starts[j] = start + lo;
  };
  const auto done = [&](int, int n) {
    if (n < 0) return;
    TileInfo& info = r.info[tile];
    info.win_count[w] = n;
    info.emit_from[w] = 0;
    info.emit_to[w] = n;
  };
  return merge_in_sub_windows<kThreads>(p.vocab, 1, piece, smem, kSubWindows, emit, done) == 0;
}

}  // namespace
}  // namespace bbpe
