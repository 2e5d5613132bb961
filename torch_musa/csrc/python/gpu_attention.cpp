// scaled_dot_product_attention under the cuda driver, in C++.
//
// PyTorch's composite sends a non-CUDA device to the CPU's flash kernel, so musa
// serves the op itself: ask the GPU's rule (_fused_sdp_choice, answered on CUDA
// aliases by the musa wrapper) and call the chosen GPU kernel, each with its own
// autograd formula. torch_musa/attention/gpu.py holds the same steps in Python,
// and the rule for traced (fake) inputs, which only Python can ask; this kernel
// runs the eager calls, where the Python entry cost a GPT-2 attention call about
// twice native's host time (32.7 against 17.1 µs in run 7's op table), and hands
// traced calls to the Python entry. The ops it calls, and their backward ops, get
// unboxed musa wrappers here: through the boxed fallback each call took 12-15 µs more
// host time than native's in torch.profiler, ~0.5 ms per GPT-2 step of 36 calls.
#include "aten/unboxed_kernel.h"
#include "core/Device.h"

#include <ATen/ATen.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_ops.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>

namespace torch_musa {

namespace {

// sdp::SDPBackend, as _fused_sdp_choice returns it.
constexpr int64_t kFlash = 1, kEfficient = 2, kCudnn = 3;

// gpu._sdpa: the same steps, for inputs this kernel leaves to Python.
py::object* g_python_entry = nullptr;

// Fake, functional or other Python-backed tensors (torch.compile and export trace
// through them), and a mask that requires grad (CUDA's rule must see it require
// grad, which the wrapper's CUDA aliases do not): the Python entry asks the rule
// of real stand-ins there.
bool needs_python(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& mask) {
  const c10::DispatchKeySet traced{c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                   c10::DispatchKey::PythonTLSSnapshot};
  auto is_traced = [&](const at::Tensor& t) { return t.key_set().has_any(traced); };
  if (is_traced(q) || is_traced(k) || is_traced(v)) return true;
  return mask && mask->defined() && (is_traced(*mask) || mask->requires_grad());
}

// A boolean mask becomes an additive one, as PyTorch's composite makes it after the
// choice: -inf where masked, -65504 for cuDNN (convert_boolean_attn_mask_cudnn).
std::optional<at::Tensor> float_mask(const std::optional<at::Tensor>& mask,
                                     c10::ScalarType dtype, bool cudnn) {
  if (!mask || !mask->defined() || mask->scalar_type() != at::kBool) return mask;
  const at::Tensor zero = at::zeros({}, mask->options().dtype(dtype));
  const double fill = cudnn ? -65504.0 : -std::numeric_limits<double>::infinity();
  return at::where(mask->logical_not(), fill, zero);
}

// The memory-efficient kernel wants a bias whose rows are 16-aligned: pad, slice
// back, expand to (batch, heads, queries, keys).
at::Tensor efficient_bias(at::Tensor mask, const at::Tensor& q, const at::Tensor& k) {
  bool aligned = mask.stride(-1) == 1;
  for (int64_t d = 0; d + 1 < mask.dim(); ++d) aligned = aligned && mask.stride(d) % 16 == 0;
  if (!aligned) {
    const int64_t n = mask.size(-1);
    mask = at::pad(mask, {0, 16 - n % 16}).slice(-1, 0, n);
  }
  return mask.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

at::Tensor python_entry(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& mask, double dropout_p,
                        bool is_causal, std::optional<double> scale, bool enable_gqa) {
  TORCH_INTERNAL_ASSERT(g_python_entry, "the Python attention entry is not registered");
  py::gil_scoped_acquire gil;
  return (*g_python_entry)(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa)
      .cast<at::Tensor>();
}

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool enable_gqa) {
  if (needs_python(q, k, v, mask))
    return python_entry(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  // PyTorch's composite asks its rule with the mask as given, then converts it.
  const int64_t choice =
      at::_fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  const std::optional<at::Tensor> m = float_mask(mask, q.scalar_type(), choice == kCudnn);
  const bool grad = c10::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (choice == kFlash) {
    // The flash kernel takes head dims that are multiples of 8: pad, slice back.
    const int64_t head = q.size(-1);
    const int64_t pad = (8 - head % 8) % 8;
    auto padded = [&](const at::Tensor& t) { return pad ? at::pad(t, {0, pad}) : t; };
    const at::Tensor out = std::get<0>(at::_scaled_dot_product_flash_attention(
        padded(q), padded(k), padded(v), dropout_p, is_causal, /*return_debug_mask=*/false,
        scale ? *scale : std::pow(static_cast<double>(head), -0.5)));
    return pad ? out.slice(-1, 0, head) : out;
  }
  if (choice == kEfficient) {
    const std::optional<at::Tensor> bias =
        m && m->defined() ? std::optional<at::Tensor>(efficient_bias(*m, q, k)) : std::nullopt;
    return std::get<0>(at::_scaled_dot_product_efficient_attention(
        q, k, v, bias, grad, dropout_p, is_causal, scale));
  }
  if (choice == kCudnn)
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(
        q, k, v, m, grad, dropout_p, is_causal, /*return_debug_mask=*/false, scale));
  return std::get<0>(at::_scaled_dot_product_attention_math(
      q, k, v, m, dropout_p, is_causal, /*dropout_mask=*/std::nullopt, scale, enable_gqa));
}

template <class Op> void impl_unboxed(torch::Library& lib) {
  lib.impl(Op::name, TORCH_FN(unboxed::UnboxedKernel<Op>::call));
}

// Installs the kernel on both keys (autograd's, and the backend's for calls made
// below autograd), and the GPU kernels' unboxed wrappers (musa_functions.yaml lists
// them for this driver); `python_entry`: gpu._sdpa. Once per process.
void register_gpu_sdpa(py::object python_entry) {
  if (g_python_entry) return;
  g_python_entry = new py::object(std::move(python_entry));  // lives as long as the kernel
  for (const auto key : {c10::DispatchKey::AutogradPrivateUse1, c10::DispatchKey::PrivateUse1}) {
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
    lib->impl("scaled_dot_product_attention", TORCH_FN(sdpa));
    // The wrappers run CUDA's kernels: only where musa's kernels are CUDA's (the host
    // driver's test of this entry registers it over CPU kernels, which have none).
    if (key != c10::DispatchKey::PrivateUse1 || config().kernel_type != c10::DeviceType::CUDA)
      continue;
    impl_unboxed<at::_ops::_fused_sdp_choice>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_flash_attention>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_flash_attention_backward>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_efficient_attention>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_efficient_attention_backward>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_cudnn_attention>(*lib);
    impl_unboxed<at::_ops::_scaled_dot_product_cudnn_attention_backward>(*lib);
  }
}

}  // namespace

void init_gpu_attention(py::module_& m) {
  m.def("_register_gpu_sdpa", &register_gpu_sdpa);
}

}  // namespace torch_musa
