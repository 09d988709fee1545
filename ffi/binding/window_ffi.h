// The XLA FFI target `bbpe_encode_window`: every encode call of one corpus-job window
// (blockbpe_jax/corpus/engine.py) in one FFI call, shared by the CPU and CUDA handlers.
//
// A window's calls differ in rows, width and ids kept: as separate jitted steps each shape
// would be an executable of its own (compiled per job) and each call a dispatch of its own
// (XLA's thunks, the interpreter's lock). Here the shapes are a runtime plan: the handler loops over
// the calls, gathering each call's rows from the window's bytes and encoding them straight into
// the window's id buffer. The plan does not travel as an operand, which the CUDA handler could
// only read by waiting for the device: Python leaves it beside the window's bytes, keyed by
// their address and the call's separator (`set_window_plan`; a window has up to two calls,
// its packed rows' and the others', with their own tables), just before the call, and the
// handler takes it from there. A window's byte buffer is written again only after its calls
// have run, so the plan found under its key is its own; every plan is checked against the
// call's buffers before use.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "binding/encode_ffi.h"

namespace bbpe {

// One call of a window's plan (corpus/plan.py PlannedCall; Python passes int64[C, 6]).
struct WindowCall {
  int64_t rows;   // its rows: table entries [entry, entry + rows) (start in the bytes, length)
  int64_t width;  // bytes per row
  int64_t T;      // ids kept per row
  int64_t at;     // where its ids [rows, T] start in the id buffer
  int64_t entry;  // its first row's table entry
  int64_t docs;   // rows of packed documents: the documents' separator slots after the ids
                  // (see place_separators); 0: one count per row after the ids
};
static_assert(sizeof(WindowCall) == 6 * sizeof(int64_t), "a row of int64[C, 6] is one WindowCall");

// Plans by the address of their window's bytes and their separator (-1: rows of one document
// each); one per module: the CPU's and the CUDA one's. One entry per window buffer the
// process ever used (the job keeps a few and reuses them), replaced by each new plan.
class WindowPlans {
 public:
  void set(uintptr_t bytes, int32_t sep_id, std::vector<WindowCall> calls) {
    std::lock_guard<std::mutex> lock(mu_);
    plans_[key(bytes, sep_id)] = std::move(calls);
  }
  bool get(uintptr_t bytes, int32_t sep_id, std::vector<WindowCall>* calls) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = plans_.find(key(bytes, sep_id));
    if (it == plans_.end()) return false;
    *calls = it->second;
    return true;
  }

 private:
  static std::pair<uintptr_t, int32_t> key(uintptr_t bytes, int32_t sep_id) { return {bytes, sep_id}; }
  struct Hash {
    size_t operator()(const std::pair<uintptr_t, int32_t>& k) const {
      return std::hash<uintptr_t>()(k.first) ^ (std::hash<int32_t>()(k.second) << 1);
    }
  };
  mutable std::mutex mu_;
  std::unordered_map<std::pair<uintptr_t, int32_t>, std::vector<WindowCall>, Hash> plans_;
};
inline WindowPlans& window_plans() {
  static WindowPlans plans;
  return plans;
}
// set_window_plan of both modules: int64[n, 6] rows, one WindowCall each.
inline void set_window_plan(uintptr_t bytes, int32_t sep_id, const int64_t* rows, size_t n) {
  std::vector<WindowCall> calls(n);
  for (size_t c = 0; c < n; ++c) {
    const int64_t* r = rows + 6 * c;
    calls[c] = WindowCall{r[0], r[1], r[2], r[3], r[4], r[5]};
  }
  window_plans().set(bytes, sep_id, std::move(calls));
}

// Whether a table entry's bytes [start, start + n) lie inside the window's `size` bytes and fit
// a row of `width`: the handlers gather only such rows (CPU: an error otherwise; CUDA: the row's
// length -1, which the encode kernel reports as count -1).
BBPE_HD bool entry_inside(int64_t start, int64_t n, int64_t width, int64_t size) {
  return start >= 0 && n >= 0 && n <= width && start + n <= size;
}

