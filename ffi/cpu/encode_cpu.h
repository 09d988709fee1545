// The CPU executor: the steps of the CUDA kernel (cuda/encode_kernel.cuh), one string at a time, each
// a sequential loop over the rules in core/bpe_core.h; every segment is merged by merge_segment.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/char_symbols.h"
#include "core/host_threads.h"
#include "pretok/chunked.h"
#include "pretok/lowercase.h"
#include "pretok/nfc.h"
#include "pretok/sequential.h"

namespace bbpe {

// The lowest (rank, position) of a segment's pairs, as a tournament over positions: leaf i holds
// pair i's key (rank << 32 | i; kNoKey when it does not merge), each node the least of its two
// children. Setting a leaf walks up until a node does not change, so the tree holds exactly one
// key per pair: no stale entries to pop, and one integer compare per level.
struct PairTree {
  static constexpr uint64_t kNoKey = ~(uint64_t)0;
  std::vector<uint64_t> node;  // [1, 2 * leaves): node[1] is the root, leaf i is node[leaves + i]
  int leaves = 1;

  static uint64_t key(int32_t rank, int i) {
    return rank == kNoRank ? kNoKey : (uint64_t)(uint32_t)rank << 32 | (uint32_t)i;
  }
  static int32_t rank_of(uint64_t key) { return (int32_t)(key >> 32); }
  static int position_of(uint64_t key) { return (int)(uint32_t)key; }
  uint64_t lowest() const { return node[1]; }

  // Leaves [0, m) from rank[0..m), built bottom-up.
  void build(const int32_t* rank, int m) {
    for (leaves = 1; leaves < m; leaves *= 2) {}
    node.assign(2 * (size_t)leaves, kNoKey);
    for (int i = 0; i < m; ++i) node[leaves + i] = key(rank[i], i);
    for (int k = leaves - 1; k >= 1; --k) node[k] = std::min(node[2 * k], node[2 * k + 1]);
  }
  void set(int i, int32_t rank) {
    int k = leaves + i;
    node[k] = key(rank, i);
    for (k >>= 1; k >= 1; k >>= 1) {
      const uint64_t least = std::min(node[2 * k], node[2 * k + 1]);
      if (node[k] == least) break;
      node[k] = least;
    }
  }
};

// Which pairs may be in the pair table, one bit per hash value: a pair whose bit is clear has
// no rank, known from a 512 KiB array that stays in cache instead of two rows of a pair table
// of several MiB (cl100k: 8 MiB). Long pieces of CJK or emoji ask mostly for pairs that do not
// merge (the bytes across two characters), each on the path to the next merge.
struct PairFilter {
  static constexpr uint32_t kBits = 1u << 22;
  std::vector<uint64_t> words;

