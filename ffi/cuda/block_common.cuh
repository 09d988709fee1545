// What every kernel of a block per string shares: the per-block arrays (BlockArrays, carved
// from shared memory or the workspace as binding/encode_params.h places them), the block
// scans and their shared storage (Scans), the piece lengths that choose a merge strategy, and
// the launch bounds.
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once
#ifndef BBPE_ENCODE_CUDA_TU  // (defined by encode_cuda.cu alone)
#error "cuda/*.cuh belong to the one translation unit encode_cuda.cu: include them there only"
#endif

#include <atomic>
#include <cstdint>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "core/bpe_core.h"
#include "core/span_stitch.h"
#include "pretok/block_pretokenizer.cuh"

namespace bbpe {
namespace {

// Per-block arrays: the core ones (every string) and the pass ones (merge passes only); where
// they live (shared memory or global workspace) is decided per launch (binding/encode_params.h).
struct BlockArrays {
  uint8_t* text;
  uint8_t* piece_start;  // after the initial tokens: 1 where a segment starts
  uint8_t* is_special;
  int32_t* tok;
  int32_t* rank;
  int32_t* next_tok;
  int32_t* next_rank;
  int32_t* merged;
};

__device__ BlockArrays carve(uint8_t* core, uint8_t* pass, int cap) {
  BlockArrays a;
  a.tok = reinterpret_cast<int32_t*>(core);
  a.rank = a.tok + cap;
  a.text = reinterpret_cast<uint8_t*>(a.rank + cap);
  a.piece_start = a.text + cap;
  a.is_special = a.piece_start + cap;
  a.next_tok = reinterpret_cast<int32_t*>(pass);
  a.next_rank = a.next_tok + cap;
  a.merged = a.next_rank + cap;
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

// The N 4-byte words of bytes from byte shift / 8 of aligned word w[0] on, each joined from
// w[q] and w[q + 1] by a funnel shift: N + 1 aligned loads, independent of each other, where
// reading the bytes one at a time would take 4N loads. The caller derives w from its byte
// pointer; a pointer derived from the byte pointer (p - its misalignment) keeps shared-memory
// loads LDS, one cast from an integer makes them generic.
template <int N>
__device__ __forceinline__ void realigned_words(const uint32_t* w, uint32_t shift, uint32_t (&out)[N]) {
  uint32_t aligned[N + 1];
#pragma unroll
  for (int q = 0; q <= N; ++q) aligned[q] = w[q];
#pragma unroll
  for (int q = 0; q < N; ++q) out[q] = __funnelshift_r(aligned[q], aligned[q + 1], shift);
}

// Exact mode: pieces up to kLanePieceLen bytes are merged lane-parallel (a warp packs several
// into its 32 lanes, merge_in_lanes); up to kShortPieceLen bytes by one warp each (two tokens a
// lane, merge_in_warp); longer ones by the block passes.
constexpr int kLanePieceLen = 32;
constexpr int kShortPieceLen = 64;

// The pre-tokenizer works in tiles of 4096 bytes per block, whatever the block size; in the
// tile pipeline of long rows its tiles are the row's (kTileItems: kTileBytes per block).
template <int kThreads>
constexpr int kPretokItems = 4096 / kThreads;
template <int kThreads>
constexpr int kTileItems = kTileBytes / kThreads;

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
    int2 lanes[kThreads];  // merge_in_warp: (token, rank) of each lane, for the compaction
  };
};

// Shared-memory-lean blocks fit four to an SM at 256 threads (64 registers per thread).
template <int kThreads>
constexpr int kMinBlocksPerSm = kThreads >= 1024 ? 1 : 1024 / kThreads;

// Lets `kKernel` launch with up to all the shared memory a block may have on the current
// device, set once per device: a ceiling set per call to its own need would race with a call
// on another thread lowering it between the set and the launch ("invalid argument"). The
// ceiling does not change occupancy; each launch's own size does.
template <auto kKernel>
cudaError_t allow_all_smem() {
  static std::atomic<uint64_t> done{0};  // one bit per device
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = 1ull << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  int optin = 0;
  cudaFuncAttributes attributes;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, kKernel);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               optin - (int)attributes.sharedSizeBytes);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_release);
  return err;
}

// The fill launch after a piece kernel (encode_cuda.cu) is a programmatic dependent launch
// (sm_90): the GPU schedules its blocks once every block of the piece kernel has started
// (allow_dependent_launch, at the piece kernels' start) instead of after the whole grid has
// ended and the launch's own latency, and each of its blocks waits for the piece kernel's grid
// to end and its writes to be visible (wait_for_previous_grid) before it reads a count. In a
// kernel launched plainly both are no-ops.
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// `kernel`(p) on `grid` blocks of `threads`, allowed to be scheduled before the stream's
// previous kernel ends (the kernel calls wait_for_previous_grid before it reads that kernel's
// output).
template <class Kernel, class Params>
cudaError_t launch_dependent(Kernel kernel, unsigned grid, int threads, size_t smem, cudaStream_t stream,
                             const Params& p) {
  cudaLaunchAttribute early;
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &early;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, p);
}

// The grid of a kernel that strides over `work` blocks' worth of items (for_huge_tiles): one
// wave, as many of its blocks as the current device runs at once, where a block per item would
// cost the scheduling of every item though most return at once. Counted once per device
// (`threads` and `smem` are the same at every launch of `kKernel`).
template <auto kKernel>
cudaError_t one_wave(int threads, size_t smem, unsigned work, unsigned& grid) {
  static std::atomic<unsigned> wave_of[64];  // per device: 0 until counted
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  unsigned wave = wave_of[device & 63].load(std::memory_order_relaxed);
  if (wave == 0) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem);
    if (err != cudaSuccess) return err;
    wave = (unsigned)(sms * per_sm > 1 ? sms * per_sm : 1);
    wave_of[device & 63].store(wave, std::memory_order_relaxed);
  }
  grid = work < wave ? work : wave;
  return cudaSuccess;
}

}  // namespace
}  // namespace bbpe
