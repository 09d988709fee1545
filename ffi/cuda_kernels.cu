// CUDA FFI target `bbpe_encode`: one thread block per string (BlockBPE).
//
// A block loads its string into shared memory (or, past kSmemMaxLen bytes, into its slice of a
// global workspace), marks special tokens and pre-tokenizer pieces and builds the initial byte
// tokens, flagging segment starts (specials and pieces). The segment starts are listed and
// the threads take them round robin: a special token stays one token; whole-piece shortcut;
// a piece of up to kShortPieceLen bytes that is not a token goes on a merge list: up to
// kLanePieceLen bytes, merged lane-parallel, several pieces to a warp (merge_in_lanes); longer
// ones in place by one thread each with merge_segment (bpe_core.h). The pre-tokenizer's tables
// are an operand (pretokenize.h, PretokView): each block copies a stage's step tables to
// shared memory.
// One scan places the results, straight into the output when nothing is left to do. Longer
// segments, and every segment in bytes mode (the paper's algorithm), go through block-wide
// merge passes. Each pass:
//   1. segmented minimum of the cached pair ranks (block scan, SegMin),
//   2. every pair whose rank is its segment's minimum is a candidate; leftmost-first selection
//      and the surviving-token count come out of one block scan (MergeCarry),
//   3. compaction into the other buffer; only pairs next to a merge are looked up again.
// Passes stop when no segment has a mergeable pair. The rules are those of bpe_core.h, the same
// functions the CPU handler calls. Where each array lives: encode_params.h.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <string>
#include <utility>
#include <vector>

#include "bpe_core.h"
#include "char_symbols.h"
#include "encode_ffi.h"
#include "pretokenize.h"

namespace bbpe {
namespace {

// Per-block arrays: the core ones (every string) and the pass ones (merge passes only); where
// they live (shared memory or global workspace) is decided per launch (encode_params.h).
struct BlockArrays {
  uint8_t* text;
  uint8_t* piece_start;  // after the initial tokens: 1 where a segment starts
  uint8_t* is_special;
  int32_t* tok;
  int32_t* rank;
  int32_t* next_tok;
  int32_t* next_rank;
  int32_t* merged;
};

__device__ BlockArrays carve(uint8_t* core, uint8_t* pass, int cap) {
  BlockArrays a;
  a.tok = reinterpret_cast<int32_t*>(core);
  a.rank = a.tok + cap;
  a.text = reinterpret_cast<uint8_t*>(a.rank + cap);
  a.piece_start = a.text + cap;
  a.is_special = a.piece_start + cap;
  a.next_tok = reinterpret_cast<int32_t*>(pass);
  a.next_rank = a.next_tok + cap;
  a.merged = a.next_rank + cap;
  return a;
}

struct SegMinOp {
  __device__ SegMin operator()(SegMin a, SegMin b) const { return seg_min_combine(a, b); }
};
struct MergeCarryOp {
  __device__ MergeCarry operator()(MergeCarry a, MergeCarry b) const {
    return merge_carry_combine(a, b);
  }
};

// Exact mode: pieces up to kLanePieceLen bytes are merged lane-parallel (a warp packs several
// into its 32 lanes, merge_in_lanes); up to kShortPieceLen bytes by one thread each
// (merge_segment); longer ones by the block passes.
constexpr int kLanePieceLen = 32;
constexpr int kShortPieceLen = 64;

// The pre-tokenizer works in tiles of 4096 bytes per block, whatever the block size.
template <int kThreads>
constexpr int kPretokItems = 4096 / kThreads;

template <int kThreads>
struct Scans {
  using SegMinScan = cub::BlockScan<SegMin, kThreads>;
  using CarryScan = cub::BlockScan<MergeCarry, kThreads>;
  using IntScan = cub::BlockScan<int, kThreads>;
  union Storage {
    typename SegMinScan::TempStorage seg;
    typename CarryScan::TempStorage carry;
    typename IntScan::TempStorage count;
    typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage pretok;
    int2 lanes[kThreads];  // merge_in_lanes: (token, rank) of each lane, for the compaction
  };
};

// Lane-parallel merges of short pieces (exact mode; lengths 2..32, listed in list[0..n)).
// The list is cut into bins of as many whole pieces as fit into 32 lanes, one token per lane
// (next fit, in list order, within windows of 32 entries); the warps claim bins from a shared
// counter. For each bin a warp runs
// merge_segment's rule on all of them at once, pass after pass: each piece's lowest rank
// (a segmented minimum over the piece's lanes), its leftmost-first occurrences of it from the
// candidate bits (leftmost_first_merges, bpe_core.h), the merged tokens (merged_id), the
// compaction (through shared memory: slots), and a pair lookup in every lane whose pair a
// merge changed. A pass thus waits for one round of table probes, not for a thread's walk
// over its piece. The result is what merge_segment gives: tok[s0..) of each piece rewritten
// and rank[s0] = its token count (lens[] holds the lengths).
__device__ __forceinline__ uint32_t lanes_upto(int lane) {  // bits 0..lane
  return lane >= 31 ? ~0u : (2u << lane) - 1;
}

__device__ void merge_in_lanes(const VocabView& v, int32_t* tok, int32_t* rank, const int32_t* list,
                               const int32_t* lens, int n, int2* slots, int* next_bin) {
  const int lane = threadIdx.x & 31;
  // Every warp walks the same bins (next fit over windows of 32 list entries) and merges the
  // ones it claims from the shared counter next_bin (zero on entry): a warp that is done takes
  // the next bin, so the slowest warp no longer has a fixed share.
  int claim = 0;
  if (lane == 0) claim = atomicAdd(next_bin, 1);
  claim = __shfl_sync(~0u, claim, 0);
  int bin = 0;
  for (int first = 0; first < n; first += 32) {
    const int g = first + lane;
    const bool listed = g < n;
    const int s0 = listed ? list[g] : 0;
    const int len = listed ? lens[g] : 0;  // (not -rank[s0]: other warps rewrite that)
    int end = len;  // inclusive prefix sum of the lengths over the lanes
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(~0u, end, d);
      if (lane >= d) end += o;
    }
    const int n_listed = __popc(__ballot_sync(~0u, listed));
    for (int done = 0, base = 0; done < n_listed;) {
      // Next fit: pieces done..k-1 go into the lanes (the prefix sums grow, so the pieces
      // that fit are a run of lanes from `done`; the first one always fits).
      const uint32_t fits = __ballot_sync(~0u, listed && lane >= done && end - base <= 32);
      const int k = 32 - __clz(fits);
      if (bin++ != claim) {  // another warp's bin
        base = __shfl_sync(~0u, end, k - 1);
        done = k;
        continue;
      }
      if (lane == 0) claim = atomicAdd(next_bin, 1);
      claim = __shfl_sync(~0u, claim, 0);
      const int at = end - len - base;  // lane of this piece's first token, if in this round
      uint32_t starts = __reduce_or_sync(~0u, lane >= done && lane < k ? 1u << at : 0u);
      int used = __shfl_sync(~0u, end, k - 1) - base;
      // Lane -> the list lane of its piece (pieces keep their order in the lanes; compaction
      // moves tokens across lanes, so the write-back asks again with the final starts).
      const auto piece_lane = [&](uint32_t piece_starts) {
        return lane < used ? done + __popc(piece_starts & lanes_upto(lane)) - 1 : lane;
      };
      const int piece_s0 = __shfl_sync(~0u, s0, piece_lane(starts));
      const int piece_at = __shfl_sync(~0u, at, piece_lane(starts));
      int32_t t = lane < used ? tok[piece_s0 + lane - piece_at] : 0;
      int32_t r = kNoRank;
      for (uint32_t fresh = ~0u;;) {
        // Pairs to look up (bit i of fresh: token i or i + 1 is new; all in the first round):
        // this lane's token and the next one's, if that is in the same piece.
        const uint32_t used_mask = used >= 32 ? ~0u : (1u << used) - 1;
        const int32_t right = __shfl_down_sync(~0u, t, 1);
        const bool has_right = lane + 1 < used && !((starts >> (lane + 1)) & 1);
        if (!has_right) r = kNoRank;
        else if ((fresh >> lane) & 1) r = lookup_pair(v, token_id(t), token_id(right), nullptr);
        // This piece's lanes [head, tail): from its start to the next start (or `used`).
        const int head = 31 - __clz(starts & lanes_upto(lane));
        const uint32_t later = starts & ~lanes_upto(lane);
        const int tail = later ? __ffs(later) - 1 : used;
        // The piece's lowest rank: a suffix minimum within the piece (shuffles down that stop
        // at its tail), read at its head. (A reduction with each piece's lane mask costs a
        // round per distinct mask: with one mask per idle lane it took a fifth of the kernel.)
        int32_t low = r;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int32_t o = __shfl_down_sync(~0u, low, d);
          if (lane + d < tail) low = min(low, o);
        }
        const int32_t lowest = __shfl_sync(~0u, low, head);
        const uint32_t merges = leftmost_first_merges(
            __ballot_sync(~0u, r != kNoRank && r == lowest));
        if (merges == 0) {  // (uniform) write back
          const int ps0 = __shfl_sync(~0u, s0, piece_lane(starts));
          if (lane < used) {
            tok[ps0 + lane - head] = t;
            if (lane == head) rank[ps0] = tail - head;
          }
          break;
        }
        if ((merges >> lane) & 1) t = merged_id(v, r, t, right) | (t & kSegStart);
        // Compaction: the right halves go; kept tokens move down to lane `to`.
        const uint32_t keep = used_mask & ~(merges << 1);
        const bool kept = (keep >> lane) & 1;
        const int to = __popc(keep & ((1u << lane) - 1));
        if (kept) slots[to] = make_int2(t, r);
        starts = __reduce_or_sync(~0u, kept && ((starts >> lane) & 1) ? 1u << to : 0u);
        fresh = __reduce_or_sync(~0u, kept && ((merges >> lane) & 1) ? 1u << to : 0u);
        fresh |= fresh >> 1;  // lane i looks up when token i or token i + 1 is new
        used = __popc(keep);
        __syncwarp();
        if (lane < used) { const int2 x = slots[lane]; t = x.x; r = x.y; }
        __syncwarp();
      }
      base = __shfl_sync(~0u, end, k - 1);
      done = k;
    }
  }
}