  explicit PairFilter(const VocabView& v) : words(kBits / 64, 0) {
    for (uint32_t slot = 0; slot <= v.pair_mask; ++slot) {
      const TableRow r = load_row(v.pair_table, slot);
      if (r.a >= 0) set(bit(r.a, r.b));  // (empty rows are -1)
    }
  }
  static uint32_t bit(int32_t left, int32_t right) {
    return pair_hash_alt((uint32_t)left, (uint32_t)right) & (kBits - 1);
  }
  void set(uint32_t b) { words[b >> 6] |= (uint64_t)1 << (b & 63); }
  bool may_hold(int32_t left, int32_t right) const {
    const uint32_t b = bit(left, right);
    return (words[b >> 6] >> (b & 63)) & 1;
  }
};

struct CpuScratch {
  std::vector<uint8_t> is_special, piece_start;
  std::vector<int32_t> tok, rank, chars;
  std::vector<uint8_t> fresh;
  std::vector<uint8_t> lowered;  // the text lowercased (pretok/lowercase.h)
  std::vector<uint8_t> normalized;  // the text in NFC (pretok/nfc_normalize.h)
  std::vector<uint32_t> nfc_segment;
  // merge_segment_tree (its own arrays: rank and fresh above are indexed by text position)
  std::vector<int32_t> next, prev, pair_rank, batch, touched;
  std::vector<uint8_t> alive;
  PairTree tree;
  const PairFilter* filter = nullptr;  // (HostEncoder's, built once per tokenizer)
};

// Segments longer than this are merged by merge_segment_tree: merge_segment rescans the whole
// segment every pass, which is quadratic in a long piece (a 256 KiB run of letters took 4.8 s).
constexpr int kTreeMergeMinLen = 32;

// merge_segment's rule (core/bpe_core.h) in O(m log m) for one segment tok[0..m): the same passes,
// each merging every leftmost-first occurrence of the lowest rank present when the pass
// starts, with the pairs' ranks in a PairTree and the tokens in a linked list instead of a
// rescan per pass. Pairs formed by a pass are ranked after it, as in merge_segment.
// Returns the final count, packed to tok[0..count).
// kFirstOnly: merge_segment's first-only rule (a flagged candidate whose list predecessor is a
// candidate of the pass waits).
template <bool kFirstOnly>
inline int merge_segment_tree(const VocabView& v, int32_t* tok, int m, CpuScratch& s) {
  auto& next = s.next; auto& prev = s.prev; auto& rank = s.pair_rank; auto& alive = s.alive;
  auto& tree = s.tree;
  next.resize(m); prev.resize(m); rank.resize(m);
  alive.assign(m, 1);
  auto pair_rank = [&](int i) {
    if (next[i] < 0) return kNoRank;
    const int32_t left = token_id(tok[i]), right = token_id(tok[next[i]]);
    if (s.filter && left >= 0 && !s.filter->may_hold(left, right)) return kNoRank;
    return lookup_pair(v, left, right, nullptr);
  };
  for (int i = 0; i < m; ++i) {
    next[i] = i + 1 < m ? i + 1 : -1;
    prev[i] = i - 1;
  }
  for (int i = 0; i < m; ++i) rank[i] = pair_rank(i);
  tree.build(rank.data(), m);
  const auto merge_with_next = [&](int i, int32_t r) {  // tok[i] tok[next[i]] -> tok[i]
    const int k = next[i];
    tok[i] = merged_id(v, r, tok[i], tok[k]) | (tok[i] & kSegStart);
    alive[k] = 0;
    tree.set(k, kNoRank);
    next[i] = next[k];
    if (next[k] >= 0) prev[next[k]] = i;
  };
  const auto rerank_around = [&](int i) {  // the pairs that end and start at token i
    for (const int j : {prev[i], i}) {
      if (j < 0) continue;
      rank[j] = pair_rank(j);
      tree.set(j, rank[j]);
    }
  };
  if constexpr (!kFirstOnly) {
    // Without the first-only rule a pass is its merges one at a time in position order: a pair
    // that a merge forms holds the new token, so its rank (another token's, or a later merge
    // rule's) is never the pass's, and the pass's own pairs stay in the tree until their turn.
    for (uint64_t lowest; (lowest = tree.lowest()) != PairTree::kNoKey;) {
      const int i = PairTree::position_of(lowest);
      merge_with_next(i, PairTree::rank_of(lowest));
      rerank_around(i);
    }
  } else {
    while (tree.lowest() != PairTree::kNoKey) {
      const int32_t lowest = PairTree::rank_of(tree.lowest());
      s.batch.clear();
      while (PairTree::rank_of(tree.lowest()) == lowest && tree.lowest() != PairTree::kNoKey) {
        const int i = PairTree::position_of(tree.lowest());  // (in position order)
        tree.set(i, kNoRank);
        s.batch.push_back(i);
      }
      if (first_only_rank(lowest)) {  // a candidate waits while the pair before it is one
        size_t kept = 0;              // (read before any merge)
        for (const int i : s.batch)
          if (prev[i] < 0 || rank[prev[i]] != lowest) s.batch[kept++] = i;
        s.batch.resize(kept);
      }
      s.touched.clear();
      for (const int i : s.batch) {
        if (!alive[i] || rank[i] != lowest) continue;  // consumed as the right half just before
        merge_with_next(i, lowest);
        rank[i] = kNoRank;  // until re-ranked below (so a later batch entry at i is skipped)
        s.touched.push_back(i);
      }
      for (const int i : s.touched) {
        if (!alive[i]) continue;
        rerank_around(i);
        // A waiting candidate left the tree; it may go once the pair before it changed, which
        // is when a merge made the token before it: back into the tree then.
        if (next[i] >= 0) tree.set(next[i], rank[next[i]]);
      }
    }
  }
  int count = 0;
  for (int i = 0; i >= 0; i = next[i]) tok[count++] = tok[i];
  return count;
}

// Merges one segment tok[0..m) in place; returns its token count.
// (kFirstOnly: the ranks carry the first-only flag, core/bpe_core.h: SentencePiece-style BPE)
// Test hook BLOCKBPE_CPU_PASSES=1 (read once a process): long segments too by merge_segment's
// passes, so that the CPU tests run the passes' rules (the block kernel's) on long runs.
inline bool cpu_passes_only() {
  static const bool on = [] {
    const char* e = std::getenv("BLOCKBPE_CPU_PASSES");
    return e && e[0] == '1';
  }();
  return on;
}

template <bool kFirstOnly = false>
inline int merge_one_segment(const VocabView& v, int32_t* tok, int m, CpuScratch& s) {
  if (m < 2) return m;
  if (m > kTreeMergeMinLen && !cpu_passes_only()) return merge_segment_tree<kFirstOnly>(v, tok, m, s);
  return merge_segment<kFirstOnly>(v, tok, s.rank.data(), s.fresh.data(), m);
}

// SentencePiece-style BPE (core/char_symbols.h) of text[0..n) into s.tok[0..count), the specials
// already marked (s.tok[i] = the special matched at i); returns count.
inline int encode_chars(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s) {
  const VocabView& v = p.vocab;
  const CharView c = char_view(p.chars);
  const uint8_t* sp = s.is_special.data();
  s.rank.resize(2 * n + 2);  // (scratch of merge_segment: room for any segment)
  s.fresh.resize(2 * n + 2);
  // The symbols, dense, with the dummy prefixes (a walk over the characters, char_symbols_at);
  // then each segment, looked up whole or else merged (char_symbols.h: whole words), and its
  // runs (merge_segment_runs), packed as we go.
  std::vector<int32_t>& t = s.chars;
  t.clear();
  for (int i = 0; i < n;) {
    if (prefix_before(c, text, n, sp, i)) t.push_back(c.prefix_id | kSegStart);
    if (sp[i]) {  // (a special's first byte holds its match: initial_char_token)
      if (sp[i] == 2) t.push_back(p.special.ids[s.tok[i]] | kSegStart);
      ++i;
      continue;
    }
    const bool seg = starts_char_segment(c, text, n, sp, i);
    int32_t sym[4];
    int count = 0;
    const int len = char_symbols_at(v, c, text, n, sp, i, sym, &count);
    for (int k = 0; k < count; ++k) t.push_back(sym[k] | (k == 0 && seg ? kSegStart : 0));
    i += len;
  }
  for (int j = (int)t.size() - 1; j > 0; --j)
    if (starts_word(c, t.data(), j)) t[j] |= kSegStart;
  int count = 0;
  for (int start = 0, m = (int)t.size(); start < m;) {
    int end = start + 1;
    while (end < m && !starts_segment(t[end])) ++end;
    const int32_t whole = c.whole_words && end - start > 1 ? lookup_word(v, &t[start], end - start) : -1;
    if (whole >= 0) t[start] = whole | kSegStart;
    int kept = whole >= 0 ? 1 : merge_one_segment<true>(v, &t[start], end - start, s);
    kept = merge_segment_runs(c, &t[start], kept);
    std::copy(t.begin() + start, t.begin() + start + kept, t.begin() + count);
    count += kept;
    start = end;
  }
  // (into s.tok: the loaders keep count <= n + 1, char_bpe.py)
  std::copy(t.begin(), t.begin() + count, s.tok.begin());
  return count;
}

// The segments that start in [from, to) (from: a segment start; to: one, or n), each by the
// whole-piece shortcut or else the merge passes (`scratch`'s arrays), their tokens packed to
// s.tok[from..) as they come (a segment never grows); returns how many.
inline int merge_segments(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s, int from, int to,
                          CpuScratch& scratch) {
  const VocabView& v = p.vocab;
  int count = from;
  for (int start = from; start < to;) {
    int end = start + 1;
    while (end < n && s.tok[end] != kDeleted && !starts_segment(s.tok[end])) ++end;
    int m = end - start;
    const int32_t whole = s.is_special[start] || m < 2 ? -1 : lookup_piece(v, text + start, m);
    if (whole >= 0) s.tok[start] = whole | kSegStart;
    if (whole >= 0 || s.is_special[start])
      m = 1;
    else
      m = merge_one_segment(v, &s.tok[start], m, scratch);
    std::copy(s.tok.begin() + start, s.tok.begin() + start + m, s.tok.begin() + count);
    count += m;
    for (start = end; start < n && s.tok[start] == kDeleted;) ++start;  // rest of a special
  }
  return count - from;
}

// Host encode work per thread, at least: starting a thread costs about as much as encoding a
// few KiB. A batch's strings (the CPU handler, HostEncoder) and one long text's pre-tokenizer
// chunks and segments (encode_string's `threads`) are split by it.
constexpr int kHostBytesPerThread = 16 << 10;
// The chunked pre-tokenizer does more work per byte than the sequential one (each chunk's map
// composed over every state: ~5x where the automaton keeps counting, as in a run of digits),
// so it runs only where enough threads share it.
constexpr int kChunkedPretokMinThreads = 8;

// The allowed specials' matches in text[0..n), accepted leftmost-first (core/special_tokens.h):
// s.is_special 2 at the first byte of each accepted special, 1 at its other bytes; s.tok[i] the
// special matched at i (-1: none), which initial_token reads where is_special is 2.
inline void match_specials(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s) {
  s.is_special.assign(n + 1, 0);
  s.tok.resize(n + 1);
  if (p.special.count <= 0) return;  // s.tok holds each position's match until initial_token
  const bool escaped = p.symbols == kSymbolsChars && specials_escaped(p.chars);
  s.rank.resize(n + 1);  // each match's length, until the merges use rank
  match_specials_in(*p.special.starts, p.special, text, n, escaped, s.tok.data(), s.rank.data(),
                    s.is_special.data());
}

// NFC of text[0..n) into s.normalized (cap bytes at most) with the accepted specials as they are:
// HF extracts its added tokens from the raw text and normalizes only the text between them, so
// each gap between specials is normalized on its own (a special is a boundary, as the sp mask of
// pretok/nfc_normalize.h makes it) and each special's bytes are copied, its marks and match
// carried to where it lands (s.is_special, s.tok). The specials are not matched again in the
// normalized text: NFC can spell one there (U+212A KELVIN SIGN is 'K', U+037E is ';') where
// the reference has none. Returns the new length, or < 0 (pretok/nfc_normalize.h's results).
inline int nfc_normalize_between_specials(const NfcData& d, const uint8_t* text, int n, int cap, int segment,
                                          CpuScratch& s) {
  s.normalized.resize((size_t)cap + 1);
  s.nfc_segment.resize((size_t)segment);
  std::vector<uint8_t> moved_special((size_t)cap + 1, 0);
  std::vector<int32_t> moved_tok((size_t)cap + 1, -1);
  int w = 0;
  for (int gap = 0; gap < n;) {
    int end = gap;  // the gap runs to the next accepted special's first byte
    while (end < n && s.is_special[end] != 2) ++end;
    const int got = nfc_normalize_row(d, text + gap, end - gap, nullptr, s.normalized.data() + w, cap - w,
                                      s.nfc_segment.data(), segment);
    if (got < 0) return got;
    w += got;
    if (end == n) break;
    int past = end + 1;  // the special's other bytes
    while (past < n && s.is_special[past] == 1) ++past;
    if (w + (past - end) > cap) return kNfcOutputTooSmall;
    moved_tok[w] = s.tok[end];
    for (int k = end; k < past; ++k, ++w) {
      s.normalized[w] = text[k];
      moved_special[w] = s.is_special[k];
    }
    gap = past;
  }
  moved_special.resize((size_t)w + 1);
  moved_tok.resize((size_t)w + 1);
  s.is_special.swap(moved_special);
  s.tok.swap(moved_tok);
  return w;
}

// Tokenizes text[0..n) into s.tok[0..count); returns count (kCountNotNormalized: the text may
// not be in the NFC form its tokenizer requires (checked), or its NFC outgrows the row
// (normalized, pretok/nfc_normalize.h), or it has a code point whose lowercase is not
// rewritten in place). threads > 1: a long text is pre-tokenized and its segments merged on up
// to that many. The specials are matched in the raw text, before any normalizer (HF's order).
inline int encode_string(const EncodeParams& p, const uint8_t* text, int n, CpuScratch& s, int threads = 1) {
  const VocabView& v = p.vocab;
  match_specials(p, text, n, s);
  NfcData d;
  if (p.nfc_rewrite.ints && !nfc_data_view(p.nfc_rewrite.data, p.nfc_rewrite.ints, &d)) return kCountNotNormalized;
  if (p.nfc_rewrite.ints && nfc_row_may_change(d, text, n, s.is_special.data())) {
    // (HostEncoder, max_len 0: rows of any length and segments of any length, never reported)
    const int64_t room = std::min<int64_t>(3 * (int64_t)n, INT32_MAX);
    const int cap = (int)(p.max_len > 0 ? std::min<int64_t>(p.max_len, room) : room);
    const int segment = (int)(p.max_len > 0 ? kNfcSegmentScratch
                                            : std::min<int64_t>(2 * (int64_t)n + kNfcMaxDecomp, INT32_MAX));
    n = nfc_normalize_between_specials(d, text, n, cap, segment, s);
    if (n < 0) return kCountNotNormalized;
    text = s.normalized.data();
  }
  s.piece_start.assign(n + 1, 0);
  if (p.symbols == kSymbolsChars) return encode_chars(p, text, n, s);
  if (p.pretok.nfc || p.pretok.lower)  // checked on the raw text (pretok/lowercase.h)
    for (int i = 0; i < n; ++i)
      if ((p.pretok.nfc && nfc_suspect_at(p.pretok, p.nfc_pairs, text, n, s.is_special.data(), i)) ||
          (p.pretok.lower && lower_suspect_at(p.pretok, text, n, s.is_special.data(), i)))
        return kCountNotNormalized;
  if (p.pretok.lower) {
    s.lowered.assign(text, text + n);
    for (int i = 0; i < n; ++i) lower_in_place_at(p.pretok, s.lowered.data(), n, s.is_special.data(), i);
    text = s.lowered.data();
  }
  threads = std::min(threads, n / kHostBytesPerThread);
  if (threads >= kChunkedPretokMinThreads)  // (the GPU's chunk decomposition, a chunk per thread)
    pretokenize_chunked(p.pretok, text, n, s.is_special.data(), (n + threads - 1) / threads,
                        s.piece_start.data(), kPretokLookback, threads);
  else
    pretokenize_sequential(p.pretok, text, n, s.is_special.data(), s.piece_start.data());
  for (int i = 0; i < n; ++i)
    s.tok[i] = initial_token(v, p.special, text[i], s.is_special.data(), s.piece_start.data(),
                             s.tok[i], i);
  s.rank.resize(n + 1);
  s.fresh.resize(n + 1);
  if (threads <= 1) return merge_segments(p, text, n, s, 0, n, s);
  // A long text: its segments are independent, so the text is cut at segment starts into one
  // part per thread, each part's tokens packed to its front, then the parts joined.
  std::vector<int> cuts{0};
  for (int k = 1; k < threads; ++k) {
    int at = std::max(cuts.back() + 1, (int)((int64_t)n * k / threads));
    while (at < n && (s.tok[at] == kDeleted || !starts_segment(s.tok[at]))) ++at;
    if (at < n) cuts.push_back(at);
  }
  cuts.push_back(n);
  const size_t parts = cuts.size() - 1;
  std::vector<int> kept(parts);
  on_threads(parts, (int)parts, [&](size_t k) {
    CpuScratch own;  // (the merges' arrays; s.tok is shared, each part writing its own range)
    own.filter = s.filter;
    own.rank.resize(cpu_passes_only() ? n + 1 : kTreeMergeMinLen + 1);
    own.fresh.resize(cpu_passes_only() ? n + 1 : kTreeMergeMinLen + 1);
    kept[k] = merge_segments(p, text, n, s, cuts[k], cuts[k + 1], own);
  });
  int count = kept[0];
  for (size_t k = 1; k < parts; ++k) {
    std::copy(s.tok.begin() + cuts[k], s.tok.begin() + cuts[k] + kept[k], s.tok.begin() + count);
    count += kept[k];
  }
  return count;
}

}  // namespace bbpe
