// The host driver's device memory: a caching allocator over the driver, the
// redirect that makes host kernels allocate from its pools, and the choice
// between it and a driver's own allocator (DriverAllocator.cpp).
//
// Sizes are rounded to classes (512 B
// steps up to 1 MiB, then eight classes per doubling), freed blocks wait in a
// per-device cache for a request of the same class, and `empty_cache` hands
// them back to the driver. Statistics follow PyTorch's DeviceStats so that
// torch.musa.memory_* and torch.accelerator.memory_* read them unchanged.
#include "core/MUSACachingAllocator.h"

#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace torch_musa {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

namespace {

constexpr size_t kSmallLimit = size_t(1) << 20;

size_t size_class(size_t n) {
  if (n <= kSmallLimit) return ((n + 511) / 512) * 512;
  size_t msb = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = std::max<size_t>(msb / 8, 64 * 1024);
  return ((n + step - 1) / step) * step;
}

std::string format_size(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (bytes < (size_t(1) << 10)) os << bytes << " bytes";
  else if (bytes < (size_t(1) << 20)) os << bytes / 1024.0 << " KiB";
  else if (bytes < (size_t(1) << 30)) os << bytes / 1048576.0 << " MiB";
  else os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

struct Block {
  void* ptr;
  size_t size;       // the class size, what the driver gave
  size_t requested;  // what the caller asked for
  c10::DeviceIndex device;
  bool allocated;
};

struct PerDevice {
  DeviceStats stats;
  std::unordered_map<size_t, std::vector<Block*>> cached;
  double fraction = 1.0;
};

std::mutex g_mu;
std::map<uintptr_t, Block*> g_blocks;  // every block the driver gave us
PerDevice g_dev[kMaxDevices];
AllocatorSettings g_settings;

void update(StatArray& arr, size_t size, int64_t amount) {
  const auto pool = size <= kSmallLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  for (auto t : {StatType::AGGREGATE, pool}) {
    Stat& s = arr[static_cast<size_t>(t)];
    if (amount >= 0) s.increase(size_t(amount)); else s.decrease(size_t(-amount));
  }
}

int64_t reserved(c10::DeviceIndex d) {
  return g_dev[d].stats.reserved_bytes[0].current;
}

int64_t total_reserved() {
  int64_t sum = 0;
  for (int d = 0; d < device_count(); ++d) sum += reserved(d);
  return sum;
}

int64_t device_limit(c10::DeviceIndex d) {
  return static_cast<int64_t>(config().capacity_bytes * g_dev[d].fraction);
}

// Caller holds g_mu.
void release_block(Block* b) {
  PerDevice& pd = g_dev[b->device];
  update(pd.stats.reserved_bytes, b->size, -int64_t(b->size));
  update(pd.stats.segment, b->size, -1);
  pd.stats.num_device_free++;
  g_blocks.erase(reinterpret_cast<uintptr_t>(b->ptr));
  driver().free(b->device, b->ptr, b->size);
  delete b;
}

// Caller holds g_mu. Frees cached blocks until `target` bytes are reserved.
void release_cached(c10::DeviceIndex d, int64_t target = 0) {
  PerDevice& pd = g_dev[d];
  for (auto it = pd.cached.begin(); it != pd.cached.end() && reserved(d) > target;) {
    auto& vec = it->second;
    while (!vec.empty() && reserved(d) > target) {
      release_block(vec.back());
      vec.pop_back();
    }
    it = vec.empty() ? pd.cached.erase(it) : std::next(it);
  }
}

[[noreturn]] void raise_oom(c10::DeviceIndex d, size_t size, const char* why) {
  PerDevice& pd = g_dev[d];
  pd.stats.num_ooms++;
  const int64_t limit = device_limit(d);
  const int64_t alloc = pd.stats.allocated_bytes[0].current;
  const int64_t res = reserved(d);
  std::ostringstream os;
  os << "MUSA out of memory. Tried to allocate " << format_size(size)
     << ". musa:" << int(d) << " has a total capacity of "
     << format_size(config().capacity_bytes) << " (hardware profile "
     << config().profile << ") of which "
     << format_size(size_t(std::max<int64_t>(0, config().capacity_bytes - res)))
     << " is free. Of the allocated memory " << format_size(alloc)
     << " is allocated by PyTorch, and " << format_size(res - alloc)
     << " is reserved by PyTorch but unallocated.";
  if (g_dev[d].fraction < 1.0)
    os << " This process is limited to " << format_size(limit)
       << " by set_per_process_memory_fraction(" << g_dev[d].fraction << ").";
  if (why) os << " " << why;
  os << " Free tensors (del, then torch.musa.empty_cache()) or use smaller "
        "batches; the device stays usable.";
  TORCH_CHECK_WITH(OutOfMemoryError, false, os.str());
}

void raw_free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  TORCH_INTERNAL_ASSERT(it != g_blocks.end(), "musa: freeing unknown pointer");
  Block* b = it->second;
  PerDevice& pd = g_dev[b->device];
  b->allocated = false;
  update(pd.stats.allocation, b->size, -1);
  update(pd.stats.active, b->size, -1);
  update(pd.stats.allocated_bytes, b->size, -int64_t(b->size));
  update(pd.stats.active_bytes, b->size, -int64_t(b->size));
  update(pd.stats.requested_bytes, b->size, -int64_t(b->requested));
  if (b->size > g_settings.max_split_size) {
    pd.stats.oversize_allocations.decrease(1);
    release_block(b);
  } else {
    pd.cached[b->size].push_back(b);
  }
}

}  // namespace

