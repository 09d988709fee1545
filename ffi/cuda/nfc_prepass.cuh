// NFC on the GPU around the encode (tokenizers whose normalizer is NFC, the encode call given
// the normalization operand, pretok/nfc_normalize.h); the CPU executor normalizes each row by
// the same header (cpu/encode_cpu.h, encode_string).
//
// Nearly all text is in NFC already, so the pre-pass costs little there: one block per row
// reads the row (16 bytes a thread; a word with no byte >= kNfcFirstUnsafeLead, most of any
// Latin, Cyrillic or Greek text, is passed at once) and runs the quick check
// (nfc_may_change_at) at the other bytes. A row that may change is rewritten by its block, in
// parts (nfc_part_start): each thread sizes its part, a block scan places the parts, each
// thread writes its own, into a buffer of the batch's shape (a row with a segment longer than a
// thread's scratch: by one thread, whole). Then, by the kernel the call
// runs:
//   - byte-level rows that one block encodes (encode_kernel, which can do only some rows:
//     pending_only): two passes. The encode reads the caller's rows, a rewritten row given
//     length -1 (flagged at once, no work); nfc_mark_rows marks those kCountPending and
//     encode_kernel runs again on the buffer for them alone. A row in NFC is never copied.
//   - the tile pipeline's long rows and SentencePiece-style symbols (kernels that encode every
//     row): every row is copied to the buffer or rewritten there, and the encode reads it.
// A row whose NFC does not fit its max_len bytes, or has a segment longer than
// kNfcSegmentScratch code points, is reported (count kCountNotNormalized), as the check
// reported text not in NFC; so is every row where the operand does not fit its header.
// With special tokens in the call, specials are matched in the raw text and only the text
// between them is normalized (HF's order, cpu/encode_cpu.h: nfc_normalize_between_specials),
// while the encode kernel matches them in the rewritten row. The two agree unless the rewrite
// crosses a special (nfc_rewrite_may_cross_special); a row where it may is reported instead.
// The buffers are the workspace's tail (nfc_workspace_bytes, the encode call sizes it so), or
// else come from the stream's memory pool (a corpus window's calls).
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <cstdint>

#include "binding/encode_params.h"
#include "pretok/nfc_normalize.h"