// A packed row's separators: the ids equal to sep_id among its first separator_columns (its
// kept ids; a row flagged with count < 0 has none). The k-th separator of a call, in row
// order, goes to its slot k < docs as its position in the id buffer (at + row * T + col);
// slots without one stay -1, which the host reports (corpus/engine.py).
BBPE_HD int64_t separator_columns(int32_t count, int64_t T) { return count < 0 ? 0 : (count < T ? count : T); }
BBPE_HD bool separator_at(const int32_t* row_ids, int64_t col, int32_t sep_id) { return row_ids[col] == sep_id; }

inline int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// A call's share of the workspace on CUDA: its gathered rows (uint8[rows, width]), their
// lengths, counts and separators per row (int32[rows] each), then the encode kernel's arrays.
struct WindowScratch {
  int64_t rows_at, lengths_at, counts_at, seps_at, encode_at, bytes;
};
inline WindowScratch window_scratch(int64_t rows, int64_t width, int pretok_stages, int symbols) {
  WindowScratch s;
  s.rows_at = 0;
  s.lengths_at = align256(rows * width);
  s.counts_at = s.lengths_at + align256(rows * 4);
  s.seps_at = s.counts_at + align256(rows * 4);
  s.encode_at = s.seps_at + align256(rows * 4);
  s.bytes = s.encode_at + align256(workspace_bytes(rows, width, pretok_stages, symbols));
  return s;
}

// "" when every call fits the buffers (its rows in the table, its ids and counts or slots in
// the id buffer, its scratch in the workspace unless workspace < 0), else what does not.
inline std::string check_window_plan(const std::vector<WindowCall>& calls, int64_t entries, int64_t raw_size,
                                     int64_t workspace, int pretok_stages, int symbols) {
  for (size_t c = 0; c < calls.size(); ++c) {
    const WindowCall& k = calls[c];
    const std::string call = "call " + std::to_string(c) + " ";
    if (k.rows < 0 || k.width < 1 || k.width > (1 << 30) || k.T < 1 || k.T >= (1ll << 31) || k.docs < 0)
      return call + "has rows " + std::to_string(k.rows) + ", width " + std::to_string(k.width) + ", T " +
             std::to_string(k.T) + ", docs " + std::to_string(k.docs);
    if (k.entry < 0 || k.entry + k.rows > entries)
      return call + "reads table entries [" + std::to_string(k.entry) + ", " + std::to_string(k.entry + k.rows) +
             ") of " + std::to_string(entries);
    const int64_t end = k.at + k.rows * k.T + (k.docs ? k.docs : k.rows);
    if (k.at < 0 || end > raw_size || end >= (1ll << 31))
      return call + "writes ids [" + std::to_string(k.at) + ", " + std::to_string(end) + ") of " +
             std::to_string(raw_size);
    if (workspace >= 0 && window_scratch(k.rows, k.width, pretok_stages, symbols).bytes > workspace)
      return call + "needs " + std::to_string(window_scratch(k.rows, k.width, pretok_stages, symbols).bytes) +
             " workspace bytes, has " + std::to_string(workspace);
  }
  return "";
}

// What the handlers get besides the tables: the window's bytes, its document table
// (int32[2, entries]: starts, then lengths), its id buffer and the workspace.
struct WindowArgs {
  const uint8_t* bytes;
  int64_t size;
  const int32_t* table;
  int64_t entries;
  int32_t* raw;
  uint8_t* workspace;
  int32_t sep_id;  // the separator's id in rows of packed documents (-1: none packed)
};

// Where a call's results go in the id buffer: its ids [rows, T] at `at`, then one count per row
// or, for packed rows, its documents' separator slots.
inline int32_t* after_ids(const WindowCall& c, int32_t* raw) { return raw + c.at + c.rows * c.T; }

