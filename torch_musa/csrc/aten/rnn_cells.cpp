// The fused LSTM/GRU cells on musa.
//
// at::lstm/gru/lstm_cell/gru_cell take the fused-cell path for any PrivateUse1
// input (PyTorch's native/RNN.cpp), and PyTorch ships
// _thnn_fused_lstm_cell/_thnn_fused_gru_cell and their backwards for CUDA only.
// These follow the CUDA kernels' semantics (pointwise math in the accumulate
// type, float for half/bfloat16) and workspace layouts, so the autograd formulas
// of derivatives.yaml (the fused backward, and _thnn_differentiable_* under
// create_graph) apply unchanged. A cell is one musa op: its arguments become
// kernel-device aliases once (KernelCall, through UnboxedKernel) and its
// pointwise steps are the kernel device's own ops on them, so a timestep costs
// one device op call rather than one per pointwise step.
#include "aten/unboxed_kernel.h"

#include <ATen/Functions.h>
#include <ATen/ops/_thnn_fused_gru_cell_backward_ops.h>
#include <ATen/ops/_thnn_fused_gru_cell_ops.h>
#include <ATen/ops/_thnn_fused_lstm_cell_backward_impl_ops.h>
#include <ATen/ops/_thnn_fused_lstm_cell_ops.h>
#include <torch/library.h>

#include <set>
#include <sstream>
#include <string>

