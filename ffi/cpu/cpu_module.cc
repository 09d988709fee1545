// CPU FFI target `bbpe_encode` and the nanobind module that registers it.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "binding/encode_ffi.h"
#include "core/host_threads.h"
#include "core/jsonl.h"
#include "core/pack_documents.h"
#include "core/pack_strings.h"
#include "core/window_layout.h"
#include "cpu/encode_cpu.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/optional.h"
#include "nanobind/stl/string.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

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

}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCpu, bbpe::encode_handler<bbpe::encode_cpu>,
                              bbpe::bind_encode(ffi::Ffi::Bind()));

template <class T>
static nb::ndarray<nb::numpy, T> owned_array(T* data, size_t ndim, const size_t* shape) {
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, ndim, shape, owner);
}

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

// A block of whole lines -> (flat uint8[total], offsets int64[n + 1], line int64[n] of each
// document counted from the block's first, newlines in the block), or None to give up (the
// rules: core/jsonl.h). field None: plain lines.
static nb::object split_documents(nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> block,
                                  std::optional<std::string> field, int threads) {
  bbpe::jsonl::Split split;
  const uint8_t* p = block.data();
  const int64_t size = (int64_t)block.shape(0);
  threads = std::max(1, threads);
  bool ok;
  {
    nb::gil_scoped_release unlocked;
    ok = bbpe::jsonl::split_block(p, size, field ? &*field : nullptr, threads, split);
  }
  if (!ok) return nb::none();
  const int64_t total = split.bytes, docs = split.docs, newlines = split.newlines;
  uint8_t* data = new uint8_t[total + 1];
  int64_t* offsets = new int64_t[docs + 1];
  int64_t* lines = new int64_t[docs + 1];
  {
    nb::gil_scoped_release unlocked;
    bbpe::jsonl::join_block(split, data, offsets, lines, threads);
    split = {};  // (its memory freed here, not with the GIL held)
  }
  const size_t data_shape[1] = {(size_t)total}, offsets_shape[1] = {(size_t)docs + 1},
               lines_shape[1] = {(size_t)docs};
  return nb::make_tuple(owned_array(data, 1, data_shape), owned_array(offsets, 1, offsets_shape),
                        owned_array(lines, 1, lines_shape), newlines);
}

