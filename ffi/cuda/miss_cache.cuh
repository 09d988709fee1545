// The misses' cache: pieces that the piece table lacks (misses), with the tokens their merges
// gave, so that the next occurrence of the piece, in this call or a later one, costs a probe
// instead of its merge passes. The merges of the misses are over a third of the piece kernel's
// time (docs/kernel_rounds.md, "Piece kernel, round 5"), and text repeats its rare words. Both
// piece kernels use it, with keys of up to kMissLongKeyLen bytes: piece_kernel.cuh by a piece's
// bytes, char_piece_kernel.cuh by a word's text where that text alone fixes its symbols (a word
// runs from one space to the next; one longer than 16 bytes left out would be merged again at
// every call, a chain of passes that sets its block's time; docs/design.md).
//
// It is the vocabulary's operand `miss_cache` (int32[C, kMissCacheInts], created zeroed with its
// tables on each device: blockbpe_jax/tables/sets.py), so it never serves another vocabulary,
// and the one operand a kernel writes. What it holds is what the merges give, so no call's ids
// depend on what is in it: a full cache, a row being written, or BLOCKBPE_MISS_CACHE=0 (read
// per call, for A/B runs) only mean more merging.
//
// A row (kMissCacheInts words, 128 bytes): the key's bytes 0..15 (4 words), its state, a
// 64-bit check word, tokens 0..8; then, for a key of 17..32 bytes (a long key: the
// SentencePiece-style kernel's words run from one space to the next, newlines and quotes
// included), its bytes 16..31 (4 words) and tokens 9..20. A short key's row is its first 64
// bytes alone. State: 0 empty; busy while its writer fills it (the key's length and a tag of its
// hash: miss_busy); else ready: the key's length and token count. Rows are written once: a writer
// claims an empty row with a compare-and-swap, fills it, then publishes the state with a release
// store. A writer that finds its piece there, ready or busy, stops: in a call's first encode
// every block holding a frequent miss keeps it at once, and its copies would fill its four probe
// rows and spill into others', leaving some misses no row (merged again at every call). A reader
// does not acquire (a load-acquire at GPU scope invalidates the SM's L1, where the piece and pair
// tables' rows stay between probes), so it may see a ready state with parts of the row not yet
// written (zeros); the check word, a 64-bit hash of the whole row, refuses such a row, as it
// does one copied while written (by something other than these kernels).
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "core/bpe_core.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

constexpr int kMissState = 4, kMissCheck = 5, kMissFirstToken = 7;  // (the check: words 5 and 6)
constexpr int kMissTokens = 9;      // a short key's tokens: longer results are not kept
constexpr int kMissKeyTail = 16;    // a long key's bytes 16..31 (4 words)
constexpr int kMissMoreTokens = 20;  // a long key's tokens 9..
constexpr int kMissLongTokens = kMissTokens + kMissCacheInts - kMissMoreTokens;  // 21
constexpr int kMissLongKeyLen = 2 * kShortKeyLen;
constexpr int kMissProbes = 4;  // rows tried from the home row
static_assert(kMissFirstToken + kMissTokens == kMissKeyTail && kMissKeyTail + 4 == kMissMoreTokens,
              "a short key's row is the first 64 bytes of a row");

using MissState = cuda::atomic_ref<int32_t, cuda::thread_scope_device>;

// A ready row's state: its key's length and token count (low byte 2). A busy row's: its key's
// length and the top byte of its hash (low byte 1), so that a second writer of the same piece
// sees it is being kept (another piece of that length and tag in the row only goes unkept).
__device__ __forceinline__ int32_t miss_ready(int len, int count) { return len << 16 | count << 8 | 2; }
__device__ __forceinline__ int32_t miss_busy(int len, uint32_t h) { return len << 16 | (int32_t)(h >> 24) << 8 | 1; }

// A key of up to kMissLongKeyLen bytes: bytes 0..15 and 16..31 as short keys (tail zero for a
// key of up to kShortKeyLen bytes, whose hash and check are then the short key's own). The
// tail enters the hash and the check word as its words times these (tests/miss_cache_rows.py
// mirrors them).
struct MissKey {
  ShortKey head, tail;
};
constexpr uint64_t kMissTailMulLo = 0xD6E8FEB86659FD93ull, kMissTailMulHi = 0xA0761D6478BD642Full;
__device__ __forceinline__ uint32_t miss_key_hash(const MissKey& key, int n) {
  if (n <= kShortKeyLen) return short_key_hash(key.head, n);
  return short_key_hash(
      ShortKey{key.head.lo ^ key.tail.lo * kMissTailMulLo, key.head.hi ^ key.tail.hi * kMissTailMulHi}, n);
}

