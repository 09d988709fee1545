// The corpus job's per-document arithmetic of a window (blockbpe_jax/corpus/engine.py): planned, where each
// document's row is in the document table, where its ids and its count land in the window's id
// buffer and, for packed rows, where its row starts (`layout_window`); finished, its count read
// back (`counts_in_plan_order`) and its ids' place in input order (`compaction_layout`). The
// plan itself (which documents go into which call, its width and rows) is Python's
// (blockbpe_jax/corpus/plan.py); this is what NumPy would do in ~40 calls over a window's ~24k documents,
// each holding the GIL that the job's dispatching thread needs.
#pragma once

#include <cstdint>

namespace bbpe {

// One call of the plan, its documents a run of the plan order.
struct LaidCall {
  int64_t docs;        // documents in it (the next `docs` of the plan order)
  int64_t T;           // ids kept per row
  int64_t rows;        // rows of the call: its ids are rows x T, then one count per row or slot
  int64_t offset;      // where its ids start in the id buffer
  int64_t entry;       // its first row's entry in the document table
  int64_t first_row;   // packed rows: its first row's index in packed_rows; -1: a row per document
  int64_t table_rows;  // the table entries it fills (packed: its rows; else: its documents)
};
static_assert(sizeof(LaidCall) == 7 * sizeof(int64_t), "a row of int64[C, 7] is one LaidCall");

// perm[k]: the window's document k-th in plan order (calls' runs back to back, packed calls
// first). Writes, for every k: kept[k] = its call's T, src[k] = where its ids start, count_at[k]
// = where its count is (a packed document's: its separator's slot), positions[perm[k]] =
// count_at[k]; the table's entries of every call (int32 [2][table_cap]: start, length; packed:
// a row of packed_rows, else the document's own bytes); and for the k-th packed document
// row_base[k] = where its row's ids start, first_in_row[k] = 1 when it opens its row. The
// caller has checked every index (the binding, cpu/corpus_helpers.cc).
inline void layout_window(const int64_t* perm, const LaidCall* calls, int64_t n_calls, const int64_t* doc_start,
                          const int64_t* lengths, const int32_t* packed_rows, const int32_t* row_of_doc,
                          int64_t pack_width, int32_t* table, int64_t table_cap, int32_t* positions,
                          int64_t* kept, int64_t* src, int64_t* count_at, int64_t* row_base,
                          int64_t* first_in_row) {
  int64_t k = 0, packed = 0;
  for (int64_t c = 0; c < n_calls; ++c) {
    const LaidCall& call = calls[c];
    int32_t* starts = table + call.entry;
    int32_t* lens = table + table_cap + call.entry;
    if (call.first_row >= 0) {
      for (int64_t j = 0; j < call.table_rows; ++j) {
        starts[j] = packed_rows[2 * (call.first_row + j)];
        lens[j] = packed_rows[2 * (call.first_row + j) + 1];
      }
    }
    for (int64_t j = 0; j < call.docs; ++j, ++k) {
      const int64_t doc = perm[k];
      kept[k] = call.T;
      src[k] = call.offset + j * call.T;
      count_at[k] = call.offset + call.rows * call.T + j;
      positions[doc] = (int32_t)count_at[k];
      if (call.first_row >= 0) {
        const int64_t row = row_of_doc[doc];
        row_base[packed] = call.offset + (row - call.first_row) * pack_width;
        first_in_row[packed] = packed == 0 || row != row_of_doc[perm[k - 1]];
        ++packed;
      } else {
        starts[j] = (int32_t)doc_start[doc];
        lens[j] = (int32_t)lengths[doc];
      }
    }
  }
}

// got[k] = counts[perm[k]]: the counts back in plan order. A packed document's count is its
// separator's position in its row's ids: its ids start after the previous document's separator
// (or at row_base[k] when it opens the row), so got[k] becomes its ids' count (-1 stays -1)
// and src[k] where they start.
inline void counts_in_plan_order(const int32_t* counts, const int64_t* perm, int64_t n, const int64_t* row_base,
                                 const int64_t* first_in_row, int64_t n_packed, int64_t* got, int64_t* src) {
  for (int64_t k = 0; k < n; ++k) got[k] = counts[perm[k]];
  int64_t previous_end = -1;
  for (int64_t k = 0; k < n_packed; ++k) {
    const int64_t end = got[k], start = first_in_row[k] ? row_base[k] : previous_end + 1;
    got[k] = end < 0 ? -1 : end - start;
    src[k] = start;
    previous_end = end;
  }
}

// The window's ids in input order: counts[perm[k]] = got[k] and, for the documents with ids in
// input order (the h-th of them), layout[0][h] = where they go, layout[1][h] = how far back
// they are read from (src - where). Returns the first k whose count is not 0..width + 1 of its
// call (nothing written then), else -1, with `total` ids and `held` layout entries.
inline int64_t compaction_layout(const int64_t* got, const int64_t* src, const int64_t* perm, int64_t n,
                                 const int64_t* call_docs, const int64_t* call_widths, int64_t n_calls,
                                 int64_t* counts, int64_t* source, int32_t* layout, int64_t layout_cap,
                                 int64_t* total, int64_t* held) {
  for (int64_t c = 0, k = 0; c < n_calls; ++c)
    for (int64_t j = 0; j < call_docs[c]; ++j, ++k)
      if (got[k] < 0 || got[k] > call_widths[c] + 1) return k;
  for (int64_t k = 0; k < n; ++k) {
    counts[perm[k]] = got[k];
    source[perm[k]] = src[k];
  }
  int64_t at = 0, h = 0;
  for (int64_t d = 0; d < n; ++d) {
    if (counts[d]) {
      layout[h] = (int32_t)at;
      layout[layout_cap + h] = (int32_t)(source[d] - at);
      ++h;
    }
    at += counts[d];
  }
  *total = at;
  *held = h;
  return -1;
}

}  // namespace bbpe
