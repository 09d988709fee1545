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

// A match as match_chunk_specials keeps it, by byte: the bytes of text it covers (0: none) in the
// low kMatchLenBits (a piece kernel's rows are shorter), and above them 1 + the special, so that
// an accepted one's id needs no second match (0 where the index does not fit: matched again).
constexpr int kMatchLenBits = 13;
constexpr int32_t kMatchLenMask = (1 << kMatchLenBits) - 1;

__device__ __forceinline__ int32_t special_match_entry(int k, int len) {
  const uint32_t special = (uint32_t)k + 1;
  return len | (int32_t)(special < (1u << (31 - kMatchLenBits)) ? special << kMatchLenBits : 0);
}

// The lengths of a chunk's matches, as core/special_tokens.h's resolution reads them.
struct SpecialMatchLens {
  const int32_t* entries;
  __device__ __forceinline__ int32_t operator[](int i) const { return entries[i] & kMatchLenMask; }
};

// The id of the special accepted at byte i, from its entry (special_match_entry).
__device__ __forceinline__ int32_t accepted_special_id(const EncodeParams& p, int32_t entry, const uint8_t* text,
                                                       int n, int i, bool escaped) {
  int k = (entry >> kMatchLenBits) - 1, len = 0;
  if (k < 0) k = special_match_with(*p.special.starts, p.special, text, n, i, escaped, len);
  return __ldg(p.special.ids + k);
}

// The specials of the thread's chunk, bytes [base, base + kChunk) of its row (text, n: the row;
// match_len and sp: the row's, by byte). sp's chunk bytes are zeroed; the bytes with a first-byte
// slot (SpecialStarts, read where it is: 2 KB that every block reads through L1) are matched,
// their entries (special_match_entry) in match_len; once every thread's are known, each cluster
// is resolved from its first match, leftmost first, into sp: 2 at an accepted special's first
// byte, 1 at its others.
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
    const int special = special_match_with(*starts, p.special, text, n, i, escaped, len);
    if (special >= 0 && len > 0) {
      match_len[i] = special_match_entry(special, len);
      mine = max(mine, len);
      *matched |= 1u << (i - base);
    }
  }
  if (mine > 0) atomicMax(longest, mine);
  __syncthreads();
  const int block_longest = *longest;  // (a bound for the lookback: any row's)
  const SpecialMatchLens lens{match_len};
  for (uint32_t rest = block_longest > 0 ? *matched : 0; rest; rest &= rest - 1) {
    const int i = base + __ffs(rest) - 1;
    if (!special_covered(lens, i, block_longest)) accept_special_cluster(lens, n, i, sp);
  }
  __syncthreads();
  return true;
}

}  // namespace
}  // namespace bbpe
