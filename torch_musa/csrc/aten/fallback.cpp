// The boxed fallback: every aten op without a musa kernel of its own runs here,
// through the host kernel (see kernel_call.h). It also keeps count of which ops
// fell back and, by TORCH_MUSA_FALLBACK, warns once per op, stays silent, or
// refuses.
#include "aten/fallback.h"

#include "aten/kernel_call.h"
#include "core/Device.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace torch_musa {

namespace {

std::atomic<int> g_mode{int(FallbackMode::Warn)};
std::mutex g_stats_mu;
struct OpCount {
  std::string name;
  uint64_t calls = 0;
};
std::unordered_map<const void*, OpCount> g_counts;

void account(const c10::OperatorHandle& op) {
  const auto mode = FallbackMode(g_mode.load(std::memory_order_relaxed));
  bool first = false;
  std::string name;
  {
    std::lock_guard<std::mutex> g(g_stats_mu);
    OpCount& c = g_counts[&op.schema()];
    if (c.calls++ == 0) {
      first = true;
      c.name = c10::toString(op.schema().operator_name());
    }
    if (first || mode == FallbackMode::Error) name = c.name;
  }
  // The fallback runs the driver's kernel device's kernels: the CPU's on the
  // host driver, PyTorch's CUDA kernels on the cuda driver.
  TORCH_CHECK(mode != FallbackMode::Error, name,
              " is not in the musa operator registry and "
              "TORCH_MUSA_FALLBACK=error forbids the ",
              c10::DeviceTypeName(driver().kernel_device_type()), " fallback.");
  if (first && mode == FallbackMode::Warn)
    TORCH_WARN(name, " is not in the musa operator registry; it runs through "
               "the ", c10::DeviceTypeName(driver().kernel_device_type()),
               " fallback (warned once per op; TORCH_MUSA_FALLBACK="
               "silent|warn|error).");
}

void see(KernelCall& call, const c10::IValue& v, const char* arg) {
  if (v.isTensor()) {
    call.see(v.toTensor(), arg);
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) call.see(t, arg);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor()) call.see(e.toTensor(), arg, /*index_list=*/true);
  }
}

bool is_generator_arg(const c10::Argument& a) {
  const auto& type = a.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
             c10::TypeKind::GeneratorType;
}

bool is_musa(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

void to_kernel(KernelCall& call, c10::IValue& v, const c10::Argument& a) {
  const bool written = a.alias_info() && a.alias_info()->isWrite();
  if (v.isTensor()) {
    if (is_musa(v.toTensor())) v = call.to_kernel(v.toTensor(), written);
  } else if (v.isTensorList()) {
    auto list = v.toTensorList();
    bool any = false;
    for (const at::Tensor& t : list) any |= is_musa(t);
    if (!any) return;
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) out.push_back(call.to_kernel(t, written));
    v = std::move(out);
  } else if (v.isList()) {  // Tensor?[] (indices)
    bool any = false;
    for (const c10::IValue& e : v.toListRef()) any |= e.isTensor() && is_musa(e.toTensor());
    if (!any) return;
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(v.toListRef().size());
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) out.push_back(call.to_kernel(e.toTensor(), written));
      else out.push_back(std::nullopt);
    }
    v = std::move(out);
  } else if (v.isGenerator() || (v.isNone() && is_generator_arg(a))) {
    v = call.kernel_generator_for(v.isNone() ? std::nullopt
                                       : std::optional<at::Generator>(v.toGenerator()));
  } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
    v = kernel_device(v.toDevice().index());
  }
}

void musa_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                   torch::jit::Stack* stack) {
  account(op);
  run_on_kernel_device(op, stack);
}

}  // namespace

void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  KernelCall call(schema.name().c_str(), schema.overload_name().c_str());
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) see(call, (*stack)[first + i], args[i].name().c_str());
  const auto device = call.device();
  std::vector<c10::IValue> debug_args;
  const DebugHook hook = debug_hook();
  if (C10_UNLIKELY(hook)) debug_args.assign(stack->begin() + first, stack->end());
  for (size_t i = 0; i < args.size(); ++i) to_kernel(call, (*stack)[first + i], args[i]);
  {
    KernelAllocationScope scope(device);
    op.redispatchBoxed(kernel_keys(), stack);
  }
  call.sync_written();
  const size_t rfirst = stack->size() - schema.returns().size();
  // How many results share each fresh storage: only then may it be adopted.
  c10::SmallVector<std::pair<c10::StorageImpl*, int>, 4> refs;
  auto count = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    auto* s = t.storage().unsafeGetStorageImpl();
    for (auto& [impl, n] : refs)
      if (impl == s) { ++n; return; }
    refs.emplace_back(s, 1);
  };
  auto refs_of = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return 1;
    for (auto& [impl, n] : refs)
      if (impl == t.storage().unsafeGetStorageImpl()) return n;
    return 1;
  };
  for (size_t i = rfirst; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) count(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList()) count(t);
  }
  for (size_t i = rfirst; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = call.to_musa(v.toTensor(), refs_of(v.toTensor()));
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(call.to_musa(t, refs_of(t)));
      v = std::move(out);
    }
  }
  if (C10_UNLIKELY(hook)) {
    std::vector<c10::IValue> results(stack->begin() + rfirst, stack->end());
    hook(call.op_name().c_str(), debug_args, results);
  }
}

void set_fallback_mode(FallbackMode mode) { g_mode = int(mode); }

std::vector<std::pair<std::string, uint64_t>> fallback_counts() {
  std::lock_guard<std::mutex> g(g_stats_mu);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [k, c] : g_counts) out.emplace_back(c.name, c.calls);
  return out;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> g(g_stats_mu);
  g_counts.clear();
}

void register_fallback_for(const std::vector<std::string>& ops) {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
  for (const auto& name : ops)
    lib->impl(name.c_str(),
              torch::CppFunction::makeFromBoxedFunction<&musa_fallback>());
}

}  // namespace torch_musa

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_fallback>());
}