namespace bbpe {
namespace {

constexpr int kNfcPrepassThreads = 256;
constexpr int kNfcMinPart = 16;  // bytes a thread rewrites at least (nfc_part_start's `part`)
// A thread's scratch for a segment, in code points: a letter and its marks in real text. Small,
// because every launch reserves a kernel's stack for all the threads a GPU holds, and one much
// larger than the encode kernels' would have the driver grow and shrink that memory around
// each pre-pass; a longer segment is rewritten with the executors' scratch in shared memory.
constexpr int kNfcThreadScratch = 24 + kNfcMaxDecomp;
constexpr unsigned kNfcLeadWord = kNfcFirstUnsafeLead * 0x01010101u;

// What the pre-pass did with a row.
enum NfcRowState : uint8_t { kNfcRowAsIs = 0, kNfcRowRewritten = 1, kNfcRowReported = 2 };

// The pre-pass's buffers (in the workspace's tail: binding/encode_params.h, nfc_prepass_bytes).
struct NfcPrepassRows {
  uint8_t* rows;         // [batch, max_len]: rewritten rows (one pass: every row)
  int32_t* raw_lengths;  // [batch] two passes, the first's lengths: the caller's, -1 where not as is
  int32_t* lengths;      // [batch] the rows' lengths in `rows`
  uint8_t* state;        // [batch] NfcRowState
};

// Whether any byte of the 16 is >= kNfcFirstUnsafeLead.
__device__ __forceinline__ bool nfc_word_needs_check(const uint4& v) {
  return (__vcmpgeu4(v.x, kNfcLeadWord) | __vcmpgeu4(v.y, kNfcLeadWord) | __vcmpgeu4(v.z, kNfcLeadWord) |
          __vcmpgeu4(v.w, kNfcLeadWord)) != 0;
}

// Whether rewriting the row src[0..n) (it may change) before the specials s are matched may
// give other matches than normalizing only the text between the raw text's matches. NFC leaves
// ASCII as it is and makes ASCII only of U+037E, U+1FEF and U+212A (';', '`', 'K'), so for
// specials of other ASCII bytes a rewrite keeps every match and makes none, except where a
// special's last byte, a starter, takes part in the segment after it (">" + U+0338 is U+226F):
// a row with such a byte before a code point whose decomposition starts with a mark or with a
// code point that composes with the byte may cross, as does every row with another special.
// Called by the whole block (the specials' last bytes gathered in shared memory).
__device__ bool nfc_rewrite_may_cross_special(const NfcData& d, const SpecialView& s, const uint8_t* src, int n) {
  __shared__ uint32_t last_bytes[4];  // bit c: an ASCII special ends in byte c
  __shared__ int other_special;
  const int t = threadIdx.x;
  if (t < 4) last_bytes[t] = 0;
  if (t == 0) other_special = 0;
  __syncthreads();
  for (int k = t; k < s.count; k += kNfcPrepassThreads) {
    const int32_t from = s.offsets[k], to = s.offsets[k + 1];
    for (int32_t i = from; i < to; ++i) {
      const uint8_t c = s.data[i];
      if (c >= 0x80 || c == ';' || c == '`' || c == 'K') atomicOr(&other_special, 1);
    }
    if (to > from && s.data[to - 1] < 0x80) atomicOr(&last_bytes[s.data[to - 1] >> 5], 1u << (s.data[to - 1] & 31));
  }
  __syncthreads();
  bool cross = other_special != 0;
  for (int i = t; !cross && i + 1 < n; i += kNfcPrepassThreads) {
    const uint8_t c = src[i];
    uint32_t cp, decomposed[kNfcMaxDecomp];
    if (c >= 0x80 || !(last_bytes[c >> 5] >> (c & 31) & 1u) || src[i + 1] < kNfcFirstUnsafeLead ||
        !nfc_unsafe_at(d, src, n, nullptr, i + 1) || !utf8_decode(src, n, nullptr, i + 1, &cp))
      continue;
    nfc_decompose(d, cp, decomposed);
    cross = nfc_prop_ccc(nfc_prop(d, decomposed[0])) != 0 || nfc_compose(d, c, decomposed[0]) >= 0;
  }
  return __syncthreads_or(cross);
}

// One block per row. copy_all: every row goes to out.rows (one pass); else only rewritten ones.
// specials: the call's (a row whose rewrite may cross one is reported, not rewritten).
__global__ void __launch_bounds__(kNfcPrepassThreads)
    nfc_prepass_kernel(NfcOperand operand, const uint8_t* data, const int32_t* lengths, int32_t max_len,
                       bool copy_all, SpecialView specials, NfcPrepassRows out) {
  using Scan = cub::BlockScan<int, kNfcPrepassThreads>;
  __shared__ NfcData d;
  __shared__ int ok;
  __shared__ int part_start[kNfcPrepassThreads];
  __shared__ typename Scan::TempStorage scan;
  const int64_t b = blockIdx.x;
  const int t = threadIdx.x;
  if (t == 0) ok = nfc_data_view(operand.data, operand.ints, &d);
  __syncthreads();
  const int32_t raw = lengths[b];
  const bool valid = raw >= 0 && raw <= max_len;  // (else passed on: the encode reports it)
  const int n = valid ? raw : 0;
  const uint8_t* src = data + b * (int64_t)max_len;
  uint8_t* dst = out.rows + b * (int64_t)max_len;

  // 1. The quick check, with the copy where every row is copied.
  bool may_change = false;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | (uintptr_t)max_len) & 15) == 0) {
    const int words = copy_all ? max_len / 16 : (n + 15) / 16;  // (n rounded up stays in the row)
    for (int w = t; w < words; w += kNfcPrepassThreads) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + w);
      if (copy_all) reinterpret_cast<uint4*>(dst)[w] = v;
      if (ok && w * 16 < n && nfc_word_needs_check(v))
        for (int i = w * 16; i < min(w * 16 + 16, n); ++i)
          may_change |= src[i] >= kNfcFirstUnsafeLead && nfc_may_change_at(d, src, n, nullptr, i);
    }
  } else {
    for (int i = t; i < (copy_all ? max_len : n); i += kNfcPrepassThreads) {
      const uint8_t c = src[i];
      if (copy_all) dst[i] = c;
      may_change |= ok && i < n && c >= kNfcFirstUnsafeLead && nfc_may_change_at(d, src, n, nullptr, i);
    }
  }
  const bool rewrite = __syncthreads_or(may_change);
  const bool report =
      !ok || (rewrite && specials.count > 0 && nfc_rewrite_may_cross_special(d, specials, src, n));
  if (report || !rewrite) {
    if (t == 0) {
      out.state[b] = report ? kNfcRowReported : kNfcRowAsIs;
      out.raw_lengths[b] = report ? -1 : raw;
      out.lengths[b] = report && valid ? 0 : raw;
    }
    return;
  }

  // 2. The rewrite: each thread's part sized, placed by a scan, then written.
  const int part = max(kNfcMinPart, (n + kNfcPrepassThreads - 1) / kNfcPrepassThreads);
  const int start = nfc_part_start(d, src, n, part, t);
  part_start[t] = start;
  __syncthreads();
  int end = n;  // (nfc_part_end, from the parts' starts the block has found)
  for (int j = t + 1; j < kNfcPrepassThreads; ++j)
    if (part_start[j] >= 0) {
      end = part_start[j];
      break;
    }
  uint32_t segment[kNfcThreadScratch];
  const int part_len = start >= 0 ? end - start : 0;
  const int len = part_len ? nfc_normalize_row(d, src + start, part_len, nullptr, nullptr, 3 * part_len, segment,
                                               kNfcThreadScratch)
                           : 0;
  int total;
  if (__syncthreads_or(len < 0)) {
    // A segment longer than a thread's scratch (hundreds of marks on a letter, at most): the
    // row by one thread, with the executors' scratch in shared memory.
    __shared__ uint32_t long_segment[kNfcSegmentScratch];
    __shared__ int whole;
    if (t == 0) whole = nfc_normalize_row(d, src, n, nullptr, dst, max_len, long_segment, kNfcSegmentScratch);
    __syncthreads();
    total = whole < 0 ? max_len + 1 : whole;
  } else {
    int at;
    Scan(scan).ExclusiveSum(len, at, total);
    if (total <= max_len && part_len)
      nfc_normalize_row(d, src + start, part_len, nullptr, dst + at, len, segment, kNfcThreadScratch);
  }
  const bool reported = total > max_len;
  if (!reported)
    for (int i = total + t; i < max_len; i += kNfcPrepassThreads) dst[i] = 0;  // (zero-padded, as packed)
  if (t == 0) {
    out.state[b] = reported ? kNfcRowReported : kNfcRowRewritten;
    out.raw_lengths[b] = -1;
    out.lengths[b] = reported ? 0 : total;
  }
}

