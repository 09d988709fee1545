// CUDA FFI target `bbpe_encode`: one thread block per string (BlockBPE).
//
// A block loads its string into shared memory (or, past kSmemMaxLen bytes, into its slice of a
// global workspace), marks special tokens and pre-tokenizer pieces and builds the initial byte
// tokens, flagging segment starts (specials and pieces). The segment starts are listed and
// the threads take them round robin: a special token stays one token; whole-piece shortcut;
// a piece of up to kShortPieceLen bytes that is not a token goes on a merge list: up to
// kLanePieceLen bytes, merged lane-parallel, several pieces to a warp (merge_in_lanes); longer
// ones by one warp each (merge_in_warp; the rule is core/bpe_core.h's). The pre-tokenizer's tables
// are an operand (pretok/tables.h, PretokView): each block copies a stage's step tables to
// shared memory.
// One scan places the results, straight into the output when nothing is left to do. Longer
// segments, and every segment in bytes mode (the paper's algorithm), go through block-wide
// merge passes. Each pass:
//   1. segmented minimum of the cached pair ranks (block scan, SegMin),
//   2. every pair whose rank is its segment's minimum is a candidate; leftmost-first selection
//      and the surviving-token count come out of one block scan (MergeCarry),
//   3. compaction into the other buffer; only pairs next to a merge are looked up again.
// Passes stop when no segment has a mergeable pair. The rules are those of core/bpe_core.h, the same
// functions the CPU handler calls. Where each array lives: binding/encode_params.h.
//
// The kernels, by stage, in headers that all belong to this one translation unit (so that what
// is inlined stays inlined and each template is instantiated once):
//   cuda/block_common.cuh   per-block arrays, block scans, the piece lengths of each strategy
//   cuda/stage_clock.cuh    per-stage cycle counters (profiling builds)
//   cuda/block_begin.cuh    the string loaded, special tokens, the pre-tokenizer call
//   cuda/lane_merges.cuh    short pieces merged lane-parallel, the listed pieces
//   cuda/merge_passes.cuh   the block-wide merge passes, token compaction
//   cuda/encode_kernel.cuh  byte-level BPE: encode_kernel (encode_segments)
//   cuda/chars_kernel.cuh   SentencePiece-style BPE: encode_chars_kernel
//   cuda/tile_rows.cuh      long rows: the tile pipeline's layout and its specials kernels
//   cuda/tile_pipeline.cuh  long rows: pre-tokenizer passes, encode, output, launch_tiles
//   cuda/huge_pieces.cuh    long rows: pieces longer than a tile, by stitched spans
//   cuda/sub_spans.cuh      a text merged in warp sub-spans (spans, the few rows' long pieces)
//   cuda/piece_kernel.cuh   exact mode piece-parallel, the default where a call allows it
//   cuda/piece_launch.cuh   the piece kernels' launch: the kernel asked for, the chunk size
//   cuda/miss_cache.cuh     its cache of merged misses (an operand it writes)
//   cuda/char_piece_kernel.cuh  the same for SentencePiece-style BPE
//   cuda/chunk_specials.cuh the special tokens of a piece kernel's chunks
//   cuda/nfc_prepass.cuh    NFC tokenizers: the rows checked, and normalized where they change
// This file: the launcher (one block per string, or the tile pipeline) and the FFI handlers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "binding/encode_ffi.h"
#include "binding/encode_params.h"
#include "binding/window_ffi.h"
#include "core/char_symbols.h"
// The cuda/*.cuh headers' unnamed namespace is this translation unit's: included from any
// other, they refuse (cuda/block_common.cuh, which every kernel header includes).
#define BBPE_ENCODE_CUDA_TU
#include "cuda/char_piece_kernel.cuh"
#include "cuda/chars_kernel.cuh"
#include "cuda/encode_kernel.cuh"
#include "cuda/jsonl_split.cuh"  // bbpe_split_lines, its own target
#include "cuda/nfc_prepass.cuh"
#include "cuda/piece_calls.cuh"
#include "cuda/piece_kernel.cuh"
#include "cuda/stage_clock.cuh"
#include "cuda/staged_uploads.h"
#include "cuda/tile_pipeline.cuh"

