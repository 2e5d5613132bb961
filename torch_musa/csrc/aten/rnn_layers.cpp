// The recurrent layers of the host driver (nn.RNN, nn.LSTM, nn.GRU), with the
// CPU device's branch of PyTorch's composite.
//
// at::rnn_tanh/rnn_relu/lstm/gru are composite: every step is a dispatched op.
// Their layers (FullLayer, FullBidirectionalLayer, PackedLayer in
// PyTorch's native/RNN.cpp) project the whole sequence's inputs in one matmul
// *only if the input is on the CPU*; any other device projects each step's rows
// separately, two more matmuls per step forward and backward, and as many
// weight-gradient accumulations. The two are equal in exact arithmetic, but MKL
// picks its sgemm kernel by the row count, and on an AVX-512 CPU the [batch, in]
// and [seq*batch, in] products round differently (6e-8 on nn.RNN(10, 6,
// num_layers=3); equal under MKL_CBWR=AVX2).
//
// These kernels are that composite with the CPU's branch taken, for every input
// and packed sequence, one- or two-directional, with or without biases, dropout
// between layers. The tanh/ReLU cells are the CPU's ops in the CPU's order (the
// same calls, so the same bits). In training, a float32 LSTM on padded input
// takes oneDNN's layers as the CPU device does; other LSTM and GRU steps keep the
// fused cells of PrivateUse1 (rnn_cells.cpp: CUDA's gate order, workspaces and
// bias sums) on the projected inputs; inference on padded input takes the CPU
// device's whole layer. Registered above autograd, which records these ops as it
// records the composite's. A driver whose kernels are not the CPU's takes
// PyTorch's composite itself.
#include "aten/rnn_layers.h"

#include "aten/unboxed_kernel.h"
#include "driver/Driver.h"

#include <ATen/Functions.h>
#include <ATen/ops/gru.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mkldnn_rnn_layer.h>
#include <ATen/ops/mkldnn_rnn_layer_backward.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

