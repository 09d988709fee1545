// The pre-tokenizer on the GPU: BlockPretokenizer runs every stage of pretok/automata.h over
// one string with one thread block (prefix scans of the chunks' transition maps), and its
// tile_* passes run one stage over one tile of a long row (the tile pipeline,
// cuda/tile_pipeline.cuh). CUDA only; the host runs pretok/sequential.h.
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "pretok/automata.h"
#include "pretok/tables.h"

namespace bbpe {

struct MapThenOp {
  __device__ __forceinline__ uint64_t operator()(uint64_t a, uint64_t b) const { return map_then(a, b); }
};

// BlockPretokenizer<kThreads, kItems>: thread k owns the kItems consecutive bytes
// [k * kItems, (k+1) * kItems) of a tile of kThreads * kItems bytes, i.e. exactly the chunks of
// pretokenize_chunked(chunk_bytes = kItems); a code point belongs to the thread that owns its
// lead byte. Steps (the same helpers as pretokenize_chunked):
//   0. the stage's step tables go to shared memory (copied from the operand);
//   1. stage_class of each owned byte (reads up to 3 bytes either side, from text, and the
//      earlier stages' flag of the byte);
//   2. chunk_bwd_map; T after the chunk from the next chunks' maps (edge_state: usually the
//      very next map is constant), or, when some chunk of the tile needs more than
//      kPretokLookback maps, from an exclusive suffix scan of the maps (warp shuffles, see
//      suffix_state) applied to the state carried in from later tiles; chunk_bwd_replay;
//   3. chunk_fwd_map; S before the chunk from the previous chunks' maps (edge_state), or an
//      exclusive scan in thread order (cub::BlockScan) applied to the state carried in from
//      earlier tiles; chunk_fwd_replay writes the flags.
// Strings longer than a tile run step 2 over the tiles from the last to the first, parking
// T[i+1] (and bit 4: the earlier stages' flag) in piece_start[i], then step 3 from the first
// tile to the last (a thread re-reads only bytes it wrote itself). One tile keeps everything in registers.
// text, is_special (nullable) and piece_start may be in shared or global memory; piece_start
// must not alias them. Every thread of the block must call it (it synchronizes).
template <int kThreads, int kItems>
struct BlockPretokenizer {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024");
  static_assert(kItems >= 1, "kItems >= 1");
  static constexpr int kWarps = kThreads / 32;
  // Forward scan: cub::BlockScan with the map-composition operator. The warp-scan algorithm:
  // the raking one composes 32 maps serially per raking thread and spills at 1024 threads
  // (64 registers); warp scans need ~40 registers and 320 B of shared memory.
  using MapScan = cub::BlockScan<uint64_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  struct TempStorage {
    PretokTables tab;                       // 5,528 B
    union {
      uint64_t maps[kThreads];              // every chunk's map, for edge_state
      struct {                              // the scans, when edge_state does not reach:
        typename MapScan::TempStorage scan; // forward scan
        uint64_t warp_maps[kWarps];         // backward scan: warp aggregates ...
        uint64_t warp_excl[kWarps];         // ... and their suffix scan
        uint64_t block_agg;
      };
    };
    uint8_t tile_edge;                      // the state handed to the next tile
  };
  static constexpr int kTile = kThreads * kItems;

  TempStorage& tmp;
  __device__ __forceinline__ explicit BlockPretokenizer(TempStorage& t) : tmp(t) {}

  // Inclusive suffix scan within a warp: lane l gets M_31 ; M_30 ; ... ; M_l (";" = then: the
  // later chunk's map is applied first, as the backward automaton runs from the end).
  __device__ __forceinline__ static uint64_t warp_suffix(uint64_t x, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint64_t o = __shfl_down_sync(0xffffffffu, x, d);
      if (lane + d < 32) x = map_then(o, x);
    }
    return x;
  }

