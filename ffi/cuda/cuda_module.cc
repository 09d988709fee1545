// CUDA FFI targets and the nanobind module that registers them (kernels: encode_cuda.cu),
// plus `HostStaging`: string batches packed into page-locked memory and copied to the GPU on a
// private stream, for Tokenizer.encode_batch, and `DeviceReader`: results copied back the same
// way, for Encoded.numpy (blockbpe_jax/staging.py).
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "binding/window_ffi.h"
#include "binding/module_binding.h"
#include "core/pack_strings.h"
#include "cuda/staged_uploads.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "xla/ffi/api/api.h"

namespace nb = nanobind;

XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeCudaUnchecked);
XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeEncodeWindowCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(BbpeSplitLinesCuda);  // cuda/jsonl_split.cuh
#ifdef BBPE_STAGE_CLOCKS
namespace bbpe {
std::vector<std::pair<std::string, unsigned long long>> read_stage_clocks();  // encode_cuda.cu
std::vector<unsigned long long> read_block_marks();                         // encode_cuda.cu
}
#endif

namespace bbpe {

static void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("blockbpe_jax CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Device memory that lives as long as the last DLPack view of it (JAX frees an imported
// buffer when its last array goes, which may be after the staging slot grew).
struct DeviceAllocation {
  void* ptr = nullptr;
  int device = 0;
  DeviceAllocation(int device, size_t bytes) : device(device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc");
  }
  ~DeviceAllocation() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
};

// The owner a DLPack view of `memory` holds: the allocation lives until its last view goes.
static nb::capsule view_owner(const std::shared_ptr<DeviceAllocation>& memory) {
  auto* keep = new std::shared_ptr<DeviceAllocation>(memory);
  return nb::capsule(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<DeviceAllocation>*>(p); });
}

// Page-locked host memory. From 4 MiB: anonymous memory 2 MiB-aligned (transparent huge pages
// where the kernel gives them on madvise), faulted in here, then registered with CUDA: for 48
// MiB ~8 ms (freed in 1) where cudaHostAlloc took 25-40 (freed in 6-8), and several threads'
// allocations run at once where cudaHostAlloc's ran one after the other. cudaHostAlloc below
// 4 MiB, or when the registration fails.
struct PinnedHost {
  void* ptr = nullptr;
  size_t mapped = 0;  // the mapping's bytes (0: cudaHostAlloc's memory)

  explicit PinnedHost(size_t nbytes) {
    constexpr size_t kHuge = size_t(2) << 20;
    nbytes = std::max<size_t>(nbytes, 1);
    if (nbytes >= 2 * kHuge) {
      const size_t n = (nbytes + kHuge - 1) / kHuge * kHuge;
      void* base = mmap(nullptr, n + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base != MAP_FAILED) {
        const uintptr_t b = (uintptr_t)base, a = (b + kHuge - 1) & ~(uintptr_t)(kHuge - 1);
        if (a > b) munmap(base, a - b);  // (the mapping trimmed to [a, a + n))
        munmap((void*)(a + n), b + kHuge - a);
        madvise((void*)a, n, MADV_HUGEPAGE);
        // A forked child gets zeros here (or no mapping): a fork would otherwise copy these
        // pinned pages into the child, or mark them copy-on-write, so that the parent's next
        // write moves its page away from the one CUDA pinned.
#ifdef MADV_WIPEONFORK
        if (madvise((void*)a, n, MADV_WIPEONFORK) != 0)
#endif
          madvise((void*)a, n, MADV_DONTFORK);
        for (size_t i = 0; i < n; i += 4096) ((volatile uint8_t*)a)[i] = 0;
        if (cudaHostRegister((void*)a, n, cudaHostRegisterPortable) == cudaSuccess) {
          ptr = (void*)a;
          mapped = n;
          return;
        }
        cudaGetLastError();  // (clears the error: cudaHostAlloc below)
        munmap((void*)a, n);
      }
    }
    check_cuda(cudaHostAlloc(&ptr, nbytes, cudaHostAllocPortable), "cudaHostAlloc");
  }
  ~PinnedHost() {
    if (!mapped) {
      cudaFreeHost(ptr);
      return;
    }
    cudaHostUnregister(ptr);
    munmap(ptr, mapped);
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
};

// One staging slot: pinned host rows + lengths, their device copy, a private stream and an
// event marking the end of the last copy. JAX's own transfer of a NumPy argument costs
// 150-250 us of fixed overhead per array on the H200 (benchmarks/host_path.py), more than the
// kernel takes for 1024 x 512 bytes; this path is one memcpy into pinned memory and a DMA per
// part of it. `upload` checks the batch and returns; the rows are packed and copied by the
// slot's own thread (the packer) while the caller dispatches the encode, which waits for the
// copy on the GPU (cuda/staged_uploads.h); any other reader calls wait() first. The caller
// (staging.py) hands a slot out again only after the computation that read its device buffer
// has finished. The event also guards the pinned buffer.
class HostStaging {
  // (a smaller DMA runs well below the link's speed: more, smaller parts would lose in copy
  // speed what they gain in overlap; docs/performance.md has the measurement)
  static constexpr int64_t kPartBytes = int64_t(1) << 20;
  static constexpr int64_t kMaxParts = 4;