namespace torch_musa {

namespace {

using at::Tensor;

std::atomic<bool> g_cpu_layers{true};  // set_rnn_cpu_layers
bool cpu_layers() { return g_cpu_layers.load(std::memory_order_relaxed); }

struct Params {  // one layer and direction, as gather_params groups them
  Tensor w_ih, w_hh;
  std::optional<Tensor> b_ih, b_hh;
  Tensor w_hr;  // LSTM projections only
};

std::vector<Params> layer_params(at::TensorList params, bool has_biases, bool has_projections) {
  const size_t step = (has_biases ? 4 : 2) + (has_projections ? 1 : 0);
  TORCH_CHECK(params.size() % step == 0, "got an incorrect number of RNN parameters: ",
              params.size(), " is not a multiple of ", step);
  std::vector<Params> groups;
  for (size_t i = 0; i < params.size(); i += step) {
    Params p{params[i], params[i + 1], std::nullopt, std::nullopt, Tensor()};
    if (has_biases) p.b_ih = params[i + 2], p.b_hh = params[i + 3];
    if (has_projections) p.w_hr = params[i + step - 1];
    groups.push_back(std::move(p));
  }
  return groups;
}

// check_attributes: every tensor on the input's device.
void check_devices(const Tensor& input, at::TensorList hx, at::TensorList params) {
  const auto device = input.device();
  for (const Tensor& h : hx)
    TORCH_CHECK(h.device() == device, "Input and hx tensors are not at the same device, found ",
                "input tensor at ", device, " and hx tensor at ", h.device());
  for (size_t i = 0; i < params.size(); ++i)
    TORCH_CHECK(params[i].device() == device, "Input and parameter ", i,
                " tensors are not at the same device, found input tensor at ", device,
                " and parameter ", i, " tensor at ", params[i].device());
}

// A hidden state: h, and for LSTM the cell state c.
struct State {
  Tensor h, c;
  State narrow(int64_t start, int64_t n) const {
    return {h.narrow(0, start, n), c.defined() ? c.narrow(0, start, n) : Tensor()};
  }
};

State cat_rows(const std::vector<State>& parts) {
  std::vector<Tensor> hs, cs;
  for (const auto& s : parts) {
    hs.push_back(s.h);
    if (s.c.defined()) cs.push_back(s.c);
  }
  return {at::cat(hs, 0), cs.empty() ? Tensor() : at::cat(cs, 0)};
}

// tanh/ReLU: the input projection with b_ih; a step is cell(linear_hh(h) + x).
template <Tensor (*nonlinearity)(const Tensor&)>
struct SimpleCell {
  static Tensor project(const Tensor& x, const Params& p) { return at::linear(x, p.w_ih, p.b_ih); }
  static State step(const Tensor& x, const State& s, const Params& p) {
    return {nonlinearity(at::linear(s.h, p.w_hh, p.b_hh).add_(x)), Tensor()};
  }
};
Tensor tanh_of(const Tensor& t) { return at::tanh(t); }
Tensor relu_of(const Tensor& t) { return at::relu(t); }

// The fused cells take the biases themselves: the projection is the bare matmul.
Tensor project_bare(const Tensor& x, const Params& p) { return at::matmul(x, p.w_ih.t()); }

struct LstmCell {
  static Tensor project(const Tensor& x, const Params& p) { return project_bare(x, p); }
  static State step(const Tensor& x, const State& s, const Params& p) {
    auto [hy, cy, workspace] =
        at::_thnn_fused_lstm_cell(x, at::matmul(s.h, p.w_hh.t()), s.c, p.b_ih, p.b_hh);
    if (p.w_hr.defined()) hy = at::matmul(hy, p.w_hr.t());
    return {hy, cy};
  }
};

// An LSTM direction without projections over a whole padded sequence, as one
// autograd node. Autograd through the steps records two matmuls per step, whose
// backward makes a [hidden, 4*hidden] weight gradient from `batch` rows at every
// step and accumulates it; here the steps run under no_grad and the backward
// computes the recurrent weight's gradient in one matmul over all steps (as
// oneDNN's LSTM does on the CPU device), the cells' backward being the fused one.
// Under create_graph the backward differentiates the steps themselves instead
// (recomputed from the saved inputs, so higher derivatives reach them).
struct LstmSequence : torch::autograd::Function<LstmSequence> {
  using Ctx = torch::autograd::AutogradContext;
  using List = torch::autograd::variable_list;

  // No biases: empty tensors stand in (an autograd node's inputs are defined tensors).
  static std::optional<Tensor> opt(const Tensor& t) {
    return t.defined() && t.numel() > 0 ? std::optional<Tensor>(t) : std::nullopt;
  }

  // The steps (differentiable when grad mode is on): outputs [T, B, H], hN, cN;
  // `cs`/`workspaces` collect each step's cell state and workspace if given.
  static List steps(const Tensor& projected, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                    const Tensor& b_ih, const Tensor& b_hh, bool reverse,
                    std::vector<Tensor>* cs = nullptr, std::vector<Tensor>* workspaces = nullptr) {
    const int64_t T = projected.size(0);
    const auto inputs = projected.unbind(0);
    std::vector<Tensor> hs(T);
    Tensor h = h0, c = c0;
    const Tensor w_t = w_hh.t();
    for (int64_t k = 0; k < T; ++k) {
      const int64_t t = reverse ? T - 1 - k : k;
      auto [hy, cy, ws] =
          at::_thnn_fused_lstm_cell(inputs[t], at::mm(h, w_t), c, opt(b_ih), opt(b_hh));
      hs[t] = h = hy;
      c = cy;
      if (cs) (*cs)[t] = cy, (*workspaces)[t] = ws;
    }
    return {at::stack(hs, 0), h, c};
  }

