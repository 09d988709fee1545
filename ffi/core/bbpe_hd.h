// BBPE_HD marks the functions both executors share: __host__ __device__ under nvcc (the CUDA
// kernels), a plain inline function under g++ (the CPU handler).
//
// BBPE_HD_OUTLINE marks the few shared functions that are big and called rarely or from many
// places (the non-ASCII byte classes, full map composition, the one-thread merge): the GPU
// calls them instead of inlining them. With everything inlined, the encode kernel was ~500 KB
// of machine code and ncu found its warps waiting on instruction fetches ("no instruction")
// for a fifth of their stall samples.
//
// BBPE_UNROLL unrolls a loop of a compile-time count in a kernel (so the arrays it indexes stay
// in registers); nothing on the host.
//
// ctz32 / ctz64: the index of the lowest set bit, on either side.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BBPE_HD __host__ __device__ __forceinline__
#define BBPE_HD_OUTLINE __host__ __device__ __noinline__ inline
#define BBPE_UNROLL _Pragma("unroll")
#else
#define BBPE_HD inline
#define BBPE_HD_OUTLINE inline
#define BBPE_UNROLL
#endif

namespace bbpe {

// The index of x's lowest set bit (x != 0).
BBPE_HD int ctz32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __ffs((int)x) - 1;
#else
  return __builtin_ctz(x);
#endif
}
BBPE_HD int ctz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __ffsll((long long)x) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

}  // namespace bbpe
