// Memory: the device allocators, the pinned host allocator, the redirect that
// makes host kernels running for musa allocate device memory, storage resizing.
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

// Musa device memory as PyTorch sees it (DeviceStats, empty_cache, ...), with
// what the runtime adds: allocation on a given device, fractions, snapshots.
// Two implementations, chosen by the driver: the host driver's caching
// allocator over Driver::malloc (MUSACachingAllocator.cpp), and a driver's own
// caching allocator when it brings one (DriverAllocator.cpp: CUDA's).
class DeviceAllocator : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) final;  // on the current device
  // Checks the device and the fork guard, marks the runtime initialised.
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes, c10::Device tag);
  void copy_data(void* dst, const void* src, std::size_t count) const final;
  bool initialized() override { return true; }
  // Whether `ptr` is memory of this allocator (and so may be adopted).
  bool owns(const c10::DataPtr& ptr) const { return ptr.get_deleter() == raw_deleter(); }

  virtual void set_memory_fraction(double fraction, c10::DeviceIndex device) = 0;
  virtual void set_settings(const AllocatorSettings& s) = 0;
  virtual std::vector<SegmentInfo> snapshot() = 0;
  // Device of a pointer inside any live block; -1 when not musa memory.
  virtual int device_of(const void* ptr) = 0;

 protected:
  virtual c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes,
                                      c10::Device tag) = 0;  // nbytes > 0
};

class CachingAllocator final : public DeviceAllocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override;
  void emptyCache(c10::MempoolId_t = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  void set_memory_fraction(double fraction, c10::DeviceIndex device) override;
  void set_settings(const AllocatorSettings& s) override;
  std::vector<SegmentInfo> snapshot() override;
  int device_of(const void* ptr) override;

 protected:
  c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes, c10::Device tag) override;
};

class DriverAllocator final : public DeviceAllocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override;
  void emptyCache(c10::MempoolId_t = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  void set_memory_fraction(double fraction, c10::DeviceIndex device) override;
  void set_settings(const AllocatorSettings&) override {}  // the driver's own settings
  std::vector<SegmentInfo> snapshot() override { return {}; }  // Python reads the driver's
  int device_of(const void* ptr) override;

 protected:
  c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes, c10::Device tag) override;
};

// The allocator the driver in use calls for (valid once the driver is chosen).
DeviceAllocator& device_allocator();

// Grows or shrinks a musa storage to `nbytes`, keeping its leading bytes (the
// hooks' storage resize and the native resize_ kernels).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// The checks both allocators make before changing a device's fraction.
void check_memory_fraction(double fraction, c10::DeviceIndex device);

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
