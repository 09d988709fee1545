// The piece-parallel exact kernel: `piece_kernel`, the exact-mode default wherever a call allows
// it (piece_eligible, cuda/piece_calls.cuh); BLOCKBPE_KERNEL=block selects the block-per-string
// kernel (encode_kernel.cuh) for every call instead (kernel_choice, read per call by
// encode_cuda.cu).
//
// What it does differently. The block-per-string kernel runs a string's whole pipeline in one
// block, with block-wide barriers between its stages and, for long pieces, per merge pass.
// Here a block holds kPieceThreads chunks of kChunk bytes of one or several whole rows (rows of
// the call's [B, L] data at stride L: a block takes floor(256 / ceil(L / kChunk)) rows, so a
// batch of short rows fills the grid as well as one of long rows), and each thread owns its
// chunk from the bytes to the ids:
//   1. the chunk's bytes to shared memory; with special tokens in the call, those that match
//      there (find_specials: a special's bytes then end the sub-text before them, its first
//      byte starts a piece that is its id, the byte after it starts one); the bytes' classes
//      (chunk_classes, pretok/tables.h), the chunk's backward map (pretok/automata.h);
//   2. T after the chunk from the next chunks' maps of the same row (edge_state, unbounded:
//      exact, and at most 255 maps of one block), the backward replay, the forward map;
//   3. S before the chunk from the previous chunks' maps; the forward replay: the chunk's
//      piece starts as a bit mask (steps 1-3 once for each stage of the pre-tokenizer, the
//      earlier stages' starts as boundaries: stage_starts);
//   4. every piece that starts in the warp's chunks (its end from the masks of the next chunks),
//      dealt to the warp's lanes in turn (encode_warp_pieces): one
//      byte -> its id; else the whole piece looked up (lookup_piece, one probe for most); a
//      miss goes on the block's merge lists (up to kLanePieceLen bytes: merge_in_lanes, several
//      pieces to a warp, the list sorted longest first; up to kShortPieceLen: merge_in_warp, a
//      warp each: cuda/lane_merges.cuh, merge_segment's rule), unless the misses' cache has it
//      (cuda/miss_cache.cuh), which then keeps the merged ones; tokens parked at the piece's
//      bytes in shared memory;
//   5. one block scan of the threads' token counts places every piece's tokens in its row.
// Eight block barriers (five more a further stage, one with Lowercase, one a stage with inert
// classes, one with special tokens and two more where a block has a byte that may start one, one
// more with both specials and Lowercase), none per merge rank; a stage is skipped in a block
// whose bytes are all of its inert classes (pretok/tables.h).
// The rules are the shared ones (core/bpe_core.h, pretok/*.h): nothing here defines a rule.
// (Misses are merged warp-cooperatively, not a thread each with merge_segment, whose serial
// passes keep the block waiting: docs/kernel_rounds.md, "The piece-parallel kernel (issue P11,
// first piece)".)
//
// What it leaves to the block-per-string kernel, decided on the host by shape and tables
// (piece_eligible): bytes mode, SentencePiece-style symbols (cuda/char_piece_kernel.cuh's), the
// NFC check (the rows the NFC normalization rewrites are encode_kernel's: cuda/nfc_prepass.cuh),
// rows wider than kPieceMaxLen bytes or tiled (tiled_rows). Decided on the device per row: a row
// holding a piece longer than kShortPieceLen bytes that the piece table lacks, whose block's
// merge lists are full (kPieceLaneList, kPieceWideList), or (Lowercase) a code point not
// lowercased in place, is marked kCountPending, and the block-per-string kernel, launched right
// after with pending_only, does those rows (and returns at once for the others).
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/special_tokens.h"
#include "cuda/block_common.cuh"
#include "cuda/chunk_specials.cuh"
#include "cuda/lane_merges.cuh"
#include "cuda/miss_cache.cuh"
#include "cuda/piece_launch.cuh"
#include "cuda/row_tokens.cuh"
#include "cuda/stage_clock.cuh"
#include "pretok/automata.h"
#include "pretok/lowercase.h"
#include "pretok/tables.h"

