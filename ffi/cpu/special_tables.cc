// The CPU module's helpers for special tokens (core/special_tokens.h): special_starts, the
// special_starts operand (built once per set of specials at load; blockbpe_jax/tables/build.py),
// and special_spans, the specials the executors accept in each row, for the host's normalizer,
// which leaves them as they are.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/special_tokens.h"
#include "cpu/arrays.h"

namespace {

// The specials of the special tables (offsets, data): offsets from 0, non-decreasing, within data.
bbpe::SpecialView special_view(const char* what, HostArray<const int32_t, 1> special_offsets,
                               HostArray<const uint8_t, 1> special_data) {
  const int64_t count = (int64_t)special_offsets.shape(0) - 1;
  const int32_t* so = special_offsets.data();
  if (count < 0 || so[0] != 0) throw nb::value_error((std::string(what) + ": special_offsets must start at 0").c_str());
  for (int64_t k = 0; k < count; ++k)
    if (so[k + 1] < so[k] || so[k + 1] > (int64_t)special_data.shape(0))
      throw nb::value_error(
          (std::string(what) + ": special_offsets must be non-decreasing, within special_data").c_str());
  return bbpe::SpecialView{so, special_data.data(), nullptr, (int32_t)count};
}

// (special_offsets, special_data, escaped) -> uint8[sizeof(SpecialStarts)]: the table.
nb::ndarray<nb::numpy, uint8_t> special_starts(HostArray<const int32_t, 1> special_offsets,
                                               HostArray<const uint8_t, 1> special_data, bool escaped) {
  const bbpe::SpecialView s = special_view("special_starts", special_offsets, special_data);
  bbpe::SpecialStarts table;
  bbpe::build_special_starts(s, escaped, table);
  uint8_t* out = new uint8_t[sizeof table];
  std::memcpy(out, &table, sizeof table);
  const size_t shape[1] = {sizeof table};
  return owned_array(out, 1, shape);
}

// (special_offsets, special_data, special_starts, escaped, data, offsets int64[rows + 1]) ->
// int64[m, 4]: each accepted special (row, first byte, end byte, index in the special tables) in
// row order, as encode_string matches them (cpu/encode_cpu.h: match_specials). special_starts:
// the table special_starts built for these specials with this `escaped`.
nb::ndarray<nb::numpy, int64_t> special_spans(HostArray<const int32_t, 1> special_offsets,
                                              HostArray<const uint8_t, 1> special_data,
                                              HostArray<const uint8_t, 1> special_starts, bool escaped,
                                              HostArray<const uint8_t, 1> data, HostArray<const int64_t, 1> offsets) {
  const bbpe::SpecialView s = special_view("special_spans", special_offsets, special_data);
  if (special_starts.shape(0) != sizeof(bbpe::SpecialStarts))
    throw nb::value_error(("special_spans: special_starts must hold " + std::to_string(sizeof(bbpe::SpecialStarts)) +
                           " bytes (the special_starts table), not " + std::to_string(special_starts.shape(0)))
                              .c_str());
  bbpe::SpecialStarts starts;  // (a copy: the array's bytes need not be aligned for the struct)
  std::memcpy(&starts, special_starts.data(), sizeof starts);
  const int64_t rows = (int64_t)offsets.shape(0) - 1, total = (int64_t)data.shape(0);
  const int64_t* off = offsets.data();
  check_row_offsets("special_spans", off, rows, total, INT32_MAX, "2**31");
  std::vector<int64_t> spans;
  if (s.count > 0) {
    std::vector<int32_t> lens, match;
    std::vector<uint8_t> is_special;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* text = data.data() + off[r];
      const int n = (int)(off[r + 1] - off[r]);
      lens.resize((size_t)n + 1);
      match.resize((size_t)n + 1);
      is_special.assign((size_t)n + 1, 0);
      bbpe::match_specials_in(starts, s, text, n, escaped, match.data(), lens.data(), is_special.data());
      for (int i = 0; i < n; ++i)
        if (is_special[i] == 2) spans.insert(spans.end(), {r, i, i + lens[i], match[i]});
    }
  }
  int64_t* out = new int64_t[spans.size() + 1];
  std::copy(spans.begin(), spans.end(), out);
  const size_t shape[2] = {spans.size() / 4, 4};
  return owned_array(out, 2, shape);
}

}  // namespace

void bind_special_tables(nb::module_& m) {
  m.def("special_starts", &special_starts, nb::arg("special_offsets"), nb::arg("special_data"), nb::arg("escaped"),
        "uint8[sizeof(SpecialStarts)]: which positions can start one of the specials, and their runs "
        "(ffi/core/special_tokens.h), the encode's special_starts operand.");
  m.def("special_spans", &special_spans, nb::arg("special_offsets"), nb::arg("special_data"),
        nb::arg("special_starts"), nb::arg("escaped"), nb::arg("data"), nb::arg("offsets"),
        "int64[m, 4]: the specials accepted in each row data[offsets[i]:offsets[i + 1]] (ffi/core/special_tokens.h), "
        "as (row, start, end, index in the special tables), in row order.");
}
