"""nn.LSTM / GRU / RNN and the cells on musa against the same modules on the CPU.

On musa the LSTM and GRU cells run the fused kernels (torch_musa/csrc/aten/rnn_cells.cpp),
which sum the gates and biases in another order than the CPU's unfused cell, so
float32 agrees to about 1e-7 rather than bit for bit; the tolerance is 1e-5. Where the
CPU device takes a whole layer of its own (oneDNN's float32 LSTM in training, every
inference), musa takes the same one and agrees bit for bit.
Dropout between layers draws the same masks as the CPU under the same seed.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_musa  # noqa: F401

TOL = dict(rtol=1e-5, atol=1e-5)
SEQ, BATCH, IN, HID = 5, 3, 4, 6

KINDS = {
    "lstm": lambda **kw: nn.LSTM(IN, HID, **kw),
    "gru": lambda **kw: nn.GRU(IN, HID, **kw),
    "rnn_tanh": lambda **kw: nn.RNN(IN, HID, nonlinearity="tanh", **kw),
    "rnn_relu": lambda **kw: nn.RNN(IN, HID, nonlinearity="relu", **kw),
}
CONFIGS = {
    "plain": {},
    "batch_first": {"batch_first": True},
    "bidirectional": {"bidirectional": True},
    "two_layers": {"num_layers": 2},
    "no_bias": {"bias": False},
    "dropout": {"num_layers": 3, "dropout": 0.5},
    "everything": {"num_layers": 2, "bidirectional": True, "batch_first": True, "bias": False,
                   "dropout": 0.3},
}
LSTM_ONLY = {
    "proj": {"proj_size": 3},
    "proj_bidirectional_two_layers": {"proj_size": 3, "num_layers": 2, "bidirectional": True},
}


def _states(module: nn.RNNBase, batch: int) -> list[torch.Tensor]:
    """Random initial states: [h0] or [h0, c0], shaped for the module."""
    layers = module.num_layers * (2 if module.bidirectional else 1)
    h_size = module.proj_size or module.hidden_size
    states = [torch.randn(layers, batch, h_size)]
    if isinstance(module, nn.LSTM):
        states.append(torch.randn(layers, batch, module.hidden_size))
    return states


def _run(module, x, states, seed, device, packed_lengths=None):
    """Forward and backward on `device`: (outputs, input grads, parameter grads by name)."""
    module = module if device == "cpu" else copy.deepcopy(module).to(device)
    x = x.detach().to(device).requires_grad_()
    states = [s.detach().to(device).requires_grad_() for s in states]
    hx = tuple(states) if len(states) == 2 else states[0]
    torch.manual_seed(seed)
    inp = x
    if packed_lengths is not None:
        inp = pack_padded_sequence(x, packed_lengths, batch_first=module.batch_first, enforce_sorted=False)
    out, h = module(inp, hx)
    if packed_lengths is not None:
        out, lengths = pad_packed_sequence(out, batch_first=module.batch_first)
        assert lengths.tolist() == packed_lengths.tolist()
    outs = [out] + (list(h) if isinstance(h, tuple) else [h])
    # Weighted sum, so every output element gets its own gradient.
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g).to(device)).sum() for o in outs)
    loss.backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    return outs, [x.grad] + [s.grad for s in states], grads


def _assert_same(cpu, musa, **tol):
    (outs_c, igrads_c, pgrads_c), (outs_m, igrads_m, pgrads_m) = cpu, musa
    for o_c, o_m in zip(outs_c, outs_m, strict=True):
        assert o_m.device.type == "musa"
        torch.testing.assert_close(o_m.cpu(), o_c, **(tol or TOL))
    for g_c, g_m in zip(igrads_c, igrads_m, strict=True):
        assert g_c is not None and g_m is not None
        torch.testing.assert_close(g_m.cpu(), g_c, **(tol or TOL))
    assert pgrads_c.keys() == pgrads_m.keys()
    for name, g_c in pgrads_c.items():
        assert g_c is not None and pgrads_m[name] is not None, name
        torch.testing.assert_close(pgrads_m[name].cpu(), g_c, **(tol or TOL), msg=lambda m: f"{name}: {m}")


CASES = [(k, c) for k in KINDS for c in CONFIGS] + [("lstm", c) for c in LSTM_ONLY]


#: Between-layer dropout draws the CPU generator's masks in the CPU's order only
#: under the host driver; the cuda driver draws CUDA's numbers (and cuDNN, the
#: natural reference there, draws its own): no reference run to match.
CPU_MASKS = pytest.mark.requires_host_driver("RNN dropout masks are the CPU generator's")


@pytest.mark.parametrize("kind,config", [
    pytest.param(k, c, id=f"{k}-{c}", marks=[CPU_MASKS] if "dropout" in {**CONFIGS, **LSTM_ONLY}[c] else [])
    for k, c in CASES])
def test_module_matches_cpu(kind, config):
    torch.manual_seed(0)
    module = KINDS[kind](**{**CONFIGS, **LSTM_ONLY}[config])
    shape = (BATCH, SEQ, IN) if module.batch_first else (SEQ, BATCH, IN)
    x, states = torch.randn(shape), _states(module, BATCH)
    _assert_same(_run(module, x, states, 7, "cpu"), _run(module, x, states, 7, "musa"))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("batch_first", [False, True])
def test_packed_sequences_match_cpu(kind, batch_first):
    torch.manual_seed(0)
    extra = {"proj_size": 3} if kind == "lstm" else {}
    module = KINDS[kind](num_layers=2, bidirectional=True, batch_first=batch_first, **extra)
    lengths = torch.tensor([4, 2, 5, 1])  # unequal and unsorted
    shape = (4, SEQ, IN) if batch_first else (SEQ, 4, IN)
    x, states = torch.randn(shape), _states(module, 4)
    _assert_same(_run(module, x, states, 7, "cpu", lengths), _run(module, x, states, 7, "musa", lengths))


SIMPLE = [k for k in KINDS if k.startswith("rnn_")]


def _aten_calls(fn) -> list[tuple]:
    """The aten ops ``fn`` dispatches, each with its tensor arguments' shapes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            flat = torch.utils._pytree.tree_leaves((args, kwargs))
            calls.append((str(func), [tuple(a.shape) for a in flat if isinstance(a, torch.Tensor)]))
            return func(*args, **(kwargs or {}))

    with Record():
        fn()
    return calls