  static List forward(Ctx* ctx, const Tensor& projected, const Tensor& h0, const Tensor& c0,
                      const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
    const int64_t T = projected.size(0);
    std::vector<Tensor> cs(T), workspaces(T);
    List out = steps(projected, h0, c0, w_hh, b_ih, b_hh, reverse, &cs, &workspaces);
    ctx->save_for_backward({projected, h0, c0, w_hh, b_ih, b_hh});
    // Each step's incoming h, in time order (the output itself may be transposed in place).
    std::vector<Tensor> h_prev(T);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t before = reverse ? t + 1 : t - 1;
      h_prev[t] = before < 0 || before >= T ? h0 : out[0][before];
    }
    ctx->saved_data["h_prev"] = at::stack(h_prev, 0);
    ctx->saved_data["cs"] = std::move(cs);  // kept as the steps made them: no copies
    ctx->saved_data["workspaces"] = std::move(workspaces);
    ctx->saved_data["reverse"] = reverse;
    return out;
  }

  static List backward(Ctx* ctx, List grads) {
    const List saved = ctx->get_saved_variables();
    // saved[1] (h0) and saved[5] (b_hh) serve only differentiate_steps.
    const Tensor &projected = saved[0], &c0 = saved[2], &w_hh = saved[3], &b_ih = saved[4];
    const bool reverse = ctx->saved_data["reverse"].toBool();
    if (at::GradMode::is_enabled()) return differentiate_steps(ctx, saved, grads, reverse);
    const std::vector<Tensor> cs = ctx->saved_data["cs"].toTensorVector();
    const std::vector<Tensor> workspaces = ctx->saved_data["workspaces"].toTensorVector();
    const Tensor h_prev = ctx->saved_data["h_prev"].toTensor();
    const int64_t T = projected.size(0);
    const bool has_bias = opt(b_ih).has_value();
    const std::vector<Tensor> grad_out = grads[0].defined() ? grads[0].unbind(0) : std::vector<Tensor>();
    Tensor gh = grads[1], gc = grads[2];
    std::vector<Tensor> grad_gates(T);
    for (int64_t k = 0; k < T; ++k) {  // the forward's steps, last first
      const int64_t t = reverse ? k : T - 1 - k;
      const int64_t before = reverse ? t + 1 : t - 1;  // the step that fed this one
      const bool first = before < 0 || before >= T;
      // The gradient at this step's h: the output's, plus what reached hN or the next step.
      Tensor g = k > 0 || grad_out.empty() ? gh
                 : gh.defined()            ? at::add(grad_out[t], gh)
                                           : grad_out[t];
      auto [gates, grad_cx, grad_bias] = at::_thnn_fused_lstm_cell_backward_impl(
          opt(g), opt(gc), first ? c0 : cs[before], cs[t], workspaces[t], has_bias);
      if (!gates.defined()) {  // nothing reached this step yet
        gates = at::zeros_like(workspaces[t]);
        grad_cx = at::zeros_like(c0);
      }
      grad_gates[t] = gates;
      // Through hgates = h @ w_hh^T to the h that fed this step, with that step's output
      // gradient added in the same matmul.
      gh = first || grad_out.empty() ? at::mm(gates, w_hh) : at::addmm(grad_out[before], gates, w_hh);
      gc = grad_cx;
    }
    const Tensor all_gates = at::stack(grad_gates, 0);
    // Both stacked, so contiguous: view, not flatten, which functorch's batching layer
    // (gradcheck's batched gradients) has no rule for here.
    const Tensor grad_w_hh = at::mm(all_gates.view({-1, all_gates.size(-1)}).t(),
                                    h_prev.view({-1, h_prev.size(-1)}));
    const Tensor grad_b = has_bias ? at::sum(all_gates, at::IntArrayRef{0, 1}) : Tensor();
    return {all_gates, gh, gc, grad_w_hh, grad_b, grad_b, Tensor()};
  }