namespace torch_musa {

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

// ---- the math, on kernel-device tensors ------------------------------------

bool reduced(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The tensor in the kernels' accumulate type.
Tensor acc(const Tensor& t) { return reduced(t) ? t.to(at::kFloat) : t; }

// Gate k of the n gates packed along dim 1 of a [batch, n*hidden] tensor.
Tensor gate(const Tensor& t, int64_t k, int64_t n) {
  const int64_t h = t.size(1) / n;
  return t.narrow(1, k * h, h);
}

// 1 - t, as Python's `1 - t` computes it (aten::rsub).
Tensor one_minus(const Tensor& t) { return at::rsub(t, 1); }

bool has(const OptTensor& t) { return t.has_value() && t->defined(); }

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                             const Tensor& cx, const OptTensor& input_bias,
                                             const OptTensor& hidden_bias) {
  // input + hidden (+ input_bias + hidden_bias), summed in that order as CUDA does.
  Tensor gates = at::add(acc(input_gates), acc(hidden_gates));
  if (has(input_bias)) gates.add_(acc(*input_bias)).add_(acc(*hidden_bias));
  Tensor i = gate(gates, 0, 4), f = gate(gates, 1, 4), g = gate(gates, 2, 4), o = gate(gates, 3, 4);
  i.sigmoid_();
  f.sigmoid_();
  g.tanh_();
  o.sigmoid_();
  Tensor cy = at::add(at::mul(f, acc(cx)), at::mul(i, g));
  Tensor hy = at::mul(o, at::tanh(cy));
  const auto dtype = input_gates.scalar_type();
  return {hy.to(dtype), cy.to(dtype), gates.to(dtype)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const OptTensor& grad_hy,
                                                      const OptTensor& grad_cy, const Tensor& cx,
                                                      const Tensor& cy, const Tensor& workspace,
                                                      bool has_bias) {
  if (!has(grad_hy) && !has(grad_cy)) return {};
  Tensor ws = acc(workspace);
  Tensor i = gate(ws, 0, 4), f = gate(ws, 1, 4), g = gate(ws, 2, 4), o = gate(ws, 3, 4);
  Tensor tanh_cy = at::tanh(acc(cy));
  // d(cy): through hy = o * tanh(cy), plus the gradient arriving at cy itself.
  Tensor grad_o, grad_c;
  if (has(grad_hy)) {
    Tensor go = acc(*grad_hy);
    grad_o = at::mul(go, tanh_cy);
    grad_c = at::mul(at::mul(go, o), one_minus(at::mul(tanh_cy, tanh_cy)));
    if (has(grad_cy)) grad_c = at::add(grad_c, acc(*grad_cy));
  } else {
    grad_o = at::zeros_like(tanh_cy);
    grad_c = acc(*grad_cy);
  }
  const auto dtype = workspace.scalar_type();
  Tensor grad_gates = at::cat({at::mul(at::mul(at::mul(grad_c, g), one_minus(i)), i),
                               at::mul(at::mul(at::mul(grad_c, acc(cx)), one_minus(f)), f),
                               at::mul(at::mul(grad_c, i), one_minus(at::mul(g, g))),
                               at::mul(at::mul(grad_o, one_minus(o)), o)},
                              1)
                           .to(dtype);
  Tensor grad_cx = at::mul(grad_c, f).to(dtype);
  Tensor grad_bias = has_bias ? at::sum(grad_gates, at::IntArrayRef{0}) : Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                    const Tensor& hx, const OptTensor& input_bias,
                                    const OptTensor& hidden_bias) {
  const int64_t h = hx.size(1);
  Tensor ig = acc(input_gates), hg = acc(hidden_gates);
  Tensor rz = at::add(ig.narrow(1, 0, 2 * h), hg.narrow(1, 0, 2 * h));
  Tensor in = ig.narrow(1, 2 * h, h), hn = hg.narrow(1, 2 * h, h);
  if (has(input_bias)) {
    Tensor ib = acc(*input_bias), hb = acc(*hidden_bias);
    rz.add_(ib.narrow(0, 0, 2 * h)).add_(hb.narrow(0, 0, 2 * h));
    in = at::add(in, ib.narrow(0, 2 * h, h));
    hn = at::add(hn, hb.narrow(0, 2 * h, h));
  }
  rz.sigmoid_();
  Tensor r = rz.narrow(1, 0, h), z = rz.narrow(1, h, h);
  Tensor n = at::add(in, at::mul(r, hn)).tanh_();
  Tensor hx_acc = acc(hx);
  Tensor hy = at::add(n, at::mul(z, at::sub(hx_acc, n)));
  const auto dtype = input_gates.scalar_type();
  return {hy.to(dtype), at::cat({rz, n, hx_acc, hn}, 1).to(dtype)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(const Tensor& grad_hy,
                                                                     const Tensor& workspace,
                                                                     bool has_bias) {
  Tensor ws = acc(workspace);
  Tensor r = gate(ws, 0, 5), z = gate(ws, 1, 5), n = gate(ws, 2, 5), hx = gate(ws, 3, 5),
         hn = gate(ws, 4, 5);
  Tensor go = acc(grad_hy);
  Tensor grad_z = at::mul(at::mul(at::mul(go, at::sub(hx, n)), one_minus(z)), z);
  Tensor grad_n = at::mul(at::mul(go, one_minus(z)), one_minus(at::mul(n, n)));
  Tensor grad_r = at::mul(at::mul(at::mul(grad_n, hn), one_minus(r)), r);
  const auto dtype = workspace.scalar_type();
  Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1).to(dtype);
  Tensor grad_hidden_gates = at::cat({grad_r, grad_z, at::mul(grad_n, r)}, 1).to(dtype);
  Tensor grad_hx = at::mul(go, z).to(dtype);
  if (!has_bias) return {grad_input_gates, grad_hidden_gates, grad_hx, Tensor(), Tensor()};
  return {grad_input_gates, grad_hidden_gates, grad_hx,
          at::sum(grad_input_gates, at::IntArrayRef{0}),
          at::sum(grad_hidden_gates, at::IntArrayRef{0})};
}

// An aten op served by `Impl` on the kernel device, in UnboxedKernel's Op shape.
template <class AtenOp, auto Impl>
struct KernelImpl {
  static constexpr const char* name = AtenOp::name;
  static constexpr const char* overload_name = AtenOp::overload_name;
  using schema = typename AtenOp::schema;
  template <class... A>
  static auto redispatch(c10::DispatchKeySet, A&&... a) {
    return Impl(std::forward<A>(a)...);
  }
};

template <class AtenOp, auto Impl>
using Kernel = unboxed::UnboxedKernel<KernelImpl<AtenOp, Impl>>;

// ---- the CUDA kernels' argument checks, with the caller's names ---------------

std::string shape(const Tensor& t) {  // as Python prints tuple(t.shape)
  std::ostringstream s;
  s << "(";
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? ", " : "") << t.size(d);
  s << (t.dim() == 1 ? ",)" : ")");
  return s.str();
}

std::string sorted_list(const std::set<std::string>& items) {
  std::string s = "[";
  for (const auto& it : items) s += (s.size() > 1 ? ", '" : "'") + it + "'";
  return s + "]";
}

void check_gates(const char* op, const Tensor& input_gates, const Tensor& hidden_gates,
                 const OptTensor& input_bias, const OptTensor& hidden_bias, int64_t factor,
                 const Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": input_gates must be 2-D [batch, ", factor,
              "*hidden], got shape ", shape(input_gates));
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op, ": hidden_gates has shape ",
              shape(hidden_gates), ", expected input_gates' ", shape(input_gates));
  TORCH_CHECK(has(input_bias) == has(hidden_bias), op,
              ": input_bias and hidden_bias must both be given or both be None");
  const int64_t gates = input_gates.size(1);
  if (has(input_bias)) {
    using Named = std::pair<const char*, const Tensor*>;
    for (auto [name, b] : {Named{"input_bias", &*input_bias}, Named{"hidden_bias", &*hidden_bias}})
      TORCH_CHECK(b->dim() == 1 && b->numel() == gates, op, ": ", name, " must be 1-D with ", gates,
                  " elements, got shape ", shape(*b));
  }
  TORCH_CHECK(prev.dim() == 2 && prev.numel() * factor == input_gates.size(0) * gates, op,
              ": the previous state must be 2-D [batch, hidden] = [", input_gates.size(0), ", ",
              gates / factor, "], got shape ", shape(prev));
  std::set<std::string> devices, dtypes;
  for (const Tensor* t : {&input_gates, &hidden_gates, &prev}) {
    devices.insert(t->device().str());
    dtypes.insert(c10::toString(t->scalar_type()));
  }
  for (const OptTensor* t : {&input_bias, &hidden_bias})
    if (has(*t)) {
      devices.insert((*t)->device().str());
      dtypes.insert(c10::toString((*t)->scalar_type()));
    }
  TORCH_CHECK(devices.size() == 1, op, ": all tensors must be on one device, got ",
              sorted_list(devices));
  TORCH_CHECK(dtypes.size() == 1, op, ": all tensors must have one dtype, got ",
              sorted_list(dtypes));
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates,
                                                   const Tensor& hidden_gates, const Tensor& cx,
                                                   const OptTensor& input_bias,
                                                   const OptTensor& hidden_bias) {
  check_gates("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx);
  return Kernel<at::_ops::_thnn_fused_lstm_cell, lstm_cell>::call(input_gates, hidden_gates, cx,
                                                                   input_bias, hidden_bias);
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward(const OptTensor& grad_hy,
                                                            const OptTensor& grad_cy,
                                                            const Tensor& cx, const Tensor& cy,
                                                            const Tensor& workspace,
                                                            bool has_bias) {
  if (!has(grad_hy) && !has(grad_cy)) return {};
  const Tensor& grad = has(grad_hy) ? *grad_hy : *grad_cy;
  const char* op = "_thnn_fused_lstm_cell_backward";
  TORCH_CHECK(grad.dim() == 2, op, ": gradients must be 2-D, got shape ", shape(grad));
  using Named = std::pair<const char*, const Tensor*>;
  for (auto [name, t] : {Named{"grad_hy", has(grad_hy) ? &*grad_hy : nullptr},
                         Named{"grad_cy", has(grad_cy) ? &*grad_cy : nullptr}, Named{"cx", &cx},
                         Named{"cy", &cy}})
    TORCH_CHECK(!t || t->sizes() == grad.sizes(), op, ": ", name, " has shape ", shape(*t),
                ", expected ", shape(grad));
  TORCH_CHECK(workspace.dim() == 2 && workspace.numel() == 4 * grad.numel(), op,
              ": workspace must be 2-D with ", 4 * grad.numel(), " elements, got shape ",
              shape(workspace));
  return Kernel<at::_ops::_thnn_fused_lstm_cell_backward_impl, lstm_cell_backward>::call(
      grad_hy, grad_cy, cx, cy, workspace, has_bias);
}

std::tuple<Tensor, Tensor> fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                          const Tensor& hx, const OptTensor& input_bias,
                                          const OptTensor& hidden_bias) {
  check_gates("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx);
  return Kernel<at::_ops::_thnn_fused_gru_cell, gru_cell>::call(input_gates, hidden_gates, hx,
                                                                 input_bias, hidden_bias);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 &&
                  workspace.size(0) == grad_hy.size(0) && workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: grad_hy must be 2-D [batch, hidden] and the "
              "workspace [batch, 5*hidden]; got ",
              shape(grad_hy), " and ", shape(workspace));
  return Kernel<at::_ops::_thnn_fused_gru_cell_backward, gru_cell_backward>::call(
      grad_hy, workspace, has_bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace torch_musa
