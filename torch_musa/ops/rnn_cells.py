"""musa kernels for PyTorch's fused RNN cells.

``at::lstm``/``gru``/``lstm_cell``/``gru_cell`` take the fused-cell path for any
PrivateUse1 input (``aten/src/ATen/native/RNN.cpp``), and PyTorch ships
``_thnn_fused_lstm_cell``/``_thnn_fused_gru_cell`` and their backwards only for
CUDA: on musa they reached the CPU fallback, which has no kernel. These follow
the CUDA kernels' semantics (pointwise math in the accumulate type, float for
half/bfloat16) and workspace layouts, so the autograd formulas in
``derivatives.yaml`` (the fused backward, and ``_thnn_differentiable_*`` under
create_graph) apply unchanged. Each step is a musa op, run by the device.
"""
from __future__ import annotations

import torch

_REDUCED = (torch.float16, torch.bfloat16)


def _acc(t: torch.Tensor) -> torch.Tensor:
    """The tensor in the kernels' accumulate type."""
    return t.float() if t.dtype in _REDUCED else t


def _gate(t: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """Gate k of the n gates packed along dim 1 of a [batch, n*hidden] tensor."""
    h = t.size(1) // n
    return t[:, k * h:(k + 1) * h]


def _check_gates(op: str, input_gates, hidden_gates, input_bias, hidden_bias, factor: int, prev) -> None:
    """The shape and device checks of the CUDA kernels, with the caller's names."""
    if input_gates.dim() != 2:
        raise RuntimeError(f"{op}: input_gates must be 2-D [batch, {factor}*hidden], got shape "
                           f"{tuple(input_gates.shape)}")
    if hidden_gates.shape != input_gates.shape:
        raise RuntimeError(f"{op}: hidden_gates has shape {tuple(hidden_gates.shape)}, expected "
                           f"input_gates' {tuple(input_gates.shape)}")
    if (input_bias is None) != (hidden_bias is None):
        raise RuntimeError(f"{op}: input_bias and hidden_bias must both be given or both be None")
    gates = input_gates.size(1)
    if input_bias is not None:
        for name, b in (("input_bias", input_bias), ("hidden_bias", hidden_bias)):
            if b.dim() != 1 or b.numel() != gates:
                raise RuntimeError(f"{op}: {name} must be 1-D with {gates} elements, got shape "
                                   f"{tuple(b.shape)}")
    if prev.dim() != 2 or prev.numel() * factor != input_gates.size(0) * gates:
        raise RuntimeError(f"{op}: the previous state must be 2-D [batch, hidden] = "
                           f"[{input_gates.size(0)}, {gates // factor}], got shape {tuple(prev.shape)}")
    tensors = [t for t in (input_gates, hidden_gates, input_bias, hidden_bias, prev) if t is not None]
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise RuntimeError(f"{op}: all tensors must be on one device, got {sorted(map(str, devices))}")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise RuntimeError(f"{op}: all tensors must have one dtype, got {sorted(map(str, dtypes))}")


def _preactivations(input_gates, hidden_gates, input_bias, hidden_bias) -> torch.Tensor:
    """input + hidden (+ input_bias + hidden_bias), summed in that order as CUDA does."""
    gates = _acc(input_gates) + _acc(hidden_gates)
    if input_bias is not None:
        gates.add_(_acc(input_bias)).add_(_acc(hidden_bias))
    return gates


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace); workspace = the activated gates [i, f, g, o]."""
    _check_gates("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx)
    gates = _preactivations(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = (_gate(gates, k, 4) for k in range(4))
    i.sigmoid_()
    f.sigmoid_()
    g.tanh_()
    o.sigmoid_()
    cy = f * _acc(cx) + i * g
    hy = o * cy.tanh()
    dtype = input_gates.dtype
    return hy.to(dtype), cy.to(dtype), gates.to(dtype)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad_gates, grad_cx, grad_bias) from the forward's workspace."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    grad = grad_hy if grad_hy is not None else grad_cy
    if grad.dim() != 2:
        raise RuntimeError(f"_thnn_fused_lstm_cell_backward: gradients must be 2-D, got shape {tuple(grad.shape)}")
    for name, t in (("grad_hy", grad_hy), ("grad_cy", grad_cy), ("cx", cx), ("cy", cy)):
        if t is not None and t.shape != grad.shape:
            raise RuntimeError(f"_thnn_fused_lstm_cell_backward: {name} has shape {tuple(t.shape)}, "
                               f"expected {tuple(grad.shape)}")
    if workspace.dim() != 2 or workspace.numel() != 4 * grad.numel():
        raise RuntimeError(f"_thnn_fused_lstm_cell_backward: workspace must be 2-D with {4 * grad.numel()} "
                           f"elements, got shape {tuple(workspace.shape)}")
    ws = _acc(workspace)
    i, f, g, o = (_gate(ws, k, 4) for k in range(4))
    tanh_cy = _acc(cy).tanh()
    # d(cy): through hy = o * tanh(cy), plus the gradient arriving at cy itself.
    if grad_hy is not None:
        go = _acc(grad_hy)
        grad_o = go * tanh_cy
        grad_c = go * o * (1 - tanh_cy * tanh_cy)
        if grad_cy is not None:
            grad_c = grad_c + _acc(grad_cy)
    else:
        grad_o = torch.zeros_like(tanh_cy)
        grad_c = _acc(grad_cy)
    grad_gates = torch.cat([
        grad_c * g * (1 - i) * i,
        grad_c * _acc(cx) * (1 - f) * f,
        grad_c * i * (1 - g * g),
        grad_o * (1 - o) * o,
    ], 1).to(workspace.dtype)
    grad_cx = (grad_c * f).to(workspace.dtype)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace); workspace = [r, z, n, hx, hidden n-gate + its bias]."""
    _check_gates("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    h = hx.size(1)
    ig, hg = _acc(input_gates), _acc(hidden_gates)
    rz = ig[:, :2 * h] + hg[:, :2 * h]
    in_, hn = ig[:, 2 * h:], hg[:, 2 * h:]
    if input_bias is not None:
        ib, hb = _acc(input_bias), _acc(hidden_bias)
        rz.add_(ib[:2 * h]).add_(hb[:2 * h])
        in_, hn = in_ + ib[2 * h:], hn + hb[2 * h:]
    rz.sigmoid_()
    r, z = rz[:, :h], rz[:, h:]
    n = (in_ + r * hn).tanh_()
    hx_acc = _acc(hx)
    hy = n + z * (hx_acc - n)
    dtype = input_gates.dtype
    return hy.to(dtype), torch.cat([rz, n, hx_acc, hn], 1).to(dtype)


def gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    if grad_hy.dim() != 2 or tuple(workspace.shape) != (grad_hy.size(0), 5 * grad_hy.size(1)):
        raise RuntimeError(f"_thnn_fused_gru_cell_backward: grad_hy must be 2-D [batch, hidden] and the "
                           f"workspace [batch, 5*hidden]; got {tuple(grad_hy.shape)} and "
                           f"{tuple(workspace.shape)}")
    ws = _acc(workspace)
    r, z, n, hx, hn = (_gate(ws, k, 5) for k in range(5))
    go = _acc(grad_hy)
    grad_z = go * (hx - n) * (1 - z) * z
    grad_n = go * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    dtype = workspace.dtype
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1).to(dtype)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1).to(dtype)
    grad_hx = (go * z).to(dtype)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)


_KERNELS = {
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}


def kernel(op: str):
    """The kernel of ``op`` (musa_functions.yaml names this factory; ops/kernels.py registers it)."""
    return _KERNELS[op]
