// What every driver shares: the interface's defaults (the host driver's kernel
// side: CPU kernels, allocator and generators; no graph capture) and the choice
// of the driver in use.
#include "driver/Driver.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>

namespace torch_musa {

Driver& host_driver();  // driver/HostDriver.cpp
#ifdef TORCH_MUSA_WITH_CUDA
Driver* make_cuda_driver();  // driver/cuda/CudaDriver.cpp
#endif

namespace {
Driver* g_driver = nullptr;
}

std::atomic<bool> g_host_work_queued{false};

c10::Allocator* Driver::kernel_allocator() { return c10::GetCPUAllocator(); }

void Driver::capture_begin(c10::Stream, int) {
  TORCH_CHECK(false, "the ", name(), " driver does not capture MUSA graphs here (under the "
              "cuda driver torch.musa graphs are CUDA graphs)");
}
std::string Driver::capture_end(c10::Stream) {
  TORCH_CHECK(false, "the ", name(), " driver is not capturing a MUSA graph");
}

at::Generator Driver::kernel_generator(c10::DeviceIndex, uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

at::Generator Driver::default_kernel_generator(c10::DeviceIndex d) {
  return kernel_generator(d, c10::default_rng_seed_val);
}

Driver& driver() {
  static Driver& host = host_driver();
  return g_driver ? *g_driver : host;
}

bool cuda_driver_built() {
#ifdef TORCH_MUSA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void select_driver(const std::string& name) {
  if (name == "host") {
    g_driver = nullptr;
    return;
  }
#ifdef TORCH_MUSA_WITH_CUDA
  if (name == "cuda") {
    static Driver* cuda = make_cuda_driver();
    g_driver = cuda;
    return;
  }
#endif
  TORCH_CHECK(false, "TORCH_MUSA_DRIVER=", name, " is not available: this build of "
              "torch_musa has the driver(s) ",
              cuda_driver_built() ? "'host', 'cuda'" : "'host' (built without CUDA)",
              ".");
}

}  // namespace torch_musa
