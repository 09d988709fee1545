// One JSONL line parsed on the host as json.loads would take one string field from it (the
// rules, shared with the device: core/json_rules.h), the host's byte-level helpers of that
// parse (UTF-8 validation and a string's plain runs, sixteen bytes at a time with SSE2, else
// eight; 64 with AVX-512: core/json_simd.h) and the buffer it decodes into.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/json_rules.h"
#include "core/json_simd.h"
#include "core/utf8.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace bbpe {
namespace jsonl {

// Eight bytes at p, wherever they are (the SWAR tests on them: core/json_rules.h, any_stop).
inline uint64_t load8(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Past the bytes at p that a JSON string holds as they are: all but control bytes, '"' and
// '\\', eight bytes at a time; `took_non_ascii` set where any is >= 0x80 (for the caller to
// check as UTF-8).
inline const uint8_t* plain_run(const uint8_t* p, const uint8_t* end, bool& took_non_ascii) {
  uint64_t high = 0;
  for (; end - p >= 8; p += 8) {
    const uint64_t v = load8(p);
    if (any_stop(v)) break;
    high |= v;
  }
  for (; p < end && *p >= 0x20 && *p != '"' && *p != '\\'; ++p) high |= *p;
  took_non_ascii |= (high & kHighs) != 0;
  return p;
}


// Those bytes copied to w as they are found, non-ASCII ones too (`took_non_ascii` set: the
// caller checks them as UTF-8, in bulk): with AVX-512 by copy_plain_512 (which also decodes the
// simple escapes), elsewhere sixteen at a time where SSE2 is (a signed compare with 0x20 finds
// control bytes and bytes >= 0x80, the latter taken back out by their high bits; each sixteen
// are stored before they are checked, so w must have room for all the bytes left at p), and the
// rest by plain_run. Where the run ends (at an ASCII byte for the caller, or at `end`); w moved
// past its copy.
inline const uint8_t* copy_plain(const uint8_t* p, const uint8_t* end, char*& w, bool& took_non_ascii) {
#if BBPE_JSON_AVX512
  if (use_avx512_vbmi2()) return copy_plain_512(p, end, w, took_non_ascii);
#endif
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
  for (; end - p >= 16; p += 16, w += 16) {
    const __m128i v = _mm_loadu_si128((const __m128i*)p);
    _mm_storeu_si128((__m128i*)w, v);
    const int high = _mm_movemask_epi8(v);
    const int stop = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash))) |
                     (_mm_movemask_epi8(_mm_cmplt_epi8(v, space)) & ~high);
    if (stop) {
      const int n = __builtin_ctz((unsigned)stop);
      took_non_ascii |= (high & ((1 << n) - 1)) != 0;
      w += n;
      return p + n;
    }
    took_non_ascii |= high != 0;
  }
#endif
  const uint8_t* run_end = plain_run(p, end, took_non_ascii);
  if (run_end > p) std::memcpy(w, p, run_end - p);  // (w may be null where nothing is left)
  w += run_end - p;
  return run_end;
}

// A growable byte buffer whose room is not filled in (a std::string's resize writes every byte
// it adds): the parse decodes into it through a pointer.
class ByteBuffer {
 public:
  const char* data() const { return bytes_.get(); }
  size_t size() const { return size_; }
  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  // At least n writable bytes after the contents; commit(k) then adds the first k of them.
  char* room(size_t n) {
    if (capacity_ - size_ < n) grow(std::max(size_ + n, 2 * capacity_));
    return bytes_.get() + size_;
  }
  void commit(size_t k) { size_ += k; }
  void resize_down(size_t n) { size_ = std::min(size_, n); }
  void append(const char* p, size_t n) {
    if (n) std::memcpy(room(n), p, n);
    size_ += n;
  }
  void append(const std::string& s) { append(s.data(), s.size()); }
  bool equals(const std::string& s) const {
    return size_ == s.size() && (size_ == 0 || std::memcmp(data(), s.data(), size_) == 0);
  }

 private:
  void grow(size_t capacity) {
    std::unique_ptr<char[]> bigger(new char[capacity]);
    if (size_) std::memcpy(bigger.get(), bytes_.get(), size_);
    bytes_ = std::move(bigger);
    capacity_ = capacity;
  }
  std::unique_ptr<char[]> bytes_;
  size_t size_ = 0, capacity_ = 0;
};

