// The misses' cache: pieces of up to kShortKeyLen bytes that the piece table lacks (misses),
// with the tokens their merges gave, so that the next occurrence of the piece, in this call or
// a later one, costs a probe instead of its merge passes. The merges of the misses are over a
// third of the piece kernel's time (docs/performance.md), and text repeats its rare words.
// Both piece kernels use it: piece_kernel.cuh by a piece's bytes, char_piece_kernel.cuh by a
// word's text where that text alone fixes its symbols (docs/design.md).
//
// It is the vocabulary's operand `miss_cache` (int32[C, kMissCacheInts], created zeroed with its
// tables on each device: blockbpe_jax/tables/sets.py), so it never serves another vocabulary,
// and the one operand a kernel writes. What it holds is what the merges give, so no call's ids
// depend on what is in it: a full cache, a row being written, or BLOCKBPE_MISS_CACHE=0 (read
// per call, for A/B runs) only mean more merging.
//
// A row: the piece's short key (4 words), its state, a 64-bit check word, up to kMissTokens
// tokens. State: 0 empty; kMissBusy while its writer fills it; else ready: the piece's length and
// token count. Rows are written once: a writer claims an empty row with a compare-and-swap,
// fills it, then publishes the state with a release store. A reader does not acquire (a
// load-acquire at GPU scope invalidates the SM's L1, where the piece and pair tables' rows
// stay between probes), so it may see a ready state with parts of the row not yet written
// (zeros); the check word, a 64-bit hash of the whole row, refuses such a row, as it does one
// copied while written (by something other than these kernels).
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "core/bpe_core.h"
#include "cuda/block_common.cuh"

