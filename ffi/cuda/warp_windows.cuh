// Windows of huge pieces in sub-windows, one warp each (encode_window_in_warps, used by
// cuda/huge_pieces.cuh's encode_window).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "cuda/block_common.cuh"
#include "cuda/tile_rows.cuh"
#include "cuda/window_frames.cuh"

namespace bbpe {
namespace {

// A window in sub-windows, one warp each: the window cut into chunks (a multiple of
// kSubAlign bytes), each encoded with about kSubMargin bytes of its neighbours' (chunk_window,
// the rule that cuts tiles' windows: core/window_stitch.h) and stitched to the next at a token
// both have, as huge_stitch joins tiles. A window's passes are about one per distinct rank in
// it, each a chain of barriers and table lookups; a sub-window has fewer ranks and a warp's
// pass no block barrier, and the block's warps run side by side, so the kernels that merge
// windows run kHugeThreads threads whatever the call's block size. Sub-windows start at the
// window's start (the piece's start plus a multiple of kStitchAlign) plus a multiple of
// kSubAlign: a run of spaces, whose BPE is 128-space tokens from its start, is cut at one phase
// everywhere. Where a boundary has no shared token (or the shared tokens of a sub-window's two
// boundaries cross) the block merges the window whole, so ids never depend on this.
constexpr int kHugeThreads = 1024;
constexpr int kSubWindows = kHugeThreads / 32;
constexpr int kSubMargin = 64;
constexpr int kSubAlign = 128;
static_assert(kStitchAlign % kSubAlign == 0, "sub-window starts keep the windows' phase");
constexpr int kSubChunkMin = kSubAlign;
// The chunk of a window `width` bytes wide cut for `subs` warps.
constexpr int sub_chunk(int width, int subs) {
  const int c = (width + subs - 1) / subs;
  return ((c > kSubChunkMin ? c : kSubChunkMin) + kSubAlign - 1) / kSubAlign * kSubAlign;
}
// Positions of a sub-window: an interior one of a tile's window cut for kSubWindows warps (its
// chunk, kSubMargin after it, and before it kSubMargin rounded down to kSubAlign: at most
// kSubAlign), within what shared memory holds (wider ones, e.g. the second round's, go to the
// block).
constexpr int kSubWindowSmemMax = 200 * 1024;
static_assert(kSubMargin <= kSubAlign, "a sub-window reaches at most kSubAlign bytes back");
constexpr int kSubCapWanted = sub_chunk(kWindowLead + kTileBytes + kStitchMargin, kSubWindows) + kSubMargin + kSubAlign;
constexpr int kSubCapMax = kSubWindowSmemMax / (kSubWindows * 5 * (int)sizeof(int32_t));
constexpr int kSubCap = kSubCapWanted < kSubCapMax ? kSubCapWanted : kSubCapMax;
static_assert(kSubCap <= 32 * 32, "warp_merge_piece: a lane's positions fit a 32-bit mask");
constexpr size_t kSubWindowBytes = (size_t)kSubWindows * kSubCap * 5 * sizeof(int32_t);
// The dynamic shared memory of the kernels that merge huge pieces.
constexpr size_t kHugeSmemBytes = kSubWindowBytes > kSmemPieceBytes ? kSubWindowBytes : kSmemPieceBytes;

// The carry of lane - d (only its out[] bits: the warp pass compacts nothing, so it never reads
// kept[]).
__device__ __forceinline__ MergeCarry shfl_up_carry(MergeCarry c, int d) {
  const int out = __shfl_up_sync(~0u, c.out[0] | (c.out[1] << 1), d);
  c.out[0] = out & 1;
  c.out[1] = (out >> 1) & 1;
  return c;
}

// BPE of text[0..n) (1 <= n <= kSubCap) by one warp, merge_passes' rule for one segment, in
// the five arrays at `arr` (kSubCap positions each). Returns the count; ids[] and starts[] (byte
// offsets in text) point into arr.
// The tokens stay at the position of their first byte, in a list (next / prev): a pass touches
// the pairs it merges and their neighbours, not every position. Each lane owns `per` positions
// and keeps their lowest rank and where it is (a bit mask), rescanned only when a pass changed
// a rank there; the warp's lowest is the pass's rank.
struct WarpPiece {
  int n;
  int32_t* ids;
  int32_t* starts;
};
__device__ WarpPiece warp_merge_piece(const VocabView& v, int32_t* arr, const uint8_t* text, int n) {
  const int lane = threadIdx.x & 31;
  int32_t *tok = arr, *rank = arr + kSubCap, *next = arr + 2 * kSubCap, *prev = arr + 3 * kSubCap;
  int32_t* merging = arr + 4 * kSubCap;  // 1: the pair at this position merges in this pass
  const int per = (n + 31) / 32;         // (<= 32: the masks' bits; static_assert above)
  const int lo = min(n, lane * per), hi = min(n, lo + per);
  for (int i = lo; i < hi; ++i) {
    tok[i] = v.byte_ids[text[i]] | (i == 0 ? kSegStart : 0);  // (dead: -1)
    next[i] = i + 1;
    prev[i] = i - 1;
    merging[i] = 0;
  }
  __syncwarp();
  for (int i = lo; i < hi; ++i) rank[i] = rank_at(v, tok, i, n);
  int32_t low;      // the lowest rank of the lane's positions
  uint32_t at_low;  // and the positions that have it (bit i - lo)
  const auto rescan = [&]() {
    low = kNoRank;
    at_low = 0;
    for (int i = lo; i < hi; ++i) {
      const int32_t r = rank[i];
      if (r < low) low = r, at_low = 0;
      if (r == low && r != kNoRank) at_low |= 1u << (i - lo);
    }
  };
  rescan();
  __syncwarp();
  for (;;) {
    const int32_t lowest = __reduce_min_sync(~0u, low);
    if (lowest == kNoRank) break;
    const uint32_t mine = low == lowest ? at_low : 0;
    // Which candidates merge: all of them unless two are adjacent (a run); then, as in
    // merge_passes, the carry of "did the pair before merge" scanned over the lanes.
    bool adjacent = false;
    for (uint32_t m = mine; m; m &= m - 1) {
      const int i = lo + __ffs(m) - 1;
      adjacent |= prev[i] >= 0 && rank[prev[i]] == lowest;
    }
    if (!__any_sync(~0u, adjacent)) {
      for (uint32_t m = mine; m; m &= m - 1) merging[lo + __ffs(m) - 1] = 1;
    } else {
      MergeCarry upto = merge_carry_identity();
      for (int i = lo; i < hi; ++i)
        if (tok[i] >= 0) upto = merge_carry_push(upto, rank[i] == lowest);
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {  // inclusive scan over the lanes
        const MergeCarry o = shfl_up_carry(upto, d);
        if (lane >= d) upto = merge_carry_combine(o, upto);
      }
      const MergeCarry before = shfl_up_carry(upto, 1);
      bool merged_before = lane > 0 && before.out[0];
      for (int i = lo; i < hi; ++i) {
        if (tok[i] < 0) continue;
        const bool merges = !merged_before && rank[i] == lowest;
        merging[i] = merges;
        merged_before = merges;
      }
    }
    __syncwarp();
    // The merges: the pair's right token dies; no two merges write one position.
    uint32_t dirty = 0;  // lanes whose positions' ranks change
    for (uint32_t m = mine; m; m &= m - 1) {
      const int i = lo + __ffs(m) - 1;
      if (!merging[i]) continue;
      const int j = next[i], k = next[j];
      tok[i] = merged_id(v, lowest, tok[i], tok[j]) | (tok[i] & kSegStart);
      tok[j] = -1;
      rank[j] = kNoRank;
      next[i] = k;
      if (k < n) prev[k] = i;
      dirty |= 1u << (j / per);
    }
    __syncwarp();
    // The pairs a merge made: its own and, unless that one merged too (it looks up its own),
    // the one before it.
    for (uint32_t m = mine; m; m &= m - 1) {
      const int i = lo + __ffs(m) - 1;
      if (!merging[i]) continue;
      const int k = next[i], h = prev[i];
      rank[i] = k < n ? lookup_pair(v, token_id(tok[i]), token_id(tok[k]), nullptr) : kNoRank;
      dirty |= 1u << lane;
      if (h >= 0 && !merging[h]) {
        rank[h] = lookup_pair(v, token_id(tok[h]), token_id(tok[i]), nullptr);
        dirty |= 1u << (h / per);
      }
    }
    dirty = __reduce_or_sync(~0u, dirty);
    __syncwarp();
    for (uint32_t m = mine; m; m &= m - 1) merging[lo + __ffs(m) - 1] = 0;
    if (dirty >> lane & 1) rescan();
    __syncwarp();
  }
  // The living tokens in order: ids into next[], start offsets (their positions) into prev[].
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += tok[i] >= 0;
  int upto = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(~0u, upto, d);
    if (lane >= d) upto += o;
  }
  const int total = __shfl_sync(~0u, upto, 31);
  int at = upto - mine;
  for (int i = lo; i < hi; ++i) {
    if (tok[i] < 0) continue;
    next[at] = token_id(tok[i]);
    prev[at] = i;
    ++at;
  }
  __syncwarp();
  return WarpPiece{total, next, prev};
}

// Window `w` of the tile (at: live) in sub-windows (above); false, before writing anything, where
// it does not fit them or a boundary does not stitch (block-uniform). Else as encode_window.
template <int kThreads>
__device__ bool encode_window_in_warps(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                       const WindowAt& at, int32_t* smem) {
  constexpr int kWarps = kThreads / 32 < kSubWindows ? kThreads / 32 : kSubWindows;
  __shared__ WarpPiece piece[kSubWindows];
  __shared__ int left_k[kSubWindows], right_k[kSubWindows], emit_at[kSubWindows + 1];
  const int width = at.bytes.hi - at.bytes.lo;
  const int chunk = sub_chunk(width, kWarps), subs = (width + chunk - 1) / chunk;
  const auto sub = [&](int k) { return chunk_window(0, width, k, chunk, kSubMargin, kSubAlign); };
  // (the widest sub-window is an interior one's: its start rounded down furthest)
  int widest = 0;
  for (int k = 1; k < subs; ++k) widest = max(widest, sub(k).hi - sub(k).lo);
  if (subs < 2 || widest > kSubCap) return false;
  const int c = (int)threadIdx.x / 32, lane = (int)threadIdx.x & 31;
  if (c < subs) {
    const int lo = sub(c).lo, hi = sub(c).hi;
    WarpPiece got = warp_merge_piece(p.vocab, smem + c * kSubCap * 5, r.a.text + at.bytes.lo + lo, hi - lo);
    for (int i = lane; i < got.n; i += 32) got.starts[i] += lo;  // (window offsets)
    if (lane == 0) piece[c] = got;
  }
  __syncthreads();
  // Boundary c | c + 1 (warp c): the first token of sub-window c from the next one's start on
  // that the next one has too (core/window_stitch.h, shared_token).
  if (c + 1 < subs) {
    const WarpPiece a = piece[c], b = piece[c + 1];
    const int from = sub(c + 1).lo;
    int found = -1, found_b = -1;
    for (int base = 0; base < a.n && found < 0; base += 32) {
      const int k = base + lane;
      int in_b = -1;
      if (k < a.n && a.starts[k] >= from) in_b = shared_token(b.ids, b.starts, b.n, a.starts[k], a.ids[k]);
      const uint32_t hits = __ballot_sync(~0u, in_b >= 0);
      if (hits) {
        const int first = __ffs(hits) - 1;
        found = base + first;
        found_b = __shfl_sync(~0u, in_b, first);
      }
    }
    if (lane == 0) left_k[c] = found, right_k[c] = found_b;
  }
  __syncthreads();
  // Sub-window c emits its tokens after the one it shares with c - 1, up to the one it shares
  // with c + 1; the two must not cross.
  if (threadIdx.x == 0) {
    bool ok = true;
    emit_at[0] = 0;
    for (int k = 0; k < subs; ++k) {
      const int from = k == 0 ? 0 : right_k[k - 1] + 1, to = k + 1 < subs ? left_k[k] + 1 : piece[k].n;
      ok = ok && (k + 1 == subs || left_k[k] >= 0) && to >= from;
      emit_at[k + 1] = emit_at[k] + (ok ? to - from : 0);
    }
    if (!ok) emit_at[subs] = -1;
  }
  __syncthreads();
  if (emit_at[subs] < 0) return false;
  int32_t* ids = window_array(at, kWindowIds);
  int32_t* starts = window_array(at, kWindowStarts);
  if (c < subs) {
    const WarpPiece got = piece[c];
    const int from = c == 0 ? 0 : right_k[c - 1] + 1, out = emit_at[c];
    for (int i = from + lane; i < from + emit_at[c + 1] - emit_at[c]; i += 32) {
      ids[out + i - from] = got.ids[i];
      starts[out + i - from] = got.starts[i] + at.bytes.lo;
    }
  }
  if (threadIdx.x == 0) {
    TileInfo& info = r.info[tile];
    info.win_count[w] = emit_at[subs];
    info.emit_from[w] = 0;
    info.emit_to[w] = emit_at[subs];
  }
  __syncthreads();
  return true;
}

}  // namespace
}  // namespace bbpe
