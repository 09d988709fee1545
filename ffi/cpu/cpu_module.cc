// CPU FFI target `bbpe_encode` and the nanobind module that registers it (the corpus job's host
// helpers: corpus_helpers.cc).

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "binding/encode_ffi.h"
#include "binding/split_lines_ffi.h"
#include "binding/window_ffi.h"
#include "binding/module_binding.h"
#include "core/host_threads.h"
#include "core/pack_strings.h"
#include "cpu/arrays.h"
#include "cpu/encode_cpu.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/string.h"

namespace ffi = xla::ffi;

void bind_nfc_normalize(nb::module_& m);  // nfc_batch.cc

namespace bbpe {

// Strings are independent: split the batch over a few host threads.
static void encode_rows(const EncodeParams& p, int64_t begin, int64_t end) {
  CpuScratch scratch;
  for (int64_t b = begin; b < end; ++b) {
    const int n = encode_string(p, p.data + b * p.max_len, p.lengths[b], scratch);
    int32_t* out = p.ids + b * p.max_tokens;
    const int kept = std::max(0, std::min(n, p.max_tokens));  // (n < 0: a reported row)
    for (int j = 0; j < kept; ++j) out[j] = token_id(scratch.tok[j]);
    std::fill(out + kept, out + p.max_tokens, p.pad_id);
    p.counts[b] = n;
  }
}

// (block_size: a CUDA launch setting, unused here)
static ffi::Error encode_cpu(const EncodeParams& p, int32_t /*block_size*/) {
  ffi::Error err = check_lengths(p.lengths, p.batch, p.max_len);
  if (err.failure()) return err;
  int64_t text_bytes = 0;  // (a batch of a few short strings stays on this thread)
  for (int64_t b = 0; b < p.batch; ++b) text_bytes += p.lengths[b];
  over_ranges(
      p.batch, text_bytes, kHostBytesPerThread, [&](int64_t lo, int64_t hi) { encode_rows(p, lo, hi); },
      host_cores());
  return ffi::Error::Success();
}

// A window's calls (binding/window_ffi.h) one after the other, each split over host threads
// like a batch: its rows copied out of the window's bytes, encoded into the id buffer, then
// (packed rows) the separators' positions placed.
static ffi::Error encode_window_cpu(const EncodeParams& base, const std::vector<WindowCall>& calls,
                                   const WindowArgs& w, int32_t block_size) {
  std::vector<uint8_t> rows;
  std::vector<int32_t> lengths, counts;
  for (const WindowCall& c : calls) {
    rows.assign((size_t)(c.rows * c.width), 0);
    lengths.resize((size_t)c.rows);
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t start = w.table[c.entry + r], n = w.table[w.entries + c.entry + r];
      if (!entry_inside(start, n, c.width, w.size))
        return ffi::Error::InvalidArgument("bbpe_encode_window: table entry " + std::to_string(c.entry + r) +
                                           " reads bytes [" + std::to_string(start) + ", +" + std::to_string(n) +
                                           ") of " + std::to_string(w.size) + " into a row of " +
                                           std::to_string(c.width));
      std::memcpy(rows.data() + r * c.width, w.bytes + start, (size_t)n);
      lengths[(size_t)r] = (int32_t)n;
    }
    counts.resize((size_t)c.rows);
    const EncodeParams p = window_call_params(base, c, w.raw, rows.data(), lengths.data(), counts.data());
    const ffi::Error err = encode_cpu(p, block_size);
    if (err.failure()) return err;
    if (!c.docs) continue;
    int32_t* slots = after_ids(c, w.raw);
    std::fill(slots, slots + c.docs, -1);
    int64_t k = 0;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t col = 0; col < separator_columns(p.counts[r], c.T); ++col)
        if (separator_at(p.ids + r * c.T, col, w.sep_id) && k < c.docs) slots[k++] = (int32_t)(c.at + r * c.T + col);
  }
  return ffi::Error::Success();
}

}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeWindowCpu, (bbpe::window_handler<bbpe::encode_window_cpu, false>),
                              bbpe::bind_encode_window(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCpu, bbpe::encode_handler<bbpe::encode_cpu>,
                              bbpe::bind_encode(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeSplitLinesCpu, bbpe::split_lines_cpu, bbpe::bind_split_lines(ffi::Ffi::Bind()));

// list[str | bytes] -> (uint8[B, max_len] zero-padded, int32[B]) without Python-level loops
// (the rule: core/pack_strings.h).
static nb::tuple pack_strings(nb::handle texts, int64_t max_len) {
  const bbpe::StringViews strings = bbpe::string_views(texts, max_len);
  const size_t batch = strings.views.size();
  uint8_t* data = new uint8_t[batch * max_len + 1];
  int32_t* lengths = new int32_t[batch + 1];
  bbpe::write_rows(strings.views, max_len, data, lengths);
  const size_t shape[2] = {batch, (size_t)max_len};
  return nb::make_tuple(owned_array(data, 2, shape), owned_array(lengths, 1, shape));
}

// One tokenizer's host tables bound once, for the tiktoken-style API's calls on host strings
// without XLA: a jitted call costs tens of microseconds, converting the thirteen operands a few,
// both more than a short string's encode. The tables pass the FFI handler's checks
// (make_table_params) once, here; each call then runs encode_string on the strings' own bytes
// (no padded copy) and returns lists of ids. Its arguments: the table operands in their order
// (binding/table_operands.h), then the attributes of make_table_params but pad_id.
// An array's last dimension (0 for a scalar): TableOperand's width.
template <class Array>
static int64_t last_dim(const Array& a) {
  return a.ndim() ? (int64_t)a.shape(a.ndim() - 1) : 0;
}

#define BBPE_HOST_ARRAY(name, dtype, ctype) dtype##Array name,
#define BBPE_HOST_ARRAY_TYPE(name, dtype, ctype) dtype##Array,
#define BBPE_HOST_TABLE(name, dtype, ctype) tables.name = {name.data(), (int64_t)name.size(), last_dim(name)};
#define BBPE_HOST_KEEP(name, dtype, ctype) dtype##Array name;
#define BBPE_HOST_ARG(name, dtype, ctype) nb::arg(#name).noconvert(),
#define BBPE_HOST_NAME(name, dtype, ctype) name,

class HostEncoder {
 public:
  HostEncoder(BBPE_TABLE_OPERANDS(BBPE_HOST_ARRAY) int32_t pretok_stages, int32_t symbols, int32_t run_long,
              int32_t run_step, int32_t run_width, int32_t normalizer, int32_t max_piece_len, int32_t rank_is_id)
      : kept_{BBPE_TABLE_OPERANDS(BBPE_HOST_NAME)} {
    bbpe::TableOperands tables;
    BBPE_TABLE_OPERANDS(BBPE_HOST_TABLE)
    const bbpe::TableAttrs attrs{pretok_stages, symbols, run_long, run_step, run_width, normalizer,
                                 /*pad_id=*/0, max_piece_len, rank_is_id};
    params_ = bbpe::EncodeParams{};
    const ffi::Error err = bbpe::make_table_params("bbpe_encode", tables, attrs, &params_);
    if (err.failure()) throw nb::value_error(err.message().c_str());
    filter_ = std::make_unique<bbpe::PairFilter>(params_.vocab);
  }

  // list[str | bytes] -> list[list[int]]; a string the encode reports (a count < 0: text not
  // in the normal form the tokenizer needs, pretok/nfc.h) is a RuntimeError naming it.
  nb::list encode(nb::handle texts) const {
    int64_t max_len = 1 << 30;  // (encode_string counts positions in int)
    const bbpe::StringViews strings = bbpe::string_views(texts, max_len);
    const auto& views = strings.views;
    const int64_t batch = (int64_t)views.size();
    nb::list out;
    if (batch == 1) {  // (its segments spread over the cores; its list made from the scratch)
      bbpe::CpuScratch& scratch = thread_scratch();
      int n;
      {
        nb::gil_scoped_release unlocked;
        n = encode_one(views[0], scratch, (int)bbpe::host_cores());
      }
      const GcPaused paused;
      out.append(id_list(0, scratch.tok.data(), n));
      drop_if_long(scratch, views[0].bytes);
      return out;
    }
    std::vector<std::vector<int32_t>> ids(batch);
    std::vector<int> counts(batch);
    int64_t text_bytes = 0;
    for (const auto& v : views) text_bytes += v.bytes;
    {
      nb::gil_scoped_release unlocked;
      bbpe::over_ranges(batch, text_bytes, bbpe::kHostBytesPerThread, [&](int64_t lo, int64_t hi) {
        bbpe::CpuScratch& scratch = thread_scratch();
        for (int64_t b = lo; b < hi; ++b) {
          const int n = counts[b] = encode_one(views[b], scratch, 1);
          ids[b].assign(scratch.tok.begin(), scratch.tok.begin() + std::max(0, n));
          drop_if_long(scratch, views[b].bytes);
        }
      }, bbpe::host_cores());
    }
    const GcPaused paused;
    for (int64_t b = 0; b < batch; ++b) out.append(id_list(b, ids[b].data(), counts[b]));
    return out;
  }

  HostEncoder(const HostEncoder&) = delete;  // (owns references to the id objects)
  ~HostEncoder() {
    for (PyObject* o : id_objects_) Py_XDECREF(o);
  }

 private:
  // This thread's arrays, kept between calls: allocating them anew cost about as much as
  // encoding a short string. Dropped after a long string, so that they do not stay large.
  static bbpe::CpuScratch& thread_scratch() {
    thread_local bbpe::CpuScratch scratch;
    return scratch;
  }
  static void drop_if_long(bbpe::CpuScratch& scratch, int64_t text_bytes) {
    if (text_bytes > (1 << 20)) scratch = bbpe::CpuScratch();
  }

  // The cyclic GC paused while the lists are made: thousands of new lists would start
  // collections that walk every object of the process, JAX's included, for no garbage.
  struct GcPaused {
    const int was_enabled = PyGC_Disable();
    ~GcPaused() { if (was_enabled) PyGC_Enable(); }
  };

  // One string's tokens into scratch.tok[0..count); returns count. (A str without a UTF-8 form
  // yet: written into this thread's buffer first.)
  int encode_one(const bbpe::StringView& text, bbpe::CpuScratch& scratch, int threads) const {
    scratch.filter = filter_.get();
    const uint8_t* bytes = static_cast<const uint8_t*>(text.data);
    if (text.kind) {
      thread_local std::vector<uint8_t> utf8;
      utf8.resize((size_t)text.bytes);
      text.write(utf8.data());
      bytes = utf8.data();
    }
    const int n = bbpe::encode_string(params_, bytes, (int)text.bytes, scratch, threads);
    for (int j = 0; j < n; ++j) scratch.tok[j] = bbpe::token_id(scratch.tok[j]);
    return n;
  }

  // A list of ids (GIL held); a count < 0 is a RuntimeError naming string b.
  nb::object id_list(int64_t b, const int32_t* ids, int n) const {
    if (n < 0)
      throw std::runtime_error("encode failed: string " + std::to_string(b) + " reported count " + std::to_string(n));
    PyObject* row = PyList_New((Py_ssize_t)n);
    if (!row) throw nb::python_error();
    nb::object owned = nb::steal(row);
    for (int j = 0; j < n; ++j) PyList_SET_ITEM(row, (Py_ssize_t)j, Py_NewRef(id_object(ids[j])));
    return owned;
  }

  // One Python int per id, made on first use and shared by every list after: the lists are
  // made with the GIL held, on one thread, and a new int object per token was most of that.
  PyObject* id_object(int32_t id) const {
    if ((size_t)id >= id_objects_.size()) id_objects_.resize((size_t)id + 1, nullptr);
    PyObject*& o = id_objects_[(size_t)id];
    if (!o && !(o = PyLong_FromLong(id))) throw nb::python_error();
    return o;
  }

  mutable std::vector<PyObject*> id_objects_;  // (guarded by the GIL)
  struct Kept {  // (the tables, kept alive: params_ points into them)
    BBPE_TABLE_OPERANDS(BBPE_HOST_KEEP)
  } kept_;
  bbpe::EncodeParams params_;
  std::unique_ptr<bbpe::PairFilter> filter_;
};

// The tables self_encoding and char_self_encoding read, checked (`what` names the caller): a
// pair table of P rows of four ints (and a piece table, where given, of Q rows of eight), P and
// Q powers of two; 256 byte ids; V >= 1 tokens whose bytes lie within token_data; ids below V.
// ValueError otherwise.
static void check_self_encoding_tables(const char* what, const S32Array& pair_table, const S32Array* piece_table,
                                       const S32Array& byte_ids, const S32Array& token_offsets,
                                       const U8Array& token_data, const S32Array& ids) {
  const auto fail = [&](const std::string& why) { throw nb::value_error((std::string(what) + ": " + why).c_str()); };
  const auto rows_ok = [](const S32Array& t, size_t width) {
    const int64_t rows = (int64_t)(t.size() / width);
    return t.size() % width == 0 && rows >= 1 && (rows & (rows - 1)) == 0;
  };
  if (!rows_ok(pair_table, 4)) fail("pair_table must be int32[P, 4] with P a power of two");
  if (piece_table && (last_dim(*piece_table) != bbpe::kPieceRowInts || !rows_ok(*piece_table, bbpe::kPieceRowInts)))
    fail("piece_table must be int32[Q, 8] with Q a power of two");
  if (byte_ids.size() != 256) fail("byte_ids must be int32[256]");
  const int64_t n_vocab = (int64_t)token_offsets.size() - 1;
  if (n_vocab < 1) fail("token_offsets must be int32[V + 1], V >= 1");
  const int32_t* offsets = token_offsets.data();
  for (int64_t i = 0; i < n_vocab; ++i)
    if (offsets[i] < 0 || offsets[i] > offsets[i + 1] || offsets[i + 1] > (int64_t)token_data.size())
      fail("token_offsets must rise within token_data");
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids.data()[k] < 0 || ids.data()[k] >= n_vocab)
      fail("id " + std::to_string(ids.data()[k]) + " is outside the vocabulary");
}

