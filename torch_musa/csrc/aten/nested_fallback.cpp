// Strided nested tensors on musa. A musa NestedTensorImpl dispatches on
// NestedTensorPrivateUse1; this boxed fallback runs the kernel device's
// NestedTensor kernel (NestedTensorCPU on the host driver) over aliases: a
// NestedTensorImpl with the same nested sizes, strides and offsets whose buffer
// is the kernel alias of the musa buffer (kernel_alias.h), so in-place ops
// write the musa memory. Nested results come back as musa NestedTensorImpls
// over the mapped-back (or adopted) buffer; dense results as in fallback.cpp.
// Ops that build a nested tensor from dense musa ones (_nested_tensor_from_mask,
// the Transformer fast path's) are routed here from the PrivateUse1 key too.
#include "aten/fallback.h"
#include "aten/kernel_call.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <utility>
#include <vector>

namespace torch_musa {

namespace {

using at::native::NestedTensorImpl;

bool is_musa(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

// The whole storage of a nested tensor as a 1-D tensor of its dtype.
at::Tensor buffer_of(const at::Tensor& nt) {
  return at::native::get_nested_tensor_impl(nt)->get_unsafe_storage_as_tensor();
}

at::Tensor rewrap(const at::Tensor& buffer, const at::Tensor& like) {
  const NestedTensorImpl* impl = at::native::get_nested_tensor_impl(like);
  return at::detail::make_tensor<NestedTensorImpl>(
      buffer, impl->get_nested_sizes(), impl->get_nested_strides(),
      impl->get_storage_offsets());
}

struct NestedCall {
  KernelCall call;
  // (kernel alias, musa original) of each nested argument.
  std::vector<std::pair<at::Tensor, at::Tensor>> nested;

  NestedCall(const char* name, const char* overload) : call(name, overload) {}

  void see(const at::Tensor& t, const char* arg) {
    if (!t.defined()) return;
    // Nested metadata (int64 sizes, strides, offsets) stays on the host, as on
    // CUDA; a host nested tensor meets a musa one in copy_ (buffer to buffer).
    if (!is_musa(t) && (t.is_nested() || t.scalar_type() == at::kLong)) return;
    call.see(t.is_nested() ? buffer_of(t) : t, arg);
  }

  at::Tensor to_kernel(const at::Tensor& t, bool written) {
    if (!is_musa(t)) return t;
    if (!t.is_nested()) return call.to_kernel(t, written);
    at::Tensor alias = rewrap(call.to_kernel(buffer_of(t), written), t);
    nested.emplace_back(alias, t);
    return alias;
  }

  at::Tensor to_musa(const at::Tensor& t) {
    if (!t.defined() || !t.is_nested()) return call.to_musa(t);
    if (is_musa(t)) return t;
    for (const auto& [alias, orig] : nested)
      if (alias.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return orig;
    // Held here, by the nested result on the stack and by its buffer view.
    at::Tensor buf = buffer_of(t);
    return rewrap(call.to_musa(buf, /*refs_on_stack=*/2), t);
  }
};

c10::DispatchKeySet nested_kernel_keys() {
  return c10::DispatchKeySet(kernel_keys().has(c10::DispatchKey::CUDA)
                                 ? c10::DispatchKey::NestedTensorCUDA
                                 : c10::DispatchKey::NestedTensorCPU);
}

void nested_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                     torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  NestedCall nc(schema.name().c_str(), schema.overload_name().c_str());
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  bool any_nested = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[first + i];
    const char* name = args[i].name().c_str();
    if (v.isTensor()) {
      nc.see(v.toTensor(), name);
      any_nested |= v.toTensor().is_nested();
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        nc.see(t, name);
        any_nested |= t.is_nested();
      }
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) nc.see(e.toTensor(), name);
    }
  }
  const c10::DeviceIndex device = nc.call.device();
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[first + i];
    const bool written = args[i].alias_info() && args[i].alias_info()->isWrite();
    if (v.isTensor()) {
      v = nc.to_kernel(v.toTensor(), written);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(nc.to_kernel(t, written));
      v = std::move(out);
    } else if (v.isList()) {  // Tensor?[]
      bool any = false;
      for (const c10::IValue& e : v.toListRef()) any |= e.isTensor();
      if (!any) continue;
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& e : v.toListRef())
        out.push_back(e.isTensor() ? std::optional<at::Tensor>(nc.to_kernel(e.toTensor(), written))
                                   : std::nullopt);
      v = std::move(out);
    } else if (v.isGenerator()) {
      v = nc.call.kernel_generator_for(v.toGenerator());
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
      v = kernel_device(v.toDevice().index());
    }
  }
  {
    KernelAllocationScope scope(device);
    op.redispatchBoxed(any_nested ? nested_kernel_keys() : kernel_keys(), stack);
  }
  nc.call.sync_written();
  const size_t rfirst = stack->size() - schema.returns().size();
  // _nested_tensor_size / _strides / _storage_offsets: host metadata, as on CUDA.
  if (schema.name().rfind("aten::_nested_tensor_s", 0) == 0) return;
  for (size_t i = rfirst; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = nc.to_musa(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(nc.to_musa(t));
      v = std::move(out);
    }
  }
}

// `nt.to(...)`: the buffer moves as a dense tensor (musa's own _to_copy),
// the nested metadata stays.
at::Tensor nested_to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                          std::optional<at::Layout> layout, std::optional<at::Device> device,
                          std::optional<bool> pin_memory, bool non_blocking,
                          std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == at::kStrided,
              "a strided nested tensor converts only to layout torch.strided, not ", *layout);
  TORCH_CHECK(!memory_format || *memory_format == at::MemoryFormat::Preserve ||
                  *memory_format == at::MemoryFormat::Contiguous,
              "nested tensors take memory_format torch.preserve_format or "
              "torch.contiguous_format only");
  const at::Tensor src = self.is_contiguous() ? self : self.contiguous();
  const NestedTensorImpl* impl = at::native::get_nested_tensor_impl(src);
  at::Tensor buf = at::_to_copy(impl->get_buffer(), dtype, layout, device, pin_memory,
                                non_blocking, std::nullopt);
  return at::detail::make_tensor<NestedTensorImpl>(
      buf, impl->get_nested_sizes().clone(), impl->get_nested_strides().clone(),
      impl->get_storage_offsets().clone());
}

// Ops with a NestedTensorCPU kernel and a composite one: the composite kernel
// would win over the boxed fallback on NestedTensorPrivateUse1 (and fail on
// the nested sizes), so each is routed to the fallback by name.
const bool g_nested_routes = [] {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::NestedTensorPrivateUse1,
                                        __FILE__, __LINE__);
  auto& d = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || name.name == "aten::_to_copy") continue;
    auto op = d.findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorPrivateUse1))
      continue;
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&nested_fallback>());
  }
  return true;
}();

}  // namespace

}  // namespace torch_musa

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::nested_fallback>());
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_to_copy", &torch_musa::nested_to_copy);
}

// Dense musa tensors in, a nested tensor out: the dense fallback would refuse
// the nested result.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"_nested_tensor_from_mask", "_nested_from_padded",
                           "_nested_view_from_buffer", "_nested_view_from_buffer_copy"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&torch_musa::nested_fallback>());
}