// Step 2 of both kernels: the pieces listed in merge_list (n_lane of 2..kLanePieceLen tokens
// from the front, by_len[m] of them of length m; n_thread longer ones from the back,
// merge_list[cap - 1 - g]), each with rank[s0] = minus its length, are merged in place; then
// rank[s0] = the piece's token count. sorted_list is free scratch (one entry per lane piece).
// The lane list is sorted by length, longest first (a counting sort into sorted_list): a bin
// then holds pieces of similar lengths and pass counts, the longest bins are claimed first,
// and a warp that finishes early claims the next one (simulated on War and Peace: ~20 instead
// of 29 rounds of passes for the slowest warp; H200: 1024 x 4096 cl100k 226-235 -> 202-216 us).
template <int kThreads>
__device__ __forceinline__ void merge_listed_pieces(const VocabView& v, BlockArrays& a,
                                                    const int32_t* merge_list, int n_lane,
                                                    int n_thread, int cap, int32_t* sorted_list,
                                                    int* by_len, int* next_lane_bin,
                                                    typename Scans<kThreads>::Storage& tmp) {
  if (threadIdx.x < 32) {  // lane l: pieces of length kLanePieceLen - l
    const int m = kLanePieceLen - (int)threadIdx.x;
    const int count = m >= 2 ? by_len[m] : 0;
    int before = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(~0u, before, d);
      if ((int)threadIdx.x >= d) before += o;
    }
    if (m >= 2) by_len[m] = before - count;
  }
  __syncthreads();
  int32_t* lane_list = sorted_list;
  int32_t* lane_lens = a.merged;  // (free until the passes)
  for (int g = threadIdx.x; g < n_lane; g += kThreads) {
    const int s0 = merge_list[g], m = -a.rank[s0];
    const int at = atomicAdd(&by_len[m], 1);
    lane_list[at] = s0;
    lane_lens[at] = m;
  }
  __syncthreads();
  merge_in_lanes(v, a.tok, a.rank, lane_list, lane_lens, n_lane,
                 tmp.lanes + (threadIdx.x & ~31), next_lane_bin);
  for (int g = threadIdx.x; g < n_thread; g += kThreads) {
    const int s0 = merge_list[cap - 1 - g];
    a.rank[s0] = merge_segment(v, a.tok + s0, a.rank + s0, a.text + s0, -a.rank[s0]);
  }
  __syncthreads();
}

// The pre-tokenizer as a separate (not inlined) function: inlined into the encode kernel, its
// unrolled automata made ptxas run for many minutes.
template <int kThreads>
__device__ __noinline__ void pretokenize_block(
    const PretokView& v, const uint8_t* text, int n, const uint8_t* is_special, uint8_t* piece_start,
    typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage& tmp) {
  // In 4096-byte tiles a short string keeps most threads idle (512 bytes: one warp of 256
  // threads), so strings up to 4 * kThreads bytes go in 4-byte chunks, every thread busy
  // (2-byte chunks were slower). Only the chunk size differs: the two share one TempStorage
  // layout.
  constexpr int kSmall = 4;
  if (kPretokItems<kThreads> > kSmall && n <= kThreads * kSmall) {
    using Small = BlockPretokenizer<kThreads, kSmall>;
    static_assert(sizeof(typename Small::TempStorage) ==
                  sizeof(typename BlockPretokenizer<kThreads, kPretokItems<kThreads>>::TempStorage),
                  "the small-chunk pre-tokenizer reuses the block's TempStorage");
    block_pretokenize<kThreads, kSmall>(v, text, n, is_special, piece_start,
                                        reinterpret_cast<typename Small::TempStorage&>(tmp));
    return;
  }
  block_pretokenize<kThreads, kPretokItems<kThreads>>(v, text, n, is_special, piece_start, tmp);
}

