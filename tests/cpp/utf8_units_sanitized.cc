// core/utf8_units.h (the packers' UTF-8 from a str's code units; core/utf8_ssse3.h's and
// core/utf8_avx512.h's writers where the CPU has them) under AddressSanitizer and
// UndefinedBehaviorSanitizer: random strings of 1-, 2- and 4-byte units (runs of ASCII and of
// each wider range, surrogates among the 16-bit and 32-bit ones), every length from 0 to 70
// and some long ones, each in memory of its exact size and written into memory of exactly its
// UTF-8 length (a read or write past either fails here), against an encoder written out here;
// the same texts as padded rows (StringView::write_row), plainly and with the non-temporal
// stores of core/stream_stores.h, at every alignment, and StreamWriter on its own.
// Prints the strings checked; exit 0 when all agree.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/text_view.h"

namespace {

// A code point's UTF-8, bit by bit (not utf8_byte's code).
void encode(uint32_t c, std::vector<uint8_t>& out) {
  if (c < 0x80) {
    out.push_back((uint8_t)c);
  } else if (c < 0x800) {
    out.push_back((uint8_t)(0xC0 | (c >> 6)));
    out.push_back((uint8_t)(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back((uint8_t)(0xE0 | (c >> 12)));
    out.push_back((uint8_t)(0x80 | ((c >> 6) & 0x3F)));
    out.push_back((uint8_t)(0x80 | (c & 0x3F)));
  } else {
    out.push_back((uint8_t)(0xF0 | (c >> 18)));
    out.push_back((uint8_t)(0x80 | ((c >> 12) & 0x3F)));
    out.push_back((uint8_t)(0x80 | ((c >> 6) & 0x3F)));
    out.push_back((uint8_t)(0x80 | (c & 0x3F)));
  }
}

template <class Unit>
uint32_t draw(std::mt19937_64& rng, int kind) {
  const uint32_t top = sizeof(Unit) == 1 ? 0xFF : sizeof(Unit) == 2 ? 0xFFFF : 0x10FFFF;
  switch (kind) {
    case 0: return (uint32_t)(rng() % 0x80);                            // ASCII
    case 1: return 0x80 + (uint32_t)(rng() % 0x80);                     // Latin-1's upper half
    case 2: return sizeof(Unit) > 1 ? 0x100 + (uint32_t)(rng() % 0x700) : 0x41;  // two bytes
    case 3: return sizeof(Unit) > 1 ? 0xD800 + (uint32_t)(rng() % 0x800) : 0x42;  // surrogates
    default: return (uint32_t)(rng() % (top + 1));
  }
}

template <class Unit>
int check(std::mt19937_64& rng, int64_t n, bool surrogates) {
  std::unique_ptr<Unit[]> units(new Unit[n > 0 ? n : 1]);
  int mostly = (int)(rng() % 4);  // (long runs of one kind: ASCII, or wider ones, or any)
  if (mostly == 3) mostly = 4;
  for (int64_t i = 0; i < n; ++i) {
    int kind = rng() % 4 ? mostly : (int)(rng() % 5);
    if (kind == 3 && !surrogates) kind = 4;
    uint32_t c = draw<Unit>(rng, kind);
    if (!surrogates && c >= 0xD800 && c < 0xE000) c = 0x41;
    units[i] = (Unit)c;
  }
  std::vector<uint8_t> want;
  bool has_surrogate = false;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t c = units[i];
    has_surrogate |= c >= 0xD800 && c < 0xE000;
    encode(c, want);
  }
  const int64_t bytes = bbpe::utf8_bytes(units.get(), n);
#if defined(BBPE_UTF8_AVX512)
  if constexpr (sizeof(Unit) == 2) {  // (the 32-unit count, where this CPU has AVX-512)
    if (bbpe::has_avx512_utf8() && bbpe::utf8_bytes_ucs2_avx512(units.get(), n) != bytes)
      return std::printf("2-byte units, n=%lld: the AVX-512 count differs\n", (long long)n), 1;
  }
#endif
  if (has_surrogate) {
    if (bytes != -1) return std::printf("%zu-byte units, n=%lld: a surrogate, counted %lld\n", sizeof(Unit), (long long)n, (long long)bytes), 1;
    return 0;
  }
  if (bytes != (int64_t)want.size())
    return std::printf("%zu-byte units, n=%lld: %lld bytes, want %zu\n", sizeof(Unit), (long long)n, (long long)bytes, want.size()), 1;
  std::unique_ptr<uint8_t[]> out(new uint8_t[bytes > 0 ? bytes : 1]);
  if (bbpe::write_utf8(units.get(), n, out.get()) != out.get() + bytes)
    return std::printf("%zu-byte units, n=%lld: write_utf8's end is not the form's\n", sizeof(Unit), (long long)n), 1;
  for (int64_t i = 0; i < bytes; ++i)
    if (out[i] != want[i]) return std::printf("%zu-byte units, n=%lld: byte %lld differs\n", sizeof(Unit), (long long)n, (long long)i), 1;
  std::unique_ptr<uint8_t[]> out_runs(new uint8_t[bytes > 0 ? bytes : 1]);  // (the other loop: runs of wide characters)
  if (bbpe::write_utf8<true>(units.get(), n, out_runs.get()) != out_runs.get() + bytes ||
      (bytes && std::memcmp(out_runs.get(), want.data(), (size_t)bytes) != 0))
    return std::printf("%zu-byte units, n=%lld: write_utf8<true> differs\n", sizeof(Unit), (long long)n), 1;
#if defined(BBPE_UTF8_SSSE3)
  if constexpr (sizeof(Unit) <= 2) {  // (the eight-unit steps, where this CPU has SSSE3)
    if (bbpe::has_ssse3()) {
      std::unique_ptr<uint8_t[]> out_simd(new uint8_t[bytes > 0 ? bytes : 1]);
      uint8_t* end;
      if constexpr (sizeof(Unit) == 1) end = bbpe::write_utf8_latin1_ssse3(units.get(), n, out_simd.get());
      else end = bbpe::write_utf8_ucs2_ssse3(units.get(), n, out_simd.get());
      if (end != out_simd.get() + bytes || (bytes && std::memcmp(out_simd.get(), want.data(), (size_t)bytes) != 0))
        return std::printf("%zu-byte units, n=%lld: the SSSE3 writer differs\n", sizeof(Unit), (long long)n), 1;
    }
  }
#endif
#if defined(BBPE_UTF8_AVX512)
  if constexpr (sizeof(Unit) == 2) {  // (the 32-unit steps, where this CPU has AVX-512)
    if (bbpe::has_avx512_utf8()) {
      std::unique_ptr<uint8_t[]> out_simd(new uint8_t[bytes > 0 ? bytes : 1]);
      uint8_t* end = bbpe::write_utf8_ucs2_avx512(units.get(), n, out_simd.get());
      if (end != out_simd.get() + bytes || (bytes && std::memcmp(out_simd.get(), want.data(), (size_t)bytes) != 0))
        return std::printf("2-byte units, n=%lld: the AVX-512 writer differs\n", (long long)n), 1;
    }
  }
#endif
  // The same text as a padded row, plainly and with non-temporal stores, at every alignment
  // of the row's start, in a row a few bytes wider (or much wider) than the text: the text,
  // then zeros, and the canary bytes on either side untouched.
  const bbpe::StringView view{units.get(), n, bytes, (int)sizeof(Unit)};
  for (const int64_t width : {bytes, bytes + 1 + (int64_t)(rng() % 40), bytes + 100 + (int64_t)(rng() % 200)}) {
    for (int streaming = 0; streaming < 2; ++streaming) {
      for (int off = 0; off < 16; ++off) {
        std::unique_ptr<uint8_t[]> room(new uint8_t[off + width + 16]);
        std::memset(room.get(), 0xAA, (size_t)(off + width + 16));
        view.write_row(room.get() + off, width, streaming != 0);
        bbpe::stream_fence();
        for (int64_t i = 0; i < off + width + 16; ++i) {
          const int64_t at = i - off;
          const uint8_t expect = at < 0 || at >= width ? 0xAA : at < bytes ? want[at] : 0;
          if (room[i] != expect)
            return std::printf("%zu-byte units, n=%lld: row of width %lld at offset %d (streaming %d): byte %lld is %d, want %d\n",
                               sizeof(Unit), (long long)n, (long long)width, off, streaming, (long long)at, room[i], expect), 1;
        }
      }
    }
  }
  return 0;
}

// StreamWriter on its own: a range of every length 0..100 at every alignment, filled by puts
// of random sizes (0 to 40 bytes) then zeros; the bytes put, the zeros after, and the canary
// bytes on either side untouched.
int check_stream_writer(std::mt19937_64& rng, long& checked) {
  int bad = 0;
  for (int64_t size = 0; size <= 100; ++size) {
    for (int off = 0; off < 16; ++off, ++checked) {
      std::vector<uint8_t> src((size_t)size + 1);
      for (auto& b : src) b = (uint8_t)(1 + rng() % 255);
      const int64_t filled = (int64_t)(rng() % (size + 1));  // then zeros
      std::unique_ptr<uint8_t[]> room(new uint8_t[off + size + 16]);
      std::memset(room.get(), 0xAA, (size_t)(off + size + 16));
      bbpe::StreamWriter out(room.get() + off, room.get() + off + size);
      for (int64_t at = 0; at < filled;) {
        const int64_t k = std::min<int64_t>(filled - at, (int64_t)(rng() % 41));
        out.put(src.data() + at, k);
        at += k;
      }
      out.zeros();
      bbpe::stream_fence();
      if (out.left() != 0) bad += std::printf("StreamWriter: %lld bytes left after zeros\n", (long long)out.left()) > 0;
      for (int64_t i = 0; i < off + size + 16; ++i) {
        const int64_t at = i - off;
        const uint8_t expect = at < 0 || at >= size ? 0xAA : at < filled ? src[at] : 0;
        if (room[i] != expect) {
          bad += std::printf("StreamWriter: size %lld at offset %d, %lld put: byte %lld is %d, want %d\n", (long long)size,
                             off, (long long)filled, (long long)at, room[i], expect) > 0;
          break;
        }
      }
    }
  }
  return bad;
}

template <class Unit>
int check_all(std::mt19937_64& rng, long& checked) {
  int bad = 0;
  for (int rep = 0; rep < 40; ++rep)
    for (int64_t n = 0; n <= 70; ++n, ++checked) bad += check<Unit>(rng, n, rep % 4 == 3);
  for (int64_t n : {1000, 4096, 4097, 65536 + 13}) bad += check<Unit>(rng, n, false), ++checked;
  for (int rep = 0; rep < 200; ++rep, ++checked) bad += check<Unit>(rng, 32 + (int64_t)(rng() % 200), false);
  return bad;
}

}  // namespace

int main() {
  std::mt19937_64 rng(17);
  long checked = 0;
  const int bad = check_all<uint8_t>(rng, checked) + check_all<uint16_t>(rng, checked) + check_all<uint32_t>(rng, checked) +
                  check_stream_writer(rng, checked);
  std::printf("%ld strings, %d differ\n", checked, bad);
  return bad ? 1 : 0;
}
