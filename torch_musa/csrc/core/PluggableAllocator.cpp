// A user's malloc/free as musa memory (torch.musa.memory.MUSAPluggableAllocator,
// change_current_allocator): no caching, statistics of what it handed out.
#include "core/MUSACachingAllocator.h"

#include "core/AllocatorInternals.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

namespace torch_musa {

using namespace detail;

namespace {

// MUSAPluggableAllocator: every musa allocation through the user's functions,
// no caching; statistics count what it handed out.
class PluggableAllocator final : public DeviceAllocator {
 public:
  explicit PluggableAllocator(std::shared_ptr<RawAllocatorFns> fns) : fns_(std::move(fns)) {}
  c10::DeleterFnPtr raw_deleter() const override { return &free_ptr; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  DeviceStats getDeviceStats(c10::DeviceIndex d) override {
    check_device(d);
    std::lock_guard<std::mutex> g(mu_);
    return stats_[d];
  }
  void resetAccumulatedStats(c10::DeviceIndex d) override {
    check_device(d);
    std::lock_guard<std::mutex> g(mu_);
    for_each_stat(stats_[d], [](Stat& s) { s.reset_accumulated(); });
  }
  void resetPeakStats(c10::DeviceIndex d) override {
    check_device(d);
    std::lock_guard<std::mutex> g(mu_);
    for_each_stat(stats_[d], [](Stat& s) { s.reset_peak(); });
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex d) override {
    check_device(d);
    std::lock_guard<std::mutex> g(mu_);
    const int64_t total = config().capacity_bytes;
    return {size_t(std::max<int64_t>(0, total - stats_[d].reserved_bytes[0].current)),
            size_t(total)};
  }
  void set_memory_fraction(double, c10::DeviceIndex) override {
    TORCH_CHECK(false, "set_per_process_memory_fraction: the current allocator is a "
                "MUSAPluggableAllocator, which keeps no limits of its own");
  }
  void set_settings(const AllocatorSettings&) override {}
  int device_of(const void* ptr) override {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return -1;
    --it;
    return p < it->first + it->second.size ? it->second.device : -1;
  }
  bool is_live(const void* ptr) override {
    std::lock_guard<std::mutex> g(mu_);
    return live_.count(reinterpret_cast<uintptr_t>(ptr)) > 0;
  }
  std::string backend() const override { return "pluggable"; }

  static PluggableAllocator* current;

 protected:
  c10::DataPtr allocate_bytes(c10::DeviceIndex d, size_t nbytes, c10::Device tag) override {
    const int64_t stream = current_stream(d).id();
    void* p = fns_->alloc(ssize_t(nbytes), d, reinterpret_cast<void*>(stream));
    TORCH_CHECK_WITH(OutOfMemoryError, p, "MUSA out of memory. Tried to allocate ",
                     format_size(nbytes), " on musa:", int(d),
                     " through the MUSAPluggableAllocator, whose allocation function "
                     "returned NULL.");
    std::lock_guard<std::mutex> g(mu_);
    live_[reinterpret_cast<uintptr_t>(p)] = Live{d, nbytes, stream};
    count(d, nbytes, 1);
    return c10::DataPtr(p, p, &free_ptr, tag);
  }

 private:
  struct Live {
    c10::DeviceIndex device;
    size_t size;
    int64_t stream;
  };
  void count(c10::DeviceIndex d, size_t n, int sign) {
    DeviceStats& s = stats_[d];
    const bool small = n <= kSmallSize;
    for (StatArray* a : {&s.allocation, &s.segment, &s.active})
      update_stat(*a, small, sign);
    for (StatArray* a : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                         &s.requested_bytes})
      update_stat(*a, small, sign * int64_t(n));
    (sign > 0 ? s.num_device_alloc : s.num_device_free)++;
  }
  static void free_ptr(void* p) {
    if (!p) return;
    PluggableAllocator& self = *current;
    Live l;
    {
      std::lock_guard<std::mutex> g(self.mu_);
      auto it = self.live_.find(reinterpret_cast<uintptr_t>(p));
      TORCH_INTERNAL_ASSERT(it != self.live_.end(), "musa: freeing unknown pointer");
      l = it->second;
      self.live_.erase(it);
      self.count(l.device, l.size, -1);
    }
    self.fns_->free(p, ssize_t(l.size), l.device, reinterpret_cast<void*>(l.stream));
  }
  std::shared_ptr<RawAllocatorFns> fns_;
  std::mutex mu_;
  std::map<uintptr_t, Live> live_;
  DeviceStats stats_[kMaxDevices];
};
PluggableAllocator* PluggableAllocator::current = nullptr;

}  // namespace

DeviceAllocator* detail::make_pluggable_allocator(std::shared_ptr<RawAllocatorFns> fns) {
  auto* a = new PluggableAllocator(std::move(fns));
  PluggableAllocator::current = a;
  return a;
}

}  // namespace torch_musa
