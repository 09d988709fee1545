// Long rows, the tile pipeline after the specials: the pre-tokenizer in one pass over the tiles
// (else three, and the row kernels that compose their states), the segments encoded per tile, the
// output (huge pieces between the two: cuda/huge_pieces.cuh); launch_tiles runs them all
// (the overview: cuda/tile_rows.cuh).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"
#include "cuda/encode_kernel.cuh"
#include "cuda/huge_pieces.cuh"
#include "cuda/stage_clock.cuh"
#include "cuda/tile_rows.cuh"
#include "pretok/block_pretokenizer.cuh"
#include "pretok/lowercase.h"
#include "pretok/nfc.h"
#include "pretok/tables.h"

namespace bbpe {
namespace {

// The pre-tokenizer over the tiles, in three passes (BlockPretokenizer's tile_* functions), in
// a call where tile_pretokenize_once (below) could not settle some tile's edges:
//   kBwd:   the backward map (tile_pretokenize_once, which ran first, did the first pass's other
//           duties for every tile: text loaded, NFC / Lowercase check, huge flag cleared);
//   kFwd:   (after row_states<false>) the backward replay and the forward map;
//   kFlags: (after row_states<true>) the piece starts of the tile's bytes.
enum TilePass : int { kBwd, kFwd, kFlags };
template <int kThreads, int kPass>
__global__ void __launch_bounds__(kThreads) tile_pretokenize(const __grid_constant__ EncodeParams p) {
  using Pretok = BlockPretokenizer<kThreads, kTileItems<kThreads>>;
  static_assert(Pretok::kTile == kTileBytes, "the pre-tokenizer's tiles are the row's");
  __shared__ typename Pretok::TempStorage tmp;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!call_unsettled(p)) return;  // (tile_pretokenize_once did every tile)
  if (!t.live) return;
  const uint8_t* sp = p.special.count > 0 ? r.a.is_special : nullptr;
  TileInfo& info = r.info[t.tile];
  Pretok bp(tmp);
  bp.load_tables(p.pretok.tables);
  const ClassTable ct = p.pretok.classes(0);
  if (kPass == kBwd) {
    const uint64_t m = bp.tile_bwd_map(ct, r.src, r.n, sp, t.tile);
    if (threadIdx.x == 0) info.bwd_map = m;
  } else if (kPass == kFwd) {
    const uint64_t m = bp.tile_fwd_map(ct, r.src, r.n, sp, t.tile, info.t_after, r.a.piece_start);
    if (threadIdx.x == 0) info.fwd_map = m;
  } else {
    bp.tile_flags(ct, r.src, r.n, sp, t.tile, info.s_before, r.a.piece_start);
  }
}

// The pre-tokenizer over a tile in one pass, where its edge states settle within kMarginBytes of
// its neighbours (the one-block path's rule, edge_state: a constant chunk map among the nearest
// chunks; usually the very next one): what the three passes give the tile, with the duties of
// the first (text loaded, NFC / Lowercase check, the call's huge flag cleared). Its chunks are
// the three passes' (kTileItems bytes a thread), plus kMarginChunks chunks either side taken by
// the first 2 * kMarginChunks threads: after the tile their backward maps give T after it;
// before it their backward replay from T at its start (the tile's own replay) gives their keys,
// and their forward maps S before it. A tile whose edge does not settle (a run of spaces, say,
// longer than the margin) marks the call (call_unsettled), and the three passes then run over
// all of its tiles, writing the same flags.
constexpr int kMarginBytes = 64;
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_pretokenize_once(const __grid_constant__ EncodeParams p,
                                                                  bool load) {
  constexpr int kItems = kTileItems<kThreads>, kMarginChunks = kMarginBytes / kItems;
  static_assert(kMarginBytes % kItems == 0 && 2 * kMarginChunks <= kThreads, "margin chunks, a thread each");
  using Pretok = BlockPretokenizer<kThreads, kItems>;
  __shared__ typename Pretok::TempStorage tmp;
  __shared__ uint64_t after[kMarginChunks], before_bwd[kMarginChunks], before_fwd[kMarginChunks];  // nearest first
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (blockIdx.x == 0 && threadIdx.x == 0) call_has_huge(p) = 0;  // (before tile_encode)
  if (!t.live) return;
  const uint8_t* sp = p.special.count > 0 ? r.a.is_special : nullptr;
  TileInfo& info = r.info[t.tile];
  if (load) load_tile<kThreads>(r, t);
  if (threadIdx.x == 0) info.cont_lo = -1;  // (tile_encode of an earlier tile may set it)
  if (p.pretok.nfc || p.pretok.lower) {
    bool suspect = false;
    for (int i = t.lo + threadIdx.x; i < t.hi; i += kThreads) {
      suspect |= (p.pretok.nfc && nfc_suspect_at(p.pretok, p.nfc_pairs, r.src, r.n, sp, i)) ||
                 (p.pretok.lower && lower_suspect_at(p.pretok, r.src, r.n, sp, i));
      // The tile's own bytes, from the input: the pre-tokenizer reads r.src (its classes are
      // the lowercase's), the merges read the text (load_tile's stride: each thread rewrites
      // what it copied).
      if (p.pretok.lower) r.a.text[i] = lowered_byte(p.pretok, r.src, r.n, sp, i);
    }
    suspect = __syncthreads_or(suspect);
    if (threadIdx.x == 0) info.not_nfc = suspect;
  }
  Pretok bp(tmp);
  bp.load_tables(p.pretok.tables);
  const PretokTables& tab = tmp.tab;
  const ClassTable ct = p.pretok.classes(0);
  const int k = threadIdx.x, base = t.tile * kTileBytes + k * kItems, live = Pretok::live_chunks(r.n, t.tile);
  uint16_t key[kItems], margin[kItems];
  bp.tile_classes(ct, r.src, r.n, sp, base, key);
  // Margin chunk j (nearest first): thread j after the tile, thread kMarginChunks + j before it.
  const bool after_me = k < kMarginChunks, before_me = !after_me && k < 2 * kMarginChunks;
  const int j = after_me ? k : k - kMarginChunks;
  const int margin_at = after_me ? t.lo + kTileBytes + j * kItems : t.lo - (j + 1) * kItems;
  if ((after_me || before_me) && margin_at >= 0) {
    bp.tile_classes(ct, r.src, r.n, sp, margin_at, margin);  // (past the row's end: no class)
    (after_me ? after : before_bwd)[j] = chunk_bwd_map<false>(tab, margin, kItems);
  }
  __syncthreads();
  // T after the tile: settled by a constant map among the chunks after it, or by the row's end
  // within them.
  const int after_bytes = r.n - (t.lo + kTileBytes);
  uint8_t carry = tab.bwd_init & 15;
  if (after_bytes > 0) {
    const int count = min(kMarginChunks, (after_bytes + kItems - 1) / kItems);
    const bool to_end = after_bytes <= kMarginBytes;
    if (!margin_edge_state(after, count, to_end, tab.bwd_live, carry, &carry)) {
      if (threadIdx.x == 0) call_unsettled(p) = 1;
      return;  // (uniform: every thread decided alike)
    }
  }
  bool scan;
  const uint8_t t_end = bp.state_after_chunk(chunk_bwd_map<false>(tab, key, kItems), live, carry, scan);
  const uint8_t t_start = chunk_bwd_replay<false>(tab, key, kItems, t_end, key);
  const uint8_t t_lo = scan ? carry : bp.hand_over(k == 0, t_start);
  // The chunks before the tile: T after each (stepped from T at the tile's start through the
  // nearer ones' backward maps), their keys, their forward maps.
  const int before_chunks = min(kMarginChunks, t.lo / kItems);
  if (before_me && j < before_chunks) {
    uint8_t x = t_lo;
    for (int i = 0; i < j; ++i) x = map_apply(before_bwd[i], x);
    chunk_bwd_replay<false>(tab, margin, kItems, x, margin);
    before_fwd[j] = chunk_fwd_map<false>(tab, margin, kItems);
  }
  __syncthreads();
  uint8_t s = tab.fwd_init & 15;
  if (t.lo > 0) {
    const bool to_start = t.lo <= kMarginBytes;
    if (!margin_edge_state(before_fwd, before_chunks, to_start, tab.fwd_live, s, &s)) {
      if (threadIdx.x == 0) call_unsettled(p) = 1;
      return;
    }
  }
  const uint8_t s0 = bp.state_before_chunk(chunk_fwd_map<false>(tab, key, kItems), live, s, scan);
  if (k < live) chunk_fwd_replay<false>(tab, key, kItems, s0, r.a.piece_start + base, r.n - base);
}

// The states at the tiles' edges: backward (kForward false: T after each tile, from the last
// tile down) or forward (S before each tile). The maps go through shared memory in runs of
// kRun tiles; thread 0 steps the state through them.
template <int kThreads, bool kForward>
__global__ void __launch_bounds__(kThreads) row_states(const __grid_constant__ EncodeParams p) {
  constexpr int kRun = 1024;
  __shared__ uint64_t maps[kRun];
  const RowArrays r = row_arrays(p, blockIdx.x);
  if (r.n <= 0 || !call_unsettled(p)) return;
  const int tiles = (r.n + kTileBytes - 1) / kTileBytes;
  const PretokTables& tab = p.pretok.tables[0];
  uint8_t state = kForward ? tab.fwd_init & 15 : tab.bwd_init & 15;
  for (int done = 0; done < tiles; done += kRun) {
    const int len = min(kRun, tiles - done);
    __syncthreads();  // (thread 0 is done with the last run)
    for (int k = threadIdx.x; k < len; k += kThreads) {  // k-th tile in the walk's order
      const int tile = kForward ? done + k : tiles - 1 - done - k;
      maps[k] = kForward ? r.info[tile].fwd_map : r.info[tile].bwd_map;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 0; k < len; ++k) {
        const int tile = kForward ? done + k : tiles - 1 - done - k;
        if (kForward) r.info[tile].s_before = state;
        else r.info[tile].t_after = state;
        state = map_apply(maps[k], state);
      }
    }
  }
}

