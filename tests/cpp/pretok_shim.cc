// C ABI over ffi/pretok/ (sequential.h, chunked.h; and two core/bpe_core.h rules) for tests/test_pretokenize.py (loaded
// with ctypes): the pre-tokenizer operand that blockbpe_jax/pretok builds goes in as bytes.
#include <algorithm>
#include <type_traits>
#include <vector>

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

// Every byte's class (stage 0) two ways: out_each[i] = byte_class at i (the rule), out_chunks[i]
// from chunk_classes<chunk> over chunks of `chunk` bytes at base = chunk index * chunk with the
// chunk's bytes of the text valid, as the piece kernels call it (chunk 2, 4, 8 or 16; the host's
// byte_classes uses 16 only). Returns -1 when the operand does not fit or the size is not one.
int bbpe_chunk_classes(const uint8_t* op, int64_t op_bytes, const uint8_t* text, int n, const uint8_t* is_special,
                       int chunk, uint8_t* out_each, uint8_t* out_chunks) {
  bbpe::PretokView v;
  if (!bbpe::pretok_view(op, op_bytes, 1, /*normalizer=*/0, &v)) return -1;
  const bbpe::PretokTables& tab = v.tables[0];
  const bbpe::ClassTable ct = v.classes(0);
  for (int i = 0; i < n; ++i) out_each[i] = bbpe::byte_class(tab, text, n, is_special, i, ct);
  const auto by_chunks = [&](auto size) {
    constexpr int kChunk = decltype(size)::value;
    for (int base = 0; base < n; base += kChunk) {
      uint8_t c[kChunk];
      bbpe::chunk_classes<kChunk>(tab, text, n, is_special, base, std::min(kChunk, n - base), ct, c);
      for (int k = 0; k < kChunk && base + k < n; ++k) out_chunks[base + k] = c[k];
    }
    return 0;
  };
  switch (chunk) {
    case 2: return by_chunks(std::integral_constant<int, 2>{});
    case 4: return by_chunks(std::integral_constant<int, 4>{});
    case 8: return by_chunks(std::integral_constant<int, 8>{});
    case 16: return by_chunks(std::integral_constant<int, 16>{});
    default: return -1;
  }
}

// A host model of tile_pretokenize_once (cuda/tile_pipeline.cuh), stage 0: each tile of
// tile_bytes in chunks of `items` bytes, its edge states from the chunks within margin_bytes
// either side (edge_state), its flags written where both edges settle (settled[t] = 1), else
// left alone (settled[t] = 0). Returns -1 when the operand does not fit the layout.
int bbpe_pretokenize_tiles_once(const uint8_t* op, int64_t op_bytes, const uint8_t* text, int n,
                                const uint8_t* is_special, int tile_bytes, int items, int margin_bytes,
                                uint8_t* piece_start, uint8_t* settled) {
  bbpe::PretokView v;
  if (!bbpe::pretok_view(op, op_bytes, 1, /*normalizer=*/0, &v)) return -1;
  const bbpe::PretokTables& tab = v.tables[0];
  const bbpe::ClassTable ct = v.classes(0);
  const int margin = margin_bytes / items;
  const auto classes = [&](int at, uint8_t* out) {  // a chunk's classes (none past the row's ends)
    for (int i = 0; i < items; ++i)
      out[i] = at + i >= 0 && at + i < n ? bbpe::byte_class(tab, text, n, is_special, at + i, ct) : bbpe::kClassNone;
  };
  for (int lo = 0, tile = 0; lo < n; lo += tile_bytes, ++tile) {
    const int chunks = tile_bytes / items;
    std::vector<uint8_t> c(items);
    std::vector<uint16_t> key((size_t)(chunks + margin) * items);
    std::vector<uint64_t> after(margin), before_fwd(margin);
    for (int j = 0; j < margin; ++j) {
      classes(lo + tile_bytes + j * items, c.data());
      after[j] = bbpe::chunk_bwd_map<false>(tab, c.data(), items);
    }
    const int after_bytes = n - (lo + tile_bytes);
    uint8_t t = tab.bwd_init & 15;
    settled[tile] = 0;
    if (after_bytes > 0) {
      const int count = std::min(margin, (after_bytes + items - 1) / items);
      if (!bbpe::margin_edge_state(after.data(), count, after_bytes <= margin_bytes, tab.bwd_live, t, &t))
        continue;
    }
    // the tile's own chunks: backward (composed exactly), keys at margin * items on
    uint16_t* own_key = key.data() + (size_t)margin * items;
    for (int ch = chunks - 1; ch >= 0; --ch) {
      classes(lo + ch * items, c.data());
      t = bbpe::chunk_bwd_replay<false>(tab, c.data(), items, t, own_key + ch * items);
    }
    const int before = std::min(margin, lo / items);
    for (int j = 0; j < before; ++j) {  // chunk j before the tile, nearest first, T from the nearer ones
      classes(lo - (j + 1) * items, c.data());
      uint16_t* k = key.data() + (size_t)(margin - 1 - j) * items;
      t = bbpe::chunk_bwd_replay<false>(tab, c.data(), items, t, k);
      before_fwd[j] = bbpe::chunk_fwd_map<false>(tab, k, items);
    }
    uint8_t s = tab.fwd_init & 15;
    if (lo > 0 &&
        !bbpe::margin_edge_state(before_fwd.data(), before, lo <= margin_bytes, tab.fwd_live, s, &s))
      continue;
    for (int ch = 0; ch < chunks && lo + ch * items < n; ++ch)
      s = bbpe::chunk_fwd_replay<false>(tab, own_key + ch * items, items, s, piece_start + lo + ch * items,
                                        n - (lo + ch * items));
    settled[tile] = 1;
  }
  return 0;
}

