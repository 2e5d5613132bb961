#include "core/Device.h"

#include <c10/util/Exception.h>

#include <array>

#include <pthread.h>

namespace torch_musa {

namespace {
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};

void after_fork_in_child() {
  if (g_initialized.load()) g_bad_fork.store(true);
}
const int g_atfork = pthread_atfork(nullptr, nullptr, &after_fork_in_child);
}  // namespace

TORCH_MUSA_FAST_TLS thread_local c10::DeviceIndex detail::t_device = 0;

RuntimeConfig detail::g_config __attribute__((init_priority(101)));

void invalid_device(c10::DeviceIndex index) {
  TORCH_CHECK_INDEX(
      false, "Invalid device musa:", int(index),
      ": this process sees ", int(device_count()),
      " musa device(s), so valid indices are 0..", int(device_count()) - 1,
      " (hardware profile ", config().profile,
      "; MUSA_VISIBLE_DEVICES narrows the set).");
}

void use_driver(const std::string& name) {
  TORCH_CHECK(!is_initialized(), "the musa driver must be chosen before the "
              "runtime is in use");
  select_driver(name);
  config().kernel_type = driver().kernel_device_type();
  config().native_streams = driver().native_streams();
  config().native_allocator = driver().native_allocator();
}

void set_current_device(c10::DeviceIndex index) {
  check_not_forked();
  check_device(index);
  if (C10_UNLIKELY(config().native_streams)) driver().set_device(index);
  detail::t_device = index;
  mark_initialized();
}

void restore_current_device(c10::DeviceIndex index) noexcept {
  if (C10_UNLIKELY(config().native_streams)) {
    try {
      driver().set_device(index);
    } catch (...) {
    }
  }
  detail::t_device = index;
}

void check_not_forked() {
  TORCH_CHECK(!g_bad_fork.load(std::memory_order_relaxed),
              "Cannot re-initialize MUSA in forked subprocess. To use MUSA with "
              "multiprocessing, you must use the 'spawn' start method.");
}

void mark_initialized() { g_initialized.store(true, std::memory_order_relaxed); }
bool is_initialized() { return g_initialized.load(std::memory_order_relaxed); }

}  // namespace torch_musa
