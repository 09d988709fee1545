// Host work split over threads (the CPU encode, the packers of core/pack_strings.h and core/pack_documents.h,
// the corpus reader of core/jsonl.h, the chunked pre-tokenizer): one core's memcpy or parse
// speed is what a multi-MiB batch would wait for.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace bbpe {

// The host's cores, read once: glibc answers hardware_concurrency() by reading
// /sys/devices/system/cpu/online, two system calls that cost more than encoding a short string.
// BLOCKBPE_HOST_THREADS=N: N instead (a training host's other work keeps the rest; tests run
// the pool with more workers than the machine has cores).
inline int64_t host_cores() {
  static const int64_t cores = [] {
    const char* env = std::getenv("BLOCKBPE_HOST_THREADS");
    const int64_t asked = env ? std::atoll(env) : 0;
    return asked >= 1 ? std::min<int64_t>(asked, 1024) : std::max<int64_t>(1, std::thread::hardware_concurrency());
  }();
  return cores;
}

// Fork-join over persistent workers, one per core but the caller's, started on first use:
// starting and joining 8 threads per call costs 50-200 us, as much as packing a MiB. One job
// at a time; `run` returns false (the caller then starts threads of its own) when the pool is
// busy with another caller's job, when called from one of its workers (a nested split), in a
// forked child (the workers are the parent's), or with BLOCKBPE_WORKER_POOL=0 (for A/B runs).
// After a job its workers, and the caller waiting for them, spin for a short while before
// they sleep: waking a sleeping thread costs tens of microseconds on a virtual machine's
// cores, and jobs come in runs (the parts of one staged upload, a batch's stages), so the
// next job of a run finds its workers awake. BLOCKBPE_WORKER_SPIN_US sets the while (0: sleep
// at once); it bounds the CPU time a job can cost beyond its work.
class WorkerPool {
 public:
  static WorkerPool& get() {
    static WorkerPool* pool = new WorkerPool();  // never destroyed: its workers live until exit
    return *pool;
  }

  // body(t) for every t in [0, threads), t = 0 (and t + workers + 1, ...) on this thread.
  bool run(int64_t threads, const std::function<void(int64_t)>& body) {
    if (!enabled_ || in_worker() || getpid() != pid_) return false;
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true)) return false;
    if (workers_ == 0) start();
    const int64_t stride = workers_ + 1;
    {
      std::lock_guard<std::mutex> lock(m_);
      body_ = &body;
      count_ = threads;
      wanted_ = std::min<int64_t>(threads - 1, workers_);
      finished_.store(0);
      generation_.fetch_add(1);
    }
    for (int64_t w = 1; w <= wanted_; ++w) wake_[w].notify_one();  // (only the workers needed)
    try {
      for (int64_t t = 0; t < threads; t += stride) body(t);
    } catch (...) {
      wait_for_workers();
      throw;
    }
    wait_for_workers();
    return true;
  }

 private:
  WorkerPool() : pid_(getpid()) {
    const char* env = std::getenv("BLOCKBPE_WORKER_POOL");
    enabled_ = !(env && std::atoi(env) == 0) && host_cores() > 1;
    if (const char* spin = std::getenv("BLOCKBPE_WORKER_SPIN_US")) spin_ = std::chrono::microseconds(std::max(0, std::atoi(spin)));
  }

  // Spins until done() or the spin time has passed; whether done() came true.
  template <class Done>
  bool spin_until(Done done) const {
    if (done()) return true;
    if (spin_.count() == 0) return false;
    const auto until = std::chrono::steady_clock::now() + spin_;
    do {
      for (int k = 0; k < 64; ++k) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (done()) return true;
      }
    } while (std::chrono::steady_clock::now() < until);
    return done();
  }

  static bool& in_worker() {
    static thread_local bool flag = false;
    return flag;
  }

  void start() {
    workers_ = host_cores() - 1;
    wake_.reset(new std::condition_variable[workers_ + 1]);
    for (int64_t w = 1; w <= workers_; ++w) std::thread([this, w] { loop(w); }).detach();
  }

  void wait_for_workers() {
    spin_until([&] { return finished_.load() == wanted_; });  // (wanted_ is this job's, set by us)
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return finished_.load() == wanted_; });
    body_ = nullptr;
    lock.unlock();
    busy_.store(false);
  }

  void loop(int64_t w) {
    in_worker() = true;
    uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load() != seen; });  // (then checked under the lock)
      std::unique_lock<std::mutex> lock(m_);
      wake_[w].wait(lock, [&] { return generation_.load() != seen && w <= wanted_; });
      seen = generation_.load();
      const auto* body = body_;
      const int64_t count = count_, stride = workers_ + 1;
      lock.unlock();
      for (int64_t t = w; t < count; t += stride) (*body)(t);
      lock.lock();
      if (finished_.fetch_add(1) + 1 == wanted_) done_.notify_one();
    }
  }

  const pid_t pid_;
  bool enabled_ = true;
  std::atomic<bool> busy_{false};
  int64_t workers_ = 0;  // set once, by the first job's caller (busy_ held)
  std::mutex m_;
  std::unique_ptr<std::condition_variable[]> wake_;  // one per worker: only the needed ones wake
  std::condition_variable done_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t count_ = 0, wanted_ = 0;
  std::atomic<int64_t> finished_{0};  // (atomic: read while spinning, without the lock)
  std::atomic<uint64_t> generation_{0};
  std::chrono::microseconds spin_{50};
};

// body(t) for t in [0, threads): on the worker pool, else on threads started here.
template <class Body>
inline void fork_join(int64_t threads, Body body) {
  if (threads <= 1) {
    if (threads == 1) body(0);
    return;
  }
  if (WorkerPool::get().run(threads, std::function<void(int64_t)>(std::ref(body)))) return;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  body(0);
  for (auto& th : pool) th.join();
}

// Calls fn(lo, hi) over [0, n) in equal ranges, the first on this thread, on up to
// `max_threads` threads (one per `bytes_per_thread` of `work_bytes`; the packers' copies stop
// gaining at ~8).
template <class Fn>
inline void over_ranges(int64_t n, int64_t work_bytes, int64_t bytes_per_thread, Fn fn, int64_t max_threads = 8) {
  const int64_t threads =
      std::max<int64_t>(1, std::min({host_cores(), max_threads, work_bytes / bytes_per_thread, n}));
  const int64_t per = (n + threads - 1) / threads;
  fork_join(threads, [&](int64_t t) { fn(std::min(n, t * per), std::min(n, (t + 1) * per)); });
}

// fn(k) for k in [0, n), thread t of up to `threads` (this one the first) taking k = t mod threads.
template <class Fn>
inline void on_threads(size_t n, int threads, Fn fn) {
  const int64_t used = std::max<int64_t>(1, std::min<int64_t>(threads, (int64_t)n));
  fork_join(used, [&](int64_t t) {
    for (size_t k = (size_t)t; k < n; k += (size_t)used) fn(k);
  });
}

}  // namespace bbpe