// Which of the tokens `ids` encode to themselves: the token's bytes, as one segment of byte
// tokens (byte_ids), merged by the merge rule (merge_segment, core/bpe_core.h) end as that one
// token. blockbpe_jax/tables/build.py puts exactly these in the piece table of a vocabulary
// without the whole-piece rule, so that a piece found there encodes to what the merges give.
// uint8[len(ids)], 1 where the token encodes to itself. Bad tables or ids: ValueError.
static nb::ndarray<nb::numpy, uint8_t> self_encoding(S32Array pair_table, S32Array byte_ids, S32Array token_offsets,
                                                     U8Array token_data, S32Array ids, bool rank_is_id) {
  check_self_encoding_tables("self_encoding", pair_table, nullptr, byte_ids, token_offsets, token_data, ids);
  const int64_t pair_rows = (int64_t)pair_table.size() / 4, n_vocab = (int64_t)token_offsets.size() - 1;
  const int32_t* offsets = token_offsets.data();
  bbpe::VocabView v{};
  v.pair_table = pair_table.data();
  v.pair_mask = (uint32_t)(pair_rows - 1);
  v.byte_ids = byte_ids.data();
  v.n_vocab = (int32_t)n_vocab;
  v.max_piece_len = 0;  // (no piece table: every token is merged from its bytes)
  v.rank_is_id = rank_is_id;
  const size_t n = ids.size();
  uint8_t* out = new uint8_t[n + 1];
  {
    nb::gil_scoped_release unlocked;
    std::vector<int32_t> tok, rank;
    std::vector<uint8_t> fresh;
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = ids.data()[k];
      const int m = offsets[id + 1] - offsets[id];
      tok.resize((size_t)m + 1), rank.resize((size_t)m + 1), fresh.resize((size_t)m + 1);
      const uint8_t* bytes = token_data.data() + offsets[id];
      for (int i = 0; i < m; ++i) tok[i] = v.byte_ids[bytes[i]] | (i == 0 ? bbpe::kSegStart : 0);
      const int kept = m < 2 ? m : bbpe::merge_segment(v, tok.data(), rank.data(), fresh.data(), m);
      out[k] = kept == 1 && bbpe::token_id(tok[0]) == id;
    }
  }
  const size_t shape[1] = {n};
  return owned_array(out, 1, shape);
}