// The segments that start in the tile: [first, end) runs from the first segment start in the
// tile to the first one at or after the tile's end (or the row's end), encoded by
// encode_segments on the row's arrays from `first` on, the tokens into merged[first..). Two
// tiles' stretches never overlap; the bytes of a stretch past its tile's end are read here
// only as piece_start / is_special, which encode_segments rewrites without changing whether
// a segment starts there. A huge piece (the last segment, longer than a tile) is left out and
// listed: in the tile (huge_lo) and in every later tile it covers (cont_lo), for huge_spans.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) tile_encode(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  __shared__ int first, last, end;
  StageClock clock;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  if (threadIdx.x == 0) { first = end = r.n; last = -1; }
  __syncthreads();
  // (each thread's first and last start, then one atomic a warp: a text starts a segment every
  // few bytes, and atomics on one shared word are served one at a time)
  const auto starts_at = [&](int i) { return segment_starts_at(r.a.is_special, r.a.piece_start, i); };
  int my_first = INT_MAX, my_last = -1;
#pragma unroll
  for (int k = 0; k < kTileItems<kThreads>; ++k) {
    const int i = t.lo + k * kThreads + (int)threadIdx.x;
    if (i < hi && starts_at(i)) { my_first = min(my_first, i); my_last = i; }
  }
  my_first = __reduce_min_sync(~0u, my_first);
  my_last = __reduce_max_sync(~0u, my_last);
  if (threadIdx.x % 32 == 0 && my_last >= 0) { atomicMin(&first, my_first); atomicMax(&last, my_last); }
  __syncthreads();
  const int s0 = first;
  TileInfo& info = r.info[t.tile];
  if (s0 >= hi) {  // no segment starts in the tile
    if (threadIdx.x == 0) { info.first = s0; info.count = 0; info.huge_lo = -1; }
    return;
  }
  // The end, the first segment start from hi on: mostly a few bytes on, so first the kThreads
  // bytes there, one a thread; past them (a huge piece) spans of kScanBytes, each thread a run
  // of bytes (a huge piece's end is one block's serial scan: steps of 4096 bytes whatever the
  // tile size).
  int my_end = hi + (int)threadIdx.x < r.n && starts_at(hi + (int)threadIdx.x) ? hi + (int)threadIdx.x : INT_MAX;
  if (!__syncthreads_or(my_end < INT_MAX)) {
    constexpr int kScanBytes = 4096, kItems = kScanBytes / kThreads;
    for (int w = hi + kThreads; w < r.n; w += kScanBytes) {
      for (int i = w + (int)threadIdx.x * kItems; i < min(w + (int)(threadIdx.x + 1) * kItems, r.n); ++i)
        if (starts_at(i)) { my_end = i; break; }
      if (__syncthreads_or(my_end < INT_MAX)) break;
    }
  }
  my_end = __reduce_min_sync(~0u, my_end);
  if (threadIdx.x % 32 == 0 && my_end < INT_MAX) atomicMin(&end, my_end);
  __syncthreads();
  const bool huge = !r.a.is_special[last] && huge_piece(last, end);
  const int m = (huge ? last : end) - s0;
  int count = 0;
  clock.mark(kClockLoad);  // (the tile's stretch found)
  if (m > 0) {
    BlockArrays a = r.a;
    a.text += s0; a.piece_start += s0; a.is_special += s0;
    a.tok += s0; a.rank += s0; a.next_tok += s0; a.next_rank += s0; a.merged += s0;
    int32_t* out = r.a.merged + s0;
    bool has_long;
    count = encode_segments<kThreads>(p, a, m, m, out, m, has_long, tmp, clock);
    clock.mark(has_long ? kClockPasses : kClockOutput);
    clock.count(kClockLongBlocks, has_long);
  }
  clock.count(kClockBlocks, true);
  if (threadIdx.x == 0) {
    info.first = s0; info.count = count;
    info.huge_lo = huge ? last : -1; info.huge_hi = end; info.fallback = 0;
  }
  if (huge && threadIdx.x == 0) call_has_huge(p) = 1;
  if (huge)
    for (int k = t.tile + 1 + (int)threadIdx.x; k <= (end - 1) / kTileBytes; k += kThreads) {
      r.info[k].cont_lo = last;
      r.info[k].cont_hi = end;
    }
}