namespace bbpe {
namespace {

constexpr int kPieceWarps = kPieceThreads / 32;
constexpr int kPieceMaxLen = 4096;   // widest rows: 256 chunks of 16 bytes
static_assert(kPieceMaxLen <= kMatchLenMask, "a match's length fits its entry (chunk_specials.cuh)");
// Misses of 2..kLanePieceLen bytes a block merges: a 4 KiB row of a book's table of contents
// ("CHAPTER XVII", indented) has 549 in GPT-2's vocabulary.
constexpr int kPieceLaneList = 1024;
constexpr int kPieceWideList = 64;   // misses of kLanePieceLen + 1..kShortPieceLen bytes

// The block's shared memory (dynamic: over 48 KB at 16-byte chunks).
template <int kChunk>
struct PieceSmem {
  PretokTables tab;                           // the stage's step tables
  union {
    uint64_t maps[kPieceThreads];             // steps 1-3: every chunk's map
    int2 slots[kPieceThreads];                // step 4: each warp's 32 merge slots
    struct {
      int32_t row_base[kPieceThreads];        // step 5, per row of the block: its first thread's prefix
      int32_t row_total[kPieceThreads];       //   and its token count
    };
  };
  uint32_t masks[kPieceThreads];              // every chunk's piece starts
  int32_t tok[kPieceThreads * kChunk];        // tokens, parked at their piece's bytes
  __align__(16) uint8_t text[kPieceThreads * kChunk];
  uint8_t text_tail[16];                      // read, never used, by short_key_at near text's end
  // Tokens of the piece that starts at the byte, up to kShortPieceLen (bytes: 12 KB less than ints).
  uint8_t count[kPieceThreads * kChunk];
  uint8_t hard[kPieceThreads];                // a piece of the row is left to encode_kernel
  // The merge lists (block positions and lengths: < 4096, so 16 bits), the lane list also
  // sorted longest first.
  int16_t lane_s0[kPieceLaneList], lane_len[kPieceLaneList];
  int16_t sorted_s0[kPieceLaneList], sorted_len[kPieceLaneList];
  int32_t wide_s0[kPieceWideList], wide_len[kPieceWideList];
  int by_len[kLanePieceLen + 1];  // lane-list pieces per length, then where the next one goes
  int n_lane, n_wide, next_bin;
  int lane_found;  // lane-list pieces found in the misses' cache before the merges (long_misses_found)
  int longest_special;  // kSpecials: the block's longest match (0: none)
  typename cub::BlockScan<int, kPieceThreads>::TempStorage scan;
};

// A chunk of kChunk bytes as one vector.
template <int kChunk>
using ChunkWord = std::conditional_t<kChunk == 16, uint4,
                                     std::conditional_t<kChunk == 8, uint2, std::conditional_t<kChunk == 4, uint32_t, uint16_t>>>;

// A chunk's bytes from global to shared memory: one vector load when the chunk lies inside
// the row's L bytes and both ends are aligned (the bytes past the string's length are read but
// never classified: byte_class reads only below n).
template <int kChunk>
__device__ __forceinline__ void load_chunk(const uint8_t* src, uint8_t* dst, int valid, bool whole) {
  static_assert(kChunk == 2 || kChunk == 4 || kChunk == 8 || kChunk == 16, "one vector load a chunk");
  using Word = ChunkWord<kChunk>;
  if (whole && (reinterpret_cast<uintptr_t>(src) % kChunk) == 0) {
    *reinterpret_cast<Word*>(dst) = __ldg(reinterpret_cast<const Word*>(src));
    return;
  }
#pragma unroll
  for (int i = 0; i < kChunk; ++i)
    if (i < valid) dst[i] = src[i];
}

// A chunk's bytes in shared memory (load_chunk's dst, aligned to kChunk) as registers, by one
// vector load; bytes past the string's are whatever the chunk's room held.
template <int kChunk>
struct ChunkBytes {
  uint32_t w[(kChunk + 3) / 4];
  __device__ __forceinline__ explicit ChunkBytes(const uint8_t* chunk) {
    const ChunkWord<kChunk> v = *reinterpret_cast<const ChunkWord<kChunk>*>(chunk);
    if constexpr (kChunk == 16) w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    else if constexpr (kChunk == 8) w[0] = v.x, w[1] = v.y;
    else w[0] = v;
  }
  __device__ __forceinline__ uint8_t operator[](int j) const { return (uint8_t)(w[j >> 2] >> (8 * (j & 3))); }
};

// One piece at block position at, m bytes long (the row at block position row_at): a one-byte
// piece or a token -> tok[at], count[at] = 1; a miss -> its tokens from the misses' cache, else
// onto the block's merge lists (the merge reads its bytes as byte tokens, BytesAsTokens, and
// writes tok[at ...] and count[at]); marks the row hard when the piece is left to encode_kernel.
template <int kChunk, bool kSpecials>
__device__ __forceinline__ void encode_piece(const VocabView& v, PieceSmem<kChunk>& s, int at, int m, int row) {
  if (kSpecials && s.count[at] == 2) {  // an accepted special: its id is at tok[at] (find_specials)
    s.count[at] = 1;
    return;
  }
  const uint8_t* text = s.text + at;
  // (a short piece's key read once: for the piece table, then for the misses' cache)
  const ShortKey key = m <= kShortKeyLen ? short_key_at(text, m) : ShortKey{0, 0};
  const int32_t whole =
      m == 1 ? __ldg(v.byte_ids + text[0]) : lookup_piece(v, text, m, [&](const uint8_t*, int) { return key; });
  s.count[at] = 1;
  if (whole >= 0) {
    s.tok[at] = whole;
    return;
  }
  if (const int c = find_merged_miss(v, key, m, s.tok + at)) {  // merged before
    s.count[at] = (uint8_t)c;
    return;
  }
  if (m > kShortPieceLen) {
    s.hard[row] = 1;
    return;
  }
  const bool lanes = m <= kLanePieceLen;
  const int slot = atomicAdd(lanes ? &s.n_lane : &s.n_wide, 1);
  if (slot >= (lanes ? kPieceLaneList : kPieceWideList)) {
    s.hard[row] = 1;
  } else if (lanes) {
    s.lane_s0[slot] = (int16_t)at, s.lane_len[slot] = (int16_t)m;
    atomicAdd(&s.by_len[m], 1);
  } else {
    s.wide_s0[slot] = at, s.wide_len[slot] = m;
  }
}

// Warp 0, once the lane list is complete: its pieces of kShortKeyLen + 1 .. kLanePieceLen bytes
// that the misses' cache holds (under their key of up to kMissLongKeyLen bytes) get their tokens
// from it and leave the list (length 0, by_len and lane_found counted), so that a long word
// merged in an earlier call costs a probe, not a lane's chain of passes (the slowest lanes of
// a block). Here rather than in encode_piece, whose registers are all taken: a block without
// such a piece pays one ballot.
template <int kChunk>
__device__ __forceinline__ void long_misses_found(const VocabView& v, PieceSmem<kChunk>& s, int n_lane) {
  static_assert(kLanePieceLen <= kMissLongKeyLen && kLanePieceLen - kShortKeyLen <= 32, "a lane per long length");
  const int lane = threadIdx.x & 31;
  int found = 0;
  const bool any = __any_sync(~0u, lane < kLanePieceLen - kShortKeyLen && s.by_len[kShortKeyLen + 1 + lane] > 0);
  if (any && v.miss_cache) {
    for (int g = lane; g < n_lane; g += 32) {
      const int m = s.lane_len[g];
      if (m <= kShortKeyLen) continue;
      const int at = s.lane_s0[g];
      const MissKey key = miss_key_at(s.text + at, m);
      const int c = find_merged_miss<kMissLongKeyLen>(v, key, m, s.tok + at);
      if (c == 0) continue;
      s.count[at] = (uint8_t)c;
      s.lane_len[g] = 0;
      atomicSub(&s.by_len[m], 1);
      ++found;
    }
  }
  found = __reduce_add_sync(~0u, found);
  if (lane == 0) s.lane_found = found;
}

// The pieces that start in a warp's 32 chunks, dealt to its lanes in turn: a chunk holds 0 to
// kChunk piece starts, so a thread walking its own pieces kept the warp waiting for its fullest
// chunk (half the lanes idle). Each thread lists its pieces (mask fm, bits relative to the
// chunk's first byte `base`; a piece's end from the masks of the row's next chunks) in the
// warp's queue (kPieceQueue words), kPieceQueue at a time, and the lanes take them from there:
// encode(at, m, row) for the piece at block position at, m bytes long. (The character-symbol
// kernel deals its words the same way: cuda/char_piece_kernel.cuh.)
constexpr int kPieceQueue = 64;  // per warp
template <int kChunk, class Encode>
__device__ __forceinline__ void deal_warp_pieces(uint32_t* queue, int row, int row_at, int n,
                                                 const uint32_t* next_masks, int next_chunks, uint32_t fm, int base,
                                                 Encode encode) {
  const int lane = threadIdx.x & 31;
  const int mine = __popc(fm);
  int first = mine;  // the warp's pieces before this thread's (an exclusive sum over the lanes)
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(~0u, first, d);
    if (lane >= d) first += o;
  }
  const int total = __shfl_sync(~0u, first, 31);
  first -= mine;
  for (int from = 0; from < total; from += kPieceQueue) {
    if (first < from + kPieceQueue && first + mine > from) {
      int q = first;
      for (uint32_t rest = fm; rest; ++q) {
        const int s0 = base + __ffs(rest) - 1;
        rest &= rest - 1;
        if (q < from) continue;
        if (q >= from + kPieceQueue) break;
        int end = n;
        if (rest) {
          end = base + __ffs(rest) - 1;
        } else {
          for (int j = 0; j < next_chunks; ++j) {
            const uint32_t mj = next_masks[j];
            if (mj) { end = base + (j + 1) * kChunk + __ffs(mj) - 1; break; }
          }
        }
        // (a block position below 4096, a length of 1..4096, a row below 256: one word)
        queue[q - from] = (uint32_t)(row_at + s0) | (uint32_t)(end - s0 - 1) << 12 | (uint32_t)row << 24;
      }
    }
    __syncwarp();
    const int listed = min(kPieceQueue, total - from);
    for (int q = lane; q < listed; q += 32) {
      const uint32_t e = queue[q];
      encode((int)(e & 0xFFF), (int)((e >> 12) & 0xFFF) + 1, (int)(e >> 24));
    }
    __syncwarp();
  }
}

template <int kChunk, bool kSpecials>
__device__ __forceinline__ void encode_warp_pieces(const VocabView& v, PieceSmem<kChunk>& s, int row, int row_at,
                                                   int n, const uint32_t* next_masks, int next_chunks, uint32_t fm,
                                                   int base) {
  static_assert(kPieceWarps * kPieceQueue * 4 <= sizeof(uint64_t) * kPieceThreads, "the queues fit the maps' room");
  uint32_t* queue = reinterpret_cast<uint32_t*>(s.maps) + (threadIdx.x / 32) * kPieceQueue;
  deal_warp_pieces<kChunk>(queue, row, row_at, n, next_masks, next_chunks, fm, base,
                           [&](int at, int m, int r) { encode_piece<kChunk, kSpecials>(v, s, at, m, r); });
}

// A stage's step tables to shared memory (every thread calls it; the caller synchronizes).
template <int kChunk>
__device__ __forceinline__ void load_stage_tables(PieceSmem<kChunk>& s, const PretokTables* tables) {
  static_assert(sizeof(PretokTables) % 8 == 0, "copied as 8-byte words");
  const uint64_t* src = reinterpret_cast<const uint64_t*>(tables);
  uint64_t* dst = reinterpret_cast<uint64_t*>(&s.tab);
  for (int k = threadIdx.x; k < (int)(sizeof(PretokTables) / 8); k += kPieceThreads) dst[k] = __ldg(src + k);
}

// The bit of a row's first byte where the thread's chunk (k: its index in its row) holds it:
// a text's start starts a piece (a segment), whatever the automata say.
__device__ __forceinline__ uint32_t row_start_bit(int k, int n) { return k == 0 && n > 0 ? 1u : 0u; }

// One stage of the pre-tokenizer over the thread's chunk (steps 1-3; its tables in s.tab):
// the classes, the backward automaton (T after the chunk from the next chunks' maps), the
// forward one (S before it from the previous chunks' maps). Returns the chunk's piece starts as
// a bit mask. kBoundaries: `earlier` holds the piece starts of the stages before (both automata
// restart there, and they stay starts: pretok/automata.h, "Stages"). Every thread of the block
// calls it (it synchronizes); k: the chunk's index in its row, nv: the row's chunks with bytes;
// sp: the row's specials' marks by byte (find_specials; null: none), their bytes of class
// kClassSpecial, which end the sub-text before them (pretok/automata.h, "Special tokens").
template <int kChunk, bool kBoundaries>
__device__ __forceinline__ uint32_t stage_starts(PieceSmem<kChunk>& s, const ClassTable& ct, const uint8_t* text,
                                                 const uint8_t* sp, int n, int k, int nv, int base, int valid,
                                                 uint32_t earlier) {
  const PretokTables& tab = s.tab;
  const int t = threadIdx.x;
  uint16_t key[kChunk];
  chunk_classes<kChunk>(tab, text, n, sp, base, valid, ct, key);
  // A block whose every byte is of the stage's inert classes (pretok/tables.h): the stage adds
  // no start to the earlier stages' and the text's first (DeepSeek's digit and CJK splits on
  // text without digits or CJK).
  if (const uint32_t inert = inert_class_mask(tab)) {
    bool all_inert = true;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) all_inert &= (inert >> key[i]) & 1u;
    if (__syncthreads_and(all_inert)) return earlier | row_start_bit(k, n);
  }
  if (kBoundaries) {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) key[i] = with_boundary((uint8_t)key[i], (earlier >> i) & 1);
  }
  // Each map's pass also writes what the chunk alone fixes (the keys before the backward map
  // turns constant, the flags after the forward one does), so the replays after the edge
  // states cover only the chunk's last bytes, then its first ones, not all of them.
  int replay_from, replay_to;
  s.maps[t] = chunk_bwd_map_keys<kBoundaries>(tab, key, kChunk, &replay_from, [&](int i, uint16_t v) { key[i] = v; });
  __syncthreads();
  uint8_t t_end = tab.bwd_init & 15;
  if (k < nv) edge_state(s.maps, t + 1, 1, nv - 1 - k, tab.bwd_live, tab.bwd_init & 15, nv, &t_end);
  chunk_bwd_replay_from<kBoundaries>(tab, key, kChunk, t_end, key, replay_from);
  uint32_t fm = 0;
  const auto flag = [&](int i, uint8_t f) { fm |= (uint32_t)f << i; };
  const uint64_t fwd = chunk_fwd_map_flags<kBoundaries>(tab, key, kChunk, valid, &replay_to, flag);
  __syncthreads();  // (every thread is done with the backward maps)
  s.maps[t] = fwd;
  __syncthreads();
  uint8_t s_before = tab.fwd_init & 15;
  if (k < nv) edge_state(s.maps, t - 1, -1, k, tab.fwd_live, tab.fwd_init & 15, nv, &s_before);
  chunk_fwd_replay_upto<kBoundaries>(tab, key, kChunk, s_before, valid, replay_to, flag);
  return fm | row_start_bit(k, n);
}

