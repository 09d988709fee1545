// The corpus job's host helpers in the CPU module: its native reader (split_documents, read_at,
// read_stream, read_files), the flat shard writer's reserve_file, the packer of short documents, a window's
// per-document arithmetic and the result's copy.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/host_threads.h"
#include "core/jsonl.h"
#include "core/pack_documents.h"
#include "core/window_layout.h"
#include "cpu/arrays.h"
#include "nanobind/stl/optional.h"
#include "nanobind/stl/string.h"

// A block of whole lines -> (data, offsets int64[n + 1], line int64[n] of each document counted
// from the block's first, newlines in the block), or None to give up (the rules: core/jsonl.h).
// field None: plain lines. Each document is followed by `sep` in data (document i is
// data[offsets[i], offsets[i + 1] - len(sep))). data: a new uint8 array, or, when `into` is
// given and the block has documents, what into(bytes) returned: a writable
// uint8 array of at least that many bytes (the corpus job's page-locked window buffer), joined
// into in place.
static nb::object split_documents(HostArray<const uint8_t, 1> block, std::optional<std::string> field, int threads,
                                  nb::bytes sep, std::optional<nb::callable> into) {
  bbpe::jsonl::Split split;
  const uint8_t* p = block.data();
  const int64_t size = (int64_t)block.shape(0);
  threads = std::max(1, threads);
  const std::string separator(sep.c_str(), sep.size());
  bool ok;
  {
    nb::gil_scoped_release unlocked;
    ok = bbpe::jsonl::split_block(p, size, field ? &*field : nullptr, threads, separator, split);
  }
  if (!ok) return nb::none();
  const int64_t docs = split.docs, newlines = split.newlines, total = split.bytes;
  nb::object data_object;
  uint8_t* data;
  if (into && docs) {
    data_object = (*into)(total);
    HostArray<uint8_t, 1> out;
    if (!nb::try_cast(data_object, out, false) || (int64_t)out.shape(0) < total)
      throw nb::value_error("split_documents: into() must return a writable contiguous uint8 array of the bytes asked");
    data = out.data();
  } else {
    data = new uint8_t[total + 1];
    const size_t data_shape[1] = {(size_t)total};
    data_object = nb::cast(owned_array(data, 1, data_shape));
  }
  int64_t* offsets = new int64_t[docs + 1];
  int64_t* lines = new int64_t[docs + 1];
  {
    nb::gil_scoped_release unlocked;
    bbpe::jsonl::join_block(split, data, offsets, lines, threads);
    split = {};  // (its memory freed here, not with the GIL held)
  }
  const size_t offsets_shape[1] = {(size_t)docs + 1}, lines_shape[1] = {(size_t)docs};
  return nb::make_tuple(data_object, owned_array(offsets, 1, offsets_shape), owned_array(lines, 1, lines_shape),
                        newlines);
}