// SentencePiece BPE's whole-word rule (core/char_symbols.h): 1 where the token's bytes, as the
// text of one segment (no dummy prefix, no specials, no whole-word lookups: this executor's
// encode_chars), give that one token. char_table is the vocabulary's (its prefix and whole-word
// entries are overridden here); piece_table holds its one-character pieces.
static nb::ndarray<nb::numpy, uint8_t> char_self_encoding(S32Array pair_table, S32Array byte_ids, S32Array piece_table,
                                                          S32Array token_offsets, U8Array token_data,
                                                          S32Array char_table, int32_t run_long, int32_t run_step,
                                                          int32_t run_width, int32_t max_piece_len, S32Array ids) {
  check_self_encoding_tables("char_self_encoding", pair_table, &piece_table, byte_ids, token_offsets, token_data, ids);
  const int64_t pair_rows = (int64_t)pair_table.size() / 4, piece_rows = (int64_t)piece_table.size() / bbpe::kPieceRowInts;
  const int64_t n_vocab = (int64_t)token_offsets.size() - 1;
  const bool runs_ok = run_long == 0 || (run_long > 0 && run_step >= 1 && run_step <= run_long && run_width >= 1);
  if (!runs_ok || (int64_t)char_table.size() != bbpe::kCharTableHeader + (int64_t)run_long * run_width)
    throw nb::value_error("char_self_encoding: char_table must be int32[kCharTableHeader + T * W], 1 <= P <= T");
  const int32_t* offsets = token_offsets.data();
  std::vector<int32_t> chars(char_table.data(), char_table.data() + char_table.size());
  chars[bbpe::kCharTablePrefix] = -1;    // no dummy prefix: the token is a segment's text
  chars[bbpe::kCharTableWholeWords] = 0;  // merged, never looked up
  bbpe::EncodeParams p{};
  p.symbols = bbpe::kSymbolsChars;
  p.chars = bbpe::CharTable{chars.data(), run_long, run_step, run_width};
  p.vocab = bbpe::VocabView{pair_table.data(), (uint32_t)(pair_rows - 1), byte_ids.data(), piece_table.data(),
                            (uint32_t)(piece_rows - 1), offsets, token_data.data(), (int32_t)n_vocab,
                            max_piece_len, (int64_t)token_data.size(), false};
  const size_t n = ids.size();
  uint8_t* out = new uint8_t[n + 1];
  {
    nb::gil_scoped_release unlocked;
    bbpe::CpuScratch scratch;
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = ids.data()[k];
      const int len = offsets[id + 1] - offsets[id];
      const int count = bbpe::encode_string(p, token_data.data() + offsets[id], len, scratch);
      out[k] = count == 1 && bbpe::token_id(scratch.tok[0]) == id;
    }
  }
  const size_t shape[1] = {n};
  return owned_array(out, 1, shape);
}

