// Musa memory from a driver that brings a caching allocator of its own (the
// cuda driver: CUDA's). musa:i is the driver's device i, so every call goes
// straight through; statistics, fractions and settings are the driver's.
#include "core/MUSACachingAllocator.h"

#include "core/Device.h"
#include "core/MUSAStream.h"

namespace torch_musa {

namespace {
c10::DeviceAllocator& owned() { return *config().native_allocator; }
}  // namespace

c10::DataPtr DriverAllocator::allocate_bytes(c10::DeviceIndex d, size_t nbytes,
                                             c10::Device tag) {
  DeviceSwitch guard(d);
  c10::DataPtr p;
  try {
    p = owned().allocate(nbytes);
  } catch (const c10::OutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "musa:", int(d), " (", driver().name(),
                     " driver) is out of memory: ", e.msg());
  }
  p.unsafe_set_device(tag);
  return p;
}

c10::DeleterFnPtr DriverAllocator::raw_deleter() const { return owned().raw_deleter(); }

void DriverAllocator::recordStream(const c10::DataPtr& p, c10::Stream s) {
  owned().recordStream(p, c10::Stream(c10::Stream::UNSAFE,
                                      c10::Device(driver().kernel_device_type(),
                                                  s.device_index()),
                                      s.id()));
}

void DriverAllocator::emptyCache(c10::MempoolId_t id) { owned().emptyCache(id); }

c10::CachingDeviceAllocator::DeviceStats DriverAllocator::getDeviceStats(c10::DeviceIndex d) {
  check_device(d);
  return owned().getDeviceStats(d);
}

void DriverAllocator::resetAccumulatedStats(c10::DeviceIndex d) {
  check_device(d);
  owned().resetAccumulatedStats(d);
}

void DriverAllocator::resetPeakStats(c10::DeviceIndex d) {
  check_device(d);
  owned().resetPeakStats(d);
}

std::pair<size_t, size_t> DriverAllocator::getMemoryInfo(c10::DeviceIndex d) {
  check_device(d);
  return owned().getMemoryInfo(d);
}

void DriverAllocator::set_memory_fraction(double fraction, c10::DeviceIndex d) {
  check_memory_fraction(fraction, d);
  driver().set_memory_fraction(fraction, d);
}

int DriverAllocator::device_of(const void* ptr) { return driver().device_of(ptr); }

}  // namespace torch_musa
