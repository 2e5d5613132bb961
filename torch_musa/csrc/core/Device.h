// The devices: the runtime's configuration (from the hardware profile), the
// current device of each thread, lazy initialisation and the fork guard.
#pragma once

#include "driver/Driver.h"

#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace torch_musa {

struct RuntimeConfig {
  int device_count = 2;
  std::string profile = "MTT S4000";
  int64_t capacity_bytes = int64_t(48) << 30;  // per device
  int64_t host_limit_bytes = 0;  // all devices together; 0 = no host guard
  double clock_hz = 1.5e9;       // converts `_sleep` cycles to time
  uint64_t unsupported_dtypes = 0;  // bit i set: ScalarType(i) not supported
  // Copied from the driver when it is selected (read on every op).
  c10::DeviceType kernel_type = c10::DeviceType::CPU;
  bool native_streams = false;
  c10::DeviceAllocator* native_allocator = nullptr;  // Driver::native_allocator()
};

// Thread-locals read on every op: the initial-exec model reads them without a
// __tls_get_addr call (they are a few bytes of the static TLS surplus), and
// constinit (C++20; the library's own code) tells the compiler that an extern one
// needs no dynamic initialization: without it each read first checks, through the
// GOT, for another translation unit's TLS init function, a cache line of its own.
#if defined(__cpp_constinit)
#define TORCH_MUSA_FAST_TLS __attribute__((tls_model("initial-exec"))) constinit
#else
#define TORCH_MUSA_FAST_TLS __attribute__((tls_model("initial-exec")))
#endif

// Chooses the driver ("host" or "cuda") before the runtime is in use.
void use_driver(const std::string& name);

namespace detail {
extern RuntimeConfig g_config;
// This thread's current musa device (read by every op's device guard).
extern TORCH_MUSA_FAST_TLS thread_local c10::DeviceIndex t_device;
}  // namespace detail
// Read several times per op: a plain global (constructed before the library's
// other globals, init_priority in Device.cpp) rather than a function-local
// static behind a guard and a call.
inline RuntimeConfig& config() { return detail::g_config; }
inline c10::DeviceIndex device_count() {
  return static_cast<c10::DeviceIndex>(config().device_count);
}

// Raises the user-facing error for an index outside [0, device_count) (asked on every
// allocation: the check inline, the message out of line).
[[noreturn]] void invalid_device(c10::DeviceIndex index);
inline void check_device(c10::DeviceIndex index) {
  if (C10_UNLIKELY(index < 0 || index >= device_count())) invalid_device(index);
}

inline c10::DeviceIndex current_device() { return detail::t_device; }
void set_current_device(c10::DeviceIndex index);
// Puts back an index that was current before; never throws (for destructors).
void restore_current_device(c10::DeviceIndex index) noexcept;

// Makes `d` current for a scope when `on` (an op's device guard, an
// allocation on a given device); puts the previous device back after.
class DeviceSwitch {
 public:
  DeviceSwitch(c10::DeviceIndex d, bool on = true)
      : prev_(current_device()), on_(on && d != prev_) {
    if (on_) set_current_device(d);
  }
  ~DeviceSwitch() {
    if (on_) restore_current_device(prev_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  c10::DeviceIndex prev_;
  bool on_;
};

// Raises once the process forked after the runtime was in use.
void check_not_forked();
void mark_initialized();
bool is_initialized();

inline bool dtype_supported(c10::ScalarType t) {
  return !((config().unsupported_dtypes >> static_cast<int>(t)) & 1);
}

}  // namespace torch_musa

// ---- The real torch_musa's C++ device API ------------------------------------
namespace c10::musa {

using c10::DeviceIndex;

inline DeviceIndex device_count() noexcept { return torch_musa::device_count(); }
inline DeviceIndex current_device() { return torch_musa::current_device(); }
inline void set_device(DeviceIndex device) { torch_musa::set_current_device(device); }
// Makes `device` current (when >= 0) and returns the previous one.
inline DeviceIndex exchangeDevice(DeviceIndex device) {
  const DeviceIndex old = torch_musa::current_device();
  if (device >= 0 && device != old) torch_musa::set_current_device(device);
  return old;
}
// Waits for all work on the current device.
inline void Synchronize() {
  const DeviceIndex d = torch_musa::current_device();
  torch_musa::check_device(d);
  torch_musa::driver().device_synchronize(d);
}

}  // namespace c10::musa
