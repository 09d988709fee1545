// BBPE_HD marks the functions both executors share: __host__ __device__ under nvcc (the CUDA
// kernels), a plain inline function under g++ (the CPU handler).
#pragma once

#if defined(__CUDACC__)
#define BBPE_HD __host__ __device__ __forceinline__
#else
#define BBPE_HD inline
#endif