@pytest.mark.requires_host_driver("the host driver runs the CPU's kernels")
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("kind", SIMPLE)
def test_simple_rnn_is_the_cpus_op_for_op(kind, config, packed):
    """PyTorch's composite projects the whole sequence's inputs in one matmul only on the
    CPU; MKL rounds a [batch, in] and a [seq*batch, in] product differently on AVX-512.
    musa's tanh/ReLU layers take the CPU's branch (torch_musa/csrc/aten/rnn_layers.cpp): the same
    aten calls with the same shapes, forward and backward, so the same kernels and the
    same bits on any CPU."""
    torch.manual_seed(0)
    module = KINDS[kind](**CONFIGS[config])
    batch = 4
    shape = (batch, SEQ, IN) if module.batch_first else (SEQ, batch, IN)
    x, states = torch.randn(shape), _states(module, batch)
    lengths = torch.tensor([4, 2, 5, 1]) if packed else None
    results = {}

    def run(device):
        results[device] = _run(module, x, states, 7, device, lengths)

    cpu_calls = _aten_calls(lambda: run("cpu"))
    musa_calls = _aten_calls(lambda: run("musa"))
    # The musa run starts by copying the module and inputs over: compare from its first RNN op.
    rnn = next(i for i, c in enumerate(cpu_calls) if "rnn_" in c[0] or c[0].startswith("aten.t."))
    first = next(i for i, c in enumerate(musa_calls) if c == cpu_calls[rnn])
    assert [c for c in musa_calls[first:] if "_to_copy" not in c[0]] == \
        [c for c in cpu_calls[rnn:] if "_to_copy" not in c[0]]
    _assert_same(results["cpu"], results["musa"], rtol=0, atol=0)


@pytest.mark.requires_host_driver("the host driver runs the CPU's kernels (cuDNN's layer "
                                   "agrees with them on some shapes)", may_pass_elsewhere=True)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "frozen"])
