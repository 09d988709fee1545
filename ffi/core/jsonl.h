// The corpus job's reader, natively: a block of whole lines -> the documents as one flat byte
// buffer + offsets + the index of the line each came from. Plain lines (one trailing '\r'
// stripped, empty lines dropped) or JSONL (one object per line, a string field taken as
// json.loads gives it). Anything this parser cannot decide exactly as Python's reader would
// (invalid UTF-8 or JSON, a lone surrogate in the field, a missing or non-string field, deep
// nesting, huge numbers) makes the whole block "give up": the Python path then reads it and
// either accepts it or raises its file:line error, so both paths accept the same inputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/utf8.h"

namespace bbpe {
namespace jsonl {

// Length of the valid UTF-8 sequence at p (strict, as Python's decoder: core/utf8.h), 0 when
// it is not one.
inline int utf8_sequence(const uint8_t* p, const uint8_t* end) {
  uint32_t cp;
  return utf8_decode(p, (int)std::min<std::ptrdiff_t>(end - p, 4), nullptr, 0, &cp);
}

// Eight bytes at a time (SWAR): whether any of them is >= 0x80, < 0x20, '"' or '\\'.
constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
inline uint64_t load8(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline bool has_zero_byte(uint64_t v) { return ((v - kOnes) & ~v & kHighs) != 0; }
inline bool any_special(uint64_t v) {
  return (((v - kOnes * 0x20) & ~v) | v) & kHighs || has_zero_byte(v ^ (kOnes * '"')) ||
         has_zero_byte(v ^ (kOnes * '\\'));
}

inline bool valid_utf8(const uint8_t* p, const uint8_t* end) {
  while (p < end) {
    if (end - p >= 8 && !(load8(p) & kHighs)) { p += 8; continue; }
    if (*p < 0x80) { ++p; continue; }
    const int n = utf8_sequence(p, end);
    if (!n) return false;
    p += n;
  }
  return true;
}

inline void put_utf8(uint32_t cp, std::string& out) {
  const int len = utf8_length(cp);
  for (int k = 0; k < len; ++k) out += (char)utf8_byte(cp, len, k);
}

inline int hex4(const uint8_t* p, const uint8_t* end) {
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

// A JSON line parsed just far enough to take one field; every method returns false to give up.
struct LineParser {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& field;
  std::string& out;     // the document is appended here
  std::string scratch;  // keys and skipped strings
  bool lone = false;    // the last decoded string held a lone surrogate

  void ws() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
  }

  // The string at p (just after its opening quote) appended to `dst`, unescaped as
  // json.loads does (strict: no raw control characters); a lone surrogate sets `lone`.
  bool string(std::string& dst) {
    lone = false;
    while (true) {
      const uint8_t* run = p;
      while (end - p >= 8 && !any_special(load8(p))) p += 8;
      while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') ++p;
      dst.append((const char*)run, p - run);
      if (p >= end || *p < 0x20) return false;
      if (*p == '"') { ++p; return true; }
      if (*p >= 0x80) {
        const int n = utf8_sequence(p, end);
        if (!n) return false;
        dst.append((const char*)p, n);
        p += n;
        continue;
      }
      if (++p >= end) return false;  // a backslash
      const uint8_t e = *p++;
      switch (e) {
        case '"': dst += '"'; break;
        case '\\': dst += '\\'; break;
        case '/': dst += '/'; break;
        case 'b': dst += '\b'; break;
        case 'f': dst += '\f'; break;
        case 'n': dst += '\n'; break;
        case 'r': dst += '\r'; break;
        case 't': dst += '\t'; break;
        case 'u': {
          int cp = hex4(p, end);
          if (cp < 0) return false;
          p += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
            const int lo = hex4(p + 2, end);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              p += 6;
            }
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) {
            lone = true;  // (as a string that matches no field: three placeholder bytes)
            dst += "\xff\xff\xff";
          } else {
            put_utf8((uint32_t)cp, dst);
          }
          break;
        }
        default: return false;
      }
    }
  }

  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if ((size_t)(end - p) < n || std::memcmp(p, word, n) != 0) return false;
    p += n;
    return true;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?, or Python's NaN / Infinity / -Infinity.
  bool number() {
    const uint8_t* start = p;
    if (*p == '-') ++p;
    if (p < end && *p == 'I') return literal("Infinity");
    auto digits = [&]() {
      const uint8_t* d = p;
      while (p < end && *p >= '0' && *p <= '9') ++p;
      return p > d;
    };
    if (p < end && *p == '0') ++p;
    else if (!(p < end && *p >= '1' && *p <= '9' && digits())) return false;
    if (p < end && *p == '.') { ++p; if (!digits()) return false; }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (!digits()) return false;
    }
    return p - start <= 100;  // (Python refuses integers of thousands of digits)
  }

