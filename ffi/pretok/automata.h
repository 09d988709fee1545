// Exact, regex-equivalent pre-tokenizer: piece boundaries of tiktoken / HF tokenizers, as two
// finite automata over code point classes that run sequentially on the CPU and in parallel
// (prefix scans of transition maps) inside one CUDA thread block per string. The automata are
// data: blockbpe_jax/pretok compiles them from the tokenizer's own regex into PretokTables
// (one per stage of a pre-tokenizer pipeline) plus a code point -> class table, and both
// executors run whatever they are given. All logic is BBPE_HD and shared.
//
// The automata (blockbpe_jax/pretok/compiler.py derives them). Per byte i a class c_i
// (byte_class, pretok/tables.h):
//   Backward: T[n] = init, T[i] = G(T[i+1], c_i). T[i] summarises text[i..end of sub-text):
//     which parts of the regex can still succeed from there (the lookahead the forward
//     automaton needs).
//   Forward: S[0] = init, (S[i+1], flag_i) = F(S[i], c_i, T[i+1]); flag_i = a piece starts at
//     byte i.
// Both have at most 16 states, so the transition map of a chunk over all states is a uint64 of
// 16 nibbles; composing maps is associative and is what pretokenize_chunked and the CUDA block
// scans compute.
//
// Stages: a pre-tokenizer pipeline (HF Sequence of Splits) runs its stages in order; each
// stage treats the piece starts of the stages before it as sub-text boundaries (both automata
// restart there), and its own flags include them.
//
// Special tokens: bytes with is_special[i] != 0 belong to special tokens. They end the sub-text
// before them (so `$` and `(?!\S)` see an end there) and a new sub-text starts after them, as
// tiktoken and HF pre-tokenize each slice between specials independently. Their flag is
// don't-care (written as 0); the first byte after them always gets a 1.
//
// What runs them: pretok/sequential.h (the CPU encode), pretok/block_pretokenizer.cuh (one
// CUDA thread block per string, and the tile passes of long rows), pretok/chunked.h (the block
// decomposition on the host: the tests, and one long text on many host threads). This file
// holds what all three share: transition maps, the steps, the chunk maps and replays,
// edge_state.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "pretok/tables.h"

namespace bbpe {

// A key (class * 16 + T[i+1]) with this bit: a piece of an earlier stage starts at the byte,
// so both automata restart there (see the Stages paragraph above).
constexpr uint16_t kKeyBoundary = kMaxClasses * 16;

// ---------------------------------------------------------------------------------------------
// Transition maps: nibble x of a map = image of state x. map_then(a, b) = "a, then b".
constexpr uint64_t kMapIdentity = 0xFEDCBA9876543210ull;
BBPE_HD uint64_t map_constant(uint8_t x) { return 0x1111111111111111ull * x; }
BBPE_HD uint64_t live_states(int count) { return count >= 16 ? ~0ull : (1ull << (4 * count)) - 1; }
// The inverse: how many states a live mask holds (its nibbles are 0xF or 0).
BBPE_HD int live_count(uint64_t live) {
#if defined(__CUDA_ARCH__)
  return __popcll(live) / 4;
#else
  return __builtin_popcountll(live) / 4;
#endif
}
// Whether every live state has the same image (state 0's, broadcast to a 32-bit word's nibbles
// and compared with both halves: no 64-bit multiply).
BBPE_HD bool map_is_constant(uint64_t m, uint64_t live) {
  const uint32_t first = ((uint32_t)m & 15u) * 0x11111111u;
  return ((((uint32_t)m ^ first) & (uint32_t)live) | (((uint32_t)(m >> 32) ^ first) & (uint32_t)(live >> 32))) == 0;
}
// The image of state x, for a state kept in a 32-bit word (in the chunk loops a byte-sized
// state costs a byte insert or extract on the GPU at every step), and as a byte.
BBPE_HD uint32_t map_image(uint64_t m, uint32_t x) { return (uint32_t)(m >> (4 * x)) & 15u; }
BBPE_HD uint8_t map_apply(uint64_t m, uint8_t x) { return (uint8_t)map_image(m, x); }
#if defined(__CUDA_ARCH__)
// "a, then b" on the GPU: byte permutes instead of sixteen nibble lookups. b's even images
// (the low nibble of each of its 8 bytes) and odd images (the high nibbles) as two 8-byte
// tables; for 4 states x at a time, one prmt selects byte a[x] / 2 of the even table, zeroed
// where a[x] is odd (a selector's bit 3: sign-replicate, and no image has bit 7), another the
// odd table's, zeroed where a[x] is even; their OR holds image x in byte x. About 40
// instructions for the composition where the loop takes about 240.
__device__ __forceinline__ uint32_t prmt(uint32_t lo, uint32_t hi, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(sel));
  return r;
}
__device__ __forceinline__ uint64_t map_then_bytes(uint64_t a, uint64_t b) {
  const uint32_t b_lo = (uint32_t)b, b_hi = (uint32_t)(b >> 32);
  const uint32_t even_lo = b_lo & 0x0F0F0F0Fu, even_hi = b_hi & 0x0F0F0F0Fu;
  const uint32_t odd_lo = (b_lo >> 4) & 0x0F0F0F0Fu, odd_hi = (b_hi >> 4) & 0x0F0F0F0Fu;
  uint32_t quad[4];  // images of states 4q..4q+3, one a byte
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t x = (uint32_t)(a >> (16 * q)) & 0xFFFFu;                      // four images a[x]
    const uint32_t sel_even = ((x >> 1) & 0x7777u) | ((x & 0x1111u) << 3);  // byte a[x] / 2; bit 3: a[x] odd
    quad[q] = prmt(even_lo, even_hi, sel_even) | prmt(odd_lo, odd_hi, sel_even ^ 0x8888u);
  }
  // bytes back to nibbles: byte 2k of (v | v >> 4) holds images 2k, 2k + 1
  const uint32_t lo = prmt(quad[0] | quad[0] >> 4, quad[1] | quad[1] >> 4, 0x6420u);
  const uint32_t hi = prmt(quad[2] | quad[2] >> 4, quad[3] | quad[3] >> 4, 0x6420u);
  return (uint64_t)hi << 32 | lo;
}
#else
// "a, then b" on the host, nibble by nibble over the first `states` states.
inline uint64_t map_then_nibbles(uint64_t a, uint64_t b, int states) {
  uint64_t r = 0;
  for (int x = 0; x < states && x < 16; ++x) r |= (uint64_t)map_apply(b, map_apply(a, (uint8_t)x)) << (4 * x);
  return r;
}
#endif