c10::DataPtr CachingAllocator::allocate_bytes(c10::DeviceIndex d, size_t nbytes,
                                             c10::Device tag) {
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> g(g_mu);
  PerDevice& pd = g_dev[d];
  Block* b = nullptr;
  auto it = pd.cached.find(size);
  if (it != pd.cached.end() && !it->second.empty()) {
    b = it->second.back();
    it->second.pop_back();
  } else {
    const int64_t limit = device_limit(d);
    const double gc = g_settings.garbage_collection_threshold;
    if (gc > 0 && reserved(d) + int64_t(size) > int64_t(gc * limit))
      release_cached(d, std::max<int64_t>(0, int64_t(gc * limit) - int64_t(size)));
    const int64_t host = config().host_limit_bytes;
    auto fits = [&] {
      return reserved(d) + int64_t(size) <= limit &&
             (host <= 0 || total_reserved() + int64_t(size) <= host);
    };
    if (!fits()) {
      pd.stats.num_alloc_retries++;
      for (int o = 0; o < device_count(); ++o) release_cached(o);
    }
    if (reserved(d) + int64_t(size) > limit) raise_oom(d, size, nullptr);
    if (!fits())
      raise_oom(d, size,
                "The host driver keeps device memory in host RAM and this "
                "would exceed the share of host memory it may use "
                "(TORCH_MUSA_HOST_MEMORY_LIMIT).");
    void* p = driver().malloc(d, size);
    if (!p) {
      pd.stats.num_alloc_retries++;
      for (int o = 0; o < device_count(); ++o) release_cached(o);
      p = driver().malloc(d, size);
      if (!p) raise_oom(d, size, "The driver could not provide the memory.");
    }
    b = new Block{p, size, 0, d, false};
    g_blocks.emplace(reinterpret_cast<uintptr_t>(p), b);
    update(pd.stats.reserved_bytes, size, int64_t(size));
    update(pd.stats.segment, size, 1);
    pd.stats.num_device_alloc++;
    if (size > g_settings.max_split_size) pd.stats.oversize_segments.increase(1);
  }
  if (size > g_settings.max_split_size) pd.stats.oversize_allocations.increase(1);
  b->allocated = true;
  b->requested = nbytes;
  update(pd.stats.allocation, size, 1);
  update(pd.stats.active, size, 1);
  update(pd.stats.allocated_bytes, size, int64_t(size));
  update(pd.stats.active_bytes, size, int64_t(size));
  update(pd.stats.requested_bytes, size, int64_t(nbytes));
  return c10::DataPtr(b->ptr, b->ptr, &raw_free, tag);
}

c10::DeleterFnPtr CachingAllocator::raw_deleter() const {
  return &raw_free;
}

// Kernels run eagerly on the host: a block is free when its tensor is.
void CachingAllocator::recordStream(const c10::DataPtr&, c10::Stream) {}

void CachingAllocator::emptyCache(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> g(g_mu);
  for (int d = 0; d < device_count(); ++d) release_cached(d);
}

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  DeviceStats s = g_dev[d].stats;
  s.max_split_size = g_settings.max_split_size == SIZE_MAX
                         ? 0 : int64_t(g_settings.max_split_size);
  return s;
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  DeviceStats& s = g_dev[d].stats;
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes})
    for (Stat& st : *a) st.reset_accumulated();
  s.num_alloc_retries = s.num_ooms = 0;
  s.num_device_alloc = s.num_device_free = 0;
  s.oversize_allocations.reset_accumulated();
  s.oversize_segments.reset_accumulated();
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  DeviceStats& s = g_dev[d].stats;
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes})
    for (Stat& st : *a) st.reset_peak();
  s.oversize_allocations.reset_peak();
  s.oversize_segments.reset_peak();
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  const int64_t total = config().capacity_bytes;
  return {size_t(std::max<int64_t>(0, total - reserved(d))), size_t(total)};
}

