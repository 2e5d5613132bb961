// NanInfTracker's native path: every musa op served by a host kernel has its
// floating outputs checked for NaN/Inf in C++, right after the kernel (the
// kernels run synchronously on the host, so this reads memory that is already
// written: no extra synchronisation). Finite ops cost one bit-max pass over
// their outputs; only an op that produces NaN/Inf (rare) calls the tracker that
// the binding layer installed (python/nan_check.cpp: the Python NanInfTracker,
// utils/compare_tool/nan_inf.py, which names the module, the phase and the source
// line). The runtime library itself never calls Python. Called through the op hook (aten/kernel_call.h),
// and, while armed, through the value-check hook there by the native kernels that
// do not go through a KernelCall.
#pragma once

#include <ATen/core/ivalue.h>

#include <ATen/Tensor.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_musa {

extern std::atomic<bool> g_nan_check_armed;
inline bool nan_check_armed() { return g_nan_check_armed.load(std::memory_order_relaxed); }

// A NaN/Inf event worth reporting. `kind`: 0 origin, 1 entered, 2 downstream,
// 3 explicit (a non-finite scalar argument).
struct NanCheckEvent {
  std::string op;  // "aten.add.Tensor"
  int kind;
  bool has_nan;
  std::vector<int64_t> bad_outputs;                       // positions among the outputs
  int64_t n_inputs;                                       // -1: carried Inf only
  bool wrote_input;
  std::vector<std::pair<int64_t, at::Tensor>> bad_inputs;  // (argument position, tensor)
  int64_t seq;
};

// What the check asks of the tracker; called outside the check's lock, with the
// ops the tracker runs itself not checked.
struct NanCheckTracker {
  virtual ~NanCheckTracker() = default;
  virtual bool skip(const std::string& op) = 0;  // not watched ("aten.log.default")
  virtual void event(const NanCheckEvent& e) = 0;
  virtual void read() = 0;  // every `every` checked ops
};

struct NanCheckCounts {
  int64_t checked = 0, origin = 0, entered = 0, downstream = 0, explicit_ = 0;
  int64_t bad_storages = 0, seen = 0;
};
struct NanCheckFirst {
  std::string op;
  int64_t seq, step;
  bool origin;  // else "entered"
};

// Arms the check with `tracker` (not owned; null: count only). `reset` forgets
// the previous run.
void nan_check_arm(NanCheckTracker* tracker, int64_t every, int64_t budget, int64_t step,
                   bool reset);
void nan_check_disarm();
void nan_check_release();  // forget a run: its bad storages, counts, first report
// Counts since the last take, then zeroed; sets the budget of downstream reports
// and the step for the next window (each when >= 0).
NanCheckCounts nan_check_take(int64_t budget, int64_t step);
std::optional<NanCheckFirst> nan_check_first();
int nan_check_scan(const at::Tensor& t);  // 0 finite, 1 Inf, 2 NaN

// `op` is "aten::log" or "aten::add.Tensor"; `args` in schema order.
void nan_check_op(const char* op, const std::vector<c10::IValue>& args,
                  const std::vector<c10::IValue>& results);

// Installs the op hook that the current settings need (python/module.cpp): the op
// debug callback, the NaN check, both, or none.
void update_op_hook();

}  // namespace torch_musa
