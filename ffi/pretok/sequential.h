// The pre-tokenizer run sequentially: what the CPU encode runs, and the reference the parallel
// decompositions are tested against (pretok/chunked.h, pretok/block_pretokenizer.cuh).
#pragma once

#include <cstdint>
#include <vector>

#include "pretok/automata.h"
#include "pretok/tables.h"

namespace bbpe {

// One stage: one pass backward, one pass forward over the bytes' classes (cls, scratch key).
// Where a step leaves the state as it was, the bytes after it in the same run of one class
// (one key, forward) leave it too: such runs (spaces, letters of a word) are filled without
// stepping.
template <bool kBoundaries>
inline void pretokenize_stage(const PretokTables& tab, int n, const uint8_t* cls, uint16_t* key,
                              uint8_t* piece_start) {
  const auto class_at = [&](int i) { return with_boundary(cls[i], kBoundaries && piece_start[i]); };
  uint8_t t = tab.bwd_init & 15;
  for (int i = n - 1; i >= 0;) {
    const uint8_t c = class_at(i);
    const uint16_t k = (uint16_t)(c * 16 + t);
    const uint8_t before = map_apply(bwd_step<kBoundaries>(tab, c), t);
    key[i--] = k;
    if (before == t)
      for (; i >= 0 && class_at(i) == c; --i) key[i] = k;
    t = before;
  }
  uint8_t s = tab.fwd_init & 15;
  for (int i = 0; i < n;) {
    const uint16_t k = key[i];
    const uint8_t flag = fwd_flag<kBoundaries>(tab, k, s);
    const uint8_t after = map_apply(fwd_step<kBoundaries>(tab, k), s);
    piece_start[i++] = flag;
    if (after == s)
      for (; i < n && key[i] == k; ++i) piece_start[i] = flag;
    s = after;
  }
}

// Reference: per stage one pass backward, one pass forward (what the CPU encode runs, but for
// one long text on many threads: pretok/chunked.h). piece_start must be zero when there are no
// stages.
inline void pretokenize_sequential(const PretokView& v, const uint8_t* text, int n,
                                   const uint8_t* is_special_byte, uint8_t* piece_start) {
  if (n <= 0) return;
  // (a short text's arrays on the stack: a short string's encode costs about two allocations)
  constexpr int kOnStack = 2048;
  uint16_t key_stack[kOnStack];
  uint8_t cls_stack[kOnStack];
  std::vector<uint16_t> key_heap(n > kOnStack ? n : 0);
  std::vector<uint8_t> cls_heap(n > kOnStack ? n : 0);
  uint16_t* key = n > kOnStack ? key_heap.data() : key_stack;
  uint8_t* cls = n > kOnStack ? cls_heap.data() : cls_stack;
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    byte_classes(tab, text, n, is_special_byte, v.classes(st), cls);
    if (st == 0)  // (no earlier stage: no boundaries to check in the inner loops)
      pretokenize_stage<false>(tab, n, cls, key, piece_start);
    else
      pretokenize_stage<true>(tab, n, cls, key, piece_start);
  }
}

}  // namespace bbpe