  static List differentiate_steps(Ctx* ctx, const List& saved, const List& grads, bool reverse) {
    List wrt;
    std::vector<size_t> at_index;
    for (size_t i = 0; i < 6; ++i)
      if (saved[i].numel() > 0 && ctx->needs_input_grad(i)) wrt.push_back(saved[i]), at_index.push_back(i);
    const List out = steps(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], reverse);
    List outs, grad_outs;
    for (size_t i = 0; i < 3; ++i)
      if (grads[i].defined()) outs.push_back(out[i]), grad_outs.push_back(grads[i]);
    List result(7);
    if (outs.empty() || wrt.empty()) return result;
    const List got = torch::autograd::grad(outs, wrt, grad_outs, /*retain_graph=*/true,
                                           /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t j = 0; j < got.size(); ++j) result[at_index[j]] = got[j];
    return result;
  }
};

// The LSTM sequence node applies where the padded layers step a whole sequence.
bool whole_sequence_lstm(const Params& p) { return !p.w_hr.defined(); }

std::pair<Tensor, State> lstm_sequence(const Tensor& projected, const State& s, const Params& p,
                                       bool reverse) {
  TORCH_CHECK(projected.size(0) > 0, "Expected sequence length to be larger than 0 in RNN");
  const Tensor none = p.b_ih ? Tensor() : at::empty({0}, p.w_hh.options());
  auto out = LstmSequence::apply(projected, s.h, s.c, p.w_hh, p.b_ih.value_or(none),
                                 p.b_hh.value_or(none), reverse);
  return {out[0], {out[1], out[2]}};
}

struct GruCell {
  static Tensor project(const Tensor& x, const Params& p) { return project_bare(x, p); }
  static State step(const Tensor& x, const State& s, const Params& p) {
    return {std::get<0>(at::_thnn_fused_gru_cell(x, at::matmul(s.h, p.w_hh.t()), s.h, p.b_ih,
                                                 p.b_hh)),
            Tensor()};
  }
};

using LayerOut = std::pair<Tensor, std::vector<State>>;  // output, final state per direction

// FullLayer over the whole sequence, the inputs projected in one matmul.
template <class Cell>
std::pair<Tensor, State> full_layer(const Tensor& x, State state, const Params& p) {
  if constexpr (std::is_same_v<Cell, LstmCell>)
    if (whole_sequence_lstm(p)) return lstm_sequence(Cell::project(x, p), state, p, false);
  const auto projected = Cell::project(x, p).unbind(0);
  std::vector<Tensor> outputs;
  outputs.reserve(projected.size());
  for (const auto& in : projected) {
    state = Cell::step(in, state, p);
    outputs.push_back(state.h);
  }
  TORCH_CHECK(!outputs.empty(), "Expected sequence length to be larger than 0 in RNN");
  return {at::stack(outputs, 0), state};
}

template <class Cell>
LayerOut bidirectional_layer(const Tensor& x, const State* states, const Params* ps) {
  auto [forward, fw_final] = full_layer<Cell>(x, states[0], ps[0]);
  if constexpr (std::is_same_v<Cell, LstmCell>)
    if (whole_sequence_lstm(ps[1])) {
      auto [backward, rev_final] = lstm_sequence(Cell::project(x, ps[1]), states[1], ps[1], true);
      return {at::cat({forward, backward}, forward.dim() - 1), {fw_final, rev_final}};
    }
  const auto projected = Cell::project(x, ps[1]).unbind(0);
  std::vector<Tensor> outputs(projected.size());
  State state = states[1];
  for (size_t k = projected.size(); k-- > 0;) {
    state = Cell::step(projected[k], state, ps[1]);
    outputs[k] = state.h;
  }
  Tensor backward = at::stack(outputs, 0);
  return {at::cat({forward, backward}, forward.dim() - 1), {fw_final, state}};
}

