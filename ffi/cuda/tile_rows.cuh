// Long rows, the tile pipeline: its overview, where a row's arrays and tiles are (RowArrays,
// TileAt), and its first kernels, the special tokens of a row found tile by tile.
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

// ---------------------------------------------------------------------------------------------
// Long rows: the tile pipeline (binding/encode_params.h, tiled_rows). A row wider than kSmemMaxLen
// (or than a tile, in a batch of at most kFewRows rows) is cut into tiles of kTileBytes; the
// per-tile kernels run one block per (row, tile) (blocks of tiles past a row's length return at
// once) and hand what the next stage needs to the row kernels, one block per row, which compose
// it over the row's tiles:
//   specials only: tile_matches (every match, listed per tile; the leftmost-first acceptance
//     entering at the tile's start) -> row_specials (the acceptance entering each tile) ->
//     tile_specials (is_special of the tile's bytes);
//   tile_pretokenize_once (the text copied, NFC check, piece starts: each tile alone, its edge
//     states settled by its neighbours' nearest chunks), and only in a call where some tile's
//     do not settle, the three passes: tile_pretokenize<kBwd> (backward map) ->
//     row_states<false> (T after each tile) -> tile_pretokenize<kFwd> (backward replay, forward
//     map) -> row_states<true> (S before each tile) -> tile_pretokenize<kFlags> (piece starts):
//     what block_pretokenize gives, tile by tile;
//   tile_encode: the segments that START in the tile, each to its end (past the tile's end if
//     it is long), encoded with encode_segments into merged[first..) of the row; but a huge
//     piece (longer than a tile: always the tile's last segment) is listed for
//   huge_spans -> huge_stitch -> huge_reach -> huge_stitch -> huge_fallback
//     (cuda/huge_pieces.cuh; a wave of blocks striding over the tiles, at once done in a call
//     without a huge piece): the piece's chunks in the tiles it covers encoded as overlapping
//     spans, stitched at shared tokens; a boundary without one encodes its right span again
//     from a tile earlier and searches again; where that fails too the piece is merged whole
//     by the tile it starts in;
//   row_token_offsets (each tile's tokens before it, the row's count) -> tile_output: every
//     block copies its tokens (its spans' share of huge pieces included) into the row of ids
//     and pads a share of it.
// Results equal the one-block path: the same rules on the same segments, in the same order.
struct RowArrays {
  BlockArrays a;   // the row's arrays (as one block over the whole row would carve them)
  TileInfo* info;  // [tiles_per_row]
  int32_t* frames; // [tiles_per_row][kFrameArrays][frame_positions()]: huge pieces' spans
  int32_t* reach;  // [reach_frames_per_row][kFrameArrays][reach_positions()]: second-round spans
  const uint8_t* src;
  int n;           // the row's length, or -1 when it is outside [0, max_len]
};

__device__ __forceinline__ RowArrays row_arrays(const EncodeParams& p, int64_t b) {
  RowArrays r;
  const int cap = (int)padded_len(p.max_len);
  uint8_t* ws = p.workspace + b * workspace_bytes_per_tiled_row(p.max_len);
  r.a = carve(ws, ws + cap * (int64_t)kCoreBytesPerPosition, cap);
  r.info = reinterpret_cast<TileInfo*>(ws + tile_infos_at(p.max_len));
  r.frames = reinterpret_cast<int32_t*>(r.info + tiles_per_row(p.max_len));
  r.reach = r.frames + tiles_per_row(p.max_len) * frame_positions() * kFrameArrays;
  r.src = p.data + b * (int64_t)p.max_len;
  const int n = p.lengths[b];
  r.n = n < 0 || n > p.max_len ? -1 : n;
  return r;
}

// The kSegStart rule of initial_token, before the initial tokens exist.
__device__ __forceinline__ bool segment_starts_at(const uint8_t* is_special, const uint8_t* piece_start, int i) {
  return is_special[i] == 2 || (!is_special[i] && byte_starts_segment(i, is_special, piece_start));
}

// The (row, tile) of a per-tile block: block index = row * tiles_per_row + tile (blockIdx.x, or
// an index for_huge_tiles strides over).
struct TileAt {
  int64_t b;
  int tile;
  int lo, hi;  // the tile's bytes [lo, hi) within the row (hi clipped to the row's length)
  bool live;   // false for a tile past the row's end or a row with a bad length
};
__device__ __forceinline__ TileAt which_tile(const EncodeParams& p, const RowArrays& r, int64_t block = blockIdx.x) {
  const int tiles = (int)tiles_per_row(p.max_len);
  TileAt t;
  t.b = block / tiles;
  t.tile = (int)(block % tiles);
  t.lo = t.tile * kTileBytes;
  t.hi = min(t.lo + kTileBytes, r.n);
  t.live = r.n >= 0 && t.lo < r.n;
  return t;
}
__device__ __forceinline__ int64_t row_of_block(const EncodeParams& p, int64_t block = blockIdx.x) {
  return block / tiles_per_row(p.max_len);
}

// Whether a tile of the call holds a huge piece: cleared by tile_pretokenize_once, set by
// tile_encode, read by the huge-piece kernels.
__device__ __forceinline__ int32_t& call_has_huge(const EncodeParams& p) { return row_arrays(p, 0).info[0].any_huge; }
// Whether a tile of the call needs the pre-tokenizer's three passes: cleared before the call's
// first pre-tokenizer kernel (launch_tiles), set by tile_pretokenize_once.
__device__ __forceinline__ int32_t& call_unsettled(const EncodeParams& p) { return row_arrays(p, 0).info[0].any_unsettled; }

