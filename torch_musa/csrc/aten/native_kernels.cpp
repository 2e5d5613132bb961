// The kernels musa serves itself: allocation, views and storage metadata,
// copies between devices, and reading a scalar. Everything else goes to the
// fallback (fallback.cpp).
#include "core/MUSACachingAllocator.h"
#include "core/MUSAGenerator.h"
#include "aten/kernel_alias.h"
#include "aten/kernel_call.h"
#include "aten/kernel_threads.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace torch_musa {

namespace {

const c10::DispatchKeySet kMusaKeys(c10::DispatchKey::PrivateUse1);

// The index an allocation's `device` argument names (the current one if none).
c10::DeviceIndex checked_index(std::optional<c10::Device> d) {
  const auto idx = d && d->has_index() ? d->index() : current_device();
  check_device(idx);
  return idx;
}

void check_no_pin(std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false),
              "Only dense CPU tensors can be pinned; musa tensors cannot.");
}

// Under torch.use_deterministic_algorithms(True) new memory is NaN (or the
// integer maximum), as the CPU and CUDA make it, so reads of uninitialised
// memory show instead of passing silently.
at::Tensor& fill_if_deterministic(at::Tensor& t) {
  if (C10_UNLIKELY(at::globalContext().deterministicAlgorithms() &&
                   at::globalContext().deterministicFillUninitializedMemory()))
    at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout,
                               std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  check_no_pin(pin_memory);
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "musa supports only strided tensors, got layout ", *layout);
  DeviceSwitch guard(checked_index(device));
  at::Tensor t = at::detail::empty_generic(size, &device_allocator(), kMusaKeys,
                                           c10::dtype_or_default(dtype), memory_format);
  return fill_if_deterministic(t);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout,
                         std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_no_pin(pin_memory);
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "musa supports only strided tensors, got layout ", *layout);
  DeviceSwitch guard(checked_index(device));
  at::Tensor t = at::detail::empty_strided_generic(size, stride, &device_allocator(),
                                                   kMusaKeys, c10::dtype_or_default(dtype));
  return fill_if_deterministic(t);
}

size_t storage_bytes_needed(const c10::TensorImpl* impl) {
  if (impl->numel() == 0) return 0;
  return at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                          impl->dtype().itemsize(),
                                          impl->storage_offset());
}

