// NanInfTracker's native path: every musa op served by a host kernel has its
// floating outputs checked for NaN/Inf in C++, right after the kernel (the
// kernels run synchronously on the host, so this reads memory that is already
// written: no extra synchronisation). Finite ops cost one bit-max pass over
// their outputs; only an op that produces NaN/Inf (rare) calls into Python,
// which then names the module, the phase and the source line
// (utils/compare_tool/nan_inf.py). Called through the op hook (aten/kernel_call.h),
// and directly by the native kernels that do not go through a KernelCall.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <vector>

namespace torch_musa {

extern std::atomic<bool> g_nan_check_armed;
inline bool nan_check_armed() { return g_nan_check_armed.load(std::memory_order_relaxed); }

// `op` is "aten::log" or "aten::add.Tensor"; `args` in schema order.
void nan_check_op(const char* op, const std::vector<c10::IValue>& args,
                  const std::vector<c10::IValue>& results);

// Installs the op hook that the current settings need (python/module.cpp): the op
// debug callback, the NaN check, both, or none.
void update_op_hook();

}  // namespace torch_musa
