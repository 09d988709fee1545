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
//      starts, or "give up" (core/json_rules.h);
//   3. an exclusive scan of the documents (each line's document index) and of their bytes
//      (each document's offset);
//   4. per line, write_line: the document decoded into place, its offset and line recorded.
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

// measure_line's lengths that are not a document's.
constexpr int32_t kNotDocument = -1, kGiveUp = -2;

// The workspace's int32 arrays, by the block's capacity (bytes) and max_lines (the documents'
// capacity: lines beyond it are "too many lines", a block ending in a newline has one empty
// line more).
struct SplitWorkspace {
  int64_t tiles, lines, chunks;  // newline tiles, line slots (max_lines + 1), scan chunks of lines
  int64_t tile_newlines, line_start, raw_begin, length, doc_of, offset_of, chunk_docs, chunk_bytes, counters;
  int64_t words;  // int32 words in all
};
constexpr int64_t kScanChunk = 512;  // lines per block of the lines' scan (one thread each on a GPU)
constexpr int kCounters = 4;          // newlines, bad line, docs, bytes
inline SplitWorkspace split_workspace(int64_t block_bytes, int64_t max_lines) {
  SplitWorkspace w{};
  w.tiles = (block_bytes + kSplitTile - 1) / kSplitTile;
  w.lines = max_lines + 1;
  w.chunks = (w.lines + kScanChunk - 1) / kScanChunk;
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
  const uint8_t* field_begin = nullptr;
  int32_t field_len = 0;
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
    CountSink count;
    bool lone;
    if (!decode_string(p, end, count, lone) || lone) return false;
    field_len = count.n;
    return true;
  }
};

// Plain lines: the line's bytes but one trailing '\r'.
BBPE_HD const uint8_t* plain_end(const uint8_t* p, const uint8_t* end) {
  return end > p && end[-1] == '\r' ? end - 1 : end;
}

// Line [p, end) (no newline): its document's bytes, separator included, with where its field's
// string starts in *raw_begin (a plain line: the line's start); kNotDocument (blank, or empty)
// or kGiveUp.
BBPE_HD int32_t measure_line(const uint8_t* p, const uint8_t* end, const SplitSpec& spec, const uint8_t** raw_begin) {
  *raw_begin = p;
  if (!spec.json) {
    const uint8_t* body_end = plain_end(p, end);
    if (body_end == p) return kNotDocument;
    for (const uint8_t* q = p; q < body_end;) {
      if (plain_ascii8(q, body_end, false)) {
        q += 8;
        continue;
      }
      const int n = *q < 0x80 ? 1 : utf8_sequence(q, body_end);
      if (n == 0) return kGiveUp;
      q += n;
    }
    return (int32_t)(body_end - p) + spec.sep_len;
  }
  if (blank(p, end)) return kNotDocument;
  MeasureStrings strings{spec};
  if (!parse_document(p, end, strings)) return kGiveUp;
  *raw_begin = strings.field_begin;
  return strings.field_len + spec.sep_len;
}

// The document measure_line measured, written at `out`: the field's string decoded from
// raw_begin (a plain line: its bytes), then the separator. `end`: the line's end.
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

// The CPU executor: the steps above one after the other. block[0, size); outputs as the FFI
// call's (data[max_bytes], offsets[max_lines + 1], lines[max_lines], status[kStatusSlots]).
inline void split_lines_host(const uint8_t* block, int64_t size, const SplitSpec& spec, int64_t max_lines,
                             int64_t max_bytes, uint8_t* data, int32_t* offsets, int32_t* lines, int32_t* status) {
  const uint8_t* end = block + size;
  int64_t newlines = 0, bad_line = -1, docs = 0, bytes = 0;
  for (const uint8_t* p = block; p < end; ++p) newlines += *p == '\n';
  if (newlines <= max_lines) {
    // measure every line, then write (the host reader's layout: documents in line order)
    const uint8_t* line = block;
    for (int64_t i = 0; i <= newlines && bad_line < 0; ++i) {
      const uint8_t* stop = line;
      while (stop < end && *stop != '\n') ++stop;
      const uint8_t* raw;
      const int32_t n = measure_line(line, stop, spec, &raw);
      if (n == kGiveUp) bad_line = i;
      if (n >= 0) {
        if (docs < max_lines && bytes + n <= max_bytes) {
          write_line(raw, stop, spec, data + bytes);
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
