// The piece-parallel kernel of SentencePiece-style BPE (symbols = kSymbolsChars,
// core/char_symbols.h): `char_piece_kernel`, chosen as the byte-level piece kernel is
// (cuda/piece_kernel.cuh, whose layout of rows, chunks and the warps' queues it shares: the
// default wherever char_piece_eligible holds; BLOCKBPE_KERNEL=block selects the
// block-per-string `encode_chars_kernel`, cuda/chars_kernel.cuh, which also does what this
// kernel leaves).
//
// A block holds kPieceThreads chunks of kChunk bytes of one or several whole rows; each thread
// owns its chunk:
//   1. the chunk's bytes to shared memory; the initial symbols of the characters that start in
//      the chunk (char_symbols_at: a character's piece, else the byte-fallback pieces of its
//      bytes, U+FFFD's piece for an invalid byte), each at its first byte's slot (a row's
//      slots are its bytes' positions shifted by one, the slot before its first byte holding
//      its dummy prefix); kDeleted at a pieced character's other bytes;
//   2. the words: where word_starts_between holds (a `▁` after a symbol that is no joiner, a
//      byte-fallback piece and the symbol after it, an isolated character next to another:
//      char_symbols.h, "Word bounds"; the symbol before read across chunks), and the row's first
//      symbol; a mask of word starts per chunk;
//   3. the words that start in a warp's chunks dealt to its lanes (deal_warp_pieces): a word
//      whose token bytes are its own text (no U+2581, no U+FFFD for an invalid byte, no dummy
//      prefix: `▁` spells a space, every other symbol its character, bytes_spell_symbols) is
//      looked up by its text (lookup_piece, the key lookup_word would hash); the others have
//      their symbols packed at their first slot and looked up by lookup_word; one symbol is
//      its own token; a miss of up to kShortPieceLen symbols goes on the block's merge lists
//      (merge_in_lanes up to kLanePieceLen symbols, merge_in_warp beyond, both with the
//      first-only ranks: cuda/lane_merges.cuh), then its runs (merge_segment_runs), unless the
//      misses' cache has it (cuda/miss_cache.cuh; a word whose symbols are its text's
//      characters, keyed by that text up to kMissLongKeyLen bytes), which then keeps the
//      merged ones;
//   4. one block scan of the threads' token counts places every word's tokens in its row.
// A word is a segment of encode_chars, so these are its rules; nothing here defines one.
//
// Special tokens (Mistral v7's and Gemma's user-defined pieces, which sentencepiece always
// matches, and those a call allows): the kSpecials instantiation matches them at the chunk's
// bytes that may start one before step 1 and resolves the matches leftmost-first, a cluster
// per thread (the rules of core/special_tokens.h, as cuda/block_begin.cuh runs them); an
// accepted special is a word of its own, and the text after it starts one.
//
// Left to encode_chars_kernel, decided on the host (char_piece_eligible, cuda/piece_calls.cuh):
// rows wider than kPieceMaxLen bytes or tiled. Decided on the device per row (kCountPending, then
// encode_chars_kernel with pending_only): a word of more than kShortPieceLen symbols that is no
// piece (a row without word starts is one word), full merge lists, a dummy prefix before a
// special that starts the text, and a dummy prefix after a special (HF's Prepend normalizer: a
// segment's prefix has no slot of its own here). A dummy prefix that is a word of its own
// before the row's first word (kPrefixAlone) is placed by this kernel.
// Why one file: the helpers above the kernel exist for its steps alone and read its shared memory's
// layout (CharPieceSmem, the byte marks, the specials' marks by bit); apart, each would need the rest.
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "binding/encode_params.h"
#include "core/bpe_core.h"
#include "core/char_symbols.h"
#include "core/special_tokens.h"
#include "cuda/block_common.cuh"
#include "cuda/chunk_specials.cuh"
#include "cuda/lane_merges.cuh"
#include "cuda/piece_kernel.cuh"
#include "cuda/row_tokens.cuh"

