// The CPU module's nfc_normalize: NFC of a batch of rows by pretok/nfc_normalize.h, the same
// rewrite the CUDA pre-pass makes (blockbpe_jax/pretok/nfc_data.py calls it; the tests hold it
// to HF tokenizers' NFC). lowercase_batch: Lowercase of a batch by the executors' in-place
// rewrite (pretok/lowercase.h; blockbpe_jax/pretok/lower_data.py calls it).

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/host_threads.h"
#include "cpu/arrays.h"
#include "pretok/lowercase.h"
#include "pretok/nfc_normalize.h"

namespace {

constexpr int64_t kBatchBytesPerThread = 64 << 10;

// NFC of text[0..n) to out (room for 3n bytes), whole (part 0) or in the parts of
// nfc_part_start, as the CUDA pre-pass's threads write them; the length, or < 0.
int normalize_row(const bbpe::NfcData& d, const uint8_t* text, int n, int part, uint8_t* out,
                  std::vector<uint32_t>& scratch) {
  if (part <= 0) return bbpe::nfc_normalize_row(d, text, n, nullptr, out, 3 * n, scratch.data(), (int)scratch.size());
  int w = 0;
  for (int64_t k = 0; k == 0 || k * part < n; ++k) {
    const int start = bbpe::nfc_part_start(d, text, n, part, (int)k);
    if (start < 0) continue;
    const int end = bbpe::nfc_part_end(d, text, n, part, (int)k);
    const int got = bbpe::nfc_normalize_row(d, text + start, end - start, nullptr, out + w, 3 * (end - start),
                                            scratch.data(), (int)scratch.size());
    if (got < 0) return got;
    w += got;
  }
  return w;
}

// (data, offsets int64[rows + 1], the operand, part) -> (bytes uint8, offsets int64[rows + 1]).
nb::tuple nfc_normalize(HostArray<const uint8_t, 1> data, HostArray<const int64_t, 1> offsets,
                        HostArray<const int32_t, 1> operand, int part) {
  bbpe::NfcData d;
  if (!bbpe::nfc_data_view(operand.data(), (int64_t)operand.shape(0), &d))
    throw nb::value_error("nfc_normalize: the operand does not fit its header (blockbpe_jax/pretok/nfc_data.py)");
  const int64_t rows = (int64_t)offsets.shape(0) - 1, total = (int64_t)data.shape(0);
  const int64_t* off = offsets.data();
  check_row_offsets("nfc_normalize", off, rows, total, INT32_MAX / 3, "2**31 / 3");
  // Each row is written at 3x its input offset (room for its bound), then moved together.
  std::vector<uint8_t> wide((size_t)(3 * total + 1));
  std::vector<int64_t> lengths((size_t)rows);
  bool failed = false;
  {
    nb::gil_scoped_release unlocked;
    bbpe::over_ranges(rows, total, kBatchBytesPerThread, [&](int64_t lo, int64_t hi) {
      std::vector<uint32_t> scratch;
      for (int64_t r = lo; r < hi; ++r) {
        const int n = (int)(off[r + 1] - off[r]);
        scratch.resize((size_t)(2 * n + bbpe::kNfcMaxDecomp));
        const int got = normalize_row(d, data.data() + off[r], n, part, wide.data() + 3 * off[r], scratch);
        if (got < 0) failed = true;  // (not reached: the bounds above always hold)
        lengths[(size_t)r] = std::max(got, 0);
      }
    });
  }
  if (failed) throw nb::value_error("nfc_normalize: a row did not fit its bound (a wrong operand?)");
  int64_t* out_offsets = new int64_t[rows + 1];
  out_offsets[0] = 0;
  for (int64_t r = 0; r < rows; ++r) out_offsets[r + 1] = out_offsets[r] + lengths[(size_t)r];
  uint8_t* out = new uint8_t[out_offsets[rows] + 1];
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + out_offsets[r], wide.data() + 3 * off[r], (size_t)lengths[(size_t)r]);
  const size_t out_shape[1] = {(size_t)out_offsets[rows]}, offsets_shape[1] = {(size_t)rows + 1};
  return nb::make_tuple(owned_array(out, 1, out_shape), owned_array(out_offsets, 1, offsets_shape));
}

