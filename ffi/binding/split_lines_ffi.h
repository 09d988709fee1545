// The XLA FFI target `bbpe_split_lines`: a block of whole lines (JSONL or plain text) split
// into documents where the block lives (core/json_lines.h), for the encode to take without a
// host round trip. Its signature and checks, shared by the CPU handler (here) and the CUDA one
// (cuda/jsonl_split.cuh).
//
// Operands: block uint8[N], size int32[] (the bytes of it used; more than N is taken as N).
// Attributes: json (1: JSONL, the field's string; 0: plain lines), field (the field's name),
// sep (uint8 array: the separator after each document, and one byte more that is not used:
// an attribute array is never empty).
// Results: data uint8[max_bytes], offsets int32[max_lines + 1], lines int32[max_lines],
// status int32[kStatusSlots] (core/json_lines.h: where it is not kSplitOk, the other results
// are not meaningful), workspace int32[W] (the GPU's per-tile and per-line arrays,
// split_workspace(N, max_lines).words; the CPU handler uses none of it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "core/json_lines.h"
#include "xla/ffi/api/ffi.h"

namespace bbpe {

namespace ffi = xla::ffi;

template <typename Binding>
auto bind_split_lines(Binding b) {
  return std::move(b).template Arg<ffi::Buffer<ffi::U8>>()  // block [N]
      .template Arg<ffi::Buffer<ffi::S32>>()                 // size []
      .template Attr<int32_t>("json")
      .template Attr<std::string_view>("field")
      .template Attr<ffi::Span<const uint8_t>>("sep")
      .template Ret<ffi::Buffer<ffi::U8>>()    // data [max_bytes]
      .template Ret<ffi::Buffer<ffi::S32>>()   // offsets [max_lines + 1]
      .template Ret<ffi::Buffer<ffi::S32>>()   // lines [max_lines]
      .template Ret<ffi::Buffer<ffi::S32>>()   // status [kStatusSlots]
      .template Ret<ffi::Buffer<ffi::S32>>();  // workspace [W]
}

// The call's shapes checked and its spec made; max_lines and max_bytes from the results.
struct SplitCall {
  jsonl::SplitSpec spec;
  int64_t block_bytes, max_lines, max_bytes;
};
inline ffi::Error make_split_call(const ffi::AnyBuffer::Dimensions& block, const ffi::AnyBuffer::Dimensions& size,
                                  int32_t json, std::string_view field, ffi::Span<const uint8_t> sep,
                                  const ffi::AnyBuffer::Dimensions& data, const ffi::AnyBuffer::Dimensions& offsets,
                                  const ffi::AnyBuffer::Dimensions& lines, const ffi::AnyBuffer::Dimensions& status,
                                  SplitCall* call) {
  auto bad = [](const std::string& what) { return ffi::Error::InvalidArgument("bbpe_split_lines: " + what); };
  if (block.size() != 1 || size.size() != 0) return bad("block must be uint8[N] and size int32[]");
  if (data.size() != 1 || offsets.size() != 1 || lines.size() != 1 || status.size() != 1)
    return bad("results must be one-dimensional");
  call->block_bytes = block[0];
  call->max_bytes = data[0];
  call->max_lines = lines[0];
  if (offsets[0] != call->max_lines + 1 || status[0] != jsonl::kStatusSlots)
    return bad("offsets must be int32[max_lines + 1] and status int32[" + std::to_string(jsonl::kStatusSlots) + "]");
  if (call->block_bytes >= (int64_t(1) << 31) || call->max_bytes >= (int64_t(1) << 31))
    return bad("the block and the data hold fewer than 2**31 bytes (int32 offsets)");
  if (field.size() > (size_t)jsonl::kMaxFieldBytes || sep.size() < 1 || sep.size() - 1 > (size_t)jsonl::kMaxSepBytes)
    return bad("the field name holds at most " + std::to_string(jsonl::kMaxFieldBytes) + " bytes and sep at most " +
               std::to_string(jsonl::kMaxSepBytes) + " (plus its unused last byte)");
  jsonl::SplitSpec& s = call->spec;
  std::memset(&s, 0, sizeof(s));
  s.json = json != 0;
  s.field_len = (int32_t)field.size();
  if (!field.empty()) std::memcpy(s.field, field.data(), field.size());
  s.sep_len = (int32_t)sep.size() - 1;
  for (int32_t k = 0; k < s.sep_len; ++k) s.sep[k] = sep[k];
  return ffi::Error::Success();
}

// The CPU handler: core/json_lines.h's split_lines_host.
inline ffi::Error split_lines_cpu(ffi::Buffer<ffi::U8> block, ffi::Buffer<ffi::S32> size, int32_t json,
                                  std::string_view field, ffi::Span<const uint8_t> sep,
                                  ffi::ResultBuffer<ffi::U8> data, ffi::ResultBuffer<ffi::S32> offsets,
                                  ffi::ResultBuffer<ffi::S32> lines, ffi::ResultBuffer<ffi::S32> status,
                                  ffi::ResultBuffer<ffi::S32> /*workspace*/) {
  SplitCall call;
  const ffi::Error err = make_split_call(block.dimensions(), size.dimensions(), json, field, sep, data->dimensions(),
                                         offsets->dimensions(), lines->dimensions(), status->dimensions(), &call);
  if (err.failure()) return err;
  const int64_t used = std::max<int64_t>(0, std::min<int64_t>(size.typed_data()[0], call.block_bytes));
  jsonl::split_lines_host(block.typed_data(), used, call.spec, call.max_lines, call.max_bytes, data->typed_data(),
                          offsets->typed_data(), lines->typed_data(), status->typed_data());
  return ffi::Error::Success();
}

}  // namespace bbpe