 public:
  explicit HostStaging(int device) : device_(device) {
    // BLOCKBPE_STAGING_PARTS=1: one copy after the whole batch is packed (for A/B runs).
    if (const char* parts = std::getenv("BLOCKBPE_STAGING_PARTS")) max_parts_ = std::clamp<int64_t>(std::atoll(parts), 1, 64);
    // BLOCKBPE_STAGING_BACKGROUND=0: packed on the caller's thread before upload returns (A/B).
    if (const char* bg = std::getenv("BLOCKBPE_STAGING_BACKGROUND")) background_ = std::atoi(bg) != 0;
    // BLOCKBPE_STAGING_STREAM=0: the rows written with plain stores, not the non-temporal ones of
    // core/stream_stores.h (A/B: docs/performance.md, "Strings as they come").
    if (const char* st = std::getenv("BLOCKBPE_STAGING_STREAM")) streaming_ = std::atoi(st) != 0;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~HostStaging() {
    if (packer_.joinable()) {
      {
        nb::gil_scoped_release unlocked;
        std::unique_lock<std::mutex> lock(m_);
        packed_cv_.wait(lock, [&] { return !job_; });
        stop_ = true;
      }
      job_cv_.notify_one();
      packer_.join();
    }
    if (device_buffer_) StagedUploads::get().withdraw(device_buffer_->ptr);
    cudaSetDevice(device_);
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
    cudaStreamDestroy(stream_);
  }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Checks `texts` (the rule of core/pack_strings.h) and starts packing them into the pinned
  // buffer and copying them to the device. Returns (batch, max_len) of the packed rows.
  std::pair<int64_t, int64_t> upload(nb::handle texts, int64_t max_len) {
    StringViews strings = string_views(texts, max_len);
    const int64_t batch = (int64_t)strings.views.size();
    if (batch == 0 || max_len == 0) throw nb::value_error("HostStaging: empty batch or rows");
    // Lengths after the rows, at a 256-byte boundary (JAX imports aligned buffers only).
    const size_t lengths_at = (size_t)((batch * max_len + 255) / 256 * 256);
    const size_t bytes = lengths_at + (size_t)batch * sizeof(int32_t);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    {
      nb::gil_scoped_release unlocked;  // the previous batch packed, its copy out of the pinned rows
      wait_packed();
      check_cuda(cudaEventSynchronize(copied_), "cudaEventSynchronize");
    }
    strings_.reset();  // (the last batch's strings: given back with the GIL held)
    if (device_buffer_) StagedUploads::get().withdraw(device_buffer_->ptr);
    if (bytes > capacity_) {
      const size_t grown = std::max(bytes, capacity_ * 2);
      host_.reset();
      capacity_ = 0;
      nb::gil_scoped_release unlocked;  // (milliseconds)
      host_ = std::make_unique<PinnedHost>(grown);
      device_buffer_ = std::make_shared<DeviceAllocation>(device_, grown);
      capacity_ = grown;
      ++generation_;
    }
    batch_ = batch, max_len_ = max_len, lengths_at_ = lengths_at;  // what device_arrays shows
    StagedUploads::get().expect(device_buffer_->ptr, copied_);  // the encode reading it waits
    strings_ = std::make_unique<StringViews>(std::move(strings));
    if (!background_) {
      nb::gil_scoped_release unlocked;
      pack_error_ = pack_and_record();
      check_cuda(pack_error_, "packing the staged batch");
      return {batch_, max_len_};
    }
    if (!packer_.joinable()) packer_ = std::thread([this] { packer_loop(); });
    {
      std::lock_guard<std::mutex> lock(m_);
      job_ = true;
    }
    job_cv_.notify_one();
    return {batch_, max_len_};
  }

  // Blocks until the last batch is packed and its copy has ended (the GIL released meanwhile).
  void wait() {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    nb::gil_scoped_release unlocked;
    check_cuda(wait_packed(), "packing the staged batch");
    check_cuda(cudaEventSynchronize(copied_), "cudaEventSynchronize");
  }

  // Views of the device copy: (uint8[B, L] rows, int32[B] lengths); each keeps the device
  // allocation alive. They stay valid (and see each new upload of the same shape) until the
  // buffer grows, which changes `generation`.
  nb::tuple device_arrays() {
    if (!device_buffer_ || batch_ == 0) throw nb::value_error("HostStaging: nothing uploaded");
    uint8_t* base = static_cast<uint8_t*>(device_buffer_->ptr);
    const size_t data_shape[2] = {(size_t)batch_, (size_t)max_len_};
    const size_t lengths_shape[1] = {(size_t)batch_};
    // array_api: objects with __dlpack__ / __dlpack_device__ (no framework would give bare
    // capsules, which jax.dlpack.from_dlpack no longer takes). nanobind ignores the DLPack
    // stream argument: the caller waits for the copy first.
    using Rows = nb::ndarray<nb::array_api, uint8_t, nb::device::cuda>;
    using Lengths = nb::ndarray<nb::array_api, int32_t, nb::device::cuda>;
    return nb::make_tuple(
        Rows(base, 2, data_shape, view_owner(device_buffer_), nullptr, nb::dtype<uint8_t>(), nb::device::cuda::value,
             device_),
        Lengths(base + lengths_at_, 1, lengths_shape, view_owner(device_buffer_), nullptr, nb::dtype<int32_t>(),
                nb::device::cuda::value, device_));
  }

  // Whether the last upload's copy is still registered: no encode has waited for it yet.
  bool copy_pending() const { return device_buffer_ && StagedUploads::get().pending(device_buffer_->ptr); }

  size_t capacity() const { return capacity_; }
  int64_t generation() const { return generation_; }

 private:
  // The batch in strings_ into the pinned rows and onto the copy stream, in parts of at least
  // kPartBytes (part k's copy runs while part k + 1 is packed); then the event recorded.
  cudaError_t pack_and_copy() {
    cudaError_t err = cudaSetDevice(device_);
    uint8_t* host = static_cast<uint8_t*>(host_->ptr);
    uint8_t* device = static_cast<uint8_t*>(device_buffer_->ptr);
    int32_t* lengths = reinterpret_cast<int32_t*>(host + lengths_at_);
    const int64_t batch = batch_, max_len = max_len_;
    const int64_t parts = std::clamp<int64_t>(batch * max_len / kPartBytes, 1, std::min<int64_t>(max_parts_, batch));
    for (int64_t k = 0; k < parts && err == cudaSuccess; ++k) {
      const int64_t first = batch * k / parts, last = batch * (k + 1) / parts;
      write_rows_unlocked(strings_->views, max_len, host, lengths, first, last,
                          std::max<int64_t>(kPartBytes / 8, 1 << 16), streaming_);
      const size_t at = (size_t)(first * max_len), end = k + 1 < parts ? (size_t)(last * max_len) : lengths_at_ + batch * 4;
      err = cudaMemcpyAsync(device + at, host + at, end - at, cudaMemcpyHostToDevice, stream_);
    }
    if (err == cudaSuccess) err = cudaEventRecord(copied_, stream_);
    return err;
  }

  // pack_and_copy with its outcome recorded for the encode that waits for it, on either thread
  // (a throw, e.g. no thread for the split, is reported like a failed copy: never left unrecorded).
  cudaError_t pack_and_record() {
    cudaError_t err;
    try {
      err = pack_and_copy();
    } catch (...) {
      err = cudaErrorUnknown;
    }
    StagedUploads::get().recorded(device_buffer_->ptr, err);
    return err;
  }

  void packer_loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      job_cv_.wait(lock, [&] { return job_ || stop_; });
      if (stop_) return;
      lock.unlock();
      const cudaError_t err = pack_and_record();
      lock.lock();
      pack_error_ = err;
      job_ = false;
      packed_cv_.notify_all();
    }
  }

