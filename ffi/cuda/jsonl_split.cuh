// The CUDA handler of `bbpe_split_lines` (binding/split_lines_ffi.h): a block of whole lines,
// already on the GPU, split into documents there (the steps and their per-line functions:
// core/json_lines.h). Eleven launches on the call's stream, no host round trip:
//   count_newlines   a warp per tile of kSplitTile bytes counts its newlines;
//   scan_tiles       one block scans the counts (each tile's first newline's line index);
//   line_starts      a warp per tile writes where each of its lines starts;
//   measure_lines    a thread per line: measure_line (its document's bytes, or give up; a line
//                    over kThreadLine bytes: walked up to its field's string, listed for a
//                    warp, or over kWarpLine for a block);
//   measure_long     per listed line, a group (a warp, or a block of kBlockPieces threads):
//                    the field string's end found by the threads at once (group_string_end)
//                    and the rest of the line walked (long_field_span), then a piece a thread
//                    (PieceCut, its escape state from a scan of the pieces' maps):
//                    measure_span, summed;
//   scan_lines       a block per kScanChunk lines scans which are documents and their bytes;
//   scan_chunks      one block scans the chunks' totals and writes the status;
//   write_lines      a thread per line decodes its document into place (a long line: only
//                    its separator), only where the status is kSplitOk;
//   write_long       per long line, its group: each thread measures its piece again, a scan
//                    of the lengths places it after the pieces before it, and it is decoded.
// A thread parses a line of up to kThreadLine bytes alone; a longer line's field string is
// scanned, checked and decoded by slices and pieces, so that no thread's serial steps (which
// every line's kernel waits for) grow with a line's length past about a kilobyte.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <string>

#include "binding/split_lines_ffi.h"
#include "core/json_lines.h"

namespace bbpe {
namespace split_lines_cuda {

using jsonl::SplitSpec;
using jsonl::SplitWorkspace;

struct SplitArgs {
  const uint8_t* block;
  const int32_t* size;  // device scalar: bytes of the block used
  int64_t capacity;     // N
  int64_t max_lines, max_bytes;
  uint8_t* data;
  int32_t* offsets;
  int32_t* lines;
  int32_t* status;
  int32_t* ws;
  SplitWorkspace w;
  SplitSpec spec;
};

enum Counter { kNewlines = 0, kBadLine = 1, kWarpCount = 2, kBlockCount = 3 };
constexpr int kScanThreads = 512;  // (1024 threads of int64 BlockScans spill: at most 64 registers each)
constexpr int kTileWarps = 8;
constexpr int kLineThreads = 256;
static_assert(jsonl::kScanChunk == kScanThreads, "a chunk of lines is one block's scan");

__device__ __forceinline__ int64_t used_bytes(const SplitArgs& a) {
  const int64_t s = *a.size;
  return s < 0 ? 0 : (s > a.capacity ? a.capacity : s);
}

// Newlines in each tile: a warp per tile, four bytes a lane (aligned words; the tile's tail
// byte by byte).
__global__ void count_newlines(SplitArgs a) {
  const int64_t tile = (int64_t)blockIdx.x * kTileWarps + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (tile >= a.w.tiles) return;
  const int64_t n = used_bytes(a), begin = tile * jsonl::kSplitTile;
  const int64_t end = begin + jsonl::kSplitTile < n ? begin + jsonl::kSplitTile : n;
  int count = 0;
  const bool aligned = ((uintptr_t)a.block & 3) == 0;
  for (int64_t i = begin + 4 * lane; i < end; i += 128) {
    if (aligned && i + 4 <= end) {
      const uint32_t v = *reinterpret_cast<const uint32_t*>(a.block + i);
      count += __popc(__vcmpeq4(v, 0x0A0A0A0Au)) / 8;
    } else {
      for (int64_t k = i; k < i + 4 && k < end; ++k) count += a.block[k] == '\n';
    }
  }
  for (int o = 16; o; o >>= 1) count += __shfl_down_sync(0xFFFFFFFFu, count, o);
  if (lane == 0) a.ws[a.w.tile_newlines + tile] = count;
}

// x[0, n) replaced by its exclusive sum by one block of kScanThreads; the total returned to every thread.
__device__ int64_t exclusive_scan_one_block(int32_t* x, int64_t n) {
  using Scan = cub::BlockScan<int64_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int64_t carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kScanThreads) {
    const int64_t i = base + threadIdx.x;
    int64_t before, sum;
    Scan(temp).ExclusiveSum(i < n ? (int64_t)x[i] : 0, before, sum);
    if (i < n) x[i] = (int32_t)(carry + before);
    __syncthreads();
    if (threadIdx.x == 0) carry += sum;
    __syncthreads();
  }
  const int64_t total = carry;
  __syncthreads();  // (read by all before a next call's thread 0 resets it)
  return total;
}

__global__ void __launch_bounds__(kScanThreads) scan_tiles(SplitArgs a) {
  const int64_t newlines = exclusive_scan_one_block(a.ws + a.w.tile_newlines, a.w.tiles);
  if (threadIdx.x == 0) {
    a.ws[a.w.counters + kNewlines] = (int32_t)newlines;
    a.ws[a.w.counters + kBadLine] = 0x7FFFFFFF;
    a.ws[a.w.counters + kWarpCount] = 0;
    a.ws[a.w.counters + kBlockCount] = 0;
    a.ws[a.w.line_start] = 0;
  }
}

// line_start[k + 1] = the byte after the k-th newline (k < lines): a warp per tile, a byte a
// lane, the newlines ranked by a ballot.
__global__ void line_starts(SplitArgs a) {
  const int64_t tile = (int64_t)blockIdx.x * kTileWarps + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (tile >= a.w.tiles) return;
  const int64_t n = used_bytes(a), begin = tile * jsonl::kSplitTile;
  const int64_t end = begin + jsonl::kSplitTile < n ? begin + jsonl::kSplitTile : n;
  int64_t k = a.ws[a.w.tile_newlines + tile];  // newlines before this tile
  int32_t* start = a.ws + a.w.line_start;
  for (int64_t at = begin; at < end; at += 32) {
    const int64_t i = at + lane;
    const bool newline = i < end && a.block[i] == '\n';
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, newline);
    const int64_t line = k + __popc(mask & ((1u << lane) - 1)) + 1;
    if (newline && line <= a.w.lines) start[line] = (int32_t)(i + 1);
    k += __popc(mask);
  }
}