// "a, then b" over the first `states` states only (the images of the others are 0): the
// automata have 8-14 states of 16, and live states map to live states, so a chunk's map
// (ChunkMap) need not compose the rest (on the GPU, all sixteen: map_then_bytes; the others'
// images are then the full composition's, which no caller applies either). Called, not
// inlined: a chunk's unrolled steps each have a ChunkMap::then, and sixteen inlined copies per
// automaton were two fifths of the piece kernel's machine code (docs/design.md, "Code size").
BBPE_HD_OUTLINE uint64_t map_then_live(uint64_t a, uint64_t b, int states) {
#if defined(__CUDA_ARCH__)
  return map_then_bytes(a, b);
#else
  return map_then_nibbles(a, b, states);
#endif
}
// All 16 states.
BBPE_HD_OUTLINE uint64_t map_then(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return map_then_bytes(a, b);
#else
  return map_then_nibbles(a, b, 16);
#endif
}

// ---------------------------------------------------------------------------------------------
// Steps. A class value may carry kMaxClasses (a piece of an earlier stage starts at the byte):
// the backward automaton then restarts before it (constant map to init) and the forward one
// steps it from init. kBoundaries = false (the first stage, which has no earlier pieces)
// compiles the check away: it sits in the innermost loops.
template <bool kBoundaries = true>
BBPE_HD uint64_t bwd_step(const PretokTables& tab, uint8_t cls) {
  return (kBoundaries && (cls & kMaxClasses)) ? map_constant(tab.bwd_init & 15)
                                              : tab.bwd[cls & (kMaxClasses - 1)];
}
template <bool kBoundaries = true>
BBPE_HD uint64_t fwd_step(const PretokTables& tab, uint16_t key) {
  const uint64_t m = tab.fwd[key & (kKeyBoundary - 1)];
  return (kBoundaries && (key & kKeyBoundary)) ? map_constant(map_apply(m, tab.fwd_init & 15)) : m;
}
template <bool kBoundaries = true>
BBPE_HD uint8_t fwd_flag(const PretokTables& tab, uint16_t key, uint8_t s) {
  if (kBoundaries && (key & kKeyBoundary)) s = tab.fwd_init & 15;
  return (uint8_t)((tab.flag[key & (kKeyBoundary - 1)] >> s) & 1);
}
// A byte's class with the boundary mark (a piece of an earlier stage starts at the byte).
BBPE_HD uint8_t with_boundary(uint8_t c, bool boundary) {
  return (boundary && c > kClassSpecial) ? (uint8_t)(c | kMaxClasses) : c;
}
// The class of byte i for stage `stage`, with the boundary mark of the earlier stages' flags.
BBPE_HD uint8_t stage_class(const PretokTables& tab, const uint8_t* text, int n, const uint8_t* sp,
                            int i, const ClassTable& ct, bool boundary) {
  return with_boundary(byte_class(tab, text, n, sp, i, ct), boundary);
}