// Merge passes over a.tok / a.rank (n tokens); returns the final count.
template <int kThreads>
__device__ __noinline__ int merge_passes(const VocabView& v, BlockArrays& a, int n,
                            typename Scans<kThreads>::Storage& tmp) {
  for (;;) {
    const int per = (n + kThreads - 1) / kThreads;
    const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
    // 1. Segment minima, written at each segment's start index (into next_tok: free now).
    int32_t* seg_min = a.next_tok;
    SegMin local{-1, kNoRank};
    for (int i = lo; i < hi; ++i)
      local = seg_min_combine(local, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
    SegMin carry;
    typename Scans<kThreads>::SegMinScan(tmp.seg).ExclusiveScan(local, carry, SegMin{-1, kNoRank},
                                                                SegMinOp());
    SegMin run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      if (i + 1 == n || starts_segment(a.tok[i + 1])) seg_min[run.start] = run.rank;
    }
    __syncthreads();
    // 2. Candidates, leftmost-first selection and surviving counts in one scan.
    MergeCarry mine = merge_carry_identity();
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      mine = merge_carry_push(mine, a.rank[i] != kNoRank && a.rank[i] == seg_min[run.start]);
    }
    MergeCarry before, total;
    typename Scans<kThreads>::CarryScan(tmp.carry).ExclusiveScan(
        mine, before, merge_carry_identity(), MergeCarryOp(), total);
    const int next_n = total.kept[0];
    if (next_n == n) break;  // uniform across the block: no pair merged anywhere
    bool prev = before.out[0];
    run = carry;
    for (int i = lo; i < hi; ++i) {
      run = seg_min_combine(run, SegMin{starts_segment(a.tok[i]) ? i : -1, a.rank[i]});
      const bool merges = !prev && a.rank[i] != kNoRank && a.rank[i] == seg_min[run.start];
      a.merged[i] = merges ? merged_id(v, a.rank[i], a.tok[i], a.tok[i + 1]) : -1;
      prev = merges;
    }
    __syncthreads();
    // 3. Compaction into the other buffers; re-rank the pairs a merge touched.
    int j = before.kept[0];
    prev = before.out[0];
    for (int i = lo; i < hi; ++i) {
      const bool was_right_half = prev;
      prev = a.merged[i] >= 0;
      if (was_right_half) continue;
      const bool is_merge = a.merged[i] >= 0;
      const int32_t t = is_merge ? (a.merged[i] | (a.tok[i] & kSegStart)) : a.tok[i];
      const int k = is_merge ? i + 2 : i + 1;
      int32_t r;
      if (k >= n || starts_segment(a.tok[k])) {
        r = kNoRank;
      } else if (is_merge || a.merged[k] >= 0) {
        const int32_t right = a.merged[k] >= 0 ? a.merged[k] : a.tok[k];
        r = lookup_pair(v, token_id(t), token_id(right), nullptr);
      } else {
        r = a.rank[i];
      }
      a.next_tok[j] = t;
      a.next_rank[j] = r;
      ++j;
    }
    __syncthreads();
    int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t;
    t = a.rank; a.rank = a.next_rank; a.next_rank = t;
    n = next_n;
  }
  return n;
}

// Stage clocks (a build option, BLOCKBPE_STAGE_CLOCKS=ON; normal builds compile them away):
// thread 0 of every block adds the cycles of each stage to device counters, which
// benchmarks/stage_clocks.py reads through the CUDA module.
enum StageClockSlot : int {
  kClockLoad, kClockSpecials, kClockPretokenize, kClockInitial, kClockSegments, kClockMerges,
  kClockOutput, kClockPasses, kClockBlocks, kClockLongBlocks, kStageClockSlots
};
#ifdef BBPE_STAGE_CLOCKS
__device__ unsigned long long g_stage_clocks[kStageClockSlots];
struct StageClock {
  long long last;
  __device__ StageClock() {
#ifdef __CUDA_ARCH__  // (the host pass sees this constructor too)
    last = clock64();
#endif
  }
  __device__ void mark(int slot) {
    if (threadIdx.x == 0) {
      const long long now = clock64();
      atomicAdd(&g_stage_clocks[slot], (unsigned long long)(now - last));
      last = now;
    }
  }
  __device__ void count(int slot, bool yes) {
    if (threadIdx.x == 0 && yes) atomicAdd(&g_stage_clocks[slot], 1ull);
  }
};
#else
struct StageClock {
  __device__ void mark(int) {}
  __device__ void count(int, bool) {}
};
#endif

// Shared-memory-lean blocks fit four to an SM at 256 threads (64 registers per thread).
template <int kThreads>
constexpr int kMinBlocksPerSm = kThreads >= 1024 ? 1 : 1024 / kThreads;

// Copies the tokens of src[0..n) that are not kDeleted, in order, to dst[0..), each after
// the token before(i) gives for its position where that is not kDeleted; returns how many
// (block-uniform).
template <int kThreads, typename Before>
__device__ int compact_tokens(const int32_t* src, int n, int32_t* dst, Before before,
                              typename Scans<kThreads>::Storage& tmp) {
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += (src[i] != kDeleted) + (before(i) != kDeleted);
  int first, total;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, first, total);
  for (int i = lo, j = first; i < hi; ++i) {
    const int32_t extra = before(i);
    if (extra != kDeleted) dst[j++] = extra;
    if (src[i] != kDeleted) dst[j++] = src[i];
  }
  __syncthreads();
  return total;
}

