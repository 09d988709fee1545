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
//      starts, or "give up" (core/json_rules.h); a line over kWarpLine bytes is walked only to
//      its field's string, whose end a GPU warp finds (long_field_span: the string's slices
//      scanned at once, the rest of the line walked after it), and whose bytes are measured
//      in kLanes pieces (measure_piece: the warp's lanes; one line of megabytes would be one
//      thread's serial work);
//   3. an exclusive scan of the documents (each line's document index) and of their bytes
//      (each document's offset);
//   4. per line, write_line: the document decoded into place, its offset and line recorded
//      (a long line's field by its pieces, write_piece, each at the sum of those before).
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

// measure_line's lengths that are not a document's (kLongPending: a line over kWarpLine bytes,
// left to long_field_span and measure_piece).
constexpr int32_t kNotDocument = -1, kGiveUp = -2, kLongPending = -3;
// Longer lines are a GPU warp's (their field's end found and its bytes measured and decoded by
// 32 lanes): a line a thread reads alone costs its warp and its kernel that line's serial steps.
constexpr int64_t kWarpLine = 4 << 10;
constexpr int kLanes = 32;               // pieces per long line (a warp's lanes)
constexpr int kLongWords = 3 + kLanes;   // per long line in the workspace: line, raw span, piece lengths

// The workspace's int32 arrays, by the block's capacity (bytes) and max_lines (the documents'
// capacity: lines beyond it are "too many lines", a block ending in a newline has one empty
// line more).
struct SplitWorkspace {
  int64_t tiles, lines, chunks;  // newline tiles, line slots (max_lines + 1), scan chunks of lines
  int64_t long_lines;            // slots for lines over kWarpLine
  int64_t tile_newlines, line_start, raw_begin, length, doc_of, offset_of, chunk_docs, chunk_bytes, counters;
  int64_t longs;  // kLongWords per long line
  int64_t words;  // int32 words in all
};
constexpr int64_t kScanChunk = 512;  // lines per block of the lines' scan (one thread each on a GPU)
constexpr int kCounters = 4;          // newlines, bad line, long lines, (spare)
inline SplitWorkspace split_workspace(int64_t block_bytes, int64_t max_lines) {
  SplitWorkspace w{};
  w.tiles = (block_bytes + kSplitTile - 1) / kSplitTile;
  w.lines = max_lines + 1;
  w.chunks = (w.lines + kScanChunk - 1) / kScanChunk;
  w.long_lines = block_bytes / (kWarpLine + 1) + 1;
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
  w.longs = take(w.long_lines * kLongWords);
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
// *raw_begin, *raw_end; kNotDocument (blank, or empty), kGiveUp, or for a line over kWarpLine
// bytes kLongPending: a plain line's span, or a JSONL line walked up to its field's string
// (*raw_begin: just past its opening quote, *raw_end: the line's end; long_field_span goes on
// from there), its bytes not yet checked (measure_piece).
BBPE_HD int32_t measure_line(const uint8_t* p, const uint8_t* end, const SplitSpec& spec, const uint8_t** raw_begin,
                             const uint8_t** raw_end) {
  const bool long_line = end - p > kWarpLine;
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

// string_end's result found the way a GPU warp finds it (cuda/jsonl_split.cuh,
// warp_string_end), one lane after the other: rounds of kLanes slices, whether each slice's
// first byte is escaped given by the maps of the round's slices before it composed
// (escape_map_then; the warp composes them by a scan) and by the state the round began in; the
// first slice of a round with an unescaped quote ends the string. (The CPU executor finds long
// lines' strings so, so that CI checks the warp's arithmetic and layout.)
BBPE_HD const uint8_t* string_end_by_rounds(const uint8_t* begin, const uint8_t* end) {
  bool escaped = false;  // whether the round's first byte is escaped
  for (const uint8_t* round = first_slice(begin); round < end; round += kLanes * kSliceBytes) {
    uint32_t through = 0;  // the maps of the round's slices before this one, composed
    for (int lane = 0; lane < kLanes; ++lane) {
      const uint8_t* at = round + lane * kSliceBytes;
      uint64_t quotes = 0, backslashes = 0;
      if (at < end) slice_bits(at, begin, end, quotes, backslashes);
      const SliceEnd s = slice_end(quotes, backslashes);
      const bool here = lane == 0 ? escaped : ((through >> (escaped ? 1 : 0)) & 1) != 0;
      if (s.quote(here) >= 0) return at + s.quote(here) + 1;
      through = lane == 0 ? s.map : escape_map_then(through, s.map);
    }
    escaped = ((through >> (escaped ? 1 : 0)) & 1) != 0;
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

// The start of piece k of kLanes of [begin, end): the first piece start at or after its
// share's start (so piece k is [piece_at(k), piece_at(k + 1)), and pieces may be empty).
BBPE_HD const uint8_t* piece_at(const uint8_t* begin, const uint8_t* end, int k, bool json) {
  if (k <= 0) return begin;
  if (k >= kLanes) return end;
  const uint8_t* at = begin + (end - begin) * k / kLanes;
  while (at < end && !piece_start(begin, at, json)) ++at;
  return at;
}

// Piece k of a long line's span: its decoded bytes, or -1 to give up (what the whole string
// would give up on: bad escapes or UTF-8, raw controls, a lone surrogate in the field).
BBPE_HD int32_t measure_piece(const uint8_t* begin, const uint8_t* end, int k, const SplitSpec& spec) {
  const uint8_t* p = piece_at(begin, end, k, spec.json);
  const uint8_t* stop = piece_at(begin, end, k + 1, spec.json);
  if (!spec.json) return valid_utf8_span(p, stop) ? (int32_t)(stop - p) : -1;
  CountSink count;
  bool lone;
  return decode_string(p, stop, count, lone, true) && !lone ? count.n : -1;
}

// Piece k of a long line's span decoded at `out` (measure_piece's bytes).
BBPE_HD void write_piece(const uint8_t* begin, const uint8_t* end, int k, const SplitSpec& spec, uint8_t* out) {
  const uint8_t* p = piece_at(begin, end, k, spec.json);
  const uint8_t* stop = piece_at(begin, end, k + 1, spec.json);
  WriteSink sink{out};
  if (!spec.json) {
    sink.put(p, (int)(stop - p));
    return;
  }
  bool lone;
  decode_string(p, stop, sink, lone, true);
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
// the other). block[0, size); outputs as the FFI call's (data[max_bytes], offsets[max_lines +
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
      if (long_line && spec.json && !long_field_span(raw, stop, spec, raw_end, string_end_by_rounds)) n = kGiveUp;
      int32_t piece[kLanes];
      if (n == kLongPending) {
        n = spec.sep_len;
        for (int k = 0; k < kLanes && n >= 0; ++k) {
          piece[k] = measure_piece(raw, raw_end, k, spec);
          n = piece[k] < 0 ? kGiveUp : n + piece[k];
        }
      }
      if (n == kGiveUp) bad_line = i;
      if (n >= 0) {
        if (docs < max_lines && bytes + n <= max_bytes) {
          uint8_t* out = data + bytes;
          if (long_line) {
            for (int k = 0; k < kLanes; ++k) {
              write_piece(raw, raw_end, k, spec, out);
              out += piece[k];
            }
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
