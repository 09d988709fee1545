// The pre-tokenizer run sequentially: what the CPU handler runs, and the reference the parallel
// decompositions are tested against (pretok/chunked.h, pretok/block_pretokenizer.cuh).
#pragma once

#include <cstdint>
#include <vector>

#include "pretok/automata.h"
#include "pretok/tables.h"

namespace bbpe {

// Reference: per stage one pass backward, one pass forward (this is what the CPU handler
// runs). piece_start must be zero when there are no stages.
inline void pretokenize_sequential(const PretokView& v, const uint8_t* text, int n,
                                   const uint8_t* is_special_byte, uint8_t* piece_start) {
  if (n <= 0) return;
  std::vector<uint16_t> key(n);
  std::vector<uint8_t> cls(n);
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    const ClassTable ct = v.classes(st);
    byte_classes(tab, text, n, is_special_byte, ct, cls.data());
    uint8_t t = tab.bwd_init & 15;
    for (int i = n - 1; i >= 0; --i) {
      const uint8_t c = with_boundary(cls[i], st > 0 && piece_start[i]);
      key[i] = (uint16_t)(c * 16 + t);
      t = map_apply(bwd_step(tab, c), t);
    }
    uint8_t s = tab.fwd_init & 15;
    for (int i = 0; i < n; ++i) {
      piece_start[i] = fwd_flag(tab, key[i], s);
      s = map_apply(fwd_step(tab, key[i]), s);
    }
  }
}

}  // namespace bbpe