// PackedLayer: steps shrink as sequences end; the ended rows are the finals.
template <class Cell>
std::pair<Tensor, State> packed_layer(const Tensor& data, const std::vector<int64_t>& sizes,
                                      State state, const Params& p) {
  const Tensor projected = Cell::project(data, p);
  std::vector<Tensor> outputs;
  std::vector<State> finished;
  int64_t offset = 0, last = sizes[0];
  for (int64_t size : sizes) {
    Tensor x = projected.narrow(0, offset, size);
    offset += size;
    if (last > size) {
      finished.push_back(state.narrow(size, last - size));
      state = state.narrow(0, size);
    }
    last = size;
    state = Cell::step(x, state, p);
    outputs.push_back(state.h);
  }
  finished.push_back(state);
  std::reverse(finished.begin(), finished.end());
  return {at::cat(outputs, 0), cat_rows(finished)};
}

// ReversedPackedLayer: from the last step back, rows join as sequences start.
template <class Cell>
std::pair<Tensor, State> reversed_packed_layer(const Tensor& data,
                                               const std::vector<int64_t>& sizes,
                                               const State& initial, const Params& p) {
  const Tensor projected = Cell::project(data, p);
  std::vector<Tensor> outputs;
  int64_t offset = data.size(0), last = sizes.back();
  State state = initial.narrow(0, last);
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t size = *it;
    if (size > last) state = cat_rows({state, initial.narrow(last, size - last)});
    Tensor x = projected.narrow(0, offset - size, size);
    offset -= size;
    last = size;
    state = Cell::step(x, state, p);
    outputs.push_back(state.h);
  }
  std::reverse(outputs.begin(), outputs.end());
  return {at::cat(outputs, 0), state};
}

// apply_layer_stack: layer after layer, dropout between them when training.
// Returns the output and the final states, stacked (c undefined but for LSTM).
template <class Layer>
std::tuple<Tensor, Tensor, Tensor> stack(Layer layer, Tensor x, const std::vector<State>& states,
                                         const std::vector<Params>& groups, int64_t num_layers,
                                         double dropout_p, bool train, bool bidirectional) {
  const size_t dirs = bidirectional ? 2 : 1;
  TORCH_CHECK(states.size() == size_t(num_layers) * dirs, "Expected more hidden states in stacked_rnn");
  TORCH_CHECK(groups.size() == size_t(num_layers) * dirs, "Expected more weights in stacked_rnn");
  std::vector<Tensor> hs, cs;
  for (int64_t l = 0; l < num_layers; ++l) {
    auto out = layer(x, &states[l * dirs], &groups[l * dirs]);
    x = std::move(out.first);
    for (auto& f : out.second) {
      hs.push_back(std::move(f.h));
      if (f.c.defined()) cs.push_back(std::move(f.c));
    }
    if (dropout_p != 0 && train && l < num_layers - 1) x = at::dropout(x, dropout_p, true);
  }
  return {x, at::stack(hs, 0), cs.empty() ? Tensor() : at::stack(cs, 0)};
}

std::vector<State> initial_states(const Tensor& hx, const Tensor& cx) {
  const auto hs = hx.unbind(0);
  const auto cs = cx.defined() ? cx.unbind(0) : std::vector<Tensor>();
  std::vector<State> states;
  for (size_t i = 0; i < hs.size(); ++i)
    states.push_back({hs[i], i < cs.size() ? cs[i] : Tensor()});
  return states;
}

std::vector<int64_t> step_sizes(const Tensor& batch_sizes) {
  const Tensor bs = batch_sizes.to(at::kCPU, at::kLong).contiguous();
  std::vector<int64_t> sizes(bs.data_ptr<int64_t>(), bs.data_ptr<int64_t>() + bs.numel());
  TORCH_CHECK(!sizes.empty(), "RNN: batch_sizes must not be empty");
  return sizes;
}

// The stack over a padded input ([seq, batch, in], or batch first).
template <class Cell>
std::tuple<Tensor, Tensor, Tensor> over_input(const Tensor& input, const Tensor& hx,
                                              const Tensor& cx, const std::vector<Params>& groups,
                                              int64_t num_layers, double dropout, bool train,
                                              bool bidirectional, bool batch_first) {
  auto layer = [&](const Tensor& x, const State* states, const Params* ps) -> LayerOut {
    if (bidirectional) return bidirectional_layer<Cell>(x, states, ps);
    auto [out, final] = full_layer<Cell>(x, states[0], ps[0]);
    return {out, {final}};
  };
  // The input's transpose before the states' unbind: autograd orders its nodes by creation.
  Tensor x = batch_first ? input.transpose(0, 1) : input;
  auto [output, hy, cy] = stack(layer, std::move(x), initial_states(hx, cx), groups, num_layers,
                                dropout, train, bidirectional);
  return {batch_first ? output.transpose_(0, 1) : output, hy, cy};
}

