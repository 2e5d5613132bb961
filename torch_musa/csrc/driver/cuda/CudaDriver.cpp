// The cuda driver (TORCH_MUSA_DRIVER=cuda): the musa device on an NVIDIA GPU.
//
// Device memory comes from PyTorch's CUDA caching allocator (so musa's memory
// statistics are that allocator's), musa streams *are* CUDA streams (same
// ids, so the current musa stream is the current CUDA stream and kernels
// enqueue on it), events are CUDA events, and kernels are PyTorch's CUDA
// kernels run on CUDA-typed aliases of musa memory. Built only where the
// installed torch has CUDA (setup.py); the CPU build never includes it.
#include "driver/Driver.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>

namespace torch_musa {

struct DriverEvent {
  cudaEvent_t event = nullptr;
  c10::DeviceIndex device;
  bool timing;
  bool recorded = false;
};

namespace {

using c10::cuda::CUDAStream;
namespace cca = c10::cuda::CUDACachingAllocator;

CUDAStream cuda_stream(c10::Stream s) {
  return CUDAStream::unpack3(s.id(), s.device_index(), c10::DeviceType::CUDA);
}

// CUDA's caching allocator, sized for the devices. torch.cuda's lazy init sizes it, but a
// C++ program or a library loaded without torch_musa's Python never runs that ("Allocator
// not initialized for device"); both are once-only or grow-only, so repeating them is harmless.
cca::CUDAAllocator* cuda_allocator() {
  static const bool sized = [] {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    cca::get()->init(c10::cuda::device_count());
    return true;
  }();
  (void)sized;
  return cca::get();  // not kept: change_current_allocator may swap it
}

class CudaDriver final : public Driver {
 public:
  std::string name() const override { return "cuda"; }

  void* malloc(c10::DeviceIndex d, size_t nbytes) override {
    c10::cuda::CUDAGuard g(d);
    return cuda_allocator()->raw_alloc(nbytes);
  }
  void free(c10::DeviceIndex, void* ptr, size_t) override { cuda_allocator()->raw_delete(ptr); }
  void* malloc_host(size_t nbytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(nbytes, 1), cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free_host(void* ptr) override { C10_CUDA_CHECK_WARN(cudaFreeHost(ptr)); }

  void memcpy(void* dst, const void* src, size_t nbytes, c10::Stream stream) override {
    if (!nbytes) return;
    c10::cuda::CUDAGuard g(stream.device_index());
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault,
                                   cuda_stream(stream).stream()));
  }

  void stream_sleep(c10::Stream stream, int64_t cycles, double) override {
    c10::cuda::CUDAStreamGuard g(cuda_stream(stream));
    at::cuda::sleep(cycles);  // the GPU's own cycles
  }
  bool stream_query(c10::Stream s) override { return cuda_stream(s).query(); }
  void stream_synchronize(c10::Stream s) override { cuda_stream(s).synchronize(); }
  void device_synchronize(c10::DeviceIndex d) override {
    c10::cuda::CUDAGuard g(d);
    c10::cuda::device_synchronize();
  }
  void stream_wait_event(c10::Stream waiter, DriverEvent* e) override {
    if (!e->recorded) return;
    c10::cuda::CUDAGuard g(waiter.device_index());
    C10_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(waiter).stream(), e->event, 0));
  }

  DriverEvent* event_create(c10::DeviceIndex d, bool timing) override {
    c10::cuda::CUDAGuard g(d);
    auto* e = new DriverEvent{nullptr, d, timing};
    C10_CUDA_CHECK(cudaEventCreateWithFlags(
        &e->event, timing ? cudaEventDefault : cudaEventDisableTiming));
    return e;
  }
  void event_destroy(DriverEvent* e) override {
    c10::cuda::CUDAGuard g(e->device);
    C10_CUDA_CHECK_WARN(cudaEventDestroy(e->event));
    delete e;
  }
  void event_record(DriverEvent* e, c10::Stream stream) override {
    TORCH_CHECK(e->device == stream.device_index(), "Event was created on musa:",
                int(e->device), " but is being recorded on a stream of musa:",
                int(stream.device_index()));
    c10::cuda::CUDAGuard g(e->device);
    C10_CUDA_CHECK(cudaEventRecord(e->event, cuda_stream(stream).stream()));
    e->recorded = true;
  }
  bool event_query(DriverEvent* e) override {
    if (!e->recorded) return true;
    c10::cuda::CUDAGuard g(e->device);
    const cudaError_t err = cudaEventQuery(e->event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    C10_CUDA_CHECK(err);
    return true;
  }
  void event_synchronize(DriverEvent* e) override {
    if (!e->recorded) return;
    c10::cuda::CUDAGuard g(e->device);
    C10_CUDA_CHECK(cudaEventSynchronize(e->event));
  }
  double event_elapsed_ms(DriverEvent* a, DriverEvent* b) override {
    check_elapsed_time(a->timing && b->timing, a->recorded && b->recorded,
                       event_query(a) && event_query(b));
    float ms = 0;
    c10::cuda::CUDAGuard g(a->device);
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, a->event, b->event));
    return ms;
  }

  c10::DeviceType kernel_device_type() const override { return c10::DeviceType::CUDA; }
  c10::Allocator* kernel_allocator() override { return cuda_allocator(); }
  at::Generator kernel_generator(c10::DeviceIndex d, uint64_t seed) override {
    at::Generator g = at::cuda::detail::createCUDAGenerator(d);
    g.set_current_seed(seed);
    return g;
  }
  at::Generator default_kernel_generator(c10::DeviceIndex d) override {
    return at::cuda::detail::getDefaultCUDAGenerator(d);
  }
  c10::DeviceAllocator* native_allocator() override { return cuda_allocator(); }
  void set_memory_fraction(double fraction, c10::DeviceIndex d) override {
    cuda_allocator()->setMemoryFraction(fraction, d);
  }
  int device_of(const void* ptr) override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return attr.type == cudaMemoryTypeDevice ? attr.device : -1;
  }
  void* stream_handle(c10::Stream s) override { return cuda_stream(s).stream(); }
  bool has_managed_memory() const override { return true; }
  void* malloc_managed(c10::DeviceIndex d, size_t nbytes) override {
    c10::cuda::CUDAGuard g(d);
    void* p = nullptr;
    if (cudaMallocManaged(&p, nbytes, cudaMemAttachGlobal) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free_managed(void* p) override { C10_CUDA_CHECK_WARN(cudaFree(p)); }

  bool native_streams() const override { return true; }
  c10::StreamId current_stream_id(c10::DeviceIndex d) override {
    return c10::cuda::getCurrentCUDAStream(d).id();
  }
  void set_current_stream_id(c10::DeviceIndex d, c10::StreamId id) override {
    c10::cuda::setCurrentCUDAStream(CUDAStream::unpack3(id, d, c10::DeviceType::CUDA));
  }
  c10::StreamId pool_stream_id(c10::DeviceIndex d, bool high) override {
    return c10::cuda::getStreamFromPool(high, d).id();
  }
  void set_device(c10::DeviceIndex d) override { c10::cuda::set_device(d); }
};

}  // namespace

Driver* make_cuda_driver() {
  TORCH_CHECK(c10::cuda::device_count() > 0,
              "TORCH_MUSA_DRIVER=cuda needs a CUDA GPU, but CUDA reports none "
              "(unset TORCH_MUSA_DRIVER to use the host driver).");
  return new CudaDriver();
}

}  // namespace torch_musa
