// The corpus job's packing of short documents into shared rows (blockbpe_jax/corpus/engine.py): a window's
// documents joined with a separator after each one (the bytes of a special token), and runs
// of consecutive documents cut into rows of at most `width` bytes. A row is one contiguous range
// of the joined bytes, so an encode call gathers it like a single document; the separator,
// matched as an allowed special token, splits the text there before pre-tokenizing, so the
// row's ids are each document's ids followed by the separator's id, in order. A document
// longer than width - |sep|, or one whose bytes contain the separator, is not packed: it is
// encoded alone (and its separator never read).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/host_threads.h"

namespace bbpe {

// Whether p[0, n) holds sep. Where SSE2 is, sixteen starts at a time are checked for the
// separator's first two bytes together, where a memchr for its first byte alone stops at every
// '<' of "<|endoftext|>" (pack_documents over a 32 MiB window of the mixed corpus: 1.55 -> 1.35
// ms on this project's 2-core CPU box).
inline bool contains(const uint8_t* p, int64_t n, const uint8_t* sep, int64_t sep_len) {
  if (n < sep_len) return false;
  const uint8_t* at = p;
  const uint8_t* last = p + n - sep_len;  // the last place it may start
#if defined(__SSE2__)
  if (sep_len >= 2) {
    const __m128i first = _mm_set1_epi8((char)sep[0]), second = _mm_set1_epi8((char)sep[1]);
    for (; last - at >= 15; at += 16) {  // (reads at[0, 17): at + 16 <= last + 1 < p + n)
      const __m128i a = _mm_loadu_si128((const __m128i*)at), b = _mm_loadu_si128((const __m128i*)(at + 1));
      for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, second)));
           m; m &= m - 1)
        if (std::memcmp(at + __builtin_ctz(m), sep, (size_t)sep_len) == 0) return true;
    }
  }
#endif
  for (; at <= last; ++at) {  // (the rest, or all of it without SSE2)
    at = (const uint8_t*)std::memchr(at, sep[0], (size_t)(last - at + 1));
    if (!at) return false;
    if (std::memcmp(at, sep, (size_t)sep_len) == 0) return true;
  }
  return false;
}

// Writes document d to out[offsets[d] - offsets[0] + d * sep_len], its separator after it;
// row_of_doc[d] = its row, or -1 when it is not packed; rows_out[2 * r] = row r's first byte in
// out, rows_out[2 * r + 1] its length. Returns the number of rows. `out` holds at least
// offsets[docs] - offsets[0] + docs * sep_len bytes; rows_out room for 2 * docs.
// joined: `data` already holds each document followed by its separator (the corpus reader joins
// them so, straight into the window's buffer): document d is data[offsets[d], offsets[d + 1] -
// sep_len), nothing is copied (out unused) and rows_out's bytes are data's from offsets[0]. Then
// every separator must be in place: returns -1 - d for the first document d without one.
inline int64_t pack_documents(const uint8_t* data, const int64_t* offsets, int64_t docs, const uint8_t* sep,
                              int64_t sep_len, int64_t width, uint8_t* out, int32_t* row_of_doc,
                              int32_t* rows_out, bool joined = false) {
  const int64_t total = offsets[docs] - offsets[0];
  const int64_t gap = joined ? 0 : sep_len;  // bytes added after each document
  const auto start = [&](int64_t d) { return offsets[d] - offsets[0] + d * gap; };
  const auto length = [&](int64_t d) { return offsets[d + 1] - offsets[d] - (sep_len - gap); };
  // A document that holds the separator would be cut there: -2 marks it, for the pass below
  // (-3: joined, and its separator is missing).
  over_ranges(docs, total, (int64_t)1 << 20, [&](int64_t lo, int64_t hi) {
    for (int64_t d = lo; d < hi; ++d) {
      const int64_t n = length(d);
      if (joined && (n < 0 || std::memcmp(data + offsets[d] + n, sep, (size_t)sep_len) != 0)) {
        row_of_doc[d] = -3;
        continue;
      }
      row_of_doc[d] = n + sep_len <= width && !contains(data + offsets[d], n, sep, sep_len) ? 0 : -2;
    }
  });
  if (!joined) {
    // The joined bytes, copied in equal ranges of the output (not of the documents: one long
    // document would be one thread's copy).
    const int64_t joined_bytes = total + docs * sep_len;
    over_ranges(joined_bytes, joined_bytes, (int64_t)1 << 20, [&](int64_t lo, int64_t hi) {
      int64_t d = 0, last = docs - 1;  // the document whose bytes or separator hold lo
      while (d < last) {
        const int64_t mid = (d + last + 1) / 2;
        if (start(mid) <= lo) d = mid; else last = mid - 1;
      }
      for (; d < docs && start(d) < hi; ++d) {  // the part of [lo, hi) in its bytes, then in its separator
        const int64_t begin = start(d), text_end = begin + length(d);
        const int64_t a = std::max(lo, begin), b = std::min(hi, text_end + sep_len);
        if (a < text_end) std::memcpy(out + a, data + offsets[d] + (a - begin), (size_t)(std::min(b, text_end) - a));
        const int64_t at_sep = std::max(a, text_end);
        if (at_sep < b) std::memcpy(out + at_sep, sep + (at_sep - text_end), (size_t)(b - at_sep));
      }
    });
  }
  int64_t rows = 0, used = 0;  // used: bytes in the open row (0: none open)
  for (int64_t d = 0; d < docs; ++d) {
    const int64_t n = length(d) + sep_len;
    if (row_of_doc[d] == -3) return -1 - d;
    if (row_of_doc[d] == -2) {
      row_of_doc[d] = -1;
      used = 0;  // (a row is contiguous: it cannot reach over a document encoded alone)
      continue;
    }
    if (used && used + n > width) used = 0;
    if (!used) {
      rows_out[2 * rows] = (int32_t)start(d);
      rows_out[2 * rows + 1] = 0;
      ++rows;
    }
    used += n;
    rows_out[2 * (rows - 1) + 1] += (int32_t)n;
    row_of_doc[d] = (int32_t)(rows - 1);
  }
  return rows;
}

}  // namespace bbpe