@pytest.mark.parametrize("kind, config", [
    (kind, config) for kind in ("lstm", "gru")
    for config in ("plain", "batch_first", "bidirectional", "two_layers", "no_bias", "dropout")
] + [("lstm", "proj")])
def test_inference_is_the_cpus_layer(kind, config, mode):
    """Inference takes the CPU device's own LSTM/GRU layer (oneDNN's fused one for
    float32 LSTM), so the outputs equal the CPU's bit for bit; dropout is off in eval
    mode. One exception: under no_grad or inference_mode, with parameters that
    require grad, the CPU's GRU projects a batch-first input with another matmul
    (matmul's folding looks at requires_grad, which the host aliases do not carry):
    equal to 1e-6 there."""
    torch.manual_seed(0)
    module = KINDS[kind](**{**CONFIGS, **LSTM_ONLY}[config]).eval()
    x, states = torch.randn(SEQ, BATCH, IN), _states(module, BATCH)
    if module.batch_first:
        x = x.transpose(0, 1).contiguous()
    hx = tuple(states) if len(states) == 2 else states[0]
    musa = copy.deepcopy(module).to("musa")
    mhx = tuple(s.to("musa") for s in states) if len(states) == 2 else states[0].to("musa")
    if mode == "frozen":  # grad mode on, nothing requires grad
        for p in list(module.parameters()) + list(musa.parameters()):
            p.requires_grad_(False)
        ctx = torch.enable_grad
    else:
        ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with ctx():
        cpu = module(x, hx)
        out = musa(x.to("musa"), mhx)
    cpu_leaves, musa_leaves = torch.utils._pytree.tree_leaves(cpu), torch.utils._pytree.tree_leaves(out)
    assert len(cpu_leaves) == len(musa_leaves)
    exact = not (kind == "gru" and module.batch_first and mode != "frozen")
    for c, m in zip(cpu_leaves, musa_leaves):
        assert m.device.type == "musa" and not m.requires_grad
        if exact:
            assert torch.equal(m.cpu(), c)
        else:
            torch.testing.assert_close(m.cpu(), c, rtol=1e-6, atol=1e-6)


@pytest.mark.requires_host_driver("the host driver trains a float32 LSTM with the CPU's oneDNN layer; "
                                   "a GPU takes the cells")
@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch build has no oneDNN: "
                    "the CPU device trains with the cells too")
@pytest.mark.parametrize("config", ["plain", "batch_first", "bidirectional", "two_layers", "no_bias", "dropout"])
def test_float32_lstm_training_is_the_cpus_onednn_layer(config):
    """Training a float32 LSTM, the CPU device runs oneDNN's layer (mkldnn_rnn_layer), and
    so does musa, op for op: outputs, final states and every gradient equal the CPU's bit
    for bit (dropout's masks included), where the fused cells agreed to ~1e-7."""
    torch.manual_seed(0)
    module = KINDS["lstm"](**CONFIGS[config])
    x, states = torch.randn(SEQ, BATCH, IN), _states(module, BATCH)
    if module.batch_first:
        x = x.transpose(0, 1).contiguous()
    musa = copy.deepcopy(module).to("musa")
    results = {}
    for device, m in (("cpu", module), ("musa", musa)):
        xi = x.detach().to(device).requires_grad_()
        hx = tuple(s.detach().to(device).requires_grad_() for s in states)
        torch.manual_seed(5)
        out, (h, c) = m(xi, hx)
        (out.pow(2).sum() + h.sum() + 2 * c.sum()).backward()
        results[device] = [out, h, c, xi.grad, *(s.grad for s in hx), *(p.grad for p in m.parameters())]
        if device == "musa":
            nodes = {fn.name() for fn in _graph_nodes(out.grad_fn)}
            assert "MkldnnRnnLayerBackward0" in nodes, nodes
    for c, m in zip(results["cpu"], results["musa"], strict=True):
        assert m.device.type == "musa" and torch.equal(m.cpu(), c)