// The check word: the row's key, state and its count's tokens (those a reader returns) folded
// by multiply-xorshift steps (a zero word where another is written changes it). Only `count`
// tokens: a hit costs a step per token it returns, not one per slot of the row.
// In steps (a reader folds a long key's later tokens as it loads them, holding none):
// miss_check_start, a miss_check_step per token in order, miss_check_end.
__device__ __forceinline__ uint64_t miss_check_start(const MissKey& key, int32_t state) {
  const uint64_t h = key.head.lo * 0x9E3779B97F4A7C15ull ^ key.head.hi * 0xC2B2AE3D27D4EB4Full ^ (uint32_t)state;
  return h ^ key.tail.lo * kMissTailMulLo ^ key.tail.hi * kMissTailMulHi;
}
__device__ __forceinline__ uint64_t miss_check_step(uint64_t h, int32_t tok) {
  h = (h ^ (uint32_t)tok) * 0x100000001B3ull;
  return h ^ (h >> 29);
}
__device__ __forceinline__ uint64_t miss_check_end(uint64_t h) {
  return h ^ (h >> 32) ^ 0x5851F42D4C957F2Dull;  // (so an unwritten check word, 0, fits no all-zero row)
}
template <int kHeld>
__device__ __forceinline__ uint64_t miss_check(const MissKey& key, int32_t state, const int32_t (&tok)[kHeld],
                                               int count) {
  uint64_t h = miss_check_start(key, state);
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    if (i >= count) break;
    h = miss_check_step(h, tok[i]);
  }
  return miss_check_end(h);
}

// Whether a key's int4 (as read) is `key`; miss_key_is reads it first.
__device__ __forceinline__ bool miss_key_equals(int4 k, ShortKey key) {
  return (uint32_t)k.x == (uint32_t)key.lo && (uint32_t)k.y == (uint32_t)(key.lo >> 32) &&
         (uint32_t)k.z == (uint32_t)key.hi && (uint32_t)k.w == (uint32_t)(key.hi >> 32);
}
__device__ __forceinline__ bool miss_key_is(const int32_t* row, ShortKey key) {
  return miss_key_equals(__ldcg(reinterpret_cast<const int4*>(row)), key);
}
__device__ __forceinline__ void miss_key_store(int32_t* row, ShortKey key) {
  reinterpret_cast<int4*>(row)[0] =
      make_int4((int32_t)key.lo, (int32_t)(key.lo >> 32), (int32_t)key.hi, (int32_t)(key.hi >> 32));
}

__device__ __forceinline__ int32_t* miss_row(const VocabView& v, uint32_t h, int probe) {
  return v.miss_cache + (size_t)((h + (uint32_t)probe) & v.miss_mask) * kMissCacheInts;
}