void grow_storage(c10::TensorImpl* impl) {
  const size_t need = storage_bytes_needed(impl);
  if (need > impl->storage().nbytes())
    resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), need);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  const int64_t old_nbytes = impl->storage().nbytes();
  at::native::resize_impl_cpu_(impl, size, std::nullopt, /*resize_storage=*/false);
  grow_storage(impl);
  if (C10_UNLIKELY(at::globalContext().deterministicAlgorithms() &&
                   at::globalContext().deterministicFillUninitializedMemory()))
    at::native::fill_resize_deterministic_(self, old_nbytes);  // the grown part only
  if (memory_format && *memory_format != at::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source,
                               int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  at::OptionalIntArrayRef st =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  at::native::resize_impl_cpu_(impl, size, st, /*resize_storage=*/false);
  grow_storage(impl);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t n = int64_t(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.unsafeGetTensorImpl() == src.unsafeGetTensorImpl()) return self;
  return set_storage_offset(self, src.storage(), src.storage_offset(),
                            src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device_allocator(),
                       /*resizable=*/true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

bool copyable(const at::Tensor& t) {
  return t.device().is_cpu() || t.device().type() == config().kernel_type;
}

// The kernel-device form of `self` for a copy into `out` (the alias of a musa
// destination): one host storage for one musa storage, so that the kernel's copy
// refuses a partial overlap (x[1:] = x[:-1]) as the CPU device does.
at::Tensor copy_source_alias(const at::Tensor& self, const at::Tensor& dst,
                             const at::Tensor& out) {
  if (dst.is_privateuseone() && self.storage().is_alias_of(dst.storage()))
    return kernel_alias_over(out.storage(), self);
  return kernel_alias(self, /*materialize=*/false);  // only read
}

// The copy itself, between kernel-device tensors (or a CPU one): parallel when large,
// one span in torch.profiler, the kernel's own op calls left out of the record.
void kernel_copy(const at::Tensor& out, const at::Tensor& src, bool non_blocking,
                 const char* span_name, c10::DeviceIndex device) {
  KernelThreads threads;
  profiler::CopySpan span(span_name, device, int64_t(out.numel()) * int64_t(out.element_size()));
  profiler::UnrecordedInternals internals;
  out.copy_(src, non_blocking);
}

// non_blocking is honoured by the kernels' own copy (the host driver copies
// eagerly; the cuda driver enqueues on the current stream).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.device().is_cpu() && share_unified(self, dst))  // unified memory: no copy
    return dst;
  at::Tensor out = dst.is_privateuseone() ? kernel_alias(dst) : dst;
  at::Tensor src = self.is_privateuseone() ? copy_source_alias(self, dst, out) : self;
  TORCH_CHECK(copyable(src) && copyable(out),
              "musa cannot copy between ", self.device(), " and ", dst.device());
  // An empty copy moves nothing and waits for nothing, as CUDA's returns before its
  // copy (Hugging Face's cache starts every layer's keys and values as
  // torch.tensor([], device=...): a GPT-2 step made 24 of them).
  const bool blocking = !non_blocking && dst.numel() != 0;
  if (C10_UNLIKELY(sync_debug_mode() != 0) && blocking &&
      self.is_privateuseone() != dst.is_privateuseone())
    sync_point("a blocking copy between musa and the host");
  // A blocking copy to the host returns once the work queued on the current
  // stream has run, as CUDA's does (host_read_wait, driver/Driver.h).
  if (blocking && self.is_privateuseone() && !dst.is_privateuseone())
    wait_for_host_read(current_stream(self.device().index()));
  kernel_copy(out, src, non_blocking,
              !self.is_privateuseone() ? "Memcpy HtoD"
              : dst.is_privateuseone() ? "Memcpy DtoD" : "Memcpy DtoH",
              dst.is_privateuseone() ? dst.device().index() : self.device().index());
  // A pinned block freed while this copy may still run is not reused before it has.
  if (non_blocking && self.is_privateuseone() != dst.is_privateuseone()) {
    const at::Tensor& host = self.is_privateuseone() ? dst : self;
    const auto d = self.is_privateuseone() ? self.device().index() : dst.device().index();
    if (host.device().is_cpu()) record_pinned_use(host.storage().data(), current_stream(d));
  }
  if (DebugHook check = value_check_hook(); C10_UNLIKELY(check != nullptr))
    check("aten::_copy_from", {self, dst}, {dst});  // NaN/Inf entering musa from a CPU tensor
  return dst;
}

// copy_ within one musa device (a training step's casts: hundreds per step) runs the
// kernel device's copy_ on aliases here. PyTorch's generic copy_ reaches the same
// copy through _copy_from: a second dispatch, and the destination returned by value,
// which takes and drops a reference to its Python object under the GIL. Every other
// copy (another device, the host, zero tensors) takes the generic path.
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (!self.is_privateuseone() || !src.is_privateuseone() || self.device() != src.device() ||
      self._is_zerotensor() || src._is_zerotensor())
    return at::native::copy_(self, src, non_blocking);
  if (self.is_same(src)) return self;
  at::Tensor out = kernel_alias(self);
  at::Tensor in = copy_source_alias(src, self, out);
  kernel_copy(out, in, non_blocking, "Memcpy DtoD", self.device().index());
  recycle_alias(in);  // the source first: an alias over the destination's storage holds it
  in.reset();
  recycle_alias(out);
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  sync_point("_local_scalar_dense (.item())");
  wait_for_host_read(current_stream(self.device().index()));
  profiler::CopySpan span("Memcpy DtoH", self.device().index(), int64_t(self.element_size()));
  profiler::UnrecordedInternals internals;
  return at::_local_scalar_dense(kernel_alias(self, /*materialize=*/false));
}

// Convolution reaches an out-of-tree backend only through these two ops.
c10::DeviceIndex common_device(std::initializer_list<const at::Tensor*> ts) {
  c10::DeviceIndex d = -1;
  for (const at::Tensor* t : ts) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->is_privateuseone() && (d < 0 || t->device().index() == d),
                "Expected all tensors to be on the same device, but found at "
                "least two devices, musa:", int(d < 0 ? t->device().index() : d),
                " and ", t->device(), "! (convolution)");
    d = t->device().index();
  }
  return d;
}

at::Tensor on_kernel_device(const at::Tensor& t) {
  return t.defined() ? kernel_alias(t) : t;
}

at::Tensor to_device(const at::Tensor& h, c10::DeviceIndex d) {
  if (!h.defined()) return h;
  return musa_tensor_over(adopt_storage(h, d, 1), h);
}

// float16/bfloat16 convolutions accumulate in float32, as CUDA's and MUSA's kernels
// do: the CPU's half-precision kernels round partial sums (the backward was off by
// up to 7.8 % relative), so the host computes in float32 and rounds once at the end.
// A driver with device kernels (cuDNN) already accumulates in float32: upcasting
// there ran a float32 kernel at half the bfloat16 speed (2.03x on an H200).
at::Tensor accumulate_in_float(const at::Tensor& h, const at::Tensor& input) {
  const auto t = input.scalar_type();
  if (!h.defined() || (t != at::kHalf && t != at::kBFloat16) ||
      driver().kernel_device_type() != c10::DeviceType::CPU)
    return h;
  return h.to(at::kFloat);
}