namespace bbpe {
namespace {

// The block's shared memory (dynamic). Slots: row r's byte i (block position row_at + i) is
// slot row_at + i + r + 1; slot row_at + r holds its dummy prefix (or kDeleted).
template <int kChunk>
struct CharPieceSmem {
  static constexpr int kSlots = kPieceThreads * kChunk + kPieceThreads;
  int32_t tok[kSlots];  // the symbols; then each word's tokens from its first slot
  // Tokens of the word whose first symbol is at the slot (at most kShortPieceLen).
  uint8_t count[kSlots];
  __align__(16) uint8_t text[kPieceThreads * kChunk];
  uint8_t text_tail[16];          // read, never used, by short_key_at near text's end
  uint32_t masks[kPieceThreads];  // every chunk's word starts
  // Each chunk's byte marks (ByteMarks): a character whose symbol's token bytes are not its text
  // starts here (bits 0-15); the byte's symbol slot may hold kDeleted (bits 16-31).
  uint32_t byte_marks[kPieceThreads];
  uint8_t hard[kPieceThreads];    // a word of the row is left to encode_chars_kernel
  uint8_t prefixed[kPieceThreads];  // the row's dummy prefix: 0, kPrefixInWord or kPrefixAlone
  uint32_t isolated_ascii[4];       // the ASCII bytes whose pieces are isolated (is_isolated)
  union {
    uint32_t queue[kPieceWarps * kPieceQueue];  // step 3: each warp's words
    int2 slots[kPieceThreads];                  // the merges: each warp's 32 merge slots
    struct {
      int32_t row_base[kPieceThreads];  // step 4, per row of the block: its first thread's prefix
      int32_t row_total[kPieceThreads];  //   and its token count
    };
  };
  // The merge lists (first slots < kSlots and symbol counts: 16 bits), the lane list also
  // sorted longest first.
  int16_t lane_s0[kPieceLaneList], lane_len[kPieceLaneList];
  int16_t sorted_s0[kPieceLaneList], sorted_len[kPieceLaneList];
  int16_t wide_s0[kPieceWideList], wide_len[kPieceWideList];
  // Where the misses' cache may keep a listed word (lane list g, wide list kPieceLaneList + g):
  // its text's block position | (bytes - 1) << 12, else kNotKept.
  uint32_t kept_text[kPieceLaneList + kPieceWideList];
  int by_len[kLanePieceLen + 1];  // lane-list words per length, then where the next one goes
  int n_lane, n_wide, next_bin;
  int32_t ascii_ids[128];  // the char table's ASCII entries (CharView::ascii_ids), read at every byte
  // An ASCII byte's symbol where no special is at or just before it (its piece, else its
  // byte piece: what char_symbols_at gives) and that symbol's facts (symbol_facts).
  int32_t ascii_symbols[128];
  uint8_t ascii_facts[128];
  int longest_special;  // kSpecials: the block's longest match (0: none)
  typename cub::BlockScan<int, kPieceThreads>::TempStorage scan;
};

// A chunk's byte marks (CharPieceSmem::byte_marks): bit i and bit 16 + i of chunk c are block
// position c * kChunk + i (kChunk <= 16).
struct ByteMarks {
  static constexpr uint32_t kDirty = 0xFFFFu;  // a character whose symbol's token bytes are not its text starts here
  static constexpr uint32_t kMayBeDeleted = 0xFFFF0000u;  // the byte's symbol slot may hold kDeleted
  __device__ __forceinline__ static uint32_t of(uint32_t dirty, uint32_t may_be_deleted) {
    return (dirty & 0xFFFFu) | may_be_deleted << 16;
  }
};

// The byte marks of block positions [from, to), both halves ORed over the chunks they span.
template <int kChunk>
__device__ __forceinline__ uint32_t marks_between(const uint32_t* byte_marks, int from, int to) {
  uint32_t any = 0;
  for (int c = from / kChunk; c * kChunk < to; ++c) {
    const int lo = from - c * kChunk, hi = to - c * kChunk;  // bits [lo, hi) of this chunk
    uint32_t bits = 0xFFFFu;
    if (lo > 0) bits &= ~0u << lo;
    if (hi < kChunk) bits &= (1u << hi) - 1;
    any |= byte_marks[c] & (bits | bits << 16);
  }
  return any;
}

constexpr uint32_t kNotKept = 0xFFFFFFFF;

// Which of a row's bytes [base - 1, base + kChunk) hold a special's mark (sp, by byte: the
// counts' room, 4-byte aligned), as bits from bit 0; bit 0 (the byte before the chunk) is 0 at the
// row's first byte, whose slot before is the dummy prefix's. Read as aligned words
// (realigned_words), so the loads are independent of each other; marks past the string's
// bytes are whatever their slots hold (the caller tests only a string's bytes).
template <int kChunk>
__device__ __forceinline__ uint32_t special_byte_bits(const uint8_t* sp, int base) {
  const uint8_t* first = sp + base - 1;
  const int misaligned = (int)(reinterpret_cast<uintptr_t>(first) & 3);
  // (from the pointer, not from an integer: the compiler keeps its shared-memory loads)
  const uint32_t* words = reinterpret_cast<const uint32_t*>(first - misaligned);
  constexpr int kNibbles = (kChunk + 1 + 3) / 4;  // (4 bytes a nibble of bits; the last past the chunk's)
  uint32_t w[kNibbles];
  realigned_words<kNibbles>(words, 8 * (uint32_t)misaligned, w);
  uint32_t bits = 0;
#pragma unroll
  for (int q = 0; q < kNibbles; ++q) {
    // (a byte's low bit of __vcmpne4, at bits 0, 8, 16, 24, moved to bits 28-31 by one multiply:
    // the product's other terms fall below bit 28 at distinct bits, so nothing carries)
    const uint32_t nonzero = __vcmpne4(w[q], 0) & 0x01010101u;
    bits |= ((nonzero * 0x10204080u) >> 28) << (4 * q);
  }
  return base > 0 ? bits : bits & ~1u;
}

// A row's dummy prefix (CharPieceSmem::prefixed): none, the first symbol of the row's first word,
// or a word of its own (the first symbol starts one: its token is placed with the first word's,
// as one run from the prefix's slot).
constexpr uint8_t kPrefixInWord = 1, kPrefixAlone = 2;

// One word: at its first byte's block position at, len bytes, of the block's row `row` (whose
// first byte is at block position row * row_stride). Its tokens go to tok[first ...] and
// count[first], first being its first symbol's slot; a miss goes on the merge lists (symbols
// packed from its first slot), and a word left to encode_chars_kernel marks the row hard.
template <int kChunk>
__device__ __forceinline__ void encode_word(const VocabView& v, const CharView& c, CharPieceSmem<kChunk>& s, int at,
                                            int len, int row, int row_stride) {
  const int slot = at + row + 1;
  const int with_prefix = at == row * row_stride && s.prefixed[row] == kPrefixInWord;
  const int first = slot - with_prefix;
  const uint32_t marks = marks_between<kChunk>(s.byte_marks, at, at + len);
  // (plain: its symbols are its text's characters, so its text is a key of the misses' cache)
  const bool plain = !with_prefix && !(marks & ByteMarks::kDirty);
  const bool clean = plain && len <= v.max_piece_len;
  const bool keyed = plain && len <= kMissLongKeyLen && v.miss_cache;
  // (a clean word of one byte is its symbol: no key is one byte; a key read by words, as the
  // misses' cache reads it below, not a byte at a time)
  const auto read_key = [](const uint8_t* q, int n) { return short_key_at(q, n); };
  int32_t whole = c.whole_words && clean && len > 1 ? lookup_piece(v, s.text + at, len, read_key) : -1;
  if (whole < 0) {
    // The symbols packed from the first slot (a pieced character's other bytes hold kDeleted);
    // forward, so in place. (A clean word of one symbol is its symbol either way: the table's
    // keys of one character are its 2-4-byte pieces, what char_at looks up, and no key is one
    // byte.) Without a prefix or a byte that may hold kDeleted (a word of ASCII bytes) they are
    // packed already: a symbol a byte.
    int m = len;
    if (with_prefix || (marks & ByteMarks::kMayBeDeleted)) {
      m = with_prefix;
      for (int j = slot; j < slot + len && m <= kShortPieceLen; ++j) {
        const int32_t x = s.tok[j];
        if (x != kDeleted) s.tok[first + m++] = x;
      }
    }
    if (m > kShortPieceLen) {
      s.hard[row] = 1;
      return;
    }
    if (m > 1 && c.whole_words && !clean) whole = lookup_word(v, s.tok + first, m);
    if (whole < 0 && m > 1) {
      if (keyed) {  // merged before: the tokens from the misses' cache
        const MissKey key = miss_key_at(s.text + at, len);
        const int got = find_merged_miss<kMissLongKeyLen>(v, key, len, s.tok + first);
        if (got) {
          s.count[first] = (uint8_t)got;
          return;
        }
      }
      s.count[first] = (uint8_t)m;  // (until the merges write the count)
      const bool lanes = m <= kLanePieceLen;
      const int g = atomicAdd(lanes ? &s.n_lane : &s.n_wide, 1);
      if (g >= (lanes ? kPieceLaneList : kPieceWideList)) {
        s.hard[row] = 1;
      } else {
        s.kept_text[g + (lanes ? 0 : kPieceLaneList)] = keyed ? (uint32_t)(at | (len - 1) << 12) : kNotKept;
        if (lanes) {
          s.lane_s0[g] = (int16_t)first, s.lane_len[g] = (int16_t)m;
          atomicAdd(&s.by_len[m], 1);
        } else {
          s.wide_s0[g] = (int16_t)first, s.wide_len[g] = (int16_t)m;
        }
      }
      return;
    }
  }
  if (whole >= 0) s.tok[first] = whole;
  s.count[first] = 1;
}

// kSpecials: the call has special tokens (Gemma's and Mistral v7's user-defined pieces, which
// sentencepiece always matches; those allowed in the call): matched at the chunk's bytes that
// have a first-byte slot (special_match_with, on the table built at load), unless no byte of
// the block has one, the matches resolved leftmost-first a cluster per thread
// (accept_special_cluster), then each accepted special is a word of its own and a word starts
// after it (initial_char_token's segments). A kernel of its own: the text without specials pays
// none of it.
template <int kChunk, bool kSpecials>
__global__ void __launch_bounds__(kPieceThreads, 4) char_piece_kernel(const __grid_constant__ EncodeParams p, int cpr,
                                                                   int rows_per_block) {
  static_assert(kChunk <= 16, "a chunk's word starts are one 32-bit mask");
  static_assert(kShortPieceLen <= 255, "a word's token count is one byte");
  static_assert(CharPieceSmem<kChunk>::kSlots <= 32767, "slots are 16-bit list entries");
  static_assert(4 * (sizeof(CharPieceSmem<kChunk>) + 1024) <= 228 * 1024,
                "four blocks fit an SM's shared memory (228 KB on sm_90, 1 KB of it reserved per block)");
  static_assert(kPieceWarps * kPieceQueue * 4 <= sizeof(int2) * kPieceThreads, "the queues fit the slots' room");
  extern __shared__ __align__(16) uint8_t char_piece_smem[];
  CharPieceSmem<kChunk>& s = *reinterpret_cast<CharPieceSmem<kChunk>*>(char_piece_smem);
  StageClock clock;
  allow_dependent_launch();  // (the fill launch's blocks wait for this grid's end: encode_cuda.cu)
  const VocabView& v = p.vocab;
  CharView c = char_view(p.chars);
  const int t = threadIdx.x;
  if (t < 128) {
    const int32_t id = __ldg(c.ascii_ids + t);
    s.ascii_ids[t] = id;
    const bool isolated = id >= 0 && is_isolated(c, id);
    const uint32_t isolated_bits = __ballot_sync(~0u, isolated);
    if ((t & 31) == 0) s.isolated_ascii[t / 32] = isolated_bits;
    const int32_t symbol = ascii_symbol(v, c, (uint8_t)t);  // (c.ascii_ids: still the table's)
    s.ascii_symbols[t] = symbol;
    s.ascii_facts[t] = symbol_facts(c, symbol, isolated);
  }
  c.ascii_ids = s.ascii_ids;  // (after the first barrier below)
  const int r = t / cpr, k = t - r * cpr;  // the thread's row in the block, its chunk in the row
  const int64_t b = (int64_t)blockIdx.x * rows_per_block + r;
  const bool in_row = r < rows_per_block && b < p.batch;
  int n = in_row ? __ldg(p.lengths + b) : 0;
  const bool bad = in_row && (n < 0 || n > p.max_len);  // (only an unchecked call passes one)
  if (bad) n = 0;
  const int base = k * kChunk;
  const int valid = max(0, min(kChunk, n - base));  // the chunk's bytes of the string
  const int nv = (n + kChunk - 1) / kChunk;         // the row's chunks that hold bytes
  const int row_stride = cpr * kChunk;
  const int row_at = r * row_stride;  // the row's first block position
  const uint8_t* text = s.text + row_at;
  int32_t* sym = s.tok + row_at + r + 1;  // the row's symbols by byte; sym[-1]: its dummy prefix
  // kSpecials: the specials' marks by byte (initial_char_token's is_special: 2 at an accepted
  // special's first byte, 1 at its others), in the counts' room until step 3 writes the counts;
  // the matches' entries (special_match_entry) in the symbols' room until step 1 writes the symbols.
  uint8_t* sp = kSpecials ? s.count + row_at + r + 1 : nullptr;
  int32_t* match_len = sym;
  if (t < rows_per_block) s.hard[t] = 0;
  if (t == 0) s.n_lane = s.n_wide = s.next_bin = s.longest_special = 0;
  if (t <= kLanePieceLen) s.by_len[t] = 0;
  if (valid > 0)
    load_chunk<kChunk>(p.data + b * (int64_t)p.max_len + base, s.text + row_at + base, valid,
                       base + kChunk <= p.max_len);
  const bool escaped = kSpecials && specials_escaped(p.chars);
  // kSpecials: the specials' marks (cuda/chunk_specials.cuh); a block with no byte that may start
  // one skips the matching. (Its first barrier ends the loads: the load stage's clock stops
  // before it.)
  bool block_may_start = false;
  if constexpr (kSpecials) {
    clock.mark(kClockLoad);
    uint32_t matched;
    block_may_start = match_chunk_specials<kChunk>(p, text, n, base, valid, escaped, match_len, sp,
                                                   &s.longest_special, &matched);
    clock.mark(kClockSpecials);
  } else {
    __syncthreads();
    clock.mark(kClockLoad);
  }

  // 1. The symbols of the characters that start in the chunk (one that starts in an earlier
  // chunk is that chunk's), the row's dummy prefix, and the word starts between two of the
  // chunk's symbols (word_starts_between; an isolated piece is one ASCII character's alone, so
  // a symbol is isolated where its byte is such a character, not a special's).
  const auto isolated_at = [&](int i) {
    const uint8_t byte = text[i];
    return byte < 0x80 && !(kSpecials && sp[i]) && ((s.isolated_ascii[byte >> 5] >> (byte & 31)) & 1);
  };
  uint32_t dirty = 0;  // chunk bits: U+2581 or U+FFFD for an invalid byte
  // Chunk bits: bytes whose symbol slot may hold kDeleted (a special's other bytes, a pieced
  // character's; before the walk's first byte, an earlier chunk's character's, whatever its symbols).
  uint32_t may_be_deleted = 0;
  uint32_t fm = row_start_bit(k, n);  // the chunk's word starts
  bool hard = false;
  if (in_row && k == 0) {
    const bool prefix = n > 0 && prefix_before(c, text, n, sp, 0);
    sym[-1] = prefix ? c.prefix_id : kDeleted;
    s.prefixed[r] = prefix ? kPrefixInWord : 0;
    hard = prefix && kSpecials && sp[0] == 2;  // the prefix alone is a segment
  }
  int walked = base + valid;  // the first byte the walk reaches (the symbols before it: step 2)
  if (valid > 0) {
    const int32_t space_piece = c.ascii_ids[' '];
    int i = base;
    if ((text[i] & 0xC0) == 0x80) {
      const int lead = utf8_lead_of(text, n, sp, i);
      uint32_t cp;
      if (lead >= 0) i = lead + utf8_decode(text, n, sp, lead, &cp);
    }
    walked = i;
    may_be_deleted = (1u << min(walked - base, kChunk)) - 1;
    const bool specials_here = kSpecials && block_may_start;  // (else sp is all zero)
    // The text after a special starts a segment (HF's prefix before every segment: a row that
    // needs one is left to encode_chars).
    const auto segment_after_special = [&](int at) {
      fm |= 1u << (at - base);
      hard |= prefix_before(c, text, n, sp, at);
    };
    // A. The chunk's ASCII bytes that are no special's (most of prose), every lane on the same
    // byte of its chunk: a byte's symbol and word-bound facts from the block's tables (the walk's
    // own steps would give the same symbols and starts at several times the instructions), and
    // the word start between two such bytes. A lane that walked its characters past ASCII
    // between runs would leave the warp's other lanes to run their rest of the chunk without it,
    // and come back to its own later: a warp would take two or three turns over its chunks.
    // The chunk's bytes and marks are read into registers first: read in the loop, after its
    // stores to the symbols (which the compiler must assume may alias bytes), each byte's reads
    // would wait for the byte before's.
    uint32_t ascii_run = 0;  // bit j: byte base + j took its symbol here
    {
      const ChunkBytes<kChunk> bytes(text + base);
      // bit j + 1: byte base + j is a special's; bit 0: the byte before the chunk
      const uint32_t special_bytes = specials_here ? special_byte_bits<kChunk>(sp, base) : 0;
      int32_t before = kDeleted;  // the byte before's symbol when it took one here
      uint8_t before_facts = 0;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int at = base + j;
        const uint8_t byte = j < valid ? bytes[j] : 0x80;
        if (at >= walked && byte < 0x80 && !((special_bytes >> (j + 1)) & 1)) {
          const int32_t symbol = s.ascii_symbols[byte];
          const uint8_t facts = s.ascii_facts[byte];
          sym[at] = symbol;
          ascii_run |= 1u << j;
          if ((special_bytes >> j) & 1) {
            segment_after_special(at);
          } else if (before != kDeleted && word_starts_between_facts(before, before_facts, symbol, facts)) {
            fm |= 1u << j;
          }
          before = symbol, before_facts = facts;
        } else {
          before = kDeleted;
        }
      }
    }
    // B. The other bytes from the walk's first one (characters past ASCII, specials' bytes), in
    // order, a step a character: each lane's next one in the same turn. The symbol before the
    // next one when it is the chunk's (kDeleted: not known here), and whether it is isolated.
    int32_t before = kDeleted;
    bool before_isolated = false;
    const auto step_to = [&](int at, int32_t symbol, bool isolated) {
      if (before != kDeleted && at - base < kChunk && word_starts_between(c, before, symbol, before_isolated, isolated))
        fm |= 1u << (at - base);
      before = symbol, before_isolated = isolated;
    };
    const int skipped = min(walked - base, kChunk);
    uint32_t rest = ~ascii_run & ((1u << valid) - 1) & ~((1u << skipped) - 1);  // (valid, skipped <= 16)
    while (rest) {
      i = base + __ffs(rest) - 1;
      if (i > base && ((ascii_run >> (i - 1 - base)) & 1)) {  // after an ASCII byte of A
        before = sym[i - 1];
        before_isolated = (s.ascii_facts[text[i - 1]] & kFactIsolated) != 0;
      }
      if (kSpecials && sp[i]) {  // an accepted special: its id at its first byte, a word
        if (sp[i] == 2) {  // (its match's entry still in the symbols' room: no thread wrote byte i yet)
          sym[i] = accepted_special_id(p, match_len[i], text, n, i, escaped);
          dirty |= 1u << (i - base);
          fm |= 1u << (i - base);
          before = sym[i], before_isolated = false;  // (what follows starts a segment)
        } else {
          sym[i] = kDeleted;
          may_be_deleted |= 1u << (i - base);
        }
        ++i;
      } else {
        if (kSpecials && i > 0 && sp[i - 1]) segment_after_special(i);
        int count;
        const int step = char_symbols_at(v, c, text, n, sp, i, sym + i, &count);
        const int32_t first_symbol = sym[i];
        if (count == 1) {
          for (int j = 1; j < step; ++j) sym[i + j] = kDeleted;
          may_be_deleted |= ((1u << step) - 2) << (i - base);  // (bits past the chunk: dropped below)
          // (under the whole-word gate every piece spells its character and `▁` a space, the
          // loaders' one character that shares its piece: only U+2581 and U+FFFD for an invalid
          // byte differ from their text)
          if (step > 1 ? first_symbol == space_piece : (text[i] >= 0x80 && first_symbol == c.replacement_id))
            dirty |= 1u << (i - base);
          step_to(i, first_symbol, isolated_at(i));
        } else {
          for (int j = 0; j < count; ++j) {
            hard |= sym[i + j] == c.word_start_id;  // (a byte piece never is `▁`)
            step_to(i + j, sym[i + j], false);
          }
        }
        i += step;
        // The ASCII byte of A right after this character: its word start, which A could not see.
        if (i - base < valid && ((ascii_run >> (i - base)) & 1) && before != kDeleted) {
          const uint8_t byte = text[i];
          if (word_starts_between_facts(before, symbol_facts(c, before, before_isolated), s.ascii_symbols[byte],
                                        s.ascii_facts[byte]))
            fm |= 1u << (i - base);
        }
      }
      rest &= i - base < 32 ? ~0u << (i - base) : 0u;
    }
  }
  s.byte_marks[t] = ByteMarks::of(dirty, may_be_deleted & ((1u << kChunk) - 1));
  __syncthreads();

