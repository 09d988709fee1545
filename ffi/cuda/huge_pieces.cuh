// Long rows, the tile pipeline after tile_encode: pre-tokenizer pieces longer than a tile
// ("huge": a run of letters, CJK, emoji or whitespace can make one piece of the whole row).
// Merged by the one block whose tile they start in, their passes would cost (distinct ranks)
// x (piece length / threads); instead every tile a huge piece covers encodes its chunk of the
// piece as a window that reaches about kStitchMargin bytes into the neighbouring chunks, and
// neighbouring windows are stitched at a token both encodings share (core/window_stitch.h
// says why that is the piece's BPE). A piece with a boundary that has no shared token is
// merged whole by the tile it starts in, as before, so ids never depend on the stitch.
//   huge_windows  (tile, window): the tile's chunk of the piece covering its start (window 0)
//                 or of the piece starting in it (window 1), merged in warp sub-windows
//                 (encode_window_in_warps) or by the block; its ids and their start offsets
//                 go into the tile's window frame;
//   huge_stitch   (tile): the boundary at the tile's end, if a huge piece crosses it: the first
//                 token of the left window that the right one has; what each window emits;
//                 a boundary without one marks the right window for a second round;
//   huge_reach    (tile): second round, the tile's window 0 encoded again from kReachBack bytes
//                 earlier, in a reach frame of the row (kReachShare tiles share one);
//   huge_stitch   (second pass) the boundaries either side of a window encoded again; one that
//                 still has no shared token sends the piece to
//   huge_fallback (tile): the piece starting in the tile, merged whole when a stitch failed.
// tile_output copies, per tile: window 0's share, the tile's other segments, window 1's share
// (or the whole merged piece).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <climits>
#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/window_stitch.h"
#include "cuda/block_common.cuh"
#include "cuda/merge_passes.cuh"
#include "cuda/tile_rows.cuh"