NB_MODULE(_blockbpe_cpu, m) {
  m.def("pack_strings", &pack_strings, nb::arg("texts"), nb::arg("max_len"));
  m.def("self_encoding", &self_encoding, nb::arg("pair_table"), nb::arg("byte_ids"), nb::arg("token_offsets"),
        nb::arg("token_data"), nb::arg("ids"), nb::arg("rank_is_id"),
        "uint8[len(ids)]: 1 where the token's bytes, merged by the merge rule, give that one token.");
  m.def("char_self_encoding", &char_self_encoding, nb::arg("pair_table"), nb::arg("byte_ids"), nb::arg("piece_table"),
        nb::arg("token_offsets"), nb::arg("token_data"), nb::arg("char_table"), nb::arg("run_long"),
        nb::arg("run_step"), nb::arg("run_width"), nb::arg("max_piece_len"), nb::arg("ids"),
        "uint8[len(ids)]: 1 where the token's bytes, encoded as one segment by SentencePiece BPE's rule\n"
        "(merges over characters, then the runs), give that one token.");
  nb::class_<HostEncoder>(m, "HostEncoder",
                          "One tokenizer's host tables bound once; encode(list[str | bytes]) -> list[list[int]]\n"
                          "on the host without XLA (the operands and attributes of the bbpe_encode FFI call,\n"
                          "ffi/binding/encode_ffi.h, but data, lengths, pad_id and block_size).")
      .def(nb::init<BBPE_TABLE_OPERANDS(BBPE_HOST_ARRAY_TYPE) int32_t, int32_t, int32_t, int32_t, int32_t, int32_t,
                    int32_t, int32_t>(),
           BBPE_TABLE_OPERANDS(BBPE_HOST_ARG) nb::arg("pretok_stages"), nb::arg("symbols"), nb::arg("run_long"),
           nb::arg("run_step"), nb::arg("run_width"), nb::arg("normalizer"), nb::arg("max_piece_len"),
           nb::arg("rank_is_id"))
      .def("encode", &HostEncoder::encode, nb::arg("texts"));
  bind_corpus_helpers(m);
  bind_nfc_normalize(m);
  bind_special_tables(m);
  // The CPU handler reads lengths for free, so the "unchecked" target checks them too.
  bbpe::bind_registrations(m, reinterpret_cast<void*>(BbpeEncodeCpu), reinterpret_cast<void*>(BbpeEncodeCpu),
                           reinterpret_cast<void*>(BbpeEncodeWindowCpu));
  bbpe::bind_split_lines_registration(m, reinterpret_cast<void*>(BbpeSplitLinesCpu));
  nb::list operands;  // (ops.py checks EncodeTables' order against it)
  for (size_t i = 0; i < bbpe::kTableOperands; ++i) operands.append(bbpe::table_operand_names()[i]);
  m.attr("table_operands") = nb::tuple(operands);
  m.attr("smem_max_len") = bbpe::kSmemMaxLen;
  m.attr("tile_bytes") = bbpe::kTileBytes;  // the build's long-row tiles (BLOCKBPE_TILE_BYTES)
  bbpe::bind_set_window_plan(m);
  m.def(
      "window_scratch_bytes",
      [](int64_t rows, int64_t width, int pretok_stages, int symbols) {
        return bbpe::window_scratch(rows, width, pretok_stages, symbols).bytes;
      },
      nb::arg("rows"), nb::arg("width"), nb::arg("pretok_stages"), nb::arg("symbols"),
      "Workspace bytes one call of bbpe_encode_window needs on a GPU.");
  m.def("workspace_bytes", &bbpe::workspace_bytes, nb::arg("batch"), nb::arg("max_len"),
        nb::arg("pretok_stages"), nb::arg("symbols"),
        "Bytes of the workspace output of one encode call (the CUDA kernel's global arrays).");
  m.def("nfc_workspace_bytes", &bbpe::nfc_workspace_bytes, nb::arg("batch"), nb::arg("max_len"),
        nb::arg("pretok_stages"), nb::arg("symbols"),
        "workspace_bytes of an encode call that normalizes NFC (the CUDA pre-pass's buffers after the encode's).");
}
