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

// The sixteen bytes at p where p is 16-byte aligned, as two words (memory order).
BBPE_HD void load16_aligned(const uint8_t* p, uint64_t& lo, uint64_t& hi) {
#if defined(__CUDA_ARCH__)
  const ulonglong2 v = *reinterpret_cast<const ulonglong2*>(p);
  lo = v.x;
  hi = v.y;
#else
  std::memcpy(&lo, p, 8);
  std::memcpy(&hi, p + 8, 8);
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

// -- A string's end, found by slices scanned apart ----------------------------------------------
//
// A string ends at its first quote that no backslash escapes. A backslash escapes the byte after
// it unless it is escaped itself, so whether a byte is escaped depends on the run of
// backslashes before it, which may begin in an earlier slice of the string. Each slice of
// kSliceBytes is therefore summarized for both ways it may begin (its first byte escaped by the
// slice before, or not): where its first unescaped quote is, and whether the byte after it is
// escaped (simdjson's escape scan of a 64-byte word). The states are then carried from slice
// to slice: one after the other here (string_end), across a GPU warp's lanes by a scan of the
// slices' maps in cuda/jsonl_split.cuh.
constexpr int kSliceBytes = 64;  // (one bit a byte in a 64-bit mask)
constexpr int kSliceAlign = 16;  // the first slice starts at a 16-byte boundary (whole 16-byte loads)

// Bit k set where byte k of the eight bytes v (in memory order) is c.
BBPE_HD uint32_t byte_bits(uint64_t v, uint8_t c) {
  const uint64_t t = v ^ (kOnes * c);
  const uint64_t zero = ~(((t & ~kHighs) + ~kHighs) | t) & kHighs;  // (a zero byte's high bit, exactly)
  return (uint32_t)(((zero >> 7) * 0x0102040810204080ull) >> 56);    // (the eight high bits gathered)
}

// The bytes a backslash escapes among 64 whose backslashes are the bits of `backslashes`:
// `escaped` says on entry whether byte 0 is escaped (by a backslash before them), on return
// whether the byte after them is. (simdjson: a run of backslashes starting at an even bit is
// told from one starting at an odd bit by a subtraction's carries.)
BBPE_HD uint64_t escaped_bits(uint64_t backslashes, bool& escaped) {
  constexpr uint64_t kOddBits = 0xAAAAAAAAAAAAAAAAull;
  const uint64_t first = escaped ? 1 : 0;
  const uint64_t starts = backslashes & ~first;  // (an escaped backslash escapes nothing)
  const uint64_t codes = (((starts << 1) | kOddBits) - starts) ^ kOddBits;
  escaped = ((codes & backslashes) >> 63) != 0;
  return codes ^ (backslashes | first);
}

// A slice's summary, by whether its first byte is escaped (0: not, 1: it is).
struct SliceEnd {
  int32_t quote0, quote1;  // where its first unescaped quote is, or -1
  uint32_t map;            // bit s: whether the byte after the slice is escaped when its first byte's state is s
  BBPE_HD int32_t quote(bool escaped) const { return escaped ? quote1 : quote0; }
  BBPE_HD bool escaped_after(bool escaped) const { return (map >> (escaped ? 1 : 0)) & 1; }
};

// The summary of a slice whose quotes and backslashes are the bits of `quotes`, `backslashes`.
BBPE_HD SliceEnd slice_end(uint64_t quotes, uint64_t backslashes) {
  SliceEnd s;
  bool escaped = false;
  uint64_t q = quotes & ~escaped_bits(backslashes, escaped);
  s.quote0 = q ? ctz64(q) : -1;
  s.map = escaped ? 1u : 0u;
  escaped = true;
  q = quotes & ~escaped_bits(backslashes, escaped);
  s.quote1 = q ? ctz64(q) : -1;
  s.map |= escaped ? 2u : 0u;
  return s;
}

// Two slices' maps one after the other (`first`'s, then `second`'s): the map of both.
BBPE_HD uint32_t escape_map_then(uint32_t first, uint32_t second) {
  return ((second >> (first & 1)) & 1) | (((second >> ((first >> 1) & 1)) & 1) << 1);
}

// Where the slices of a string whose bytes start at `begin` start: slice k at
// first_slice(begin) + k * kSliceBytes (bytes of a slice before `begin` count as plain ones).
BBPE_HD const uint8_t* first_slice(const uint8_t* begin) {
  return begin - (reinterpret_cast<uintptr_t>(begin) & (kSliceAlign - 1));
}

// The quotes and backslashes among the kSliceBytes at `at` (a slice: 16-byte aligned) that lie
// in [begin, end), as bits; no byte outside [begin, end) is read.
BBPE_HD void slice_bits(const uint8_t* at, const uint8_t* begin, const uint8_t* end, uint64_t& quotes,
                        uint64_t& backslashes) {
  quotes = backslashes = 0;
  BBPE_UNROLL
  for (int k = 0; k < kSliceBytes; k += 16) {
    const uint8_t* p = at + k;
    uint64_t lo = 0, hi = 0;
    if (p >= begin && end - p >= 16) {
      load16_aligned(p, lo, hi);
    } else {
      BBPE_UNROLL
      for (int i = 0; i < 16; ++i) {
        const uint64_t c = p + i >= begin && p + i < end ? p[i] : 0;
        if (i < 8) lo |= c << (8 * i);
        else hi |= c << (8 * (i - 8));
      }
    }
    quotes |= (uint64_t)(byte_bits(lo, '"') | byte_bits(hi, '"') << 8) << k;
    backslashes |= (uint64_t)(byte_bits(lo, '\\') | byte_bits(hi, '\\') << 8) << k;
  }
}

// Just past the string whose bytes start at `begin` (just after its opening quote), its
// closing quote being the first one no backslash escapes; null where there is none before
// `end`. Its bytes are checked where they are decoded (a long line's: in pieces,
// core/json_lines.h). The same slices, one after the other, as a GPU warp's lanes scan at once.
BBPE_HD const uint8_t* string_end(const uint8_t* begin, const uint8_t* end) {
  bool escaped = false;  // whether the slice's first byte is escaped
  for (const uint8_t* at = first_slice(begin); at < end; at += kSliceBytes) {
    uint64_t quotes, backslashes;
    slice_bits(at, begin, end, quotes, backslashes);
    if ((quotes | backslashes) == 0 && !escaped) continue;
    const SliceEnd s = slice_end(quotes, backslashes);
    if (s.quote(escaped) >= 0) return at + s.quote(escaped) + 1;
    escaped = s.escaped_after(escaped);
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

// The rest of a line's top-level object from p, at a member's key, or (`after_value`) just past
// a member's value; `found`: whether a member so far was the field's string. parse_document's
// walk, from its first member or from where a caller stopped it (a long line's field, whose
// end is found apart: core/json_lines.h).
template <typename Strings>
BBPE_HD bool parse_members(const uint8_t* p, const uint8_t* end, Strings& strings, bool found, bool after_value) {
  while (true) {
    if (!after_value) {
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
    }
    after_value = false;
    p = skip_space(p, end);
    if (p < end && *p == ',') { p = skip_space(p + 1, end); continue; }
    if (p < end && *p == '}') { ++p; break; }
    return false;
  }
  return found && skip_space(p, end) == end;
}

// A line's top-level object walked to find `field`'s string, the last occurrence winning (as
// in a dict). `strings` reads the strings as it goes, p just past the opening quote each time:
//   key(p, end, ours): a key, `ours` set where it is the field's name (and holds no lone
//     surrogate);
//   field(p, end): the field's string (a later occurrence replaces an earlier one's);
//   skip(p, end): any other string, checked as json.loads would.
// Each returns false to give up (or, field, to stop the walk at the field's string: the caller
// tells the two apart and may go on with parse_members past the string). True where the line is
// one object holding the field as a string, with only whitespace around it.
template <typename Strings>
BBPE_HD bool parse_document(const uint8_t* p, const uint8_t* end, Strings& strings) {
  p = skip_space(p, end);
  if (p >= end || *p != '{') return false;
  p = skip_space(p + 1, end);
  if (p < end && *p == '}') return false;  // no field
  return parse_members(p, end, strings, false, false);
}

}  // namespace jsonl
}  // namespace bbpe