// A call's encode: its gathered rows (uint8[rows, width]) and their lengths, its ids into the id
// buffer; its counts after them, or (packed rows, whose slots hold separators) into `counts`.
inline EncodeParams window_call_params(const EncodeParams& base, const WindowCall& c, int32_t* raw,
                                       const uint8_t* rows, const int32_t* lengths, int32_t* counts) {
  EncodeParams p = base;
  p.data = rows;
  p.lengths = lengths;
  p.batch = c.rows;
  p.max_len = (int32_t)c.width;
  p.max_tokens = (int32_t)c.T;
  p.ids = raw + c.at;
  p.counts = c.docs ? counts : after_ids(c, raw);
  return p;
}

// Operands: the window's bytes (uint8[N]), its table (int32[2, E]), the id buffer int32[R],
// which the result aliases, then the encode call's tables (binding/table_operands.h); the
// encode call's attributes and sep_id (-1: a plan without packed rows).
// Results: the id buffer, the workspace.
template <typename Binding>
auto bind_encode_window(Binding b) {
  return bind_tables(std::move(b).template Arg<ffi::Buffer<ffi::U8>>()  // bytes
                         .template Arg<ffi::Buffer<ffi::S32>>()        // table [2, E]
                         .template Arg<ffi::Buffer<ffi::S32>>())  // raw (aliased by the first result)
      .template Attrs()  // by name: decode_attrs (with sep_id)
      .template Ret<ffi::Buffer<ffi::S32>>()  // raw
      .template Ret<ffi::Buffer<ffi::U8>>();  // workspace
}

// The handler of the signature above: the tables checked (decode_table_params), the
// plan taken and checked, then `Body(ctx..., params, calls, args, block_size)`. check_workspace:
// the CUDA handler's scratch lives there; the CPU one's does not.
template <auto Body, bool kCheckWorkspace, typename... Ctx>
ffi::Error window_handler(Ctx... ctx, ffi::Buffer<ffi::U8> bytes, ffi::Buffer<ffi::S32> table,
                          ffi::Buffer<ffi::S32> /*raw_in*/, ffi::RemainingArgs table_args,
                          ffi::Dictionary attr_dict, ffi::Result<ffi::Buffer<ffi::S32>> raw,
                          ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  EncodeAttrs attrs;
  ffi::Error err = decode_attrs("bbpe_encode_window", attr_dict, true, &attrs);
  if (err.failure()) return err;
  const int32_t sep_id = attrs.sep_id, block_size = attrs.block_size;
  const int32_t pretok_stages = attrs.table.pretok_stages, symbols = attrs.table.symbols;
  EncodeParams p{};
  err = decode_table_params("bbpe_encode_window", table_args, attrs.table, &p);
  if (err.failure()) return err;
  const auto tdims = table.dimensions();
  if (tdims.size() != 2 || tdims[0] != 2)
    return ffi::Error::InvalidArgument("bbpe_encode_window: table must be int32[2, entries]");
  std::vector<WindowCall> calls;
  if (!window_plans().get(reinterpret_cast<uintptr_t>(bytes.untyped_data()), sep_id, &calls))
    return ffi::Error::InvalidArgument("bbpe_encode_window: no plan was set for these bytes and sep_id " +
                                       std::to_string(sep_id) + " (set_window_plan)");
  const int64_t ws = kCheckWorkspace ? (int64_t)workspace->element_count() : -1;
  const std::string wrong =
      check_window_plan(calls, tdims[1], (int64_t)raw->element_count(), ws, pretok_stages, symbols);
  if (!wrong.empty()) return ffi::Error::InvalidArgument("bbpe_encode_window: " + wrong);
  const WindowArgs args{bytes.typed_data(), (int64_t)bytes.element_count(), table.typed_data(), tdims[1],
                        raw->typed_data(), workspace->typed_data(), sep_id};
  return Body(ctx..., p, calls, args, block_size);
}

}  // namespace bbpe
