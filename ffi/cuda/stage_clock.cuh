// Per-stage cycle counters of the kernels (profiling builds only).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

namespace bbpe {
namespace {

// Stage clocks (a build option, BLOCKBPE_STAGE_CLOCKS=ON; normal builds compile them away):
// thread 0 of every block adds the cycles of each stage to device counters, which
// benchmarks/stage_clocks.py reads through the CUDA module.
enum StageClockSlot : int {
  kClockLoad, kClockSpecials, kClockPretokenize, kClockInitial, kClockSegments, kClockMerges,
  kClockOutput, kClockPasses, kClockBlocks, kClockLongBlocks, kStageClockSlots
};
#ifdef BBPE_STAGE_CLOCKS
__device__ unsigned long long g_stage_clocks[kStageClockSlots];
struct StageClock {
  long long last;
  __device__ StageClock() {
#ifdef __CUDA_ARCH__  // (the host pass sees this constructor too)
    last = clock64();
#endif
  }
  __device__ void mark(int slot) {
    if (threadIdx.x == 0) {
      const long long now = clock64();
      atomicAdd(&g_stage_clocks[slot], (unsigned long long)(now - last));
      last = now;
    }
  }
  __device__ void count(int slot, bool yes) {
    if (threadIdx.x == 0 && yes) atomicAdd(&g_stage_clocks[slot], 1ull);
  }
};
#else
struct StageClock {
  __device__ void mark(int) {}
  __device__ void count(int, bool) {}
};
#endif

}  // namespace
}  // namespace bbpe