// The Lowercase operand of lowercase_batch (blockbpe_jax/pretok/lower_data.py writes it): the
// pre-tokenizer operand's Lowercase part alone, its deltas and one class table
// (pretok/tables.h: class_tables_view). False when its size does not fit that layout.
bool lower_view(const uint8_t* base, int64_t bytes, bbpe::PretokView* v) {
  *v = bbpe::PretokView{};
  v->lower = true;
  v->lower_table = 0;
  return bbpe::class_tables_view(base, bytes, 1, true, v);
}

// Lowercase of text[0..n) in place; false (the row partly rewritten) at a code point whose
// lowercase the executors do not write in place (lower_suspect_at).
bool lower_row(const bbpe::PretokView& v, uint8_t* text, int n) {
  for (int i = 0; i < n; ++i) {
    if (bbpe::lower_suspect_at(v, text, n, nullptr, i)) return false;
    bbpe::lower_in_place_at(v, text, n, nullptr, i);
  }
  return true;
}

// (data, offsets int64[rows + 1], the operand) -> (bytes uint8 of len(data), flagged bool[rows]):
// each row lowercased in place (the same offsets), a flagged row (one with a code point whose
// lowercase changes its UTF-8 length or is not one code point) left as it is, for the caller's
// rule. Invalid UTF-8 stays as it is.
nb::tuple lowercase_batch(HostArray<const uint8_t, 1> data, HostArray<const int64_t, 1> offsets,
                          HostArray<const uint8_t, 1> operand) {
  bbpe::PretokView v;
  if (!lower_view(operand.data(), (int64_t)operand.shape(0), &v))
    throw nb::value_error("lowercase_batch: the operand does not fit its layout (blockbpe_jax/pretok/lower_data.py)");
  const int64_t rows = (int64_t)offsets.shape(0) - 1, total = (int64_t)data.shape(0);
  const int64_t* off = offsets.data();
  check_row_offsets("lowercase_batch", off, rows, total, INT32_MAX, "2**31");
  uint8_t* out = new uint8_t[total + 1];
  bool* flagged = new bool[rows + 1];
  {
    nb::gil_scoped_release unlocked;
    bbpe::over_ranges(rows, total, kBatchBytesPerThread, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = off[r + 1] - off[r];
        uint8_t* row = out + off[r];
        std::memcpy(row, data.data() + off[r], (size_t)n);
        flagged[r] = !lower_row(v, row, (int)n);
        if (flagged[r]) std::memcpy(row, data.data() + off[r], (size_t)n);
      }
    });
  }
  const size_t out_shape[1] = {(size_t)total}, flagged_shape[1] = {(size_t)rows};
  return nb::make_tuple(owned_array(out, 1, out_shape), owned_array(flagged, 1, flagged_shape));
}

}  // namespace

void bind_nfc_normalize(nb::module_& m) {
  m.def("nfc_normalize", &nfc_normalize, nb::arg("data"), nb::arg("offsets"), nb::arg("operand"),
        nb::arg("part") = 0,
        "NFC of each row data[offsets[i]:offsets[i + 1]] (ffi/pretok/nfc_normalize.h) -> (bytes, offsets); "
        "part > 0: each row rewritten in the parts of nfc_part_start, as the CUDA pre-pass does.");
  m.def("lowercase_batch", &lowercase_batch, nb::arg("data"), nb::arg("offsets"), nb::arg("operand"),
        "Lowercase of each row data[offsets[i]:offsets[i + 1]] in place (ffi/pretok/lowercase.h) -> (bytes, "
        "flagged): a flagged row has a code point whose lowercase is not rewritten in place, and is left as it is.");
}
