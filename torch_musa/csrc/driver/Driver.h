// The narrow interface between the musa runtime and whatever executes it.
//
// Everything above this file (allocator, guard, hooks, kernels) talks to the
// device only through `Driver`. The embedded host driver keeps device memory in
// host RAM and keeps a per-stream timeline so that ordering, events and
// `_sleep` behave observably like an asynchronous device. A hardware driver
// implements the same calls against a real runtime.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <atomic>
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

  // Streams: a device-side busy wait of `cycles` cycles of a clock at `clock_hz`
  // (the hardware profile's; none for cycles <= 0), and completion.
  virtual void stream_sleep(c10::Stream stream, int64_t cycles, double clock_hz) = 0;
  virtual bool stream_query(c10::Stream stream) = 0;
  virtual void stream_synchronize(c10::Stream stream) = 0;
  virtual void device_synchronize(c10::DeviceIndex device) = 0;
  // `waiter` does not run past this point until `event` has completed.
  virtual void stream_wait_event(c10::Stream waiter, DriverEvent* event) = 0;
  // The host is about to read what work on `stream` produced (a blocking copy to
  // the host, .item(), an op that sizes its result from the data): wait for the
  // work queued on it, as CUDA's blocking copies do. Called through
  // wait_for_host_read() below. A driver whose kernels synchronise themselves
  // there (the cuda driver's are CUDA's) has nothing to do.
  virtual void host_read_wait(c10::Stream) {}

  // Events.
  virtual DriverEvent* event_create(c10::DeviceIndex device, bool timing) = 0;
  virtual void event_destroy(DriverEvent* event) = 0;
  virtual void event_record(DriverEvent* event, c10::Stream stream) = 0;
  virtual bool event_query(DriverEvent* event) = 0;
  virtual void event_synchronize(DriverEvent* event) = 0;
  virtual double event_elapsed_ms(DriverEvent* start, DriverEvent* end) = 0;

  // Graph capture (torch_musa/core/graphs.py drives it and records the work,
  // python/graphs.cpp replays it; under the cuda driver CUDA graphs capture and
  // these are unused).
  // While `stream` captures, the driver refuses what would wait for captured
  // work, as CUDA does: synchronising or querying the capturing stream, or an
  // event recorded on it, always; synchronising the device from any thread
  // (mode 0, "global"), from the capturing thread (1, "thread_local"), or never
  // (2, "relaxed"). The refusal raises CUDA's "operation not permitted when
  // stream is capturing" and invalidates the capture: capture_end returns the
  // first such error ("" when the capture stayed valid).
  virtual void capture_begin(c10::Stream stream, int mode);
  virtual std::string capture_end(c10::Stream stream);
  virtual bool stream_capturing(c10::Stream) { return false; }
  virtual void capture_invalidate(c10::Stream, const std::string&) {}

  // ---- What a driver with a runtime of its own brings (the cuda driver).
  // The defaults are the host driver's: kernels are CPU kernels, and the
  // runtime core keeps memory, streams and the current device itself.

  // Kernels run on aliases of musa memory of this device type.
  virtual c10::DeviceType kernel_device_type() const { return c10::DeviceType::CPU; }
  // The allocator of the kernels' device type (aliases resize through it).
  virtual c10::Allocator* kernel_allocator();
  // A generator of the kernels' device type, seeded with `seed`; and the one
  // behind musa's default generator (ops without a generator argument, such
  // as dropout, draw from the kernels' own default, so the two must be one).
  virtual at::Generator kernel_generator(c10::DeviceIndex device, uint64_t seed);
  virtual at::Generator default_kernel_generator(c10::DeviceIndex device);
  // Device memory: non-null when the driver brings a caching allocator of its
  // own, which then serves every musa allocation and its statistics.
  virtual c10::DeviceAllocator* native_allocator() { return nullptr; }
  virtual void set_memory_fraction(double, c10::DeviceIndex) {}
  virtual int device_of(const void*) { return -1; }  // -1: not device memory
  // Unified memory for CPU tensors (cpu:unified): bytes the host and `device` both
  // address, CUDA's managed memory. nullptr where the driver has none of its own
  // (the host driver's unified memory is its device pool: host RAM already).
  virtual bool has_managed_memory() const { return false; }
  virtual void* malloc_managed(c10::DeviceIndex, size_t) { return nullptr; }
  virtual void free_managed(void*) {}
  virtual void* stream_handle(c10::Stream s) {
    return reinterpret_cast<void*>(static_cast<intptr_t>(s.id()));
  }
  // Streams and the current device: true when the driver keeps them, as the
  // CUDA runtime does; musa stream ids are then the driver's own.
  virtual bool native_streams() const { return false; }
  // Whether this driver's blocking waits call the wait interrupt check (below):
  // the Python bindings then wait on the caller's thread, else on a helper.
  virtual bool waits_check_interrupts() const { return false; }
  virtual c10::StreamId current_stream_id(c10::DeviceIndex) { return 0; }
  virtual void set_current_stream_id(c10::DeviceIndex, c10::StreamId) {}
  virtual c10::StreamId pool_stream_id(c10::DeviceIndex, bool /*high*/) { return 0; }
  virtual void set_device(c10::DeviceIndex) {}
};

// Blocking waits and Ctrl-C. The host driver's waits (stream, event and device
// synchronisation, host reads) wait in slices of about 20 ms and call this check
// between slices; it may throw to abandon the wait (the error reaches the caller
// of the wait). The Python bindings install one that raises a pending
// KeyboardInterrupt in Python's main thread (python/memory.cpp), so that waits
// reached through c10 (torch.accelerator, torch.Stream, torch.Event, copies)
// stop at Ctrl-C as torch.musa.synchronize does. Null: waits run to their end.
using WaitInterruptCheck = void (*)();
void set_wait_interrupt_check(WaitInterruptCheck check);

// True once the host driver has queued work that occupies a stream without
// running on the host (stream_sleep); only then do host reads wait. Until then
// a host read, and the op path's check for ops that read the data to size their
// result (aten/kernel_call.cpp), cost one relaxed load of it.
extern std::atomic<bool> g_host_work_queued;

// The checks every driver's event_elapsed_ms makes, with PyTorch's messages.
inline void check_elapsed_time(bool timing, bool recorded, bool completed) {
  TORCH_CHECK(timing, "Both events must be created with enable_timing=True to "
              "measure elapsed time.");
  TORCH_CHECK(recorded, "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(completed, "Both events must have completed before calculating "
              "elapsed time; call synchronize() on the end event first.");
}

// The driver in use: the host driver unless `select_driver` chose another
// before the runtime was initialised.
Driver& driver();
// "host", or "cuda" where the package was built with CUDA. Raises otherwise.
void select_driver(const std::string& name);
bool cuda_driver_built();

inline void wait_for_host_read(c10::Stream stream) {
  if (C10_UNLIKELY(g_host_work_queued.load(std::memory_order_relaxed)))
    driver().host_read_wait(stream);
}

}  // namespace torch_musa