// ---------------------------------------------------------------------------------------------
// Chunk helpers (a chunk = cnt consecutive bytes, given by their classes). pretokenize_chunked
// and the CUDA block function use exactly these.


// A chunk's map, composed step by step. The automata forget their past within a code point
// or two: once every live state has the same image, the rest of the chunk steps that one
// state (a map_apply per byte instead of a map_then). The first step is the map itself, and
// later ones compose over the live states only. The result differs from the full composition
// only at dead states, which no caller ever applies it to.
// (The flags and the state are words, not bool and uint8_t: each step of the unrolled loops
// would otherwise extend or insert a byte on the GPU.)
struct ChunkMap {
  uint64_t live;                // the automaton's states (map_is_constant looks at these)
  int states;                   // how many: the live nibbles are the low ones
  uint64_t m = kMapIdentity;    // the map so far, while it is not constant
  int fresh = 1;                // nothing composed yet (identity steps only)
  int constant = 0;
  uint32_t state = 0;           // the one image, once it is
  BBPE_HD explicit ChunkMap(uint64_t live_states) : live(live_states), states(live_count(live_states)) {}
  BBPE_HD void then(uint64_t step) {
    if (constant) {
      state = map_image(step, state);
    } else {
      m = fresh ? step : map_then_live(m, step, states);
      fresh = fresh && m == kMapIdentity;
      constant = map_is_constant(m, live);
      state = (uint32_t)m & 15u;
    }
  }
  BBPE_HD uint64_t map() const { return constant ? map_constant((uint8_t)state) : m; }
};

// Backward map of a chunk (nibble x = T at the chunk's first byte when T after its end is x),
// and on the way the keys (chunk_bwd_replay's) of the bytes whose T after them the chunk's own
// later bytes fix: once the map is constant, T is its one image whatever T after the chunk is.
// Those bytes are a prefix of the chunk: key(i, key) for i < *replay_from; the replay then writes
// only the rest (chunk_bwd_replay_from). (A continuation byte's step, kClassNone's, is the
// identity: stepped like any other, with no test at every byte.)
template <bool kBoundaries = true, class C, class Key>
BBPE_HD uint64_t chunk_bwd_map_keys(const PretokTables& tab, const C* cls, int cnt, int* replay_from, Key key) {
  ChunkMap acc(tab.bwd_live);
  int from = cnt;
  BBPE_UNROLL
  for (int i = cnt - 1; i >= 0; --i) {
    const uint8_t c = (uint8_t)cls[i];
    if (acc.constant) key(i, (uint16_t)(c * 16 + acc.state));
    else from = i;
    acc.then(bwd_step<kBoundaries>(tab, c));
  }
  *replay_from = from;
  return acc.map();
}
// The map alone.
template <bool kBoundaries = true, class C>
BBPE_HD uint64_t chunk_bwd_map(const PretokTables& tab, const C* cls, int cnt) {
  int from;
  return chunk_bwd_map_keys<kBoundaries>(tab, cls, cnt, &from, [](int, uint16_t) {});
}

// Backward replay from T after the chunk, over its bytes from..cnt - 1. Turns each class into
// the key of its forward step, key[i] = cls[i] * 16 + T[i+1] (cls and key may be the same
// array); returns T at byte `from` (the chunk's start with from = 0: chunk_bwd_replay).
template <bool kBoundaries = true, class C, class K>
BBPE_HD uint8_t chunk_bwd_replay_from(const PretokTables& tab, const C* cls, int cnt, uint8_t t_end, K* key,
                                      int from) {
  uint32_t t = t_end;
  BBPE_UNROLL
  for (int i = cnt - 1; i >= 0; --i) {
    if (i < from) break;
    const uint8_t c = (uint8_t)cls[i];
    key[i] = (K)(c * 16 + t);
    t = map_image(bwd_step<kBoundaries>(tab, c), t);
  }
  return (uint8_t)t;
}
template <bool kBoundaries = true, class C, class K>
BBPE_HD uint8_t chunk_bwd_replay(const PretokTables& tab, const C* cls, int cnt, uint8_t t_end, K* key) {
  return chunk_bwd_replay_from<kBoundaries>(tab, cls, cnt, t_end, key, 0);
}