  // Waits until no batch is being packed; the last one's error.
  cudaError_t wait_packed() {
    std::unique_lock<std::mutex> lock(m_);
    packed_cv_.wait(lock, [&] { return !job_; });
    return pack_error_;
  }

  int device_;
  int64_t max_parts_ = kMaxParts;
  bool background_ = true;
  bool streaming_ = true;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  std::unique_ptr<PinnedHost> host_;
  size_t capacity_ = 0;  // bytes of host_ and of device_buffer_
  std::shared_ptr<DeviceAllocation> device_buffer_;
  int64_t batch_ = 0, max_len_ = 0;
  size_t lengths_at_ = 0;
  int64_t generation_ = 0;  // device buffers allocated so far
  // The packer: one batch at a time (job_ from upload until it is packed and its copy queued).
  std::unique_ptr<StringViews> strings_;  // the batch's strings, alive until the next upload
  std::thread packer_;
  std::mutex m_;
  std::condition_variable job_cv_, packed_cv_;
  bool job_ = false, stop_ = false;
  cudaError_t pack_error_ = cudaSuccess;
};

// Device buffers copied to host arrays through one page-locked buffer on a private stream.
// JAX's own copy of a fresh array to the host has a fixed cost larger than encoding a short
// string (as its copy to the device has: docs/design.md, "Host to GPU"); this is one DMA per
// buffer and one stream sync. The caller (staging.py) passes buffers of finished computations
// that it keeps alive through the call.
class DeviceReader {
 public:
  static constexpr size_t kPinnedMax = size_t(64) << 20;  // larger reads go straight to dst