// body(r, t) for every live tile of a call that holds a huge piece (none in a call without one),
// the grid (one_wave's) striding over the block indices of a block per tile; the body's
// `return` ends its tile only. For the huge-piece kernels (cuda/huge_pieces.cuh): in most calls
// they have nothing to do, and where they do, most tiles leave at once.
template <class Body>
__device__ __forceinline__ void for_huge_tiles(const EncodeParams& p, Body body) {
  if (!call_has_huge(p)) return;
  const int64_t blocks = p.batch * tiles_per_row(p.max_len);
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const RowArrays r = row_arrays(p, row_of_block(p, block));
    const TileAt t = which_tile(p, r, block);
    if (t.live) body(r, t);
    __syncthreads();  // (the next tile reuses the body's shared memory)
  }
}

// The tile's bytes into the row's text; is_special zeroed.
template <int kThreads>
__device__ __forceinline__ void load_tile(const RowArrays& r, const TileAt& t) {
  for (int i = t.lo + threadIdx.x; i < t.hi; i += kThreads) {
    r.a.text[i] = r.src[i];
    r.a.is_special[i] = 0;
  }
}

// Specials 1: every match of the tile (into a.tok, as begin_block), the matches listed in
// a.rank[lo..) (position * 2 + accepted), accepted as the row's acceptance would if it reached
// the tile's start with nothing pending (thread 0 walks the list; it is sparse).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_matches(const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::IntScan::TempStorage scan;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  load_tile<kThreads>(r, t);
  constexpr int kItems = kTileItems<kThreads>;
  const int base = t.lo + (int)threadIdx.x * kItems;
  int mine = 0;
  for (int i = base; i < base + kItems && i < hi; ++i) {
    const int k = special_match_at(p.special, r.src, r.n, i);
    r.a.tok[i] = k;
    mine += k >= 0;
  }
  int at, total;
  typename Scans<kThreads>::IntScan(scan).ExclusiveSum(mine, at, total);
  for (int i = base; mine > 0 && i < base + kItems && i < hi; ++i)
    if (r.a.tok[i] >= 0) r.a.rank[t.lo + at++] = i * 2;
  __syncthreads();
  if (threadIdx.x == 0) {
    int next = t.lo;
    for (int g = 0; g < total; ++g) {
      const int m = r.a.rank[t.lo + g] >> 1;
      if (m < next) continue;
      r.a.rank[t.lo + g] = m * 2 + 1;
      next = m + special_len(p.special, r.a.tok[m]);
    }
    r.info[t.tile].n_matches = total;
    r.info[t.tile].walk_exit = next;
  }
}

// Specials 2: the row's leftmost-first acceptance, tile by tile. Entering a tile at `next`, it
// accepts the listed matches at or after `next` until one that the tile's own walk accepted:
// from there on the two walks agree, so it leaves at that walk's exit. The tiles' counts and
// exits go through shared memory in runs of kRun tiles; thread 0 walks.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) row_specials(const __grid_constant__ EncodeParams p) {
  constexpr int kRun = 1024;
  __shared__ int2 run[kRun];  // (n_matches, walk_exit)
  const RowArrays r = row_arrays(p, blockIdx.x);
  if (r.n <= 0) return;
  const int tiles = (r.n + kTileBytes - 1) / kTileBytes;
  int next = 0;
  for (int done = 0; done < tiles; done += kRun) {
    const int len = min(kRun, tiles - done);
    __syncthreads();  // (thread 0 is done with the last run)
    for (int k = threadIdx.x; k < len; k += kThreads)
      run[k] = make_int2(r.info[done + k].n_matches, r.info[done + k].walk_exit);
    __syncthreads();
    if (threadIdx.x != 0) continue;
    for (int k = 0; k < len; ++k) {
      const int tile = done + k, lo = tile * kTileBytes;
      r.info[tile].walk_entry = next;
      for (int g = 0; g < run[k].x; ++g) {
        const int e = r.a.rank[lo + g], m = e >> 1;
        if (m < next) continue;
        if (e & 1) { next = run[k].y; break; }
        next = m + special_len(p.special, r.a.tok[m]);
      }
    }
  }
}

// Specials 3: is_special of the tile's bytes (2 at the first byte of an accepted match, 1 at
// its others, as accept_special_matches), given the acceptance entering the tile.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_specials(const __grid_constant__ EncodeParams p) {
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  const TileInfo& info = r.info[t.tile];
  for (int i = t.lo + threadIdx.x; i < min(info.walk_entry, hi); i += kThreads) r.a.is_special[i] = 1;
  if (threadIdx.x == 0) {  // the tile's acceptance, marked in the list
    int next = info.walk_entry;
    for (int g = 0; g < info.n_matches; ++g) {
      const int m = r.a.rank[t.lo + g] >> 1;
      const bool accepted = m >= next;
      r.a.rank[t.lo + g] = m * 2 + accepted;
      if (accepted) next = m + special_len(p.special, r.a.tok[m]);
    }
  }
  __syncthreads();
  for (int g = threadIdx.x; g < info.n_matches; g += kThreads) {
    const int e = r.a.rank[t.lo + g], m = e >> 1;
    if (!(e & 1)) continue;
    const int end = min(m + special_len(p.special, r.a.tok[m]), hi);
    r.a.is_special[m] = 2;
    for (int i = m + 1; i < end; ++i) r.a.is_special[i] = 1;
  }
}

}  // namespace
}  // namespace bbpe
