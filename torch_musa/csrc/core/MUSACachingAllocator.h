// Memory: the caching device allocator, the pinned host allocator, and the
// redirect that makes host kernels running for musa allocate device memory.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <string>
#include <vector>

namespace torch_musa {

struct AllocatorSettings {
  size_t max_split_size = SIZE_MAX;     // blocks above it are not cached
  double garbage_collection_threshold = 0.0;  // 0 = off
};

struct SegmentInfo {
  int device;
  uintptr_t address;
  size_t total_size;
  size_t requested_size;
  bool allocated;
  int64_t stream;
};

class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;  // on the current device
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes,
                           c10::Device tag);
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dst, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  void set_memory_fraction(double fraction, c10::DeviceIndex device);
  void set_settings(const AllocatorSettings& s);
  std::vector<SegmentInfo> snapshot();
  // Device of a pointer inside any live block; -1 when not musa memory.
  int device_of(const void* ptr);
  static bool owns(const c10::DataPtr& ptr);
};

DeviceAllocator& device_allocator();

// Grows or shrinks a musa storage to `nbytes`, keeping its leading bytes (the
// hooks' storage resize and the native resize_ kernels).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// Page-locked host memory for pin_memory() and non_blocking copies.
c10::Allocator& pinned_allocator();
bool is_pinned(const void* ptr);

// While alive, CPU allocations on this thread come from musa `device`'s pool
// (tagged as CPU), so that a host kernel's fresh outputs are device memory and
// can be adopted without a copy.
class KernelAllocationScope {
 public:
  explicit KernelAllocationScope(c10::DeviceIndex device);
  ~KernelAllocationScope();
 private:
  int prev_;
};
void install_kernel_allocation_redirect();

}  // namespace torch_musa