// SentencePiece-style BPE (char_symbols.h) of the block's string, specials marked (a.tok[i]:
// the special matched at i): character symbols, dense, with the dummy prefixes; word starts
// flagged; short words merged by one thread each, long ones by the block passes; then the
// runs. Leaves the tokens in a.tok; returns their count.
template <int kThreads>
__device__ __noinline__ int encode_chars(const EncodeParams& p, BlockArrays& a, int n,
                                         typename Scans<kThreads>::Storage& tmp, StageClock& clock) {
  const VocabView& v = p.vocab;
  const CharView c = char_view(p.chars);
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = char_at(v, c, a.text, n, a.is_special, i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads)
    a.tok[i] = initial_char_token(v, c, p.special, a.text, n, a.is_special, a.tok[i], a.rank, i);
  __syncthreads();
  const auto prefix = [&](int i) {
    return prefix_before(c, a.text, n, a.is_special, i) ? c.prefix_id | kSegStart : kDeleted;
  };
  // (into rank, free now: the symbols stay in the core arrays, shared memory up to kSmemMaxLen)
  n = compact_tokens<kThreads>(a.tok, n, a.rank, prefix, tmp);
  { int32_t* t = a.tok; a.tok = a.rank; a.rank = t; }
  for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = starts_word(c, a.tok, i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) a.tok[i] |= a.rank[i] ? kSegStart : 0;
  __syncthreads();
  clock.mark(kClockInitial);
  // Words: listed, then those of up to kShortPieceLen symbols merged as the exact path merges
  // short pieces (merge_listed_pieces: lane-parallel up to kLanePieceLen, else one thread
  // each); longer ones stay whole for the block passes. The results are packed into next_tok.
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int32_t* seg_list = a.next_tok;     // (free until the placement)
  int32_t* merge_list = a.next_rank;  // (free until the passes)
  __shared__ int n_lane_merges, n_thread_merges, next_lane_bin;
  __shared__ int by_len[kLanePieceLen + 1];
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += starts_segment(a.tok[i]);
  int at, n_words;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at, n_words);
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i])) seg_list[at++] = i;
  if (threadIdx.x == 0) n_lane_merges = n_thread_merges = next_lane_bin = 0;
  if (threadIdx.x <= kLanePieceLen) by_len[threadIdx.x] = 0;
  __syncthreads();
  bool has_long = false;
  for (int g = threadIdx.x; g < n_words; g += kThreads) {
    const int s0 = seg_list[g], m = (g + 1 < n_words ? seg_list[g + 1] : n) - s0;
    int count = m;
    if (m > 1 && m <= kShortPieceLen) {
      count = -m;
      if (m <= kLanePieceLen) {
        merge_list[atomicAdd(&n_lane_merges, 1)] = s0;
        atomicAdd(&by_len[m], 1);
      } else {
        merge_list[cap - 1 - atomicAdd(&n_thread_merges, 1)] = s0;
      }
    }
    has_long |= m > kShortPieceLen;
    a.rank[s0] = count;
  }
  has_long = __syncthreads_or(has_long);
  merge_listed_pieces<kThreads>(v, a, merge_list, n_lane_merges, n_thread_merges, cap, seg_list,
                                by_len, &next_lane_bin, tmp);
  mine = 0;
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i])) mine += a.rank[i];
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(mine, at, n);
  for (int i = lo; i < hi; ++i)
    if (starts_segment(a.tok[i]))
      for (int j = 0, count = a.rank[i]; j < count; ++j) a.next_tok[at++] = a.tok[i + j];
  __syncthreads();
  { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
  clock.mark(kClockMerges);
  clock.count(kClockLongBlocks, has_long);
  if (has_long) {
    for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
    __syncthreads();
    n = merge_passes<kThreads>(v, a, n, tmp);
  }
  clock.mark(kClockPasses);
  if (c.run_long == 0) return n;
  // Runs: their starts and lengths first (a.rank is free), then one thread per run.
  bool any = false;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    a.rank[i] = starts_run(c, a.tok, i) ? run_length(c, a.tok, i, n) : 0;
    any |= a.rank[i] > 1;
  }
  if (!__syncthreads_or(any)) return n;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int len = a.rank[i];
    if (len < 2) continue;
    for (int k = merge_run(c, a.tok + i, len); k < len; ++k) a.tok[i + k] = kDeleted;
  }
  __syncthreads();
  n = compact_tokens<kThreads>(a.tok, n, a.next_tok, [](int) { return kDeleted; }, tmp);
  { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
  return n;
}

// The start of every block: its arrays, its string loaded, the special tokens marked (a.tok[i]:
// the special matched at i, is_special). False (the row written and flagged) for a length
// outside [0, max_len], which only an unchecked call can pass. kChars: SentencePiece-style
// symbols, whose specials may match a space for `▁` (specials_escaped).
template <int kThreads, bool kChars = false>
__device__ __forceinline__ bool begin_block(const EncodeParams& p, uint8_t* smem, BlockArrays& a,
                                            int32_t*& out, int& n, StageClock& clock) {
  const int64_t b = blockIdx.x;
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  const BlockPlacement at = place_block_arrays(
      smem, p.workspace + b * workspace_bytes_per_string(p.max_len, p.pretok_stages, p.symbols),
      p.max_len, p.pretok_stages, p.symbols);
  a = carve(at.core, at.pass, cap);
  out = p.ids + b * p.max_tokens;
  n = p.lengths[b];
  if (n < 0 || n > p.max_len) {  // unchecked call with a bad length: no reads, flag the row
    for (int j = threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
    if (threadIdx.x == 0) p.counts[b] = -1;
    return false;
  }
  const uint8_t* src = p.data + b * (int64_t)p.max_len;
  if (((reinterpret_cast<uintptr_t>(src) | (uintptr_t)p.max_len) & 15) == 0) {
    // 16 bytes per load (the row is aligned and n rounded up stays inside it; the arrays are
    // 16-byte aligned by construction): one memory round trip per thread, not one per byte.
    for (int i = threadIdx.x; i < (n + 15) / 16; i += kThreads) {
      reinterpret_cast<uint4*>(a.text)[i] = __ldg(reinterpret_cast<const uint4*>(src) + i);
      reinterpret_cast<uint4*>(a.piece_start)[i] = make_uint4(0, 0, 0, 0);
      reinterpret_cast<uint4*>(a.is_special)[i] = make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      a.text[i] = src[i];
      a.piece_start[i] = 0;
      a.is_special[i] = 0;
    }
  }
  __syncthreads();
  clock.mark(kClockLoad);

  // Special tokens: every position looks for a match in parallel (into tok); the rare matches
  // are then resolved leftmost-first by one thread (accept_special_matches).
  if (p.special.count > 0) {
    const bool escaped = kChars && specials_escaped(p.chars);
    const uint8_t* first = nullptr;  // kChars: the specials' first bytes (as encode_cpu.h)
    if constexpr (kChars) {
      __shared__ uint8_t first_bytes[256];
      for (int c = threadIdx.x; c < 256; c += kThreads) first_bytes[c] = 0;
      __syncthreads();
      for (int k = threadIdx.x; k < p.special.count; k += kThreads)
        if (special_len(p.special, k) > 0) first_bytes[p.special.data[p.special.offsets[k]]] = 1;
      __syncthreads();
      if (threadIdx.x == 0 && escaped && first_bytes[0xE2]) first_bytes[' '] = 1;
      __syncthreads();
      first = first_bytes;
    }
    bool found = false;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int k = first && !first[a.text[i]] ? -1 : special_match_at(p.special, a.text, n, i, escaped);
      a.tok[i] = k;
      found |= k >= 0;
    }
    if (__syncthreads_or(found) && threadIdx.x == 0)
      accept_special_matches(p.special, a.tok, n, a.is_special, a.text, escaped);
    __syncthreads();
  }
  clock.mark(kClockSpecials);
  return true;
}

// SentencePiece-style BPE (symbols = kSymbolsChars): one block per string, encode_chars.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) encode_chars_kernel(
    const __grid_constant__ EncodeParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ typename Scans<kThreads>::Storage tmp;
  StageClock clock;
  BlockArrays a;
  int32_t* out;
  int n;
  if (!begin_block<kThreads, true>(p, smem, a, out, n, clock)) return;
  n = encode_chars<kThreads>(p, a, n, tmp, clock);
  for (int j = threadIdx.x; j < min(n, p.max_tokens); j += kThreads) out[j] = token_id(a.tok[j]);
  for (int j = n + threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
  if (threadIdx.x == 0) p.counts[blockIdx.x] = n;
  clock.mark(kClockOutput);  // (the runs and the output)
  clock.count(kClockBlocks, true);
}

