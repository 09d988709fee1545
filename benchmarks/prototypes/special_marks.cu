// Prototype: the specials' marks of a batch in a pass of their own, a warp per row, before the
// piece kernel (which today matches them in a stage of its own, with two block barriers).
// Reads the batch and one set of specials from the file special_marks.py writes, computes every
// row's marks on the host with core/special_tokens.h's match_specials_in (the CPU executor's
// rule), then on the device, compares them byte for byte and times the pass (CUDA events, the
// median of the launches). Prints one JSON line.
//   nvcc -std=c++17 -O3 -arch=sm_90 -I ffi -o special_marks benchmarks/prototypes/special_marks.cu
//   ./special_marks FILE [LAUNCHES]   (exit status 1: a mark differs; 3: no GPU, the host's marks alone)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/special_tokens.h"

namespace {

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));     \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kWarps = 4;          // rows a block
constexpr int kMaxRow = 4096;      // the piece kernels' longest row (kPieceMaxLen)
constexpr int kStripe = 32 * 16;   // bytes a warp reads a step: 16 a lane
constexpr int kMaxFound = 1024;    // matches a row lists before they are resolved (>= a stripe's)

// The warp's list of matches, in byte order: each one's first byte (12 bits) and the bytes of
// text it covers above them (accept_listed_specials reads them through first and len).
struct FoundList {
  static constexpr int kFirstBits = 12;
  const uint32_t* entries;
  __device__ static uint32_t entry(int first, int len) { return (uint32_t)first | (uint32_t)len << kFirstBits; }
  __device__ int first(int e) const { return (int)(entries[e] & ((1u << kFirstBits) - 1)); }
  __device__ int len(int e) const { return (int)(entries[e] >> kFirstBits); }
};
static_assert((1 << FoundList::kFirstBits) >= kMaxRow, "a row's first bytes fit an entry");

// Every row's marks (initial_char_token's is_special: 2 at an accepted special's first byte, 1
// at its other bytes, 0 elsewhere; marks past a row's length are 0 up to its 16-byte end), a
// warp per row. Each lane reads 16 bytes a step and looks up their slots; only a byte with a
// slot is matched (special_match_with, which reads the text where it lies: the bytes a match
// reads past the lane's 16 come from L1). The warp lists its matches in byte order; lane 0
// resolves the list leftmost-first (accept_listed_specials) when the next step's might not fit,
// and at the row's end.
__global__ void __launch_bounds__(32 * kWarps) special_marks_kernel(bbpe::SpecialView s, bool escaped,
                                                                   const uint8_t* data, const int32_t* lengths,
                                                                   int batch, int max_len, uint8_t* marks) {
  __shared__ __align__(16) uint8_t row_marks[kWarps][kMaxRow];
  __shared__ uint32_t found[kWarps][kMaxFound];
  __shared__ uint16_t stripe_lens[kWarps][kStripe];  // a step's matches' lengths, by byte
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = (int64_t)blockIdx.x * kWarps + warp;
  if (row >= batch) return;  // (a whole warp: nothing below waits on another warp)
  const int n = min(max(__ldg(lengths + row), 0), min(max_len, kMaxRow));
  const uint8_t* text = data + row * (int64_t)max_len;
  const bbpe::SpecialStarts& t = *s.starts;
  uint8_t* mine = row_marks[warp];
  uint32_t* list = found[warp];
  uint16_t* lens = stripe_lens[warp];
  const int padded = (n + 15) & ~15;
  for (int q = lane * 16; q < padded; q += kStripe) *reinterpret_cast<uint4*>(mine + q) = make_uint4(0, 0, 0, 0);
  int count = 0;  // matches listed and not yet resolved (the same in every lane)
  int reach = 0;  // lane 0: the end of the last match counted
  for (int base0 = 0; base0 < n; base0 += kStripe) {
    const int base = base0 + lane * 16;
    uint32_t slots = 0;
    if (base < n) {
      uint8_t b[16];
      if (base + 16 <= max_len && (reinterpret_cast<uintptr_t>(text + base) & 15) == 0) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(text + base));
        std::memcpy(b, &v, 16);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) b[j] = base + j < n ? text[base + j] : 0;
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) slots |= (uint32_t)(__ldg(t.slot + b[j]) != 0) << j;
      slots &= n - base >= 16 ? 0xFFFFu : (1u << (n - base)) - 1;
    }
    uint32_t matched = 0;  // bit j: a special matches at byte base + j (its length in lens)
    for (uint32_t rest = slots; rest; rest &= rest - 1) {
      const int j = __ffs(rest) - 1;
      int len = 0;
      const int k = bbpe::special_match_with(t, s, text, n, base + j, escaped, len);
      if (k >= 0 && len > 0) matched |= 1u << j, lens[lane * 16 + j] = (uint16_t)len;
    }
    const int here = __popc(matched);
    int before = here;  // then less mine: the matches of the lanes before this one
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(~0u, before, d);
      if (lane >= d) before += v;
    }
    const int total = __shfl_sync(~0u, before, 31);
    before -= here;
    if (count + total > kMaxFound) {  // (the list so far resolved first: this step's always fits)
      __syncwarp();
      if (lane == 0) reach = bbpe::accept_listed_specials(FoundList{list}, count, reach, mine);
      __syncwarp();
      count = 0;
    }
    int e = count + before;
    for (uint32_t rest = matched; rest; rest &= rest - 1) {
      const int j = __ffs(rest) - 1;
      list[e++] = FoundList::entry(base + j, lens[lane * 16 + j]);
    }
    count += total;
  }
  __syncwarp();
  if (lane == 0) bbpe::accept_listed_specials(FoundList{list}, count, reach, mine);
  __syncwarp();
  uint8_t* out = marks + row * (int64_t)max_len;
  for (int q = lane * 16; q < padded; q += kStripe)
    *reinterpret_cast<uint4*>(out + q) = *reinterpret_cast<const uint4*>(mine + q);
}