@pytest.mark.requires_host_driver("the switch chooses between the host driver's CPU layers and the cells")
def test_cpu_layers_switch_off_steps_the_cells_as_a_card_does():
    """set_rnn_cpu_layers(False) (what musa-doctor records under): training and inference
    step the fused cells, the ops a MUSA card's torch_musa runs; on again, the CPU's layers."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from torch_musa.ops.registry import set_rnn_cpu_layers

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func.__name__)
            return func(*args, **(kwargs or {}))

    module = KINDS["lstm"]().to("musa")
    x = torch.randn(SEQ, BATCH, IN, device="musa")
    seen = {}
    for on in (False, True):
        previous = set_rnn_cpu_layers(on)
        try:
            with Ops() as train:
                module(x)[0].sum().backward()
            with Ops() as infer, torch.no_grad():
                module(x)
        finally:
            set_rnn_cpu_layers(previous)
        seen[on] = (train.names, infer.names)
    assert previous is True  # on by default
    cells, layers = seen[False], seen[True]
    assert {"_thnn_fused_lstm_cell.default", "_thnn_fused_lstm_cell_backward_impl.default"} <= cells[0]
    assert "_thnn_fused_lstm_cell.default" in cells[1]
    assert not any("mkldnn" in n for n in cells[0] | cells[1])
    if torch.backends.mkldnn.is_available():
        assert "mkldnn_rnn_layer.default" in layers[0] and "_thnn_fused_lstm_cell.default" not in layers[0]
    assert "_thnn_fused_lstm_cell.default" not in layers[1]  # inference: the CPU's whole layer


def _graph_nodes(fn):
    seen, todo = [], [fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.append(f)
        todo.extend(nxt for nxt, _ in f.next_functions)
    return seen


@CPU_MASKS
def test_dropout_masks_are_the_cpus():
    """The tanh RNN has no fused cell: its musa run is the CPU's op for op, masks included."""
    torch.manual_seed(0)
    module = nn.RNN(IN, HID, num_layers=3, dropout=0.5)
    x = torch.randn(SEQ, BATCH, IN)
    torch.manual_seed(3)
    cpu = module(x)[0]
    torch.manual_seed(3)
    musa = copy.deepcopy(module).to("musa")(x.to("musa"))[0]
    torch.manual_seed(4)
    other = module(x)[0]
    assert torch.equal(musa.cpu(), cpu)
    assert not torch.equal(other, cpu)  # the masks do depend on the seed


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cells_match_cpu(cell, bias, with_state):
    torch.manual_seed(0)
    module = {"lstm": nn.LSTMCell, "gru": nn.GRUCell, "rnn": nn.RNNCell}[cell](IN, HID, bias=bias)
    x = torch.randn(BATCH, IN)
    states = [torch.randn(BATCH, HID) for _ in range(2 if cell == "lstm" else 1)] if with_state else []

    def run(device):
        m = module if device == "cpu" else copy.deepcopy(module).to(device)
        xi = x.detach().to(device).requires_grad_()
        st = [s.detach().to(device).requires_grad_() for s in states]
        hx = (tuple(st) if len(st) == 2 else st[0]) if st else None
        out = m(xi, hx)
        outs = list(out) if isinstance(out, tuple) else [out]
        g = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=g).to(device)).sum() for o in outs).backward()
        return outs, [xi.grad] + [s.grad for s in st], {n: p.grad for n, p in m.named_parameters()}

    _assert_same(run("cpu"), run("musa"))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_float16_forward(kind):
    """Half in, half out; the cell computes in float as CUDA's does, so it is at least
    as close to the float32 result as the CPU's half run is."""
    torch.manual_seed(0)
    module = KINDS[kind](num_layers=2).half()
    x = torch.randn(SEQ, BATCH, IN).half()
    musa = copy.deepcopy(module).to("musa")(x.to("musa"))[0]
    cpu = module(x)[0]
    exact = copy.deepcopy(module).float()(x.float())[0]
    assert musa.dtype == torch.float16
    torch.testing.assert_close(musa.cpu(), cpu, rtol=2e-3, atol=2e-3)
    assert (musa.cpu().float() - exact).abs().max() <= (cpu.float() - exact).abs().max()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_double_backward(kind):
    """create_graph=True takes derivatives.yaml's _thnn_differentiable_* branch."""
    torch.manual_seed(0)
    module = KINDS[kind](num_layers=2)
    x = torch.randn(SEQ, BATCH, IN)

    def second_order(device):
        m = module if device == "cpu" else copy.deepcopy(module).to(device)
        xi = x.detach().to(device).requires_grad_()
        wrt = [xi, *m.parameters()]
        first = torch.autograd.grad(m(xi)[0].pow(2).sum(), wrt, create_graph=True)
        return torch.autograd.grad(sum(g.pow(2).sum() for g in first), wrt)

    for g_c, g_m in zip(second_order("cpu"), second_order("musa"), strict=True):
        torch.testing.assert_close(g_m.cpu(), g_c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_gradcheck_with_batched_gradients(mode):
    """gradcheck's batched gradients run the backward under vmap; PyTorch's test_modules
    (LSTM, float64) found the sequence node's backward calling flatten there, which
    functorch's batching layer has no rule for."""
    torch.manual_seed(0)
    m = nn.LSTM(3, 4).double().to("musa").train(mode == "train")
    x = torch.randn(4, 2, 3, dtype=torch.float64, device="musa", requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x)[0], (x,), check_batched_grad=True)