  bool value(int depth) {
    if (p >= end || depth > 64) return false;
    switch (*p) {
      case '"': ++p; scratch.clear(); return string(scratch);
      case '{': case '[': {
        const uint8_t close = *p == '{' ? '}' : ']';
        ++p;
        ws();
        if (p < end && *p == close) { ++p; return true; }
        while (true) {
          if (close == '}') {
            if (p >= end || *p != '"') return false;
            ++p;
            scratch.clear();
            if (!string(scratch)) return false;
            ws();
            if (p >= end || *p != ':') return false;
            ++p;
            ws();
          }
          if (!value(depth + 1)) return false;
          ws();
          if (p < end && *p == ',') { ++p; ws(); continue; }
          if (p < end && *p == close) { ++p; return true; }
          return false;
        }
      }
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      case 'N': return literal("NaN");
      default: return number();
    }
  }

  // The top-level object; the field's last occurrence wins (as in a dict).
  bool document() {
    const size_t base = out.size();
    ws();
    if (p >= end || *p != '{') return false;
    ++p;
    ws();
    bool found = false;
    if (p < end && *p == '}') return false;  // no field
    while (true) {
      if (p >= end || *p != '"') return false;
      ++p;
      scratch.clear();
      if (!string(scratch)) return false;
      const bool ours = !lone && scratch == field;
      ws();
      if (p >= end || *p != ':') return false;
      ++p;
      ws();
      if (ours) {
        out.resize(base);
        found = p < end && *p == '"';
        if (found) {
          ++p;
          if (!string(out) || lone) return false;
        } else if (!value(1)) {
          return false;
        }
      } else if (!value(1)) {
        return false;
      }
      ws();
      if (p < end && *p == ',') { ++p; ws(); continue; }
      if (p < end && *p == '}') { ++p; break; }
      return false;
    }
    ws();
    return found && p == end;
  }
};

// One thread's share: the lines starting in [begin, end) (begin at a line start).
struct Part {
  std::string data;
  std::vector<int64_t> ends;   // each document's end in `data`
  std::vector<int64_t> lines;  // each document's line, counted from the part's first
  int64_t newlines = 0;
  bool ok = true;
};

inline bool blank(const uint8_t* p, const uint8_t* end) {  // bytes.strip() leaves nothing
  for (; p < end; ++p)
    if (!(*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == '\v' || *p == '\f'))
      return false;
  return true;
}

inline void split_part(const uint8_t* begin, const uint8_t* end, const std::string* field,
                       Part& part) {
  part.data.reserve(end - begin);  // (documents never outgrow their lines)
  std::string scratch;
  int64_t line = 0;
  for (const uint8_t* p = begin; p < end; ++line) {
    const uint8_t* nl = (const uint8_t*)std::memchr(p, '\n', end - p);
    const uint8_t* stop = nl ? nl : end;
    if (field == nullptr) {
      const uint8_t* body_end = stop > p && stop[-1] == '\r' ? stop - 1 : stop;
      if (body_end > p) {
        if (!valid_utf8(p, body_end)) { part.ok = false; return; }
        part.data.append((const char*)p, body_end - p);
        part.ends.push_back((int64_t)part.data.size());
        part.lines.push_back(line);
      }
    } else if (!blank(p, stop)) {
      LineParser parser{p, stop, *field, part.data, {}, false};
      parser.scratch.swap(scratch);
      if (!parser.document()) { part.ok = false; return; }
      parser.scratch.swap(scratch);
      part.ends.push_back((int64_t)part.data.size());
      part.lines.push_back(line);
    }
    if (!nl) break;
    ++part.newlines;
    p = nl + 1;
  }
}

// The documents of block[0, size): `parts` filled by up to `threads` threads, each taking
// whole lines. Returns false to give up.
inline bool split_block(const uint8_t* block, int64_t size, const std::string* field,
                        int threads, std::vector<Part>& parts) {
  constexpr int64_t kMinPart = 1 << 18;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(threads, size / kMinPart));
  std::vector<const uint8_t*> cuts{block};
  for (int64_t k = 1; k < n; ++k) {
    const uint8_t* at = block + size * k / n;
    if (at <= cuts.back()) continue;
    const uint8_t* nl = (const uint8_t*)std::memchr(at, '\n', block + size - at);
    if (!nl || nl + 1 >= block + size) break;
    if (nl + 1 > cuts.back()) cuts.push_back(nl + 1);
  }
  cuts.push_back(block + size);
  parts.assign(cuts.size() - 1, Part{});
  if (parts.size() == 1) {
    split_part(cuts[0], cuts[1], field, parts[0]);
  } else {
    std::vector<std::thread> pool;
    for (size_t k = 0; k < parts.size(); ++k)
      pool.emplace_back(split_part, cuts[k], cuts[k + 1], field, std::ref(parts[k]));
    for (auto& t : pool) t.join();
  }
  for (const Part& part : parts)
    if (!part.ok) return false;
  return true;
}

}  // namespace jsonl
}  // namespace bbpe
