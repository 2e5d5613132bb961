#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <utility>
#include <vector>

namespace torch_musa {

enum class FallbackMode { Silent = 0, Warn = 1, Error = 2 };
void set_fallback_mode(FallbackMode mode);
// (operator name, calls) for every op that reached the fallback.
std::vector<std::pair<std::string, uint64_t>> fallback_counts();
void reset_fallback_counts();

// Runs `op` on its stack through the host kernel (no accounting).
void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Route these ops (by "name.overload") straight to the fallback, skipping
// PyTorch's generic structured wrappers that would otherwise run first.
// `chosen`: the kernel device's kernel is musa's best for them (fallback_routes.py):
// counted in fallback_counts(), but TORCH_MUSA_FALLBACK neither warns nor refuses.
void register_fallback_for(const std::vector<std::string>& ops, bool chosen = false);

}  // namespace torch_musa
