// What every musa device allocator shares (the DeviceAllocator base: allocation
// on a device, copies, what an implementation lacks), and which one serves musa
// memory: a user's, a driver's own, or the host driver's caching allocator.
#include "core/MUSACachingAllocator.h"

#include "core/AllocatorInternals.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace torch_musa {

using namespace detail;

std::string detail::format_size(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (bytes < (size_t(1) << 10)) os << bytes << " bytes";
  else if (bytes < (size_t(1) << 20)) os << bytes / 1024.0 << " KiB";
  else if (bytes < (size_t(1) << 30)) os << bytes / 1048576.0 << " MiB";
  else os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

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
  try {
    return allocate_bytes(d, nbytes, tag);
  } catch (const c10::OutOfMemoryError&) {
    notify_out_of_memory(d, nbytes);
    throw;
  }
}

namespace {
std::mutex g_oom_mu;
std::vector<OutOfMemoryObserver> g_oom_observers;  // under g_oom_mu
}  // namespace

void attach_out_of_memory_observer(OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> g(g_oom_mu);
  g_oom_observers.push_back(std::move(observer));
}

void DeviceAllocator::notify_out_of_memory(c10::DeviceIndex d, size_t nbytes) {
  std::vector<OutOfMemoryObserver> observers;
  {
    std::lock_guard<std::mutex> g(g_oom_mu);
    observers = g_oom_observers;
  }
  if (observers.empty()) return;
  const int64_t allocated = getDeviceStats(d).allocated_bytes[0].current;
  const auto [free, total] = getMemoryInfo(d);
  for (const auto& observer : observers) observer(d, int64_t(nbytes), allocated, int64_t(free));
}

void DeviceAllocator::copy_data(void* dst, const void* src, std::size_t n) const {
  driver().memcpy(dst, src, n, current_stream(current_device()));
}

#define TORCH_MUSA_UNSUPPORTED(what)                                                 \
  TORCH_CHECK(false, what, " is not supported by the current musa allocator (",   \
              backend(), ", ", driver().name(), " driver)")

MemorySnapshot DeviceAllocator::snapshot(c10::MempoolId_t) {
  TORCH_MUSA_UNSUPPORTED("a memory snapshot");
}
void DeviceAllocator::record_history(const HistorySettings&) {
  TORCH_MUSA_UNSUPPORTED("recording memory history");
}
void DeviceAllocator::create_pool(c10::DeviceIndex, c10::MempoolId_t,
                                  std::shared_ptr<RawAllocatorFns>, bool, bool) {
  TORCH_MUSA_UNSUPPORTED("MemPool");
}
void DeviceAllocator::begin_allocate_to_pool(c10::DeviceIndex, c10::MempoolId_t, PoolFilter) {
  TORCH_MUSA_UNSUPPORTED("MemPool");
}
void DeviceAllocator::end_allocate_to_pool(c10::DeviceIndex, c10::MempoolId_t) {
  TORCH_MUSA_UNSUPPORTED("MemPool");
}
void DeviceAllocator::release_pool(c10::DeviceIndex, c10::MempoolId_t) {
  TORCH_MUSA_UNSUPPORTED("MemPool");
}
int DeviceAllocator::pool_use_count(c10::DeviceIndex, c10::MempoolId_t) {
  TORCH_MUSA_UNSUPPORTED("MemPool");
}
#undef TORCH_MUSA_UNSUPPORTED

void check_memory_fraction(double fraction, c10::DeviceIndex d) {
  check_device(d);
  TORCH_CHECK(fraction >= 0 && fraction <= 1,
              "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
}

// ---- which allocator serves musa memory ----------------------------------------

namespace {
std::atomic<DeviceAllocator*> g_user_allocator{nullptr};
}  // namespace

DeviceAllocator& device_allocator() {
  if (DeviceAllocator* user = g_user_allocator.load(std::memory_order_acquire)) return *user;
  if (C10_LIKELY(!config().native_allocator)) return caching_allocator();
  static DriverAllocator driver_owned;
  return driver_owned;
}

void use_pluggable_allocator(std::shared_ptr<RawAllocatorFns> fns) {
  TORCH_CHECK(fns && fns->alloc && fns->free, "a pluggable allocator needs both functions");
  TORCH_CHECK(!config().native_allocator,
              "change_current_allocator: under the ", driver().name(),
              " driver musa memory is the driver's allocator's; use its own API "
              "(torch.cuda.memory.change_current_allocator)");
  TORCH_CHECK(!g_user_allocator.load() && !caching_allocator().used(),
              "change_current_allocator: Can't swap an already initialized allocator "
              "(musa memory was allocated already); call it before the first musa tensor");
  // Never freed: tensors may outlive any Python object that named it.
  DeviceAllocator* a = make_pluggable_allocator(std::move(fns));
  g_user_allocator.store(a, std::memory_order_release);
  c10::SetAllocator(c10::DeviceType::PrivateUse1, a);
}

c10::MempoolId_t new_pool_id(bool user_pool) {
  static std::atomic<c10::CaptureId_t> uid{1};
  const auto n = uid++;
  return user_pool ? c10::MempoolId_t{0, n} : c10::MempoolId_t{n, 0};
}

}  // namespace torch_musa