// Reads the file `fd` from `offset` into `buf` (as much as it holds, less where the file ends)
// by up to 8 threads, each a range of it (one thread's copy from the page cache bounded the
// corpus job's reading) -> bytes read, or -errno. The file position is not used or moved.
static int64_t read_at(int fd, int64_t offset, HostArray<uint8_t, 1> buf) {
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

// Reads small whole files, in order, into one new block, on up to `threads` threads with the GIL
// released (a corpus of many small inputs: Python's open, read and newline count per file, the
// GIL held, set its pace) -> (block, marks int64[n + 1]), or None where a file cannot be read or
// has grown past its size in `sizes` (each file's own reader then names the problem or reads it
// whole). With `lines`, a block of lines: a newline added after a file that does not end with
// one, marks = the block's newlines before each file's first byte (and in all); without, the
// files as they are (`--split file`), each checked to be UTF-8 (None where one is not), marks =
// where each file starts (and the block's end).
static nb::object read_files(nb::list paths, HostArray<const int64_t, 1> sizes, int threads, bool lines) {
  const int64_t n = (int64_t)paths.size();
  if ((int64_t)sizes.shape(0) != n) throw nb::value_error("read_files: one size per path");
  std::vector<std::string> names(n);
  std::vector<int64_t> slot(n + 1, 0);  // file k is read into [slot[k], slot[k + 1]): its size and one byte
  for (int64_t k = 0; k < n; ++k) {
    nb::bytes name = nb::cast<nb::bytes>(paths[k]);
    names[k].assign(name.c_str(), name.size());
    if (sizes.data()[k] < 0) throw nb::value_error("read_files: sizes must be >= 0");
    slot[k + 1] = slot[k] + sizes.data()[k] + 1;
  }
  uint8_t* data = new uint8_t[slot[n] + 1];
  int64_t* marks = new int64_t[n + 1];
  std::vector<int64_t> got(n, 0);
  std::atomic<bool> failed{false};
  int64_t end = 0;
  {
    nb::gil_scoped_release unlocked;
    std::atomic<int64_t> next{0};
    bbpe::fork_join(std::max<int64_t>(1, std::min<int64_t>(threads, n)), [&](int64_t) {
      for (int64_t k; !failed && (k = next++) < n;) {
        const int fd = open(names[k].c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) { failed = true; return; }
        int64_t at = 0;  // (one byte more than its size is read: a file that grew fails)
        for (const int64_t want = slot[k + 1] - slot[k]; at < want;) {
          const ssize_t r = read(fd, data + slot[k] + at, size_t(want - at));
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) failed = true;
          if (r <= 0) break;
          at += r;
        }
        close(fd);
        if (at > sizes.data()[k]) failed = true;
        if (!lines && !bbpe::jsonl::valid_utf8(data + slot[k], data + slot[k] + at)) failed = true;
        got[k] = at;
        marks[k + 1] = lines ? std::count(data + slot[k], data + slot[k] + at, uint8_t('\n')) : 0;
      }
    });
    if (!failed) {  // the files moved together (with lines, each ending with a newline)
      marks[0] = 0;
      for (int64_t k = 0; k < n; ++k) {
        std::memmove(data + end, data + slot[k], size_t(got[k]));
        end += got[k];
        if (!lines) {
          marks[k + 1] = end;
          continue;
        }
        if (got[k] && data[end - 1] != '\n') data[end++] = '\n', ++marks[k + 1];
        marks[k + 1] += marks[k];
      }
    }
  }
  if (failed) {
    delete[] data;
    delete[] marks;
    return nb::none();
  }
  const size_t data_shape[1] = {(size_t)end}, lines_shape[1] = {(size_t)n + 1};
  return nb::make_tuple(owned_array(data, 1, data_shape), owned_array(marks, 1, lines_shape));
}

// Allocates the file `fd`'s blocks for [offset, offset + length), extending it (fallocate(2)
// without zeros written) -> whether the file system did. A flat shard's writer reserves its file
// ahead of its writes: one thread's copy into the page cache bounds the job that writes shards,
// and a write into reserved blocks skips their allocation (4.0 -> 4.5 GB/s on ext4). (Not
// posix_fallocate: where the file system cannot, glibc writes a byte per block.)
static bool reserve_file(int fd, int64_t offset, int64_t length) {
#if defined(__linux__)
  nb::gil_scoped_release unlocked;
  return fallocate(fd, 0, (off_t)offset, (off_t)length) == 0;
#else
  return false;
#endif
}

