// Page-locked host memory for pin_memory() and non_blocking copies, from the
// driver (plain host memory on the host driver, cudaHostAlloc on the cuda one).
#include "core/MUSACachingAllocator.h"

#include "driver/Driver.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace torch_musa {

namespace {
std::mutex g_pinned_mu;
std::map<uintptr_t, size_t> g_pinned;

void pinned_free(void* ptr) {
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  driver().free_host(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = driver().malloc_host(n);
    TORCH_CHECK_WITH(OutOfMemoryError, p, "musa: cannot allocate ", n,
                     " bytes of pinned host memory");
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.emplace(reinterpret_cast<uintptr_t>(p), std::max<size_t>(n, 1));
    return c10::DataPtr(p, p, &pinned_free, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    std::memcpy(dst, src, n);
  }
};
}  // namespace

c10::Allocator& pinned_allocator() {
  static PinnedAllocator a;
  return a;
}

bool is_pinned(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace torch_musa
