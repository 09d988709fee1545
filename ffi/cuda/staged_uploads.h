// Copies to the device that an encode waits for on the GPU instead of on the host.
// HostStaging (cuda_module.cc) starts a batch's copy on its own stream and registers the
// device buffer with the copy's event; the encode handler that reads the buffer (encode_cuda.cu)
// makes XLA's stream wait for that event. The host then dispatches the encode while the copy
// runs: the dispatch costs about as much as the copy of a 4 MiB batch.
#pragma once

#include <cuda_runtime_api.h>

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

  // `buffer` is being filled by a copy that ends at `copied` (recorded already).
  void expect(const void* buffer, cudaEvent_t copied) {
    std::lock_guard<std::mutex> lock(m_);
    pending_[buffer] = copied;
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
  // stream's later work is ordered after this wait).
  cudaError_t wait_on(cudaStream_t stream, const void* buffer) {
    std::lock_guard<std::mutex> lock(m_);
    const auto found = pending_.find(buffer);
    if (found == pending_.end()) return cudaSuccess;
    const cudaError_t err = cudaStreamWaitEvent(stream, found->second, 0);
    pending_.erase(found);
    return err;
  }

 private:
  std::mutex m_;
  std::unordered_map<const void*, cudaEvent_t> pending_;
};

}  // namespace bbpe