void CachingAllocator::set_memory_fraction(double fraction, c10::DeviceIndex d) {
  check_memory_fraction(fraction, d);
  std::lock_guard<std::mutex> g(g_mu);
  g_dev[d].fraction = fraction;
}

void CachingAllocator::set_settings(const AllocatorSettings& s) {
  std::lock_guard<std::mutex> g(g_mu);
  g_settings = s;
}

std::vector<SegmentInfo> CachingAllocator::snapshot() {
  std::lock_guard<std::mutex> g(g_mu);
  std::vector<SegmentInfo> out;
  out.reserve(g_blocks.size());
  for (const auto& [addr, b] : g_blocks)
    out.push_back({b->device, addr, b->size, b->allocated ? b->requested : 0,
                   b->allocated, 0});
  return out;
}

int CachingAllocator::device_of(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.upper_bound(p);
  if (it == g_blocks.begin()) return -1;
  --it;
  return p < it->first + it->second->size ? it->second->device : -1;
}

// ---- what both allocators share -------------------------------------------

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  const auto d = current_device();
  return allocate_on(d, nbytes, c10::Device(c10::DeviceType::PrivateUse1, d));
}

c10::DataPtr DeviceAllocator::allocate_on(c10::DeviceIndex d, size_t nbytes,
                                          c10::Device tag) {
  check_not_forked();
  check_device(d);
  mark_initialized();
  if (nbytes == 0) return c10::DataPtr(nullptr, tag);
  return allocate_bytes(d, nbytes, tag);
}

void DeviceAllocator::copy_data(void* dst, const void* src, std::size_t n) const {
  driver().memcpy(dst, src, n, current_stream(current_device()));
}

void check_memory_fraction(double fraction, c10::DeviceIndex d) {
  check_device(d);
  TORCH_CHECK(fraction >= 0 && fraction <= 1,
              "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
}

DeviceAllocator& device_allocator() {
  static CachingAllocator caching;
  static DriverAllocator driver_owned;
  if (config().native_allocator) return driver_owned;
  return caching;
}

// ---- host kernels allocating device memory ---------------------------------

namespace {
TORCH_MUSA_FAST_TLS thread_local int t_redirect = -1;
c10::DeleterFnPtr g_host_raw_deleter = nullptr;

bool is_pool_pointer(void* p) {
  std::lock_guard<std::mutex> g(g_mu);
  return g_blocks.count(reinterpret_cast<uintptr_t>(p)) > 0;
}

// raw_allocate()/raw_deallocate() callers (oneDNN among them) free through
// raw_deleter(), whichever mode allocated the pointer.
void kernel_raw_free(void* p) {
  if (p && is_pool_pointer(p)) raw_free(p);
  else g_host_raw_deleter(p);
}

struct KernelAllocationRedirect final : c10::Allocator {
  c10::Allocator* host = nullptr;
  c10::DataPtr allocate(size_t n) override {
    if (t_redirect >= 0)
      return device_allocator().allocate_on(
          static_cast<c10::DeviceIndex>(t_redirect), n,
          c10::Device(c10::DeviceType::CPU));
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

KernelAllocationScope::KernelAllocationScope(c10::DeviceIndex device) : prev_(t_redirect) {
  // Only CPU kernels allocate through the CPU allocator on musa's behalf.
  if (C10_LIKELY(config().kernel_type == c10::DeviceType::CPU)) t_redirect = device;
}
KernelAllocationScope::~KernelAllocationScope() { t_redirect = prev_; }

void install_kernel_allocation_redirect() {
  if (g_kernel_allocation_redirect.host) return;
  g_kernel_allocation_redirect.host = c10::GetCPUAllocator();
  g_host_raw_deleter = g_kernel_allocation_redirect.host->raw_deleter();
  c10::SetCPUAllocator(&g_kernel_allocation_redirect, /*priority=*/1);
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(),
              "Trying to resize storage that is not resizable");
  const auto device = storage->device();
  c10::DataPtr fresh(nullptr, device);  // resized to 0, the storage stays musa's
  if (nbytes)
    fresh = device_allocator().allocate_on(device.index(), nbytes, device);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep)
    driver().memcpy(fresh.get(), storage->data(), keep,
                    current_stream(device.index()));
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}


}  // namespace torch_musa
