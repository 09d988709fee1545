// CUDA FFI target `bbpe_encode`: one thread block per string (BlockBPE).
//
// A block loads its string into shared memory (or, past kSmemMaxLen bytes, into its slice of a
// global workspace), marks special tokens and pre-tokenizer pieces, builds the initial byte
// tokens and lists the segments (specials and pieces). Each thread then takes a run of
// segments: whole-piece shortcut, or, for a piece of up to kShortPieceLen bytes, merge_segment
// (bpe_core.h) in place; one scan packs the results. Longer segments, and every segment in bytes
// mode (the paper's algorithm), go through block-wide merge passes. Each pass:
//   1. segmented minimum of the cached pair ranks (block scan, SegMin),
//   2. every pair whose rank is its segment's minimum is a candidate; leftmost-first selection
//      and the surviving-token count come out of one block scan (MergeCarry),
//   3. compaction into the other buffer; only pairs next to a merge are looked up again.
// Passes stop when no segment has a mergeable pair. The rules are those of bpe_core.h, the same
// functions the CPU handler calls.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <string>
#include <vector>

#include "bpe_core.h"
#include "encode_ffi.h"
#include "pretokenize.h"

namespace bbpe {
namespace {

// Per-block arrays: where they live (shared memory or global workspace) is decided at launch.
struct BlockArrays {
  uint8_t* text;
  uint8_t* piece_start;
  uint8_t* is_special;
  int32_t* tok;
  int32_t* next_tok;
  int32_t* rank;
  int32_t* next_rank;
  int32_t* merged;
};

__device__ BlockArrays carve(uint8_t* base, int cap) {
  BlockArrays a;
  a.tok = reinterpret_cast<int32_t*>(base);
  a.next_tok = a.tok + cap;
  a.rank = a.next_tok + cap;
  a.next_rank = a.rank + cap;
  a.merged = a.next_rank + cap;
  a.text = reinterpret_cast<uint8_t*>(a.merged + cap);
  a.piece_start = a.text + cap;
  a.is_special = a.piece_start + cap;
  return a;
}

struct SegMinOp {
  __device__ SegMin operator()(SegMin a, SegMin b) const { return seg_min_combine(a, b); }
};
struct MergeCarryOp {
  __device__ MergeCarry operator()(MergeCarry a, MergeCarry b) const {
    return merge_carry_combine(a, b);
  }
};

// Pieces up to this many bytes are merged by one thread each (exact mode).
constexpr int kShortPieceLen = 64;

// The pre-tokenizer works in tiles of 4096 bytes per block, whatever the block size.
template <int kThreads>
constexpr int kPretokItems = 4096 / kThreads;

template <int kThreads>
struct Scans {
  using SegMinScan = cub::BlockScan<SegMin, kThreads>;
  using CarryScan = cub::BlockScan<MergeCarry, kThreads>;
  using IntScan = cub::BlockScan<int, kThreads>;
  union Storage {
    typename SegMinScan::TempStorage seg;
    typename CarryScan::TempStorage carry;
    typename IntScan::TempStorage count;
    typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage pretok;
  };
};

// The pre-tokenizer as a separate (not inlined) function: inlined into the encode kernel, its
// unrolled automata made ptxas run for many minutes.
template <int kThreads>
__device__ __noinline__ void pretokenize_block(
    int mode, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage& tmp) {
  block_pretokenize<kThreads, kPretokItems<kThreads>>(mode, text, n, is_special, piece_start,
                                                      device_unicode_tables(), tmp);
}

// Merge passes over a.tok / a.rank (n tokens); returns the final count.
template <int kThreads>
__device__ int merge_passes(const VocabView& v, BlockArrays& a, int n,
                            typename Scans<kThreads>::Storage& tmp) {
  for (;;) {
    const int per = (n + kThreads - 1) / kThreads;
    const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
    // 1. Segment minima, written at each segment's start index (into next_tok: free now).
    int32_t* seg_min = a.next_tok;
    SegMin local{-1, kNoRank};
    for (int i = lo; i < hi; ++i)
      local = seg_min_combine(local, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
    SegMin carry;
    typename Scans<kThreads>::SegMinScan(tmp.seg).ExclusiveScan(local, carry, SegMin{-1, kNoRank},
                                                                SegMinOp());
    SegMin run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      if (i + 1 == n || starts_segment(a.tok[i + 1])) seg_min[run.start] = run.rank;
    }
    __syncthreads();
    // 2. Candidates, leftmost-first selection and surviving counts in one scan.
    MergeCarry mine = merge_carry_identity();
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      mine = merge_carry_push(mine, a.rank[i] != kNoRank && a.rank[i] == seg_min[run.start]);
    }
    MergeCarry before, total;
    typename Scans<kThreads>::CarryScan(tmp.carry).ExclusiveScan(
        mine, before, merge_carry_identity(), MergeCarryOp(), total);
    const int next_n = total.kept[0];
    if (next_n == n) break;  // uniform across the block: no pair merged anywhere
    bool prev = before.out[0];
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      const bool merges = !prev && a.rank[i] != kNoRank && a.rank[i] == seg_min[run.start];
      a.merged[i] = merges ? merged_id(v, a.tok[i], a.tok[i + 1]) : -1;
      prev = merges;
    }
    __syncthreads();
    // 3. Compaction into the other buffers; re-rank the pairs a merge touched.
    int j = before.kept[0];
    prev = before.out[0];
    for (int i = lo; i < hi; ++i) {
      const bool was_right_half = prev;
      prev = a.merged[i] >= 0;
      if (was_right_half) continue;
      const bool is_merge = a.merged[i] >= 0;
      const int32_t t = is_merge ? (a.merged[i] | (a.tok[i] & kSegStart)) : a.tok[i];
      const int k = is_merge ? i + 2 : i + 1;
      int32_t r;
      if (k >= n || starts_segment(a.tok[k])) {
        r = kNoRank;
      } else if (is_merge || a.merged[k] >= 0) {
        const int32_t right = a.merged[k] >= 0 ? a.merged[k] : a.tok[k];
        r = lookup_pair(v, token_id(t), token_id(right), nullptr);
      } else {
        r = a.rank[i];
      }
      a.next_tok[j] = t;
      a.next_rank[j] = r;
      ++j;
    }
    __syncthreads();
    int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t;
    t = a.rank; a.rank = a.next_rank; a.next_rank = t;
    n = next_n;
  }
  return n;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, 1) encode_kernel(EncodeParams p, int cap, bool use_smem) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ typename Scans<kThreads>::Storage tmp;
  const int64_t b = blockIdx.x;
  uint8_t* base = use_smem ? smem : p.workspace + b * workspace_bytes_per_string(p.max_len);
  BlockArrays a = carve(base, cap);
  int32_t* out = p.ids + b * p.max_tokens;
  int n = p.lengths[b];
  if (n < 0 || n > p.max_len) {  // unchecked call with a bad length: no reads, flag the row
    for (int j = threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
    if (threadIdx.x == 0) p.counts[b] = -1;
    return;
  }
  const VocabView& v = p.vocab;
  const uint8_t* src = p.data + b * (int64_t)p.max_len;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    a.text[i] = src[i];
    a.piece_start[i] = 0;
    a.is_special[i] = 0;
  }
  __syncthreads();

  // Special tokens: every position looks for a match in parallel; the rare matches are then
  // resolved leftmost-first by one thread (a match inside an earlier match does not count).
  // is_special: 2 at the first byte of an accepted match, 1 at its other bytes.
  if (p.special.count > 0) {
    bool found = false;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int k = special_match_at(p.special, a.text, n, i);
      a.tok[i] = k;
      found |= k >= 0;
    }
    if (__syncthreads_or(found) && threadIdx.x == 0) {
      for (int i = 0; i < n;) {
        const int k = a.tok[i];
        if (k < 0) { ++i; continue; }
        const int len = special_len(p.special, k);
        a.is_special[i] = 2;
        for (int j = 1; j < len; ++j) a.is_special[i + j] = 1;
        i += len;
      }
    }
    __syncthreads();
  }

  if (p.mode != kModeBytes) {
    pretokenize_block<kThreads>(p.mode, a.text, n, a.is_special, a.piece_start, tmp.pretok);
    __syncthreads();
  }

  // Initial tokens: one per byte; a special token's id at its first byte. Alongside, the
  // segment starts (special tokens and pieces) are listed, in order, in next_rank.
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int my_starts = 0;
  for (int i = lo; i < hi; ++i) {
    const bool special = a.is_special[i] != 0;
    const bool seg = special ? a.is_special[i] == 2 : byte_starts_segment(i, a.is_special, a.piece_start);
    if (special) {
      a.tok[i] = seg ? p.special.ids[a.tok[i]] | kSegStart : kDeleted;
    } else {
      a.tok[i] = v.byte_ids[a.text[i]] | (seg ? kSegStart : 0);
    }
    my_starts += seg;
  }
  int first_start, n_segments;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_starts, first_start, n_segments);
  int32_t* seg_start = a.next_rank;
  for (int i = lo; i < hi; ++i)
    if (a.is_special[i] == 2 || (!a.is_special[i] && byte_starts_segment(i, a.is_special, a.piece_start)))
      seg_start[first_start++] = i;
  if (threadIdx.x == 0) seg_start[n_segments] = n;
  __syncthreads();

  // Each thread takes a run of consecutive segments: a special token stays one token; a
  // segment whose bytes are a token becomes it (whole-piece shortcut); a short pre-tokenizer
  // piece is merged in place by merge_segment (nothing block-wide waits on it); longer ones
  // (and in bytes mode, the paper's algorithm, all of them) are left to the block passes.
  // Then one scan places every segment's tokens: compaction comes for free.
  const int short_len = p.mode == kModeBytes ? 0 : kShortPieceLen;
  uint8_t* fresh = reinterpret_cast<uint8_t*>(a.merged);  // scratch, disjoint per segment
  const int seg_per = (n_segments + kThreads - 1) / kThreads;
  const int seg_lo = min(n_segments, (int)threadIdx.x * seg_per);
  const int seg_hi = min(n_segments, seg_lo + seg_per);
  bool has_long = false;
  int my_tokens = 0;
  for (int k = seg_lo; k < seg_hi; ++k) {
    const int s0 = seg_start[k], m = seg_start[k + 1] - s0;
    int count = m;
    if (a.is_special[s0]) {
      count = 1;
    } else {
      const int32_t whole = m < 2 ? -1 : lookup_piece(v, a.text + s0, m);
      if (whole >= 0) {
        a.tok[s0] = whole | kSegStart;
        count = 1;
      } else if (m <= short_len) {
        count = merge_segment(v, a.tok + s0, a.rank + s0, fresh + s0, m);
      } else {
        has_long |= m > 1;
      }
    }
    a.rank[s0] = count;  // the segment's own scratch slot, read back below by this thread
    my_tokens += count;
  }
  int out_at;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_tokens, out_at, n);
  for (int k = seg_lo; k < seg_hi; ++k)
    for (int j = 0, s0 = seg_start[k], count = a.rank[s0]; j < count; ++j)
      a.next_tok[out_at++] = a.tok[s0 + j];
  has_long = __syncthreads_or(has_long);
  { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
  if (has_long) {
    for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
    __syncthreads();
    n = merge_passes<kThreads>(v, a, n, tmp);
  }

  for (int j = threadIdx.x; j < p.max_tokens; j += kThreads)
    out[j] = j < n ? token_id(a.tok[j]) : p.pad_id;
  if (threadIdx.x == 0) p.counts[b] = n;
}