@pytest.mark.requires_devices(2)
def test_on_second_device():
    torch.manual_seed(0)
    module = nn.LSTM(IN, HID)
    x = torch.randn(SEQ, BATCH, IN)
    out, (h, c) = copy.deepcopy(module).to("musa:1")(x.to("musa:1"))
    assert {out.device, h.device, c.device} == {torch.device("musa:1")}
    torch.testing.assert_close(out.cpu(), module(x)[0], **TOL)


# ---- the fused ops themselves, against their formulas in float64 ----

def _ref_lstm(ig, hg, cx, bi, bh):
    gates = ig + hg + (bi + bh if bi is not None else 0)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _ref_gru(ig, hg, hx, bi, bh):
    if bi is not None:
        ig, hg = ig + bi, hg + bh
    ir, iz, in_ = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_op(bias):
    torch.manual_seed(0)
    ig, hg, cx = torch.randn(BATCH, 4 * HID), torch.randn(BATCH, 4 * HID), torch.randn(BATCH, HID)
    bi, bh = (torch.randn(4 * HID), torch.randn(4 * HID)) if bias else (None, None)
    args = [t.to("musa") if t is not None else None for t in (ig, hg, cx, bi, bh)]
    got = torch.ops.aten._thnn_fused_lstm_cell(*args)
    want = _ref_lstm(*(t.double() if t is not None else None for t in (ig, hg, cx, bi, bh)))
    for g, w in zip(got, want, strict=True):  # hy, cy, workspace = activated [i, f, g, o]
        assert g.shape == w.shape and g.is_contiguous()
        torch.testing.assert_close(g.cpu().double(), w, **TOL)

    # The backward from the workspace equals autograd through the formula, for each
    # combination of defined output gradients.
    ghy, gcy = torch.randn(BATCH, HID), torch.randn(BATCH, HID)
    leaves = [t.double().requires_grad_() for t in (ig, cx)]
    hy, cy, _ = _ref_lstm(leaves[0], hg.double(), leaves[1], *(t.double() if t is not None else None
                                                             for t in (bi, bh)))
    for use_hy, use_cy in [(True, True), (True, False), (False, True)]:
        outs = [o for o, u in ((hy, use_hy), (cy, use_cy)) if u]
        grads = [g.double() for g, u in ((ghy, use_hy), (gcy, use_cy)) if u]
        want_gates, want_cx = torch.autograd.grad(outs, leaves, grads, retain_graph=True)
        grad_gates, grad_cx, grad_bias = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            ghy.to("musa") if use_hy else None, gcy.to("musa") if use_cy else None,
            args[2], got[1], got[2], bias)
        torch.testing.assert_close(grad_gates.cpu().double(), want_gates, **TOL)
        torch.testing.assert_close(grad_cx.cpu().double(), want_cx, **TOL)
        if bias:
            torch.testing.assert_close(grad_bias.cpu().double(), want_gates.sum(0), **TOL)
        else:
            assert grad_bias is None
    assert torch.ops.aten._thnn_fused_lstm_cell_backward_impl(None, None, args[2], got[1], got[2], bias) == (
        None, None, None)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_op(bias):
    torch.manual_seed(0)
    ig, hg, hx = torch.randn(BATCH, 3 * HID), torch.randn(BATCH, 3 * HID), torch.randn(BATCH, HID)
    bi, bh = (torch.randn(3 * HID), torch.randn(3 * HID)) if bias else (None, None)
    args = [t.to("musa") if t is not None else None for t in (ig, hg, hx, bi, bh)]
    hy, workspace = torch.ops.aten._thnn_fused_gru_cell(*args)
    want_hy, want_ws = _ref_gru(*(t.double() if t is not None else None for t in (ig, hg, hx, bi, bh)))
    torch.testing.assert_close(hy.cpu().double(), want_hy, **TOL)
    torch.testing.assert_close(workspace.cpu().double(), want_ws, **TOL)  # [r, z, n, hx, hn + b_hn]

    leaves = [t.double().requires_grad_() for t in (ig, hg, hx)]
    out, _ = _ref_gru(*leaves, *(t.double() if t is not None else None for t in (bi, bh)))
    grad = torch.randn(BATCH, HID)
    want = torch.autograd.grad(out, leaves, grad.double())
    got = torch.ops.aten._thnn_fused_gru_cell_backward(grad.to("musa"), workspace, bias)
    for g, w in zip(got[:3], want, strict=True):
        torch.testing.assert_close(g.cpu().double(), w, **TOL)
    if bias:
        torch.testing.assert_close(got[3].cpu().double(), want[0].sum(0), **TOL)
        torch.testing.assert_close(got[4].cpu().double(), want[1].sum(0), **TOL)
    else:
        assert got[3] is None and got[4] is None