// The steps after the pre-tokenizer, for one block's string: a.tok[i] holds the special
// matched at i, is_special and piece_start are marked. The tokens go to out[0..out_cap) (the
// rest is left alone); returns their count. cap >= n: the room of next_rank for the merge
// list. has_long: whether the block passes ran. In the tile pipeline the "string" is the
// stretch of a long row from a segment start to the next segment start after a tile.
template <int kThreads>
__device__ __forceinline__ int encode_segments(const EncodeParams& p, BlockArrays& a, int n, int cap,
                                               int32_t* out, int out_cap, bool& has_long,
                                               typename Scans<kThreads>::Storage& tmp,
                                               StageClock& clock) {
  const VocabView& v = p.vocab;
  // Initial tokens; from here on piece_start flags every segment start (specials included).
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int32_t t = initial_token(v, p.special, a.text[i], a.is_special, a.piece_start, a.tok[i], i);
    a.tok[i] = t;
    a.piece_start[i] = starts_segment(t);
  }
  __syncthreads();
  clock.mark(kClockInitial);

  // 1. The segment starts are listed (one scan over the threads' stretches of bytes), and
  //    the threads take the segments round robin (an even share each, whatever the piece
  //    lengths): a special token stays one token; a segment whose bytes are a token becomes it
  //    (whole-piece shortcut); a short pre-tokenizer piece that is not a token goes on the
  //    merge list for step 2; longer ones (and in bytes mode, the paper's algorithm, all of
  //    them) are left to the block passes. rank[start] holds the segment's token count, or
  //    minus its length while it waits for step 2 (only the segment's thread touches
  //    rank[start] here; piece_start is read-only from now on).
  const int short_len = p.pretok_stages == kModeBytes ? 0 : kShortPieceLen;
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int32_t* seg_list = a.next_tok;     // free until the placement
  int32_t* merge_list = a.next_rank;  // free until the passes: pieces for merge_in_lanes from
                                      // the front, for merge_segment from the back
  __shared__ int n_lane_merges, n_thread_merges, next_lane_bin;
  __shared__ int by_len[kLanePieceLen + 1];  // lane-list pieces per length, then where each goes
  int my_starts = 0;
  for (int s0 = lo; s0 < hi; ++s0) my_starts += a.piece_start[s0];
  int first_seg, n_segs;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_starts, first_seg, n_segs);
  for (int s0 = lo; my_starts > 0 && s0 < hi; ++s0)
    if (a.piece_start[s0]) seg_list[first_seg++] = s0;
  if (threadIdx.x == 0) n_lane_merges = n_thread_merges = next_lane_bin = 0;
  if (threadIdx.x <= kLanePieceLen) by_len[threadIdx.x] = 0;
  __syncthreads();
  has_long = false;
  for (int g = threadIdx.x; g < n_segs; g += kThreads) {
    const int s0 = seg_list[g], end = g + 1 < n_segs ? seg_list[g + 1] : n;
    int count = 1;
    if (!a.is_special[s0]) {
      const int m = end - s0;
      const int32_t whole = m < 2 ? -1 : lookup_piece(v, a.text + s0, m);
      if (whole >= 0) {
        a.tok[s0] = whole | kSegStart;
      } else {
        count = m;
        if (m > 1 && m <= short_len) {
          count = -m;  // to merge in step 2
          if (m <= kLanePieceLen) {
            merge_list[atomicAdd(&n_lane_merges, 1)] = s0;
            atomicAdd(&by_len[m], 1);
          }
          else merge_list[cap - 1 - atomicAdd(&n_thread_merges, 1)] = s0;
        }
        has_long |= m > short_len && m > 1;
      }
    }
    a.rank[s0] = count;
  }
  has_long = __syncthreads_or(has_long);
  // (the order of the lists does not matter: pieces are independent)
  const int n_lane = n_lane_merges, n_thread = n_thread_merges;
  clock.mark(kClockSegments);

  // 2. The listed pieces: up to 32 bytes lane-parallel, a warp's lanes shared by several
  //    pieces (merge_in_lanes); the rare longer ones by one thread each, in place, with
  //    merge_segment (bpe_core.h; the piece's dead text is the scratch it needs).
  merge_listed_pieces<kThreads>(v, a, merge_list, n_lane, n_thread, cap, seg_list, by_len,
                                &next_lane_bin, tmp);
  int my_tokens = 0;
  for (int s0 = lo; s0 < hi; ++s0)
    if (a.piece_start[s0]) my_tokens += a.rank[s0];
  int out_at;
  typename Scans<kThreads>::IntScan(tmp.count).ExclusiveSum(my_tokens, out_at, n);
  clock.mark(kClockMerges);

  // Placement: straight into the output when every segment is done, else into the other
  // token buffer for the passes.
  int32_t* dst = has_long ? a.next_tok : out;
  const int dst_cap = has_long ? n : out_cap;
  for (int s0 = lo; s0 < hi; ++s0) {
    if (!a.piece_start[s0]) continue;
    for (int j = 0, count = a.rank[s0]; j < count; ++j, ++out_at)
      if (out_at < dst_cap) dst[out_at] = has_long ? a.tok[s0 + j] : token_id(a.tok[s0 + j]);
  }
  if (has_long) {
    __syncthreads();
    { int32_t* t = a.tok; a.tok = a.next_tok; a.next_tok = t; }
    for (int i = threadIdx.x; i < n; i += kThreads) a.rank[i] = rank_at(v, a.tok, i, n);
    __syncthreads();
    n = merge_passes<kThreads>(v, a, n, tmp);
    for (int j = threadIdx.x; j < min(n, out_cap); j += kThreads) out[j] = token_id(a.tok[j]);
  }
  return n;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) encode_kernel(
    const __grid_constant__ EncodeParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ typename Scans<kThreads>::Storage tmp;
  StageClock clock;
  const int64_t b = blockIdx.x;
  const int cap = (int)padded_len(p.max_len < 1 ? 1 : p.max_len);
  BlockArrays a;
  int32_t* out;
  int n;
  if (!begin_block<kThreads>(p, smem, a, out, n, clock)) return;
  if (p.pretok.nfc) {  // a string that may not be in NFC is reported, not tokenized
    bool suspect = false;
    for (int i = threadIdx.x; i < n; i += kThreads)
      suspect |= nfc_suspect_at(p.pretok, p.nfc_pairs, a.text, n, a.is_special, i);
    if (__syncthreads_or(suspect)) {
      for (int j = threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
      if (threadIdx.x == 0) p.counts[b] = kCountNotNormalized;
      return;
    }
  }
  if (p.pretok_stages != kModeBytes) {
    pretokenize_block<kThreads>(p.pretok, a.text, n, a.is_special, a.piece_start, tmp.pretok);
    __syncthreads();
  }
  clock.mark(kClockPretokenize);
  bool has_long;
  n = encode_segments<kThreads>(p, a, n, cap, out, p.max_tokens, has_long, tmp, clock);
  for (int j = n + threadIdx.x; j < p.max_tokens; j += kThreads) out[j] = p.pad_id;
  if (threadIdx.x == 0) p.counts[b] = n;
  clock.mark(has_long ? kClockPasses : kClockOutput);
  clock.count(kClockBlocks, true);
  clock.count(kClockLongBlocks, has_long);
}

// ---------------------------------------------------------------------------------------------
// Long rows: the tile pipeline (encode_params.h, tiled_rows). A row wider than kSmemMaxLen is
// cut into tiles of kTileBytes; the per-tile kernels run one block per (row, tile) (blocks of
// tiles past a row's length return at once) and hand what the next stage needs to the row
// kernels, one block per row, which compose it over the row's tiles:
//   specials only: tile_matches (every match, listed per tile; the leftmost-first acceptance
//     entering at the tile's start) -> row_specials (the acceptance entering each tile) ->
//     tile_specials (is_special of the tile's bytes);
//   tile_pretokenize<kBwd> (the text copied, NFC check, backward map) -> row_states<false>
//     (T after each tile) -> tile_pretokenize<kFwd> (backward replay, forward map) ->
//     row_states<true> (S before each tile) -> tile_pretokenize<kFlags> (piece starts): what
//     block_pretokenize gives, tile by tile;
//   tile_encode: the segments that START in the tile, each to its end (past the tile's end if
//     it is long), encoded with encode_segments into merged[first..) of the row;
//   tile_output: every block adds the counts of the tiles before its own, copies its tokens
//     into the row of ids and pads a share of the row.
// Results equal the one-block path: the same rules on the same segments, in the same order.
struct RowArrays {
  BlockArrays a;   // the row's arrays (as one block over the whole row would carve them)
  TileInfo* info;  // [tiles_per_row]
  const uint8_t* src;
  int n;           // the row's length, or -1 when it is outside [0, max_len]
};

__device__ __forceinline__ RowArrays row_arrays(const EncodeParams& p, int64_t b) {
  RowArrays r;
  const int cap = (int)padded_len(p.max_len);
  uint8_t* ws = p.workspace + b * workspace_bytes_per_tiled_row(p.max_len);
  r.a = carve(ws, ws + cap * (int64_t)kCoreBytesPerPosition, cap);
  r.info = reinterpret_cast<TileInfo*>(ws + cap * (int64_t)kBytesPerPosition);
  r.src = p.data + b * (int64_t)p.max_len;
  const int n = p.lengths[b];
  r.n = n < 0 || n > p.max_len ? -1 : n;
  return r;
}

// The kSegStart rule of initial_token, before the initial tokens exist.
__device__ __forceinline__ bool segment_starts_at(const uint8_t* is_special, const uint8_t* piece_start, int i) {
  return is_special[i] == 2 || (!is_special[i] && byte_starts_segment(i, is_special, piece_start));
}

// The (row, tile) of a per-tile block: blockIdx.x = row * tiles_per_row + tile.
struct TileAt {
  int64_t b;
  int tile;
  int lo, hi;  // the tile's bytes [lo, hi) within the row (hi clipped to the row's length)
  bool live;   // false for a tile past the row's end or a row with a bad length
};
__device__ __forceinline__ TileAt which_tile(const EncodeParams& p, const RowArrays& r) {
  const int tiles = (int)tiles_per_row(p.max_len);
  TileAt t;
  t.b = blockIdx.x / tiles;
  t.tile = (int)(blockIdx.x % tiles);
  t.lo = t.tile * kTileBytes;
  t.hi = min(t.lo + kTileBytes, r.n);
  t.live = r.n >= 0 && t.lo < r.n;
  return t;
}
__device__ __forceinline__ int64_t row_of_block(const EncodeParams& p) {
  return blockIdx.x / tiles_per_row(p.max_len);
}

// The tile's bytes into the row's text; is_special zeroed.
template <int kThreads>
__device__ __forceinline__ void load_tile(const RowArrays& r, const TileAt& t) {
  for (int i = t.lo + threadIdx.x; i < t.hi; i += kThreads) {
    r.a.text[i] = r.src[i];
    r.a.is_special[i] = 0;
  }
}

// Specials 1: every match of the tile (into a.tok, as begin_block), the matches listed in
// a.rank[lo..) (position * 2 + accepted), accepted as the row's acceptance would if it reached
// the tile's start with nothing pending (thread 0 walks the list; it is sparse).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_matches(const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::IntScan::TempStorage scan;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  load_tile<kThreads>(r, t);
  constexpr int kItems = kTileBytes / kThreads;
  const int base = t.lo + (int)threadIdx.x * kItems;
  int mine = 0;
  for (int i = base; i < base + kItems && i < hi; ++i) {
    const int k = special_match_at(p.special, r.src, r.n, i);
    r.a.tok[i] = k;
    mine += k >= 0;
  }
  int at, total;
  typename Scans<kThreads>::IntScan(scan).ExclusiveSum(mine, at, total);
  for (int i = base; mine > 0 && i < base + kItems && i < hi; ++i)
    if (r.a.tok[i] >= 0) r.a.rank[t.lo + at++] = i * 2;
  __syncthreads();
  if (threadIdx.x == 0) {
    int next = t.lo;
    for (int g = 0; g < total; ++g) {
      const int m = r.a.rank[t.lo + g] >> 1;
      if (m < next) continue;
      r.a.rank[t.lo + g] = m * 2 + 1;
      next = m + special_len(p.special, r.a.tok[m]);
    }
    r.info[t.tile].n_matches = total;
    r.info[t.tile].walk_exit = next;
  }
}