namespace bbpe {
namespace {

template <int kThreads>
cudaError_t launch(const EncodeParams& p, cudaStream_t stream) {
  if (tiled_rows(p.batch, p.max_len, p.pretok_stages, p.symbols)) return launch_tiles<kThreads>(p, stream);
  // Few rows (cuda/sub_spans.cuh): at least a warp per sub-span of a row-wide piece, and
  // their scratch after the row's arrays.
  const bool warp_pieces = warp_piece_launch(p);
  if constexpr (kThreads < kHugeThreads)
    if (warp_pieces && warp_piece_subs(p.max_len) > kThreads / 32) return launch<kThreads * 2>(p, stream);
  const size_t smem = (size_t)smem_bytes_per_string(p.max_len, p.pretok_stages, p.symbols) +
                      (warp_pieces ? warp_piece_smem_bytes(p.max_len) : 0);
  const bool chars = p.symbols == kSymbolsChars;
  cudaError_t err = chars ? allow_all_smem<encode_chars_kernel<kThreads>>() : allow_all_smem<encode_kernel<kThreads>>();
  if (err != cudaSuccess) return err;
  const auto kernel = chars ? encode_chars_kernel<kThreads> : encode_kernel<kThreads>;
  if (p.pending_only) return launch_dependent(kernel, (unsigned)p.batch, kThreads, smem, stream, p);
  kernel<<<(unsigned)p.batch, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <bool kCheck>
ffi::Error encode_cuda(cudaStream_t stream, const EncodeParams& params, int32_t block_size) {
  EncodeParams p = params;
  // Test hook: a smaller margin for huge pieces' spans, or -1: no stitch, every huge piece
  // merged whole; read per call so that tests can reach the fallback.
  if (const char* margin = std::getenv("BLOCKBPE_STITCH_MARGIN"))
    p.stitch_margin = std::clamp(std::atoi(margin), -1, kStitchMargin);
  // Test hooks (flags on the margin, cuda/huge_pieces.cuh): BLOCKBPE_STITCH_SECOND=0, no second
  // round for a boundary without a shared token; BLOCKBPE_STITCH_FALLBACK=0, no whole-piece merge
  // (the piece is left out), so a test can tell whether every boundary was stitched.
  const auto off = [](const char* name) {
    const char* v = std::getenv(name);
    return v && std::atoi(v) == 0;
  };
  if (p.stitch_margin >= 0 && off("BLOCKBPE_STITCH_SECOND")) p.stitch_margin |= kNoSecondRound;
  if (p.stitch_margin >= 0 && off("BLOCKBPE_STITCH_FALLBACK")) p.stitch_margin |= kNoFallback;
  // BLOCKBPE_WARP_SPANS=0: every span merged by its whole block (no sub-spans), and in
  // calls of few rows every long piece by the block passes (cuda/sub_spans.cuh).
  if (p.stitch_margin >= 0 && off("BLOCKBPE_WARP_SPANS")) p.stitch_margin |= kNoWarpSpans;
  // BLOCKBPE_MISS_CACHE=0: the misses' cache neither read nor written (cuda/miss_cache.cuh).
  if (off("BLOCKBPE_MISS_CACHE")) p.vocab.miss_cache = nullptr;
  // A batch that HostStaging is still copying in (cuda/staged_uploads.h): this stream waits
  // for the copy, not the host.
  if (cudaError_t e = StagedUploads::get().wait_on(stream, p.data); e != cudaSuccess)
    return ffi::Error::Internal(std::string("bbpe_encode: waiting for the staged copy: ") + cudaGetErrorString(e));
  if (p.batch == 0) return ffi::Error::Success();
  if (p.workspace_size < workspace_bytes(p.batch, p.max_len, p.pretok_stages, p.symbols))
    return ffi::Error::InvalidArgument("bbpe_encode: workspace has " + std::to_string(p.workspace_size) +
                                       " bytes, needs " + std::to_string(workspace_bytes(p.batch, p.max_len, p.pretok_stages, p.symbols)));
  if (kCheck) {
    // The checked target reads the lengths back (one small copy and a stream sync) so that a
    // bad length is an exception; bbpe_encode_unchecked skips this and flags the row instead.
    std::vector<int32_t> host(p.batch);
    cudaError_t e = cudaMemcpyAsync(host.data(), p.lengths, p.batch * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
    ffi::Error err = check_lengths(host.data(), p.batch, p.max_len);
    if (err.failure()) return err;
  }
  if (block_size != 256 && block_size != 512 && block_size != 1024)
    return ffi::Error::InvalidArgument("bbpe_encode: block_size must be 256, 512 or 1024, got " +
                                       std::to_string(block_size));
  cudaError_t e = cudaSuccess;
  NfcPrepass nfc;  // (buffers it allocated given back when this returns, after the launches)
  if (p.nfc_rewrite.ints) {
    e = nfc_prepass(p, stream, nfc);
    if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
  }
  const auto encode_rows = [&](const EncodeParams& q) {
    switch (block_size) {
      case 256: return launch<256>(q, stream);
      case 512: return launch<512>(q, stream);
      default: return launch<1024>(q, stream);
    }
  };
  // The piece-parallel kernel where the call allows it (cuda/piece_kernel.cuh; SentencePiece-style
  // BPE: cuda/char_piece_kernel.cuh), then encode_kernel (encode_chars_kernel) for the rows it
  // left pending only; BLOCKBPE_KERNEL=block: encode_kernel for every row. Test
  // hook BLOCKBPE_PIECE_FILL=0: no second launch (pending rows keep count kCountPending: how
  // many there were).
  const KernelChoice kernel = kernel_choice();
  if (kernel == KernelChoice::kUnknown)
    return ffi::Error::InvalidArgument(std::string("bbpe_encode: BLOCKBPE_KERNEL must be 'piece' or 'block', got '") +
                                       std::getenv("BLOCKBPE_KERNEL") + "'");
  if (kernel == KernelChoice::kPiece && (piece_eligible(p) || char_piece_eligible(p))) {
    e = p.symbols == kSymbolsChars ? launch_char_pieces(p, stream) : launch_pieces(p, stream);
    if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
    if (off("BLOCKBPE_PIECE_FILL")) return ffi::Error::Success();
    p.pending_only = 1;
  }
  e = encode_rows(p);
  if (e == cudaSuccess && p.nfc_rewrite.ints) {  // reported rows; the rewritten ones, if a second pass
    e = nfc_after_encode(p, stream, nfc);
    if (e == cudaSuccess && nfc.two_passes) e = encode_rows(p);
  }
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

// bbpe_encode_window (binding/window_ffi.h). A call's rows out of the window's bytes: row r is
// bytes[start, start + n) then zeros; an entry that reaches outside the bytes or the row gets
// length -1, which the encode kernel reports as count -1. Threads over all the call's bytes, not
// a block per row: a row of megabytes would be one block's long serial copy.
__global__ void gather_window_rows(const uint8_t* bytes, int64_t size, const int32_t* starts,
                                   const int32_t* lengths, int64_t rows, int64_t width, uint8_t* out,
                                   int32_t* row_lengths) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < rows * width; i += stride) {
    const int64_t r = i / width, col = i - r * width, start = starts[r], n = lengths[r];
    out[i] = entry_inside(start, n, width, size) && col < n ? bytes[start + col] : 0;
  }
  for (int64_t r = first; r < rows; r += stride)
    row_lengths[r] = entry_inside(starts[r], lengths[r], width, size) ? lengths[r] : -1;
}

// Packed rows' separators (separator_at), in three steps: how many in each row, where each
// row's first one goes (an exclusive scan over the rows), then each one into its slot.
constexpr int kSeparatorThreads = 256;

__global__ void __launch_bounds__(kSeparatorThreads)
    count_separators(const int32_t* ids, const int32_t* counts, int64_t T, int32_t sep_id, int32_t* seps) {
  using Reduce = cub::BlockReduce<int, kSeparatorThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t r = blockIdx.x, end = separator_columns(counts[r], T);
  int n = 0;
  for (int64_t col = threadIdx.x; col < end; col += kSeparatorThreads) n += separator_at(ids + r * T, col, sep_id);
  n = Reduce(tmp).Sum(n);
  if (threadIdx.x == 0) seps[r] = n;
}

__global__ void __launch_bounds__(kSeparatorThreads) exclusive_scan_rows(int32_t* seps, int64_t rows) {
  using Scan = cub::BlockScan<int, kSeparatorThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int running = 0;
  for (int64_t done = 0; done < rows; done += kSeparatorThreads) {
    const int64_t r = done + threadIdx.x;
    int before, total;
    Scan(tmp).ExclusiveSum(r < rows ? seps[r] : 0, before, total);
    if (r < rows) seps[r] = running + before;
    running += total;
    __syncthreads();  // (tmp is reused)
  }
}

__global__ void __launch_bounds__(kSeparatorThreads)
    place_separators(const int32_t* ids, const int32_t* counts, const int32_t* first_slot, int64_t T, int32_t sep_id,
                     int64_t at, int64_t docs, int32_t* slots) {
  using Scan = cub::BlockScan<int, kSeparatorThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int64_t r = blockIdx.x, end = separator_columns(counts[r], T);
  int64_t running = first_slot[r];
  for (int64_t done = 0; done < end; done += kSeparatorThreads) {
    const int64_t col = done + threadIdx.x;
    const int is_sep = col < end && separator_at(ids + r * T, col, sep_id);
    int k, total;
    Scan(tmp).ExclusiveSum(is_sep, k, total);
    if (is_sep && running + k < docs) slots[running + k] = (int32_t)(at + r * T + col);
    running += total;
    __syncthreads();  // (tmp is reused)
  }
}

ffi::Error encode_window_cuda(cudaStream_t stream, const EncodeParams& base, const std::vector<WindowCall>& calls,
                              const WindowArgs& w, int32_t block_size) {
  for (const WindowCall& c : calls) {
    if (c.rows == 0) continue;
    const WindowScratch s = window_scratch(c.rows, c.width, base.pretok_stages, base.symbols);
    uint8_t* rows = w.workspace + s.rows_at;
    int32_t* lengths = reinterpret_cast<int32_t*>(w.workspace + s.lengths_at);
    int32_t* counts = reinterpret_cast<int32_t*>(w.workspace + s.counts_at);
    int32_t* seps = reinterpret_cast<int32_t*>(w.workspace + s.seps_at);
    const int64_t gather_blocks = std::min<int64_t>((c.rows * c.width + 1023) / 1024, 1 << 16);
    gather_window_rows<<<(unsigned)gather_blocks, 256, 0, stream>>>(
        w.bytes, w.size, w.table + c.entry, w.table + w.entries + c.entry, c.rows, c.width, rows, lengths);
    EncodeParams p = window_call_params(base, c, w.raw, rows, lengths, counts);
    p.workspace = w.workspace + s.encode_at;
    p.workspace_size = s.bytes - s.encode_at;
    const ffi::Error err = encode_cuda<false>(stream, p, block_size);
    if (err.failure()) return err;
    if (!c.docs) continue;
    int32_t* slots = after_ids(c, w.raw);
    cudaMemsetAsync(slots, 0xFF, (size_t)c.docs * sizeof(int32_t), stream);  // (-1: no separator)
    count_separators<<<(unsigned)c.rows, kSeparatorThreads, 0, stream>>>(p.ids, counts, c.T, w.sep_id, seps);
    exclusive_scan_rows<<<1, kSeparatorThreads, 0, stream>>>(seps, c.rows);
    place_separators<<<(unsigned)c.rows, kSeparatorThreads, 0, stream>>>(p.ids, counts, seps, c.T, w.sep_id, c.at,
                                                                         c.docs, slots);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode_window: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace

#ifdef BBPE_STAGE_CLOCKS
// Reads and zeroes the stage clocks (the names in StageClockSlot order).
std::vector<std::pair<std::string, unsigned long long>> read_stage_clocks() {
  static const char* names[kStageClockSlots] = {
      "load", "specials", "pretokenize", "initial", "segments", "merges", "keep", "output",
      "passes", "blocks", "long_blocks", "merged_pieces"};
  unsigned long long host[kStageClockSlots] = {};
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(host, g_stage_clocks, sizeof(host));
  const unsigned long long zero[kStageClockSlots] = {};
  cudaMemcpyToSymbol(g_stage_clocks, zero, sizeof(zero));
  std::vector<std::pair<std::string, unsigned long long>> out;
  for (int k = 0; k < kStageClockSlots; ++k) out.emplace_back(names[k], host[k]);
  return out;
}

// Reads and zeroes the blocks' marks: kMarkedBlocks rows of kBlockMarkSlots (the stages in
// StageClockSlot order, 0 where not reached; then the start, the SM, the pieces merged and the
// first of them: its length, its bytes 0..7 and 8..15, little-endian), flat.
std::vector<unsigned long long> read_block_marks() {
  std::vector<unsigned long long> host((size_t)kMarkedBlocks * kBlockMarkSlots);
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(host.data(), g_block_marks, host.size() * sizeof(host[0]));
  const std::vector<unsigned long long> zero(host.size());
  cudaMemcpyToSymbol(g_block_marks, zero.data(), zero.size() * sizeof(zero[0]));
  return host;
}
#endif
}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCuda, (bbpe::encode_handler<bbpe::encode_cuda<true>, cudaStream_t>),
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
// No host read-back. Not marked command-buffer compatible: XLA's capture of it into a CUDA
// graph is not shown to work, and measured no faster (docs/design.md, "Lengths"); and the
// handler must run at every call, to wait for a staged copy (cuda/staged_uploads.h).
XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked, (bbpe::encode_handler<bbpe::encode_cuda<false>, cudaStream_t>),
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
// Every call of a corpus-job window (binding/window_ffi.h); no host read-back either.
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    BbpeEncodeWindowCuda, (bbpe::window_handler<bbpe::encode_window_cuda, true, cudaStream_t>),
    bbpe::bind_encode_window(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
