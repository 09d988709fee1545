// One long pre-tokenizer piece encoded from overlapping spans: the geometry of the spans
// and the rule that stitches two of them (the tile pipeline's huge pieces, cuda/huge_pieces.cuh).
//
// A piece longer than a tile is cut at the row's tile boundaries into chunks; each chunk's
// span is the chunk with about `margin` bytes either side, clipped to the piece, and is
// BPE-encoded on its own. Two valid encodings (ones BPE itself produces) that share a token
// join, at that token, into a valid encoding of their union, and a text has exactly one valid
// encoding (rust-gems `bpe` README, Corollaries I and III). So where the encodings of two
// neighbouring spans share a token (same start in the piece, same id), the left span's
// tokens up to it and the right span's after it are the piece's BPE there. A boundary
// without a shared token cannot be stitched: the piece is then merged whole.
//
// Runs (a letter or a space repeated) are where spans can miss: BPE of a run is periodic
// with a phase set by where the run's encoding starts, so a span that starts inside a run
// keeps a different phase from its neighbour's all the way through it. Spans therefore
// start at the piece's start plus a multiple of kStitchAlign, which keeps the phase of a run
// that the piece starts with (runs of one letter or of spaces have token periods dividing
// it). A run that starts inside the piece and reaches across a tile boundary by more than the
// margin still sends the piece to the whole-piece merge.
#pragma once

#include <cstdint>

#include "core/bbpe_hd.h"

namespace bbpe {

// Rows are cut into tiles of kTileBytes; a piece longer than that is encoded by spans.
// A build option (CMake BLOCKBPE_TILE_BYTES, both modules: the CPU module sizes the
// workspace) so that other sizes can be measured: smaller tiles put more blocks to work on a
// row and give each span fewer distinct ranks (merge passes), larger ones fewer spans to
// stitch. The size changes only where spans are cut, never the ids (see above).
#ifndef BBPE_TILE_BYTES
#define BBPE_TILE_BYTES 2048
#endif
constexpr int kTileBytes = BBPE_TILE_BYTES;
// Every block size (256, 512, 1024 threads) gives each thread the same whole number of a
// tile's bytes (cuda/tile_rows.cuh, tile_pipeline.cuh: kTileBytes / kThreads items).
static_assert(kTileBytes >= 1024 && kTileBytes % 1024 == 0, "kTileBytes: a multiple of 1024");
// Bytes a span reaches past its chunk on either side (at most; a test hook may lower it).
// Across three vocabularies and every adversarial kind of piece the shared token lay at most
// 11 bytes into the overlap, and 64 bytes failed only for runs of spaces (tokens longer than
// the overlap): docs/journal/2026-11.md, "Long rows".
constexpr int kStitchMargin = 256;
constexpr int kStitchAlign = 256;
// How far before its tile's start a span may begin (its start rounded down to the alignment).
constexpr int kSpanLead = kStitchMargin + kStitchAlign;
// A boundary without a shared token gets a second round: the right span encoded again from
// kReachBack bytes further back (a run across the boundary then starts with the span's own
// phase far enough before it to have settled; docs/journal/2026-11.md, "Long rows"), and searched
// again.
// One tile back, the span starts at its left neighbour's first byte (the same rounding of
// the same position, or the piece's start), so the two encodings share their start and differ
// only near the neighbour's end, where the shared token is looked for. (Exactness never depends
// on the geometry: every span is the BPE of a substring of the piece.)
constexpr int kReachBack = kTileBytes;
// A span overlaps its neighbours' spans only (the span of the tile after next starts
// past its end), so a stitch's search starts after the tile's left boundary's stitch token.
static_assert(kSpanLead + kStitchMargin <= kTileBytes, "spans reach at most one tile either side");

BBPE_HD bool huge_piece(int lo, int hi) { return hi - lo > kTileBytes; }

// The span of chunk k of the piece [lo, hi), where chunks are cut at the multiples of
// chunk_bytes (in the piece's coordinates: bytes of the row for tiles): from `margin` bytes
// before the chunk, rounded down to lo plus a multiple of `align`, to `margin` bytes after it,
// clipped to the piece. Tiles' spans (below) and a span's sub-spans
// (cuda/warp_spans.cuh) are cut by this one rule.
struct StitchSpan {
  int32_t lo, hi;
};
BBPE_HD StitchSpan chunk_span(int lo, int hi, int k, int chunk_bytes, int margin, int align) {
  const int chunk_lo = lo > k * chunk_bytes ? lo : k * chunk_bytes;
  const int chunk_hi = hi < (k + 1) * chunk_bytes ? hi : (k + 1) * chunk_bytes;
  const int start = chunk_lo - margin;
  return StitchSpan{start <= lo ? lo : lo + (start - lo) / align * align,
                      chunk_hi + margin < hi ? chunk_hi + margin : hi};
}
// The span of the chunk that the piece [lo, hi) has in row tile `tile` (its bytes of
// [tile * kTileBytes, (tile + 1) * kTileBytes)), as bytes [lo, hi) of the row.
// (0 <= margin <= kStitchMargin.)
BBPE_HD StitchSpan stitch_span(int lo, int hi, int tile, int margin) {
  return chunk_span(lo, hi, tile, kTileBytes, margin, kStitchAlign);
}

// The first index i in [from, n) with starts[i] >= at (starts ascending), else n.
BBPE_HD int first_start_at(const int32_t* starts, int from, int n, int32_t at) {
  int lo = from, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (starts[mid] < at) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Whether the right span's encoding also has the token (start, id): the index of that token
// in it, or -1. The stitch takes the first token of the left span (in its order) with a
// match; any shared token gives the same result, the first one makes it deterministic.
BBPE_HD int shared_token(const int32_t* ids, const int32_t* starts, int n, int32_t start, int32_t id) {
  const int j = first_start_at(starts, 0, n, start);
  return j < n && starts[j] == start && ids[j] == id ? j : -1;
}

}  // namespace bbpe
