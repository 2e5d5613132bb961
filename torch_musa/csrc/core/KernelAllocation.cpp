// Host kernels allocating device memory: while a CPU kernel runs for musa
// (KernelAllocationScope), the CPU allocator hands out musa pool memory, so fresh
// outputs are device memory and counted as such; and unified memory
// (cpu:unified), CPU tensors made from a musa device's memory (the pool's, or the
// driver's managed memory where it has some).
#include "core/MUSACachingAllocator.h"

#include "core/AllocatorInternals.h"
#include "core/Device.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include <pthread.h>

namespace torch_musa {

using namespace detail;

namespace {
c10::DeleterFnPtr g_host_raw_deleter = nullptr;
std::atomic<int> g_unified{-1};
std::atomic<bool> g_unified_used{false};

// Managed memory of a driver that has its own (CUDA's): pointer -> device.
std::mutex g_managed_mu;
ska::flat_hash_map<uintptr_t, c10::DeviceIndex>& g_managed =
    *new ska::flat_hash_map<uintptr_t, c10::DeviceIndex>();

void free_managed(void* p) {
  {
    std::lock_guard<std::mutex> g(g_managed_mu);
    g_managed.erase(reinterpret_cast<uintptr_t>(p));
  }
  driver().free_managed(p);
}

c10::DataPtr allocate_managed(c10::DeviceIndex device, size_t n) {
  void* p = driver().malloc_managed(device, n);
  TORCH_CHECK_WITH(OutOfMemoryError, p,
                   "musa unified memory: could not allocate ", n, " bytes of ",
                   driver().name(), " managed memory for musa:", int(device));
  {
    std::lock_guard<std::mutex> g(g_managed_mu);
    g_managed[reinterpret_cast<uintptr_t>(p)] = device;
  }
  return {p, p, &free_managed, c10::Device(c10::DeviceType::CPU)};
}

// A CPU tensor's memory that musa `device` uses in place: the driver's managed
// memory, or else a block of the device's pool (host RAM) marked as unified.
c10::DataPtr allocate_unified(c10::DeviceIndex device, size_t n) {
  g_unified_used = true;
  if (driver().has_managed_memory()) return allocate_managed(device, n);
  c10::DataPtr p = device_allocator().allocate_on(device, n, c10::Device(c10::DeviceType::CPU));
  if (p.get() && &device_allocator() == &caching_allocator()) caching_mark_unified(p.get());
  return p;
}

// raw_allocate()/raw_deallocate() callers (oneDNN among them) free through
// raw_deleter(), whichever mode allocated the pointer.
void kernel_raw_free(void* p) {
  if (p && device_allocator().is_live(p)) device_allocator().raw_deleter()(p);
  else if (p && driver().has_managed_memory() && unified_device_of(p) >= 0) free_managed(p);
  else g_host_raw_deleter(p);
}
struct KernelAllocationRedirect final : c10::Allocator {
  c10::Allocator* host = nullptr;
  c10::DataPtr allocate(size_t n) override {
    if (t_redirect >= 0)
      return device_allocator().allocate_on(
          static_cast<c10::DeviceIndex>(t_redirect), n,
          c10::Device(c10::DeviceType::CPU));
    const int unified = g_unified.load(std::memory_order_relaxed);
    if (C10_UNLIKELY(unified >= 0) && n > 0)
      return allocate_unified(static_cast<c10::DeviceIndex>(unified), n);
    return host->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_host_raw_deleter ? &kernel_raw_free : nullptr;
  }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    std::memcpy(dst, src, n);
  }
};
KernelAllocationRedirect g_kernel_allocation_redirect;
}  // namespace

TORCH_MUSA_FAST_TLS thread_local int detail::t_redirect = -1;

void install_kernel_allocation_redirect() {
  if (g_kernel_allocation_redirect.host) return;
  g_kernel_allocation_redirect.host = c10::GetCPUAllocator();
  g_host_raw_deleter = g_kernel_allocation_redirect.host->raw_deleter();
  c10::SetCPUAllocator(&g_kernel_allocation_redirect, /*priority=*/1);
}

void set_unified_cpu_allocator(int device) {
  if (device >= 0) {
    check_device(c10::DeviceIndex(device));
    TORCH_CHECK(driver().has_managed_memory() ||
                    (config().kernel_type == c10::DeviceType::CPU && !config().native_allocator),
                "unified memory (cpu:unified, use_unified_cpu_allocator) needs the host "
                "driver or a driver with managed memory; the ", driver().name(),
                " driver has none");
    TORCH_CHECK(g_kernel_allocation_redirect.host,
                "unified memory needs the musa runtime registered first (import torch_musa)");
  }
  // A forked child (a DataLoader worker) may not use musa: its CPU tensors are plain.
  static const bool at_fork = [] {
    return pthread_atfork(nullptr, nullptr, [] { g_unified.store(-1); }) == 0;
  }();
  (void)at_fork;
  g_unified.store(device);
}

int unified_cpu_allocator() { return g_unified.load(); }

bool detail::unified_memory_used() { return g_unified_used.load(std::memory_order_relaxed); }

int detail::unified_device_of(const void* p) {
  if (driver().has_managed_memory()) {
    std::lock_guard<std::mutex> g(g_managed_mu);
    auto it = g_managed.find(reinterpret_cast<uintptr_t>(p));
    return it == g_managed.end() ? -1 : it->second;
  }
  return caching_unified_device_of(p);
}

}  // namespace torch_musa