struct Input {
  int32_t escaped = 0, count = 0, batch = 0, max_len = 0;
  std::vector<int32_t> offsets, ids, lengths;
  std::vector<uint8_t> data, starts, text;
};

template <class T>
void read_into(FILE* f, std::vector<T>& v, size_t n) {
  v.resize(n);
  if (n && std::fread(v.data(), sizeof(T), n, f) != n) {
    std::fprintf(stderr, "special_marks: the file ends early\n");
    std::exit(2);
  }
}

// The file: int32 escaped, count, data bytes, batch, max_len, special_starts bytes; then offsets[count + 1],
// ids[max(count, 1)], data, special_starts (sizeof(SpecialStarts) bytes), lengths[batch],
// text[batch * max_len] (special_marks.py writes it).
Input read_input(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "special_marks: cannot open %s\n", path);
    std::exit(2);
  }
  Input in;
  int32_t head[6];
  if (std::fread(head, sizeof head, 1, f) != 1) std::exit(2);
  if (head[5] != (int32_t)sizeof(bbpe::SpecialStarts)) {
    std::fprintf(stderr, "special_marks: special_starts of %d bytes, not %zu: another layout\n", head[5],
                 sizeof(bbpe::SpecialStarts));
    std::exit(2);
  }
  in.escaped = head[0], in.count = head[1], in.batch = head[3], in.max_len = head[4];
  if (in.max_len % 16 != 0) {  // (the kernel stores a row's marks 16 bytes at a time)
    std::fprintf(stderr, "special_marks: rows of %d bytes, not a multiple of 16\n", in.max_len);
    std::exit(2);
  }
  read_into(f, in.offsets, in.count + 1);
  read_into(f, in.ids, std::max(in.count, 1));
  read_into(f, in.data, head[2]);
  read_into(f, in.starts, sizeof(bbpe::SpecialStarts));
  read_into(f, in.lengths, in.batch);
  read_into(f, in.text, (size_t)in.batch * in.max_len);
  std::fclose(f);
  return in;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
  if (!v.empty()) CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: special_marks FILE [LAUNCHES]\n");
    return 2;
  }
  const int launches = argc > 2 ? std::atoi(argv[2]) : 50;
  const Input in = read_input(argv[1]);
  const bool escaped = in.escaped != 0;
  bbpe::SpecialView host{in.offsets.data(), in.data.data(), in.ids.data(), in.count,
                         reinterpret_cast<const bbpe::SpecialStarts*>(in.starts.data())};

  // The host's marks: the CPU executor's rule, row by row.
  std::vector<uint8_t> want((size_t)in.batch * in.max_len, 0);
  size_t accepted = 0;
  {
    std::vector<int32_t> match(in.max_len), lens(in.max_len);
    for (int r = 0; r < in.batch; ++r) {
      const int n = std::min(std::max(in.lengths[r], 0), std::min(in.max_len, kMaxRow));
      uint8_t* w = want.data() + (size_t)r * in.max_len;
      bbpe::match_specials_in(*host.starts, host, in.text.data() + (size_t)r * in.max_len, n, escaped, match.data(),
                              lens.data(), w);
      accepted += std::count(w, w + n, 2);
    }
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {  // (the host's marks alone)
    std::printf("{\"batch\": %d, \"max_len\": %d, \"specials\": %d, \"accepted\": %zu, \"device\": false}\n", in.batch,
                in.max_len, in.count, accepted);
    return 3;
  }
  bbpe::SpecialView dev{upload(in.offsets), upload(in.data), upload(in.ids), in.count,
                        reinterpret_cast<const bbpe::SpecialStarts*>(upload(in.starts))};
  const uint8_t* text = upload(in.text);
  const int32_t* lengths = upload(in.lengths);
  uint8_t* marks = nullptr;
  CHECK(cudaMalloc(&marks, (size_t)in.batch * in.max_len));
  CHECK(cudaMemset(marks, 0, (size_t)in.batch * in.max_len));
  const int blocks = (in.batch + kWarps - 1) / kWarps;
  special_marks_kernel<<<blocks, 32 * kWarps>>>(dev, escaped, text, lengths, in.batch, in.max_len, marks);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(want.size());
  CHECK(cudaMemcpy(got.data(), marks, got.size(), cudaMemcpyDeviceToHost));
  size_t differ = 0, first_row = 0, first_byte = 0;
  for (int r = 0; r < in.batch; ++r) {
    const int n = std::min(std::max(in.lengths[r], 0), std::min(in.max_len, kMaxRow));
    for (int i = 0; i < n; ++i)
      if (got[(size_t)r * in.max_len + i] != want[(size_t)r * in.max_len + i] && differ++ == 0)
        first_row = r, first_byte = i;
  }

  std::vector<float> us;
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int l = 0; l < launches; ++l) {
    CHECK(cudaEventRecord(start));
    special_marks_kernel<<<blocks, 32 * kWarps>>>(dev, escaped, text, lengths, in.batch, in.max_len, marks);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000 * ms);
  }
  std::sort(us.begin(), us.end());
  size_t bytes = 0;
  for (int r = 0; r < in.batch; ++r) bytes += (size_t)std::min(std::max(in.lengths[r], 0), in.max_len);
  const float median = us.empty() ? 0 : us[us.size() / 2];
  std::printf(
      "{\"batch\": %d, \"max_len\": %d, \"specials\": %d, \"accepted\": %zu, \"differ\": %zu, "
      "\"first_differ\": [%zu, %zu], \"launches\": %d, \"median_us\": %.2f, \"min_us\": %.2f, \"GBps\": %.1f}\n",
      in.batch, in.max_len, in.count, accepted, differ, first_row, first_byte, launches, median,
      us.empty() ? 0 : us[0], median > 0 ? bytes / (median * 1e3) : 0);
  return differ ? 1 : 0;
}
