// The boxed fallback: every aten op without a musa kernel of its own runs here,
// through the host kernel (see kernel_call.h). It also keeps count of which ops
// fell back and, by TORCH_MUSA_FALLBACK, warns once per op, stays silent, or
// refuses.
#include "aten/fallback.h"

#include "aten/kernel_call.h"
#include "aten/layout_tensors.h"
#include "core/Device.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace torch_musa {

// As run_on_kernel_device(op, stack), the kernel picked by `layout_keys`
// (Sparse, SparseCsr, Quantized) and the layouts of the arguments too.
void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DispatchKeySet layout_keys);

namespace {

const c10::DispatchKeySet kLayoutKeys({c10::DispatchKey::Sparse, c10::DispatchKey::SparseCsr,
                                       c10::DispatchKey::Quantized});

std::atomic<int> g_mode{int(FallbackMode::Warn)};
std::mutex g_stats_mu;
struct OpCount {
  std::string name;
  uint64_t calls = 0;
};
std::unordered_map<const void*, OpCount> g_counts;

// `chosen`: an op routed here on purpose because the kernel device's own kernel is the
// best musa has (CUDA's multi-tensor _foreach_* kernels): counted, neither warned nor
// refused, as TORCH_MUSA_FALLBACK is about ops missing from the registry.
void account(const c10::OperatorHandle& op, bool chosen = false) {
  const auto mode = chosen ? FallbackMode::Silent : FallbackMode(g_mode.load(std::memory_order_relaxed));
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

void see(KernelCall& call, const c10::IValue& v, const c10::Argument& schema_arg) {
  const char* arg = schema_arg.name().c_str();
  if (v.isTensor()) {
    const bool written = schema_arg.alias_info() && schema_arg.alias_info()->isWrite();
    call.see(v.toTensor(), arg, /*index_list=*/false, written);
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

// Sparse and quantized musa arguments (and their kernel forms), for the
// written ones' write-back and for results that are those arguments.
struct LayoutArgs {
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> args;  // (musa, kernel)
  c10::SmallVector<bool, 2> written;
  // A device argument names the host (empty_quantized(..., device="cpu")):
  // sparse or quantized results stay there.
  bool host_device = false;
  // Sparse and quantized ops only: kernel forms require grad where their musa
  // tensors do, as some host kernels keep what the backward needs only then
  // (_sparse_mm_reduce_impl's arg_out).
  bool mirror_grad = false;
};

at::Tensor kernel_form(KernelCall& call, LayoutArgs& layout, const at::Tensor& t,
                       bool written) {
  at::Tensor k;
  if (C10_LIKELY(!is_layout_tensor(t))) {
    k = call.to_kernel(t, written);
  } else {
    // One tensor passed twice (sspaddmm_out's self and out) is one kernel tensor.
    for (size_t i = 0; i < layout.args.size(); ++i)
      if (layout.args[i].first.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        if (written && !layout.written[i]) {
          layout.written[i] = true;
          layout_to_kernel(call, t, true);  // marks its parts' aliases written
        }
        return layout.args[i].second;
      }
    k = layout_to_kernel(call, t, written);
    layout.args.emplace_back(t, k);
    layout.written.push_back(written);
  }
  if (layout.mirror_grad && t.requires_grad() && !k.requires_grad()) k.set_requires_grad(true);
  return k;
}

at::Tensor musa_form(KernelCall& call, const LayoutArgs& layout, const at::Tensor& t,
                     int refs) {
  if (C10_LIKELY(!is_layout_tensor(t))) return call.to_musa(t, refs);
  for (const auto& [m, k] : layout.args)
    if (k.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return m;
  if (t.device().type() != config().kernel_type || layout.host_device) return t;
  return layout_to_musa(call, t);
}

void to_kernel(KernelCall& call, LayoutArgs& layout, c10::IValue& v, const c10::Argument& a) {
  const bool written = a.alias_info() && a.alias_info()->isWrite();
  if (v.isTensor()) {
    if (is_musa(v.toTensor())) v = kernel_form(call, layout, v.toTensor(), written);
  } else if (v.isTensorList()) {
    auto list = v.toTensorList();
    bool any = false;
    for (const at::Tensor& t : list) any |= is_musa(t);
    if (!any) return;
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) out.push_back(kernel_form(call, layout, t, written));
    v = std::move(out);
  } else if (v.isList()) {  // Tensor?[] (indices)
    bool any = false;
    for (const c10::IValue& e : v.toListRef()) any |= e.isTensor() && is_musa(e.toTensor());
    if (!any) return;
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(v.toListRef().size());
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) out.push_back(kernel_form(call, layout, e.toTensor(), written));
      else out.push_back(std::nullopt);
    }
    v = std::move(out);
  } else if (v.isGenerator() || (v.isNone() && is_generator_arg(a))) {
    v = call.kernel_generator_for(v.isNone() ? std::nullopt
                                       : std::optional<at::Generator>(v.toGenerator()));
  } else if (v.isDevice()) {
    if (v.toDevice().is_privateuseone()) v = kernel_device(v.toDevice().index());
    else layout.host_device = true;
  }
}

void musa_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                   torch::jit::Stack* stack) {
  account(op);
  run_on_kernel_device(op, stack);
}

void musa_chosen_route(const c10::OperatorHandle& op, c10::DispatchKeySet,
                       torch::jit::Stack* stack) {
  account(op, /*chosen=*/true);
  run_on_kernel_device(op, stack);
}

// Sparse, sparse-compressed and quantized musa tensors: the same route, with
// the kernel chosen by the layout (SparseCPU, SparseCsrCPU, QuantizedCPU).
void musa_layout_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                          torch::jit::Stack* stack) {
  account(op);
  run_on_kernel_device(op, stack, ks & kLayoutKeys);
}

}  // namespace

