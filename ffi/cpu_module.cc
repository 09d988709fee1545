// CPU FFI target `bbpe_encode` and the nanobind module that registers it.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "encode_cpu.h"
#include "encode_ffi.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"
#include "pack_strings.h"

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

static ffi::Error encode_cpu(ffi::Buffer<ffi::U8> data, ffi::Buffer<ffi::S32> lengths,
                             ffi::Buffer<ffi::S32> pair_table, ffi::Buffer<ffi::S32> byte_ids,
                             ffi::Buffer<ffi::S32> piece_table, ffi::Buffer<ffi::S32> token_offsets,
                             ffi::Buffer<ffi::U8> token_data, ffi::Buffer<ffi::S32> special_offsets,
                             ffi::Buffer<ffi::U8> special_data, ffi::Buffer<ffi::S32> special_ids,
                             ffi::Buffer<ffi::U8> pretok, ffi::Buffer<ffi::S32> nfc_pairs,
                             ffi::Buffer<ffi::S32> char_table, int32_t pretok_stages, int32_t symbols,
                             int32_t run_long, int32_t run_step, int32_t run_width, int32_t nfc, int32_t pad_id,
                             int32_t max_piece_len, int32_t rank_is_id,
                             int32_t /*block_size*/,
                             ffi::Result<ffi::Buffer<ffi::S32>> ids,
                             ffi::Result<ffi::Buffer<ffi::S32>> counts,
                             ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  EncodeParams p;
  ffi::Error err = make_encode_params(data, lengths, pair_table, byte_ids, piece_table, token_offsets,
                                      token_data, special_offsets, special_data, special_ids,
                                      pretok, nfc_pairs, char_table, pretok_stages, symbols,
                                      run_long, run_step, run_width, nfc,
                                      pad_id, max_piece_len, rank_is_id, ids, counts, workspace, &p);
  if (err.failure()) return err;
  err = check_lengths(p.lengths, p.batch, p.max_len);
  if (err.failure()) return err;
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t workers = std::min<int64_t>(hw, p.batch);
  if (workers <= 1) {
    encode_rows(p, 0, p.batch);
  } else {
    std::vector<std::thread> pool;
    const int64_t per = (p.batch + workers - 1) / workers;
    for (int64_t w = 0; w < workers; ++w)
      pool.emplace_back(encode_rows, std::cref(p), w * per, std::min(p.batch, (w + 1) * per));
    for (auto& t : pool) t.join();
  }
  return ffi::Error::Success();
}

}  // namespace bbpe

XLA_FFI_DEFINE_HANDLER_SYMBOL(BbpeEncodeCpu, bbpe::encode_cpu, bbpe::bind_encode(ffi::Ffi::Bind()));

// list[str | bytes] -> (uint8[B, max_len] zero-padded, int32[B]) without Python-level loops
// (the rule: pack_strings.h).
static nb::tuple pack_strings(nb::handle texts, int64_t max_len) {
  nb::list items = nb::list(texts);
  const std::vector<bbpe::StringView> views = bbpe::string_views(items, max_len);
  const size_t batch = views.size();
  uint8_t* data = new uint8_t[batch * max_len + 1];
  int32_t* lengths = new int32_t[batch + 1];
  bbpe::write_rows(views, max_len, data, lengths);
  nb::capsule own_data(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  nb::capsule own_len(lengths, [](void* p) noexcept { delete[] static_cast<int32_t*>(p); });
  size_t shape[2] = {batch, (size_t)max_len};
  return nb::make_tuple(nb::ndarray<nb::numpy, uint8_t>(data, 2, shape, own_data),
                        nb::ndarray<nb::numpy, int32_t>(lengths, 1, shape, own_len));
}

NB_MODULE(_blockbpe_cpu, m) {
  m.def("pack_strings", &pack_strings, nb::arg("texts"), nb::arg("max_len"));
  m.def("registrations", []() {
    nb::dict d;
    d["bbpe_encode"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCpu));
    // The CPU handler reads lengths for free, so the "unchecked" target checks them too.
    d["bbpe_encode_unchecked"] = nb::capsule(reinterpret_cast<void*>(BbpeEncodeCpu));
    return d;
  });
  m.attr("smem_max_len") = bbpe::kSmemMaxLen;
  m.def("workspace_bytes", &bbpe::workspace_bytes, nb::arg("batch"), nb::arg("max_len"),
        nb::arg("pretok_stages"), nb::arg("symbols"),
        "Bytes of the workspace output of one encode call (the CUDA kernel's global arrays).");
}