// Line i's bytes [*begin, *end), no newline; false past the block's last line.
__device__ __forceinline__ bool line_bytes(const SplitArgs& a, int64_t i, const uint8_t** begin,
                                           const uint8_t** end) {
  const int64_t newlines = a.ws[a.w.counters + kNewlines];
  if (newlines > a.max_lines || i > newlines) return false;
  const int32_t* start = a.ws + a.w.line_start;
  *begin = a.block + start[i];
  *end = i < newlines ? a.block + start[i + 1] - 1 : a.block + used_bytes(a);
  return true;
}

__global__ void __launch_bounds__(kLineThreads) measure_lines(SplitArgs a) {
  const int64_t i = (int64_t)blockIdx.x * kLineThreads + threadIdx.x;
  if (i >= a.w.lines) return;
  const uint8_t *begin, *end, *raw = nullptr, *raw_end = nullptr;
  int32_t n = jsonl::kNotDocument;
  if (line_bytes(a, i, &begin, &end)) {
    n = jsonl::measure_line(begin, end, a.spec, &raw, &raw_end);
    if (n == jsonl::kGiveUp) atomicMin(a.ws + a.w.counters + kBadLine, (int32_t)i);
    if (n == jsonl::kLongPending) {  // (fewer than warp_lines, block_lines: each over kThreadLine, kWarpLine bytes)
      const bool block_line = end - begin > jsonl::kWarpLine;
      const int64_t slot = atomicAdd(a.ws + a.w.counters + (block_line ? kBlockCount : kWarpCount), 1);
      int32_t* entry = a.ws + (block_line ? a.w.block_longs : a.w.warp_longs) + jsonl::kLongWords * slot;
      entry[0] = (int32_t)i;
      entry[1] = (int32_t)(raw - a.block);
      entry[2] = (int32_t)(raw_end - a.block);
    }
  }
  a.ws[a.w.length + i] = n;
  a.ws[a.w.raw_begin + i] = raw ? (int32_t)(raw - a.block) : 0;
}

