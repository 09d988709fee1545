// The operands and attributes of one encode call, as both handlers see them after validation.
#pragma once

#include <cstdint>

#include "bpe_core.h"

namespace bbpe {

// Strings up to this many bytes are tokenized in shared memory; longer ones use a global
// workspace that the caller passes as an extra output (see workspace_bytes_per_string).
constexpr int kSmemMaxLen = 8192;

// Per string position: text, piece-start and special-byte flags (1 byte each) and five int32
// arrays (two token buffers, two rank buffers, merged ids).
constexpr int kBytesPerPosition = 3 + 5 * 4;

// Positions are padded to a multiple of 16 so every array stays 16-byte aligned.
BBPE_HD int64_t padded_len(int64_t len) { return (len + 15) / 16 * 16; }
BBPE_HD int64_t workspace_bytes_per_string(int64_t len) {
  return kBytesPerPosition * padded_len(len < 1 ? 1 : len);
}

struct EncodeParams {
  const uint8_t* data;      // [batch, max_len]
  const int32_t* lengths;   // [batch]
  int64_t batch;
  int32_t max_len;          // L
  int32_t max_tokens;       // T
  int32_t pad_id;
  int32_t mode;             // kModeBytes or a pattern id (pretokenize.h)
  VocabView vocab;
  SpecialView special;
  int32_t* ids;             // [batch, max_tokens]
  int32_t* counts;          // [batch] true token count (> max_tokens means truncated)
  uint8_t* workspace;       // [batch * workspace_bytes_per_string(L)] or unused
};

}  // namespace bbpe
