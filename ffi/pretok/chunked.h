// The CUDA block decomposition of the pre-tokenizer emulated on the host (chunk maps, edge
// states, the scans when edge_state does not reach), so that the CPU tests check the parallel
// algorithm itself on any chunk size (tests/cpp/pretok_shim.cc). No handler runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "pretok/automata.h"
#include "pretok/tables.h"

namespace bbpe {

// Host emulation of the parallel decomposition, chunks of chunk_bytes (>= 1) bytes, the
// whole string as one tile: per-chunk maps; each chunk's edge state from edge_state (at most
// `lookback` chunks away) or, if that fails for any chunk, from exclusive scans of the maps
// (backward from the last chunk, then forward); replays.
inline void pretokenize_chunked(const PretokView& v, const uint8_t* text, int n,
                                const uint8_t* is_special_byte, int chunk_bytes,
                                uint8_t* piece_start, int lookback = kPretokLookback) {
  if (n <= 0) return;
  const int chunk = chunk_bytes < 1 ? 1 : chunk_bytes;
  const int nch = (n + chunk - 1) / chunk;
  std::vector<uint8_t> cls(n), edge(nch);
  std::vector<uint16_t> key(n);
  std::vector<uint64_t> map(nch);
  auto cnt = [&](int c) { return (c + 1) * chunk <= n ? chunk : n - c * chunk; };
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    const ClassTable ct = v.classes(st);
    for (int i = 0; i < n; ++i)
      cls[i] = stage_class(tab, text, n, is_special_byte, i, ct, st > 0 && piece_start[i]);
    // edge[c] = T after chunk c.
    for (int c = 0; c < nch; ++c) map[c] = chunk_bwd_map(tab, &cls[c * chunk], cnt(c));
    bool ok = true;
    for (int c = 0; c < nch; ++c)
      ok &= edge_state(map.data(), c + 1, 1, nch - 1 - c, tab.bwd_live, tab.bwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = nch - 1; c >= 0; --c) { edge[c] = map_apply(acc, tab.bwd_init & 15); acc = map_then(acc, map[c]); }
    }
    for (int c = 0; c < nch; ++c) chunk_bwd_replay(tab, &cls[c * chunk], cnt(c), edge[c], &key[c * chunk]);
    // edge[c] = S before chunk c.
    for (int c = 0; c < nch; ++c) map[c] = chunk_fwd_map(tab, &key[c * chunk], cnt(c));
    ok = true;
    for (int c = 0; c < nch; ++c)
      ok &= edge_state(map.data(), c - 1, -1, c, tab.fwd_live, tab.fwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = 0; c < nch; ++c) { edge[c] = map_apply(acc, tab.fwd_init & 15); acc = map_then(acc, map[c]); }
    }
    for (int c = 0; c < nch; ++c)
      chunk_fwd_replay(tab, &key[c * chunk], cnt(c), edge[c], &piece_start[c * chunk], cnt(c));
  }
}

}  // namespace bbpe
