"""The tanh/ReLU RNN layers of the host driver, in the CPU device's op order.

``at::rnn_tanh``/``rnn_relu`` are composite: every step is a dispatched op, so on
musa they ran the same kernels as on the CPU, but not the same calls. Their layers
(``FullLayer``, ``FullBidirectionalLayer``, ``PackedLayer`` in
``aten/src/ATen/native/RNN.cpp``) compute the input projection of the whole
sequence in one matmul *only if the input is on the CPU*; any other device projects
each step's rows separately. The two are equal in exact arithmetic, but MKL picks
its sgemm kernel by the row count, and on an AVX-512 CPU the ``[batch, in]`` and
``[seq*batch, in]`` products round differently (6e-8 on ``nn.RNN(10, 6,
num_layers=3)``; equal under ``MKL_CBWR=AVX2``). So musa's results equalled the
CPU's only where MKL happened to choose alike.

These kernels are that composite with the CPU's branch taken: the same ops in the
same order on musa tensors, for every input and packed sequence, one- or
two-directional, with or without biases, dropout between layers. Autograd runs
through those ops, as it does through the composite. Host driver only: the cuda
driver's RNN is the GPU's.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F



def _layer_params(params: Sequence[torch.Tensor], has_biases: bool) -> list[tuple]:
    """(w_ih, w_hh, b_ih, b_hh) per layer and direction, as ``gather_params`` groups them."""
    step = 4 if has_biases else 2
    if len(params) % step:
        raise RuntimeError(f"got an incorrect number of RNN parameters: {len(params)} is not a "
                           f"multiple of {step}")
    groups = []
    for i in range(0, len(params), step):
        w_ih, w_hh = params[i], params[i + 1]
        b_ih, b_hh = (params[i + 2], params[i + 3]) if has_biases else (None, None)
        groups.append((w_ih, w_hh, b_ih, b_hh))
    return groups


def _check_devices(input: torch.Tensor, hx: torch.Tensor, params: Sequence[torch.Tensor]) -> None:
    """``check_attributes``: every tensor on the input's device."""
    device = input.device
    for name, t in [("hx", hx)] + [(f"parameter {i}", p) for i, p in enumerate(params)]:
        if t.device != device:
            raise RuntimeError(f"Input and {name} tensors are not at the same device, found input "
                               f"tensor at {device} and {name} tensor at {t.device}")


def _steps(inputs: Sequence[torch.Tensor], hidden: torch.Tensor, p: tuple,
           cell: Callable) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``FullLayer`` over projected inputs: hidden = f(linear_hh(hidden) + input)."""
    _, w_hh, _, b_hh = p
    outputs = []
    for x in inputs:
        hidden = cell(F.linear(hidden, w_hh, b_hh).add_(x))
        outputs.append(hidden)
    return outputs, hidden


def _full_layer(x, hidden, p, cell):
    projected = F.linear(x, p[0], p[2])
    outputs, final = _steps(projected.unbind(0), hidden, p, cell)
    if not outputs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    return torch.stack(outputs, 0), final


def _bidirectional_layer(x, hiddens, ps, cell):
    forward, fw_final = _full_layer(x, hiddens[0], ps[0], cell)
    projected = F.linear(x, ps[1][0], ps[1][2])
    outputs, rev_final = _steps(projected.unbind(0)[::-1], hiddens[1], ps[1], cell)
    backward = torch.stack(outputs[::-1], 0)
    return torch.cat([forward, backward], forward.dim() - 1), (fw_final, rev_final)


def _packed_layer(data, batch_sizes, hidden, p, cell):
    """``PackedLayer``: steps shrink as sequences end; the ended rows are the finals."""
    projected = F.linear(data, p[0], p[2])
    outputs, finished, offset, last = [], [], 0, batch_sizes[0]
    for size in batch_sizes:
        x = projected.narrow(0, offset, size)
        offset += size
        if last > size:
            finished.append(hidden.narrow(0, size, last - size))
            hidden = hidden.narrow(0, 0, size)
        last = size
        hidden = cell(F.linear(hidden, p[1], p[3]).add_(x))
        outputs.append(hidden)
    finished.append(hidden)
    return torch.cat(outputs, 0), torch.cat(finished[::-1], 0)


def _reversed_packed_layer(data, batch_sizes, initial, p, cell):
    """``ReversedPackedLayer``: from the last step back, rows join as sequences start."""
    projected = F.linear(data, p[0], p[2])
    outputs, offset, last = [], data.size(0), batch_sizes[-1]
    hidden = initial.narrow(0, 0, last)
    for size in reversed(batch_sizes):
        if size > last:
            hidden = torch.cat([hidden, initial.narrow(0, last, size - last)], 0)
        x = projected.narrow(0, offset - size, size)
        offset -= size
        last = size
        hidden = cell(F.linear(hidden, p[1], p[3]).add_(x))
        outputs.append(hidden)
    return torch.cat(outputs[::-1], 0), hidden


def _stack(layer: Callable, x, hiddens, groups, num_layers, dropout_p, train, bidirectional):
    """``apply_layer_stack``: layer after layer, dropout between them when training."""
    dirs = 2 if bidirectional else 1
    if len(groups) != num_layers * dirs or len(hiddens) != num_layers * dirs:
        raise RuntimeError("Expected more hidden states in stacked_rnn" if len(hiddens) != num_layers * dirs
                           else "Expected more weights in stacked_rnn")
    finals = []
    for layer_index in range(num_layers):
        at = slice(layer_index * dirs, (layer_index + 1) * dirs)
        x, final = layer(x, hiddens[at], groups[at])
        finals.extend(final)
        if dropout_p != 0 and train and layer_index < num_layers - 1:
            x = torch.dropout(x, dropout_p, True)
    return x, torch.stack(finals, 0)


def _rnn(cell: Callable):
    def on_input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        _check_devices(input, hx, params)
        x = input.transpose(0, 1) if batch_first else input

        def layer(x, hiddens, ps):
            if bidirectional:
                return _bidirectional_layer(x, hiddens, ps, cell)
            out, final = _full_layer(x, hiddens[0], ps[0], cell)
            return out, (final,)

        output, hy = _stack(layer, x, hx.unbind(0), _layer_params(params, has_biases),
                            num_layers, dropout, train, bidirectional)
        return (output.transpose_(0, 1) if batch_first else output), hy

    def on_data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
        _check_devices(data, hx, params)
        sizes = [int(s) for s in batch_sizes.tolist()]

        def layer(x, hiddens, ps):
            fw, fw_final = _packed_layer(x, sizes, hiddens[0], ps[0], cell)
            if not bidirectional:
                return fw, (fw_final,)
            rev, rev_final = _reversed_packed_layer(x, sizes, hiddens[1], ps[1], cell)
            return torch.cat([fw, rev], -1), (fw_final, rev_final)

        return _stack(layer, data, hx.unbind(0), _layer_params(params, has_biases),
                      num_layers, dropout, train, bidirectional)

    return on_input, on_data


_CELLS = {"rnn_tanh": torch.tanh, "rnn_relu": torch.relu}


def kernel(op: str):
    """``rnn_tanh``/``rnn_relu``'s ``.input`` or ``.data`` layer (musa_functions.yaml names this
    factory; ops/kernels.py registers it on musa's backend and autograd keys)."""
    name, _, overload = op.partition(".")
    on_input, on_data = _rnn(_CELLS[name])
    return {"input": on_input, "data": on_data}[overload]