// Specials 2: the row's leftmost-first acceptance, tile by tile. Entering a tile at `next`, it
// accepts the listed matches at or after `next` until one that the tile's own walk accepted:
// from there on the two walks agree, so it leaves at that walk's exit. The tiles' counts and
// exits go through shared memory in runs of kRun tiles; thread 0 walks.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) row_specials(const __grid_constant__ EncodeParams p) {
  constexpr int kRun = 1024;
  __shared__ int2 run[kRun];  // (n_matches, walk_exit)
  const RowArrays r = row_arrays(p, blockIdx.x);
  if (r.n <= 0) return;
  const int tiles = (r.n + kTileBytes - 1) / kTileBytes;
  int next = 0;
  for (int done = 0; done < tiles; done += kRun) {
    const int len = min(kRun, tiles - done);
    __syncthreads();  // (thread 0 is done with the last run)
    for (int k = threadIdx.x; k < len; k += kThreads)
      run[k] = make_int2(r.info[done + k].n_matches, r.info[done + k].walk_exit);
    __syncthreads();
    if (threadIdx.x != 0) continue;
    for (int k = 0; k < len; ++k) {
      const int tile = done + k, lo = tile * kTileBytes;
      r.info[tile].walk_entry = next;
      for (int g = 0; g < run[k].x; ++g) {
        const int e = r.a.rank[lo + g], m = e >> 1;
        if (m < next) continue;
        if (e & 1) { next = run[k].y; break; }
        next = m + special_len(p.special, r.a.tok[m]);
      }
    }
  }
}

