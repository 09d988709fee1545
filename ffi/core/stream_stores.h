// Rows that a device reads next, written with non-temporal stores: the GPU staging's packer
// (core/pack_strings.h, write_rows_unlocked with `streaming`). A row written with ordinary
// stores sits modified in the writing core's caches, and the device's DMA then has to take
// every line of it from there: on the H200 hosts a 4 MiB copy right after packing took twice
// as long as the same copy of memory not written since (docs/performance.md). Non-temporal
// stores send the lines to memory instead, and skip the read of each line before it is
// written. Not for rows the CPU reads next (the CPU encode): it would find them out of cache.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace bbpe {

// Writes the bytes of [begin, end) in order (put, then zeros to the end): every 16-byte
// aligned block inside the range with one non-temporal store (a block is gathered in
// `held_` until it is whole), the bytes of a block the range shares with its neighbours
// with ordinary stores, so that rows written by different threads never store over each
// other's bytes. Call stream_fence() before anything else (the device) reads them.
class StreamWriter {
 public:
  StreamWriter(uint8_t* begin, uint8_t* end) : begin_(begin), at_(begin), end_(end) {}

  // The next n bytes (at most what is left of the range).
  void put(const uint8_t* src, int64_t n) { write<false>(src, n); }
  // Zeros up to the range's end.
  void zeros() { write<true>(nullptr, end_ - at_); }
  // Bytes of the range not written yet.
  int64_t left() const { return end_ - at_; }

 private:
  template <bool kZero>
  void write(const uint8_t* src, int64_t n) {
    n = std::min<int64_t>(n, end_ - at_);
#if defined(__SSE2__)
    while (n > 0) {
      const int off = (int)(reinterpret_cast<uintptr_t>(at_) & 15);
      uint8_t* block = at_ - off;
      const uintptr_t first = reinterpret_cast<uintptr_t>(block);
      if (first < reinterpret_cast<uintptr_t>(begin_) || first + 16 > reinterpret_cast<uintptr_t>(end_)) {
        // (a block shared with a neighbour: plain stores)
        const int64_t k = std::min<int64_t>(n, 16 - off);
        copy_plain<kZero>(at_, src, k);
        advance<kZero>(src, k, n);
        continue;
      }
      if (off == 0 && n >= 16) {  // whole blocks straight from the source
        const __m128i zero = _mm_setzero_si128();
        const int64_t blocks = std::min<int64_t>(n, end_ - at_) / 16;
        for (int64_t b = 0; b < blocks; ++b) {
          const __m128i v = kZero ? zero : _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16 * b));
          _mm_stream_si128(reinterpret_cast<__m128i*>(at_ + 16 * b), v);
        }
        advance<kZero>(src, 16 * blocks, n);
        continue;
      }
      // Part of an aligned block: gathered, stored once whole (the bytes before at_ in it
      // are held already: a block inside the range is entered at its first byte).
      const int64_t k = std::min<int64_t>(n, 16 - off);
      copy_plain<kZero>(held_ + off, src, k);
      advance<kZero>(src, k, n);
      if (off + k == 16) _mm_stream_si128(reinterpret_cast<__m128i*>(block), _mm_load_si128(reinterpret_cast<const __m128i*>(held_)));
    }
#else
    copy_plain<kZero>(at_, src, n);
    at_ += n;
#endif
  }

  template <bool kZero>
  static void copy_plain(uint8_t* dst, const uint8_t* src, int64_t k) {
    if (kZero) std::memset(dst, 0, (size_t)k);
    else std::memcpy(dst, src, (size_t)k);
  }
  template <bool kZero>
  void advance(const uint8_t*& src, int64_t k, int64_t& n) {
    at_ += k, n -= k;
    if (!kZero) src += k;
  }

  uint8_t* begin_;
  uint8_t* at_;  // where the next byte goes
  uint8_t* end_;
  alignas(16) uint8_t held_[16];
};

// Orders this thread's non-temporal stores before its later stores (the hand-over to the
// thread that starts the copy): every writer calls it once its rows are written.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace bbpe
