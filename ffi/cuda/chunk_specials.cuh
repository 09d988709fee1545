// The special-token stage of the piece kernels (cuda/piece_kernel.cuh, cuda/char_piece_kernel.cuh):
// the rules of core/special_tokens.h run over a block's chunks, as cuda/block_begin.cuh runs them
// over one string. Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/special_tokens.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

// The specials of the thread's chunk, bytes [base, base + kChunk) of its row (text, n: the row;
// match_len and sp: the row's, by byte). sp's chunk bytes are zeroed; the bytes with a first-byte
// slot (SpecialStarts, read where it is: 2 KB that every block reads through L1) are matched,
// the lengths in match_len; once every thread's are known, each cluster is resolved from its
// first match, leftmost first, into sp: 2 at an accepted special's first byte, 1 at its others.
// Every thread of the block calls it, and its first barrier also ends the chunks' loads. Returns
// whether any byte of the block has a slot (else only sp was written); *longest (the block's,
// zeroed before the call) is then its longest match, 0 for none; *matched: the chunk's bytes
// where a special matched, accepted or not (bit j: byte base + j).
template <int kChunk>
__device__ __forceinline__ bool match_chunk_specials(const EncodeParams& p, const uint8_t* text, int n, int base,
                                                     int valid, bool escaped, int32_t* match_len, uint8_t* sp,
                                                     int* longest, uint32_t* matched) {
  const SpecialStarts* starts = p.special.starts;
  uint32_t slots = 0;  // bit j: byte base + j has a slot
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    sp[base + j] = 0;
    if (j < valid && __ldg(starts->slot + text[base + j]) != 0) slots |= 1u << j;
  }
  *matched = 0;
  if (!__syncthreads_or(slots != 0)) return false;
#pragma unroll
  for (int j = 0; j < kChunk; ++j)
    if (j < valid) match_len[base + j] = 0;
  int mine = 0;
  for (uint32_t rest = slots; rest; rest &= rest - 1) {
    const int i = base + __ffs(rest) - 1;
    int len = 0;
    if (special_match_with(*starts, p.special, text, n, i, escaped, len) >= 0 && len > 0) {
      match_len[i] = len;
      mine = max(mine, len);
      *matched |= 1u << (i - base);
    }
  }
  if (mine > 0) atomicMax(longest, mine);
  __syncthreads();
  const int block_longest = *longest;  // (a bound for the lookback: any row's)
  for (uint32_t rest = block_longest > 0 ? *matched : 0; rest; rest &= rest - 1) {
    const int i = base + __ffs(rest) - 1;
    if (!special_covered(match_len, i, block_longest)) accept_special_cluster(match_len, n, i, sp);
  }
  __syncthreads();
  return true;
}

}  // namespace
}  // namespace bbpe
