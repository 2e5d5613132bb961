// Page-locked host memory for pin_memory() and non_blocking copies, from the
// driver (plain host memory on the host driver, cudaHostAlloc on the cuda one).
#include "core/MUSACachingAllocator.h"

#include "driver/Driver.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace torch_musa {

namespace {
std::mutex g_pinned_mu;
std::map<uintptr_t, size_t> g_pinned;

// torch.musa.host_memory_stats, in torch.cuda.host_memory_stats' terms. Blocks
// are not cached, so every block is active while it is allocated.
struct Counter {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(int64_t n) { current += n; allocated += n; peak = std::max(peak, current); }
  void sub(int64_t n) { current -= n; freed += n; }
};
struct Timing {
  double total = 0, max = 0, min = 0;
  int64_t count = 0;
  void add(double us) {
    min = count ? std::min(min, us) : us;
    max = std::max(max, us);
    total += us;
    ++count;
  }
};
Counter g_blocks, g_bytes;  // under g_pinned_mu
Timing g_alloc_time, g_free_time;

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

void pinned_free(void* ptr) {
  const auto t0 = std::chrono::steady_clock::now();
  size_t n = 0;
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != g_pinned.end()) {
      n = it->second;
      g_pinned.erase(it);
    }
  }
  driver().free_host(ptr);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  g_blocks.sub(1);
  g_bytes.sub(int64_t(n));
  g_free_time.add(micros_since(t0));
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    const auto t0 = std::chrono::steady_clock::now();
    void* p = driver().malloc_host(n);
    TORCH_CHECK_WITH(OutOfMemoryError, p, "musa: cannot allocate ", n,
                     " bytes of pinned host memory");
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.emplace(reinterpret_cast<uintptr_t>(p), std::max<size_t>(n, 1));
    g_blocks.add(1);
    g_bytes.add(int64_t(std::max<size_t>(n, 1)));
    g_alloc_time.add(micros_since(t0));
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

std::map<std::string, double> host_memory_stats() {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  std::map<std::string, double> out;
  auto counter = [&](const char* name, const Counter& c) {
    const std::string p(name);
    out[p + ".current"] = double(c.current);
    out[p + ".peak"] = double(c.peak);
    out[p + ".allocated"] = double(c.allocated);
    out[p + ".freed"] = double(c.freed);
  };
  counter("allocations", g_blocks);
  counter("active_requests", g_blocks);
  counter("allocated_bytes", g_bytes);
  counter("active_bytes", g_bytes);
  out["num_host_alloc"] = double(g_blocks.allocated);
  out["num_host_free"] = double(g_blocks.freed);
  auto timing = [&](const char* name, const Timing& t) {
    const std::string p(name);
    out[p + ".total"] = t.total;
    out[p + ".max"] = t.max;
    out[p + ".min"] = t.min;
    out[p + ".count"] = double(t.count);
    out[p + ".avg"] = t.count ? t.total / double(t.count) : 0.0;
  };
  timing("host_alloc_time", g_alloc_time);
  timing("host_free_time", g_free_time);
  return out;
}

void reset_host_memory_stats(bool peak) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  for (Counter* c : {&g_blocks, &g_bytes}) {
    if (peak) {
      c->peak = c->current;
    } else {
      c->allocated = 0;  // as CUDA's: the historical totals restart from zero
      c->freed = 0;
    }
  }
  if (!peak) g_alloc_time = g_free_time = Timing{};
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
