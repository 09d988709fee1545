// NFC on the GPU before the encode (tokenizers whose normalizer is NFC, the encode call given
// the normalization operand, pretok/nfc_normalize.h): each row normalized into a buffer of the
// batch's shape, which the encode then reads in place of the raw rows; the CPU executor
// normalizes each row by the same header (cpu/encode_cpu.h, encode_string).
//
// One block per row: its threads copy the row and run the quick check (nfc_may_change_at) on
// its code points; where one may change, one thread normalizes the row (rows that need it are
// rare, and their work is a sequential scan). A row whose NFC does not fit its max_len bytes,
// or has a segment longer than kNfcSegmentScratch code points, is reported afterwards
// (count kCountNotNormalized), as the check reported text not in NFC.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "binding/encode_params.h"
#include "pretok/nfc_normalize.h"

namespace bbpe {
namespace {

constexpr int kNfcPrepassThreads = 256;

__global__ void __launch_bounds__(kNfcPrepassThreads)
    nfc_prepass_kernel(NfcOperand operand, const uint8_t* data, const int32_t* lengths, int32_t max_len,
                       uint8_t* out, int32_t* out_lengths, uint8_t* reported) {
  __shared__ NfcData d;
  __shared__ int ok, unsafe;
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) {
    ok = nfc_data_view(operand.data, operand.ints, &d);
    unsafe = 0;
  }
  __syncthreads();
  const int32_t raw = lengths[b];
  const uint8_t* src = data + b * max_len;
  uint8_t* dst = out + b * max_len;
  const bool valid = raw >= 0 && raw <= max_len;  // (else passed on: the encode reports it)
  const int n = valid ? raw : 0;
  bool mine = false;
  for (int i = threadIdx.x; i < max_len; i += kNfcPrepassThreads) {
    const uint8_t c = src[i];
    dst[i] = c;
    if (ok && i < n && c >= 0xC0 && nfc_may_change_at(d, src, n, nullptr, i)) mine = true;
  }
  if (mine) unsafe = 1;
  __syncthreads();
  if (threadIdx.x != 0) return;
  reported[b] = !ok;
  out_lengths[b] = ok || !valid ? raw : 0;
  if (!ok || !valid || !unsafe) return;
  uint32_t segment[kNfcSegmentScratch];
  const int m = nfc_normalize_row(d, src, n, nullptr, dst, max_len, segment, kNfcSegmentScratch);
  if (m < 0) {
    reported[b] = 1;
    out_lengths[b] = 0;
    return;
  }
  for (int i = m; i < n; ++i) dst[i] = 0;  // (rows are zero-padded, as packed)
  out_lengths[b] = m;
}

__global__ void nfc_report_rows(const uint8_t* reported, int64_t batch, int32_t* counts) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < batch && reported[b]) counts[b] = kCountNotNormalized;
}

// The pre-pass's buffers, from the stream's memory pool, given back when the encode is queued.
struct NfcPrepass {
  cudaStream_t stream = nullptr;
  uint8_t* rows = nullptr;
  int32_t* lengths = nullptr;
  uint8_t* reported = nullptr;
  ~NfcPrepass() {
    if (rows) cudaFreeAsync(rows, stream);
  }
};

// Normalizes p's rows into `buf` and points p at them (p.data, p.lengths).
cudaError_t nfc_prepass(EncodeParams& p, cudaStream_t stream, NfcPrepass& buf) {
  const size_t bytes = (size_t)p.batch * p.max_len, aligned = (bytes + 15) / 16 * 16;
  buf.stream = stream;
  void* mem = nullptr;
  cudaError_t e = cudaMallocAsync(&mem, aligned + (size_t)p.batch * 5, stream);
  if (e != cudaSuccess) return e;
  buf.rows = static_cast<uint8_t*>(mem);
  buf.lengths = reinterpret_cast<int32_t*>(buf.rows + aligned);
  buf.reported = reinterpret_cast<uint8_t*>(buf.lengths + p.batch);
  nfc_prepass_kernel<<<(unsigned)p.batch, kNfcPrepassThreads, 0, stream>>>(
      p.nfc_rewrite, p.data, p.lengths, p.max_len, buf.rows, buf.lengths, buf.reported);
  p.data = buf.rows;
  p.lengths = buf.lengths;
  return cudaGetLastError();
}

// After the encode: the rows the pre-pass could not normalize get count kCountNotNormalized.
cudaError_t nfc_report(const EncodeParams& p, cudaStream_t stream, const NfcPrepass& buf) {
  nfc_report_rows<<<(unsigned)((p.batch + 255) / 256), 256, 0, stream>>>(buf.reported, p.batch, p.counts);
  return cudaGetLastError();
}

}  // namespace
}  // namespace bbpe