// The threads that take one long line together: a warp (its lanes, by shuffles) or a block of
// kBlockPieces threads (by shared memory). Every thread of a group calls each function alike
// (the same line, so the same walk): they hold the group's barriers.
struct WarpGroup {
  static constexpr int kSize = jsonl::kWarpPieces;
  static constexpr unsigned kAll = 0xFFFFFFFFu;
  int rank;
  __device__ void sync() const { __syncwarp(); }
  // The maps of the ranks before this one composed (kSameEscape for rank 0); *all: every rank's.
  __device__ uint32_t maps_before(uint32_t map, uint32_t* all) const {
    uint32_t through = map;
    for (int d = 1; d < kSize; d <<= 1) {
      const uint32_t before = __shfl_up_sync(kAll, through, d);
      if (rank >= d) through = jsonl::escape_map_then(before, through);
    }
    *all = __shfl_sync(kAll, through, kSize - 1);
    const uint32_t before = __shfl_up_sync(kAll, through, 1);
    return rank == 0 ? jsonl::kSameEscape : before;
  }
  // The sum of n over the ranks before this one; *all: over every rank.
  __device__ int32_t sum_before(int32_t n, int32_t* all) const {
    int32_t through = n;
    for (int d = 1; d < kSize; d <<= 1) {
      const int32_t before = __shfl_up_sync(kAll, through, d);
      if (rank >= d) through += before;
    }
    *all = __shfl_sync(kAll, through, kSize - 1);
    return through - n;
  }
  __device__ bool all(bool v) const { return __all_sync(kAll, v); }
  // The lowest rank where v holds, or -1; `value` as that rank has it.
  __device__ int first(bool v, int32_t* value) const {
    const unsigned found = __ballot_sync(kAll, v);
    const int f = found ? __ffs(found) - 1 : -1;
    *value = __shfl_sync(kAll, *value, f < 0 ? 0 : f);
    return f;
  }
};

struct BlockGroup {
  static constexpr int kSize = jsonl::kBlockPieces;
  struct MapThen {
    __device__ uint32_t operator()(uint32_t first, uint32_t second) const {
      return jsonl::escape_map_then(first, second);
    }
  };
  using MapScan = cub::BlockScan<uint32_t, kSize>;
  using SumScan = cub::BlockScan<int32_t, kSize>;
  struct Shared {
    union {
      typename MapScan::TempStorage maps;
      typename SumScan::TempStorage sums;
    } scan;
    int32_t first, value;
  };
  Shared& s;
  int rank;
  __device__ void sync() const { __syncthreads(); }
  __device__ uint32_t maps_before(uint32_t map, uint32_t* all) const {
    uint32_t before;
    MapScan(s.scan.maps).ExclusiveScan(map, before, jsonl::kSameEscape, MapThen{}, *all);
    __syncthreads();  // (the storage is used again)
    return before;
  }
  __device__ int32_t sum_before(int32_t n, int32_t* all) const {
    int32_t before;
    SumScan(s.scan.sums).ExclusiveSum(n, before, *all);
    __syncthreads();
    return before;
  }
  __device__ bool all(bool v) const { return __syncthreads_and(v) != 0; }
  __device__ int first(bool v, int32_t* value) const {
    if (rank == 0) s.first = kSize;
    __syncthreads();
    if (v) atomicMin(&s.first, rank);
    __syncthreads();
    const int f = s.first;
    if (rank == f) s.value = *value;
    __syncthreads();
    if (f < kSize) *value = s.value;
    __syncthreads();  // (read by all before the next call's rank 0 resets it)
    return f < kSize ? f : -1;
  }
};

