#include "aten/kernel_threads.h"

#include "core/Device.h"

#include <ATen/Parallel.h>
#include <c10/macros/Macros.h>
#include <c10/util/thread_name.h>

#include <atomic>
#include <cstdint>

namespace torch_musa {

namespace {

enum Role : int8_t { kUnknown, kMain, kAutograd, kOther };

TORCH_MUSA_FAST_TLS thread_local int8_t t_role = kUnknown;
// Static initialisation runs on the thread that loads the library: the main thread.
[[maybe_unused]] const bool g_main_marked = (t_role = kMain, true);

std::atomic<int> g_threads{0};  // the main thread's count; 0 until a kernel saw it

// The calls at::set_num_threads makes for the calling thread, without its
// process-wide effects (the count new threads take, the pthreadpool's size,
// oneDNN's cache). Weak references, bound where libtorch_cpu finds them (its
// libgomp; MKL is linked into it), so that both act on the runtime the CPU
// kernels use; null in a torch without OpenMP or MKL. MKL's C call is
// MKL_Set_Num_Threads_Local (mkl_service.h's macro for mkl_set_num_threads_local;
// the lower-case symbol is its Fortran form, which takes a pointer).
extern "C" {
__attribute__((weak)) void omp_set_num_threads(int);
__attribute__((weak)) int MKL_Set_Num_Threads_Local(int);  // returns the previous local count
}

// Sets the calling thread's count; returns MKL's previous thread-local one.
int set_thread_count(int n) {
  omp_set_num_threads(n);
  return MKL_Set_Num_Threads_Local ? MKL_Set_Num_Threads_Local(n) : 0;
}

// Autograd names its device threads pt_autograd_<device> (c10::setThreadName).
bool named_autograd() { return c10::getThreadName().rfind("pt_autograd_", 0) == 0; }

bool host_kernels() {
  return config().kernel_type == c10::DeviceType::CPU && omp_set_num_threads != nullptr;
}

int8_t role() {
  int8_t r = t_role;
  if (C10_UNLIKELY(r == kUnknown)) r = t_role = named_autograd() ? kAutograd : kOther;
  return r;
}

}  // namespace

KernelThreads::KernelThreads() {
  if (C10_UNLIKELY(!host_kernels())) return;
  const int8_t r = role();
  // at::get_num_threads initialises the thread's count first, as the kernel's own
  // parallel_for would (which would then undo a count set here before it).
  const int have = at::get_num_threads();
  if (r == kMain) {
    if (C10_UNLIKELY(have != g_threads.load(std::memory_order_relaxed)))
      g_threads.store(have, std::memory_order_relaxed);
    return;
  }
  const int want = g_threads.load(std::memory_order_relaxed);
  if (C10_LIKELY(want == have) || want == 0) return;
  const int mkl = set_thread_count(want);
  if (r == kAutograd) return;  // a device thread keeps it
  restore_ = have;
  restore_mkl_ = mkl;
}

void KernelThreads::leave() {
  omp_set_num_threads(restore_);
  if (MKL_Set_Num_Threads_Local) MKL_Set_Num_Threads_Local(restore_mkl_);
}

void kernel_threads_on_stream_guard() {
  const int8_t r = t_role;
  if (C10_LIKELY(r == kMain || r == kOther) || !host_kernels() || role() != kAutograd) return;
  KernelThreads adopt;  // a device thread keeps the count
}

}  // namespace torch_musa
