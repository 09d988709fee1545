// The corpus job's reader, natively: a block of whole lines -> the documents as one flat byte
// buffer + offsets + the index of the line each came from. Plain lines (one trailing '\r'
// stripped, empty lines dropped) or JSONL (one object per line, a string field taken as
// json.loads gives it). Anything this parser cannot decide exactly as Python's reader would
// (invalid UTF-8 or JSON, a lone surrogate in the field, a missing or non-string field, deep
// nesting, huge numbers) makes the whole block "give up": the Python path then reads it and
// either accepts it or raises its file:line error, so both paths accept the same inputs.
// Blocks are split by threads at line starts; a line over kLongLine has its field (a plain
// line: its bytes) decoded in pieces by all of them (one line of megabytes would be one
// thread's work). One line's parse: core/json_line.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/host_threads.h"
#include "core/json_line.h"

namespace bbpe {
namespace jsonl {

// A long line's field (a plain line: its bytes), left for every thread to decode in pieces:
// its raw bytes and its document's index in the part (its text belongs at that document's end
// in `data`).
struct Deferred {
  const uint8_t* begin;
  const uint8_t* end;
  size_t doc;
  int64_t at;  // where its text goes in the part's data (before its separator)
  size_t first_piece = 0, pieces = 0;
};

// One thread's share: the lines starting in [begin, end) (begin at a line start).
struct Part {
  ByteBuffer data;             // its documents, each followed by the separator
  std::vector<int64_t> ends;   // each document's end in `data`, after its separator
  std::vector<int64_t> lines;  // each document's line, counted from the part's first
  std::vector<Deferred> deferred;
  int64_t newlines = 0;
  bool ok = true;
};

// Lines longer than this have their field decoded in pieces of about kPieceBytes by all threads.
constexpr int64_t kLongLine = 1 << 20, kPieceBytes = 1 << 18;

inline void split_part(const uint8_t* begin, const uint8_t* end, const std::string* field,
                       bool defer_long, const std::string& sep, Part& part) {
  // Documents never outgrow their lines; separators may where there is no JSON around them to
  // take their room (plain lines: a separator per line), and a part that outgrew its room was
  // copied into twice as much.
  part.data.reserve((end - begin) + (field ? 0 : sep.size() * (1 + std::count(begin, end, uint8_t('\n')))));
  ByteBuffer scratch;
  int64_t line = 0;
  for (const uint8_t* p = begin; p < end; ++line) {
    const uint8_t* nl = (const uint8_t*)std::memchr(p, '\n', end - p);
    const uint8_t* stop = nl ? nl : end;
    if (field == nullptr) {
      const uint8_t* body_end = stop > p && stop[-1] == '\r' ? stop - 1 : stop;
      if (body_end > p) {
        if (defer_long && body_end - p > kLongLine) {  // (checked and copied in pieces)
          part.deferred.push_back({p, body_end, part.ends.size(), (int64_t)part.data.size()});
        } else {
          if (!valid_utf8(p, body_end)) { part.ok = false; return; }
          part.data.append((const char*)p, body_end - p);
        }
        part.data.append(sep);
        part.ends.push_back((int64_t)part.data.size());
        part.lines.push_back(line);
      }
    } else if (!blank(p, stop)) {
      LineParser parser{p, stop, *field, part.data, {}, false};
      std::swap(parser.scratch, scratch);
      const bool defer = defer_long && stop - p > kLongLine;
      if (!parser.document(defer)) { part.ok = false; return; }
      std::swap(parser.scratch, scratch);
      if (defer)
        part.deferred.push_back({parser.raw_begin, parser.raw_end, part.ends.size(), (int64_t)part.data.size()});
      part.data.append(sep);
      part.ends.push_back((int64_t)part.data.size());
      part.lines.push_back(line);
    }
    if (!nl) break;
    ++part.newlines;
    p = nl + 1;
  }
}

// Where to cut a long line's bytes near `at` (searching forward, at most 64 KiB): the first
// place a piece may start (core/json_rules.h, piece_start); `end` where there is none.
inline const uint8_t* piece_cut(const uint8_t* begin, const uint8_t* at, const uint8_t* end, bool json) {
  for (const uint8_t* stop = std::min(end, at + (1 << 16)); at < stop; ++at)
    if (piece_start(begin, at, json)) return at;
  return end;
}

// A block's documents as split_block leaves them: each part's bytes, and the long fields'
// pieces, decoded apart, that go in at their documents' ends (join_block puts them together).
struct Split {
  std::vector<Part> parts;
  std::vector<ByteBuffer> pieces;
  int64_t bytes = 0, docs = 0, newlines = 0;  // of the joined documents (bytes: separators included)
};

// The deferred fields (or plain bytes) of long lines, cut into pieces that `threads` threads
// decode at once: one line of megabytes would otherwise be one thread's work while the others
// wait.
inline bool decode_deferred(Split& split, const std::string* field, int threads) {
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  for (Part& part : split.parts)
    for (Deferred& d : part.deferred) {
      d.first_piece = ranges.size();
      for (const uint8_t* p = d.begin; p < d.end; p = ranges.back().second)
        ranges.emplace_back(p, d.end - p > 2 * kPieceBytes
                                   ? piece_cut(d.begin, p + kPieceBytes, d.end, field != nullptr)
                                   : d.end);
      d.pieces = ranges.size() - d.first_piece;
    }
  split.pieces.clear();
  split.pieces.resize(ranges.size());
  std::vector<char> ok(ranges.size(), 0);
  on_threads(ranges.size(), threads, [&](size_t k) {
    ByteBuffer& text = split.pieces[k];
    if (field == nullptr) {  // a plain line: its bytes, valid UTF-8
      ok[k] = valid_utf8(ranges[k].first, ranges[k].second);
      text.append((const char*)ranges[k].first, ranges[k].second - ranges[k].first);
      return;
    }
    text.reserve(ranges[k].second - ranges[k].first);
    LineParser parser{ranges[k].first, ranges[k].second, *field, text, {}, false};
    ok[k] = parser.string(text, true) && !parser.lone;
  });
  return std::all_of(ok.begin(), ok.end(), [](char x) { return x != 0; });
}

// The split block's documents, each followed by its separator, joined into `data` (split.bytes),
// with offsets[docs + 1] (document d and its separator are data[offsets[d], offsets[d + 1]))
// and lines[docs] (the line of each, in the block). A part's bytes are one copy but where a
// long field's pieces go in; the copies are spread over `threads` threads by equal ranges of
// `data` (not by part or document: one long document would be one thread's copy).
inline void join_block(const Split& split, uint8_t* data, int64_t* offsets, int64_t* lines, int threads) {
  struct Copy {
    int64_t to;  // where in data (ascending)
    const char* from;
    int64_t n;
  };
  std::vector<Copy> copies;
  int64_t at = 0, doc = 0, line = 0;
  offsets[0] = 0;
  for (const Part& part : split.parts) {
    int64_t from = 0;  // the part's bytes copied so far
    size_t q = 0;      // the next deferred document
    for (size_t j = 0; j < part.ends.size(); ++j) {
      if (q < part.deferred.size() && part.deferred[q].doc == j) {  // its pieces, decoded apart
        const Deferred& d = part.deferred[q++];
        copies.push_back({at + from, part.data.data() + from, d.at - from});
        int64_t to = at + d.at;
        for (size_t k = d.first_piece; k < d.first_piece + d.pieces; ++k) {
          copies.push_back({to, split.pieces[k].data(), (int64_t)split.pieces[k].size()});
          to += (int64_t)split.pieces[k].size();
        }
        at = to - d.at;  // (where the part's byte 0 would be, the pieces before counted)
        from = d.at;
      }
      offsets[doc + (int64_t)j + 1] = at + part.ends[j];
      lines[doc + (int64_t)j] = line + part.lines[j];
    }
    copies.push_back({at + from, part.data.data() + from, (int64_t)part.data.size() - from});
    at += (int64_t)part.data.size();
    doc += (int64_t)part.ends.size();
    line += part.newlines;
  }
  over_ranges(at, at, int64_t(1) << 20, [&](int64_t lo, int64_t hi) {
    // the first copy that ends after lo
    size_t k = std::upper_bound(copies.begin(), copies.end(), lo,
                                [](int64_t x, const Copy& c) { return x < c.to + c.n; }) - copies.begin();
    for (; k < copies.size() && copies[k].to < hi; ++k) {
      const int64_t a = std::max(lo, copies[k].to), b = std::min(hi, copies[k].to + copies[k].n);
      if (a < b) std::memcpy(data + a, copies[k].from + (a - copies[k].to), (size_t)(b - a));
    }
  }, threads);
}

// The documents of block[0, size) split by up to half of `threads` threads, each taking whole
// lines, and all of them the long lines' fields. (Half: the corpus job's pipeline threads run
// beside the reader, and a burst of parsing on every core stalls them for more than the parse
// gains; a long field is one line that only all threads split fast.) Returns false to give up.
inline bool split_block(const uint8_t* block, int64_t size, const std::string* field, int threads,
                        const std::string& sep, Split& split) {
  std::vector<Part>& parts = split.parts;
  constexpr int64_t kMinPart = 1 << 18;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>((threads + 1) / 2, size / kMinPart));
  std::vector<const uint8_t*> cuts{block};
  for (int64_t k = 1; k < n; ++k) {
    const uint8_t* at = block + size * k / n;
    if (at <= cuts.back()) continue;
    const uint8_t* nl = (const uint8_t*)std::memchr(at, '\n', block + size - at);
    if (!nl || nl + 1 >= block + size) break;
    if (nl + 1 > cuts.back()) cuts.push_back(nl + 1);
  }
  cuts.push_back(block + size);
  parts.clear();
  parts.resize(cuts.size() - 1);
  const bool defer_long = threads > 1;
  on_threads(parts.size(), (int)parts.size(),
             [&](size_t k) { split_part(cuts[k], cuts[k + 1], field, defer_long, sep, parts[k]); });
  for (const Part& part : parts)
    if (!part.ok) return false;
  if (!decode_deferred(split, field, threads)) return false;
  split.bytes = split.docs = split.newlines = 0;
  for (const Part& part : parts) {
    split.bytes += (int64_t)part.data.size();
    split.docs += (int64_t)part.ends.size();
    split.newlines += part.newlines;
  }
  for (const ByteBuffer& piece : split.pieces) split.bytes += (int64_t)piece.size();
  return true;
}

}  // namespace jsonl
}  // namespace bbpe
