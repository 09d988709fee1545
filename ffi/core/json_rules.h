// The rules of one JSONL line as the corpus job reads it, for both executors: what json.loads
// accepts, decided byte by byte (whitespace, escapes, surrogate pairs, numbers, literals,
// nesting) and the walk over a line's top-level object that finds one string field
// (`parse_document`). Anything these rules cannot decide exactly as Python would makes the
// line "give up" (returns false); the caller's Python path then reads it and either accepts it
// or words its file:line error. The host reader (core/json_line.h) decodes strings with its
// SIMD runs and calls these functions for everything else; the device's block split
// (core/json_lines.h) calls them for all of it.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/bbpe_hd.h"
#include "core/utf8.h"

namespace bbpe {
namespace jsonl {

// Containers nested deeper than this, and numbers longer than this, make a line give up
// (Python takes deeper nesting up to its recursion limit, and refuses integers of thousands of
// digits: neither is worth deciding here).
constexpr int kMaxDepth = 64;
constexpr int kMaxNumberBytes = 100;

// JSON's whitespace (json.loads: around values and tokens).
BBPE_HD bool json_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Whether bytes.strip() leaves nothing of p..end (such a line is no document in JSONL).
BBPE_HD bool blank(const uint8_t* p, const uint8_t* end) {
  for (; p < end; ++p)
    if (!(json_space(*p) || *p == '\v' || *p == '\f')) return false;
  return true;
}

BBPE_HD const uint8_t* skip_space(const uint8_t* p, const uint8_t* end) {
  while (p < end && json_space(*p)) ++p;
  return p;
}

// Length of the valid UTF-8 sequence at p (strict, as Python's decoder: core/utf8.h), 0 when
// it is not one.
BBPE_HD int utf8_sequence(const uint8_t* p, const uint8_t* end) {
  uint32_t cp;
  return utf8_decode(p, end - p < 4 ? (int)(end - p) : 4, nullptr, 0, &cp);
}

// Eight bytes at a time (SWAR): whether any of them is a control byte (< 0x20), '"' or '\\'
// (bytes >= 0x80 do not count: `& ~v` drops their high bit; kHighs finds those).
constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
BBPE_HD bool has_zero_byte(uint64_t v) { return ((v - kOnes) & ~v & kHighs) != 0; }
BBPE_HD bool any_stop(uint64_t v) {
  return ((v - kOnes * 0x20) & ~v & kHighs) || has_zero_byte(v ^ (kOnes * '"')) ||
         has_zero_byte(v ^ (kOnes * '\\'));
}

// The eight bytes at p where p is 8-byte aligned (the GPU has no unaligned 8-byte loads).
BBPE_HD uint64_t load8_aligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint64_t*>(p);
#else
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
#endif
}

// Whether the eight bytes at p are plain ASCII a string holds as they are (a step of eight
// in decode_string and in a plain line's UTF-8 check, where p is aligned and eight are left).
BBPE_HD bool plain_ascii8(const uint8_t* p, const uint8_t* end, bool json) {
  if ((reinterpret_cast<uintptr_t>(p) & 7) != 0 || end - p < 8) return false;
  const uint64_t v = load8_aligned(p);
  return !(v & kHighs) && !(json && any_stop(v));
}

// Four hex digits at p as a number, or -1.
BBPE_HD int hex4(const uint8_t* p, const uint8_t* end) {
  if (end - p < 4) return -1;
  int v = 0;
  for (int i = 0; i < 4; ++i) {
    const uint8_t c = p[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// What a string's escape stands for: p is just past its backslash. Writes its bytes at w (at
// most as many as the escape is long: a string never decodes longer than it is written) and
// returns how many, or -1 where it is not an escape json.loads takes. A \u escape of a high
// surrogate followed by one of a low surrogate is their code point; a surrogate that is not
// one of such a pair is a lone one: `lone` set, three placeholder bytes written (a string that
// holds one matches no field and is not UTF-8: the field's string gives up). `p` moved past it.
BBPE_HD int decode_escape(const uint8_t*& p, const uint8_t* end, uint8_t* w, bool& lone) {
  if (p >= end) return -1;
  const uint8_t e = *p++;
  switch (e) {
    case '"': case '\\': case '/': w[0] = e; return 1;
    case 'b': w[0] = '\b'; return 1;
    case 'f': w[0] = '\f'; return 1;
    case 'n': w[0] = '\n'; return 1;
    case 'r': w[0] = '\r'; return 1;
    case 't': w[0] = '\t'; return 1;
    case 'u': break;
    default: return -1;
  }
  int cp = hex4(p, end);
  if (cp < 0) return -1;
  p += 4;
  if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
    const int low = hex4(p + 2, end);
    if (low >= 0xDC00 && low <= 0xDFFF) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      p += 6;
    }
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) {
    lone = true;
    w[0] = w[1] = w[2] = 0xFF;
    return 3;
  }
  const int len = utf8_length((uint32_t)cp);
  for (int k = 0; k < len; ++k) w[k] = utf8_byte((uint32_t)cp, len, k);
  return len;
}

// The string at p (just past its opening quote) decoded a byte at a time into `sink`
// (sink.put(bytes, n)): plain bytes as they are, non-ASCII ones where they are valid UTF-8,
// escapes as decode_escape reads them; no raw control bytes. p moved past its closing quote.
// `piece`: p..end is a piece of a string's bytes cut where no escape runs across; all of it is
// decoded and a quote gives up. The host decodes the same strings with SIMD runs
// (core/json_line.h, LineParser::string); this is the device's (and the host's piece-free
// reference for the same rules).
template <typename Sink>
BBPE_HD bool decode_string(const uint8_t*& p, const uint8_t* end, Sink& sink, bool& lone, bool piece = false) {
  lone = false;
  while (true) {
    if (plain_ascii8(p, end, true)) {  // (a GPU thread reads a long line alone: eight a step)
      sink.put(p, 8);
      p += 8;
      continue;
    }
    if (p >= end) return piece;
    const uint8_t c = *p;
    if (c == '"') {
      if (piece) return false;
      ++p;
      return true;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
      ++p;
      uint8_t bytes[4];
      const int n = decode_escape(p, end, bytes, lone);
      if (n < 0) return false;
      sink.put(bytes, n);
    } else if (c >= 0x80) {
      const int n = utf8_sequence(p, end);
      if (n == 0) return false;
      sink.put(p, n);
      p += n;
    } else {
      sink.put(p, 1);
      ++p;
    }
  }
}

// Just past the string at p (just after its opening quote) without decoding it: its closing
// quote is the first one no backslash escapes (a backslash takes the byte after it); null
// where there is none. Its bytes are checked when they are decoded (in pieces: core/json_lines.h).
BBPE_HD const uint8_t* string_end(const uint8_t* p, const uint8_t* end) {
  while (p < end) {
    if ((reinterpret_cast<uintptr_t>(p) & 7) == 0 && end - p >= 8) {
      const uint64_t v = load8_aligned(p);
      if (!has_zero_byte(v ^ (kOnes * '"')) && !has_zero_byte(v ^ (kOnes * '\\'))) {
        p += 8;
        continue;
      }
    }
    if (*p == '\\') p += 2;
    else if (*p++ == '"') return p;
  }
  return nullptr;
}

// Where a piece of a long string's (or plain line's) bytes may start, so that its pieces can
// be checked and decoded apart: not inside a UTF-8 sequence (each piece is then valid exactly
// where the whole is) and, in a JSON string, no escape or surrogate pair running across (no
// backslash in the 12 bytes before it).
BBPE_HD bool piece_start(const uint8_t* begin, const uint8_t* at, bool json) {
  if ((*at & 0xC0) == 0x80) return false;
  for (int64_t d = 1; json && d <= 12 && at - begin >= d; ++d)
    if (at[-d] == '\\') return false;
  return true;
}

BBPE_HD bool literal(const uint8_t*& p, const uint8_t* end, const char* word) {
  const uint8_t* q = p;
  for (; *word; ++word, ++q)
    if (q >= end || *q != (uint8_t)*word) return false;
  p = q;
  return true;
}

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?, or Python's NaN / Infinity / -Infinity; p < end.
BBPE_HD bool number(const uint8_t*& p, const uint8_t* end) {
  const uint8_t* start = p;
  if (*p == '-') ++p;
  if (p < end && *p == 'I') return literal(p, end, "Infinity");
  if (p < end && *p == '0') {
    ++p;
  } else {
    if (!(p < end && *p >= '1' && *p <= '9')) return false;
    while (p < end && *p >= '0' && *p <= '9') ++p;
  }
  if (p < end && *p == '.') {
    const uint8_t* d = ++p;
    while (p < end && *p >= '0' && *p <= '9') ++p;
    if (p == d) return false;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    if (p < end && (*p == '+' || *p == '-')) ++p;
    const uint8_t* d = p;
    while (p < end && *p >= '0' && *p <= '9') ++p;
    if (p == d) return false;
  }
  return p - start <= kMaxNumberBytes;
}

// An object member's key and its colon skipped (p at the key's opening quote, then at the
// member's value), the key read by strings.skip; false when there is no such key.
template <typename Strings>
BBPE_HD bool skip_key(const uint8_t*& p, const uint8_t* end, Strings& strings) {
  if (p >= end || *p != '"') return false;
  ++p;
  if (!strings.skip(p, end)) return false;
  p = skip_space(p, end);
  if (p >= end || *p != ':') return false;
  p = skip_space(p + 1, end);
  return true;
}

// The value at p (a member's: nesting depth 1) skipped, its strings read by
// strings.skip(p, end) (p just past the opening quote), without recursion: the open
// containers' kinds are bits of one word (1: an object), so a line's nesting costs no stack.
template <typename Strings>
BBPE_HD bool skip_value(const uint8_t*& p, const uint8_t* end, Strings& strings) {
  uint64_t objects = 0;  // bit d: whether the container open at depth d + 1 is an object
  int open = 0;          // containers open
  while (true) {
    // a value at depth open + 1
    if (p >= end || open + 1 > kMaxDepth) return false;
    switch (*p) {
      case '"': ++p; if (!strings.skip(p, end)) return false; break;
      case '{': case '[': {
        const bool object = *p == '{';
        p = skip_space(p + 1, end);
        if (p < end && *p == (object ? '}' : ']')) { ++p; break; }  // (empty: a whole value)
        objects = (objects & ~(uint64_t(1) << open)) | (uint64_t(object) << open);
        ++open;
        if (object && !skip_key(p, end, strings)) return false;  // its first key
        continue;  // its first value
      }
      case 't': if (!literal(p, end, "true")) return false; break;
      case 'f': if (!literal(p, end, "false")) return false; break;
      case 'n': if (!literal(p, end, "null")) return false; break;
      case 'N': if (!literal(p, end, "NaN")) return false; break;
      default: if (!number(p, end)) return false;
    }
    // A value ended: close the containers it completes, or go on to the next value of one.
    while (true) {
      if (open == 0) return true;
      const bool object = (objects >> (open - 1)) & 1;
      p = skip_space(p, end);
      if (p < end && *p == ',') {
        p = skip_space(p + 1, end);
        if (object && !skip_key(p, end, strings)) return false;
        break;  // the next value
      }
      if (p < end && *p == (object ? '}' : ']')) {
        ++p;
        --open;
        continue;
      }
      return false;
    }
  }
}

// A line's top-level object walked to find `field`'s string, the last occurrence winning (as
// in a dict). `strings` reads the strings as it goes, p just past the opening quote each time:
//   key(p, end, ours): a key, `ours` set where it is the field's name (and holds no lone
//     surrogate);
//   field(p, end): the field's string (a later occurrence replaces an earlier one's);
//   skip(p, end): any other string, checked as json.loads would.
// Each returns false to give up. True where the line is one object holding the field as a
// string, with only whitespace around it.
template <typename Strings>
BBPE_HD bool parse_document(const uint8_t* p, const uint8_t* end, Strings& strings) {
  p = skip_space(p, end);
  if (p >= end || *p != '{') return false;
  p = skip_space(p + 1, end);
  if (p < end && *p == '}') return false;  // no field
  bool found = false;
  while (true) {
    if (p >= end || *p != '"') return false;
    ++p;
    bool ours = false;
    if (!strings.key(p, end, ours)) return false;
    p = skip_space(p, end);
    if (p >= end || *p != ':') return false;
    p = skip_space(p + 1, end);
    if (ours) {
      found = p < end && *p == '"';
      if (found) {
        ++p;
        if (!strings.field(p, end)) return false;
      } else if (!skip_value(p, end, strings)) {
        return false;
      }
    } else if (!skip_value(p, end, strings)) {
      return false;
    }
    p = skip_space(p, end);
    if (p < end && *p == ',') { p = skip_space(p + 1, end); continue; }
    if (p < end && *p == '}') { ++p; break; }
    return false;
  }
  return found && skip_space(p, end) == end;
}

}  // namespace jsonl
}  // namespace bbpe
