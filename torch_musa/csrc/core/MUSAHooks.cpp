// The device as PyTorch sees it: the guard (current device, streams, events)
// and the PrivateUse1 hooks (device count, generators, pinned memory).
#include "core/MUSACachingAllocator.h"
#include "core/MUSAGenerator.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_musa {

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;

Device musa(DeviceIndex i) { return Device(c10::DeviceType::PrivateUse1, i); }

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  Device getDevice() const override { return musa(current_device()); }
  void setDevice(Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "expected a musa device, got ", d);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) set_current_device(d.index());
  }

  Stream getStream(Device d) const override { return current_stream(idx(d)); }
  Stream getDefaultStream(Device d) const override { return default_stream(idx(d)); }
  Stream getStreamFromGlobalPool(Device d, bool high) const override {
    return pool_stream(idx(d), high ? -1 : 0);
  }
  Stream getNewStream(Device d, int priority) const override {
    return pool_stream(idx(d), priority);
  }
  Stream exchangeStream(Stream s) const override {
    Stream old = current_stream(s.device_index());
    set_current_stream(s);
    return old;
  }
  void* getStreamNativeHandle(const Stream s) const override {
    return driver().stream_handle(s);
  }

  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    if (event) driver().event_destroy(static_cast<DriverEvent*>(event));
  }
  void record(void** event, const Stream& stream, const DeviceIndex device,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device == -1 || device == stream.device_index(),
                "Event device index ", int(device),
                " does not match recording stream's device index ",
                int(stream.device_index()), ".");
    if (!*event)
      *event = driver().event_create(stream.device_index(),
                                     flag == c10::EventFlag::BACKEND_DEFAULT);
    driver().event_record(static_cast<DriverEvent*>(*event), stream);
  }
  void block(void* event, const Stream& stream) const override {
    if (event) driver().stream_wait_event(stream, static_cast<DriverEvent*>(event));
  }
  bool queryEvent(void* event) const override {
    return !event || driver().event_query(static_cast<DriverEvent*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event) driver().event_synchronize(static_cast<DriverEvent*>(event));
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed time.");
    return driver().event_elapsed_ms(static_cast<DriverEvent*>(start),
                                     static_cast<DriverEvent*>(end));
  }

  DeviceIndex deviceCount() const noexcept override { return device_count(); }
  bool queryStream(const Stream& s) const override { return driver().stream_query(s); }
  void synchronizeStream(const Stream& s) const override {
    driver().stream_synchronize(s);
  }
  void synchronizeDevice(const DeviceIndex d) const override {
    check_device(d);
    driver().device_synchronize(d);
  }
  void recordDataPtrOnStream(const c10::DataPtr& p, const Stream& s) const override {
    device_allocator().recordStream(p, s);
  }

 private:
  static DeviceIndex idx(Device d) {
    const DeviceIndex i = d.has_index() ? d.index() : current_device();
    check_device(i);
    return i;
  }
};

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(DeviceIndex d) const override {
    check_device(d);
    return is_initialized();
  }
  void init() const override { mark_initialized(); }
  DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(DeviceIndex d) const override { set_current_device(d); }
  DeviceIndex getCurrentDevice() const override { return current_device(); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    const DeviceIndex old = current_device();
    set_current_device(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  bool isPinnedPtr(const void* p) const override { return is_pinned(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &pinned_allocator();
  }
  Device getDeviceFromPtr(void* p) const override {
    const int d = device_allocator().device_of(p);
    TORCH_CHECK(d >= 0, "pointer ", p, " is not musa device memory");
    return musa(static_cast<DeviceIndex>(d));
  }
  const at::Generator& getDefaultGenerator(DeviceIndex d) const override {
    return default_generator(d < 0 ? current_device() : d);
  }
  at::Generator getNewGenerator(DeviceIndex d) const override {
    return new_generator(d < 0 ? current_device() : d);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

}  // namespace

void register_device() {
  static GuardImpl guard;
  static Hooks hooks;
  static bool done = false;
  if (done) return;
  done = true;
  static c10::impl::DeviceGuardImplRegistrar reg(c10::DeviceType::PrivateUse1, &guard);
  at::RegisterPrivateUse1HooksInterface(&hooks);
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator());
  install_kernel_allocation_redirect();
}

}  // namespace torch_musa