template <int kThreads>
cudaError_t launch(const EncodeParams& p, cudaStream_t stream) {
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  const bool use_smem = p.max_len <= kSmemMaxLen;
  const size_t smem = use_smem ? (size_t)kBytesPerPosition * cap : 0;
  cudaError_t err = cudaFuncSetAttribute(encode_kernel<kThreads>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  encode_kernel<kThreads><<<(unsigned)p.batch, kThreads, smem, stream>>>(p, cap, use_smem);
  return cudaGetLastError();
}

template <bool kCheck>
ffi::Error encode_cuda(cudaStream_t stream, ffi::Buffer<ffi::U8> data, ffi::Buffer<ffi::S32> lengths,
                       ffi::Buffer<ffi::S32> pair_table, ffi::Buffer<ffi::S32> byte_ids,
                       ffi::Buffer<ffi::S32> piece_table, ffi::Buffer<ffi::S32> token_offsets,
                       ffi::Buffer<ffi::U8> token_data, ffi::Buffer<ffi::S32> special_offsets,
                       ffi::Buffer<ffi::U8> special_data, ffi::Buffer<ffi::S32> special_ids,
                       int32_t mode, int32_t pad_id, int32_t max_piece_len, int32_t block_size,
                       ffi::Result<ffi::Buffer<ffi::S32>> ids, ffi::Result<ffi::Buffer<ffi::S32>> counts,
                       ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  EncodeParams p;
  ffi::Error err = make_encode_params(data, lengths, pair_table, byte_ids, piece_table, token_offsets,
                                      token_data, special_offsets, special_data, special_ids, mode,
                                      pad_id, max_piece_len, ids, counts, workspace, &p);
  if (err.failure()) return err;
  if (p.batch == 0) return ffi::Error::Success();
  if (kCheck) {
    // The checked target reads the lengths back (one small copy and a stream sync) so that a
    // bad length is an exception; bbpe_encode_unchecked skips this and flags the row instead.
    std::vector<int32_t> host(p.batch);
    cudaError_t e = cudaMemcpyAsync(host.data(), p.lengths, p.batch * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
    err = check_lengths(host.data(), p.batch, p.max_len);
    if (err.failure()) return err;
  }
  cudaError_t e;
  switch (block_size) {
    case 256: e = launch<256>(p, stream); break;
    case 512: e = launch<512>(p, stream); break;
    case 1024: e = launch<1024>(p, stream); break;
    default:
      return ffi::Error::InvalidArgument("bbpe_encode: block_size must be 256, 512 or 1024, got " +
                                         std::to_string(block_size));
  }
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCuda, bbpe::encode_cuda<true>,
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
// No host read-back: a fixed launch on the stream, safe to capture in a CUDA graph.
XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked, bbpe::encode_cuda<false>,
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
