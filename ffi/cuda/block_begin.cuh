// The first steps of a block per string: its arrays placed, its string loaded, the special
// tokens marked (begin_block), and the pre-tokenizer run over it (pretokenize_block).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/char_symbols.h"
#include "cuda/block_common.cuh"
#include "cuda/stage_clock.cuh"
#include "pretok/block_pretokenizer.cuh"
#include "pretok/tables.h"

namespace bbpe {
namespace {

// The pre-tokenizer as a separate (not inlined) function: inlined into the encode kernel, its
// unrolled automata made ptxas run for many minutes.
template <int kThreads>
__device__ __noinline__ void pretokenize_block(
    const PretokView& v, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage& tmp) {
  // In 4096-byte tiles a short string keeps most threads idle (512 bytes: one warp of 256
  // threads), so strings up to 4 * kThreads bytes go in 4-byte chunks, every thread busy
  // (2-byte chunks were slower). Only the chunk size differs: the two share one TempStorage
  // layout.
  constexpr int kSmall = 4;
  if (kPretokItems<kThreads> > kSmall && n <= kThreads * kSmall) {
    using Small = BlockPretokenizer<kThreads, kSmall>;
    static_assert(sizeof(typename Small::TempStorage) ==
                  sizeof(typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage),
                  "the small-chunk pre-tokenizer reuses the block's TempStorage");
    block_pretokenize<kThreads, kSmall>(v, text, n, is_special, piece_start,
                                        reinterpret_cast<typename Small::TempStorage&>(tmp));
    return;
  }
  block_pretokenize<kThreads, kPretokItems<kThreads>>(v, text, n, is_special, piece_start, tmp);
}

// The special tokens of the block's string: every position looks for a match in parallel (tok[i]:
// the special, lens[i]: the bytes it covers, 0 where none); then the matches are resolved
// leftmost-first (core/special_tokens.h), a thread walking each cluster from its first match,
// into is_special, through the table of the positions that can start a special and of the runs
// (SpecialStarts, built at load: the special_starts operand, read where it is, as the piece
// kernels read it). kChars: the specials' `▁` matching a space where specials_escaped. Not
// inlined: the kernels' other stages keep their registers as they were.
template <int kThreads, bool kChars>
__device__ __noinline__ void mark_special_tokens(const EncodeParams& p, const uint8_t* text, int n, int32_t* tok,
                                                 int32_t* lens, uint8_t* is_special) {
  __shared__ int longest_special;  // the longest match (0: none)
  if (threadIdx.x == 0) longest_special = 0;
  const bool escaped = kChars && specials_escaped(p.chars);
  __syncthreads();  // (the 0 above before the atomicMax below)
  int longest = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    int len = 0;
    const int k = special_match_with(*p.special.starts, p.special, text, n, i, escaped, len);
    tok[i] = k;
    lens[i] = k >= 0 ? len : 0;
    longest = max(longest, lens[i]);
  }
  if (longest > 0) atomicMax(&longest_special, longest);
  __syncthreads();
  if (longest_special == 0) return;
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (lens[i] > 0 && !special_covered(lens, i, longest_special)) accept_special_cluster(lens, n, i, is_special);
  __syncthreads();
}

// Whether a block kernel's row b is not its to encode: in the fill launch after a piece kernel
// (pending_only), every row that kernel did not leave pending, read once its grid has ended
// (wait_for_previous_grid: the launch may be scheduled before).
__device__ __forceinline__ bool done_by_piece_kernel(const EncodeParams& p, int64_t b) {
  if (!p.pending_only) return false;
  wait_for_previous_grid();
  return p.counts[b] != kCountPending;
}

// The start of every block: its arrays, its string loaded, the special tokens marked (a.tok[i]:
// the special matched at i, is_special; a.rank is left holding the matches' lengths). False (the row written and flagged) for a length
// outside [0, max_len], which only an unchecked call can pass. kChars: SentencePiece-style
// symbols, whose specials may match a space for `▁` (specials_escaped).
template <int kThreads, bool kChars = false>
__device__ __forceinline__ bool begin_block(const EncodeParams& p, uint8_t* smem, BlockArrays& a,
                                            int32_t*& out, int& n, StageClock& clock) {
  const int64_t b = blockIdx.x;
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  const BlockPlacement at = place_block_arrays(
      smem, p.workspace + b * workspace_bytes_per_string(p.max_len, p.pretok_stages, p.symbols),
      p.max_len, p.pretok_stages, p.symbols);
  a = carve(at.core, at.pass, cap);
  out = p.ids + b * p.max_tokens;
  n = p.lengths[b];
  if (n < 0 || n > p.max_len) {  // unchecked call with a bad length: no reads, flag the row
    for (int j = threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
    if (threadIdx.x == 0) p.counts[b] = -1;
    return false;
  }
  const uint8_t* src = p.data + b * (int64_t)p.max_len;
  if (((reinterpret_cast<uintptr_t>(src) | (uintptr_t)p.max_len) & 15) == 0) {
    // 16 bytes per load (the row is aligned and n rounded up stays inside it; the arrays are
    // 16-byte aligned by construction): one memory round trip per thread, not one per byte.
    for (int i = threadIdx.x; i < (n + 15) / 16; i += kThreads) {
      reinterpret_cast<uint4*>(a.text)[i] = __ldg(reinterpret_cast<const uint4*>(src) + i);
      reinterpret_cast<uint4*>(a.piece_start)[i] = make_uint4(0, 0, 0, 0);
      reinterpret_cast<uint4*>(a.is_special)[i] = make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      a.text[i] = src[i];
      a.piece_start[i] = 0;
      a.is_special[i] = 0;
    }
  }
  __syncthreads();
  clock.mark(kClockLoad);

  if (p.special.count > 0) mark_special_tokens<kThreads, kChars>(p, a.text, n, a.tok, a.rank, a.is_special);
  clock.mark(kClockSpecials);
  return true;
}

// What a kernel with one block per string declares first: the block's dynamic shared memory
// (smem), the block scans' storage (tmp) and the stage clock, and the block's arrays (a), its
// row of ids (out) and its string's length (n), which begin_block sets. A macro, as the
// __shared__ storage is declared in each kernel itself (a variable of its own).
#define BBPE_BLOCK_KERNEL_STATE(kThreads)                                       \
  extern __shared__ __align__(16) uint8_t smem[];                              \
  __shared__ typename Scans<kThreads>::Storage tmp;                            \
  StageClock clock;                                                            \
  BlockArrays a;                                                               \
  int32_t* out;                                                                \
  int n

}  // namespace
}  // namespace bbpe
