// Minimal C ABI over ffi/pretokenize.h (and one bpe_core.h rule) for tests/test_pretokenize.py
// (loaded with ctypes). Temporary, until the nanobind module exposes the pre-tokenizer.
#include "bpe_core.h"
#include "pretokenize.h"

extern "C" {

int bbpe_pretok_sequential(int pattern, const uint8_t* text, int n, const uint8_t* is_special,
                           uint8_t* piece_start) {
  return bbpe::pretokenize_sequential(pattern, text, n, is_special, piece_start) ? 0 : -1;
}

int bbpe_pretok_direct(int pattern, const uint8_t* text, int n, const uint8_t* is_special,
                       uint8_t* piece_start) {
  return bbpe::pretokenize_direct(pattern, text, n, is_special, piece_start) ? 0 : -1;
}

int bbpe_pretok_chunked(int pattern, const uint8_t* text, int n, const uint8_t* is_special,
                        int chunk_bytes, int lookback, uint8_t* piece_start) {
  return bbpe::pretokenize_chunked(pattern, text, n, is_special, chunk_bytes, piece_start, lookback)
             ? 0 : -1;
}

int bbpe_pretok_lookback() { return bbpe::kPretokLookback; }

// The bit form of the leftmost-first merge selection (the kernel's lane-parallel merges).
uint32_t bbpe_leftmost_first_merges(uint32_t candidates) {
  return bbpe::leftmost_first_merges(candidates);
}

// General class (UCLS_*) of every code point 0..0x10FFFF into out[0x110000].
void bbpe_unicode_classes(uint8_t* out) {
  const bbpe::UnicodeTables& ut = bbpe::host_unicode_tables();
  for (uint32_t cp = 0; cp < 0x110000; ++cp) out[cp] = bbpe::unicode_general_class(cp, ut);
}

// CpClass of every byte of text (for debugging).
void bbpe_byte_classes(const uint8_t* text, int n, const uint8_t* is_special, uint8_t* out) {
  const bbpe::UnicodeTables& ut = bbpe::host_unicode_tables();
  for (int i = 0; i < n; ++i) out[i] = bbpe::byte_class(text, n, is_special, i, ut);
}

}  // extern "C"
