// The CUDA block decomposition of the pre-tokenizer on the host (chunk maps with what each chunk
// fixes alone, edge states, the scans when edge_state does not reach, replays), as piece_kernel
// runs it: the CPU tests check the parallel algorithm itself on any chunk size through it
// (tests/cpp/pretok_shim.cc), and the host encode of one long text runs it with a chunk per
// thread (cpu/encode_cpu.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/host_threads.h"
#include "pretok/automata.h"
#include "pretok/tables.h"

namespace bbpe {

// Chunks of chunk_bytes (>= 1) bytes, the whole string as one tile: per-chunk maps; each
// chunk's edge state from edge_state (at most `lookback` chunks away) or, if that fails for any
// chunk, from exclusive scans of the maps (backward from the last chunk, then forward);
// replays. The per-chunk steps run on up to `threads` threads, the edge states on this one.
inline void pretokenize_chunked(const PretokView& v, const uint8_t* text, int n,
                                const uint8_t* is_special_byte, int chunk_bytes,
                                uint8_t* piece_start, int lookback = kPretokLookback, int threads = 1) {
  if (n <= 0) return;
  const int chunk = chunk_bytes < 1 ? 1 : chunk_bytes;
  const size_t nch = ((size_t)n + chunk - 1) / chunk;
  std::vector<uint8_t> cls(n), edge(nch);
  std::vector<uint16_t> key(n);
  std::vector<uint64_t> map(nch);
  std::vector<int> replay(nch);  // per chunk: where the replay after the edge states starts / ends
  auto cnt = [&](size_t c) { return (int)std::min<int64_t>(chunk, n - (int64_t)c * chunk); };
  for (int st = 0; st < v.n_stages; ++st) {
    const PretokTables& tab = v.tables[st];
    const ClassTable ct = v.classes(st);
    on_threads(nch, threads, [&](size_t c) {  // classes, backward maps
      const int from = (int)c * chunk, to = from + cnt(c);
      byte_classes(tab, text, n, is_special_byte, ct, cls.data(), from, to);
      if (st > 0)
        for (int i = from; i < to; ++i) cls[i] = with_boundary(cls[i], piece_start[i]);
      map[c] = chunk_bwd_map_keys(tab, &cls[from], cnt(c), &replay[c], [&](int i, uint16_t k) { key[from + i] = k; });
    });
    // edge[c] = T after chunk c.
    bool ok = true;
    for (int c = 0; c < (int)nch; ++c)
      ok &= edge_state(map.data(), c + 1, 1, (int)nch - 1 - c, tab.bwd_live, tab.bwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = (int)nch - 1; c >= 0; --c) { edge[c] = map_apply(acc, tab.bwd_init & 15); acc = map_then(acc, map[c]); }
    }
    on_threads(nch, threads, [&](size_t c) {  // keys, forward maps
      chunk_bwd_replay_from(tab, &cls[c * chunk], cnt(c), edge[c], &key[c * chunk], replay[c]);
      uint8_t* flags = &piece_start[c * chunk];
      map[c] = chunk_fwd_map_flags(tab, &key[c * chunk], cnt(c), cnt(c), &replay[c], [&](int i, uint8_t f) { flags[i] = f; });
    });
    // edge[c] = S before chunk c.
    ok = true;
    for (int c = 0; c < (int)nch; ++c)
      ok &= edge_state(map.data(), c - 1, -1, c, tab.fwd_live, tab.fwd_init & 15, lookback, &edge[c]);
    if (!ok) {
      uint64_t acc = kMapIdentity;
      for (int c = 0; c < (int)nch; ++c) { edge[c] = map_apply(acc, tab.fwd_init & 15); acc = map_then(acc, map[c]); }
    }
    on_threads(nch, threads, [&](size_t c) {  // flags
      uint8_t* flags = &piece_start[c * chunk];
      chunk_fwd_replay_upto(tab, &key[c * chunk], cnt(c), edge[c], cnt(c), replay[c], [&](int i, uint8_t f) { flags[i] = f; });
    });
  }
}

}  // namespace bbpe
