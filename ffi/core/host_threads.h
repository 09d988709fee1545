// Host work split over threads (the CPU encode, the packers of core/pack_strings.h and core/pack_documents.h,
// the corpus reader of core/jsonl.h): one core's memcpy or parse speed is what a multi-MiB
// batch would wait for.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace bbpe {

// The host's cores, read once: glibc answers hardware_concurrency() by reading
// /sys/devices/system/cpu/online, two system calls that cost more than encoding a short string.
inline int64_t host_cores() {
  static const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return cores;
}

// Calls fn(lo, hi) over [0, n) in equal ranges, the first on this thread, on up to
// `max_threads` threads (one per `bytes_per_thread` of `work_bytes`; the packers' copies stop
// gaining at ~8).
template <class Fn>
inline void over_ranges(int64_t n, int64_t work_bytes, int64_t bytes_per_thread, Fn fn, int64_t max_threads = 8) {
  const int64_t threads =
      std::max<int64_t>(1, std::min({host_cores(), max_threads, work_bytes / bytes_per_thread, n}));
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(fn, std::min(n, t * per), std::min(n, (t + 1) * per));
  fn(0, std::min(n, per));
  for (auto& th : pool) th.join();
}

// fn(k) for k in [0, n), thread t of up to `threads` (this one the first) taking k = t mod threads.
template <class Fn>
inline void on_threads(size_t n, int threads, Fn fn) {
  const auto run = [&](size_t first) {
    for (size_t k = first; k < n; k += (size_t)threads) fn(k);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < (size_t)threads && t < n; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& t : pool) t.join();
}

}  // namespace bbpe