inline bool valid_utf8(const uint8_t* p, const uint8_t* end) {
#if BBPE_JSON_AVX512
  if (use_avx512_vbmi2()) return valid_utf8_512(p, end);  // (under 64 bytes: one masked step)
#endif
  while (p < end) {
#if defined(__SSE2__)
    if (end - p >= 16 && !_mm_movemask_epi8(_mm_loadu_si128((const __m128i*)p))) { p += 16; continue; }
#endif
    if (end - p >= 8 && !(load8(p) & kHighs)) { p += 8; continue; }
    if (*p < 0x80) { ++p; continue; }
    const int n = utf8_sequence(p, end);
    if (!n) return false;
    p += n;
  }
  return true;
}

// A JSON line parsed just far enough to take one field; every method returns false to give up.
struct LineParser {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& field;
  ByteBuffer& out;     // the document is appended here
  ByteBuffer scratch;  // keys and skipped strings
  bool lone = false;   // the last decoded string held a lone surrogate

  // The string at p (just after its opening quote) appended to `dst`, unescaped as
  // json.loads does (strict: no raw control characters); a lone surrogate sets `lone`.
  // `piece`: p..end is a piece of a string's bytes, cut where no escape runs across
  // (split_block): true when all of it is decoded, false at a quote.
  bool string(ByteBuffer& dst, bool piece = false) {
    lone = false;
    // Decoded straight into room for the rest of the input: no escape decodes longer than it
    // is written, so the text never outruns its bytes (an append per run and per escape, at
    // about one escape per 64 bytes of text, cost more than the copying itself).
    char* const first = dst.room(end - p);
    char* w = first;
    auto finish = [&](bool ok) {
      dst.commit(w - first);
      return ok;
    };
    while (true) {
      const uint8_t* run = p;
      bool non_ascii = false;
      p = copy_plain(p, end, w, non_ascii);
      // (its non-ASCII bytes taken as they are: UTF-8 where they stand, or the line is not;
      // [run, p) starts and ends at ASCII or the input's end, so no sequence is cut)
      if (non_ascii && !valid_utf8(run, p)) return finish(false);
      if (p >= end) return finish(piece);
      if (*p < 0x20 || (*p == '"' && piece)) return finish(false);
      if (*p == '"') { ++p; return finish(true); }
      ++p;  // past the backslash
      const int n = decode_escape(p, end, reinterpret_cast<uint8_t*>(w), lone);
      if (n < 0) return finish(false);
      w += n;
    }
  }

  // Past the string at p (just after its opening quote) without decoding it (core/json_rules.h,
  // string_end: its first quote no backslash escapes). Its bytes are checked when its pieces
  // are decoded.
  bool skip_string() {
    const uint8_t* after = string_end(p, end);
    p = after ? after : end;
    return after != nullptr;
  }

  // parse_document's string readers (core/json_rules.h): each string decoded from `at` by
  // string() above.
  bool key(const uint8_t*& at, const uint8_t* /*end*/, bool& ours) {
    p = at;
    scratch.clear();
    const bool ok = string(scratch);
    at = p;
    ours = ok && !lone && scratch.equals(field);
    return ok;
  }
  bool skip(const uint8_t*& at, const uint8_t* /*end*/) {
    p = at;
    scratch.clear();
    const bool ok = string(scratch);
    at = p;
    return ok;
  }
  bool field_string(const uint8_t*& at) {
    p = at;
    out.resize_down(base_);  // (a later occurrence replaces an earlier one)
    bool ok;
    if (defer_) {
      raw_begin = at;
      ok = skip_string();
      raw_end = p - 1;
    } else {
      ok = string(out) && !lone;
    }
    at = p;
    return ok;
  }

  // The top-level object (core/json_rules.h, parse_document), the field's string appended to
  // `out`. With `defer`, the field's string is not decoded: its bytes (between the quotes) are
  // left in raw_begin/raw_end.
  const uint8_t* raw_begin = nullptr;
  const uint8_t* raw_end = nullptr;
  bool document(bool defer = false) {
    base_ = out.size();
    defer_ = defer;
    Strings strings{*this};
    return parse_document(p, end, strings);
  }

  // parse_document's view of the parser (its `field` is the field's string, not its name).
  struct Strings {
    LineParser& parser;
    bool key(const uint8_t*& at, const uint8_t* e, bool& ours) { return parser.key(at, e, ours); }
    bool skip(const uint8_t*& at, const uint8_t* e) { return parser.skip(at, e); }
    bool field(const uint8_t*& at, const uint8_t* /*end*/) { return parser.field_string(at); }
  };
  size_t base_ = 0;     // where document() began appending to `out`
  bool defer_ = false;  // document(defer)
};

}  // namespace jsonl
}  // namespace bbpe
