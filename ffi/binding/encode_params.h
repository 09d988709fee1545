// The operands and attributes of one encode call, as both handlers see them after validation,
// and where the CUDA kernel keeps its per-string arrays.
#pragma once

#include <cstdint>

#include "core/bpe_core.h"
#include "core/char_symbols.h"
#include "core/span_stitch.h"
#include "pretok/nfc.h"
#include "pretok/nfc_normalize.h"
#include "pretok/tables.h"

namespace bbpe {

// Strings up to this many bytes are tokenized in shared memory; longer ones use a global
// workspace that the caller passes as an extra output (see workspace_bytes).
constexpr int kSmemMaxLen = 8192;

// Per string position the kernel needs
//   core arrays: text, piece-start and special-byte flags (1 byte each), tokens and pair
//                ranks (int32 each): what exact mode touches on its common path;
//   pass arrays: the second token and rank buffers and the merged ids (int32 each), used
//                only by the block-wide merge passes (long pieces, and bytes mode).
constexpr int kCoreBytesPerPosition = 3 + 2 * 4;
constexpr int kPassBytesPerPosition = 3 * 4;
constexpr int kBytesPerPosition = kCoreBytesPerPosition + kPassBytesPerPosition;

// Positions per string: one more than the string's bytes (room for SentencePiece's dummy
// prefix), padded to a multiple of 16 so every array stays 16-byte aligned.
BBPE_HD int64_t padded_len(int64_t len) { return (len + 1 + 15) / 16 * 16; }

// Where the arrays live. Up to kSmemMaxLen bytes, the core arrays are in shared memory; the
// pass arrays too in bytes mode (every string runs the passes), but in exact mode and for
// SentencePiece BPE they go to the global workspace: passes are rare there, and a smaller
// shared footprint lets more blocks share an SM. Past kSmemMaxLen everything is in the
// workspace.
BBPE_HD bool passes_in_smem(int64_t max_len, int pretok_stages, int symbols) {
  return max_len <= kSmemMaxLen && pretok_stages == kModeBytes && symbols == kSymbolsBytes;
}
BBPE_HD int64_t smem_bytes_per_string(int64_t max_len, int pretok_stages, int symbols) {
  if (max_len > kSmemMaxLen) return 0;
  const int64_t cap = padded_len(max_len < 1 ? 1 : max_len);
  return cap * (passes_in_smem(max_len, pretok_stages, symbols) ? kBytesPerPosition : kCoreBytesPerPosition);
}
// Long rows: in exact mode with a one-stage pre-tokenizer, rows wider than kSmemMaxLen go
// through the tile pipeline (cuda/tile_pipeline.cuh): one block per kTileBytes bytes of a row, the
// row's arrays in the workspace as for one block, then one TileInfo per tile. The choice is
// by shape (the host never reads the lengths); other modes keep one block per string. A piece
// longer than a tile is encoded by overlapping spans (core/span_stitch.h) in span frames
// after the tiles.
// A batch of at most kFewRows rows wider than a tile is tiled too: one block per row would leave
// most SMs idle, and a piece of several KiB would be merged by one block, pass after pass over
// all of it (CJK 8 KiB: 20 ms in one block, 1.9 ms tiled; docs/journal/2026-11.md, "Tile size decided").
constexpr int64_t kFewRows = 16;
BBPE_HD bool tiled_rows(int64_t batch, int64_t max_len, int pretok_stages, int symbols) {
  const bool wide = max_len > kSmemMaxLen || (batch <= kFewRows && max_len > kTileBytes);
  return wide && pretok_stages == 1 && symbols == kSymbolsBytes;
}
BBPE_HD int64_t tiles_per_row(int64_t max_len) { return (max_len + kTileBytes - 1) / kTileBytes; }
// What a tile hands to the kernels after it. Positions are within the row.
struct TileInfo {
  uint64_t bwd_map;    // pre-tokenizer: backward map of the tile (T after it -> T at its start)
  uint64_t fwd_map;    // forward map (S before it -> S after it)
  int32_t n_matches;   // special-token matches starting in the tile (listed in the row's rank array)
  int32_t walk_exit;   // leftmost-first acceptance entering at the tile's start: the next free
                       // position after the tile's last accepted match (or the tile's start)
  int32_t walk_entry;  // the next free position when the row's acceptance reaches the tile
  int32_t first;       // the first segment start in the tile (its tokens are at merged[first..])
  int32_t count;       // tokens of the segments that start in the tile, but a huge piece
  int32_t not_nfc;     // a byte of the tile shows that the row is not normalized
  // Huge pieces (longer than a tile, core/span_stitch.h). Span 0 of a tile is its chunk of
  // the huge piece that covers the tile's start, span 1 its chunk of the one that starts in it.
  int32_t huge_lo, huge_hi;  // the huge piece that starts in the tile (the last segment), or -1
  int32_t cont_lo, cont_hi;  // the huge piece that started before the tile and covers its start, or -1
  int32_t fallback;          // (tile of huge_lo) a boundary of the piece has no shared token:
  int32_t huge_count;        //   the whole piece merged, huge_count tokens at merged[huge_lo..]
  int32_t span_count[2];     // tokens of each span (cuda/huge_pieces.cuh)
  int32_t emit_from[2];      // each span's tokens [emit_from, emit_to) go to the output:
  int32_t emit_to[2];        //   from after the shared token on its left to the one on its right
  int32_t reach;       // span 0 had no shared token on its left: 1 + the reach frame where the
                       // second round encodes it again, or 0
  int32_t reach_used;  // (tile 0) reach frames of the row taken
  int32_t tokens_before;  // (row_token_offsets) the row's tokens in the tiles before this one
  int32_t any_huge;    // (row 0's tile 0) a tile of the call holds a huge piece (call_has_huge)
  int32_t any_unsettled;  // (row 0's tile 0) a tile's pre-tokenizer edges did not settle in one
                          // pass (tile_pretokenize_once): the call runs the three passes
  uint8_t t_after;     // T after the tile
  uint8_t s_before;    // S before the tile
  uint8_t pad[2];
};
static_assert(sizeof(TileInfo) % 16 == 0, "rows stay 16-byte aligned");

// One block per string: its slice of the workspace.
BBPE_HD int64_t workspace_bytes_per_string(int64_t max_len, int pretok_stages, int symbols) {
  const int64_t cap = padded_len(max_len < 1 ? 1 : max_len);
  if (max_len > kSmemMaxLen) return cap * kBytesPerPosition;
  return passes_in_smem(max_len, pretok_stages, symbols) ? 0 : cap * kPassBytesPerPosition;
}
// The same rule as pointers: where one block's core and pass arrays start, given its dynamic
// shared memory and its slice of the workspace (workspace_bytes_per_string bytes).
struct BlockPlacement {
  uint8_t* core;
  uint8_t* pass;
};
BBPE_HD BlockPlacement place_block_arrays(uint8_t* smem, uint8_t* ws, int64_t max_len, int pretok_stages,
                                          int symbols) {
  const int64_t core_bytes = padded_len(max_len < 1 ? 1 : max_len) * kCoreBytesPerPosition;
  if (max_len > kSmemMaxLen) return BlockPlacement{ws, ws + core_bytes};
  return BlockPlacement{smem, passes_in_smem(max_len, pretok_stages, symbols) ? smem + core_bytes : ws};
}
// The tile pipeline: a row's slice (its arrays as one block would place them, its tiles, then
// one span frame per tile: the positions [tile start - kSpanLead, tile end +
// kStitchMargin) of five int32 arrays, room for both spans a tile can have, which never
// overlap there; spans overlap each other, so they cannot share the row's arrays).
constexpr int kFrameArrays = 5;
BBPE_HD int64_t frame_positions() { return padded_len(kSpanLead + kTileBytes + kStitchMargin); }
// Then the reach frames, for the second round (a span 0 encoded again from kReachBack bytes
// earlier: positions [tile start - kSpanLead - kReachBack, tile end + kStitchMargin)), one per
// kReachShare tiles, taken in turn by the boundaries that need one; a boundary that finds none
// left sends its piece to the whole-piece merge. (The CPU model of the spans needed the
// second round at up to a fifth of a piece's boundaries: docs/journal/2026-11.md, "Long rows".)
constexpr int kReachShare = 4;
BBPE_HD int64_t reach_positions() { return padded_len(kSpanLead + kReachBack + kTileBytes + kStitchMargin); }
BBPE_HD int64_t reach_frames_per_row(int64_t max_len) { return (tiles_per_row(max_len) + kReachShare - 1) / kReachShare; }
// Where a tiled row's TileInfo array starts in its workspace (after its per-position arrays).
BBPE_HD int64_t tile_infos_at(int64_t max_len) { return padded_len(max_len) * kBytesPerPosition; }
BBPE_HD int64_t workspace_bytes_per_tiled_row(int64_t max_len) {
  return tile_infos_at(max_len) + tiles_per_row(max_len) * (int64_t)sizeof(TileInfo) +
         (tiles_per_row(max_len) * frame_positions() + reach_frames_per_row(max_len) * reach_positions()) *
             kFrameArrays * 4;
}
// The size of the workspace output (at least one byte: XLA buffers are never empty).
BBPE_HD int64_t workspace_bytes(int64_t batch, int64_t max_len, int pretok_stages, int symbols) {
  const int64_t total = batch * (tiled_rows(batch, max_len, pretok_stages, symbols)
                                     ? workspace_bytes_per_tiled_row(max_len)
                                     : workspace_bytes_per_string(max_len, pretok_stages, symbols));
  return total < 1 ? 1 : total;
}
// With the NFC normalization operand, the CUDA pre-pass's buffers follow the encode's in the
// workspace (cuda/nfc_prepass.cuh: the rewritten rows, of the batch's shape, then two int32
// and a byte per row), from this 256-aligned offset; the workspace then has
// nfc_workspace_bytes (where it has less, as a corpus window's, the pre-pass allocates them).
BBPE_HD int64_t nfc_prepass_at(int64_t batch, int64_t max_len, int pretok_stages, int symbols) {
  return (workspace_bytes(batch, max_len, pretok_stages, symbols) + 255) / 256 * 256;
}
BBPE_HD int64_t nfc_prepass_rows_bytes(int64_t batch, int64_t max_len) {  // the rows, then the rest
  return (batch * max_len + 255) / 256 * 256;
}
BBPE_HD int64_t nfc_prepass_bytes(int64_t batch, int64_t max_len) {
  return nfc_prepass_rows_bytes(batch, max_len) + batch * 9;
}
BBPE_HD int64_t nfc_workspace_bytes(int64_t batch, int64_t max_len, int pretok_stages, int symbols) {
  return nfc_prepass_at(batch, max_len, pretok_stages, symbols) + nfc_prepass_bytes(batch, max_len);
}

struct EncodeParams {
  const uint8_t* data;      // [batch, max_len]
  const int32_t* lengths;   // [batch]
  int64_t batch;
  int32_t max_len;          // L
  int32_t max_tokens;       // T
  int32_t pad_id;
  int32_t pretok_stages;    // stages of the pre-tokenizer; kModeBytes (0): none
  int32_t symbols;          // kSymbolsBytes or kSymbolsChars (core/char_symbols.h)
  int32_t stitch_margin;    // long rows: bytes a huge piece's span reaches past its chunk
                            // (kStitchMargin; lower only through the CUDA handler's test hook,
                            // where -1 fails every stitch; its flags kNoSecondRound and
                            // kNoFallback, cuda/huge_pieces.cuh)
  CharTable chars;          // with kSymbolsChars: the character tables
  PretokView pretok;        // their tables (pretok/tables.h)
  NfcPairs nfc_pairs;       // with pretok.nfc: the composition pairs (pretok/nfc.h)
  NfcOperand nfc_rewrite;   // set: each row is normalized to NFC first, no check (pretok/nfc_normalize.h)
  VocabView vocab;
  SpecialView special;
  int32_t* ids;             // [batch, max_tokens]
  int32_t* counts;          // [batch] true token count (> max_tokens means truncated)
  uint8_t* workspace;       // CUDA: [workspace_bytes(batch, max_len, pretok_stages, symbols)], with the
                            // NFC operand [nfc_workspace_bytes(...)]; CPU: unused
  int64_t workspace_size;
  int32_t pending_only = 0; // CUDA, set by the handler alone: encode_kernel does only the rows whose
                            // count is kCountPending (the piece kernel's leftovers, cuda/piece_kernel.cuh)
};

// The count the piece kernel (cuda/piece_kernel.cuh) leaves on a row for encode_kernel to
// encode; never returned (encode_kernel overwrites it in the same call).
constexpr int32_t kCountPending = -3;

}  // namespace bbpe