// kSpecials: the specials the call matches (those it allows), marked in sp (match_chunk_specials,
// cuda/chunk_specials.cuh; the matches' entries in tok's room, the marks in count's room until
// step 4 writes the counts, both row-relative); then each thread puts the id of every special
// that starts in its chunk at tok[its first byte]. Every thread of the block calls it (it
// synchronizes). Returns whether the block has a special.
template <int kChunk>
__device__ __forceinline__ bool find_specials(const EncodeParams& p, PieceSmem<kChunk>& s, const uint8_t* text,
                                              int32_t* match_len, uint8_t* sp, int n, int base, int valid) {
  uint32_t matched;
  if (!match_chunk_specials<kChunk>(p, text, n, base, valid, false, match_len, sp, &s.longest_special, &matched) ||
      s.longest_special == 0)
    return false;
  for (uint32_t rest = matched; rest; rest &= rest - 1) {  // (match_len is no longer read)
    const int i = base + __ffs(rest) - 1;
    if (sp[i] == 2) match_len[i] = accepted_special_id(p, match_len[i], text, n, i, false);
  }
  return true;
}

// The piece starts the specials give the thread's chunk: an accepted special's first byte and
// the byte after its last start pieces; its other bytes start none.
template <int kChunk>
__device__ __forceinline__ uint32_t special_starts(const uint8_t* sp, int base, int valid, uint32_t fm) {
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    if (j >= valid) break;
    const int i = base + j;
    const bool after = i > 0 && sp[i - 1] != 0 && sp[i] != 1;
    if (sp[i] == 2 || after) fm |= 1u << j;
    else if (sp[i] == 1) fm &= ~(1u << j);
  }
  return fm;
}