@pytest.mark.requires_devices(2)
def test_fused_cells_reject_bad_shapes():
    m = dict(device="musa")
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell: hidden_gates has shape"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, **m), torch.randn(2, 4, **m), torch.randn(2, 2, **m))
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell: the previous state must be 2-D"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, **m), torch.randn(2, 8, **m), torch.randn(2, 3, **m))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell: input_bias must be 1-D with 6"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, **m), torch.randn(2, 6, **m), torch.randn(2, 2, **m),
                                            torch.randn(5, **m), torch.randn(5, **m))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell_backward: grad_hy must be 2-D"):
        torch.ops.aten._thnn_fused_gru_cell_backward(torch.randn(2, 2, **m), torch.randn(2, 6, **m), True)
    with pytest.raises(RuntimeError, match="all tensors must be on one device"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, **m), torch.randn(2, 6, device="musa:1"),
                                            torch.randn(2, 2, **m))


# ---- the fused cells are CUDA's formula, op for op, with the kernel device's kernels ----

def _cuda_order_lstm(ig, hg, cx, bi, bh):
    """CUDA's LSTM cell as a sequence of ops in the accumulate type: (hy, cy, workspace)."""
    acc = (lambda t: t.float()) if ig.dtype in (torch.float16, torch.bfloat16) else (lambda t: t)
    gates = acc(ig) + acc(hg)
    if bi is not None:
        gates.add_(acc(bi)).add_(acc(bh))
    i, f, g, o = gates.chunk(4, 1)
    i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    cy = f * acc(cx) + i * g
    return (o * cy.tanh()).to(ig.dtype), cy.to(ig.dtype), gates.to(ig.dtype)


def _cuda_order_gru(ig, hg, hx, bi, bh):
    """CUDA's GRU cell as a sequence of ops in the accumulate type: (hy, workspace)."""
    acc = (lambda t: t.float()) if ig.dtype in (torch.float16, torch.bfloat16) else (lambda t: t)
    h = hx.size(1)
    ig, hg = acc(ig), acc(hg)
    rz, in_, hn = ig[:, :2 * h] + hg[:, :2 * h], ig[:, 2 * h:], hg[:, 2 * h:]
    if bi is not None:
        rz.add_(acc(bi)[:2 * h]).add_(acc(bh)[:2 * h])
        in_, hn = in_ + acc(bi)[2 * h:], hn + acc(bh)[2 * h:]
    rz.sigmoid_()
    r, z = rz[:, :h], rz[:, h:]
    n = (in_ + r * hn).tanh_()
    return (n + z * (acc(hx) - n)).to(hx.dtype), torch.cat([rz, n, acc(hx), hn], 1).to(hx.dtype)


@pytest.mark.requires_host_driver("the host driver's cells run the CPU's kernels (the GPU's "
                                   "agree for some dtypes)", may_pass_elsewhere=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_cells_are_bit_identical_to_the_formula_on_cpu(dtype, bias):
    """One device op per cell, and still CUDA's formula step for step: the same bits as
    that formula's ops run one by one on the CPU device."""
    torch.manual_seed(0)
    for n, op, formula in ((4, torch.ops.aten._thnn_fused_lstm_cell, _cuda_order_lstm),
                           (3, torch.ops.aten._thnn_fused_gru_cell, _cuda_order_gru)):
        cpu = [torch.randn(BATCH, n * HID, dtype=dtype), torch.randn(BATCH, n * HID, dtype=dtype),
               torch.randn(BATCH, HID, dtype=dtype)]
        cpu += [torch.randn(n * HID, dtype=dtype), torch.randn(n * HID, dtype=dtype)] if bias else [None, None]
        got = op(*(t.to("musa") if t is not None else None for t in cpu))
        for g, w in zip(got, formula(*cpu), strict=True):
            assert g.dtype == dtype and torch.equal(g.cpu(), w)

