// C ABI over ffi/pretok/ (sequential.h, chunked.h; and two core/bpe_core.h rules) for tests/test_pretokenize.py (loaded
// with ctypes): the pre-tokenizer operand that blockbpe_jax/pretok builds goes in as bytes.
#include "core/bpe_core.h"
#include "pretok/chunked.h"
#include "pretok/sequential.h"
#include "pretok/tables.h"

extern "C" {

// chunk_bytes 0: pretokenize_sequential; > 0: pretokenize_chunked with that chunk size,
// lookback (< 0: always scan) and threads. Returns -1 when the operand does not fit the layout.
int bbpe_pretokenize(const uint8_t* op, int64_t op_bytes, int stages, const uint8_t* text, int n,
                     const uint8_t* is_special, int chunk_bytes, int lookback, int threads,
                     uint8_t* piece_start) {
  bbpe::PretokView v;
  if (!bbpe::pretok_view(op, op_bytes, stages, /*normalizer=*/0, &v)) return -1;
  for (int i = 0; i < n; ++i) piece_start[i] = 0;
  if (chunk_bytes == 0)
    bbpe::pretokenize_sequential(v, text, n, is_special, piece_start);
  else
    bbpe::pretokenize_chunked(v, text, n, is_special, chunk_bytes, piece_start, lookback, threads);
  return 0;
}

int bbpe_pretok_lookback() { return bbpe::kPretokLookback; }

// The bit form of the leftmost-first merge selection (the kernel's lane-parallel merges; 64
// bits: a warp's piece of up to 64 tokens).
uint32_t bbpe_leftmost_first_merges(uint32_t candidates) {
  return bbpe::leftmost_first_merges(candidates);
}
uint64_t bbpe_leftmost_first_merges64(uint64_t candidates) {
  return bbpe::leftmost_first_merges(candidates);
}

// Special-token matching at every position of text, for `count` specials of `data` at
// `offsets` (longest first): special_match_at alone (match[i], -1 for none), with SpecialStarts'
// help (match_with[i]), and whether SpecialStarts lets the position through (may_start[i]).
void bbpe_special_starts(const int32_t* offsets, const uint8_t* data, int count, int escaped,
                         const uint8_t* text, int n, int32_t* match, int32_t* match_with, uint8_t* may_start) {
  const bbpe::SpecialView specials{offsets, data, nullptr, count};
  bbpe::SpecialStarts starts;
  bbpe::build_special_starts(specials, escaped != 0, starts);
  for (int i = 0; i < n; ++i) {
    match[i] = bbpe::special_match_at(specials, text, n, i, escaped != 0);
    match_with[i] = bbpe::special_match_with(starts, specials, text, n, i, escaped != 0);
    may_start[i] = bbpe::special_may_start(starts, text, n, i);
  }
}

}  // extern "C"