// The stack over a packed sequence's data.
template <class Cell>
std::tuple<Tensor, Tensor, Tensor> over_data(const Tensor& data, const Tensor& batch_sizes,
                                             const Tensor& hx, const Tensor& cx,
                                             const std::vector<Params>& groups, int64_t num_layers,
                                             double dropout, bool train, bool bidirectional) {
  const auto sizes = step_sizes(batch_sizes);
  auto layer = [&](const Tensor& x, const State* states, const Params* ps) -> LayerOut {
    auto [fw, fw_final] = packed_layer<Cell>(x, sizes, states[0], ps[0]);
    if (!bidirectional) return {fw, {fw_final}};
    auto [rev, rev_final] = reversed_packed_layer<Cell>(x, sizes, states[1], ps[1]);
    return {at::cat({fw, rev}, -1), {fw_final, rev_final}};
  };
  return stack(layer, data, initial_states(hx, cx), groups, num_layers, dropout, train,
               bidirectional);
}

bool cpu_kernels() { return driver().kernel_device_type() == c10::DeviceType::CPU; }

// ---- the ops ------------------------------------------------------------------

#define SIMPLE_RNN(name, fn)                                                                     \
  std::tuple<Tensor, Tensor> name##_input(const Tensor& input, const Tensor& hx,                 \
                                          at::TensorList params, bool has_biases,                \
                                          int64_t num_layers, double dropout, bool train,        \
                                          bool bidirectional, bool batch_first) {                \
    if (!cpu_kernels())                                                                          \
      return at::native::name(input, hx, params, has_biases, num_layers, dropout, train,         \
                              bidirectional, batch_first);                                       \
    check_devices(input, hx, params);                                                            \
    auto [out, hy, cy] = over_input<SimpleCell<fn>>(input, hx, Tensor(),                          \
                                                    layer_params(params, has_biases, false),     \
                                                    num_layers, dropout, train, bidirectional,   \
                                                    batch_first);                                \
    return {out, hy};                                                                            \
  }                                                                                              \
  std::tuple<Tensor, Tensor> name##_data(const Tensor& data, const Tensor& batch_sizes,          \
                                         const Tensor& hx, at::TensorList params,                \
                                         bool has_biases, int64_t num_layers, double dropout,    \
                                         bool train, bool bidirectional) {                       \
    if (!cpu_kernels())                                                                          \
      return at::native::name(data, batch_sizes, hx, params, has_biases, num_layers, dropout,    \
                              train, bidirectional);                                             \
    check_devices(data, hx, params);                                                             \
    auto [out, hy, cy] = over_data<SimpleCell<fn>>(data, batch_sizes, hx, Tensor(),               \
                                                   layer_params(params, has_biases, false),      \
                                                   num_layers, dropout, train, bidirectional);   \
    return {out, hy};                                                                            \
  }

SIMPLE_RNN(rnn_tanh, tanh_of)
SIMPLE_RNN(rnn_relu, relu_of)
#undef SIMPLE_RNN

// Inference (nothing to differentiate, no dropout noise to draw): the CPU
// device's own layer over aliases, bit-identical to the CPU device; for a float32
// LSTM that is oneDNN's fused layer, 1.4x faster than the step-wise cells.
// Training takes the CPU's oneDNN layers op by op where the CPU device does
// (onednn_lstm), the cells otherwise, and so do packed sequences (their batch
// sizes are a CPU tensor, which an op call on musa takes for a device mismatch).
bool cpu_layer_serves(const Tensor& input, at::TensorList hx, at::TensorList params,
                      double dropout, bool train) {
  if (!cpu_layers() || (dropout > 0 && train)) return false;
  if (!at::GradMode::is_enabled()) return true;
  if (input.requires_grad()) return false;
  for (const Tensor& t : hx)
    if (t.requires_grad()) return false;
  for (const Tensor& t : params)
    if (t.requires_grad()) return false;
  return true;
}

