// The last step of both piece kernels (cuda/piece_kernel.cuh, cuda/char_piece_kernel.cuh): a
// block's rows' tokens placed in their output rows by one block scan.
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"
#include "cuda/piece_launch.cuh"

namespace bbpe {
namespace {

// Each row's tokens into its output row: one scan over the block's threads' token counts, made
// per row by its first thread's prefix; a thread then writes its pieces' tokens (the piece
// starting at bit i of fm has s.count[slot(i)] tokens from s.tok[slot(i)]), the row's first
// thread the count: kCountPending where the row is left to the block kernel (s.hard), -1 for a
// bad length. kSyncAfterScan: the rows' sums share room with something threads read until the
// scan.
template <bool kSyncAfterScan, class Smem, class Slot>
__device__ __forceinline__ void place_row_tokens(const EncodeParams& p, Smem& s, int r, int k, int cpr, int64_t b,
                                                 bool in_row, bool bad, uint32_t fm, Slot slot) {
  int my_tokens = 0;
  if (in_row)
    for (uint32_t rest = fm; rest; rest &= rest - 1) my_tokens += s.count[slot(__ffs(rest) - 1)];
  int before;
  cub::BlockScan<int, kPieceThreads>(s.scan).ExclusiveSum(my_tokens, before);
  if (kSyncAfterScan) __syncthreads();
  if (in_row && k == 0) s.row_base[r] = before;
  __syncthreads();
  int at = 0;
  if (in_row) {
    at = before - s.row_base[r];
    if (k == cpr - 1) s.row_total[r] = at + my_tokens;
  }
  __syncthreads();
  if (!in_row) return;
  const int total = s.row_total[r];
  int32_t* out = p.ids + b * (int64_t)p.max_tokens;
  const int T = p.max_tokens;
  if (s.hard[r]) {  // the block kernel (pending_only) writes the row
    if (k == 0) p.counts[b] = kCountPending;
    return;
  }
  if (!bad) {
    for (uint32_t rest = fm; rest; rest &= rest - 1) {
      const int f = slot(__ffs(rest) - 1);
      const int c = s.count[f];
      for (int j = 0; j < c; ++j)
        if (at + j < T) out[at + j] = token_id(s.tok[f + j]);
      at += c;
    }
  }
  for (int j = (bad ? 0 : total) + k; j < T; j += cpr) out[j] = p.pad_id;
  if (k == 0) p.counts[b] = bad ? -1 : total;
}

}  // namespace
}  // namespace bbpe