at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups) {
  const at::Tensor b = bias.value_or(at::Tensor());
  const auto d = common_device({&input, &weight, &b});
  profiler::KernelSpan span("aten::convolution_overrideable", "", &d);
  profiler::UnrecordedInternals internals;
  KernelAllocationScope scope(d);
  KernelThreads threads;
  const auto acc = [&](const at::Tensor& t) { return accumulate_in_float(on_kernel_device(t), input); };
  at::Tensor out = at::convolution(acc(input), acc(weight),
                                   b.defined() ? std::optional<at::Tensor>(acc(b))
                                               : std::nullopt,
                                   stride, padding, dilation, transposed,
                                   output_padding, groups);
  at::Tensor result = to_device(out.to(input.scalar_type()), d);
  if (DebugHook check = value_check_hook(); C10_UNLIKELY(check != nullptr))
    check("aten::convolution_overrideable",
                 {input, weight, b.defined() ? c10::IValue(b) : c10::IValue()}, {result});
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, c10::IntArrayRef stride, c10::IntArrayRef padding,
    c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const auto d = common_device({&grad_output, &input, &weight});
  std::optional<std::vector<int64_t>> bias_sizes;
  if (output_mask[2])
    bias_sizes = std::vector<int64_t>{transposed ? weight.size(1) * groups
                                                 : weight.size(0)};
  profiler::KernelSpan span("aten::convolution_backward_overrideable", "", &d);
  profiler::UnrecordedInternals internals;
  KernelAllocationScope scope(d);
  KernelThreads threads;
  const auto acc = [&](const at::Tensor& t) { return accumulate_in_float(on_kernel_device(t), input); };
  auto [gi, gw, gb] = at::convolution_backward(
      acc(grad_output), acc(input), acc(weight),
      bias_sizes ? at::OptionalIntArrayRef(*bias_sizes) : std::nullopt, stride,
      padding, dilation, transposed, output_padding, groups, output_mask);
  const auto back = [&](const at::Tensor& g, const at::Tensor& like) {
    return to_device(g.defined() ? g.to(like.scalar_type()) : g, d);
  };
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result{back(gi, input), back(gw, weight),
                                                         back(gb, grad_output)};
  if (DebugHook check = value_check_hook(); C10_UNLIKELY(check != nullptr))
    check("aten::convolution_backward_overrideable", {grad_output, input, weight},
          {std::get<0>(result), std::get<1>(result), std::get<2>(result)});
  return result;
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  device_allocator().recordStream(self.storage().data_ptr(), stream);
}

// aten::dropout sends every accelerator, PrivateUse1 included, to the fused
// native_dropout; the CPU device takes the composite (float noise, one multiply).
// With host kernels the composite is what the CPU device computes (same draws, same
// results) and it skips native_dropout's bool mask, whose promotion to float in the
// forward and backward multiplies was ~6 M of the small transformer step's 82 M
// instructions. A driver with kernels of its own keeps the fused kernel. Registered
// above autograd (which then records the composite's ops, as on the CPU device) and
// at PrivateUse1 (inference mode skips the autograd keys).
at::Tensor dropout(const at::Tensor& input, double p, bool train) {
  if (driver().kernel_device_type() != c10::DeviceType::CPU && train && p > 0 && p < 1 &&
      input.sym_numel() > 0)
    return std::get<0>(at::native_dropout(input, p, train));
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (p == 0 || !train || input.sym_numel() == 0) return input;
  if (p == 1) return input.mul(at::zeros({}, input.options()));
  at::Tensor noise = at::empty_like(input);
  noise.bernoulli_(1 - p);
  noise.div_(1 - p);
  return input.mul(noise);
}

// Module.to() keeps Parameter objects (and so tied weights, optimizers built
// before the move, hooks) only when this answers True for the old and new
// tensor, as it does for CPU/CUDA pairs. Stock c10 lists only its own dense
// backends; the real torch_musa patches TensorImpl.h to add PrivateUse1. Any
// pair with a musa tensor dispatches here, so musa joins the dense set without
// a patch.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const c10::DispatchKeySet a = self.key_set(), b = from.key_set();
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(b)) return true;
  auto dense = [](c10::DispatchKeySet ks) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
         c10::BackendComponent::MPSBit, c10::BackendComponent::HIPBit,
         c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has(c10::DispatchKey::Dense) && ks.has_any(backends);
  };
  return dense(a) && dense(b);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  // The only other aten views with per-backend kernels (found by listing every op
  // whose results alias an input and that has a CPU kernel but no composite one):
  // pure metadata, so no trip through the fallback and its once-per-op warning.
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_", set_empty);
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", record_stream);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
  m.impl("dropout", dropout);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("dropout", dropout);
}

// Copies resolve conjugation and negation themselves; without these the
// Conjugate/Negative fallbacks would recurse through resolve_conj.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace torch_musa