  explicit DeviceReader(int device) : device_(device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~DeviceReader() {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }
  DeviceReader(const DeviceReader&) = delete;
  DeviceReader& operator=(const DeviceReader&) = delete;

  // Copies src[k] (device addresses) into dst[k] (contiguous host arrays, as many bytes as each
  // holds). A page-locked dst (`pinned_empty`) is copied into by its DMA alone; any other
  // through this reader's pinned buffer, then a memcpy.
  void read(const std::vector<uintptr_t>& src, std::vector<nb::ndarray<nb::c_contig, nb::device::cpu>>& dst) {
    if (src.size() != dst.size()) throw nb::value_error("DeviceReader: as many sources as destinations");
    std::vector<size_t> at(dst.size() + 1, 0);  // offsets in the pinned buffer (256-aligned)
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    std::vector<char> direct(dst.size());
    for (size_t k = 0; k < dst.size(); ++k) {
      direct[k] = page_locked(dst[k].data());
      if (direct[k]) at[k + 1] = at[k];  // (no room in the pinned buffer)
      else at[k + 1] = at[k] + (dst[k].nbytes() + 255) / 256 * 256;
    }
    const bool pinned = at.back() <= kPinnedMax;
    if (pinned && at.back() > capacity_) {
      host_.reset();
      capacity_ = 0;
      const size_t grown = std::max(at.back(), size_t(1) << 20);  // (1 MiB at least)
      nb::gil_scoped_release unlocked;  // (milliseconds)
      host_ = std::make_unique<PinnedHost>(grown);
      capacity_ = grown;
    }
    nb::gil_scoped_release unlocked;
    uint8_t* host = host_ ? static_cast<uint8_t*>(host_->ptr) : nullptr;
    for (size_t k = 0; k < dst.size(); ++k) {
      if (dst[k].nbytes() == 0) continue;
      void* to = pinned && !direct[k] ? (void*)(host + at[k]) : dst[k].data();
      check_cuda(cudaMemcpyAsync(to, (const void*)src[k], dst[k].nbytes(), cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync");
    }
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (pinned)
      for (size_t k = 0; k < dst.size(); ++k)
        if (!direct[k]) std::memcpy(dst[k].data(), host + at[k], dst[k].nbytes());
  }

 private:
  static bool page_locked(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // (clears the error: memory CUDA does not know)
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<PinnedHost> host_;
  size_t capacity_ = 0;
};

// Device memory that JAX sees as one uint8 array (DLPack), filled from host arrays by one DMA
// each: the corpus job's window bytes (staging.FlatSlot). JAX's own transfer of a NumPy array
// first copies it into JAX's staging memory on the host, on threads the job's reading and
// planning need. The caller refills it only once every computation that read it has finished.
class DeviceBytes {
 public:
  DeviceBytes(int device, size_t bytes) : device_(device), bytes_(bytes) {
    nb::gil_scoped_release unlocked;  // (the allocation may take milliseconds)
    memory_ = std::make_shared<DeviceAllocation>(device, std::max<size_t>(bytes, 1));
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~DeviceBytes() {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  // Copies `host` (page-locked for a DMA straight from it) to the start of the device memory;
  // returns once it has landed (the GIL released meanwhile).
  void fill(nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> host) {
    if (host.nbytes() > bytes_) throw nb::value_error("DeviceBytes.fill: more bytes than the device memory holds");
    const void* from = host.data();
    const size_t n = host.nbytes();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    nb::gil_scoped_release unlocked;
    check_cuda(cudaMemcpyAsync(memory_->ptr, from, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // The device memory as uint8[bytes] for jax.dlpack.from_dlpack; it keeps the memory alive.
  nb::ndarray<nb::array_api, uint8_t, nb::device::cuda> array() {
    const size_t shape[1] = {bytes_};
    return nb::ndarray<nb::array_api, uint8_t, nb::device::cuda>(memory_->ptr, 1, shape, view_owner(memory_), nullptr,
                                                                 nb::dtype<uint8_t>(), nb::device::cuda::value, device_);
  }

 private:
  int device_;
  size_t bytes_;
  std::shared_ptr<DeviceAllocation> memory_;
  cudaStream_t stream_ = nullptr;
};

// Page-locked host memory as a NumPy uint8 array, freed with its last reference: what the
// corpus job reads a window's ids into (one DMA, no second copy) and writes to its shards. (The
// GIL is released while it is allocated: milliseconds.)
static nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> pinned_empty(size_t nbytes) {
  PinnedHost* host;
  {
    nb::gil_scoped_release unlocked;
    host = new PinnedHost(nbytes);
  }
  nb::capsule owner(host, [](void* q) noexcept { delete static_cast<PinnedHost*>(q); });
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(host->ptr, {nbytes}, owner);
}

}  // namespace bbpe

NB_MODULE(_blockbpe_cuda, m) {
  bbpe::bind_registrations(m, reinterpret_cast<void*>(BbpeEncodeCuda),
                           reinterpret_cast<void*>(BbpeEncodeCudaUnchecked),
                           reinterpret_cast<void*>(BbpeEncodeWindowCuda));
  bbpe::bind_split_lines_registration(m, reinterpret_cast<void*>(BbpeSplitLinesCuda));
  bbpe::bind_set_window_plan(m);
  nb::class_<bbpe::HostStaging>(m, "HostStaging")
      .def(nb::init<int>(), nb::arg("device"))
      .def("upload", &bbpe::HostStaging::upload, nb::arg("texts"), nb::arg("max_len"))
      .def("wait", &bbpe::HostStaging::wait)
      .def_prop_ro("copy_pending", &bbpe::HostStaging::copy_pending)
      .def("device_arrays", &bbpe::HostStaging::device_arrays)
      .def_prop_ro("capacity", &bbpe::HostStaging::capacity)
      .def_prop_ro("generation", &bbpe::HostStaging::generation);
  nb::class_<bbpe::DeviceReader>(m, "DeviceReader")
      .def(nb::init<int>(), nb::arg("device"))
      .def("read", &bbpe::DeviceReader::read, nb::arg("src"), nb::arg("dst"));
  nb::class_<bbpe::DeviceBytes>(m, "DeviceBytes")
      .def(nb::init<int, size_t>(), nb::arg("device"), nb::arg("bytes"))
      .def("fill", &bbpe::DeviceBytes::fill, nb::arg("host").noconvert())
      .def("array", &bbpe::DeviceBytes::array);
  m.def("pinned_empty", &bbpe::pinned_empty, nb::arg("nbytes"),
        "Page-locked host memory as a NumPy uint8 array (a DeviceReader copies into it by one DMA).");
#ifdef BBPE_STAGE_CLOCKS
  m.def("read_stage_clocks", &bbpe::read_stage_clocks,
        "Reads and zeroes the kernel's stage clocks (a BLOCKBPE_STAGE_CLOCKS=ON build only).");
  m.def("read_block_marks", &bbpe::read_block_marks,
        "Reads and zeroes the blocks' marks of the last launch, flat: per block the global timer (ns) at the end "
        "of each stage (read_stage_clocks' order), then at its start, its SM and the pieces it merged (a "
        "BLOCKBPE_STAGE_CLOCKS=ON build).");
#endif
}