std::tuple<Tensor, Tensor> gru_input(const Tensor& input, const Tensor& hx, at::TensorList params,
                                     bool has_biases, int64_t num_layers, double dropout,
                                     bool train, bool bidirectional, bool batch_first) {
  if (!cpu_kernels())
    return at::native::gru(input, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional, batch_first);
  check_devices(input, hx, params);
  if (cpu_layer_serves(input, hx, params, dropout, train))
    return unboxed::UnboxedKernel<at::_ops::gru_input>::call(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  auto [out, hy, cy] = over_input<GruCell>(input, hx, Tensor(),
                                           layer_params(params, has_biases, false), num_layers,
                                           dropout, train, bidirectional, batch_first);
  return {out, hy};
}

std::tuple<Tensor, Tensor> gru_data(const Tensor& data, const Tensor& batch_sizes,
                                    const Tensor& hx, at::TensorList params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional) {
  if (!cpu_kernels())
    return at::native::gru(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional);
  check_devices(data, hx, params);
  auto [out, hy, cy] = over_data<GruCell>(data, batch_sizes, hx, Tensor(),
                                          layer_params(params, has_biases, false), num_layers,
                                          dropout, train, bidirectional);
  return {out, hy};
}

// LSTM's hidden states: [h0, c0]; projections when h0 is narrower than c0.
bool lstm_projections(at::TensorList hx) {
  TORCH_CHECK(hx.size() == 2, "lstm expects two hidden states");
  return hx[0].size(2) != hx[1].size(2);
}

// Training a float32 LSTM without projections, the CPU device takes oneDNN's layer
// (use_mkldnn in PyTorch's RNN.cpp): one mkldnn_rnn_layer op per layer and direction,
// whose backward is oneDNN's too. The step-wise cells ran such a step 1.10-1.16x the
// CPU's time (3 layers of 256: 61.7 against 53.1 ms), their [batch, hidden] matmuls
// slower than oneDNN's fused steps. musa takes the same branch (bfloat16, which the CPU
// sends there only on CPUs with bfloat16 instructions, keeps the cells).
bool onednn_trains(const Tensor& input, at::TensorList hx, bool proj) {
  return cpu_layers() && !proj && at::globalContext().userEnabledMkldnn() &&
         input.scalar_type() == at::kFloat && input.numel() != 0 &&
         !hx[0].unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// The CPU device's oneDNN stack (onednn_rnn in PyTorch's mkldnn/RNN.cpp), call for call
// on musa tensors: autograd records each layer's node as it does on the CPU, and each
// layer runs the CPU's kernel over host aliases, so outputs and gradients are the CPU's.
std::tuple<Tensor, Tensor, Tensor> onednn_lstm(const Tensor& input_, at::TensorList hx,
                                               at::TensorList params, bool has_biases,
                                               int64_t num_layers, double dropout_p, bool train,
                                               bool bidirectional, bool batch_first) {
  constexpr int64_t kLstmMode = 2;  // ideep::rnn_kind::LSTM
  const Tensor input = (batch_first ? input_.transpose(0, 1) : input_).contiguous();
  const Tensor h0 = hx[0].contiguous(), c0 = hx[1].contiguous();
  const int64_t hidden_size = h0.size(2);
  const size_t stride = has_biases ? 4 : 2;
  const int64_t dirs = bidirectional ? 2 : 1;
  TORCH_CHECK(params.size() == stride * num_layers * dirs,
              "got an incorrect number of RNN parameters: ", params.size(), " for ", num_layers,
              " layer(s) and ", dirs, " direction(s)");
  Tensor layer_input = input;
  std::vector<Tensor> hy(num_layers * dirs), cy(num_layers * dirs), outputs(dirs);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (int64_t dir = 0; dir < dirs; ++dir) {
      const int64_t index = layer * dirs + dir;
      const Tensor* w = &params[index * stride];
      const Tensor b_ih = has_biases ? w[2] : at::zeros(w[0].sizes(), w[0].options());
      const Tensor b_hh = has_biases ? w[3] : at::zeros(w[1].sizes(), w[1].options());
      std::tie(outputs[dir], hy[index], cy[index], std::ignore) = at::mkldnn_rnn_layer(
          layer_input, w[0], w[1], b_ih, b_hh, h0[index], c0[index], /*reverse=*/dir > 0,
          /*batch_sizes=*/{}, kLstmMode, hidden_size, num_layers, has_biases, bidirectional,
          batch_first, train);
    }
    layer_input = dirs == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout_p != 0 && train && layer < num_layers - 1)
      layer_input = at::dropout(layer_input, dropout_p, /*train=*/true);
  }
  return {batch_first ? layer_input.transpose(0, 1) : layer_input, at::stack(hy, 0),
          at::stack(cy, 0)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_input(const Tensor& input, at::TensorList hx,
                                              at::TensorList params, bool has_biases,
                                              int64_t num_layers, double dropout, bool train,
                                              bool bidirectional, bool batch_first) {
  if (!cpu_kernels())
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  const bool proj = lstm_projections(hx);
  check_devices(input, hx, params);
  if (cpu_layer_serves(input, hx, params, dropout, train))
    return unboxed::UnboxedKernel<at::_ops::lstm_input>::call(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  if (onednn_trains(input, hx, proj))
    return onednn_lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                       batch_first);
  return over_input<LstmCell>(input, hx[0], hx[1], layer_params(params, has_biases, proj),
                              num_layers, dropout, train, bidirectional, batch_first);
}

std::tuple<Tensor, Tensor, Tensor> lstm_data(const Tensor& data, const Tensor& batch_sizes,
                                             at::TensorList hx, at::TensorList params,
                                             bool has_biases, int64_t num_layers, double dropout,
                                             bool train, bool bidirectional) {
  if (!cpu_kernels())
    return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional);
  const bool proj = lstm_projections(hx);
  check_devices(data, hx, params);
  return over_data<LstmCell>(data, batch_sizes, hx[0], hx[1], layer_params(params, has_biases, proj),
                             num_layers, dropout, train, bidirectional);
}

}  // namespace

