// The device guard of musa (c10::impl::DeviceGuardImplInterface): current
// device, streams, events with real timestamps, synchronisation. Registered
// for PrivateUse1 by register_device() (MUSAHooks.cpp); the guards below are
// the real torch_musa's names for C++ code (custom operators) to use.
#pragma once

#include "core/Device.h"
#include "core/MUSACachingAllocator.h"
#include "core/MUSAStream.h"
#include "driver/Driver.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/InlineDeviceGuard.h>
#include <c10/core/impl/InlineStreamGuard.h>

namespace torch_musa {

// aten/kernel_call.cpp: the sync debug mode's check (a stream's synchronize
// waits for the device, as cudaStreamSynchronize does; a device's does not warn).
void sync_point(const char* what);
// aten/kernel_threads.cpp: autograd's device threads take the intra-op thread count
// of musa's host kernels at each node (the engine guards the node's stream first).
void kernel_threads_on_stream_guard();

class MUSAGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;
  MUSAGuardImpl() = default;
  explicit MUSAGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == static_type, "MUSAGuardImpl is for musa devices, got ", t);
  }
  c10::DeviceType type() const override { return static_type; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::PrivateUse1, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "expected a musa device, got ", d);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) set_current_device(d.index());
  }

  c10::Stream getStream(c10::Device d) const override { return current_stream(idx(d)); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(idx(d)); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return pool_stream(idx(d), high ? -1 : 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return pool_stream(idx(d), priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream old = current_stream(s.device_index());
    set_current_stream(s);
    kernel_threads_on_stream_guard();
    return old;
  }
  void* getStreamNativeHandle(const c10::Stream s) const override {
    return driver().stream_handle(s);
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) driver().event_destroy(static_cast<DriverEvent*>(event));
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device,
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
  void block(void* event, const c10::Stream& stream) const override {
    if (event) driver().stream_wait_event(stream, static_cast<DriverEvent*>(event));
  }
  bool queryEvent(void* event) const override {
    return !event || driver().event_query(static_cast<DriverEvent*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event) driver().event_synchronize(static_cast<DriverEvent*>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed time.");
    return driver().event_elapsed_ms(static_cast<DriverEvent*>(start),
                                     static_cast<DriverEvent*>(end));
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  bool queryStream(const c10::Stream& s) const override { return driver().stream_query(s); }
  void synchronizeStream(const c10::Stream& s) const override {
    sync_point("Stream.synchronize");
    driver().stream_synchronize(s);
  }
  void synchronizeDevice(const c10::DeviceIndex d) const override {
    check_device(d);
    driver().device_synchronize(d);
  }
  void recordDataPtrOnStream(const c10::DataPtr& p, const c10::Stream& s) const override {
    device_allocator().recordStream(p, s);
  }

 private:
  static c10::DeviceIndex idx(c10::Device d) {
    const c10::DeviceIndex i = d.has_index() ? d.index() : current_device();
    check_device(i);
    return i;
  }
};

}  // namespace torch_musa

namespace c10::musa {
// RAII: make a musa device (or a stream) current for a scope.
using MUSAGuard = c10::impl::InlineDeviceGuard<torch_musa::MUSAGuardImpl>;
using OptionalMUSAGuard = c10::impl::InlineOptionalDeviceGuard<torch_musa::MUSAGuardImpl>;
using MUSAStreamGuard = c10::impl::InlineStreamGuard<torch_musa::MUSAGuardImpl>;
}  // namespace c10::musa