namespace bbpe {
namespace {

constexpr int kMissState = 4, kMissCheck = 5, kMissFirstToken = 7;  // (the check: words 5 and 6)
constexpr int kMissTokens = kMissCacheInts - kMissFirstToken;        // 9: longer results are not kept
constexpr int kMissProbes = 4;                                       // rows tried from the home row
constexpr int32_t kMissBusy = 1;

using MissState = cuda::atomic_ref<int32_t, cuda::thread_scope_device>;

// A ready row's state: its piece's length and token count (never 0 or kMissBusy).
__device__ __forceinline__ int32_t miss_ready(int len, int count) { return len << 16 | count << 8 | 2; }

// The check word: the row's key, state and its count's tokens (those a reader returns) folded
// by multiply-xorshift steps (a zero word where another is written changes it). Only `count`
// tokens: a hit costs a step per token it returns, not one per slot of the row.
__device__ __forceinline__ uint64_t miss_check(ShortKey key, int32_t state, const int32_t (&tok)[kMissTokens],
                                               int count) {
  uint64_t h = key.lo * 0x9E3779B97F4A7C15ull ^ key.hi * 0xC2B2AE3D27D4EB4Full ^ (uint32_t)state;
#pragma unroll
  for (int i = 0; i < kMissTokens; ++i) {
    if (i >= count) break;
    h = (h ^ (uint32_t)tok[i]) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h ^ (h >> 32) ^ 0x5851F42D4C957F2Dull;  // (so an unwritten check word, 0, fits no all-zero row)
}

// Whether a row's key (its first int4, as read) is `key`; miss_key_is reads it first.
__device__ __forceinline__ bool miss_key_equals(int4 k, ShortKey key) {
  return (uint32_t)k.x == (uint32_t)key.lo && (uint32_t)k.y == (uint32_t)(key.lo >> 32) &&
         (uint32_t)k.z == (uint32_t)key.hi && (uint32_t)k.w == (uint32_t)(key.hi >> 32);
}
__device__ __forceinline__ bool miss_key_is(const int32_t* row, ShortKey key) {
  return miss_key_equals(__ldcg(reinterpret_cast<const int4*>(row)), key);
}

__device__ __forceinline__ int32_t* miss_row(const VocabView& v, uint32_t h, int probe) {
  return v.miss_cache + (size_t)((h + (uint32_t)probe) & v.miss_mask) * kMissCacheInts;
}

// The tokens of the piece with short key `key` (n bytes, hash h = short_key_hash(key, n)) into
// tok[0..count) if the cache holds it; returns count (1..n), or 0. A row is read whole, its four
// int4 at once (one round trip to L2 where state, then key, then tokens took three): the
// reads are plain, the check word refuses a row seen half written.
__device__ __forceinline__ int miss_cache_find(const VocabView& v, ShortKey key, int n, uint32_t h, int32_t* tok) {
  for (int probe = 0; probe < kMissProbes; ++probe) {
    const int4* row = reinterpret_cast<const int4*>(miss_row(v, h, probe));
    const int4 k = __ldcg(row), a = __ldcg(row + 1), b = __ldcg(row + 2), c = __ldcg(row + 3);
    const int32_t state = a.x;  // (kMissState)
    if (state == 0) return 0;
    if ((state & 0xFF) != 2 || (state >> 16) != n) continue;  // being written, or another length
    if (!miss_key_equals(k, key)) continue;
    const int32_t held[kMissTokens] = {a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
    const uint64_t check = (uint64_t)(uint32_t)a.z << 32 | (uint32_t)a.y;
    const int count = (state >> 8) & 0xFF;
    if (count < 1 || count > n || count > kMissTokens || miss_check(key, state, held, count) != check)
      return 0;
#pragma unroll
    for (int i = 0; i < kMissTokens; ++i)
      if (i < count) tok[i] = held[i];
    return count;
  }
  return 0;
}

// Keeps the piece (short key `key`, n bytes, hash h) with its merged tokens tok[0..count) (their
// ids: token_id), unless the result is longer than a row holds, the piece is there already, or
// its rows are taken.
__device__ __forceinline__ void miss_cache_put(const VocabView& v, ShortKey key, int n, uint32_t h, const int32_t* tok,
                                               int count) {
  if (count < 1 || count > kMissTokens) return;
  int32_t held[kMissTokens];
#pragma unroll
  for (int i = 0; i < kMissTokens; ++i) held[i] = i < count ? token_id(tok[i]) : 0;
  const int32_t ready = miss_ready(n, count);
  for (int probe = 0; probe < kMissProbes; ++probe) {
    int32_t* row = miss_row(v, h, probe);
    MissState state(row[kMissState]);
    int32_t seen = state.load(cuda::memory_order_relaxed);
    if (seen == 0 && state.compare_exchange_strong(seen, kMissBusy, cuda::memory_order_relaxed)) {
      reinterpret_cast<int4*>(row)[0] = make_int4((int32_t)key.lo, (int32_t)(key.lo >> 32), (int32_t)key.hi,
                                                  (int32_t)(key.hi >> 32));
      const uint64_t check = miss_check(key, ready, held, count);
      row[kMissCheck] = (int32_t)(uint32_t)check, row[kMissCheck + 1] = (int32_t)(uint32_t)(check >> 32);
#pragma unroll
      for (int i = 0; i < kMissTokens; ++i) row[kMissFirstToken + i] = held[i];
      state.store(ready, cuda::memory_order_release);
      return;
    }
    if (seen == ready && miss_key_is(row, key)) return;  // (a stale read: at worst a second row)
  }
}

// The piece with short key `key` (m bytes) from the cache, if there: its tokens into
// tok[0..count); returns count, or 0.
__device__ __forceinline__ int find_merged_miss(const VocabView& v, ShortKey key, int m, int32_t* tok) {
  if (!v.miss_cache || m > kShortKeyLen) return 0;
  return miss_cache_find(v, key, m, short_key_hash(key, m), tok);
}

// After a block's merges: the n listed misses into the cache, a thread each of kThreads.
// listed(g, at, m, first) says whether listed miss g may be kept and sets where it is: its m
// bytes at text + at, its count[first] tokens at tok + first.
template <int kThreads, class Count, class Listed, class ReadShortKey>
__device__ __forceinline__ void keep_merged_misses(const VocabView& v, const uint8_t* text, const int32_t* tok,
                                                   const Count* count, int n, Listed listed,
                                                   ReadShortKey read_short_key) {
  if (!v.miss_cache) return;
  for (int g = (int)threadIdx.x; g < n; g += kThreads) {
    int at, m, first;
    if (!listed(g, at, m, first) || m > kShortKeyLen) continue;
    const ShortKey key = read_short_key(text + at, m);
    miss_cache_put(v, key, m, short_key_hash(key, m), tok + first, count[first]);
  }
}
// The same for misses listed by their block position (list[g], also their tokens') and length.
template <int kThreads, class Entry, class Count, class ReadShortKey>
__device__ __forceinline__ void keep_merged_misses(const VocabView& v, const uint8_t* text, const int32_t* tok,
                                                   const Count* count, const Entry* list, const Entry* lens, int n,
                                                   ReadShortKey read_short_key) {
  const auto listed = [&](int g, int& at, int& m, int& first) {
    at = first = list[g], m = lens[g];
    return true;
  };
  keep_merged_misses<kThreads>(v, text, tok, count, n, listed, read_short_key);
}

}  // namespace
}  // namespace bbpe