// Just past the string whose bytes start at `begin` (string_end's result), found by a group
// (every thread calls it alike): rounds of G::kSize slices of kSliceBytes, a slice a thread
// (core/json_rules.h, slice_end: its first unescaped quote and the escape state after it, for
// either state before it). Whether a slice's first byte is escaped is carried across the
// threads by an exclusive scan of the slices' maps and across rounds by all of the round's
// maps composed; the first round with an unescaped quote in it ends the string at the first
// such thread's. So a string of L bytes takes ~L / (G::kSize * 64) rounds of about a load's
// latency and a scan each. (core/json_lines.h, string_end_by_rounds: the same, one thread
// after the other.)
template <typename Group>
__device__ const uint8_t* group_string_end(const Group& g, const uint8_t* begin, const uint8_t* end) {
  constexpr int64_t kRound = (int64_t)Group::kSize * jsonl::kSliceBytes;
  bool escaped = false;  // whether the round's first byte is escaped
  for (const uint8_t* round = jsonl::first_slice(begin); round < end; round += kRound) {
    const uint8_t* at = round + g.rank * jsonl::kSliceBytes;
    uint64_t quotes = 0, backslashes = 0;
    if (at < end) jsonl::slice_bits(at, begin, end, quotes, backslashes);
    const jsonl::SliceEnd s = jsonl::slice_end(quotes, backslashes);
    uint32_t all;
    const uint32_t before = g.maps_before(s.map, &all);
    int32_t quote = s.quote(jsonl::escaped_after(before, escaped));
    const int first = g.first(quote >= 0, &quote);
    if (first >= 0) return round + first * jsonl::kSliceBytes + quote + 1;
    escaped = jsonl::escaped_after(all, escaped);
  }
  return nullptr;
}

// This thread's piece of a long line's span [begin, end) (PieceCut: each piece's escape state
// from the scan of the pieces' maps); false where the span cannot be cut (the line gives up).
template <typename Group>
__device__ __forceinline__ bool group_piece(const Group& g, const uint8_t* begin, const uint8_t* end, bool json, const uint8_t** p,
                            const uint8_t** stop) {
  const jsonl::PieceCut cut(begin, end, Group::kSize, json);
  const uint32_t own = cut.map(g.rank);
  uint32_t all;
  const uint32_t before = g.maps_before(own, &all);
  return cut.piece(g.rank, Group::kSize, before, own, p, stop);
}

// A long line measure_lines listed, by its group: a JSONL line's field string found (its end
// and the rest of the line: long_field_span, the group's scan for each string's end; the span
// kept in the entry for write_long), then a piece a thread (measure_span); its length is the
// pieces' sum and the separator, or "give up" where the span or any piece does.
template <typename Group>
__device__ __forceinline__ void measure_long(const SplitArgs& a, const Group& g, int32_t* entry) {
  const uint8_t* begin = a.block + entry[1];
  const uint8_t* end = a.block + entry[2];  // (JSONL: the line's end, then the field string's)
  const int32_t line = entry[0];
  bool span = true;
  if (a.spec.json) {
    const uint8_t* line_end = end;
    span = jsonl::long_field_span(begin, line_end, a.spec, end, [&g](const uint8_t* b, const uint8_t* e) {
      return group_string_end(g, b, e);
    });
    g.sync();  // (every thread has read the entry)
    if (g.rank == 0 && span) {
      entry[1] = (int32_t)(begin - a.block);
      entry[2] = (int32_t)(end - a.block);
    }
  }
  int32_t n = -1;
  if (span) {
    const uint8_t *p, *stop;
    if (group_piece(g, begin, end, a.spec.json, &p, &stop)) n = jsonl::measure_span(p, stop, a.spec.json);
  }
  const bool ok = g.all(n >= 0);
  int32_t total;
  g.sum_before(ok ? n : 0, &total);
  if (g.rank == 0) {
    a.ws[a.w.length + line] = ok ? total + a.spec.sep_len : jsonl::kGiveUp;
    if (!ok) atomicMin(a.ws + a.w.counters + kBadLine, line);
  }
}

// A warp per line of kThreadLine to kWarpLine bytes that measure_lines listed.
__global__ void measure_warp_lines(SplitArgs a) {
  const int64_t w = (int64_t)blockIdx.x * kTileWarps + threadIdx.x / 32;
  if (w >= a.ws[a.w.counters + kWarpCount]) return;
  measure_long(a, WarpGroup{(int)(threadIdx.x & 31)}, a.ws + a.w.warp_longs + jsonl::kLongWords * w);
}

// A block per line over kWarpLine bytes that measure_lines listed.
__global__ void __launch_bounds__(jsonl::kBlockPieces) measure_block_lines(SplitArgs a) {
  __shared__ BlockGroup::Shared shared;
  if (blockIdx.x >= a.ws[a.w.counters + kBlockCount]) return;
  measure_long(a, BlockGroup{shared, (int)threadIdx.x}, a.ws + a.w.block_longs + jsonl::kLongWords * blockIdx.x);
}