// Per row, a scan of its tiles' token counts: each tile's tokens before it, and the row's count
// with the single-block path's meaning (the full count, -2 for a row that is not in NFC, -1 for
// a bad length). One pass over the tiles, so that tile_output stays linear in the row's length.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) row_token_offsets(const __grid_constant__ EncodeParams p) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const RowArrays r = row_arrays(p, blockIdx.x);
  const int tiles = r.n < 0 ? 0 : (int)tiles_per_row(r.n);
  int running = 0;
  bool not_nfc = false;
  for (int done = 0; done < tiles; done += kThreads) {
    const int k = done + (int)threadIdx.x;
    const int c = k < tiles ? tile_token_count(r, k) : 0;
    not_nfc |= k < tiles && (p.pretok.nfc || p.pretok.lower) && r.info[k].not_nfc;
    int before, sum;
    Scan(tmp).ExclusiveSum(c, before, sum);
    if (k < tiles) r.info[k].tokens_before = running + before;
    running += sum;
    __syncthreads();  // (tmp is reused)
  }
  not_nfc = __syncthreads_or(not_nfc);
  if (threadIdx.x == 0) p.counts[blockIdx.x] = r.n < 0 ? -1 : (not_nfc ? kCountNotNormalized : running);
}

// Output: the tile's tokens at their place in the row (row_token_offsets) and its share of the
// padding.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_output(const __grid_constant__ EncodeParams p) {
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  const int tiles_here = r.n < 0 ? 0 : (int)tiles_per_row(r.n);
  const int count = p.counts[t.b];
  const int filled = count < 0 ? 0 : count;
  int32_t* ids = p.ids + t.b * (int64_t)p.max_tokens;
  if (count >= 0 && t.tile < tiles_here)
    copy_tile_tokens<kThreads>(p, r, t.tile, ids, r.info[t.tile].tokens_before);
  const int tiles = (int)tiles_per_row(p.max_len);
  for (int64_t j = filled + t.tile * (int64_t)kThreads + threadIdx.x; j < p.max_tokens;
       j += (int64_t)tiles * kThreads)
    ids[j] = p.pad_id;
}