bool set_rnn_cpu_layers(bool on) { return g_cpu_layers.exchange(on); }

// At PrivateUse1 too: inference mode skips the autograd keys.
#define REGISTER_RNN_LAYERS(m)             \
  m.impl("rnn_tanh.input", rnn_tanh_input); \
  m.impl("rnn_tanh.data", rnn_tanh_data);   \
  m.impl("rnn_relu.input", rnn_relu_input); \
  m.impl("rnn_relu.data", rnn_relu_data);   \
  m.impl("gru.input", gru_input);           \
  m.impl("gru.data", gru_data);             \
  m.impl("lstm.input", lstm_input);         \
  m.impl("lstm.data", lstm_data)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  REGISTER_RNN_LAYERS(m);
  // oneDNN's LSTM layer and its backward (the host driver's training path above):
  // the CPU's kernels over host aliases. A driver with kernels of its own has none.
  m.impl("mkldnn_rnn_layer", TORCH_FN(unboxed::UnboxedKernel<at::_ops::mkldnn_rnn_layer>::call));
  m.impl("mkldnn_rnn_layer_backward",
         TORCH_FN(unboxed::UnboxedKernel<at::_ops::mkldnn_rnn_layer_backward>::call));
}
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { REGISTER_RNN_LAYERS(m); }

#undef REGISTER_RNN_LAYERS

}  // namespace torch_musa