void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_kernel_device(op, stack, c10::DispatchKeySet());
}

void run_on_kernel_device(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DispatchKeySet layout_keys) {
  const auto& schema = op.schema();
  KernelCall call(schema.name().c_str(), schema.overload_name().c_str());
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) see(call, (*stack)[first + i], args[i]);
  const auto device = call.device();
  std::vector<c10::IValue> debug_args;
  const DebugHook hook = debug_hook();
  if (C10_UNLIKELY(hook)) debug_args.assign(stack->begin() + first, stack->end());
  LayoutArgs layout;
  layout.mirror_grad = !layout_keys.empty();
  for (size_t i = 0; i < args.size(); ++i)
    to_kernel(call, layout, (*stack)[first + i], args[i]);
  for (const auto& [m, k] : layout.args) layout_keys = layout_keys | (k.key_set() & kLayoutKeys);
  {
    KernelAllocationScope scope(device);
    op.redispatchBoxed(kernel_keys() | layout_keys, stack);
  }
  call.sync_written();
  for (size_t i = 0; i < layout.args.size(); ++i)
    if (layout.written[i]) layout_sync_written(call, layout.args[i].first, layout.args[i].second);
  const size_t rfirst = stack->size() - schema.returns().size();
  ResultStorages refs;
  for (size_t i = rfirst; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) refs.count(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList()) refs.count(t);
  }
  for (size_t i = rfirst; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = musa_form(call, layout, v.toTensor(), refs.refs_of(v.toTensor()));
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(musa_form(call, layout, t, refs.refs_of(t)));
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

void register_fallback_for(const std::vector<std::string>& ops, bool chosen) {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
  for (const auto& name : ops)
    lib->impl(name.c_str(),
              chosen ? torch::CppFunction::makeFromBoxedFunction<&musa_chosen_route>()
                     : torch::CppFunction::makeFromBoxedFunction<&musa_fallback>());
}

}  // namespace torch_musa

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_fallback>());
}

namespace torch_musa {
namespace {

// Ops with a composite kernel (CompositeExplicitAutograd[NonFunctional]) as well as a
// SparseCPU / SparseCsrCPU / QuantizedCPU one: the composite outranks a
// fallback, and is wrong for these layouts (is_coalesced, col_indices,
// q_scale, ... raise "expected sparse ... layout"), so the ops the CPU device
// serves on those keys are routed to the layout fallback by name.
struct LayoutKernels {
  LayoutKernels() {
    const std::pair<c10::DispatchKey, c10::DispatchKey> keys[] = {
        {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1},
        {c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1},
        {c10::DispatchKey::QuantizedCPU, c10::DispatchKey::QuantizedPrivateUse1}};
    auto& dispatcher = c10::Dispatcher::singleton();
    const auto names = dispatcher.getAllOpNames();
    for (const auto& [cpu, musa] : keys) {
      auto* lib = new torch::Library(torch::Library::IMPL, "aten", musa, __FILE__, __LINE__);
      for (const c10::OperatorName& name : names) {
        if (name.name.rfind("aten::", 0) != 0) continue;
        auto op = dispatcher.findOp(name);
        if (!op || !op->hasKernelForDispatchKey(cpu) || op->hasKernelForDispatchKey(musa) ||
            !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
              op->hasKernelForDispatchKey(
                  c10::DispatchKey::CompositeExplicitAutogradNonFunctional)))
          continue;
        std::string n = name.name.substr(6);
        if (!name.overload_name.empty()) n += "." + name.overload_name;
        lib->impl(n.c_str(), torch::CppFunction::makeFromBoxedFunction<&musa_layout_fallback>());
      }
    }
  }
};
const LayoutKernels g_layout_kernels;

}  // namespace
}  // namespace torch_musa

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_layout_fallback>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_layout_fallback>());
}
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_layout_fallback>());
}