  // Backward scan: T after this thread's chunk, given T after the tile (carry, updated to T
  // at the tile's start). An exclusive SUFFIX scan of the chunk maps over the block. cub scans
  // only in thread order, and a reversed-composition operator does not help (a prefix in
  // thread order covers the chunks before a thread, the backward pass needs those after it),
  // so this is the warp-scan algorithm mirrored: shuffles down within warps, then one warp
  // scans the warp aggregates from the last warp down (2 * kWarps * 8 B of shared memory, no
  // round trip of every map through shared memory).
  __device__ __forceinline__ uint8_t suffix_state(uint64_t m, uint8_t& carry) {
    uint64_t after, agg;
    suffix_maps(m, after, agg);
    return state_then_carry(after, agg, carry);
  }
  // A scan's result for this thread: the state through its part of the scan (map `part`);
  // carry moves through the whole tile (agg).
  __device__ __forceinline__ static uint8_t state_then_carry(uint64_t part, uint64_t agg, uint8_t& carry) {
    const uint8_t x = map_apply(part, carry);
    carry = map_apply(agg, carry);
    return x;
  }
  // The maps of that scan: the chunks after this thread's (after) and the whole tile (agg).
  __device__ __forceinline__ void suffix_maps(uint64_t m, uint64_t& after, uint64_t& agg) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint64_t inc = warp_suffix(m, lane);
    uint64_t exc = __shfl_down_sync(0xffffffffu, inc, 1);
    if (lane == 31) exc = kMapIdentity;
    if (lane == 0) tmp.warp_maps[warp] = inc;
    __syncthreads();
    if (warp == 0) {
      const uint64_t a = warp_suffix(lane < kWarps ? tmp.warp_maps[lane] : kMapIdentity, lane);
      uint64_t ae = __shfl_down_sync(0xffffffffu, a, 1);
      if (lane == 31) ae = kMapIdentity;
      if (lane < kWarps) tmp.warp_excl[lane] = ae;
      if (lane == 0) tmp.block_agg = a;
    }
    __syncthreads();
    after = map_then(tmp.warp_excl[warp], exc);
    agg = tmp.block_agg;
    __syncthreads();  // before warp_maps / warp_excl / block_agg are written again
  }

  // Forward scan: S before this thread's chunk, given S before the tile (carry, updated to S
  // after the tile).
  __device__ __forceinline__ uint8_t prefix_state(uint64_t m, uint8_t& carry) {
    uint64_t excl, agg;
    prefix_maps(m, excl, agg);
    return state_then_carry(excl, agg, carry);
  }
  // The maps of that scan: the chunks before this thread's (before) and the whole tile (agg).
  __device__ __forceinline__ void prefix_maps(uint64_t m, uint64_t& before, uint64_t& agg) {
    MapScan(tmp.scan).ExclusiveScan(m, before, kMapIdentity, MapThenOp(), agg);
    __syncthreads();  // before tmp.scan is used again
  }

  // A stage's step tables to shared memory (every thread calls it; it synchronizes).
  __device__ __forceinline__ void load_tables(const PretokTables* tables) {
    static_assert(sizeof(PretokTables) % 8 == 0, "copied as 8-byte words");
    const uint64_t* src = reinterpret_cast<const uint64_t*>(tables);
    uint64_t* dst = reinterpret_cast<uint64_t*>(&tmp.tab);
    for (int k = threadIdx.x; k < (int)(sizeof(PretokTables) / 8); k += kThreads) dst[k] = src[k];
    __syncthreads();
  }

  // T after this thread's chunk (map m; live chunks in the tile), given T after the tile
  // (carry): from the maps of the next chunks (edge_state), else a block scan (scan = true;
  // carry becomes T at the tile's start).
  __device__ __forceinline__ uint8_t state_after_chunk(uint64_t m, int live, uint8_t& carry, bool& scan) {
    const int k = threadIdx.x;
    tmp.maps[k] = m;
    __syncthreads();
    uint8_t t_end = carry;
    const bool ok = k >= live || edge_state(tmp.maps, k + 1, 1, live - 1 - k, tmp.tab.bwd_live, carry,
                                            kPretokLookback, &t_end);
    scan = __syncthreads_or(!ok);
    if (scan) t_end = suffix_state(m, carry);
    return t_end;
  }
  // S before this thread's chunk, given S before the tile (carry): from the maps of the chunks
  // before it, else a block scan (scan = true; carry becomes S after the tile).
  __device__ __forceinline__ uint8_t state_before_chunk(uint64_t m, int live, uint8_t& carry, bool& scan) {
    const int k = threadIdx.x;
    tmp.maps[k] = m;
    __syncthreads();
    uint8_t s0 = carry;
    const bool ok = k >= live || edge_state(tmp.maps, k - 1, -1, k, tmp.tab.fwd_live, carry,
                                            kPretokLookback, &s0);
    scan = __syncthreads_or(!ok);
    if (scan) s0 = prefix_state(m, carry);
    return s0;
  }
  // The forward-step key of byte i from its parked backward state (and boundary mark).
  __device__ __forceinline__ uint16_t parked_key(const ClassTable& ct, const uint8_t* text, int n,
                                                 const uint8_t* sp, int i, uint8_t parked) const {
    return (uint16_t)(byte_class(tmp.tab, text, n, sp, i, ct) * 16 + (parked & 15) +
                      ((parked & 16) ? kKeyBoundary : 0));
  }

  // One stage: tables = its step tables (global memory; copied to shared memory here), ct =
  // its class table, kBoundaries = out holds the flags of earlier stages (else it is written
  // without being read).
  template <bool kBoundaries>
  __device__ __forceinline__ void run(const PretokTables* tables, const ClassTable& ct,
                                      const uint8_t* text, int n, const uint8_t* sp, uint8_t* out) {
    load_tables(tables);
    if (n <= 0) return;
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x;
    // key[i]: the class of byte i, then (after the backward replay) its forward-step key.
    uint16_t key[kItems];
    const int ntiles = (n + kTile - 1) / kTile;
    uint8_t carry = tab.bwd_init & 15;
    for (int tile = ntiles - 1; tile >= 0; --tile) {
      const int base = tile * kTile + k * kItems;
      const int live = live_chunks(n, tile);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        key[i] = base + i < n ? stage_class(tab, text, n, sp, base + i, ct, kBoundaries && out[base + i])
                              : kClassNone;
      bool scan;
      const uint8_t t_end = state_after_chunk(chunk_bwd_map<kBoundaries>(tab, key, kItems),
                                              live, carry, scan);
      const uint8_t t_start = chunk_bwd_replay<kBoundaries>(tab, key, kItems, t_end, key);
      if (!scan && tile > 0) carry = hand_over(k == 0, t_start);
      if (ntiles > 1) {
#pragma unroll
        for (int i = 0; i < kItems; ++i)  // T[i+1] and the boundary mark, parked
          if (base + i < n) out[base + i] = (uint8_t)((key[i] & 15) | ((key[i] & kKeyBoundary) ? 16 : 0));
      }
    }
    carry = tab.fwd_init & 15;
    for (int tile = 0; tile < ntiles; ++tile) {
      const int base = tile * kTile + k * kItems;
      const int live = live_chunks(n, tile);
      if (ntiles > 1) {  // (one tile: key still holds tile 0's keys)
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
          if (base + i < n) key[i] = parked_key(ct, text, n, sp, base + i, out[base + i]);
          else key[i] = 0;
        }
      }
      bool scan;
      const uint8_t s0 = state_before_chunk(chunk_fwd_map<kBoundaries>(tab, key, kItems),
                                            live, carry, scan);
      const uint8_t s_end = chunk_fwd_replay<kBoundaries>(tab, key, kItems, s0, out + base, n - base);
      if (!scan && tile + 1 < ntiles) carry = hand_over(k == live - 1, s_end);
    }
    __syncthreads();  // before tmp.tab is overwritten by the next stage
  }

  // Chunks of the tile that hold bytes of the string (the rest are past its end).
  __device__ __forceinline__ static int live_chunks(int n, int tile) {
    const int left = n - tile * kTile;
    return left >= kTile ? kThreads : (left + kItems - 1) / kItems;
  }

  // The state at the tile's edge, from the one thread whose chunk is there.
  __device__ __forceinline__ uint8_t hand_over(bool mine, uint8_t state) {
    if (mine) tmp.tile_edge = state;
    __syncthreads();
    return tmp.tile_edge;  // (rewritten only after two more barriers)
  }

  // The tile pipeline of long rows (cuda/tile_pipeline.cuh): one block per tile of one row, a single
  // stage (its tables loaded with load_tables). The states at a tile's edges come from the
  // other tiles' maps, composed between launches, so a row takes three passes over its tiles:
  //   tile_bwd_map: the tile's backward map (x = T after the tile -> T at its start);
  //   tile_fwd_map: given T after the tile, the backward replay, T[i+1] parked in park[i],
  //                 and the tile's forward map (x = S before the tile -> S after it);
  //   tile_flags:   given S before the tile, the flags of its bytes over the parked states.
  // Each computes what run() computes for the same tile; the maps come from full block scans.
  __device__ __forceinline__ void tile_classes(const ClassTable& ct, const uint8_t* text, int n,
                                               const uint8_t* sp, int base, uint16_t* key) {
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      key[i] = base + i < n ? byte_class(tmp.tab, text, n, sp, base + i, ct) : kClassNone;
  }

  __device__ __forceinline__ uint64_t tile_bwd_map(const ClassTable& ct, const uint8_t* text, int n,
                                                   const uint8_t* sp, int tile) {
    uint16_t key[kItems];
    tile_classes(ct, text, n, sp, tile * kTile + (int)threadIdx.x * kItems, key);
    uint64_t after, agg;
    suffix_maps(chunk_bwd_map<false>(tmp.tab, key, kItems), after, agg);
    return agg;
  }

  __device__ __forceinline__ uint64_t tile_fwd_map(const ClassTable& ct, const uint8_t* text, int n,
                                                   const uint8_t* sp, int tile, uint8_t t_after,
                                                   uint8_t* park) {
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x, base = tile * kTile + k * kItems, live = live_chunks(n, tile);
    uint16_t key[kItems];
    tile_classes(ct, text, n, sp, base, key);
    bool scan;
    const uint8_t t_end = state_after_chunk(chunk_bwd_map<false>(tab, key, kItems), live,
                                            t_after, scan);
    chunk_bwd_replay<false>(tab, key, kItems, t_end, key);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (base + i < n) park[base + i] = (uint8_t)(key[i] & 15);
    uint64_t before, agg;
    prefix_maps(chunk_fwd_map<false>(tab, key, kItems), before, agg);
    return agg;
  }

  // (out holds the parked states of the tile's bytes and receives their flags.)
  __device__ __forceinline__ void tile_flags(const ClassTable& ct, const uint8_t* text, int n,
                                             const uint8_t* sp, int tile, uint8_t s_before, uint8_t* out) {
    const PretokTables& tab = tmp.tab;
    const int k = threadIdx.x, base = tile * kTile + k * kItems, live = live_chunks(n, tile);
    uint16_t key[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      key[i] = base + i < n ? parked_key(ct, text, n, sp, base + i, out[base + i]) : 0;
    bool scan;
    const uint8_t s0 = state_before_chunk(chunk_fwd_map<false>(tab, key, kItems), live,
                                          s_before, scan);
    if (k < live) chunk_fwd_replay<false>(tab, key, kItems, s0, out + base, n - base);
  }
};

// Marks piece starts of text[0..n) into piece_start[0..n) (see the top of this file): every
// stage of the pre-tokenizer in turn. Any n >= 0 (n <= kThreads * kItems is one
// tile). Launch with blockDim.x == kThreads; every thread must call it.
template <int kThreads, int kItems>
__device__ __forceinline__ void block_pretokenize(
    const PretokView& v, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    typename BlockPretokenizer<kThreads, kItems>::TempStorage& tmp) {
  BlockPretokenizer<kThreads, kItems> bp(tmp);
  if (v.n_stages > 0) bp.template run<false>(v.tables, v.classes(0), text, n, is_special, piece_start);
  for (int st = 1; st < v.n_stages; ++st)
    bp.template run<true>(v.tables + st, v.classes(st), text, n, is_special, piece_start);
}

}  // namespace bbpe