  // 2. Whether the chunk's symbols before the walk's first byte and at it start a word, their
  // symbol before being an earlier chunk's (or the row's dummy prefix: where the row's first
  // symbol starts a word after it, the prefix is a word of its own).
  for (int i = base; i <= walked && i < base + valid; ++i) {
    if (sym[i] == kDeleted || (kSpecials && sp[i])) continue;  // (a special's first byte starts a word)
    int j = i - 1;
    while (j >= 0 && sym[j] == kDeleted) --j;  // (the lead of a pieced character, or a special's first byte)
    const int32_t before = j >= 0 ? sym[j] : sym[-1];  // (kDeleted: the row's start, no prefix)
    if (before == kDeleted || !word_starts_between(c, token_id(before), sym[i], j >= 0 && isolated_at(j), isolated_at(i)))
      continue;
    if (i == 0) {
      s.prefixed[r] = kPrefixAlone;
    } else {
      fm |= 1u << (i - base);
    }
  }
  if (hard) s.hard[r] = 1;
  s.masks[t] = fm;
  __syncthreads();
  clock.mark(kClockInitial);

  // 3. The warp's words; then the misses, by all the block's warps.
  deal_warp_pieces<kChunk>(s.queue + (t / 32) * kPieceQueue, r, row_at, n, s.masks + t + 1, k < nv ? nv - 1 - k : 0,
                           fm, base, [&](int at, int len, int row) {
                             encode_word<kChunk>(v, c, s, at, len, row, row_stride);
                           });
  __syncthreads();  // (the lists are complete; the queues are no longer read: their room is the slots')
  clock.mark(kClockSegments);
  if (t < 32) longest_first_offsets(s.by_len);
  __syncthreads();
  const int n_lane = min(s.n_lane, kPieceLaneList), n_wide = min(s.n_wide, kPieceWideList);
  clock.merged(n_lane + n_wide);
  // Listed word g (the lane list's, then the wide one's): whether the cache may keep it, and where
  // its text (at, len) and its tokens (first) are.
  const auto kept = [&](int g, int& at, int& len, int& first) {
    const uint32_t e = s.kept_text[g < n_lane ? g : kPieceLaneList + g - n_lane];
    if (e == kNotKept) return false;
    at = e & 0xFFF, len = (e >> 12) + 1, first = g < n_lane ? s.lane_s0[g] : s.wide_s0[g - n_lane];
    return true;
  };
  for (int g = t; g < n_lane; g += kPieceThreads) {
    const int m = s.lane_len[g], at = atomicAdd(&s.by_len[m], 1);
    s.sorted_s0[at] = s.lane_s0[g], s.sorted_len[at] = (int16_t)m;
  }
  {
    const int warp = t / 32;
    int2* slots = s.slots + warp * 32;
    for (int g = warp; g < n_wide; g += kPieceWarps) {
      const int at = s.wide_s0[g];
      const int count = merge_in_warp<true>(v, s.tok + at, s.wide_len[g], slots, TokensIn{s.tok + at});
      if ((t & 31) == 0) s.count[at] = (uint8_t)count;
    }
    __syncthreads();  // (the sorted list is complete)
    if (n_lane + n_wide > 0) {  // (the first listed word, by its text where the cache keys it so)
      int at = 0, len = -1, first;
      kept(0, at, len, first);
      clock.merged_piece(s.text + at, len);
    }
    merge_in_lanes<true>(v, s.tok, s.count, s.sorted_s0, s.sorted_len, n_lane, &s.next_bin,
                         TokensIn{s.tok});
  }
  __syncthreads();
  if (c.run_long > 0) {  // the runs of the merged words (a word of one token has none to merge)
    for (int g = t; g < n_lane + n_wide; g += kPieceThreads) {
      const int at = g < n_lane ? s.lane_s0[g] : s.wide_s0[g - n_lane];
      s.count[at] = (uint8_t)merge_segment_runs(c, s.tok + at, s.count[at]);
    }
    __syncthreads();
  }
  clock.mark(kClockMerges);  // (the merges and the runs)
  keep_merged_misses<kPieceThreads>(v, s.text, s.tok, s.count, n_lane + n_wide, kept);
  clock.mark(kClockKeep);  // (thread 0's own puts)
  const int prefix_slot = row_at + r;  // (the first word's first slot where the row is prefixed)
  // (a prefix alone: its token and the first word's, from its slot, as one run)
  if (in_row && k == 0 && s.prefixed[r] == kPrefixAlone) s.count[prefix_slot] = 1 + s.count[prefix_slot + 1];
  const auto first_slot = [&](int i) { return i == 0 && s.prefixed[r] ? prefix_slot : prefix_slot + 1 + i; };
  // 4. Placement (the queues' room, read by step 3, becomes the rows' sums: a barrier after the
  // scan); a pending row is encode_chars_kernel's.
  place_row_tokens<true>(p, s, r, k, cpr, b, in_row, bad, fm, [&](int i) { return first_slot(base + i); });
  clock.mark(kClockOutput);
  clock.count(kClockBlocks, true);
}

}  // namespace
}  // namespace bbpe