// The bit form of the leftmost-first merge selection (the kernel's lane-parallel merges; 64
// bits: a warp's piece of up to 64 tokens).
uint32_t bbpe_leftmost_first_merges(uint32_t candidates) {
  return bbpe::leftmost_first_merges(candidates);
}
uint64_t bbpe_leftmost_first_merges64(uint64_t candidates) {
  return bbpe::leftmost_first_merges(candidates);
}

// Special-token matching at every position of text, for `count` specials of `data` at
// `offsets` (longest first): special_match_at alone (match[i], -1 for none; its bytes of text in
// len[i]), with SpecialStarts' help (match_with[i], len_with[i]), whether SpecialStarts lets the
// position through (may_start[i]) and whether it matched there by counting a run (by_run[i]).
void bbpe_special_starts(const int32_t* offsets, const uint8_t* data, int count, int escaped,
                         const uint8_t* text, int n, int32_t* match, int32_t* len, int32_t* match_with,
                         int32_t* len_with, uint8_t* may_start, uint8_t* by_run) {
  const bbpe::SpecialView specials{offsets, data, nullptr, count};
  bbpe::SpecialStarts starts;
  bbpe::build_special_starts(specials, escaped != 0, starts);
  for (int i = 0; i < n; ++i) {
    len[i] = len_with[i] = 0;
    match[i] = bbpe::special_match_at(specials, text, n, i, escaped != 0, nullptr, &len[i]);
    match_with[i] = bbpe::special_match_with(starts, specials, text, n, i, escaped != 0, len_with[i]);
    may_start[i] = bbpe::special_may_start(starts, text, n, i);
    by_run[i] = may_start[i] && bbpe::run_slot_kind(starts, text[i]) != bbpe::kNotRun;
  }
}

// The leftmost-first resolution of matches of lengths lens[0..n) (0: none) into is_special
// (zeroed first): accept_special_matches (order 0), its clusters walked from the last one
// back (order 1), as any order of the GPU's threads may walk them, or the matches listed in
// byte order and resolved in parts of order - 1 entries (order >= 2: accept_listed_specials).
void bbpe_special_accept(const int32_t* lens, int n, int order, uint8_t* is_special) {
  for (int i = 0; i < n; ++i) is_special[i] = 0;
  if (order == 0) {
    bbpe::accept_special_matches(lens, n, is_special);
    return;
  }
  if (order >= 2) {
    struct Listed {  // the list's entries from `from` on
      const int32_t* lens;
      const std::vector<int>& at;
      int from;
      int first(int e) const { return at[from + e]; }
      int len(int e) const { return lens[at[from + e]]; }
    };
    std::vector<int> at;
    for (int i = 0; i < n; ++i)
      if (lens[i] > 0) at.push_back(i);
    int reach = 0;
    for (int from = 0; from < (int)at.size(); from += order - 1)
      reach = bbpe::accept_listed_specials(Listed{lens, at, from}, std::min(order - 1, (int)at.size() - from), reach,
                                           is_special);
    return;
  }
  int longest = 0;
  for (int i = 0; i < n; ++i) longest = lens[i] > longest ? lens[i] : longest;
  for (int i = n - 1; i >= 0; --i)
    if (lens[i] > 0 && !bbpe::special_covered(lens, i, longest)) bbpe::accept_special_cluster(lens, n, i, is_special);
}

}  // extern "C"
