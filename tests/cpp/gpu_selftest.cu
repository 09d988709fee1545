// GPU self-test of block_pretokenize against the host reference (pretokenize_sequential).
// Not part of CI (needs a GPU). Build and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 -Iffi tests/cpp/gpu_selftest.cu -o build/gpu_selftest
//   build/gpu_selftest FILE...      (text files to cut excerpts from)
// Checks every pattern (0..4) with 256x16, 512x8 and 1024x4 threads x bytes per thread on
// excerpts (1..4096 bytes, in shared memory), long strings (up to 40000 bytes, several tiles,
// from global memory), random bytes, and special-token masks; then times 1024 x 4096 bytes.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compile_check.cu"

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                     \
    }                                                                              \
  } while (0)

struct Batch {
  std::vector<uint8_t> data, special;
  std::vector<int> offsets{0};
  void add(const std::string& s, const std::vector<uint8_t>& sp) {
    data.insert(data.end(), s.begin(), s.end());
    special.insert(special.end(), sp.begin(), sp.end());
    offsets.push_back((int)data.size());
  }
};

template <int BT, int IPT, bool kSimple = false>
float run_kernel(int pattern, const Batch& b, std::vector<uint8_t>& flags, int reps = 1) {
  uint8_t *d_data, *d_sp, *d_flags;
  int* d_off;
  const size_t n = b.data.size() ? b.data.size() : 1;
  CK(cudaMalloc(&d_data, n));
  CK(cudaMalloc(&d_sp, n));
  CK(cudaMalloc(&d_flags, n));
  CK(cudaMalloc(&d_off, b.offsets.size() * sizeof(int)));
  CK(cudaMemcpy(d_data, b.data.data(), b.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_sp, b.special.data(), b.special.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_off, b.offsets.data(), b.offsets.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemset(d_flags, 0x77, n));
  const int blocks = (int)b.offsets.size() - 1;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto launch = [&] {
    if (kSimple)
      bbpe_check::pretok_kernel_simple<BT><<<blocks, BT>>>(pattern, d_data, d_off, d_sp, d_flags);
    else
      bbpe_check::pretok_kernel<BT, IPT><<<blocks, BT>>>(pattern, d_data, d_off, d_sp, d_flags);
  };
  launch();  // warm-up
  CK(cudaGetLastError());
  CK(cudaEventRecord(e0));
  for (int r = 0; r < reps; ++r) launch();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  flags.resize(b.data.size());
  CK(cudaMemcpy(flags.data(), d_flags, b.data.size(), cudaMemcpyDeviceToHost));
  cudaFree(d_data); cudaFree(d_sp); cudaFree(d_flags); cudaFree(d_off);
  return ms / reps;
}

static long check(const char* cfg, int pattern, const Batch& b, const std::vector<uint8_t>& got) {
  long bad = 0;
  for (size_t s = 0; s + 1 < b.offsets.size(); ++s) {
    const int beg = b.offsets[s], n = b.offsets[s + 1] - beg;
    std::vector<uint8_t> want(n > 0 ? n : 1);
    bbpe::pretokenize_sequential(pattern, b.data.data() + beg, n, b.special.data() + beg, want.data());
    for (int i = 0; i < n; ++i) {
      if (b.special[beg + i]) continue;  // don't-care
      if (got[beg + i] != want[i]) {
        if (bad < 5)
          fprintf(stderr, "MISMATCH %s pattern %d string %zu (len %d) byte %d: gpu %d host %d\n", cfg,
                  pattern, s, n, i, got[beg + i], want[i]);
        ++bad;
        break;
      }
    }
  }
  return bad;
}

int main(int argc, char** argv) {
  std::string corpus;
  for (int a = 1; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    corpus += ss.str();
  }
  if (corpus.empty()) corpus = "Hello world, it's a test.\n  Numbers 12345 and \xe4\xb8\xad\xe6\x96\x87 text.\n";
  std::mt19937 rng(1234);
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto excerpt = [&](int len) {
    if ((size_t)len > corpus.size()) len = (int)corpus.size();
    const int st = rnd(0, (int)corpus.size() - len);
    return corpus.substr(st, len);  // arbitrary cut: may split UTF-8 sequences (invalid edges)
  };
  Batch b;
  for (int k = 0; k < 600; ++k) {  // short and medium excerpts
    const int len = (int)std::pow(2.0, std::uniform_real_distribution<double>(0, 12)(rng));
    std::string s = excerpt(len);
    std::vector<uint8_t> sp(s.size(), 0);
    if (k % 5 == 0 && !s.empty()) {  // a few special-token runs
      for (int r = rnd(1, 3); r > 0; --r) {
        const int p = rnd(0, (int)s.size() - 1), l = rnd(1, 13);
        for (int i = p; i < p + l && i < (int)s.size(); ++i) sp[i] = 1;
      }
    }
    b.add(s, sp);
  }
  for (int k = 0; k < 100; ++k) {  // random bytes
    std::string s(rnd(1, 300), '\0');
    for (auto& c : s) c = (char)rnd(0, 255);
    b.add(s, std::vector<uint8_t>(s.size(), 0));
  }
  for (int k = 0; k < 24; ++k) {  // long strings: several tiles, from global memory
    std::string s = excerpt(rnd(4097, 40000));
    std::vector<uint8_t> sp(s.size(), 0);
    if (k % 3 == 0) for (int i = rnd(0, 4000); i < (int)s.size(); i += rnd(500, 9000)) sp[i] = 1;
    b.add(s, sp);
  }
  b.add("", {});
  printf("self-test batch: %zu strings, %zu bytes\n", b.offsets.size() - 1, b.data.size());
  long bad = 0;
  std::vector<uint8_t> got;
  for (int p = 0; p <= 4; ++p) {
    run_kernel<256, 16>(p, b, got); bad += check("256x16", p, b, got);
    run_kernel<512, 8>(p, b, got); bad += check("512x8", p, b, got);
    run_kernel<1024, 4>(p, b, got); bad += check("1024x4", p, b, got);
    run_kernel<256, 16, true>(p, b, got); bad += check("simple256", p, b, got);
  }
  printf("mismatching strings: %ld\n", bad);

  // Timing: B strings x L bytes of corpus text.
  for (int L : {512, 4096}) {
    Batch t;
    for (int k = 0; k < 1024; ++k) {
      std::string s = excerpt(L);
      t.add(s, std::vector<uint8_t>(s.size(), 0));
    }
    for (int p = 1; p <= 4; ++p) {
      const double mb = t.data.size() / 1e6;
      float a = run_kernel<256, 16>(p, t, got, 10);
      long e = check("t256x16", p, t, got);
      float c = run_kernel<512, 8>(p, t, got, 10);
      e += check("t512x8", p, t, got);
      float d = run_kernel<1024, 4>(p, t, got, 10);
      e += check("t1024x4", p, t, got);
      bad += e;
      printf("timing 1024 x %d B pattern %d: 256x16 %.3f ms (%.1f GB/s), 512x8 %.3f ms (%.1f GB/s), "
             "1024x4 %.3f ms (%.1f GB/s)%s\n", L, p, a, mb / a, c, mb / c, d, mb / d, e ? " MISMATCH" : "");
    }
  }
  printf(bad ? "FAILED\n" : "OK\n");
  return bad ? 1 : 0;
}