// Per chunk of lines: each line's document index and offset within the chunk, and the chunk's totals.
__global__ void __launch_bounds__(kScanThreads) scan_lines(SplitArgs a) {
  using Scan = cub::BlockScan<int64_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t i = (int64_t)blockIdx.x * kScanThreads + threadIdx.x;
  const int32_t n = i < a.w.lines ? a.ws[a.w.length + i] : jsonl::kNotDocument;
  int64_t doc, docs, at, bytes;
  Scan(temp).ExclusiveSum(n >= 0 ? 1 : 0, doc, docs);
  __syncthreads();
  Scan(temp).ExclusiveSum(n >= 0 ? (int64_t)n : 0, at, bytes);
  if (i < a.w.lines) {
    a.ws[a.w.doc_of + i] = (int32_t)doc;
    a.ws[a.w.offset_of + i] = (int32_t)(at < 0x7FFFFFFF ? at : 0x7FFFFFFF);
  }
  if (threadIdx.x == 0) {
    a.ws[a.w.chunk_docs + blockIdx.x] = (int32_t)docs;
    a.ws[a.w.chunk_bytes + blockIdx.x] = (int32_t)(bytes < 0x7FFFFFFF ? bytes : 0x7FFFFFFF);
  }
}

__global__ void __launch_bounds__(kScanThreads) scan_chunks(SplitArgs a) {
  const int64_t docs = exclusive_scan_one_block(a.ws + a.w.chunk_docs, a.w.chunks);
  const int64_t bytes = exclusive_scan_one_block(a.ws + a.w.chunk_bytes, a.w.chunks);
  if (threadIdx.x == 0) {
    const int32_t bad = a.ws[a.w.counters + kBadLine];
    jsonl::finish_status(a.status, a.ws[a.w.counters + kNewlines], bad == 0x7FFFFFFF ? -1 : bad, docs, bytes,
                         a.max_lines, a.max_bytes);
    a.offsets[0] = 0;
  }
}

// Line i's document index and where its bytes go in data (after the scans).
__device__ __forceinline__ void document_at(const SplitArgs& a, int64_t i, int64_t* doc, int64_t* at) {
  const int64_t chunk = i / kScanThreads;
  *doc = a.ws[a.w.chunk_docs + chunk] + (int64_t)a.ws[a.w.doc_of + i];
  *at = a.ws[a.w.chunk_bytes + chunk] + (int64_t)a.ws[a.w.offset_of + i];
}

__global__ void __launch_bounds__(kLineThreads) write_lines(SplitArgs a) {
  const int64_t i = (int64_t)blockIdx.x * kLineThreads + threadIdx.x;
  if (i >= a.w.lines || a.status[jsonl::kStatusCode] != jsonl::kSplitOk) return;
  const int32_t n = a.ws[a.w.length + i];
  const uint8_t *begin, *end;
  if (n < 0 || !line_bytes(a, i, &begin, &end)) return;
  int64_t doc, at;
  document_at(a, i, &doc, &at);
  if (end - begin > jsonl::kThreadLine) {  // (its field: write_long's, by pieces)
    for (int32_t k = 0; k < a.spec.sep_len; ++k) a.data[at + n - a.spec.sep_len + k] = a.spec.sep[k];
  } else {
    jsonl::write_line(a.block + a.ws[a.w.raw_begin + i], end, a.spec, a.data + at);
  }
  a.offsets[doc + 1] = (int32_t)(at + n);
  a.lines[doc] = (int32_t)i;
}

// A long line's field decoded into place by its group: each thread its piece (cut as
// measure_long cut it), measured again and placed after the pieces before it by a scan.
template <typename Group>
__device__ __forceinline__ void write_long(const SplitArgs& a, const Group& g, const int32_t* entry) {
  int64_t doc, at;
  document_at(a, entry[0], &doc, &at);
  const uint8_t *p, *stop;
  group_piece(g, a.block + entry[1], a.block + entry[2], a.spec.json, &p, &stop);
  const int32_t n = jsonl::measure_span(p, stop, a.spec.json);  // (>= 0: the status is kSplitOk)
  int32_t all;
  const int32_t before = g.sum_before(n, &all);
  jsonl::write_span(p, stop, a.spec.json, a.data + at + before);
}

