// The XLA FFI signature of `bbpe_encode`, shared by the CPU and CUDA handlers, the checks
// that turn its buffers into EncodeParams, and the handler around both (encode_handler). Everything checked here is known without reading
// device memory (shapes, sizes); the string lengths are checked by each handler.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "binding/encode_params.h"
#include "binding/table_operands.h"
#include "xla/ffi/api/ffi.h"

namespace bbpe {

// bind_encode's signature. Operands in order: data, lengths, then the tables (TableOperands,
// binding/table_operands.h: the vocabulary and special-token tables, the pre-tokenizer tables
// (pretok/tables.h, PretokView), the NFC composition pairs or normalization data, the character tables of
// SentencePiece-style BPE (core/char_symbols.h)).
// Attributes (by name, decode_attrs): pretok_stages (0: bytes mode, no pre-tokenizer), symbols (core/char_symbols.h:
// kSymbolsBytes or kSymbolsChars), normalizer (NormalizerAttr, pretok/tables.h:
// NFC and Lowercase tables in the operand, and whether the text is normalized here), pad_id, max_piece_len (0
// disables the whole-piece shortcut), rank_is_id (1: every pair's rank is its merged id, as
// in tiktoken vocabularies), block_size.
// Results: ids, counts, workspace.

template <typename Binding>
auto bind_encode(Binding b) {
  // (one expression: a Binding can be returned, not moved into a local)
  return bind_tables(std::move(b).template Arg<ffi::Buffer<ffi::U8>>()  // data [..., L]
                         .template Arg<ffi::Buffer<ffi::S32>>())      // lengths [...]
      .template Attrs()                       // by name: decode_attrs
      .template Ret<ffi::Buffer<ffi::S32>>()  // ids [..., T]
      .template Ret<ffi::Buffer<ffi::S32>>()  // counts [...]
      .template Ret<ffi::Buffer<ffi::U8>>();  // workspace
}

inline bool is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

inline int64_t leading_count(ffi::Span<const int64_t> dims, size_t drop_last) {
  int64_t n = 1;
  for (size_t i = 0; i + drop_last < dims.size(); ++i) n *= dims[i];
  return n;
}

// The encode call's attributes that go with its tables (every one but block_size).
struct TableAttrs {
  int32_t pretok_stages, symbols, run_long, run_step, run_width, normalizer, pad_id, max_piece_len, rank_is_id;
};

// Every attribute of an encode call (bbpe_encode's; bbpe_encode_window's adds sep_id).
struct EncodeAttrs {
  TableAttrs table;
  int32_t block_size = 0;
  int32_t sep_id = -1;
};

// The attributes by name, read from the call's dictionary: the one list of their names (the
// Python side passes them by name too, ops/primitive.py). Each must be present and an int32;
// sep_id only where `with_sep_id`.
inline ffi::Error decode_attrs(const char* target, const ffi::Dictionary& attrs, bool with_sep_id,
                               EncodeAttrs* out) {
  struct Named {
    const char* name;
    int32_t* field;
  };
  TableAttrs& t = out->table;
  const Named named[] = {{"pretok_stages", &t.pretok_stages}, {"symbols", &t.symbols},
                         {"run_long", &t.run_long},           {"run_step", &t.run_step},
                         {"run_width", &t.run_width},         {"normalizer", &t.normalizer},
                         {"pad_id", &t.pad_id},               {"max_piece_len", &t.max_piece_len},
                         {"rank_is_id", &t.rank_is_id},       {"block_size", &out->block_size},
                         {"sep_id", &out->sep_id}};
  const size_t expected = with_sep_id ? std::size(named) : std::size(named) - 1;
  if (attrs.size() != expected)
    return ffi::Error::InvalidArgument(std::string(target) + ": " + std::to_string(attrs.size()) +
                                       " attributes, expected " + std::to_string(expected));
  for (const Named& a : named) {
    if (!with_sep_id && a.field == &out->sep_id) continue;
    ffi::ErrorOr<int32_t> value = attrs.get<int32_t>(a.name);
    if (value.has_error())
      return ffi::Error::InvalidArgument(std::string(target) + ": attribute " + a.name +
                                         " missing or not an int32");
    *a.field = *value;
  }
  return ffi::Error::Success();
}

// The vocabulary, special-token, pre-tokenizer, NFC and character tables and the attributes
// they go with, checked into `p` (every field but the batch's: data, lengths, sizes, outputs).
// `target` names the FFI target in the errors.
inline ffi::Error make_table_params(const char* target, const TableOperands& t, const TableAttrs& a,
                                    EncodeParams* p) {
  auto bad = [target](const std::string& what) {
    return ffi::Error::InvalidArgument(std::string(target) + ": " + what);
  };
  const int64_t pair_rows = t.pair_table.size / 4;
  if (t.pair_table.size % 4 != 0 || !is_power_of_two(pair_rows))
    return bad("pair_table must be int32[P, 4] with P a power of two");
  const int64_t piece_rows = t.piece_table.size / kPieceRowInts;
  if (t.piece_table.width != kPieceRowInts || t.piece_table.size % kPieceRowInts != 0 ||
      !is_power_of_two(piece_rows))
    return bad("piece_table must be int32[Q, 8] with Q a power of two");
  if (t.byte_ids.size != 256) return bad("byte_ids must be int32[256]");
  if (t.token_offsets.size < 2 || t.token_data.size < 1)
    return bad("the token tables are empty");
  const int64_t n_special = (int64_t)t.special_offsets.size - 1;
  if (n_special < 0 || (int64_t)t.special_ids.size < (n_special > 0 ? n_special : 1) ||
      t.special_data.size < 1)
    return bad("special-token tables are inconsistent");
  if (t.special_starts.size != (int64_t)sizeof(SpecialStarts) ||
      reinterpret_cast<uintptr_t>(t.special_starts.data) % alignof(SpecialStarts) != 0)
    return bad("special_starts must be uint8[" + std::to_string(sizeof(SpecialStarts)) +
               "], 4-byte aligned: the table the CPU module's special_starts builds for the same specials");
  if (a.pretok_stages < 0 || a.pretok_stages > kMaxPretokStages)
    return bad("pretok_stages must be in [0, " + std::to_string(kMaxPretokStages) + "], got " +
               std::to_string(a.pretok_stages));
  if (!pretok_view(t.pretok.data, (int64_t)t.pretok.size, a.pretok_stages, a.normalizer, &p->pretok))
    return bad("the pre-tokenizer operand has " + std::to_string(t.pretok.size) +
               " bytes, which is not the layout of " + std::to_string(a.pretok_stages) +
               " stage(s) with normalizer=" + std::to_string(a.normalizer));
  p->nfc_rewrite = NfcOperand{};
  if (t.nfc_pairs.size % 2 == 1) {
    // The NFC normalization operand (an odd count, pretok/nfc_normalize.h: its header is read
    // where it lives, by the executor): the rows are normalized instead of checked.
    if (!(a.normalizer & kNormNfc))
      return bad("nfc_pairs must be int32[K, 2]; an odd count is the NFC normalization operand, which needs "
                 "the normalizer's NFC bit");
    p->nfc_pairs = NfcPairs{t.nfc_pairs.data, 0};
    if (p->pretok.nfc) p->nfc_rewrite = NfcOperand{t.nfc_pairs.data, (int64_t)t.nfc_pairs.size};
    p->pretok.nfc = false;
  } else {
    if (t.nfc_pairs.size < 2) return bad("nfc_pairs must be int32[K, 2] with K >= 1, or the NFC operand");
    p->nfc_pairs = NfcPairs{t.nfc_pairs.data, (int32_t)(t.nfc_pairs.size / 2)};
  }
  if (a.max_piece_len < 0) return bad("max_piece_len must be >= 0");
  if (a.symbols != kSymbolsBytes && a.symbols != kSymbolsChars)
    return bad("symbols must be 0 (bytes) or 1 (characters), got " + std::to_string(a.symbols));
  p->symbols = a.symbols;
  p->chars = CharTable{};
  if (a.symbols == kSymbolsChars) {
    // Merges over characters have no pre-tokenizer and no normalizer here (a SentencePiece
    // model's normalizer is refused at load unless char_bpe.py can replay it on the host).
    if (a.pretok_stages != kModeBytes || a.normalizer != 0)
      return bad("symbols=1 (characters) takes pretok_stages=0 and normalizer=0");
    const int64_t size = (int64_t)t.char_table.size;
    const bool runs_ok = a.run_long == 0 || (a.run_long > 0 && a.run_long <= 4096 && a.run_step >= 1 &&
                                           a.run_step <= a.run_long && a.run_width >= 1 && a.run_width <= 4096);
    if (!runs_ok || size != kCharTableHeader + (int64_t)a.run_long * a.run_width)
      return bad("char_table must be int32[" + std::to_string(kCharTableHeader) + " + T * W] with "
                 "1 <= run_step <= T (char_symbols.h); got " + std::to_string(size) +
                 " entries, T=" + std::to_string(a.run_long) + ", run_step=" + std::to_string(a.run_step) +
                 ", W=" + std::to_string(a.run_width));
    // (device memory under CUDA: the kernel reads it, char_view)
    p->chars = CharTable{t.char_table.data, a.run_long, a.run_step, a.run_width};
  }
  p->pad_id = a.pad_id;
  p->pretok_stages = a.pretok_stages;
  p->vocab = VocabView{t.pair_table.data, (uint32_t)(pair_rows - 1), t.byte_ids.data,
                       t.piece_table.data, (uint32_t)(piece_rows - 1),
                       t.token_offsets.data, t.token_data.data,
                       (int32_t)t.token_offsets.size - 1, a.max_piece_len,
                       (int64_t)t.token_data.size, a.rank_is_id != 0};
  p->special = SpecialView{t.special_offsets.data, t.special_data.data, t.special_ids.data, (int32_t)n_special,
                           reinterpret_cast<const SpecialStarts*>(t.special_starts.data)};
  // The misses' cache: rows of kMissCacheInts, a power of two of them; one row is none. (The
  // kernels write it: the one operand they do, cuda/miss_cache.cuh.)
  const int64_t cache_rows = t.miss_cache.size / kMissCacheInts;
  if (t.miss_cache.width != kMissCacheInts || t.miss_cache.size % kMissCacheInts != 0 || !is_power_of_two(cache_rows))
    return bad("miss_cache must be int32[C, " + std::to_string(kMissCacheInts) + "] with C a power of two");
  p->vocab.miss_cache = cache_rows > 1 ? const_cast<int32_t*>(t.miss_cache.data) : nullptr;
  p->vocab.miss_mask = (uint32_t)(cache_rows - 1);
  p->stitch_margin = kStitchMargin;
  return ffi::Error::Success();
}

// The call's table operands decoded (decode_tables) and checked with their attributes into `p`
// (make_table_params): what both handlers, bbpe_encode's and bbpe_encode_window's, do first.
inline ffi::Error decode_table_params(const char* target, const ffi::RemainingArgs& table_args,
                                      const TableAttrs& attrs, EncodeParams* p) {
  TableOperands tables;
  const ffi::Error err = decode_tables(target, table_args, &tables);
  if (err.failure()) return err;
  return make_table_params(target, tables, attrs, p);
}

// The batch's operands and results checked into `p` (the rest: decode_table_params).
inline ffi::Error make_encode_params(ffi::Buffer<ffi::U8> data, ffi::Buffer<ffi::S32> lengths,
                                     ffi::Result<ffi::Buffer<ffi::S32>> ids,
                                     ffi::Result<ffi::Buffer<ffi::S32>> counts,
                                     ffi::Result<ffi::Buffer<ffi::U8>> workspace, EncodeParams* p) {
  auto bad = [](const std::string& what) { return ffi::Error::InvalidArgument("bbpe_encode: " + what); };
  const auto ddims = data.dimensions();
  if (ddims.size() < 1) return bad("data must have a trailing byte axis: uint8[batch, max_len]");
  const int64_t batch = leading_count(ddims, 1);
  const int64_t max_len = ddims.back();
  if (max_len > (1 << 30)) return bad("max_len is too large");
  if ((int64_t)lengths.element_count() != batch)
    return bad("lengths must have one entry per string (" + std::to_string(batch) + "), got " +
               std::to_string(lengths.element_count()));
  const auto idims = ids->dimensions();
  if (idims.size() < 1 || leading_count(idims, 1) != batch || (int64_t)counts->element_count() != batch)
    return bad("ids must be int32[batch, max_tokens] and counts int32[batch]");
  p->data = data.typed_data();
  p->lengths = lengths.typed_data();
  p->batch = batch;
  p->max_len = (int32_t)max_len;
  p->max_tokens = (int32_t)idims.back();
  p->ids = ids->typed_data();
  p->counts = counts->typed_data();
  p->workspace = workspace->typed_data();
  p->workspace_size = (int64_t)workspace->element_count();
  return ffi::Error::Success();
}

// Host-side check of the string lengths (the CUDA handler copies them back first).
inline ffi::Error check_lengths(const int32_t* lengths, int64_t batch, int32_t max_len) {
  for (int64_t b = 0; b < batch; ++b) {
    if (lengths[b] < 0 || lengths[b] > max_len)
      return ffi::Error::InvalidArgument(
          "bbpe_encode: lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
          " is outside [0, " + std::to_string(max_len) + "]");
  }
  return ffi::Error::Success();
}

// The handler of the signature above, for CPU and CUDA alike: its operands and attributes
// checked into EncodeParams (make_encode_params, decode_table_params), then `Body(ctx..., params,
// block_size)`. Ctx: what the binding passes before the operands (the CUDA stream; nothing on CPU).
template <auto Body, typename... Ctx>
ffi::Error encode_handler(Ctx... ctx, ffi::Buffer<ffi::U8> data, ffi::Buffer<ffi::S32> lengths,
                          ffi::RemainingArgs table_args, ffi::Dictionary attr_dict,
                          ffi::Result<ffi::Buffer<ffi::S32>> ids, ffi::Result<ffi::Buffer<ffi::S32>> counts,
                          ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  EncodeAttrs attrs;
  ffi::Error err = decode_attrs("bbpe_encode", attr_dict, false, &attrs);
  if (err.failure()) return err;
  EncodeParams p;
  err = make_encode_params(data, lengths, ids, counts, workspace, &p);
  if (err.failure()) return err;
  err = decode_table_params("bbpe_encode", table_args, attrs.table, &p);
  if (err.failure()) return err;
  return Body(ctx..., p, attrs.block_size);
}

}  // namespace bbpe