// Specials 3: is_special of the tile's bytes (2 at the first byte of an accepted match, 1 at
// its others, as accept_special_matches), given the acceptance entering the tile.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_specials(const __grid_constant__ EncodeParams p) {
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  const TileInfo& info = r.info[t.tile];
  for (int i = t.lo + threadIdx.x; i < min(info.walk_entry, hi); i += kThreads) r.a.is_special[i] = 1;
  if (threadIdx.x == 0) {  // the tile's acceptance, marked in the list
    int next = info.walk_entry;
    for (int g = 0; g < info.n_matches; ++g) {
      const int m = r.a.rank[t.lo + g] >> 1;
      const bool accepted = m >= next;
      r.a.rank[t.lo + g] = m * 2 + accepted;
      if (accepted) next = m + special_len(p.special, r.a.tok[m]);
    }
  }
  __syncthreads();
  for (int g = threadIdx.x; g < info.n_matches; g += kThreads) {
    const int e = r.a.rank[t.lo + g], m = e >> 1;
    if (!(e & 1)) continue;
    const int end = min(m + special_len(p.special, r.a.tok[m]), hi);
    r.a.is_special[m] = 2;
    for (int i = m + 1; i < end; ++i) r.a.is_special[i] = 1;
  }
}

// The pre-tokenizer over the tiles, in three passes (BlockPretokenizer's tile_* functions):
//   kBwd:   (without specials also the row's first kernel: text copied, is_special zeroed)
//           the NFC check of the tile's bytes and its backward map;
//   kFwd:   (after row_states<false>) the backward replay and the forward map;
//   kFlags: (after row_states<true>) the piece starts of the tile's bytes.
enum TilePass : int { kBwd, kFwd, kFlags };
template <int kThreads, int kPass>
__global__ void __launch_bounds__(kThreads) tile_pretokenize(const __grid_constant__ EncodeParams p,
                                                             bool load) {
  using Pretok = BlockPretokenizer<kThreads, kPretokItems<kThreads>>;
  __shared__ typename Pretok::TempStorage tmp;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const uint8_t* sp = p.special.count > 0 ? r.a.is_special : nullptr;
  TileInfo& info = r.info[t.tile];
  if (kPass == kBwd && load) load_tile<kThreads>(r, t);
  if (kPass == kBwd && p.pretok.nfc) {
    bool suspect = false;
    for (int i = t.lo + threadIdx.x; i < t.hi; i += kThreads)
      suspect |= nfc_suspect_at(p.pretok, p.nfc_pairs, r.src, r.n, sp, i);
    suspect = __syncthreads_or(suspect);
    if (threadIdx.x == 0) info.not_nfc = suspect;
  }
  Pretok bp(tmp);
  bp.load_tables(p.pretok.tables);
  const ClassTable ct = p.pretok.classes(0);
  if (kPass == kBwd) {
    const uint64_t m = bp.tile_bwd_map(ct, r.src, r.n, sp, t.tile);
    if (threadIdx.x == 0) info.bwd_map = m;
  } else if (kPass == kFwd) {
    const uint64_t m = bp.tile_fwd_map(ct, r.src, r.n, sp, t.tile, info.t_after, r.a.piece_start);
    if (threadIdx.x == 0) info.fwd_map = m;
  } else {
    bp.tile_flags(ct, r.src, r.n, sp, t.tile, info.s_before, r.a.piece_start);
  }
}

// The states at the tiles' edges: backward (kForward false: T after each tile, from the last
// tile down) or forward (S before each tile). The maps go through shared memory in runs of
// kRun tiles; thread 0 steps the state through them.
template <int kThreads, bool kForward>
__global__ void __launch_bounds__(kThreads) row_states(const __grid_constant__ EncodeParams p) {
  constexpr int kRun = 1024;
  __shared__ uint64_t maps[kRun];
  const RowArrays r = row_arrays(p, blockIdx.x);
  if (r.n <= 0) return;
  const int tiles = (r.n + kTileBytes - 1) / kTileBytes;
  const PretokTables& tab = p.pretok.tables[0];
  uint8_t state = kForward ? tab.fwd_init & 15 : tab.bwd_init & 15;
  for (int done = 0; done < tiles; done += kRun) {
    const int len = min(kRun, tiles - done);
    __syncthreads();  // (thread 0 is done with the last run)
    for (int k = threadIdx.x; k < len; k += kThreads) {  // k-th tile in the walk's order
      const int tile = kForward ? done + k : tiles - 1 - done - k;
      maps[k] = kForward ? r.info[tile].fwd_map : r.info[tile].bwd_map;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 0; k < len; ++k) {
        const int tile = kForward ? done + k : tiles - 1 - done - k;
        if (kForward) r.info[tile].s_before = state;
        else r.info[tile].t_after = state;
        state = map_apply(maps[k], state);
      }
    }
  }
}

// The segments that start in the tile: [first, end) runs from the first segment start in the
// tile to the first one at or after the tile's end (or the row's end), encoded by
// encode_segments on the row's arrays from `first` on, the tokens into merged[first..). Two
// tiles' stretches never overlap; the bytes of a stretch past its tile's end are read here
// only as piece_start / is_special, which encode_segments rewrites without changing whether
// a segment starts there.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kThreads>) tile_encode(
    const __grid_constant__ EncodeParams p) {
  __shared__ typename Scans<kThreads>::Storage tmp;
  __shared__ int first, end;
  StageClock clock;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  if (!t.live) return;
  const int hi = t.hi;
  if (threadIdx.x == 0) first = end = r.n;
  __syncthreads();
  for (int i = t.lo + threadIdx.x; i < hi; i += kThreads)
    if (segment_starts_at(r.a.is_special, r.a.piece_start, i)) atomicMin(&first, i);
  __syncthreads();
  const int s0 = first;
  TileInfo& info = r.info[t.tile];
  if (s0 >= hi) {  // no segment starts in the tile
    if (threadIdx.x == 0) { info.first = s0; info.count = 0; }
    return;
  }
  // The end: windows of kTileBytes after the tile, each thread a run of bytes.
  constexpr int kItems = kTileBytes / kThreads;
  for (int w = hi; w < r.n; w += kTileBytes) {
    bool found = false;
    for (int i = w + (int)threadIdx.x * kItems; i < min(w + (int)(threadIdx.x + 1) * kItems, r.n); ++i)
      if (segment_starts_at(r.a.is_special, r.a.piece_start, i)) { atomicMin(&end, i); found = true; break; }
    if (__syncthreads_or(found)) break;
  }
  __syncthreads();
  const int m = end - s0;
  BlockArrays a = r.a;
  a.text += s0; a.piece_start += s0; a.is_special += s0;
  a.tok += s0; a.rank += s0; a.next_tok += s0; a.next_rank += s0; a.merged += s0;
  int32_t* out = r.a.merged + s0;
  bool has_long;
  const int count = encode_segments<kThreads>(p, a, m, m, out, m, has_long, tmp, clock);
  if (threadIdx.x == 0) { info.first = s0; info.count = count; }
}