// Reads the stream `fd` (a pipe) into buf until it is full or the stream ends, the GIL released
// for the whole block (a read per pipe's worth otherwise waits to take it back each time) ->
// bytes read, or -errno.
static int64_t read_stream(int fd, HostArray<uint8_t, 1> buf) {
  const int64_t n = (int64_t)buf.shape(0);
  uint8_t* out = buf.data();
  nb::gil_scoped_release unlocked;
  int64_t at = 0;
  while (at < n) {
    const ssize_t got = read(fd, out + at, size_t(n - at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -errno;
    if (got == 0) break;
    at += got;
  }
  return at;
}

// dst = src (byte arrays of one size) on threads, the GIL released: the corpus job's ids copied
// into the array that `encode_files_to_arrays` returns, whose fresh pages' faults make one
// thread's copy the slowest step of the job.
static void copy_bytes(HostArray<uint8_t, 1> dst, HostArray<const uint8_t, 1> src) {
  const int64_t n = (int64_t)src.shape(0);
  if ((int64_t)dst.shape(0) != n) throw nb::value_error("copy_bytes: dst and src must be of one size");
  uint8_t* to = dst.data();
  const uint8_t* from = src.data();
  nb::gil_scoped_release unlocked;
  bbpe::over_ranges(n, n, (int64_t)1 << 20,
                    [&](int64_t lo, int64_t hi) { std::memcpy(to + lo, from + lo, (size_t)(hi - lo)); });
}

// A window's documents joined with `sep` after each into `out`, short ones packed into rows
// (the rule: core/pack_documents.h) -> (row of each document int32[D], -1: alone;
// rows int32[R, 2]: first byte in out, length). out None: `data` is joined already (offsets
// include the separators; a document without its separator is a ValueError).
static nb::tuple pack_documents(HostArray<const uint8_t, 1> data, HostArray<const int64_t, 1> offsets, nb::bytes sep,
                                int64_t width, std::optional<HostArray<uint8_t, 1>> out) {
  const int64_t docs = (int64_t)offsets.shape(0) - 1, sep_len = (int64_t)sep.size();
  if (docs < 0) throw nb::value_error("pack_documents: offsets must hold at least one entry");
  const int64_t* o = offsets.data();
  if (o[0] < 0 || o[docs] > (int64_t)data.shape(0) || !std::is_sorted(o, o + docs + 1))
    throw nb::value_error("pack_documents: offsets must be ascending within the data");
  if (sep_len < 1 || width < sep_len) throw nb::value_error("pack_documents: need 1 <= len(sep) <= width");
  const int64_t joined = o[docs] - o[0] + (out ? docs * sep_len : 0);
  if ((out && (int64_t)out->shape(0) < joined) || joined >= (int64_t)1 << 31)
    throw nb::value_error("pack_documents: out must hold the joined documents (and fewer than 2**31 bytes)");
  int32_t* row_of_doc = new int32_t[docs + 1];
  int32_t* rows = new int32_t[2 * docs + 2];
  auto row_array = owned_array(row_of_doc, 1, std::array<size_t, 1>{(size_t)docs}.data());
  int64_t n_rows;
  {
    nb::gil_scoped_release unlocked;
    n_rows = bbpe::pack_documents(data.data(), o, docs, (const uint8_t*)sep.c_str(), sep_len, width,
                                  out ? out->data() : nullptr, row_of_doc, rows, !out);
  }
  if (n_rows < 0) {
    delete[] rows;
    throw nb::value_error(("pack_documents: document " + std::to_string(-1 - n_rows) +
                           " is not followed by the separator").c_str());
  }
  const size_t rows_shape[2] = {(size_t)n_rows, 2};
  return nb::make_tuple(row_array, owned_array(rows, 2, rows_shape));
}

// A planned window laid out per document (the rule: core/window_layout.h): calls int64[C, 7]
// (LaidCall's fields), into the zeroed table int32[2, E] and positions int32[P], out
// int64[3, n] (kept, src, count_at) and packed_out int64[2, packed documents] (row_base,
// first_in_row). Every index is checked here: a bad plan is a ValueError, never a stray write.
static void layout_window(S64Array perm, S64Array calls, S64Array doc_start, S64Array lengths, S32Array packed_rows,
                          S32Array row_of_doc, int64_t pack_width, HostArray<int32_t, 2> table,
                          HostArray<int32_t, 1> positions, HostArray<int64_t, 2> out,
                          HostArray<int64_t, 2> packed_out) {
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
        call.offset + call.rows * call.T + std::max(call.rows, call.docs) >= (int64_t)1 << 31 ||
        (is_packed && unpacked_seen) ||
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
  if (k != n || packed != (int64_t)packed_out.shape(1))
    fail("the calls' documents must be perm's, the packed ones first");
  int64_t* o = out.data();
  nb::gil_scoped_release unlocked;
  bbpe::layout_window(p, laid, n_calls, start, len, packed_rows.data(), row_of, pack_width, table.data(), cap,
                      positions.data(), o, o + n, o + 2 * n, packed_out.data(), packed_out.data() + packed);
}

// counts_in_plan_order (core/window_layout.h): counts int32[P] by document, perm int64[n],
// src int64[n] (its packed documents' entries rewritten), packed int64[2, packed documents]
// (row_base, first_in_row) -> got int64[n].
static void counts_in_plan_order(S32Array counts, S64Array perm, HostArray<int64_t, 1> src, S64Array packed,
                                 HostArray<int64_t, 1> got) {
  const int64_t n = (int64_t)perm.size(), n_packed = packed.ndim() == 2 ? (int64_t)packed.shape(1) : -1;
  if (packed.ndim() != 2 || packed.shape(0) != 2 || n_packed > n || (int64_t)src.size() != n ||
      (int64_t)got.size() != n)
    throw nb::value_error("counts_in_plan_order: src and got must be int64[n], packed int64[2, at most n]");
  const int64_t* p = perm.data();
  for (int64_t k = 0; k < n; ++k)
    if (p[k] < 0 || p[k] >= (int64_t)counts.size())
      throw nb::value_error("counts_in_plan_order: a document index out of range");
  nb::gil_scoped_release unlocked;
  bbpe::counts_in_plan_order(counts.data(), p, n, packed.data(), packed.data() + n_packed, n_packed, got.data(),
                             src.data());
}

// compaction_layout (core/window_layout.h): got, src, perm int64[n] (perm a permutation of
// 0..n-1), calls int64[C, 2] (documents, width), into counts int64[n] and layout int32[2, S]
// -> (first bad k or -1, total ids, layout entries written).
static nb::tuple compaction_layout(S64Array got, S64Array src, S64Array perm, S64Array calls,
                                   HostArray<int64_t, 1> counts, HostArray<int32_t, 2> layout) {
  const int64_t n = (int64_t)perm.size();
  if ((int64_t)got.size() != n || (int64_t)src.size() != n || (int64_t)counts.size() != n || layout.shape(0) != 2 ||
      (int64_t)layout.shape(1) < n || calls.ndim() != 2 || calls.shape(1) != 2)
    throw nb::value_error(
        "compaction_layout: got, src, counts must be int64[n], layout int32[2, >= n], calls int64[C, 2]");
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
                                  counts.data(), source.data(), layout.data(), (int64_t)layout.shape(1), &total,
                                  &held);
  }
  return nb::make_tuple(bad, total, held);
}

