// Per-stage cycle counters of the kernels (profiling builds only).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

namespace bbpe {
namespace {

// Stage clocks (a build option, BLOCKBPE_STAGE_CLOCKS=ON; normal builds compile them away):
// thread 0 of every block adds the cycles of each stage to device counters, which
// benchmarks/stage_clocks.py reads through the CUDA module (read_stage_clocks, read_block_marks).
enum StageClockSlot : int {
  kClockLoad, kClockSpecials, kClockPretokenize, kClockInitial, kClockSegments, kClockMerges, kClockKeep,
  kClockOutput, kClockPasses, kClockBlocks, kClockLongBlocks, kClockMergedPieces, kStageClockSlots
};
#ifdef BBPE_STAGE_CLOCKS
__device__ unsigned long long g_stage_clocks[kStageClockSlots];
// And per block (the first kMarkedBlocks of a launch): the global timer (ns) when it started,
// its SM, when it ended each stage it ran, how many pieces it merged and the first of them (its
// length, its first 16 bytes): the blocks over time, for what the sums above hide (a few slow
// blocks that the whole kernel waits for, and what they merge that the misses' cache did not hold).
constexpr int kMarkedBlocks = 8192;
enum BlockMarkSlot : int {
  kMarkStart = kStageClockSlots, kMarkSm, kMarkMerged, kMarkMergedLen, kMarkMergedHead, kMarkMergedTail, kBlockMarkSlots
};
__device__ unsigned long long g_block_marks[kMarkedBlocks][kBlockMarkSlots];
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct StageClock {
  long long last;
  __device__ StageClock() {
#ifdef __CUDA_ARCH__  // (the host pass sees this constructor too)
    last = clock64();
    if (threadIdx.x == 0 && blockIdx.x < kMarkedBlocks) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      g_block_marks[blockIdx.x][kMarkStart] = global_ns();
      g_block_marks[blockIdx.x][kMarkSm] = sm;
    }
#endif
  }
  __device__ void mark(int slot) {
    if (threadIdx.x == 0) {
      const long long now = clock64();
      atomicAdd(&g_stage_clocks[slot], (unsigned long long)(now - last));
      last = now;
      if (blockIdx.x < kMarkedBlocks) g_block_marks[blockIdx.x][slot] = global_ns();
    }
  }
  __device__ void count(int slot, bool yes) {
    if (threadIdx.x == 0 && yes) atomicAdd(&g_stage_clocks[slot], 1ull);
  }
  // The pieces the block merged (the piece kernels' misses not found whole or in the cache).
  __device__ void merged(int pieces) {
    if (threadIdx.x == 0) {
      atomicAdd(&g_stage_clocks[kClockMergedPieces], (unsigned long long)pieces);
      if (blockIdx.x < kMarkedBlocks) g_block_marks[blockIdx.x][kMarkMerged] = (unsigned long long)pieces;
    }
  }
  // The first piece the block merged: m bytes at `at` (shared memory); m = -1: a piece whose
  // bytes are not its key (a SentencePiece-style word the misses' cache does not keep).
  __device__ void merged_piece(const uint8_t* at, int m) {
    if (threadIdx.x == 0 && blockIdx.x < kMarkedBlocks) {
      unsigned long long head = 0, tail = 0;
      for (int i = 0; i < m && i < 16; ++i) (i < 8 ? head : tail) |= (unsigned long long)at[i] << (8 * (i & 7));
      g_block_marks[blockIdx.x][kMarkMergedLen] = (unsigned long long)m;
      g_block_marks[blockIdx.x][kMarkMergedHead] = head;
      g_block_marks[blockIdx.x][kMarkMergedTail] = tail;
    }
  }
};
#else
struct StageClock {
  __device__ void mark(int) {}
  __device__ void count(int, bool) {}
  __device__ void merged(int) {}
  __device__ void merged_piece(const uint8_t*, int) {}
};
#endif

}  // namespace
}  // namespace bbpe