namespace bbpe {
namespace {

// Flags the CUDA handler's test hooks add to EncodeParams::stitch_margin (a margin >= 0):
// no second round; no whole-piece merge (a piece that needs it puts out no tokens, so that a
// test can tell that every boundary was stitched).
constexpr int kNoSecondRound = 1024, kNoFallback = 2048, kNoWarpWindows = 4096;
static_assert(kStitchMargin < kNoSecondRound, "the flags sit above every margin");
__device__ __forceinline__ int stitch_margin(const EncodeParams& p) {
  return p.stitch_margin < 0 ? 0 : p.stitch_margin % kNoSecondRound;
}
__device__ __forceinline__ bool second_round(const EncodeParams& p) {
  return p.stitch_margin >= 0 && !(p.stitch_margin & kNoSecondRound);
}
__device__ __forceinline__ bool warp_windows(const EncodeParams& p) {
  return p.stitch_margin < 0 || !(p.stitch_margin & kNoWarpWindows);
}

// Window `w` of a tile (0: its chunk of the huge piece covering its start, 1: of the huge piece
// starting in it) and where its arrays are: kFrameArrays arrays of the tile's frame, from the
// window's first byte on (frame position 0 is the row's byte tile * kTileBytes - kWindowLead).
// After huge_windows, array 4 holds the window's ids and array 1 their start offsets in the row.
// `reach`: window 0 as the second round encodes it, in the tile's reach frame (info.reach - 1;
// position 0 is the row's byte tile * kTileBytes - kWindowLead - kReachBack).
struct WindowAt {
  bool live;
  int piece_lo;  // the piece's first byte (its tile owns it)
  StitchWindow bytes;
  bool reach;
  int32_t* base;
};
__device__ __forceinline__ WindowAt window_at(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                              bool reach) {
  const TileInfo& info = r.info[tile];
  WindowAt at{};
  at.piece_lo = w == 0 ? info.cont_lo : info.huge_lo;
  at.live = at.piece_lo >= 0;
  if (!at.live) return at;
  const int hi = w == 0 ? info.cont_hi : info.huge_hi, margin = stitch_margin(p);
  at.bytes = stitch_window(at.piece_lo, hi, tile, margin);
  at.reach = reach && w == 0;
  if (at.reach) {
    at.bytes.lo = stitch_window(at.piece_lo, hi, tile, margin + kReachBack).lo;
    at.base = r.reach + (info.reach - 1) * reach_positions() * kFrameArrays +
              (at.bytes.lo - tile * kTileBytes + kWindowLead + kReachBack);
  } else {
    at.base = r.frames + tile * frame_positions() * kFrameArrays + (at.bytes.lo - tile * kTileBytes + kWindowLead);
  }
  return at;
}
// The window as the output takes it (after the second round: its flags no longer change).
__device__ __forceinline__ WindowAt window_at(const EncodeParams& p, const RowArrays& r, int tile, int w) {
  return window_at(p, r, tile, w, w == 0 && r.info[tile].reach > 0);
}
__device__ __forceinline__ int32_t* window_array(const WindowAt& at, int k) {
  return at.base + k * (at.reach ? reach_positions() : frame_positions());
}
constexpr int kWindowIds = 4, kWindowStarts = 1;

// Shared memory of the kernels that merge huge pieces: the five token arrays of a whole window.
// A pass sweeps its arrays three times, between barriers; in global memory every sweep waits on
// L2, and a window of a huge piece takes about one pass per distinct rank in it (thousands).
constexpr int kSmemPieceTokens = kWindowLead + kTileBytes + kStitchMargin;
constexpr size_t kSmemPieceBytes = 5 * sizeof(int32_t) * kSmemPieceTokens;
__device__ __forceinline__ BlockArrays smem_piece_arrays(BlockArrays a, int32_t* smem) {
  a.tok = smem;
  a.rank = smem + kSmemPieceTokens;
  a.next_tok = smem + 2 * kSmemPieceTokens;
  a.next_rank = smem + 3 * kSmemPieceTokens;
  a.merged = smem + 4 * kSmemPieceTokens;
  return a;
}
__device__ __forceinline__ int32_t* piece_smem() {  // (the kernels' dynamic shared memory)
  extern __shared__ __align__(16) int32_t dynamic_smem[];
  return dynamic_smem;
}

// BPE of one piece text[0..n) (n >= 1) with the block passes: in a's arrays while it is longer
// than kSmemPieceTokens tokens, then in shared memory (smem, kSmemPieceBytes); returns the
// count, the tokens (flagged) in a.tok, wherever that is then.
template <int kThreads>
__device__ __forceinline__ int merge_piece(const VocabView& v, BlockArrays& a, const uint8_t* text, int n,
                                           int32_t* smem, typename Scans<kThreads>::Storage& tmp) {
  if (n <= kSmemPieceTokens) a = smem_piece_arrays(a, smem);
  for (int i = threadIdx.x; i < n; i += kThreads) a.tok[i] = v.byte_ids[text[i]] | (i == 0 ? kSegStart : 0);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
  __syncthreads();
  if (n > kSmemPieceTokens) {
    n = merge_passes<kThreads>(v, a, n, tmp, kSmemPieceTokens);
    if (n > kSmemPieceTokens) return n;  // no pair left to merge
    const BlockArrays s = smem_piece_arrays(a, smem);
    for (int i = threadIdx.x; i < n; i += kThreads) {
      s.tok[i] = a.tok[i];
      s.rank[i] = a.rank[i];
    }
    __syncthreads();
    a = s;
  }
  return merge_passes<kThreads>(v, a, n, tmp);
}

// A window in sub-windows, one warp each: the window's chunk cut into up to kSubWindows parts,
// each encoded with kSubMargin bytes of its neighbours' (clipped to the window) and stitched to
// the next at a token both have, as huge_stitch joins tiles (core/window_stitch.h says why that
// is exact). A window's passes are about one per distinct rank in it, each a chain of barriers
// and table lookups; a sub-window has fewer ranks and a warp's pass no block barrier, and the
// block's warps run side by side. Where a boundary has no shared token (or the shared tokens of
// a sub-window's two boundaries cross) the block merges the window whole, so ids never depend
// on this.
constexpr int kSubWindows = 8;
constexpr int kSubMargin = 128;
constexpr int kSubChunkMin = 2 * kSubMargin + 64;  // (a sub-window's two overlaps stay apart)
constexpr int kSubCap = (kWindowLead + kTileBytes + kStitchMargin + kSubWindows - 1) / kSubWindows + 2 * kSubMargin;
constexpr size_t kSubWindowBytes = (size_t)kSubWindows * kSubCap * 5 * sizeof(int32_t);
// The dynamic shared memory of the kernels that merge huge pieces.
constexpr size_t kHugeSmemBytes = kSubWindowBytes > kSmemPieceBytes ? kSubWindowBytes : kSmemPieceBytes;

__device__ __forceinline__ MergeCarry shfl_up_carry(MergeCarry c, int d) {
  const int out = __shfl_up_sync(~0u, c.out[0] | (c.out[1] << 1), d);
  c.kept[0] = __shfl_up_sync(~0u, c.kept[0], d);
  c.kept[1] = __shfl_up_sync(~0u, c.kept[1], d);
  c.out[0] = out & 1;
  c.out[1] = (out >> 1) & 1;
  return c;
}

// BPE of text[0..n) (1 <= n <= kSubCap) by one warp, merge_passes' rule for one segment, in
// the five arrays at `arr` (kSubCap positions each). Returns the count; ids[] and starts[] (byte
// offsets in text) point into arr.
struct WarpPiece {
  int n;
  int32_t* ids;
  int32_t* starts;
};
__device__ WarpPiece warp_merge_piece(const VocabView& v, int32_t* arr, const uint8_t* text, int n) {
  const int lane = threadIdx.x & 31;
  int32_t *tok = arr, *rank = arr + kSubCap, *next_tok = arr + 2 * kSubCap, *next_rank = arr + 3 * kSubCap;
  int32_t* merged = arr + 4 * kSubCap;
  for (int i = lane; i < n; i += 32) tok[i] = v.byte_ids[text[i]] | (i == 0 ? kSegStart : 0);
  __syncwarp();
  for (int i = lane; i < n; i += 32) rank[i] = rank_at(v, tok, i, n);
  __syncwarp();
  for (;;) {
    const int per = (n + 31) / 32;
    const int lo = min(n, lane * per), hi = min(n, lo + per);
    int32_t lowest = kNoRank;
    for (int i = lo; i < hi; ++i) lowest = min(lowest, rank[i]);
    lowest = __reduce_min_sync(~0u, lowest);
    if (lowest == kNoRank) break;
    MergeCarry mine = merge_carry_identity();
    for (int i = lo; i < hi; ++i) mine = merge_carry_push(mine, rank[i] == lowest);
    MergeCarry upto = mine;  // inclusive scan over the lanes
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const MergeCarry o = shfl_up_carry(upto, d);
      if (lane >= d) upto = merge_carry_combine(o, upto);
    }
    MergeCarry before = shfl_up_carry(upto, 1);
    if (lane == 0) before = merge_carry_identity();
    const int next_n = __shfl_sync(~0u, upto.kept[0], 31);
    bool prev = before.out[0];
    for (int i = lo; i < hi; ++i) {
      const bool merges = !prev && rank[i] == lowest;
      merged[i] = merges ? merged_id(v, rank[i], tok[i], tok[i + 1]) : -1;
      prev = merges;
    }
    __syncwarp();
    int j = before.kept[0];
    prev = before.out[0];
    for (int i = lo; i < hi; ++i) {  // (merge_passes' compaction)
      const bool was_right_half = prev;
      prev = merged[i] >= 0;
      if (was_right_half) continue;
      const bool is_merge = merged[i] >= 0;
      const int32_t t = is_merge ? (merged[i] | (tok[i] & kSegStart)) : tok[i];
      const int k = is_merge ? i + 2 : i + 1;
      int32_t r;
      if (k >= n) {
        r = kNoRank;
      } else if (is_merge || merged[k] >= 0) {
        r = lookup_pair(v, token_id(t), token_id(merged[k] >= 0 ? merged[k] : tok[k]), nullptr);
      } else {
        r = rank[i];
      }
      next_tok[j] = t;
      next_rank[j] = r;
      ++j;
    }
    __syncwarp();
    int32_t* x = tok; tok = next_tok; next_tok = x;
    x = rank; rank = next_rank; next_rank = x;
    n = next_n;
  }
  // Ids in place of the flagged tokens, start offsets (token lengths summed) in next_tok.
  const int per = (n + 31) / 32;
  const int lo = min(n, lane * per), hi = min(n, lo + per);
  const int32_t* offsets = v.token_offsets;
  int mine = 0;
  for (int i = lo; i < hi; ++i) {
    tok[i] = token_id(tok[i]);
    mine += offsets[tok[i] + 1] - offsets[tok[i]];
  }
  int upto = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(~0u, upto, d);
    if (lane >= d) upto += o;
  }
  int at = upto - mine;
  for (int i = lo; i < hi; ++i) {
    next_tok[i] = at;
    at += offsets[tok[i] + 1] - offsets[tok[i]];
  }
  __syncwarp();
  return WarpPiece{n, tok, next_tok};
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
  const int subs = min(kWarps, width / kSubChunkMin);
  const int chunk = subs > 0 ? (width + subs - 1) / subs : 0;
  if (subs < 2 || chunk + 2 * kSubMargin > kSubCap) return false;
  const int c = (int)threadIdx.x / 32, lane = (int)threadIdx.x & 31;
  const auto sub_lo = [&](int k) { return max(0, k * chunk - kSubMargin); };
  if (c < subs) {
    const int lo = sub_lo(c), hi = min(width, (c + 1) * chunk + kSubMargin);
    WarpPiece got = warp_merge_piece(p.vocab, smem + c * kSubCap * 5, r.a.text + at.bytes.lo + lo, hi - lo);
    for (int i = lane; i < got.n; i += 32) got.starts[i] += lo;  // (window offsets)
    if (lane == 0) piece[c] = got;
  }
  __syncthreads();
  // Boundary c | c + 1 (warp c): the first token of sub-window c from the next one's start on
  // that the next one has too (same start, same id; its starts are sorted).
  if (c + 1 < subs) {
    const WarpPiece a = piece[c], b = piece[c + 1];
    const int from = sub_lo(c + 1);
    int found = -1, found_b = -1;
    for (int base = 0; base < a.n && found < 0; base += 32) {
      const int k = base + lane;
      int in_b = -1;
      if (k < a.n && a.starts[k] >= from) {
        int lo = 0, hi = b.n;  // first start >= a.starts[k]
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (b.starts[mid] < a.starts[k]) lo = mid + 1; else hi = mid;
        }
        if (lo < b.n && b.starts[lo] == a.starts[k] && b.ids[lo] == a.ids[k]) in_b = lo;
      }
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

// Encodes window `w` of the tile (at: live) in its frame, in sub-windows where it can; its
// counts and emit range into the tile's TileInfo.
template <int kThreads>
__device__ __forceinline__ void encode_window(const EncodeParams& p, const RowArrays& r, int tile, int w,
                                              const WindowAt& at, typename Scans<kThreads>::Storage& tmp) {
  if (warp_windows(p) && encode_window_in_warps<kThreads>(p, r, tile, w, at, piece_smem())) return;
  BlockArrays a{};
  a.tok = window_array(at, 0);
  a.rank = window_array(at, kWindowStarts);
  a.next_tok = window_array(at, 2);
  a.next_rank = window_array(at, 3);
  a.merged = window_array(at, kWindowIds);
  const int n = merge_piece<kThreads>(p.vocab, a, r.a.text + at.bytes.lo, at.bytes.hi - at.bytes.lo, piece_smem(), tmp);
  int32_t* ids = window_array(at, kWindowIds);  // (merged: free after the passes)
  for (int j = threadIdx.x; j < n; j += kThreads) ids[j] = token_id(a.tok[j]);
  __syncthreads();
  // Start offsets: the tokens' byte lengths summed (a.rank may be the starts' array: free).
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  const int32_t* offsets = p.vocab.token_offsets;
  int mine = 0;
  for (int j = lo; j < hi; ++j) mine += offsets[ids[j] + 1] - offsets[ids[j]];
  int at_byte, total;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at_byte, total);
  int32_t* starts = window_array(at, kWindowStarts);
  at_byte += at.bytes.lo;
  for (int j = lo; j < hi; ++j) {
    starts[j] = at_byte;
    at_byte += offsets[ids[j] + 1] - offsets[ids[j]];
  }
  if (threadIdx.x == 0) {
    TileInfo& info = r.info[tile];
    info.win_count[w] = n;
    info.emit_from[w] = 0;
    info.emit_to[w] = n;
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_windows(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int w = (int)blockIdx.y;
  if (w == 0 && threadIdx.x == 0) {
    r.info[t.tile].reach = 0;
    if (t.tile == 0) r.info[0].reach_used = 0;
  }
  const WindowAt at = window_at(p, r, t.tile, w, false);
  if (!at.live) return;
  encode_window<kThreads>(p, r, t.tile, w, at, tmp);
}

// Second round: window 0 of a tile whose left boundary had no shared token, from kReachBack
// bytes earlier (its window in the tile frame stays as it was: huge_stitch reads it).
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_reach(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live || r.info[t.tile].reach <= 0 || r.info[r.info[t.tile].cont_lo / kTileBytes].fallback) return;
  encode_window<kThreads>(p, r, t.tile, 0, window_at(p, r, t.tile, 0, true), tmp);
}

// The boundary at the end of the tile, when a huge piece crosses it: the left window is the
// tile's chunk of that piece, the right one window 0 of the next tile. The left window's
// tokens searched start after the end of the window that stitched the tile's left boundary
// (below), so the stitches of one piece are independent of each other.
// First pass (kSecond false): the windows of huge_windows; a boundary without a shared token
// marks the right window for huge_reach (or, without the second round, the piece for the
// fallback). Second pass: the boundaries with a window encoded again on either side, every
// window as the output takes it; without a shared token the piece falls back.
template <int kThreads, bool kSecond>
__global__ void __launch_bounds__(kThreads) huge_stitch(const __grid_constant__ EncodeParams p) {
  __shared__ int best;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const TileInfo& info = r.info[t.tile];
  const int x = (t.tile + 1) * kTileBytes;
  const int wl = info.huge_lo >= 0 ? 1 : (info.cont_lo >= 0 && info.cont_hi > x ? 0 : -1);
  if (wl < 0) return;
  // (First pass: flags set by other blocks of this pass must not change which frame is read.
  // Both: whether a block returns depends only on flags no block of the pass writes.)
  const bool reach_l = kSecond && wl == 0 && info.reach > 0, reach_r = kSecond && r.info[t.tile + 1].reach > 0;
  if (kSecond && !reach_l && !reach_r) return;
  const WindowAt left = window_at(p, r, t.tile, wl, reach_l), right = window_at(p, r, t.tile + 1, 0, reach_r);
  const int n_left = info.win_count[wl], n_right = r.info[t.tile + 1].win_count[0];
  const int32_t* l_ids = window_array(left, kWindowIds);
  const int32_t* l_starts = window_array(left, kWindowStarts);
  const int32_t* r_ids = window_array(right, kWindowIds);
  const int32_t* r_starts = window_array(right, kWindowStarts);
  if (threadIdx.x == 0) best = INT_MAX;
  __syncthreads();
  // The left window's tokens that start inside the right window (a shared token lies in both)
  // and after the end of the left window of the tile's own left boundary, which ends its
  // stitch token there: a window reaching back covers that boundary too, and the stitches
  // must stay in order without reading each other's results.
  const int from =
      first_start_at(l_starts, 0, n_left, max(right.bytes.lo, t.tile * kTileBytes + stitch_margin(p)));
  for (int i = from + threadIdx.x; i < n_left; i += kThreads)
    if (shared_token(r_ids, r_starts, n_right, l_starts[i], l_ids[i]) >= 0) atomicMin(&best, i);
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (best == INT_MAX || p.stitch_margin < 0) {
    const int slot = !kSecond && second_round(p) ? atomicAdd(&r.info[0].reach_used, 1) : -1;
    if (slot >= 0 && slot < reach_frames_per_row(p.max_len)) r.info[t.tile + 1].reach = slot + 1;
    else r.info[left.piece_lo / kTileBytes].fallback = 1;
    return;
  }
  r.info[t.tile].emit_to[wl] = best + 1;
  r.info[t.tile + 1].emit_from[0] = shared_token(r_ids, r_starts, n_right, l_starts[best], l_ids[best]) + 1;
}

// The huge piece that starts in the tile, merged whole (the row's arrays over the piece are
// free: tile_encode stopped before it) when one of its boundaries could not be stitched.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) huge_fallback(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  TileInfo& info = r.info[t.tile];
  if (info.huge_lo < 0 || !info.fallback) return;
  if (p.stitch_margin >= 0 && (p.stitch_margin & kNoFallback)) {
    if (threadIdx.x == 0) info.huge_count = 0;
    return;
  }
  const int lo = info.huge_lo;
  BlockArrays a = r.a;
  a.tok += lo; a.rank += lo; a.next_tok += lo; a.next_rank += lo; a.merged += lo;
  const int n = merge_piece<kThreads>(p.vocab, a, r.a.text + lo, info.huge_hi - lo, piece_smem(), tmp);
  int32_t* out = r.a.merged + lo;  // (merged: free after the passes)
  for (int j = threadIdx.x; j < n; j += kThreads) out[j] = token_id(a.tok[j]);
  if (threadIdx.x == 0) info.huge_count = n;
}

// The tokens tile k puts out: its huge pieces' shares and the segments that start in it.
__device__ __forceinline__ int tile_token_count(const RowArrays& r, int k) {
  const TileInfo& info = r.info[k];
  int c = info.count;
  if (info.cont_lo >= 0 && !r.info[info.cont_lo / kTileBytes].fallback) c += info.emit_to[0] - info.emit_from[0];
  if (info.huge_lo >= 0) c += info.fallback ? info.huge_count : info.emit_to[1] - info.emit_from[1];
  return c;
}

// Copies the tile's tokens, in the row's order, to ids[at..) (up to max_tokens).
template <int kThreads>
__device__ __forceinline__ void copy_tile_tokens(const EncodeParams& p, const RowArrays& r, int tile,
                                                 int32_t* ids, int at) {
  const TileInfo& info = r.info[tile];
  auto put = [&](const int32_t* src, int n) {
    for (int j = threadIdx.x; j < n && at + j < p.max_tokens; j += kThreads) ids[at + j] = src[j];
    at += n;
  };
  if (info.cont_lo >= 0 && !r.info[info.cont_lo / kTileBytes].fallback)
    put(window_array(window_at(p, r, tile, 0), kWindowIds) + info.emit_from[0], info.emit_to[0] - info.emit_from[0]);
  put(r.a.merged + info.first, info.count);
  if (info.huge_lo >= 0 && info.fallback) put(r.a.merged + info.huge_lo, info.huge_count);
  else if (info.huge_lo >= 0)
    put(window_array(window_at(p, r, tile, 1), kWindowIds) + info.emit_from[1], info.emit_to[1] - info.emit_from[1]);
}

}  // namespace
}  // namespace bbpe
