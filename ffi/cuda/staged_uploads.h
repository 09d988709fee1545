// Copies to the device that an encode waits for on the GPU instead of on the host.
// HostStaging (cuda_module.cc) registers its device buffer when it takes a batch, packs it on a
// thread of its own and copies it on its own stream; the encode handler that reads the buffer
// (encode_cuda.cu) makes XLA's stream wait for the copy's event. The host then dispatches the
// encode while the batch is packed and copied: the dispatch costs about as much as packing a
// 4 MiB batch. The event is recorded once the last part is packed, so a handler that comes
// earlier waits on the host for that record (not for the copy).
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <mutex>
#include <unordered_map>

namespace bbpe {

class StagedUploads {
 public:
  // One registry per process (an inline function's static: the module's one instance).
  static StagedUploads& get() {
    static StagedUploads uploads;
    return uploads;
  }

  // `buffer` will be filled by a copy that ends at `copied`, recorded later (`recorded`).
  void expect(const void* buffer, cudaEvent_t copied) {
    std::lock_guard<std::mutex> lock(m_);
    pending_[buffer] = Copy{copied, false, cudaSuccess};
  }

  // The copy into `buffer` is on its stream, its event recorded (or it failed with `error`:
  // the encode that waits for it fails with it, rather than read a buffer never filled).
  void recorded(const void* buffer, cudaError_t error) {
    {
      std::lock_guard<std::mutex> lock(m_);
      const auto found = pending_.find(buffer);
      if (found == pending_.end()) return;
      found->second.recorded = true;
      found->second.error = error;
    }
    recorded_.notify_all();
  }

  // Forgets `buffer`; returns whether no encode had waited for its copy.
  bool withdraw(const void* buffer) {
    std::lock_guard<std::mutex> lock(m_);
    return pending_.erase(buffer) > 0;
  }

  bool pending(const void* buffer) {
    std::lock_guard<std::mutex> lock(m_);
    return pending_.count(buffer) > 0;
  }

  // Makes `stream` wait for the copy into `buffer`, if one is registered (then forgets it: the
  // stream's later work is ordered after this wait); first waits for its event's record.
  cudaError_t wait_on(cudaStream_t stream, const void* buffer) {
    std::unique_lock<std::mutex> lock(m_);
    auto found = pending_.find(buffer);
    if (found == pending_.end()) return cudaSuccess;
    recorded_.wait(lock, [&] {
      found = pending_.find(buffer);
      return found == pending_.end() || found->second.recorded;
    });
    if (found == pending_.end()) return cudaSuccess;  // (withdrawn meanwhile: its owner waited)
    const Copy copy = found->second;
    pending_.erase(found);
    return copy.error != cudaSuccess ? copy.error : cudaStreamWaitEvent(stream, copy.event, 0);
  }

 private:
  struct Copy {
    cudaEvent_t event;
    bool recorded;
    cudaError_t error;
  };
  std::mutex m_;
  std::condition_variable recorded_;
  std::unordered_map<const void*, Copy> pending_;
};

}  // namespace bbpe
