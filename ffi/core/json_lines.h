// A block of whole lines split into documents by the device's way (the FFI target
// `bbpe_split_lines`, binding/split_lines_ffi.h), with the same result as the host reader
// (core/jsonl.h): the documents back to back in one flat buffer, each followed by a separator,
// int32 offsets[docs + 1] and the line each came from (counted from the block's first).
//
// Its steps, each over all lines at once on a GPU (cuda/jsonl_split.cuh) and one after the
// other on the CPU (split_lines_host, below), sharing the per-line functions here:
//   1. the newlines counted per tile of kSplitTile bytes, the counts scanned, and each line's
//      start written (line i starts after the i-th newline);
//   2. per line, measure_line: not a document (blank), a document of n bytes (its decoded
//      field, or a plain line's bytes, and the separator) with where its field's string
//      starts, or "give up" (core/json_rules.h); a line over kThreadLine bytes is walked only
//      to its field's string and left to a group of threads (a GPU warp, or a block for a
//      line over kWarpLine): the string's end found by its slices scanned at once
//      (long_field_span, the rest of the line walked after it), then its bytes cut into a
//      piece a thread (PieceCut: pieces at fixed offsets, each one's escape state from a scan
//      of the slices' escape maps, its start the first token start past its offset) and
//      measured (measure_span, summed); a thread's serial steps bound its kernel, so no
//      thread reads more than about a kilobyte of one line;
//   3. an exclusive scan of the documents (each line's document index) and of their bytes
//      (each document's offset);
//   4. per line, write_line: the document decoded into place, its offset and line recorded
//      (a long line's field by the same pieces, each measured again and written at the sum
//      of those before it: write_span).
// The status (SplitStatus) says whether the block split, and where it did not, why: a line the
// rules give up on (the first such line: the host re-reads the block to take it or to word
// its error, as it does where its own reader gives up), or more lines or bytes than the
// outputs hold.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/json_rules.h"