void bind_corpus_helpers(nb::module_& m) {
  m.def("split_documents", &split_documents, nb::arg("block"), nb::arg("field").none(), nb::arg("threads"),
        nb::arg("sep") = nb::bytes(""), nb::arg("into").none() = nb::none());
  m.def("read_at", &read_at, nb::arg("fd"), nb::arg("offset"), nb::arg("buf").noconvert());
  m.def("read_stream", &read_stream, nb::arg("fd"), nb::arg("buf").noconvert());
  m.def("read_files", &read_files, nb::arg("paths"), nb::arg("sizes").noconvert(), nb::arg("threads"),
        nb::arg("lines") = true);
  m.def("reserve_file", &reserve_file, nb::arg("fd"), nb::arg("offset"), nb::arg("length"));
  m.def("copy_bytes", &copy_bytes, nb::arg("dst").noconvert(), nb::arg("src").noconvert());
  m.def("pack_documents", &pack_documents, nb::arg("data").noconvert(), nb::arg("offsets").noconvert(),
        nb::arg("sep"), nb::arg("width"), nb::arg("out").noconvert().none());
  m.def("layout_window", &layout_window, nb::arg("perm").noconvert(), nb::arg("calls").noconvert(),
        nb::arg("doc_start").noconvert(), nb::arg("lengths").noconvert(), nb::arg("packed_rows").noconvert(),
        nb::arg("row_of_doc").noconvert(), nb::arg("pack_width"), nb::arg("table").noconvert(),
        nb::arg("positions").noconvert(), nb::arg("out").noconvert(), nb::arg("packed_out").noconvert());
  m.def("counts_in_plan_order", &counts_in_plan_order, nb::arg("counts").noconvert(), nb::arg("perm").noconvert(),
        nb::arg("src").noconvert(), nb::arg("packed").noconvert(), nb::arg("got").noconvert());
  m.def("compaction_layout", &compaction_layout, nb::arg("got").noconvert(), nb::arg("src").noconvert(),
        nb::arg("perm").noconvert(), nb::arg("calls").noconvert(), nb::arg("counts").noconvert(),
        nb::arg("layout").noconvert());
}
