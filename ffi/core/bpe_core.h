// The tokenization rules of blockbpe_jax, written once for both executors.
//
// Every function here is BBPE_HD: a plain inline function for g++ (the CPU handler) and a
// __host__ __device__ function for nvcc (the CUDA kernels). The CPU handler runs the merge
// passes sequentially; the CUDA kernel runs them with one thread block per string. Both call
// these functions for every decision (table probes, special-token matches, which pairs merge),
// so the CPU tests in CI vouch for the rules the GPU applies.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/bbpe_hd.h"
#include "core/special_tokens.h"

namespace bbpe {

// ---------------------------------------------------------------------------------------------
// Working tokens. A token is an int32: the id in the low 30 bits, plus a flag saying that no
// pair may be formed with the token before it (it starts a segment: a pre-tokenizer piece, a
// special token, or the text after one). Merges never cross a segment start.
constexpr int32_t kSegStart = 1 << 30;
constexpr int32_t kIdMask = kSegStart - 1;
constexpr int32_t kDeleted = -1;          // a position that compaction removes
constexpr int32_t kNoRank = 0x7fffffff;   // "this pair does not merge"

BBPE_HD int32_t token_id(int32_t tok) { return tok & kIdMask; }
// (kDeleted has every bit set, so it is tested first.)
BBPE_HD bool starts_segment(int32_t tok) { return tok >= 0 && (tok & kSegStart) != 0; }

// The `pretok_stages` attribute: 0 is the paper's byte-level mode (segments are the text
// between special tokens, no pre-tokenizer); otherwise the number of pre-tokenizer stages
// whose tables the call passes (pretok/tables.h).
constexpr int kModeBytes = 0;

// ---------------------------------------------------------------------------------------------
// Vocabulary tables, built by blockbpe_jax/tables/build.py (its docstring is the layouts' contract).
struct VocabView {
  const int32_t* pair_table;     // [pair_slots][4] rows (left, right, rank, merged id)
  uint32_t pair_mask;            // pair_slots - 1 (a power of two)
  const int32_t* byte_ids;       // [256] id of each single-byte token
  const int32_t* piece_table;    // [piece_slots][kPieceRowInts] rows (below)
  uint32_t piece_mask;           // piece_slots - 1
  const int32_t* token_offsets;  // [n_vocab + 1]
  const uint8_t* token_data;     // bytes of every token
  int32_t n_vocab;
  int32_t max_piece_len;         // longest piece in piece_table; 0: no piece is looked up whole
  int64_t token_data_len;        // bytes in token_data
  bool rank_is_id;               // every pair's rank is its merged id (tiktoken vocabularies)
  // The GPU's cache of merged misses ([miss_mask + 1][32], cuda/miss_cache.cuh), or null. The
  // one table the kernels write: an operand that only speeds them up (what it holds is what
  // the merges give), so a call's ids never depend on it.
  int32_t* miss_cache = nullptr;
  uint32_t miss_mask = 0;
};
constexpr int kMissCacheInts = 32;  // a row of the misses' cache: 128 bytes

// The pair hash: a multiply-xorshift mix of (left, right). tables.py mirrors it in NumPy.
BBPE_HD uint32_t pair_hash(uint32_t left, uint32_t right) {
  uint32_t h = left * 0x9E3779B1u + right;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// One 16-byte row of the pair table: one load on the GPU.
struct TableRow {
  int32_t a, b, c, d;
};
BBPE_HD TableRow load_row(const int32_t* table, uint32_t slot) {
  const int32_t* row = table + 4 * (size_t)slot;
#if defined(__CUDA_ARCH__)
  const int4 r = __ldg(reinterpret_cast<const int4*>(row));
  return TableRow{r.x, r.y, r.z, r.w};
#else
  return TableRow{row[0], row[1], row[2], row[3]};
#endif
}

// The pair table's second hash (two-choice hashing: a pair is in one of two slots).
BBPE_HD uint32_t pair_hash_alt(uint32_t left, uint32_t right) {
  return pair_hash(right ^ 0x5BD1E995u, left);
}

// Rank of the pair (left, right) and the id it merges into; kNoRank when it does not merge.
// Rows are (left, right, rank, merged id); the pair is in its first or its second slot
// (tables.py places it), so both rows are loaded at once: one memory round trip, hit or
// miss, and no loop (ids are >= 0; empty rows are -1).
BBPE_HD int32_t lookup_pair(const VocabView& v, int32_t left, int32_t right, int32_t* merged) {
  const TableRow r1 = load_row(v.pair_table, pair_hash((uint32_t)left, (uint32_t)right) & v.pair_mask);
  const TableRow r2 = load_row(v.pair_table, pair_hash_alt((uint32_t)left, (uint32_t)right) & v.pair_mask);
  const bool in1 = r1.a == left && r1.b == right, in2 = r2.a == left && r2.b == right;
  if (left < 0 || !(in1 || in2)) return kNoRank;
  if (merged) *merged = in1 ? r1.d : r2.d;
  return in1 ? r1.c : r2.c;
}

// Rank of the pair starting at position i of a token array of length n.
BBPE_HD int32_t rank_at(const VocabView& v, const int32_t* tok, int i, int n) {
  if (i + 1 >= n || starts_segment(tok[i + 1])) return kNoRank;
  return lookup_pair(v, token_id(tok[i]), token_id(tok[i + 1]), nullptr);
}

// The id that the pair (left_tok, right_tok), whose rank is `rank`, merges into: the rank
// itself in tiktoken vocabularies (rank_is_id), else a probe of the pair table.
BBPE_HD int32_t merged_id(const VocabView& v, int32_t rank, int32_t left_tok, int32_t right_tok) {
  if (v.rank_is_id) return rank;
  int32_t mid = -1;
  lookup_pair(v, token_id(left_tok), token_id(right_tok), &mid);
  return mid;
}

// The piece table: 32-byte rows of kPieceRowInts int32, laid out in blockbpe_jax/tables/build.py
// (its module docstring is the contract). A key of at most kShortKeyLen bytes is its row: its
// bytes as four little-endian words (zero past its length), then id and length; found from
// short_key_hash and confirmed by comparing the row with the key, with no read of token_data.
// A longer key's row is (FNV-1a hash, offset of its bytes in token_data, 0, 0, id, length),
// confirmed byte by byte. (Most pieces are short: a short key costs a few multiplies to hash and
// one row load to confirm, where FNV-1a and the byte compare cost instructions per byte, in
// lanes that diverge by piece length.) The key sits in the row's first 16 bytes and id and
// length in the second, so the GPU loads a row as two aligned int4. build.py mirrors both hashes.
constexpr int kPieceRowInts = 8;
constexpr int kShortKeyLen = 16;
constexpr uint32_t kPieceHashSeed = 0x811C9DC5u;

// A short key: its bytes 0..7 and 8..15 as little-endian words, zero past its length.
struct ShortKey {
  uint64_t lo, hi;
};

struct PieceRow {
  int32_t key[4];  // a short key's bytes; a long key's (hash, offset, 0, 0)
  int32_t id, len;
};
BBPE_HD PieceRow load_piece_row(const int32_t* table, uint32_t slot) {
  const int32_t* row = table + kPieceRowInts * (size_t)slot;
#if defined(__CUDA_ARCH__)
  const int4 k = __ldg(reinterpret_cast<const int4*>(row));
  const int4 t = __ldg(reinterpret_cast<const int4*>(row) + 1);
  return PieceRow{{k.x, k.y, k.z, k.w}, t.x, t.y};
#else
  return PieceRow{{row[0], row[1], row[2], row[3]}, row[4], row[5]};
#endif
}

BBPE_HD uint32_t piece_hash_step(uint32_t h, uint8_t byte) { return (h ^ byte) * 0x01000193u; }
// The halves multiplied by two odd constants, folded and multiplied again: every key bit then
// reaches the product's high word, whose low bits pick the slot (in one multiply's high word the
// slot bits see only the lower bytes); the length mixed in ("a" and "a\0" share their words).
BBPE_HD uint32_t short_key_hash(ShortKey key, int n) {
  uint64_t x = key.lo * 0x9E3779B97F4A7C15ull ^ key.hi * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 32;
  return (uint32_t)((x * 0x165667B19E3779F9ull) >> 32) ^ ((uint32_t)n * 0x85EBCA6Bu);
}
// Byte i (< kShortKeyLen) of a short key put in its place.
BBPE_HD void short_key_put(ShortKey& key, int i, uint8_t byte) {
  if (i < 8) key.lo |= (uint64_t)byte << (8 * i);
  else key.hi |= (uint64_t)byte << (8 * (i - 8));
}
// The first n (<= kShortKeyLen) bytes at p as a short key.
BBPE_HD ShortKey short_key(const uint8_t* p, int n) {
  ShortKey key{0, 0};
  for (int i = 0; i < n; ++i) short_key_put(key, i, p[i]);
  return key;
}
BBPE_HD uint32_t piece_hash(const uint8_t* p, int n) {
  if (n <= kShortKeyLen) return short_key_hash(short_key(p, n), n);
  uint32_t h = kPieceHashSeed;
  for (int i = 0; i < n; ++i) h = piece_hash_step(h, p[i]);
  return h;
}

// Linear probing from the home slot of hash h: the id of the first row that match(row) accepts,
// or -1 at an empty row.
template <class Match>
BBPE_HD int32_t probe_piece_rows(const VocabView& v, uint32_t h, Match match) {
  uint32_t slot = h & v.piece_mask;
  for (uint32_t probe = 0; probe <= v.piece_mask; ++probe) {
    const PieceRow r = load_piece_row(v.piece_table, slot);
    if (r.id < 0) return -1;
    if (r.id < v.n_vocab && match(r)) return r.id;
    slot = (slot + 1) & v.piece_mask;
  }
  return -1;
}

// The id of the short key `key` (n bytes, n <= kShortKeyLen), or -1: the row holds the key's
// four words and its length (a long key's row has a length over kShortKeyLen).
BBPE_HD int32_t lookup_short_key(const VocabView& v, ShortKey key, int n) {
  return probe_piece_rows(v, short_key_hash(key, n), [&](const PieceRow& r) {
    const uint32_t diff = ((uint32_t)r.key[0] ^ (uint32_t)key.lo) | ((uint32_t)r.key[1] ^ (uint32_t)(key.lo >> 32)) |
                          ((uint32_t)r.key[2] ^ (uint32_t)key.hi) | ((uint32_t)r.key[3] ^ (uint32_t)(key.hi >> 32));
    return r.len == n && diff == 0;
  });
}

// The id of the long key (n > kShortKeyLen bytes) whose FNV-1a hash is h: the row whose hash and
// length match and whose bytes in token_data pass same(q), or -1.
template <class SameBytes>
BBPE_HD int32_t lookup_long_key(const VocabView& v, uint32_t h, int n, SameBytes same) {
  return probe_piece_rows(v, h, [&](const PieceRow& r) {
    const int32_t offset = r.key[1];
    return (uint32_t)r.key[0] == h && r.len == n && offset >= 0 && offset + (int64_t)n <= v.token_data_len &&
           same(v.token_data + offset);
  });
}

// The id the piece table gives the piece p[0..n), or -1 (then the piece is merged). The table
// holds every token under the whole-piece rule (tiktoken, HF's ignore_merges), else only the
// tokens that the merges make from their own bytes (blockbpe_jax/tables/build.py), so a hit is
// the piece's encoding either way. A long key's hash hit is confirmed byte by byte against
// token_data (all bytes compared, no early exit: the loads are independent, so they overlap).
// read_short_key(p, n): the short key of p[0..n) (short_key; the piece kernel reads its shared
// memory by words instead).
template <class ReadShortKey>
BBPE_HD int32_t lookup_piece(const VocabView& v, const uint8_t* p, int n, ReadShortKey read_short_key) {
  if (n > v.max_piece_len) return -1;
  if (n <= kShortKeyLen) return lookup_short_key(v, read_short_key(p, n), n);
  return lookup_long_key(v, piece_hash(p, n), n, [&](const uint8_t* q) {
    int diff = 0;
    for (int i = 0; i < n; ++i) diff |= p[i] ^ q[i];
    return diff == 0;
  });
}
BBPE_HD int32_t lookup_piece(const VocabView& v, const uint8_t* p, int n) {
  return lookup_piece(v, p, n, [](const uint8_t* q, int m) { return short_key(q, m); });
}

// A (non-special) byte starts a segment at the start of the text, right after a special token,
// or where the pre-tokenizer starts a piece (bytes mode leaves piece_start all zero).
BBPE_HD bool byte_starts_segment(int i, const uint8_t* is_special, const uint8_t* piece_start) {
  return i == 0 || is_special[i - 1] || piece_start[i];
}

// The working token position i starts with: the byte's id; the special token's id at the
// first byte of an accepted special token (match = its index), kDeleted at its other bytes;
// flagged kSegStart where a segment starts.
BBPE_HD int32_t initial_token(const VocabView& v, const SpecialView& s, uint8_t byte,
                              const uint8_t* is_special, const uint8_t* piece_start, int32_t match,
                              int i) {
  if (is_special[i] == 2) return s.ids[match] | kSegStart;
  if (is_special[i]) return kDeleted;
  return v.byte_ids[byte] | (byte_starts_segment(i, is_special, piece_start) ? kSegStart : 0);
}

// ---------------------------------------------------------------------------------------------
// First-only ranks. A SentencePiece-style vocabulary's ranks are 2 * (place in the merge order)
// + flag (blockbpe_jax/char_bpe.py sets the flag). A flagged rank merges a pair of equal
// symbols (a, a) that some earlier-ranked merge (x, a) can take a symbol from: Gemma 4 ranks
// `\n`x30 + `\n` before `\n` + `\n`, so the reference, merging one pair at a time, grows a run
// from the left (32 newlines: 31 + 1) where a pass would pair it up (16 + 16). At a flagged
// rank a pass therefore merges only the first pair of each run of adjacent candidates (the one
// the reference merges first); the next passes see what that merge made. Adjacent candidates
// always lie in one segment (a pair across a segment start has no rank).
BBPE_HD bool first_only_rank(int32_t rank) { return (rank & 1) != 0; }
// Whether a candidate of rank `rank` waits because the pair before it (of rank `before`) is a
// candidate too.
BBPE_HD bool first_only_demoted(int32_t rank, int32_t before) {
  return first_only_rank(rank) && before == rank;
}
// The same for candidate bits (bit i: pair i; Bits uint32_t or uint64_t), `flagged` the
// candidates at a first-only rank.
template <typename Bits>
BBPE_HD Bits first_only_candidates(Bits cand, Bits flagged) {
  return cand & ~(flagged & (cand << 1));
}

// Where a pass at a first-only rank may go further, as the reference would (docs/families.md,
// "First-only ranks"; tests/vocab/test_gemma4.py):
//
// The walk: after the pass merged a candidate of a run of adjacent ones into `made`, the
// reference's next merge is the run's next candidate (two places on) unless a pair that merge
// formed, (before, made) or (made, after), ranks at or below the pass's rank (then that pair is
// the reference's next merge, and the walk stops for the next pass to take it). before / after:
// the neighbouring token ids, -1 where there is none (a segment's edge).
BBPE_HD bool first_only_walk_goes_on(const VocabView& v, int32_t before, int32_t made, int32_t after,
                                     int32_t lowest) {
  const auto above = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    const int32_t r = lookup_pair(v, left, right, nullptr);
    return r == kNoRank || r > lowest;
  };
  return above(before, made) && above(made, after);
}

// The fast-forward: a run of `run` tokens c (c c c ...) whose first pair is the pass's first
// candidate, at the first-only rank `lowest` of (c, c). Where (c^j, c) merges into c^(j+1) at a
// rank below `lowest` for every j from 2 until the longest run piece c^L (no (c^L, c) merge, and
// no (c^L, c^j) merge either: c^L never takes part again), the reference grows c^L from the
// run's first token, then c^L after it, ..., then c^r of what is left (r = run % L): each growth
// step ranks below every other pair of the segment (whose lowest was `lowest`), unless the token
// before the run (`before`, -1 for none) merges with the growing piece first, which is checked:
// (before, c^j) must rank above (c^j, c) while c^j grows, and (before, c^L) above `lowest` when a
// second chunk follows. Returns L with ids[0..L) = c^1..c^L (ids: kMaxRunChunk entries), or 0
// where any condition fails (the pass then merges as before).
constexpr int kMaxRunChunk = 64;
BBPE_HD int run_chunk_length(const VocabView& v, int32_t c, int32_t before, int run, int32_t lowest, int32_t* ids) {
  ids[0] = c;
  int32_t made = -1;
  if (lookup_pair(v, c, c, &made) != lowest) return 0;
  ids[1] = made;
  int length = 2;  // c^length is ids[length - 1]
  while (length < run) {  // grow c^length by one c, as the reference would next
    const int32_t grow = lookup_pair(v, ids[length - 1], c, &made);
    if (grow == kNoRank) break;  // c^length is the longest run piece
    if (grow >= lowest || length == kMaxRunChunk) return 0;
    if (before >= 0) {
      const int32_t r = lookup_pair(v, before, ids[length - 1], nullptr);
      if (r != kNoRank && r < grow) return 0;
    }
    ids[length++] = made;
  }
  if (run <= length) return length;  // the run is one chunk: c^run
  if (before >= 0) {
    const int32_t r = lookup_pair(v, before, ids[length - 1], nullptr);
    if (r != kNoRank && r < lowest) return 0;
  }
  for (int j = 0; j < length; ++j)
    if (lookup_pair(v, ids[length - 1], ids[j], nullptr) != kNoRank) return 0;
  return length;
}

// ---------------------------------------------------------------------------------------------
// One merge pass, as scan operators. A pass merges, in every segment, all non-overlapping
// occurrences of that segment's lowest-rank pair, leftmost first within runs such as "a a a"
// (the sweep of GPT-2's original encoder; on the shared vocabularies it reproduces tiktoken's
// and HF's sequential lowest-rank-first merging exactly).

// One pass of merge_segment (below) over tok[0..m) (rank[0..m) the pairs' ranks), whose lowest
// rank `lowest` is first met at pair `at`: the tokens rewritten in place, the pairs next to a
// merge ranked again; returns the new count. The GPU's block passes call it too, by one thread,
// for a segment whose pass walks (cuda/merge_passes.cuh).
template <bool kFirstOnly>
BBPE_HD_OUTLINE int merge_segment_pass(const VocabView& v, int32_t* tok, int32_t* rank, uint8_t* fresh, int m,
                                       int32_t lowest, int at) {
  int32_t ids[kMaxRunChunk];
  int run = 1, chunk = 0;  // the fast-forward's run at `at` and its chunk length (0: none)
  if (kFirstOnly && first_only_rank(lowest)) {
    const int32_t c = token_id(tok[at]);
    while (at + run < m && !starts_segment(tok[at + run]) && token_id(tok[at + run]) == c) ++run;
    if (token_id(tok[at + 1]) == c)
      chunk = run_chunk_length(v, c, at > 0 ? token_id(tok[at - 1]) : -1, run, lowest, ids);
  }
  int j = 0;
  if (chunk > 0) {  // the pass is the run's chunks alone
    for (; j < at; ++j) fresh[j] = 0;
    for (int k = 0; k < run; k += chunk, ++j) {
      tok[j] = ids[(run - k < chunk ? run - k : chunk) - 1] | (k == 0 ? tok[at] & kSegStart : 0);
      fresh[j] = 1;
    }
    for (int i = at + run; i < m; ++i, ++j) {
      tok[j] = tok[i], rank[j] = rank[i], fresh[j] = 0;
    }
  } else {
    const bool walks = kFirstOnly && first_only_rank(lowest);
    bool walking = false;  // the previous token of the output is a merge the walk goes on from
    for (int i = 0; i < m; ++i, ++j) {
      // (rank[i - 1] is still the pass's: the writes so far went to indices below i - 1, or
      // to i - 1 with the value it held)
      const bool merges = i + 1 < m && rank[i] == lowest &&
                          (walking || !(kFirstOnly && i > 0 && first_only_demoted(lowest, rank[i - 1])));
      tok[j] = merges ? (merged_id(v, lowest, tok[i], tok[i + 1]) | (tok[i] & kSegStart)) : tok[i];
      rank[j] = rank[i];  // still right unless this token or the next one is fresh
      fresh[j] = merges;
      if (walks && merges) {
        const int32_t before = j > 0 && !starts_segment(tok[j]) ? token_id(tok[j - 1]) : -1;
        const int32_t after = i + 2 < m && !starts_segment(tok[i + 2]) ? token_id(tok[i + 2]) : -1;
        walking = first_only_walk_goes_on(v, before, token_id(tok[j]), after, lowest);
      } else {
        walking = false;
      }
      i += merges;  // the right half is consumed
    }
  }
  m = j;
  for (int i = 0; i < m; ++i)
    if (fresh[i] || (i + 1 < m && fresh[i + 1])) rank[i] = rank_at(v, tok, i, m);
  return m;
}

// The pass rule applied by one thread to one segment held in tok[0..m), in place: pass after
// pass, merge every leftmost-first occurrence of the segment's lowest-rank pair. rank[0..m) is
// scratch; fresh[0..m) marks the tokens a pass created, so only pairs next to a merge are
// looked up again. Returns the segment's final token count. The CPU handler runs every segment
// this way; the CUDA kernel runs the same passes over pieces of up to 32 bytes lane-parallel
// (merge_in_lanes), of 33-64 bytes a warp each (merge_in_warp), both with
// leftmost_first_merges below, and everything else with the block-wide passes below, which
// apply the same rule to all segments at once.
// With kFirstOnly (SentencePiece-style vocabularies, whose ranks carry the first-only flag), a
// candidate at a first-only rank merges only where the pair before it is no candidate.
// At a first-only rank a pass also walks each run of candidates as far as the reference would
// (first_only_walk_goes_on), and where the segment's first candidate starts a run of one symbol
// whose pieces grow from the left, the pass is that run's chunks alone (run_chunk_length).
template <bool kFirstOnly = false>
BBPE_HD_OUTLINE int merge_segment(const VocabView& v, int32_t* tok, int32_t* rank, uint8_t* fresh, int m) {
  for (int i = 0; i < m; ++i) rank[i] = rank_at(v, tok, i, m);
  for (;;) {
    int32_t lowest = kNoRank;
    int at = 0;  // the segment's first candidate
    for (int i = 0; i + 1 < m; ++i)
      if (rank[i] < lowest) lowest = rank[i], at = i;
    if (lowest == kNoRank) return m;
    m = merge_segment_pass<kFirstOnly>(v, tok, rank, fresh, m, lowest, at);
  }
}

// The same leftmost-first selection for pairs given as bits (bit i: pair (i, i+1) has its
// segment's lowest rank; the CUDA kernel's lane-parallel merges of short pieces hold one token
// per lane). Only a run of equal tokens ("a a a a") makes consecutive candidates; in each run
// of set bits the 1st, 3rd, ... pair merges, as merge_segment's sweep does. Branch-free:
// adding the run starts that sit at even bits carries through exactly those runs and clears
// them, which tells the runs that start at an even bit from those that start at an odd one.
// Bits: uint32_t or uint64_t (one piece of up to 64 tokens, merge_in_warp).
template <typename Bits>
BBPE_HD Bits leftmost_first_merges(Bits cand) {
  const Bits even_bits = (Bits)0x5555555555555555ull;
  const Bits run_starts = cand & ~(cand << 1);
  const Bits even_runs = cand & ~(cand + (run_starts & even_bits));
  return (even_runs & even_bits) | (cand & ~even_runs & ~even_bits);
}

// Segmented minimum: the running minimum rank since the latest segment start, and where that
// segment started. A scan with this operator gives every pair its segment's minimum so far.
struct SegMin {
  int32_t start;  // index of the segment start seen last, or -1 if none yet
  int32_t rank;
};
BBPE_HD SegMin seg_min_combine(SegMin a, SegMin b) {
  if (b.start >= 0) return b;
  return SegMin{a.start, a.rank < b.rank ? a.rank : b.rank};
}

// Leftmost-first selection: pair i merges iff it is a candidate (its rank is its segment's
// minimum) and pair i-1 did not merge. Over a stretch of pairs this is a function of one bit
// (did the pair before the stretch merge?) that also yields how many tokens the stretch keeps
// (token i+1 of a merged pair goes away). Composing two stretches is associative, so a block
// scans it. Index [b] of each field is for "the pair before merged" == b.
struct MergeCarry {
  uint8_t out[2];    // did the stretch's last pair merge
  int32_t kept[2];   // tokens of the stretch that survive compaction
};
BBPE_HD MergeCarry merge_carry_identity() { return MergeCarry{{0, 1}, {0, 0}}; }
BBPE_HD MergeCarry merge_carry_combine(MergeCarry a, MergeCarry b) {
  MergeCarry c;
  for (int in = 0; in < 2; ++in) {
    c.out[in] = b.out[a.out[in]];
    c.kept[in] = a.kept[in] + b.kept[a.out[in]];
  }
  return c;
}
// Extends a stretch by one position: `cand` says pair i is a candidate.
BBPE_HD MergeCarry merge_carry_push(MergeCarry c, bool cand) {
  for (int in = 0; in < 2; ++in) {
    const bool prev_merged = c.out[in];
    c.kept[in] += prev_merged ? 0 : 1;  // token i survives unless it was the right half
    c.out[in] = cand && !prev_merged;
  }
  return c;
}

}  // namespace bbpe
