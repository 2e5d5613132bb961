// The narrow interface between the musa runtime and whatever executes it.
//
// Everything above this file (allocator, guard, hooks, kernels) talks to the
// device only through `Driver`. The embedded host driver keeps device memory in
// host RAM and keeps a per-stream timeline so that ordering, events and
// `_sleep` behave observably like an asynchronous device. A hardware driver
// implements the same calls against a real runtime.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_musa {

constexpr int kMaxDevices = 16;

struct DriverEvent;  // opaque, owned by the driver

struct Driver {
  virtual ~Driver() = default;
  virtual std::string name() const = 0;

  // Device memory. Returns nullptr when the driver cannot provide the bytes.
  virtual void* malloc(c10::DeviceIndex device, size_t nbytes) = 0;
  virtual void free(c10::DeviceIndex device, void* ptr, size_t nbytes) = 0;
  // Page-locked host memory.
  virtual void* malloc_host(size_t nbytes) = 0;
  virtual void free_host(void* ptr) = 0;
  // Copies between any two of host/device memory, ordered on `stream`.
  virtual void memcpy(void* dst, const void* src, size_t nbytes,
                      c10::Stream stream) = 0;

  // Streams: a device-side busy wait, and completion.
  virtual void stream_sleep(c10::Stream stream, int64_t nanoseconds) = 0;
  virtual bool stream_query(c10::Stream stream) = 0;
  virtual void stream_synchronize(c10::Stream stream) = 0;
  virtual void device_synchronize(c10::DeviceIndex device) = 0;
  // `waiter` does not run past this point until `event` has completed.
  virtual void stream_wait_event(c10::Stream waiter, DriverEvent* event) = 0;

  // Events.
  virtual DriverEvent* event_create(c10::DeviceIndex device, bool timing) = 0;
  virtual void event_destroy(DriverEvent* event) = 0;
  virtual void event_record(DriverEvent* event, c10::Stream stream) = 0;
  virtual bool event_query(DriverEvent* event) = 0;
  virtual void event_synchronize(DriverEvent* event) = 0;
  virtual double event_elapsed_ms(DriverEvent* start, DriverEvent* end) = 0;
};

// The driver in use (host driver by default).
Driver& driver();

}  // namespace torch_musa
