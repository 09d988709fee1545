// CPU FFI target `bbpe_encode` and the nanobind module that registers it.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "binding/encode_ffi.h"
#include "core/jsonl.h"
#include "core/pack_strings.h"
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
static nb::object split_documents(nb::bytes block, std::optional<std::string> field,
                                  int threads) {
  std::vector<bbpe::jsonl::Part> parts;
  const uint8_t* p = (const uint8_t*)block.c_str();
  const int64_t size = (int64_t)block.size();
  bool ok;
  {
    nb::gil_scoped_release unlocked;
    ok = bbpe::jsonl::split_block(p, size, field ? &*field : nullptr, std::max(1, threads), parts);
  }
  if (!ok) return nb::none();
  int64_t total = 0, docs = 0, newlines = 0;
  for (auto& part : parts) total += (int64_t)part.data.size(), docs += (int64_t)part.ends.size();
  uint8_t* data = new uint8_t[total + 1];
  int64_t* offsets = new int64_t[docs + 1];
  int64_t* lines = new int64_t[docs + 1];
  {
    nb::gil_scoped_release unlocked;
    int64_t at = 0, d = 0;
    offsets[0] = 0;
    for (auto& part : parts) {
      std::memcpy(data + at, part.data.data(), part.data.size());
      for (size_t j = 0; j < part.ends.size(); ++j, ++d) {
        offsets[d + 1] = at + part.ends[j];
        lines[d] = newlines + part.lines[j];
      }
      at += (int64_t)part.data.size();
      newlines += part.newlines;
    }
  }
  const size_t data_shape[1] = {(size_t)total}, offsets_shape[1] = {(size_t)docs + 1},
               lines_shape[1] = {(size_t)docs};
  return nb::make_tuple(owned_array(data, 1, data_shape), owned_array(offsets, 1, offsets_shape),
                        owned_array(lines, 1, lines_shape), newlines);
}

NB_MODULE(_blockbpe_cpu, m) {
  m.def("pack_strings", &pack_strings, nb::arg("texts"), nb::arg("max_len"));
  m.def("split_documents", &split_documents, nb::arg("block"), nb::arg("field").none(),
        nb::arg("threads"));
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
