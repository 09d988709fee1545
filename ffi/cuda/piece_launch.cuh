// The piece kernels' launch, on the host: which kernel BLOCKBPE_KERNEL asks for, the chunk size
// a call's shape gets, and a launch of kChunk-byte chunks over the call's rows. Shared by
// cuda/piece_kernel.cuh and cuda/char_piece_kernel.cuh (which calls each takes:
// cuda/piece_calls.cuh).
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "binding/encode_params.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

constexpr int kPieceThreads = 256;  // a piece kernel's block: 256 chunks

// The kernel BLOCKBPE_KERNEL asks for (read per call, as the handler's test hooks are): unset or
// "piece", the piece kernel wherever piece_eligible holds; "block", encode_kernel for every call
// (benchmarks, the block kernel's tests and profiles). Any other value is the caller's mistake.
enum class KernelChoice { kPiece, kBlock, kUnknown };
inline KernelChoice kernel_choice() {
  const char* k = std::getenv("BLOCKBPE_KERNEL");
  if (!k || !*k || std::strcmp(k, "piece") == 0) return KernelChoice::kPiece;
  return std::strcmp(k, "block") == 0 ? KernelChoice::kBlock : KernelChoice::kUnknown;
}

inline int device_sms() {
  static std::atomic<int> sms_of[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  int sms = sms_of[device & 63].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 132;
    sms_of[device & 63].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// Bytes per chunk: the largest of 16, 8, 4, 2 that still gives two blocks per SM (fewer bytes a
// thread is more parallelism for small calls), but at least what a row of L bytes needs
// (L <= 256 chunks). BLOCKBPE_PIECE_CHUNK overrides it (benchmarks), within what L allows.
inline int piece_chunk(int64_t batch, int64_t max_len) {
  int least = 2;
  while ((int64_t)least * kPieceThreads < max_len) least *= 2;
  const auto blocks = [&](int c) {
    const int64_t cpr = (max_len + c - 1) / c, rows = kPieceThreads / cpr;
    return (batch + rows - 1) / rows;
  };
  int c = 16;
  while (c > least && blocks(c) < 2 * device_sms()) c /= 2;
  if (const char* f = std::getenv("BLOCKBPE_PIECE_CHUNK")) {
    const int want = std::atoi(f);
    if (want == 2 || want == 4 || want == 8 || want == 16) c = want < least ? least : want;
  }
  return c;
}

// A kernel of kChunk-byte chunks over the call's rows (piece_kernel, char_piece_kernel): a
// block of kPieceThreads holds floor(kPieceThreads / chunks a row) whole rows.
template <auto kKernel, int kChunk>
cudaError_t launch_chunk_rows(const EncodeParams& p, size_t smem, cudaStream_t stream) {
  const int cpr = (int)((p.max_len + kChunk - 1) / kChunk);
  const int rows = kPieceThreads / cpr;
  const int64_t grid = (p.batch + rows - 1) / rows;
  if (grid > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const cudaError_t err = allow_all_smem<kKernel>();
  if (err != cudaSuccess) return err;
  kKernel<<<(unsigned)grid, kPieceThreads, smem, stream>>>(p, cpr, rows);
  return cudaGetLastError();
}

// launch(std::integral_constant<int, kChunk>) at the chunk size piece_chunk picks for the call.
template <class Launch>
cudaError_t at_piece_chunk(const EncodeParams& p, Launch launch) {
  switch (piece_chunk(p.batch, p.max_len)) {
    case 2: return launch(std::integral_constant<int, 2>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    default: return launch(std::integral_constant<int, 16>{});
  }
}

}  // namespace
}  // namespace bbpe
