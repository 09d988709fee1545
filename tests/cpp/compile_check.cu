// Compile check (and GPU self-test kernel) for block_pretokenize:
//   nvcc -std=c++17 -arch=sm_90 --resource-usage -Iffi -c tests/cpp/compile_check.cu
// One block per string: the string goes to shared memory, block_pretokenize marks piece starts,
// the flags go back to global memory. tests/cpp/gpu_selftest.cu runs it against the host code.
#include <cub/block/block_scan.cuh>

#include "pretokenize.h"

namespace bbpe_check {

constexpr int kMaxLen = 4096;

template <int BT, int IPT>
__global__ void __launch_bounds__(BT)
pretok_kernel(int pattern, const uint8_t* data, const int* offsets, const uint8_t* special,
              uint8_t* flags) {
  using BP = bbpe::BlockPretokenizer<BT, IPT>;
  __shared__ uint8_t text[kMaxLen], sp[kMaxLen], ps[kMaxLen];
  __shared__ typename BP::TempStorage tmp;
  const int beg = offsets[blockIdx.x];
  const int n = offsets[blockIdx.x + 1] - beg;
  const bool in_smem = n <= kMaxLen;
  const uint8_t* t = in_smem ? text : data + beg;
  const uint8_t* s = in_smem ? sp : special + beg;
  uint8_t* out = in_smem ? ps : flags + beg;  // long strings run from global memory
  if (in_smem) {
    for (int i = threadIdx.x; i < n; i += BT) {
      text[i] = data[beg + i];
      sp[i] = special[beg + i];
    }
  }
  __syncthreads();
  const bbpe::UnicodeTables ut = bbpe::device_unicode_tables();
  bbpe::block_pretokenize<BT, IPT>(pattern, t, n, s, out, ut, tmp);
  __syncthreads();
  if (in_smem)
    for (int i = threadIdx.x; i < n; i += BT) flags[beg + i] = ps[i];
}

// The convenience form (static shared TempStorage, device Unicode tables, 4096-byte tiles).
template <int BT>
__global__ void __launch_bounds__(BT)
pretok_kernel_simple(int pattern, const uint8_t* data, const int* offsets, const uint8_t* special,
                     uint8_t* flags) {
  const int beg = offsets[blockIdx.x];
  bbpe::block_pretokenize<BT>(pattern, data + beg, offsets[blockIdx.x + 1] - beg, special + beg,
                              flags + beg);
}

template __global__ void pretok_kernel_simple<256>(int, const uint8_t*, const int*, const uint8_t*, uint8_t*);
template __global__ void pretok_kernel<256, 16>(int, const uint8_t*, const int*, const uint8_t*, uint8_t*);
template __global__ void pretok_kernel<512, 8>(int, const uint8_t*, const int*, const uint8_t*, uint8_t*);
template __global__ void pretok_kernel<1024, 4>(int, const uint8_t*, const int*, const uint8_t*, uint8_t*);

}  // namespace bbpe_check