__global__ void write_warp_lines(SplitArgs a) {
  const int64_t w = (int64_t)blockIdx.x * kTileWarps + threadIdx.x / 32;
  if (w >= a.ws[a.w.counters + kWarpCount] || a.status[jsonl::kStatusCode] != jsonl::kSplitOk) return;
  write_long(a, WarpGroup{(int)(threadIdx.x & 31)}, a.ws + a.w.warp_longs + jsonl::kLongWords * w);
}

// (At least one block an SM: without it ptxas kept this kernel to 32 registers and spilled.)
__global__ void __launch_bounds__(jsonl::kBlockPieces, 1) write_block_lines(SplitArgs a) {
  __shared__ BlockGroup::Shared shared;
  if (blockIdx.x >= a.ws[a.w.counters + kBlockCount] || a.status[jsonl::kStatusCode] != jsonl::kSplitOk) return;
  write_long(a, BlockGroup{shared, (int)threadIdx.x}, a.ws + a.w.block_longs + jsonl::kLongWords * blockIdx.x);
}

inline unsigned grid(int64_t items, int64_t per_block) { return (unsigned)((items + per_block - 1) / per_block); }

inline ffi::Error split_lines(cudaStream_t stream, ffi::Buffer<ffi::U8> block, ffi::Buffer<ffi::S32> size,
                              int32_t json, std::string_view field, ffi::Span<const uint8_t> sep,
                              ffi::ResultBuffer<ffi::U8> data, ffi::ResultBuffer<ffi::S32> offsets,
                              ffi::ResultBuffer<ffi::S32> lines, ffi::ResultBuffer<ffi::S32> status,
                              ffi::ResultBuffer<ffi::S32> workspace) {
  SplitCall call;
  const ffi::Error err = make_split_call(block.dimensions(), size.dimensions(), json, field, sep, data->dimensions(),
                                         offsets->dimensions(), lines->dimensions(), status->dimensions(), &call);
  if (err.failure()) return err;
  SplitArgs a{};
  a.w = jsonl::split_workspace(call.block_bytes, call.max_lines);
  if ((int64_t)workspace->element_count() < a.w.words)
    return ffi::Error::InvalidArgument("bbpe_split_lines: workspace has " + std::to_string(workspace->element_count()) +
                                       " words, needs " + std::to_string(a.w.words));
  a.block = block.typed_data();
  a.size = size.typed_data();
  a.capacity = call.block_bytes;
  a.max_lines = call.max_lines;
  a.max_bytes = call.max_bytes;
  a.data = data->typed_data();
  a.offsets = offsets->typed_data();
  a.lines = lines->typed_data();
  a.status = status->typed_data();
  a.ws = workspace->typed_data();
  a.spec = call.spec;
  const unsigned tile_blocks = grid(a.w.tiles, kTileWarps), line_blocks = grid(a.w.lines, kLineThreads),
                 warp_line_blocks = grid(a.w.warp_lines, kTileWarps), block_line_blocks = (unsigned)a.w.block_lines;
  if (tile_blocks) count_newlines<<<tile_blocks, kTileWarps * 32, 0, stream>>>(a);
  scan_tiles<<<1, kScanThreads, 0, stream>>>(a);
  if (tile_blocks) line_starts<<<tile_blocks, kTileWarps * 32, 0, stream>>>(a);
  measure_lines<<<line_blocks, kLineThreads, 0, stream>>>(a);
  measure_warp_lines<<<warp_line_blocks, kTileWarps * 32, 0, stream>>>(a);
  measure_block_lines<<<block_line_blocks, jsonl::kBlockPieces, 0, stream>>>(a);
  scan_lines<<<(unsigned)a.w.chunks, kScanThreads, 0, stream>>>(a);
  scan_chunks<<<1, kScanThreads, 0, stream>>>(a);
  write_lines<<<line_blocks, kLineThreads, 0, stream>>>(a);
  write_warp_lines<<<warp_line_blocks, kTileWarps * 32, 0, stream>>>(a);
  write_block_lines<<<block_line_blocks, jsonl::kBlockPieces, 0, stream>>>(a);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_split_lines: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace split_lines_cuda
}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeSplitLinesCuda, bbpe::split_lines_cuda::split_lines,
                              bbpe::bind_split_lines(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