namespace bbpe {
namespace jsonl {

constexpr int kMaxFieldBytes = 256;  // longer field names, and separators, stay on the host reader
constexpr int kMaxSepBytes = 64;
constexpr int64_t kSplitTile = 4096;  // bytes per newline-counting tile

// What a block is split by: JSONL's field (json = 1) or plain lines (json = 0, one trailing
// '\r' dropped, empty lines skipped, valid UTF-8), and the separator after each document.
struct SplitSpec {
  uint8_t field[kMaxFieldBytes];
  uint8_t sep[kMaxSepBytes];
  int32_t field_len;
  int32_t sep_len;
  int32_t json;
};

// status int32[kStatusSlots]: code (SplitCode), documents, their bytes (separators included),
// newlines in the block, the first line given up on (-1: none), lines in the block.
enum StatusSlot { kStatusCode = 0, kStatusDocs, kStatusBytes, kStatusNewlines, kStatusBadLine, kStatusLines, kStatusSlots };
enum SplitCode { kSplitOk = 0, kSplitGiveUp = 1, kSplitTooManyLines = 2, kSplitTooManyBytes = 3 };

// measure_line's lengths that are not a document's (kLongPending: a line over kThreadLine
// bytes, left to a group: long_field_span and the pieces).
constexpr int32_t kNotDocument = -1, kGiveUp = -2, kLongPending = -3;
// Lines over kThreadLine bytes are a GPU warp's (kWarpPieces pieces), over kWarpLine a block's
// (kBlockPieces): a line a thread reads alone costs its kernel that line's serial steps, and a
// piece a thread decodes costs it the piece's. (On the mixed corpus the longest chains are then
// a few hundred steps in every class: benchmarks/jsonl_split_chains.py.)
constexpr int64_t kThreadLine = 1 << 10;
constexpr int64_t kWarpLine = 4 << 10;
constexpr int kWarpPieces = 32;    // a warp's lanes
constexpr int kBlockPieces = 512;  // a block's threads
constexpr int kLongWords = 3;      // per long line in the workspace: line, span begin, span end

// The workspace's int32 arrays, by the block's capacity (bytes) and max_lines (the documents'
// capacity: lines beyond it are "too many lines", a block ending in a newline has one empty
// line more).
struct SplitWorkspace {
  int64_t tiles, lines, chunks;  // newline tiles, line slots (max_lines + 1), scan chunks of lines
  int64_t warp_lines, block_lines;  // slots for lines over kThreadLine (up to kWarpLine), over kWarpLine
  int64_t tile_newlines, line_start, raw_begin, length, doc_of, offset_of, chunk_docs, chunk_bytes, counters;
  int64_t warp_longs, block_longs;  // kLongWords per long line
  int64_t words;  // int32 words in all
};
constexpr int64_t kScanChunk = 512;  // lines per block of the lines' scan (one thread each on a GPU)
constexpr int kCounters = 4;          // newlines, bad line, a warp's lines, a block's lines
inline SplitWorkspace split_workspace(int64_t block_bytes, int64_t max_lines) {
  SplitWorkspace w{};
  w.tiles = (block_bytes + kSplitTile - 1) / kSplitTile;
  w.lines = max_lines + 1;
  w.chunks = (w.lines + kScanChunk - 1) / kScanChunk;
  w.warp_lines = block_bytes / (kThreadLine + 1) + 1;
  w.block_lines = block_bytes / (kWarpLine + 1) + 1;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t here = at;
    at += (n + 31) / 32 * 32;  // (128-byte aligned arrays)
    return here;
  };
  w.tile_newlines = take(w.tiles + 1);
  w.line_start = take(w.lines + 1);
  w.raw_begin = take(w.lines);
  w.length = take(w.lines);
  w.doc_of = take(w.lines);
  w.offset_of = take(w.lines);
  w.chunk_docs = take(w.chunks + 1);
  w.chunk_bytes = take(w.chunks + 1);
  w.counters = take(kCounters);
  w.warp_longs = take(w.warp_lines * kLongWords);
  w.block_longs = take(w.block_lines * kLongWords);
  w.words = at;
  return w;
}

// Sinks for decode_string (core/json_rules.h): counting, writing, or comparing the bytes.
struct CountSink {
  int32_t n = 0;
  BBPE_HD void put(const uint8_t*, int k) { n += k; }
};
struct WriteSink {
  uint8_t* w;
  BBPE_HD void put(const uint8_t* s, int k) {
    for (int i = 0; i < k; ++i) *w++ = s[i];
  }
};
struct MatchSink {  // whether the bytes put are `want`
  const uint8_t* want;
  int32_t want_len, at = 0;
  bool same = true;
  BBPE_HD void put(const uint8_t* s, int k) {
    for (int i = 0; i < k; ++i, ++at) same = same && at < want_len && want[at] == s[i];
  }
};

// parse_document's string readers for measure_line: keys compared with the field's name as
// they are decoded, other strings checked, the field's string measured and its start kept.
struct MeasureStrings {
  const SplitSpec& spec;
  bool stop_at_field;  // a long line's: the walk stops at the field's string (`stopped` set)
  const uint8_t* field_begin = nullptr;
  const uint8_t* field_end = nullptr;  // (its closing quote)
  int32_t field_len = 0;
  bool stopped = false;
  BBPE_HD bool key(const uint8_t*& p, const uint8_t* end, bool& ours) {
    MatchSink match{spec.field, spec.field_len};
    bool lone;
    if (!decode_string(p, end, match, lone)) return false;
    ours = match.same && match.at == spec.field_len && !lone;
    return true;
  }
  BBPE_HD bool skip(const uint8_t*& p, const uint8_t* end) {
    CountSink none;
    bool lone;
    return decode_string(p, end, none, lone);
  }
  BBPE_HD bool field(const uint8_t*& p, const uint8_t* end) {
    field_begin = p;
    if (stop_at_field) {
      stopped = true;
      return false;
    }
    CountSink count;
    bool lone;
    if (!decode_string(p, end, count, lone) || lone) return false;
    field_end = p - 1;
    field_len = count.n;
    return true;
  }
};

// Plain lines: the line's bytes but one trailing '\r'.
BBPE_HD const uint8_t* plain_end(const uint8_t* p, const uint8_t* end) {
  return end > p && end[-1] == '\r' ? end - 1 : end;
}

// Whether a plain line's bytes are valid UTF-8.
BBPE_HD bool valid_utf8_span(const uint8_t* p, const uint8_t* end) {
  while (p < end) {
    if (plain_ascii8(p, end, false)) {
      p += 8;
      continue;
    }
    const int n = *p < 0x80 ? 1 : utf8_sequence(p, end);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

// Line [p, end) (no newline): its document's bytes, separator included, with the span of its
// field's string (between the quotes; a plain line: its bytes but a trailing '\r') in
// *raw_begin, *raw_end; kNotDocument (blank, or empty), kGiveUp, or for a line over kThreadLine
// bytes kLongPending: a plain line's span, or a JSONL line walked up to its field's string
// (*raw_begin: just past its opening quote, *raw_end: the line's end; long_field_span goes on
// from there), its bytes not yet checked (measure_span, a piece at a time).
BBPE_HD int32_t measure_line(const uint8_t* p, const uint8_t* end, const SplitSpec& spec, const uint8_t** raw_begin,
                             const uint8_t** raw_end) {
  const bool long_line = end - p > kThreadLine;
  *raw_begin = p;
  *raw_end = plain_end(p, end);
  if (!spec.json) {
    if (*raw_end == p) return kNotDocument;
    if (long_line) return kLongPending;
    return valid_utf8_span(p, *raw_end) ? (int32_t)(*raw_end - p) + spec.sep_len : kGiveUp;
  }
  if (blank(p, end)) return kNotDocument;
  MeasureStrings strings{spec, long_line};
  if (!parse_document(p, end, strings)) {
    if (!strings.stopped) return kGiveUp;
    *raw_begin = strings.field_begin;
    *raw_end = end;
    return kLongPending;
  }
  *raw_begin = strings.field_begin;
  *raw_end = strings.field_end;
  return strings.field_len + spec.sep_len;
}

// The escape map that changes nothing (escape_map_then's identity): a scan's start.
constexpr uint32_t kSameEscape = 2;
BBPE_HD bool escaped_after(uint32_t map, bool escaped) { return ((map >> (escaped ? 1 : 0)) & 1) != 0; }

// string_end's result found the way a GPU group of kThreads finds it (cuda/jsonl_split.cuh,
// group_string_end), one thread after the other: rounds of kThreads slices, whether each
// slice's first byte is escaped given by the maps of the round's slices before it composed
// (escape_map_then; the group composes them by a scan) and by the state the round began in;
// the first slice of a round with an unescaped quote ends the string. (The CPU executor finds
// long lines' strings so, so that CI checks the group's arithmetic and layout.)
template <int kThreads>
BBPE_HD const uint8_t* string_end_by_rounds(const uint8_t* begin, const uint8_t* end) {
  bool escaped = false;  // whether the round's first byte is escaped
  for (const uint8_t* round = first_slice(begin); round < end; round += kThreads * kSliceBytes) {
    uint32_t through = kSameEscape;  // the maps of the round's slices before this one, composed
    for (int rank = 0; rank < kThreads; ++rank) {
      const uint8_t* at = round + rank * kSliceBytes;
      uint64_t quotes = 0, backslashes = 0;
      if (at < end) slice_bits(at, begin, end, quotes, backslashes);
      const SliceEnd s = slice_end(quotes, backslashes);
      const bool here = escaped_after(through, escaped);
      if (s.quote(here) >= 0) return at + s.quote(here) + 1;
      through = escape_map_then(through, s.map);
    }
    escaped = escaped_after(through, escaped);
  }
  return nullptr;
}

// A long JSONL line's field string, from where measure_line stopped (`begin`: just past its
// opening quote; `end`: the line's end): each occurrence's end found by `find_end(begin, end)`
// (string_end's result: one thread's string_end, or a GPU warp's scan of the same slices), and
// the rest of the line walked after it as parse_document would, up to a later occurrence (which
// replaces it: its end found likewise). Sets [begin, span_end) to the last occurrence's bytes;
// false to give up. (On a GPU every lane of the warp runs this alike: find_end is the warp's.)
template <typename FindEnd>
BBPE_HD bool long_field_span(const uint8_t*& begin, const uint8_t* end, const SplitSpec& spec,
                             const uint8_t*& span_end, FindEnd find_end) {
  while (true) {
    const uint8_t* after = find_end(begin, end);
    if (!after) return false;
    MeasureStrings strings{spec, true};
    if (parse_members(after, end, strings, true, true)) {
      span_end = after - 1;
      return true;
    }
    if (!strings.stopped) return false;
    begin = strings.field_begin;
  }
}

// Whether byte y of a JSON string's bytes (ending at `end`) starts a token of its decode (a
// plain byte, a UTF-8 sequence, an escape, or a surrogate pair's two \u escapes, which
// decode_escape reads as one), in a string whose decode succeeds. `offset`: a slice's start at
// least six bytes before y; `escaped`, bit k: whether byte offset + k is escaped (the end of an
// odd run of backslashes). Not a token start: a UTF-8 continuation byte, an escaped byte, one
// of a \u escape's four hex digits, or the backslash of a low surrogate's escape that follows a
// high one's. (Where the decode fails, a piece holding the failing token fails too: every
// piece starts where this says, and the token that fails is decoded whole by one of them.)
BBPE_HD bool json_token_start(const uint8_t* offset, uint64_t escaped, const uint8_t* y, const uint8_t* end) {
  const int k = (int)(y - offset);
  const auto escaped_at = [&](int d) { return ((escaped >> (k - d)) & 1) != 0; };  // byte y - d
  if ((*y & 0xC0) == 0x80 || escaped_at(0)) return false;
  for (int d = 2; d <= 5; ++d)
    if (y[-d] == '\\' && !escaped_at(d) && y[1 - d] == 'u') return false;
  if (*y == '\\' && end - y >= 6 && y[1] == 'u' && y[-6] == '\\' && !escaped_at(6) && y[-5] == 'u') {
    const int high = hex4(y - 4, end), low = hex4(y + 2, end);
    if (high >= 0xD800 && high <= 0xDBFF && low >= 0xDC00 && low <= 0xDFFF) return false;
  }
  return true;
}

// A long line's span [begin, end) (a JSONL field string's bytes between its quotes, or a plain
// line's bytes) cut into `pieces` pieces, one per thread of a group, that are checked and
// decoded apart. Piece k's slices (kSliceBytes each) are [offset(k), offset(k + 1)), at fixed
// offsets from first_slice(begin), so a thread finds its piece's escape map without reading
// another's bytes (a group scans the maps for each piece's incoming state); piece k > 0 starts
// at the first token start (json_token_start; a plain line's: the first byte that is no UTF-8
// continuation) from its offset's seventh byte, searched over at most twelve bytes (the longest
// token, a surrogate pair, is twelve: a valid string has one there, else the line gives up).
// So every piece's serial steps are bounded by its share of the span, whatever the bytes.
struct PieceCut {
  const uint8_t* begin;
  const uint8_t* end;
  const uint8_t* first;  // first_slice(begin)
  int64_t stride;        // bytes between offsets: whole slices
  bool json;

  BBPE_HD PieceCut(const uint8_t* b, const uint8_t* e, int pieces, bool is_json)
      : begin(b), end(e), first(first_slice(b)), json(is_json) {
    const int64_t per = (int64_t)pieces * kSliceBytes;
    stride = ((end - first) + per - 1) / per * kSliceBytes;
    if (stride < kSliceBytes) stride = kSliceBytes;
  }

  // Piece k's slices' start (k >= 1; `end` past the span).
  BBPE_HD const uint8_t* offset(int k) const { return (int64_t)k * stride < end - first ? first + k * stride : end; }

  // Piece k's slices' escape maps composed (escape_map_then; kSameEscape for a plain line's).
  BBPE_HD uint32_t map(int k) const {
    uint32_t through = kSameEscape;
    if (!json) return through;
    const uint8_t* stop = offset(k + 1);
    for (const uint8_t* at = k == 0 ? first : offset(k); at < stop; at += kSliceBytes) {
      uint64_t quotes, backslashes;
      slice_bits(at, begin, end, quotes, backslashes);
      through = escape_map_then(through, slice_end(quotes, backslashes).map);
    }
    return through;
  }

  // Where piece k starts, given whether its offset's byte is escaped; `ok` cleared where no
  // token starts where one must.
  BBPE_HD const uint8_t* start(int k, bool escaped, bool& ok) const {
    if (k == 0) return begin;
    const uint8_t* at = offset(k);
    if (!json) {
      for (int d = 0; d < 4; ++d, ++at)
        if (at >= end || (*at & 0xC0) != 0x80) return at;
      ok = false;
      return end;
    }
    if (end - at <= 6) return end;
    uint64_t quotes, backslashes;
    slice_bits(at, begin, end, quotes, backslashes);
    const uint64_t escapes = escaped_bits(backslashes, escaped);
    for (int d = 6; d < 18; ++d) {
      if (at + d >= end) return end;
      if (json_token_start(at, escapes, at + d, end)) return at + d;
    }
    ok = false;
    return end;
  }

  // Piece k's bytes [*p, *stop), given `before` (the maps of the pieces before it composed:
  // exclusive scan) and its own map; false where it cannot be cut (the line gives up).
  BBPE_HD bool piece(int k, int pieces, uint32_t before, uint32_t own, const uint8_t** p, const uint8_t** stop) const {
    bool ok = true;
    *p = start(k, escaped_after(before, false), ok);
    *stop = k + 1 < pieces ? start(k + 1, escaped_after(escape_map_then(before, own), false), ok) : end;
    return ok;
  }
};

// A piece [p, stop) of a long line's span: its decoded bytes, or -1 to give up (what the whole
// string would give up on: bad escapes or UTF-8, raw controls, a lone surrogate in the field).
BBPE_HD int32_t measure_span(const uint8_t* p, const uint8_t* stop, bool json) {
  if (!json) return valid_utf8_span(p, stop) ? (int32_t)(stop - p) : -1;
  CountSink count;
  bool lone;
  return decode_string(p, stop, count, lone, true) && !lone ? count.n : -1;
}

// A piece [p, stop) of a long line's span decoded at `out` (measure_span's bytes).
BBPE_HD void write_span(const uint8_t* p, const uint8_t* stop, bool json, uint8_t* out) {
  WriteSink sink{out};
  if (!json) {
    sink.put(p, (int)(stop - p));
    return;
  }
  bool lone;
  decode_string(p, stop, sink, lone, true);
}

// A long line's span measured (out null) or written at `out` by `pieces` pieces one after the
// other, as a group's threads do at once (the CPU executor's): the document's field bytes, or
// -1 to give up.
BBPE_HD int64_t pieces_one_by_one(const uint8_t* begin, const uint8_t* end, bool json, int pieces, uint8_t* out) {
  const PieceCut cut(begin, end, pieces, json);
  uint32_t before = kSameEscape;
  int64_t total = 0;
  for (int k = 0; k < pieces; ++k) {
    const uint32_t own = cut.map(k);
    const uint8_t *p, *stop;
    if (!cut.piece(k, pieces, before, own, &p, &stop)) return -1;
    const int32_t n = measure_span(p, stop, json);
    if (n < 0) return -1;
    if (out) write_span(p, stop, json, out + total);
    total += n;
    before = escape_map_then(before, own);
  }
  return total;
}

// The document measure_line measured (not a long one), written at `out`: the field's string
// decoded from raw_begin (a plain line: its bytes), then the separator. `end`: the line's end.
BBPE_HD void write_line(const uint8_t* raw_begin, const uint8_t* end, const SplitSpec& spec, uint8_t* out) {
  WriteSink sink{out};
  if (spec.json) {
    bool lone;
    decode_string(raw_begin, end, sink, lone);
  } else {
    sink.put(raw_begin, (int)(plain_end(raw_begin, end) - raw_begin));
  }
  sink.put(spec.sep, spec.sep_len);
}

// The status from the counts the steps left: a line given up on first, then the capacities.
BBPE_HD void finish_status(int32_t* status, int64_t newlines, int64_t bad_line, int64_t docs, int64_t bytes,
                           int64_t max_lines, int64_t max_bytes) {
  const int64_t lines = newlines + 1;
  int32_t code = kSplitOk;
  if (newlines > max_lines) code = kSplitTooManyLines;
  else if (bad_line >= 0) code = kSplitGiveUp;
  else if (docs > max_lines) code = kSplitTooManyLines;
  else if (bytes > max_bytes) code = kSplitTooManyBytes;
  status[kStatusCode] = code;
  status[kStatusDocs] = (int32_t)docs;
  status[kStatusBytes] = (int32_t)(bytes < 0x7FFFFFFF ? bytes : 0x7FFFFFFF);
  status[kStatusNewlines] = (int32_t)newlines;
  status[kStatusBadLine] = (int32_t)bad_line;
  status[kStatusLines] = (int32_t)lines;
}

// The CPU executor: the steps above one after the other (a long line's pieces too, one after
// the other, cut as a GPU group cuts them). block[0, size); outputs as the FFI call's (data[max_bytes], offsets[max_lines +
// 1], lines[max_lines], status[kStatusSlots]).
inline void split_lines_host(const uint8_t* block, int64_t size, const SplitSpec& spec, int64_t max_lines,
                             int64_t max_bytes, uint8_t* data, int32_t* offsets, int32_t* lines, int32_t* status) {
  const uint8_t* end = block + size;
  int64_t newlines = 0, bad_line = -1, docs = 0, bytes = 0;
  for (const uint8_t* p = block; p < end; ++p) newlines += *p == '\n';
  if (newlines <= max_lines) {
    const uint8_t* line = block;
    for (int64_t i = 0; i <= newlines && bad_line < 0; ++i) {
      const uint8_t* stop = line;
      while (stop < end && *stop != '\n') ++stop;
      const uint8_t *raw, *raw_end;
      int32_t n = measure_line(line, stop, spec, &raw, &raw_end);
      const bool long_line = n == kLongPending;
      const int pieces = stop - line > kWarpLine ? kBlockPieces : kWarpPieces;
      if (long_line && spec.json) {
        const bool span = pieces == kBlockPieces
                              ? long_field_span(raw, stop, spec, raw_end, string_end_by_rounds<kBlockPieces>)
                              : long_field_span(raw, stop, spec, raw_end, string_end_by_rounds<kWarpPieces>);
        if (!span) n = kGiveUp;
      }
      if (n == kLongPending) {
        const int64_t field = pieces_one_by_one(raw, raw_end, spec.json, pieces, nullptr);
        n = field < 0 ? kGiveUp : (int32_t)field + spec.sep_len;
      }
      if (n == kGiveUp) bad_line = i;
      if (n >= 0) {
        if (docs < max_lines && bytes + n <= max_bytes) {
          uint8_t* out = data + bytes;
          if (long_line) {
            out += pieces_one_by_one(raw, raw_end, spec.json, pieces, out);
            for (int32_t k = 0; k < spec.sep_len; ++k) out[k] = spec.sep[k];
          } else {
            write_line(raw, stop, spec, out);
          }
          lines[docs] = (int32_t)i;
          offsets[docs + 1] = (int32_t)(bytes + n);
        }
        ++docs;
        bytes += n;
      }
      line = stop + 1;
    }
    if (max_lines >= 0) offsets[0] = 0;
  }
  finish_status(status, newlines, bad_line, docs, bytes, max_lines, max_bytes);
}

}  // namespace jsonl
}  // namespace bbpe