// After the (first) encode: reported rows get kCountNotNormalized; with two passes the
// rewritten rows get kCountPending, for the second.
__global__ void nfc_mark_rows(const uint8_t* state, int64_t batch, bool pending, int32_t* counts) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  if (state[b] == kNfcRowReported) counts[b] = kCountNotNormalized;
  else if (pending && state[b] == kNfcRowRewritten) counts[b] = kCountPending;
}

// The pre-pass of one encode call.
struct NfcPrepass {
  NfcPrepassRows rows{};
  bool two_passes = false;
  cudaStream_t stream = nullptr;
  void* allocated = nullptr;  // the buffers, where the workspace has no room for them
  ~NfcPrepass() {
    if (allocated) cudaFreeAsync(allocated, stream);
  }
};

// Whether the call's kernel can encode only the rewritten rows in a second launch:
// encode_kernel (pending_only), not the tile pipeline or the SentencePiece-style kernel.
inline bool nfc_two_passes(const EncodeParams& p) {
  return p.symbols == kSymbolsBytes && !tiled_rows(p.batch, p.max_len, p.pretok_stages, p.symbols);
}

// Checks and normalizes p's rows, and points p at what the (first) encode reads.
cudaError_t nfc_prepass(EncodeParams& p, cudaStream_t stream, NfcPrepass& buf) {
  const int64_t at = nfc_prepass_at(p.batch, p.max_len, p.pretok_stages, p.symbols);
  const int64_t bytes = nfc_prepass_bytes(p.batch, p.max_len);
  uint8_t* mem = p.workspace + at;
  if (p.workspace_size < at + bytes) {
    buf.stream = stream;
    const cudaError_t e = cudaMallocAsync(&buf.allocated, (size_t)bytes, stream);
    if (e != cudaSuccess) return e;
    mem = static_cast<uint8_t*>(buf.allocated);
  }
  buf.rows.rows = mem;
  buf.rows.raw_lengths = reinterpret_cast<int32_t*>(mem + nfc_prepass_rows_bytes(p.batch, p.max_len));
  buf.rows.lengths = buf.rows.raw_lengths + p.batch;
  buf.rows.state = reinterpret_cast<uint8_t*>(buf.rows.lengths + p.batch);
  buf.two_passes = nfc_two_passes(p);
  nfc_prepass_kernel<<<(unsigned)p.batch, kNfcPrepassThreads, 0, stream>>>(
      p.nfc_rewrite, p.data, p.lengths, p.max_len, !buf.two_passes, p.special, buf.rows);
  if (buf.two_passes) {
    p.lengths = buf.rows.raw_lengths;  // (p.data stays the caller's rows)
  } else {
    p.data = buf.rows.rows;
    p.lengths = buf.rows.lengths;
  }
  return cudaGetLastError();
}

// After the (first) encode: the reported rows' counts; with two passes, p pointed at the
// rewritten rows for the second encode (pending_only), which the caller then launches.
cudaError_t nfc_after_encode(EncodeParams& p, cudaStream_t stream, const NfcPrepass& buf) {
  nfc_mark_rows<<<(unsigned)((p.batch + 255) / 256), 256, 0, stream>>>(buf.rows.state, p.batch, buf.two_passes,
                                                                       p.counts);
  if (buf.two_passes) {
    p.data = buf.rows.rows;
    p.lengths = buf.rows.lengths;
    p.pending_only = 1;
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace bbpe
