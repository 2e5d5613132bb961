// Page-locked host memory for pin_memory() and non_blocking copies, from the
// driver (plain host memory on the host driver, cudaHostAlloc on the cuda one),
// cached for reuse; and the ranges musaHostRegister pinned.
#include "core/MUSACachingAllocator.h"

#include "driver/Driver.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace torch_musa {

namespace {
// Blocks are cached, as CUDA's caching host allocator does: a freed block keeps its
// bytes from the driver and serves the next request of its size class (a power of
// two). A block that a non_blocking copy used (record_pinned_use) is reused only once
// the events recorded for those uses have completed, so an in-flight copy never
// reads bytes a later tensor wrote.
struct HostBlock {
  size_t size = 0;  // the size class
  bool in_use = false;
  std::vector<DriverEvent*> uses;  // events after copies that read or write it
};
std::mutex g_pinned_mu;
std::map<uintptr_t, HostBlock> g_held;                 // every block held from the driver
std::map<size_t, std::vector<uintptr_t>> g_cached;     // free blocks by size class
std::map<uintptr_t, size_t> g_registered;              // musaHostRegister'd ranges

// torch.musa.host_memory_stats, in torch.cuda.host_memory_stats' terms:
// "allocations"/"allocated_bytes" count the blocks held from the driver (cached
// ones too), "active_*" those in use.
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
Counter g_blocks, g_bytes, g_active, g_active_bytes;  // under g_pinned_mu
int64_t g_driver_allocs = 0, g_driver_frees = 0;
Timing g_alloc_time, g_free_time;

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

size_t size_class(size_t n) {
  size_t c = 1;
  while (c < n) c <<= 1;
  return c;
}

// Caller holds g_pinned_mu. Whether every recorded use of `b` has completed
// (those that have are forgotten).
bool uses_done(HostBlock& b) {
  while (!b.uses.empty()) {
    if (!driver().event_query(b.uses.back())) return false;
    driver().event_destroy(b.uses.back());
    b.uses.pop_back();
  }
  return true;
}

// Caller holds g_pinned_mu. The held block containing `p`, or g_held.end().
std::map<uintptr_t, HostBlock>::iterator block_of(uintptr_t p) {
  auto it = g_held.upper_bound(p);
  if (it == g_held.begin()) return g_held.end();
  --it;
  return p < it->first + it->second.size ? it : g_held.end();
}

void pinned_free(void* ptr) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = g_held.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_held.end() || !it->second.in_use) return;
  it->second.in_use = false;
  g_active.sub(1);
  g_active_bytes.sub(int64_t(it->second.size));
  g_cached[it->second.size].push_back(it->first);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t size = size_class(std::max<size_t>(n, 1));
    {
      std::lock_guard<std::mutex> g(g_pinned_mu);
      auto& free_list = g_cached[size];
      for (auto it = free_list.begin(); it != free_list.end(); ++it) {
        HostBlock& b = g_held.at(*it);
        if (!uses_done(b)) continue;
        void* p = reinterpret_cast<void*>(*it);
        free_list.erase(it);
        return take(p, b);
      }
    }
    void* p = driver().malloc_host(size);
    TORCH_CHECK_WITH(OutOfMemoryError, p, "musa: cannot allocate ", n,
                     " bytes of pinned host memory");
    std::lock_guard<std::mutex> g(g_pinned_mu);
    HostBlock& b = g_held[reinterpret_cast<uintptr_t>(p)];
    b.size = size;
    g_blocks.add(1);
    g_bytes.add(int64_t(size));
    ++g_driver_allocs;
    g_alloc_time.add(micros_since(t0));
    return take(p, b);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    std::memcpy(dst, src, n);
  }

 private:
  // Caller holds g_pinned_mu.
  static c10::DataPtr take(void* p, HostBlock& b) {
    b.in_use = true;
    g_active.add(1);
    g_active_bytes.add(int64_t(b.size));
    return c10::DataPtr(p, p, &pinned_free, c10::Device(c10::DeviceType::CPU));
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
  counter("allocated_bytes", g_bytes);
  counter("active_requests", g_active);
  counter("active_bytes", g_active_bytes);
  out["num_host_alloc"] = double(g_driver_allocs);
  out["num_host_free"] = double(g_driver_frees);
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
  for (Counter* c : {&g_blocks, &g_bytes, &g_active, &g_active_bytes}) {
    if (peak) {
      c->peak = c->current;
    } else {
      c->allocated = 0;  // as CUDA's: the historical totals restart from zero
      c->freed = 0;
    }
  }
  if (!peak) {
    g_alloc_time = g_free_time = Timing{};
    g_driver_allocs = g_driver_frees = 0;
  }
}

void record_pinned_use(const void* ptr, c10::Stream stream) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = block_of(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_held.end() || !it->second.in_use) return;
  DriverEvent* e = driver().event_create(stream.device_index(), /*timing=*/false);
  driver().event_record(e, stream);
  it->second.uses.push_back(e);
}

void empty_pinned_cache() {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  for (auto& [size, free_list] : g_cached) {
    for (auto it = free_list.begin(); it != free_list.end();) {
      HostBlock& b = g_held.at(*it);
      if (!uses_done(b)) {
        ++it;
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      driver().free_host(reinterpret_cast<void*>(*it));
      g_free_time.add(micros_since(t0));
      ++g_driver_frees;
      g_blocks.sub(1);
      g_bytes.sub(int64_t(b.size));
      g_held.erase(*it);
      it = free_list.erase(it);
    }
  }
}

bool register_host_range(const void* ptr, size_t size) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto next = g_registered.lower_bound(p);
  if (next != g_registered.end() && next->first < p + size) return false;
  if (next != g_registered.begin() && std::prev(next)->first + std::prev(next)->second > p)
    return false;
  g_registered.emplace(p, size);
  return true;
}

bool unregister_host_range(const void* ptr) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  return g_registered.erase(reinterpret_cast<uintptr_t>(ptr)) == 1;
}

bool is_pinned(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  if (block_of(p) != g_held.end()) return true;
  auto it = g_registered.upper_bound(p);
  if (it == g_registered.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace torch_musa