// The tokens of the piece with key `key` (n bytes, hash h = miss_key_hash(key, n)) into
// tok[0..count) if the cache holds it; returns count (1..n), or 0. kMaxLen: the longest key the
// caller passes. A row's first 64 bytes (a short key's whole row) are read at once, one round
// trip to L2 where state, then key, then tokens took three: the reads are plain, the check word
// refuses a row seen half written. A long key's second half is read after its first matched.
template <int kMaxLen>
__device__ __forceinline__ int miss_cache_find(const VocabView& v, const MissKey& key, int n, uint32_t h, int32_t* tok) {
  constexpr bool kLong = kMaxLen > kShortKeyLen;
  for (int probe = 0; probe < kMissProbes; ++probe) {
    const int32_t* row = miss_row(v, h, probe);
    const int4* quads = reinterpret_cast<const int4*>(row);
    const int4 k = __ldcg(quads), a = __ldcg(quads + 1), b = __ldcg(quads + 2), c = __ldcg(quads + 3);
    const int32_t state = a.x;  // (kMissState)
    if (state == 0) return 0;
    if ((state & 0xFF) != 2 || (state >> 16) != n) continue;  // being written, or another length
    if (!miss_key_equals(k, key.head)) continue;
    if (kLong && n > kShortKeyLen && !miss_key_is(row + kMissKeyTail, key.tail)) continue;
    const int32_t held[kMissTokens] = {a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
    const uint64_t check = (uint64_t)(uint32_t)a.z << 32 | (uint32_t)a.y;
    const int count = (state >> 8) & 0xFF;
    const int most = n > kShortKeyLen ? kMissLongTokens : kMissTokens;
    if (count < 1 || count > n || count > most) return 0;
    // A long key's tokens past the first kMissTokens: folded into the check as loaded, then
    // loaded again (L2) into tok only once the check holds, so that no more are held at once.
    // each_more_token(f): f(i, token i) for those of them below count, in order, as loaded.
    const int4* more = reinterpret_cast<const int4*>(row + kMissMoreTokens);
    constexpr int kMoreQuads = (kMissCacheInts - kMissMoreTokens) / 4;
    const auto each_more_token = [&](auto f) {
      if constexpr (kLong) {
#pragma unroll
        for (int q = 0; q < kMoreQuads; ++q) {
          if (kMissTokens + 4 * q >= count) break;
          const int4 d = __ldcg(more + q);
          const int32_t four[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (kMissTokens + 4 * q + j < count) f(kMissTokens + 4 * q + j, four[j]);
        }
      }
    };
    uint64_t sum = miss_check_start(key, state);
#pragma unroll
    for (int i = 0; i < kMissTokens; ++i)
      if (i < count) sum = miss_check_step(sum, held[i]);
    each_more_token([&](int, int32_t x) { sum = miss_check_step(sum, x); });
    if (miss_check_end(sum) != check) return 0;
#pragma unroll
    for (int i = 0; i < kMissTokens; ++i)
      if (i < count) tok[i] = held[i];
    each_more_token([&](int i, int32_t x) { tok[i] = x; });
    return count;
  }
  return 0;
}

// Keeps the piece (key `key`, n bytes, hash h) with its merged tokens tok[0..count) (their ids:
// token_id), unless the result is longer than a row holds, the piece is there already or being
// kept, or its rows are taken.
template <int kMaxLen>
__device__ __forceinline__ void miss_cache_put(const VocabView& v, const MissKey& key, int n, uint32_t h,
                                               const int32_t* tok, int count) {
  constexpr bool kLong = kMaxLen > kShortKeyLen;
  constexpr int kHeld = kLong ? kMissLongTokens : kMissTokens;
  const bool long_key = kLong && n > kShortKeyLen;
  if (count < 1 || count > (long_key ? kMissLongTokens : kMissTokens)) return;
  int32_t held[kHeld];
#pragma unroll
  for (int i = 0; i < kHeld; ++i) held[i] = i < count ? token_id(tok[i]) : 0;
  const int32_t ready = miss_ready(n, count), busy = miss_busy(n, h);
  for (int probe = 0; probe < kMissProbes; ++probe) {
    int32_t* row = miss_row(v, h, probe);
    MissState state(row[kMissState]);
    int32_t seen = state.load(cuda::memory_order_relaxed);  // (a failed exchange sets it to what it found)
    if (seen == 0 && state.compare_exchange_strong(seen, busy, cuda::memory_order_relaxed)) {
      miss_key_store(row, key.head);
      const uint64_t check = miss_check(key, ready, held, count);
      row[kMissCheck] = (int32_t)(uint32_t)check, row[kMissCheck + 1] = (int32_t)(uint32_t)(check >> 32);
#pragma unroll
      for (int i = 0; i < kMissTokens; ++i) row[kMissFirstToken + i] = held[i];
      if (long_key) {
        miss_key_store(row + kMissKeyTail, key.tail);
#pragma unroll
        for (int i = kMissTokens; i < kHeld; ++i) row[kMissMoreTokens + i - kMissTokens] = held[i];
      }
      state.store(ready, cuda::memory_order_release);
      return;
    }
    if (seen == busy) return;
    if (seen == ready && miss_key_is(row, key.head) && (!long_key || miss_key_is(row + kMissKeyTail, key.tail)))
      return;  // (a stale read: at worst a second row)
  }
}

// The piece with key `key` (m bytes) from the cache, if there: its tokens into tok[0..count);
// returns count, or 0. (kMaxLen: miss_cache_find's.)
template <int kMaxLen = kShortKeyLen>
__device__ __forceinline__ int find_merged_miss(const VocabView& v, const MissKey& key, int m, int32_t* tok) {
  if (!v.miss_cache || m > kMaxLen) return 0;
  return miss_cache_find<kMaxLen>(v, key, m, miss_key_hash(key, m), tok);
}
__device__ __forceinline__ int find_merged_miss(const VocabView& v, ShortKey key, int m, int32_t* tok) {
  return find_merged_miss(v, MissKey{key, ShortKey{0, 0}}, m, tok);
}

// The n (<= kShortKeyLen) bytes at p as a short key (core/bpe_core.h), from five aligned
// words of shared memory (realigned_words) instead of a load per byte; the bytes past n
// masked off a word at a time (__funnelshift_lc clamps the shift at 32: a whole word kept).
// The bytes up to 19 past p are read: past text's end, at most the 16 bytes of the piece
// kernels' text_tail (PieceSmem, CharPieceSmem; p is inside text, whose size is a multiple of 16).
// Both piece kernels read every key this way, of the piece table and of this cache.
__device__ __forceinline__ ShortKey short_key_at(const uint8_t* p, int n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  // (from an integer, so these loads are generic: the shared-memory form, realigned_words' other
  // way, was no faster here; docs/kernel_rounds.md, "Piece kernel, round 29")
  const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
  const uint32_t shift = (uint32_t)(a & 3) * 8;
  uint32_t k[4];
  realigned_words<4>(w, shift, k);
  const int bits = 8 * n;
  const uint32_t k0 = k[0] & __funnelshift_lc(~0u, 0u, bits);
  const uint32_t k1 = k[1] & __funnelshift_lc(~0u, 0u, max(bits - 32, 0));
  const uint32_t k2 = k[2] & __funnelshift_lc(~0u, 0u, max(bits - 64, 0));
  const uint32_t k3 = k[3] & __funnelshift_lc(~0u, 0u, max(bits - 96, 0));
  return ShortKey{(uint64_t)k1 << 32 | k0, (uint64_t)k3 << 32 | k2};
}

// The key of the m (<= kMissLongKeyLen) bytes at p (a piece kernel's text in shared memory).
__device__ __forceinline__ MissKey miss_key_at(const uint8_t* p, int m) {
  if (m <= kShortKeyLen) return MissKey{short_key_at(p, m), ShortKey{0, 0}};
  return MissKey{short_key_at(p, kShortKeyLen), short_key_at(p + kShortKeyLen, m - kShortKeyLen)};
}

// After a block's merges: the n listed misses (keys of up to kMissLongKeyLen bytes) into the
// cache, a thread each of kThreads. listed(g, at, m, first) says whether listed miss g may be
// kept and sets where it is: its m bytes at text + at, its count[first] tokens at tok + first.
template <int kThreads, class Count, class Listed>
__device__ __forceinline__ void keep_merged_misses(const VocabView& v, const uint8_t* text, const int32_t* tok,
                                                   const Count* count, int n, Listed listed) {
  if (!v.miss_cache) return;
  for (int g = (int)threadIdx.x; g < n; g += kThreads) {
    int at, m, first;
    if (!listed(g, at, m, first) || m > kMissLongKeyLen) continue;
    const MissKey key = miss_key_at(text + at, m);
    miss_cache_put<kMissLongKeyLen>(v, key, m, miss_key_hash(key, m), tok + first, count[first]);
  }
}
// The same for misses listed by their block position (list[g], also their tokens') and length
// (0: not merged here, e.g. found in the cache before the merges).
template <int kThreads, class Entry, class Count>
__device__ __forceinline__ void keep_merged_misses(const VocabView& v, const uint8_t* text, const int32_t* tok,
                                                   const Count* count, const Entry* list, const Entry* lens, int n) {
  const auto listed = [&](int g, int& at, int& m, int& first) {
    at = first = list[g], m = lens[g];
    return m > 0;
  };
  keep_merged_misses<kThreads>(v, text, tok, count, n, listed);
}

}  // namespace
}  // namespace bbpe
