// core/host_threads.h's fork_join under ThreadSanitizer (tests/ops/test_host_threads.py):
// jobs of 1-9 threads back to back and after pauses (workers spinning, then asleep), and three
// callers at once (one gets the pool, the others start threads of their own). Every body runs
// once per job and the caller sees each one's writes. Prints "ok" or what went wrong.
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/host_threads.h"

int main() {
  std::vector<int64_t> seen(16);
  long wrong = 0;
  for (int job = 0; job < 4000; ++job) {
    const int64_t threads = 1 + job % 9;
    std::atomic<int64_t> sum{0};
    bbpe::fork_join(threads, [&](int64_t t) {
      sum += t + 1;
      seen[t] = job;  // (plain writes: the join must order them before the checks below)
    });
    if (sum != threads * (threads + 1) / 2) ++wrong;
    for (int64_t t = 0; t < threads; ++t) wrong += seen[t] != job;
    if (job % 500 == 499) std::this_thread::sleep_for(std::chrono::microseconds(300));  // (past the spin)
  }
  std::atomic<long> wrong_concurrent{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job) {
        std::atomic<int64_t> sum{0};
        bbpe::fork_join(4, [&](int64_t t) { sum += t; });
        if (sum != 6) ++wrong_concurrent;
      }
    });
  for (auto& c : callers) c.join();
  if (wrong || wrong_concurrent) {
    std::printf("wrong: %ld sequential, %ld concurrent\n", wrong, wrong_concurrent.load());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