// kStaged: the pre-tokenizer has more than one stage (a kernel of its own: the stage loop
// spills registers at 16-byte chunks).
template <int kChunk, bool kStaged, bool kSpecials>
__global__ void __launch_bounds__(kPieceThreads, 4) piece_kernel(const __grid_constant__ EncodeParams p, int cpr,
                                                              int rows_per_block) {
  static_assert(kChunk <= 32, "a chunk's piece starts are one 32-bit mask");
  static_assert(kShortPieceLen <= 255, "a piece's token count is one byte");
  static_assert(4 * (sizeof(PieceSmem<kChunk>) + 1024) <= 228 * 1024,
                "four blocks fit an SM's shared memory (228 KB on sm_90, 1 KB of it reserved per block)");
  static_assert(kPieceThreads * kChunk <= 4096 && kPieceThreads <= 256, "encode_warp_pieces packs a piece in a word");
  extern __shared__ __align__(16) uint8_t piece_kernel_smem[];
  PieceSmem<kChunk>& s = *reinterpret_cast<PieceSmem<kChunk>*>(piece_kernel_smem);
  StageClock clock;
  allow_dependent_launch();  // (the fill launch's blocks wait for this grid's end: encode_cuda.cu)
  const int t = threadIdx.x;
  load_stage_tables(s, p.pretok.tables);
  const int r = t / cpr, k = t - r * cpr;  // the thread's row in the block, its chunk in the row
  const int64_t b = (int64_t)blockIdx.x * rows_per_block + r;
  const bool in_row = r < rows_per_block && b < p.batch;
  int n = in_row ? __ldg(p.lengths + b) : 0;
  const bool bad = in_row && (n < 0 || n > p.max_len);  // (only an unchecked call passes one)
  if (bad) n = 0;
  const int base = k * kChunk;
  const int valid = max(0, min(kChunk, n - base));  // the chunk's bytes of the string
  const int nv = (n + kChunk - 1) / kChunk;         // the row's chunks that hold bytes
  const int row_at = r * cpr * kChunk;              // the row's first position in shared memory
  uint8_t* text = s.text + row_at;
  if (t < rows_per_block) s.hard[t] = 0;
  if (t == 0) s.n_lane = s.n_wide = s.next_bin = s.longest_special = 0;
  if (t <= kLanePieceLen) s.by_len[t] = 0;
  if (valid > 0)
    load_chunk<kChunk>(p.data + b * (int64_t)p.max_len + base, text + base, valid, base + kChunk <= p.max_len);
  __syncthreads();
  // kSpecials: the specials' marks by byte (null where the block has none), matched in the text
  // as it comes: Lowercase leaves their bytes as they are (as encode_kernel does).
  uint8_t* sp = nullptr;
  if constexpr (kSpecials) {
    clock.mark(kClockLoad);
    uint8_t* marks = s.count + row_at;
    if (find_specials<kChunk>(p, s, text, s.tok + row_at, marks, n, base, valid)) sp = marks;
    clock.mark(kClockSpecials);
  }
  if (p.pretok.lower) {  // Lowercase (pretok/lowercase.h), read from the input, which no thread writes
    if constexpr (kSpecials) __syncthreads();  // (find_specials' last reads of the text are done)
    const uint8_t* src = p.data + b * (int64_t)p.max_len;
    bool suspect = false;  // (a row encode_kernel then reports)
    for (int i = base; i < base + valid; ++i) {
      suspect |= lower_suspect_at(p.pretok, src, n, sp, i);
      text[i] = lowered_byte(p.pretok, src, n, sp, i);
    }
    if (suspect) s.hard[r] = 1;
    __syncthreads();
  }
  clock.mark(kClockLoad);

  // 1-3. The pre-tokenizer's stages: the chunk's piece starts.
  uint32_t fm = stage_starts<kChunk, false>(s, p.pretok.classes(0), text, sp, n, k, nv, base, valid, 0);
  for (int st = 1; kStaged && st < p.pretok_stages; ++st) {
    __syncthreads();  // (every thread is done with the tables and the maps)
    load_stage_tables(s, p.pretok.tables + st);
    __syncthreads();
    fm = stage_starts<kChunk, true>(s, p.pretok.classes(st), text, sp, n, k, nv, base, valid, fm);
  }
  if (kSpecials && sp) fm = special_starts<kChunk>(sp, base, valid, fm);
  s.masks[t] = fm;
  __syncthreads();
  clock.mark(kClockPretokenize);

  // 4. The warp's pieces; then the misses, by all the block's warps.
  encode_warp_pieces<kChunk, kSpecials>(p.vocab, s, r, row_at, n, s.masks + t + 1, k < nv ? nv - 1 - k : 0, fm, base);
  __syncthreads();  // (the lists are complete; the maps are no longer read: their room is the slots')
  clock.mark(kClockSegments);
  // The lane list sorted by length, longest first (a counting sort): a bin then holds pieces
  // of similar pass counts, and the longest bins are claimed first.
  const int n_lane = min(s.n_lane, kPieceLaneList);
  if (t < 32) {
    long_misses_found(p.vocab, s, n_lane);
    __syncwarp();
    longest_first_offsets(s.by_len);
  }
  __syncthreads();
  for (int g = t; g < n_lane; g += kPieceThreads) {
    const int m = s.lane_len[g];
    if (m == 0) continue;  // (found in the cache)
    const int at = atomicAdd(&s.by_len[m], 1);
    s.sorted_s0[at] = s.lane_s0[g], s.sorted_len[at] = (int16_t)m;
  }
  const int n_sorted = n_lane - s.lane_found, n_wide = min(s.n_wide, kPieceWideList);
  clock.merged(n_sorted + n_wide);
  {
    const int warp = t / 32;
    int2* slots = s.slots + warp * 32;
    for (int g = warp; g < n_wide; g += kPieceWarps) {
      const int at = s.wide_s0[g];
      const int c = merge_in_warp<false>(p.vocab, s.tok + at, s.wide_len[g], slots,
                                         BytesAsTokens{s.text + at, p.vocab.byte_ids});
      if ((t & 31) == 0) s.count[at] = (uint8_t)c;
    }
    __syncthreads();  // (the sorted list is complete)
    if (n_wide > 0) clock.merged_piece(s.text + s.wide_s0[0], s.wide_len[0]);
    else if (n_sorted > 0) clock.merged_piece(s.text + s.sorted_s0[0], s.sorted_len[0]);
    merge_in_lanes<false>(p.vocab, s.tok, s.count, s.sorted_s0, s.sorted_len, n_sorted, &s.next_bin,
                          BytesAsTokens{s.text, p.vocab.byte_ids});
  }
  __syncthreads();
  clock.mark(kClockMerges);
  keep_merged_misses<kPieceThreads>(p.vocab, s.text, s.tok, s.count, s.lane_s0, s.lane_len, n_lane);
  clock.mark(kClockKeep);  // (thread 0's own puts: the block's wait for the others' is the placement's)
  // 5. Placement.
  place_row_tokens<false>(p, s, r, k, cpr, b, in_row, bad, fm, [&](int i) { return row_at + base + i; });
  clock.mark(kClockOutput);
  clock.count(kClockBlocks, true);
}

}  // namespace
}  // namespace bbpe