// Output: the tile's tokens at their place in the row (the counts of the tiles before it),
// its share of the padding, and (tile 0) the row's count, with the single-block path's
// meaning: the full count, -2 for a row that is not in NFC, -1 for a bad length.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) tile_output(const __grid_constant__ EncodeParams p) {
  __shared__ int before, total;
  const RowArrays r = row_arrays(p, row_of_block(p));
  const TileAt t = which_tile(p, r);
  const int tiles_here = r.n < 0 ? 0 : (r.n + kTileBytes - 1) / kTileBytes;
  if (threadIdx.x == 0) before = total = 0;
  __syncthreads();
  bool not_nfc = false;
  int mine_before = 0, mine = 0;
  for (int k = threadIdx.x; k < tiles_here; k += kThreads) {
    const int c = r.info[k].count;
    mine += c;
    mine_before += k < t.tile ? c : 0;
    not_nfc |= p.pretok.nfc && r.info[k].not_nfc;
  }
  if (mine) atomicAdd(&total, mine);
  if (mine_before) atomicAdd(&before, mine_before);
  not_nfc = __syncthreads_or(not_nfc);
  const int count = r.n < 0 ? -1 : (not_nfc ? kCountNotNormalized : total);
  const int filled = count < 0 ? 0 : count;
  int32_t* ids = p.ids + t.b * (int64_t)p.max_tokens;
  if (count >= 0 && t.tile < tiles_here) {
    const TileInfo& info = r.info[t.tile];
    for (int j = threadIdx.x; j < info.count && before + j < p.max_tokens; j += kThreads)
      ids[before + j] = r.a.merged[info.first + j];
  }
  const int tiles = (int)tiles_per_row(p.max_len);
  for (int64_t j = filled + t.tile * (int64_t)kThreads + threadIdx.x; j < p.max_tokens;
       j += (int64_t)tiles * kThreads)
    ids[j] = p.pad_id;
  if (t.tile == 0 && threadIdx.x == 0) p.counts[t.b] = count;
}

template <int kThreads>
cudaError_t launch_tiles(const EncodeParams& p, cudaStream_t stream) {
  const unsigned tiles = (unsigned)(p.batch * tiles_per_row(p.max_len)), rows = (unsigned)p.batch;
  const bool specials = p.special.count > 0;
  if (specials) {
    tile_matches<kThreads><<<tiles, kThreads, 0, stream>>>(p);
    row_specials<kThreads><<<rows, kThreads, 0, stream>>>(p);
    tile_specials<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  }
  tile_pretokenize<kThreads, kBwd><<<tiles, kThreads, 0, stream>>>(p, !specials);
  row_states<kThreads, false><<<rows, kThreads, 0, stream>>>(p);
  tile_pretokenize<kThreads, kFwd><<<tiles, kThreads, 0, stream>>>(p, false);
  row_states<kThreads, true><<<rows, kThreads, 0, stream>>>(p);
  tile_pretokenize<kThreads, kFlags><<<tiles, kThreads, 0, stream>>>(p, false);
  tile_encode<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  tile_output<kThreads><<<tiles, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <int kThreads>
cudaError_t launch(const EncodeParams& p, cudaStream_t stream) {
  if (tiled_rows(p.max_len, p.pretok_stages, p.symbols)) return launch_tiles<kThreads>(p, stream);
  const size_t smem = (size_t)smem_bytes_per_string(p.max_len, p.pretok_stages, p.symbols);
  const auto kernel = p.symbols == kSymbolsChars ? encode_chars_kernel<kThreads> : encode_kernel<kThreads>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  kernel<<<(unsigned)p.batch, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <bool kCheck>
ffi::Error encode_cuda(cudaStream_t stream, ffi::Buffer<ffi::U8> data, ffi::Buffer<ffi::S32> lengths,
                       ffi::Buffer<ffi::S32> pair_table, ffi::Buffer<ffi::S32> byte_ids,
                       ffi::Buffer<ffi::S32> piece_table, ffi::Buffer<ffi::S32> token_offsets,
                       ffi::Buffer<ffi::U8> token_data, ffi::Buffer<ffi::S32> special_offsets,
                       ffi::Buffer<ffi::U8> special_data, ffi::Buffer<ffi::S32> special_ids,
                       ffi::Buffer<ffi::U8> pretok, ffi::Buffer<ffi::S32> nfc_pairs,
                       ffi::Buffer<ffi::S32> char_table, int32_t pretok_stages, int32_t symbols,
                       int32_t run_long, int32_t run_step, int32_t run_width, int32_t nfc, int32_t pad_id, int32_t max_piece_len,
                       int32_t rank_is_id, int32_t block_size,
                       ffi::Result<ffi::Buffer<ffi::S32>> ids, ffi::Result<ffi::Buffer<ffi::S32>> counts,
                       ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  EncodeParams p;
  ffi::Error err = make_encode_params(data, lengths, pair_table, byte_ids, piece_table, token_offsets,
                                      token_data, special_offsets, special_data, special_ids,
                                      pretok, nfc_pairs, char_table, pretok_stages, symbols,
                                      run_long, run_step, run_width, nfc,
                                      pad_id, max_piece_len, rank_is_id, ids, counts, workspace, &p);
  if (err.failure()) return err;
  if (p.batch == 0) return ffi::Error::Success();
  if (p.workspace_size < workspace_bytes(p.batch, p.max_len, p.pretok_stages, p.symbols))
    return ffi::Error::InvalidArgument("bbpe_encode: workspace has " + std::to_string(p.workspace_size) +
                                       " bytes, needs " + std::to_string(workspace_bytes(p.batch, p.max_len, p.pretok_stages, p.symbols)));
  if (kCheck) {
    // The checked target reads the lengths back (one small copy and a stream sync) so that a
    // bad length is an exception; bbpe_encode_unchecked skips this and flags the row instead.
    std::vector<int32_t> host(p.batch);
    cudaError_t e = cudaMemcpyAsync(host.data(), p.lengths, p.batch * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
    err = check_lengths(host.data(), p.batch, p.max_len);
    if (err.failure()) return err;
  }
  cudaError_t e;
  switch (block_size) {
    case 256: e = launch<256>(p, stream); break;
    case 512: e = launch<512>(p, stream); break;
    case 1024: e = launch<1024>(p, stream); break;
    default:
      return ffi::Error::InvalidArgument("bbpe_encode: block_size must be 256, 512 or 1024, got " +
                                         std::to_string(block_size));
  }
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("bbpe_encode: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace

#ifdef BBPE_STAGE_CLOCKS
// Reads and zeroes the stage clocks (the names in StageClockSlot order).
std::vector<std::pair<std::string, unsigned long long>> read_stage_clocks() {
  static const char* names[kStageClockSlots] = {
      "load", "specials", "pretokenize", "initial", "segments", "merges", "output", "passes",
      "blocks", "long_blocks"};
  unsigned long long host[kStageClockSlots] = {};
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(host, g_stage_clocks, sizeof(host));
  const unsigned long long zero[kStageClockSlots] = {};
  cudaMemcpyToSymbol(g_stage_clocks, zero, sizeof(zero));
  std::vector<std::pair<std::string, unsigned long long>> out;
  for (int k = 0; k < kStageClockSlots; ++k) out.emplace_back(names[k], host[k]);
  return out;
}
#endif
}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCuda, bbpe::encode_cuda<true>,
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()));
// No host read-back: a fixed launch on the stream, safe to capture in a CUDA graph.
XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked, bbpe::encode_cuda<false>,
                              bbpe::bind_encode(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
