// Device kernels for torch.profiler (ProfilerActivity.PrivateUse1, spelled
// ProfilerActivity.MUSA): while a profile with that activity runs, each op's
// kernel span on its stream is recorded and handed to Kineto as a device
// activity linked to the CPU op that launched it, so that key_averages() shows
// device time and export_chrome_trace() shows the kernels on musa stream rows.
#pragma once

#include <ATen/record_function.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>

namespace torch_musa::profiler {

namespace detail {
extern std::atomic<bool> g_recording;
int64_t kernel_begin();
void kernel_end(const char* op, const char* overload, c10::DeviceIndex device, int64_t start_ns);
void copy_end(const char* name, c10::DeviceIndex device, int64_t nbytes, int64_t start_ns);
}  // namespace detail

// Brackets one op's kernel (a member of KernelCall, so that it ends even when
// the call throws); nested calls (an op served by another op's kernel) count
// once, as the outermost. Costs one relaxed load when no profile runs.
class KernelSpan {
 public:
  KernelSpan(const char* op, const char* overload, const c10::DeviceIndex* device)
      : op_(op), overload_(overload), device_(device) {
    if (C10_UNLIKELY(detail::g_recording.load(std::memory_order_relaxed)))
      start_ns_ = detail::kernel_begin();
  }
  ~KernelSpan() {
    if (C10_UNLIKELY(start_ns_ != 0)) detail::kernel_end(op_, overload_, *device_, start_ns_);
  }
  KernelSpan(const KernelSpan&) = delete;
  KernelSpan& operator=(const KernelSpan&) = delete;

 private:
  const char* op_;
  const char* overload_;
  const c10::DeviceIndex* device_;
  int64_t start_ns_ = 0;
};

// Brackets a copy to, from or within musa memory ("Memcpy HtoD", "Memcpy DtoH",
// "Memcpy DtoD"), reported as the device's memcpy activity as CUDA's are.
class CopySpan {
 public:
  CopySpan(const char* name, c10::DeviceIndex device, int64_t nbytes)
      : name_(name), device_(device), nbytes_(nbytes) {
    if (C10_UNLIKELY(detail::g_recording.load(std::memory_order_relaxed)))
      start_ns_ = detail::kernel_begin();
  }
  ~CopySpan() {
    if (C10_UNLIKELY(start_ns_ != 0)) detail::copy_end(name_, device_, nbytes_, start_ns_);
  }
  CopySpan(const CopySpan&) = delete;
  CopySpan& operator=(const CopySpan&) = delete;

 private:
  const char* name_;
  c10::DeviceIndex device_;
  int64_t nbytes_;
  int64_t start_ns_ = 0;
};

// Keeps the ops a kernel calls inside (the host kernel's CPU-side internals, over
// aliases of musa memory) out of torch.profiler's record while it records ops on
// this thread, as a GPU kernel's internals are: those CPU tensors over musa bytes
// would otherwise join unrelated musa tensors at one address into one identity of
// the memory profiler (a layer's activations categorised as parameters). Costs one
// thread-local read when no profile runs.
class UnrecordedInternals {
 public:
  UnrecordedInternals() {
    if (C10_UNLIKELY(at::hasThreadLocalCallbacks()) && at::isRecordFunctionEnabled()) {
      at::enableRecordFunction(false);
      active_ = true;
    }
  }
  ~UnrecordedInternals() {
    if (active_) at::enableRecordFunction(true);
  }
  UnrecordedInternals(const UnrecordedInternals&) = delete;
  UnrecordedInternals& operator=(const UnrecordedInternals&) = delete;

 private:
  bool active_ = false;
};

// Kernels recorded in the current/last profile (for tests and diagnostics).
int64_t recorded_kernel_count();

}  // namespace torch_musa::profiler