// Forward map of a chunk (nibble x = S after the chunk when S before it is x; keys below 16,
// continuation bytes', step by the identity), and on the way the flags (chunk_fwd_replay's) of
// the bytes whose S before them the chunk's own earlier bytes fix: once the map is constant, S
// is its one image whatever S before the chunk is. Those bytes are a suffix of the chunk:
// flag(i, flag) for *replay_to <= i < valid; the replay then gives the others
// (chunk_fwd_replay_upto). (flag, not an array: the piece kernel keeps them as bits, one register
// live until the replay, where sixteen bytes spilled.)
template <bool kBoundaries = true, class K, class Flag>
BBPE_HD uint64_t chunk_fwd_map_flags(const PretokTables& tab, const K* key, int cnt, int valid, int* replay_to,
                                     Flag flag) {
  ChunkMap acc(tab.fwd_live);
  int to = 0;
  BBPE_UNROLL
  for (int i = 0; i < cnt; ++i) {
    const uint16_t k = (uint16_t)key[i];
    if (!acc.constant) to = i + 1;
    else if (i < valid) flag(i, fwd_flag<kBoundaries>(tab, k, (uint8_t)acc.state));
    acc.then(fwd_step<kBoundaries>(tab, k));
  }
  *replay_to = to;
  return acc.map();
}
// The map alone.
template <bool kBoundaries = true, class K>
BBPE_HD uint64_t chunk_fwd_map(const PretokTables& tab, const K* key, int cnt) {
  int to;
  return chunk_fwd_map_flags<kBoundaries>(tab, key, cnt, 0, &to, [](int, uint8_t) {});
}

// Forward replay from S before the chunk over its bytes 0..to - 1: flag(i, flag) for i < valid
// among them; returns S after byte to - 1.
template <bool kBoundaries = true, class K, class Flag>
BBPE_HD uint8_t chunk_fwd_replay_upto(const PretokTables& tab, const K* key, int cnt, uint8_t s, int valid, int to,
                                      Flag flag) {
  uint32_t st = s;
  BBPE_UNROLL
  for (int i = 0; i < cnt; ++i) {
    if (i >= to) break;
    if (i < valid) flag(i, fwd_flag<kBoundaries>(tab, (uint16_t)key[i], (uint8_t)st));
    st = map_image(fwd_step<kBoundaries>(tab, (uint16_t)key[i]), st);
  }
  return (uint8_t)st;
}
// The whole chunk's replay: writes flags[i] for i < valid; returns S after the chunk.
template <bool kBoundaries = true, class K>
BBPE_HD uint8_t chunk_fwd_replay(const PretokTables& tab, const K* key, int cnt, uint8_t s, uint8_t* flags,
                                 int valid) {
  return chunk_fwd_replay_upto<kBoundaries>(tab, key, cnt, s, valid, cnt, [&](int i, uint8_t f) { flags[i] = f; });
}

// The state at a chunk's edge without a scan. A chunk's map is usually constant (see
// ChunkMap), so the state after a chunk (backward pass) or before it (forward pass) is the
// image of the nearest constant map among the next (resp. previous) chunks, stepped through
// the maps in between. maps[at], maps[at + step], ... are the `count` chunks between this one
// and the tile's edge, nearest first, and `carry` is the state at that edge. Returns false
// when more than max_steps maps would have to be stepped through (always for max_steps < 0,
// which the tests use to force the scan); the caller then scans.
constexpr int kPretokLookback = 8;
BBPE_HD bool edge_state(const uint64_t* maps, int at, int step, int count, uint64_t live,
                        uint8_t carry, int max_steps, uint8_t* state) {
  if (max_steps < 0) return false;
  int j = 0;
  while (j < count && !map_is_constant(maps[at + j * step], live)) {
    if (++j > max_steps) return false;
  }
  uint8_t x = j < count ? (uint8_t)(maps[at + j * step] & 15) : carry;  // (state 0 is live)
  while (--j >= 0) x = map_apply(maps[at + j * step], x);
  *state = x;
  return true;
}

// A tile's edge state from the chunks beyond its edge within a margin (the one-pass tile
// pre-tokenizer, cuda/tile_pipeline.cuh): maps[0..count) nearest first; when they reach the
// row's end (to_end) the state there is `end`, else some map among them must be constant.
BBPE_HD bool margin_edge_state(const uint64_t* maps, int count, bool to_end, uint64_t live, uint8_t end,
                               uint8_t* state) {
  return edge_state(maps, 0, 1, count, live, end, to_end ? count : count - 1, state);
}

}  // namespace bbpe