template <int kThreads>
cudaError_t launch_tiles(const EncodeParams& p, cudaStream_t stream) {
  const unsigned tiles = (unsigned)(p.batch * tiles_per_row(p.max_len)), rows = (unsigned)p.batch;
  const bool specials = p.special.count > 0;
  if (specials) {
    tile_matches<kThreads><<<tiles, kThreads, 0, stream>>>(p);
    row_specials<kThreads><<<rows, kThreads, 0, stream>>>(p);
    tile_specials<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  }
  // (the call's flag for the three passes, cleared; its TileInfo is in row 0's workspace)
  uint8_t* const unsettled = p.workspace + tile_infos_at(p.max_len) + offsetof(TileInfo, any_unsettled);
  const cudaError_t cleared = cudaMemsetAsync(unsettled, 0, sizeof(int32_t), stream);
  if (cleared != cudaSuccess) return cleared;
  tile_pretokenize_once<kThreads><<<tiles, kThreads, 0, stream>>>(p, !specials);
  tile_pretokenize<kThreads, kBwd><<<tiles, kThreads, 0, stream>>>(p);
  row_states<kThreads, false><<<rows, kThreads, 0, stream>>>(p);
  tile_pretokenize<kThreads, kFwd><<<tiles, kThreads, 0, stream>>>(p);
  row_states<kThreads, true><<<rows, kThreads, 0, stream>>>(p);
  tile_pretokenize<kThreads, kFlags><<<tiles, kThreads, 0, stream>>>(p);
  tile_encode<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  // (spans in warp sub-spans: kHugeThreads, whatever the call's block size; each kernel a
  // wave of blocks over the tiles, few of which hold a huge piece, and none in most calls)
  unsigned spans = 0, reach = 0, stitch = 0, stitch_again = 0, fallback = 0;
  for (const cudaError_t err : {allow_all_smem<huge_spans<kHugeThreads>>(), allow_all_smem<huge_reach<kHugeThreads>>(),
                                allow_all_smem<huge_fallback<kThreads>>(),
                                one_wave<huge_spans<kHugeThreads>>(kHugeThreads, kHugeSmemBytes, tiles, spans),
                                one_wave<huge_reach<kHugeThreads>>(kHugeThreads, kHugeSmemBytes, tiles, reach),
                                one_wave<huge_stitch<kThreads, false>>(kThreads, 0, tiles, stitch),
                                one_wave<huge_stitch<kThreads, true>>(kThreads, 0, tiles, stitch_again),
                                one_wave<huge_fallback<kThreads>>(kThreads, kSmemPieceBytes, tiles, fallback)})
    if (err != cudaSuccess) return err;
  huge_spans<kHugeThreads><<<spans, kHugeThreads, kHugeSmemBytes, stream>>>(p);
  huge_stitch<kThreads, false><<<stitch, kThreads, 0, stream>>>(p);
  huge_reach<kHugeThreads><<<reach, kHugeThreads, kHugeSmemBytes, stream>>>(p);
  huge_stitch<kThreads, true><<<stitch_again, kThreads, 0, stream>>>(p);
  huge_fallback<kThreads><<<fallback, kThreads, kSmemPieceBytes, stream>>>(p);
  row_token_offsets<kThreads><<<rows, kThreads, 0, stream>>>(p);
  tile_output<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace
}  // namespace bbpe