// Reads the file `fd` from `offset` into `buf` (as much as it holds, less where the file ends)
// by up to 8 threads, each a range of it (one thread's copy from the page cache bounded the
// corpus job's reading) -> bytes read, or -errno. The file position is not used or moved.
static int64_t read_at(int fd, int64_t offset, nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> buf) {
  const int64_t n = (int64_t)buf.shape(0);
  uint8_t* out = buf.data();
  std::atomic<int64_t> end{n}, error{0};  // where the file ended (the least short range's stop)
  {
    nb::gil_scoped_release unlocked;
    bbpe::over_ranges(n, n, int64_t(4) << 20, [&](int64_t lo, int64_t hi) {
      for (int64_t at = lo; at < hi;) {
        const ssize_t got = pread(fd, out + at, size_t(hi - at), offset + at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { error = errno; return; }
        if (got == 0) {  // the end of the file
          for (int64_t e = end.load(); at < e && !end.compare_exchange_weak(e, at);) {}
          return;
        }
        at += got;
      }
    });
  }
  return error ? -error.load() : end.load();
}

// dst = src (byte arrays of one size) on threads, the GIL released: the corpus job's ids copied
// into the array that `encode_files_to_arrays` returns, whose fresh pages' faults make one
// thread's copy the slowest step of the job.
static void copy_bytes(nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> dst,
                       nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> src) {
  const int64_t n = (int64_t)src.shape(0);
  if ((int64_t)dst.shape(0) != n) throw nb::value_error("copy_bytes: dst and src must be of one size");
  uint8_t* to = dst.data();
  const uint8_t* from = src.data();
  nb::gil_scoped_release unlocked;
  bbpe::over_ranges(n, n, (int64_t)1 << 20, [&](int64_t lo, int64_t hi) { std::memcpy(to + lo, from + lo, (size_t)(hi - lo)); });
}

// A window's documents joined with `sep` after each into `out`, short ones packed into rows
// (the rule: core/pack_documents.h) -> (row of each document int32[D], -1: alone;
// rows int32[R, 2]: first byte in out, length).
static nb::tuple pack_documents(nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> data,
                                nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> offsets,
                                nb::bytes sep, int64_t width,
                                nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> out) {
  const int64_t docs = (int64_t)offsets.shape(0) - 1, sep_len = (int64_t)sep.size();
  if (docs < 0) throw nb::value_error("pack_documents: offsets must hold at least one entry");
  const int64_t* o = offsets.data();
  if (o[0] < 0 || o[docs] > (int64_t)data.shape(0) || !std::is_sorted(o, o + docs + 1))
    throw nb::value_error("pack_documents: offsets must be ascending within the data");
  if (sep_len < 1 || width < sep_len) throw nb::value_error("pack_documents: need 1 <= len(sep) <= width");
  if ((int64_t)out.shape(0) < o[docs] - o[0] + docs * sep_len || o[docs] - o[0] + docs * sep_len >= (int64_t)1 << 31)
    throw nb::value_error("pack_documents: out must hold the joined documents (and fewer than 2**31 bytes)");
  int32_t* row_of_doc = new int32_t[docs + 1];
  int32_t* rows = new int32_t[2 * docs + 2];
  auto row_array = owned_array(row_of_doc, 1, std::array<size_t, 1>{(size_t)docs}.data());
  int64_t n_rows;
  {
    nb::gil_scoped_release unlocked;
    n_rows = bbpe::pack_documents(data.data(), o, docs, (const uint8_t*)sep.c_str(), sep_len, width,
                                  out.data(), row_of_doc, rows);
  }
  const size_t rows_shape[2] = {(size_t)n_rows, 2};
  return nb::make_tuple(row_array, owned_array(rows, 2, rows_shape));
}

// A planned window laid out per document (the rule: core/window_layout.h): calls int64[C, 7]
// (LaidCall's fields), into the zeroed table int32[2, E] and positions int32[P], out
// int64[3, n] (kept, src, count_at) and packed_out int64[2, packed documents] (row_base,
// first_in_row). Every index is checked here: a bad plan is a ValueError, never a stray write.
using U8Array = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using S32Array = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;
using S64Array = nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>;
static void layout_window(S64Array perm, S64Array calls, S64Array doc_start, S64Array lengths, S32Array packed_rows,
                          S32Array row_of_doc, int64_t pack_width,
                          nb::ndarray<int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> table,
                          nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> positions,
                          nb::ndarray<int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> out,
                          nb::ndarray<int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> packed_out) {
  const auto fail = [](const char* what) { throw nb::value_error((std::string("layout_window: ") + what).c_str()); };
  const int64_t n = (int64_t)perm.size(), docs = (int64_t)lengths.size(), cap = (int64_t)table.shape(1);
  const int64_t n_calls = calls.ndim() == 2 && calls.shape(1) == 7 ? (int64_t)calls.shape(0) : -1;
  if (n_calls < 0) fail("calls must be int64[C, 7]");
  if ((int64_t)doc_start.size() != docs || table.shape(0) != 2 || out.shape(0) != 3 || (int64_t)out.shape(1) != n ||
      packed_out.shape(0) != 2)
    fail("doc_start, table, out or packed_out has the wrong shape");
  if (packed_rows.size() % 2) fail("packed_rows must be int32[R, 2]");
  const auto* laid = reinterpret_cast<const bbpe::LaidCall*>(calls.data());
  const int64_t *p = perm.data(), *start = doc_start.data(), *len = lengths.data();
  const int32_t* row_of = row_of_doc.data();
  const int64_t n_rows = (int64_t)packed_rows.size() / 2;
  int64_t k = 0, packed = 0;
  bool unpacked_seen = false;
  for (int64_t c = 0; c < n_calls; ++c) {
    const bbpe::LaidCall& call = laid[c];
    const bool is_packed = call.first_row >= 0;
    if (call.docs < 0 || call.T < 0 || call.rows < call.table_rows || call.offset < 0 || call.entry < 0 ||
        call.table_rows < 0 || call.entry + call.table_rows > cap || k + call.docs > n ||
        call.offset + call.rows * call.T + std::max(call.rows, call.docs) >= (int64_t)1 << 31 || (is_packed && unpacked_seen) ||
        (is_packed ? call.first_row + call.table_rows > n_rows || (int64_t)row_of_doc.size() != docs
                   : call.table_rows != call.docs))
      fail("a call out of range of the plan's arrays");
    unpacked_seen |= !is_packed;
    for (int64_t j = 0; j < call.docs; ++j, ++k) {
      const int64_t d = p[k];
      if (d < 0 || d >= docs || d >= (int64_t)positions.size()) fail("a document index out of range");
      if (is_packed ? row_of[d] < call.first_row || row_of[d] >= call.first_row + call.table_rows
                    : start[d] < 0 || len[d] < 0 || start[d] + len[d] >= (int64_t)1 << 31)
        fail("a document's row or bytes out of range");
    }
    if (is_packed) packed += call.docs;
  }
  if (k != n || packed != (int64_t)packed_out.shape(1)) fail("the calls' documents must be perm's, the packed ones first");
  int64_t* o = out.data();
  nb::gil_scoped_release unlocked;
  bbpe::layout_window(p, laid, n_calls, start, len, packed_rows.data(), row_of, pack_width, table.data(), cap,
                      positions.data(), o, o + n, o + 2 * n, packed_out.data(), packed_out.data() + packed);
}

// counts_in_plan_order (core/window_layout.h): counts int32[P] by document, perm int64[n],
// src int64[n] (its packed documents' entries rewritten), packed int64[2, packed documents]
// (row_base, first_in_row) -> got int64[n].
static void counts_in_plan_order(S32Array counts, S64Array perm,
                                 nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> src, S64Array packed,
                                 nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> got) {
  const int64_t n = (int64_t)perm.size(), n_packed = packed.ndim() == 2 ? (int64_t)packed.shape(1) : -1;
  if (packed.ndim() != 2 || packed.shape(0) != 2 || n_packed > n || (int64_t)src.size() != n || (int64_t)got.size() != n)
    throw nb::value_error("counts_in_plan_order: src and got must be int64[n], packed int64[2, at most n]");
  const int64_t* p = perm.data();
  for (int64_t k = 0; k < n; ++k)
    if (p[k] < 0 || p[k] >= (int64_t)counts.size()) throw nb::value_error("counts_in_plan_order: a document index out of range");
  nb::gil_scoped_release unlocked;
  bbpe::counts_in_plan_order(counts.data(), p, n, packed.data(), packed.data() + n_packed, n_packed, got.data(), src.data());
}

// compaction_layout (core/window_layout.h): got, src, perm int64[n] (perm a permutation of
// 0..n-1), calls int64[C, 2] (documents, width), into counts int64[n] and layout int32[2, S]
// -> (first bad k or -1, total ids, layout entries written).
static nb::tuple compaction_layout(S64Array got, S64Array src, S64Array perm, S64Array calls,
                                   nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> counts,
                                   nb::ndarray<int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> layout) {
  const int64_t n = (int64_t)perm.size();
  if ((int64_t)got.size() != n || (int64_t)src.size() != n || (int64_t)counts.size() != n || layout.shape(0) != 2 ||
      (int64_t)layout.shape(1) < n || calls.ndim() != 2 || calls.shape(1) != 2)
    throw nb::value_error("compaction_layout: got, src, counts must be int64[n], layout int32[2, >= n], calls int64[C, 2]");
  const int64_t n_calls = (int64_t)calls.shape(0);
  std::vector<int64_t> docs(n_calls), widths(n_calls);
  int64_t sum = 0;
  for (int64_t c = 0; c < n_calls; ++c) {
    docs[c] = calls.data()[2 * c], widths[c] = calls.data()[2 * c + 1];
    sum += docs[c];
    if (docs[c] < 0) throw nb::value_error("compaction_layout: a call with fewer than 0 documents");
  }
  std::vector<char> seen(n, 0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t d = perm.data()[k];
    if (d < 0 || d >= n || seen[d]) throw nb::value_error("compaction_layout: perm must be a permutation of 0..n-1");
    seen[d] = 1;
  }
  if (sum != n) throw nb::value_error("compaction_layout: the calls' documents must be perm's");
  std::vector<int64_t> source(n);
  int64_t total = 0, held = 0, bad;
  {
    nb::gil_scoped_release unlocked;
    bad = bbpe::compaction_layout(got.data(), src.data(), perm.data(), n, docs.data(), widths.data(), n_calls,
                                  counts.data(), source.data(), layout.data(), (int64_t)layout.shape(1), &total, &held);
  }
  return nb::make_tuple(bad, total, held);
}

// One tokenizer's host tables bound once, for the tiktoken-style API's calls on host strings
// without XLA: a jitted call costs tens of microseconds, converting the thirteen operands a few,
// both more than a short string's encode. The tables pass the FFI handler's checks
// (make_encode_params) once, here; each call then runs encode_string on the strings' own bytes
// (no padded copy) and returns lists of ids.

struct HostBuffer {  // an XLA_FFI_Buffer over a host array
  std::vector<int64_t> dims;
  XLA_FFI_Buffer buf;
  HostBuffer(XLA_FFI_DataType dtype, const void* data, std::vector<int64_t> shape) : dims(std::move(shape)) {
    buf = XLA_FFI_Buffer{XLA_FFI_Buffer_STRUCT_SIZE, nullptr, dtype, const_cast<void*>(data),
                         (int64_t)dims.size(), dims.data()};
  }
  template <class A>
  static HostBuffer of(XLA_FFI_DataType dtype, const A& a) {
    std::vector<int64_t> shape(a.ndim());
    for (size_t i = 0; i < a.ndim(); ++i) shape[i] = (int64_t)a.shape(i);
    return HostBuffer(dtype, a.data(), std::move(shape));
  }
};

class HostEncoder {
 public:
  HostEncoder(S32Array pair_table, S32Array byte_ids, S32Array piece_table, S32Array token_offsets,
              U8Array token_data, S32Array special_offsets, U8Array special_data, S32Array special_ids,
              U8Array pretok, S32Array nfc_pairs, S32Array char_table, int32_t pretok_stages, int32_t symbols,
              int32_t run_long, int32_t run_step, int32_t run_width, int32_t normalizer, int32_t max_piece_len,
              int32_t rank_is_id)
      : s32_{pair_table, byte_ids, piece_table, token_offsets, special_offsets, special_ids, nfc_pairs, char_table},
        u8_{token_data, special_data, pretok} {
    const auto U8 = XLA_FFI_DataType_U8, S32 = XLA_FFI_DataType_S32;
    uint8_t byte = 0;  // (one-string stand-ins for data, lengths and the results: per call, below)
    int32_t word = 0;
    HostBuffer in[] = {HostBuffer(U8, &byte, {1, 1}), HostBuffer(S32, &word, {1}),
                       HostBuffer::of(S32, pair_table), HostBuffer::of(S32, byte_ids),
                       HostBuffer::of(S32, piece_table), HostBuffer::of(S32, token_offsets),
                       HostBuffer::of(U8, token_data), HostBuffer::of(S32, special_offsets),
                       HostBuffer::of(U8, special_data), HostBuffer::of(S32, special_ids),
                       HostBuffer::of(U8, pretok), HostBuffer::of(S32, nfc_pairs),
                       HostBuffer::of(S32, char_table)};
    HostBuffer ids(S32, &word, {1, 1}), counts(S32, &word, {1}), workspace(U8, &byte, {1});
    using ffi::Buffer, ffi::Result;
    const ffi::Error err = bbpe::make_encode_params(
        Buffer<ffi::U8>(&in[0].buf), Buffer<ffi::S32>(&in[1].buf), Buffer<ffi::S32>(&in[2].buf),
        Buffer<ffi::S32>(&in[3].buf), Buffer<ffi::S32>(&in[4].buf), Buffer<ffi::S32>(&in[5].buf),
        Buffer<ffi::U8>(&in[6].buf), Buffer<ffi::S32>(&in[7].buf), Buffer<ffi::U8>(&in[8].buf),
        Buffer<ffi::S32>(&in[9].buf), Buffer<ffi::U8>(&in[10].buf), Buffer<ffi::S32>(&in[11].buf),
        Buffer<ffi::S32>(&in[12].buf), pretok_stages, symbols, run_long, run_step, run_width, normalizer,
        /*pad_id=*/0, max_piece_len, rank_is_id, Result<Buffer<ffi::S32>>(Buffer<ffi::S32>(&ids.buf)),
        Result<Buffer<ffi::S32>>(Buffer<ffi::S32>(&counts.buf)),
        Result<Buffer<ffi::U8>>(Buffer<ffi::U8>(&workspace.buf)), &params_);
    if (err.failure()) throw nb::value_error(err.message().c_str());
    params_.data = nullptr, params_.lengths = nullptr, params_.ids = nullptr, params_.counts = nullptr;
    params_.workspace = nullptr;
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
      drop_if_long(scratch, views[0].second);
      return out;
    }
    std::vector<std::vector<int32_t>> ids(batch);
    std::vector<int> counts(batch);
    int64_t text_bytes = 0;
    for (const auto& v : views) text_bytes += v.second;
    {
      nb::gil_scoped_release unlocked;
      bbpe::over_ranges(batch, text_bytes, bbpe::kHostBytesPerThread, [&](int64_t lo, int64_t hi) {
        bbpe::CpuScratch& scratch = thread_scratch();
        for (int64_t b = lo; b < hi; ++b) {
          const int n = counts[b] = encode_one(views[b], scratch, 1);
          ids[b].assign(scratch.tok.begin(), scratch.tok.begin() + std::max(0, n));
          drop_if_long(scratch, views[b].second);
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

  // One string's tokens into scratch.tok[0..count); returns count.
  int encode_one(const std::pair<const char*, int64_t>& text, bbpe::CpuScratch& scratch, int threads) const {
    scratch.filter = filter_.get();
    const int n = bbpe::encode_string(params_, (const uint8_t*)text.first, (int)text.second, scratch, threads);
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
  S32Array s32_[8];  // (the tables, kept alive: params_ points into them)
  U8Array u8_[3];
  bbpe::EncodeParams params_;
  std::unique_ptr<bbpe::PairFilter> filter_;
};

NB_MODULE(_blockbpe_cpu, m) {
  m.def("pack_strings", &pack_strings, nb::arg("texts"), nb::arg("max_len"));
  nb::class_<HostEncoder>(m, "HostEncoder",
                          "One tokenizer's host tables bound once; encode(list[str | bytes]) -> list[list[int]]\n"
                          "on the host without XLA (the operands and attributes of the bbpe_encode FFI call,\n"
                          "ffi/binding/encode_ffi.h, but data, lengths, pad_id and block_size).")
      .def(nb::init<S32Array, S32Array, S32Array, S32Array, U8Array, S32Array, U8Array, S32Array, U8Array, S32Array,
                    S32Array, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>(),
           nb::arg("pair_table").noconvert(), nb::arg("byte_ids").noconvert(), nb::arg("piece_table").noconvert(),
           nb::arg("token_offsets").noconvert(), nb::arg("token_data").noconvert(),
           nb::arg("special_offsets").noconvert(), nb::arg("special_data").noconvert(),
           nb::arg("special_ids").noconvert(), nb::arg("pretok").noconvert(), nb::arg("nfc_pairs").noconvert(),
           nb::arg("char_table").noconvert(), nb::arg("pretok_stages"), nb::arg("symbols"), nb::arg("run_long"),
           nb::arg("run_step"), nb::arg("run_width"), nb::arg("normalizer"), nb::arg("max_piece_len"),
           nb::arg("rank_is_id"))
      .def("encode", &HostEncoder::encode, nb::arg("texts"));
  m.def("split_documents", &split_documents, nb::arg("block"), nb::arg("field").none(),
        nb::arg("threads"));
  m.def("read_at", &read_at, nb::arg("fd"), nb::arg("offset"), nb::arg("buf").noconvert());
  m.def("copy_bytes", &copy_bytes, nb::arg("dst").noconvert(), nb::arg("src").noconvert());
  m.def("pack_documents", &pack_documents, nb::arg("data").noconvert(), nb::arg("offsets").noconvert(),
        nb::arg("sep"), nb::arg("width"), nb::arg("out").noconvert());
  m.def("layout_window", &layout_window, nb::arg("perm").noconvert(), nb::arg("calls").noconvert(),
        nb::arg("doc_start").noconvert(), nb::arg("lengths").noconvert(), nb::arg("packed_rows").noconvert(),
        nb::arg("row_of_doc").noconvert(), nb::arg("pack_width"), nb::arg("table").noconvert(),
        nb::arg("positions").noconvert(), nb::arg("out").noconvert(), nb::arg("packed_out").noconvert());
  m.def("counts_in_plan_order", &counts_in_plan_order, nb::arg("counts").noconvert(), nb::arg("perm").noconvert(),
        nb::arg("src").noconvert(), nb::arg("packed").noconvert(), nb::arg("got").noconvert());
  m.def("compaction_layout", &compaction_layout, nb::arg("got").noconvert(), nb::arg("src").noconvert(),
        nb::arg("perm").noconvert(), nb::arg("calls").noconvert(), nb::arg("counts").noconvert(),
        nb::arg("layout").noconvert());
  m.def("registrations", []() {
    nb::dict d;
    d["bbpe_encode"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCpu));
    // The CPU handler reads lengths for free, so the "unchecked" target checks them too.
    d["bbpe_encode_unchecked"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCpu));
    return d;
  });
  m.attr("smem_max_len") = bbpe::kSmemMaxLen;
  m.attr("tile_bytes") = bbpe::kTileBytes;  // the build's long-row tiles (BLOCKBPE_TILE_BYTES)
  m.def("workspace_bytes", &bbpe::workspace_bytes, nb::arg("batch"), nb::arg("max_len"),
        nb::arg("pretok_stages"), nb::arg("symbols"),
        "Bytes of the workspace output of one encode call (the CUDA kernel's global arrays).");
}
