// A text merged in sub-spans, one warp each, stitched at shared tokens (merge_in_sub_spans):
// the spans of huge pieces (cuda/warp_spans.cuh) and, in calls of few rows, the long
// pre-tokenizer pieces of the one-block path (merge_warp_pieces).
// Part of the one CUDA translation unit, encode_cuda.cu: its definitions have internal
// linkage (an unnamed namespace), as the kernels are private to the module.
#pragma once

#include <cstdint>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/span_stitch.h"
#include "cuda/block_common.cuh"
#include "cuda/span_frames.cuh"

namespace bbpe {
namespace {

// A text is cut into chunks of kSubChunk bytes, each encoded with about kSubMargin bytes of its
// neighbours' (chunk_span, the rule that cuts tiles' spans: core/span_stitch.h) and
// stitched to the next at a token both have, as huge_stitch joins tiles. Merging a text takes
// about one pass per distinct rank in it, each a chain of barriers and table lookups; a
// sub-span has fewer ranks and a warp's pass no block barrier, and the block's warps run side
// by side. Sub-spans start at the text's start plus a multiple of kSubAlign: a run of spaces,
// whose BPE is 128-space tokens from its start, is cut at one phase everywhere. Where a
// boundary has no shared token (or the shared tokens of a sub-span's two boundaries cross)
// the caller merges the text whole, so ids never depend on this.
constexpr int kHugeThreads = 1024;
constexpr int kSubSpans = kHugeThreads / 32;  // at most, at a time: a warp each
constexpr int kSubMargin = 64;
constexpr int kSubAlign = 128;
constexpr int kSubChunk = kSubAlign;
static_assert(kStitchAlign % kSubAlign == 0, "sub-span starts keep the spans' phase");
static_assert(kSubMargin <= kSubAlign, "a sub-span reaches at most kSubAlign bytes back");
// Positions of a sub-span: an interior one is its chunk, kSubMargin after it, and before it
// kSubMargin rounded down to kSubAlign (at most kSubAlign).
constexpr int kSubCap = kSubChunk + kSubAlign + kSubMargin;
static_assert(kSubCap <= 32 * 32, "warp_merge_piece: a lane's positions fit a 32-bit mask");
constexpr int kSubArrays = 5 * kSubCap;  // int32 per sub-span (warp_merge_piece's arrays)
BBPE_HD int sub_spans_of(int width) { return (width + kSubChunk - 1) / kSubChunk; }
struct SubText {  // a piece for merge_in_sub_spans
  const uint8_t* text;
  int width;
};

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
__device__ __forceinline__ int32_t* warp_piece_ids(int32_t* arr) { return arr + 2 * kSubCap; }
__device__ __forceinline__ int32_t* warp_piece_starts(int32_t* arr) { return arr + 3 * kSubCap; }
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
  return WarpPiece{total, warp_piece_ids(arr), warp_piece_starts(arr)};
}

// What merge_in_sub_spans keeps in shared memory besides the arrays, per sub-span of a
// round: its piece and index there, its token count, the tokens shared across its right
// boundary (its own and the next one's), and which of its tokens go where in the piece's.
struct SubSpanBook {
  int piece[kSubSpans], k[kSubSpans], n[kSubSpans], left_k[kSubSpans], right_k[kSubSpans];
  int emit_from[kSubSpans], emit_out[kSubSpans], emit_n[kSubSpans];
  int subs, next, failed, pad;  // the round's sub-spans, the first piece after it, pieces failed
};
static_assert(sizeof(SubSpanBook) % 16 == 0, "the arrays after it stay 16-byte aligned");
// Scratch for `subs` sub-spans at a time: the book, then kSubArrays int32 per sub-span.
constexpr size_t sub_span_bytes(int subs) {
  return sizeof(SubSpanBook) + (size_t)subs * kSubArrays * sizeof(int32_t);
}

// BPE of pieces g in [0, pieces), piece(g) = {its text, its width in bytes}, in sub-spans
// (above), in `scratch` (shared memory, sub_span_bytes(max_subs); max_subs <= kSubSpans).
// Pieces go in rounds of as many whole pieces as fit in max_subs sub-spans, the block's warps
// taking a round's sub-spans round robin. For each piece, done(g, count) (thread 0), and where
// count >= 0 emit(g, j, id, start) for each token j (start: its first byte in the piece's text).
// count is -1 where the piece needs more than max_subs sub-spans or a boundary does not
// stitch; its tokens are then not emitted. Returns how many pieces failed (block-uniform).
template <int kThreads, typename Piece, typename Emit, typename Done>
__device__ int merge_in_sub_spans(const VocabView& v, int pieces, Piece piece, int32_t* scratch, int max_subs,
                                  Emit emit, Done done) {
  constexpr int kWarps = kThreads / 32;
  SubSpanBook& book = *reinterpret_cast<SubSpanBook*>(scratch);
  int32_t* arrays = scratch + sizeof(SubSpanBook) / sizeof(int32_t);
  const int c = (int)threadIdx.x / 32, lane = (int)threadIdx.x & 31;
  if (threadIdx.x == 0) book.next = book.failed = 0;
  // (Thread 0 writes the book's round fields only between the last barrier of a round and the
  // first of the next; the others read them in between.)
  for (int failed = 0;; ) {
    if (threadIdx.x == 0) {  // the round: whole pieces in order while they fit
      int g = book.next, subs = 0;
      for (; g < pieces; ++g) {
        const int need = sub_spans_of(piece(g).width);
        if (need > max_subs) {
          done(g, -1);
          ++book.failed;
          continue;
        }
        if (subs + need > max_subs) break;
        for (int k = 0; k < need; ++k) book.piece[subs + k] = g, book.k[subs + k] = k;
        subs += need;
      }
      book.subs = subs;
      book.next = g;
    }
    __syncthreads();
    const int subs = book.subs;
    const bool last_round = book.next >= pieces;
    for (int s = c; s < subs; s += kWarps) {
      const SubText t = piece(book.piece[s]);
      const StitchSpan w = chunk_span(0, t.width, book.k[s], kSubChunk, kSubMargin, kSubAlign);
      const WarpPiece got = warp_merge_piece(v, arrays + s * kSubArrays, t.text + w.lo, w.hi - w.lo);
      for (int i = lane; i < got.n; i += 32) got.starts[i] += w.lo;  // (piece offsets)
      if (lane == 0) book.n[s] = got.n;
    }
    __syncthreads();
    // Boundary s | s + 1 of a piece: the first token of sub-span s from the next one's start
    // on that the next one has too (core/span_stitch.h, shared_token).
    for (int s = c; s + 1 < subs; s += kWarps) {
      if (book.piece[s + 1] != book.piece[s]) continue;
      int32_t *a = arrays + s * kSubArrays, *b = arrays + (s + 1) * kSubArrays;
      const int32_t *a_ids = warp_piece_ids(a), *a_starts = warp_piece_starts(a);
      const int a_n = book.n[s], b_n = book.n[s + 1];
      const int from = chunk_span(0, piece(book.piece[s]).width, book.k[s + 1], kSubChunk, kSubMargin, kSubAlign).lo;
      int found = -1, found_b = -1;
      for (int base = 0; base < a_n && found < 0; base += 32) {
        const int i = base + lane;
        int in_b = -1;
        if (i < a_n && a_starts[i] >= from)
          in_b = shared_token(warp_piece_ids(b), warp_piece_starts(b), b_n, a_starts[i], a_ids[i]);
        const uint32_t hits = __ballot_sync(~0u, in_b >= 0);
        if (hits) {
          const int first = __ffs(hits) - 1;
          found = base + first;
          found_b = __shfl_sync(~0u, in_b, first);
        }
      }
      if (lane == 0) book.left_k[s] = found, book.right_k[s] = found_b;
    }
    __syncthreads();
    // Sub-span s emits its tokens after the one it shares with s - 1, up to the one it shares
    // with s + 1; the two must not cross.
    if (threadIdx.x == 0) {
      for (int first = 0, last; first < subs; first = last + 1) {
        last = first;
        while (last + 1 < subs && book.piece[last + 1] == book.piece[first]) ++last;
        bool ok = true;
        int out = 0;
        for (int s = first; s <= last; ++s) {
          const int from = s == first ? 0 : book.right_k[s - 1] + 1, to = s == last ? book.n[s] : book.left_k[s] + 1;
          ok = ok && (s == last || book.left_k[s] >= 0) && to >= from;
          book.emit_from[s] = from;
          book.emit_out[s] = out;
          book.emit_n[s] = to - from;
          out += to - from;
        }
        if (!ok)
          for (int s = first; s <= last; ++s) book.emit_n[s] = 0;
        book.failed += !ok;
        done(book.piece[first], ok ? out : -1);
      }
    }
    __syncthreads();
    failed = book.failed;
    for (int s = c; s < subs; s += kWarps) {
      int32_t* arr = arrays + s * kSubArrays;
      const int g = book.piece[s], from = book.emit_from[s], out = book.emit_out[s];
      for (int i = lane; i < book.emit_n[s]; i += 32)
        emit(g, out + i, warp_piece_ids(arr)[from + i], warp_piece_starts(arr)[from + i]);
    }
    __syncthreads();  // (the book and the arrays are free again)
    if (last_round) return failed;
  }
}

// ---------------------------------------------------------------------------------------------
// The one-block path (cuda/encode_kernel.cuh). A call of at most kFewRows rows no wider than a
// tile runs one block per row on an otherwise idle GPU: its latency is the row's, and a long
// pre-tokenizer piece (CJK, random letters, emoji: one piece of the whole row) took one block
// merge pass per distinct rank over all of it. There every piece longer than kShortPieceLen is
// merged in sub-spans as spans of huge pieces are, the scratch after the row's arrays in
// dynamic shared memory, in blocks of at least a warp per sub-span of a row-wide piece (more
// threads would slow the rest of the kernel's block scans); a piece that does not stitch goes
// to the block passes as before. Larger calls keep their launch: the scratch would cost them
// blocks per SM.
constexpr int kMaxWarpPieces = (kTileBytes + kShortPieceLen) / (kShortPieceLen + 1);  // (all that fit)
// The pieces listed for merge_warp_pieces (first byte, length), at the start of the scratch.
struct WarpPieceList {
  int count;
  int s0[kMaxWarpPieces], len[kMaxWarpPieces];
};
constexpr size_t kWarpPieceListBytes = (sizeof(WarpPieceList) + 15) / 16 * 16;
BBPE_HD bool warp_piece_launch(const EncodeParams& p) {
  return p.batch <= kFewRows && p.max_len > kShortPieceLen && p.max_len <= kTileBytes &&
         p.pretok_stages != kModeBytes && p.symbols == kSymbolsBytes && warp_spans(p) &&
         !tiled_rows(p.batch, p.max_len, p.pretok_stages, p.symbols);
}
BBPE_HD int warp_piece_subs(int64_t max_len) { return sub_spans_of((int)max_len); }
static_assert(kTileBytes / kSubChunk <= kSubSpans, "a tile-wide piece fits the sub-spans of one round");
// Dynamic shared memory after the row's arrays (smem_bytes_per_string).
BBPE_HD size_t warp_piece_smem_bytes(int64_t max_len) {
  return kWarpPieceListBytes + sub_span_bytes(warp_piece_subs(max_len));
}
__device__ __forceinline__ int32_t* warp_piece_scratch(WarpPieceList* list) {
  return reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(list) + kWarpPieceListBytes);
}

// The listed pieces merged in sub-spans: on success tok[s0..) rewritten and rank[s0] = the
// token count, as merge_segment leaves a piece; else rank[s0] = the length, the initial tokens
// left for the block passes. Returns whether one was left (block-uniform). (Inlined: as a call
// it made the encode kernel spill the registers live across it.)
template <int kThreads>
__device__ __forceinline__ bool merge_warp_pieces(const VocabView& v, const BlockArrays& a, WarpPieceList* list,
                                                  int max_subs) {
  const int pieces = min(list->count, kMaxWarpPieces);
  const auto piece = [&](int g) { return SubText{a.text + list->s0[g], list->len[g]}; };
  const auto emit = [&](int g, int j, int32_t id, int32_t) {
    a.tok[list->s0[g] + j] = id | (j == 0 ? kSegStart : 0);
  };
  const auto done = [&](int g, int count) { a.rank[list->s0[g]] = count < 0 ? list->len[g] : count; };
  return merge_in_sub_spans<kThreads>(v, pieces, piece, warp_piece_scratch(list), max_subs, emit, done) > 0;
}

}  // namespace
}  // namespace bbpe
