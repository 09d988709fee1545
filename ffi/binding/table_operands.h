// The encode call's table operands, declared once: BBPE_TABLE_OPERANDS lists them in the order
// they follow the batch's operands (bbpe_encode: data, lengths; bbpe_encode_window: bytes, table,
// raw). Everything that names them is generated from it: TableOperands, their decoding from an
// FFI call (decode_tables) and the CPU module's HostEncoder. The Python side's order is
// `ops.EncodeTables`' array fields (`ops.TABLE_OPERANDS`), which `ops.py` checks against this
// list (the CPU module's `table_operands`) at import.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace bbpe {

namespace ffi = xla::ffi;

// X(name, XLA data type, element type); the shapes are make_table_params' checks (encode_ffi.h).
#define BBPE_TABLE_OPERANDS(X)                                                            \
  X(pair_table, S32, int32_t)      /* [P, 4], P a power of two */                         \
  X(byte_ids, S32, int32_t)        /* [256] */                                            \
  X(piece_table, S32, int32_t)     /* [Q, 8], Q a power of two */                         \
  X(token_offsets, S32, int32_t)   /* [V + 1] */                                          \
  X(token_data, U8, uint8_t)       /* [D] */                                              \
  X(special_offsets, S32, int32_t) /* [S + 1] */                                          \
  X(special_data, U8, uint8_t)     /* the specials' bytes */                              \
  X(special_ids, S32, int32_t)     /* [max(S, 1)] */                                      \
  X(special_starts, U8, uint8_t)   /* sizeof(SpecialStarts) (core/special_tokens.h) */    \
  X(pretok, U8, uint8_t)           /* pretok_operand_bytes(...) (pretok/tables.h) */      \
  X(nfc_pairs, S32, int32_t)       /* [K, 2], K >= 1 (nfc.h), or odd: nfc_normalize.h */  \
  X(char_table, S32, int32_t)      /* [kCharTableHeader + T * W] or [1] (char_symbols.h) */ \
  X(miss_cache, S32, int32_t)      /* [C, 16], C a power of two; [1, 16]: none (miss_cache.cuh) */

// One table operand: its elements (device memory under CUDA), how many, and its last
// dimension (0 for a scalar: a row table's width, so that a table of another layout is refused
// rather than read as this one).
template <typename T>
struct TableOperand {
  const T* data = nullptr;
  int64_t size = 0;
  int64_t width = 0;
};

struct TableOperands {
#define BBPE_TABLE_MEMBER(name, dtype, ctype) TableOperand<ctype> name;
  BBPE_TABLE_OPERANDS(BBPE_TABLE_MEMBER)
#undef BBPE_TABLE_MEMBER
};

#define BBPE_TABLE_COUNT(name, dtype, ctype) +1
constexpr size_t kTableOperands = 0 BBPE_TABLE_OPERANDS(BBPE_TABLE_COUNT);
#undef BBPE_TABLE_COUNT

// Their names in order (each native module's `table_operands`).
inline const char* const* table_operand_names() {
#define BBPE_TABLE_NAME(name, dtype, ctype) #name,
  static const char* const names[] = {BBPE_TABLE_OPERANDS(BBPE_TABLE_NAME)};
#undef BBPE_TABLE_NAME
  return names;
}

// The call's operands from `args` (what follows the batch's operands: bind_tables) into `t`.
// Only their count and element types are checked here; their shapes, by make_table_params.
inline ffi::Error decode_tables(const char* target, const ffi::RemainingArgs& args, TableOperands* t) {
  if (args.size() != kTableOperands)
    return ffi::Error::InvalidArgument(std::string(target) + ": expected " + std::to_string(kTableOperands) +
                                       " table operands after the batch's, got " + std::to_string(args.size()));
  size_t i = 0;
#define BBPE_TABLE_DECODE(name, dtype, ctype)                                                            \
  {                                                                                                      \
    auto buffer = args.get<ffi::Buffer<ffi::dtype>>(i++);                                                \
    if (buffer.has_error())                                                                              \
      return ffi::Error::InvalidArgument(std::string(target) + ": " #name " must be " #dtype " (" +      \
                                         buffer.error().message() + ")");                                \
    const auto dims = buffer->dimensions();                                                              \
    t->name = TableOperand<ctype>{buffer->typed_data(), (int64_t)buffer->element_count(),                \
                                  dims.size() == 0 ? 0 : (int64_t)dims.back()};                          \
  }
  BBPE_TABLE_OPERANDS(BBPE_TABLE_DECODE)
#undef BBPE_TABLE_DECODE
  return ffi::Error::Success();
}

// The binding of the table operands: every operand after the batch's (bind_encode,
// bind_encode_window), decoded by decode_tables.
template <typename Binding>
auto bind_tables(Binding b) {
  return std::move(b).RemainingArgs();
}

}  // namespace bbpe
