"""A GPT-2-like training step through the cuda driver's compile route (kernel_device.py),
run here with the CPU as the kernel device, and SDPA's backend choice while tracing.

On the H200 the compiled GPT-2 step (benchmarks/bench_cuda_driver.py) ran at eager speed:
under the cuda driver SDPA asks ``_fused_sdp_choice``, and on the fake tensors of a trace
its meta kernel answers MATH (for fake CUDA tensors too, measured on the H200), so every compiled attention took the
math path, which computes bfloat16 attention in float32. These tests pin the route (one
graph each way, all moved, nothing left to eager) and the choice while tracing."""
import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_musa.attention import gpu
from torch_musa.config import CONFIG

from ._route import KIND, route_backend

BF16 = pytest.mark.skipif(not CONFIG.profile.supports_bf16, reason="the profile lacks bfloat16")


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _backend(graphs):
    """``graphs`` gets each graph as Inductor's inner compile receives it."""
    return route_backend(lambda gm: graphs.append(copy.deepcopy(gm)))


class Block(nn.Module):
    """GPT-2's block as transformers writes it: fused qkv, causal SDPA, tanh GELU MLP."""

    def __init__(self, width, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.drop = nn.Dropout(p)

    def forward(self, h):
        b, t, c = h.shape
        q, k, v = self.c_attn(self.ln_1(h)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,
                                           is_causal=True)
        h = h + self.drop(self.c_proj(a.transpose(1, 2).reshape(b, t, c)))
        return h + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh")))


class TinyGPT2(nn.Module):
    def __init__(self, vocab=64, width=32, heads=4, layers=1, seq=16, p=0.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, ids):
        h = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.blocks:
            h = blk(h)
        logits = self.lm_head(self.ln_f(h))
        return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())


@pytest.mark.slow
@BF16
def test_gpt2_like_step_is_one_graph_each_way_all_on_the_kernel_device():
    torch.manual_seed(0)
    model = TinyGPT2().to("musa")
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 16)).to("musa")
    graphs = []
    fn = torch.compile(model, backend=_backend(graphs), fullgraph=True)
    # The host's musa flash op has no CPU kernel: the stand-in kernel device takes math.
    backends = [SDPBackend.MATH] if KIND == "cpu" else [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION,
                                                         SDPBackend.EFFICIENT_ATTENTION,
                                                         SDPBackend.CUDNN_ATTENTION]
    for step in range(2):
        for m, f in ((model, fn), (ref, ref)):
            m.zero_grad(set_to_none=True)
            with sdpa_kernel(backends), torch.autocast("musa", dtype=torch.bfloat16):
                loss = f(ids)
            loss.backward()
            if m is model:
                compiled_loss = loss
        assert compiled_loss.device.type == "musa"
        torch.testing.assert_close(compiled_loss, loss, atol=2e-2, rtol=2e-2)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert p.grad.device.type == "musa", name
            torch.testing.assert_close(p.grad, q.grad, atol=3e-2, rtol=3e-2, msg=name)
    # one forward and one backward, compiled once (no recompile), both moved whole
    assert len(graphs) == 2, [g.graph for g in graphs]
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    for g in graphs:
        for node in g.graph.nodes:
            val = node.meta.get("val")
            for t in val if isinstance(val, (list, tuple)) else [val]:
                if isinstance(t, torch.Tensor):
                    assert t.device.type == KIND, node.format_node()
    # autocast reached the trace: every linear layer computes in bfloat16
    mms = [n for g in graphs for n in g.graph.nodes
           if n.op == "call_function" and n.target in (torch.ops.aten.mm.default,
                                                      torch.ops.aten.addmm.default)]
    assert mms and all(n.meta["val"].dtype == torch.bfloat16 for n in mms), \
        [(n.format_node(), n.meta["val"].dtype) for n in mms]


def _answer_like_the_meta_kernel(calls):
    """``_fused_sdp_choice`` as the H200's PyTorch answered it: the GPU's choice (here CUDNN)
    for a real tensor, a kernel-device one or a musa one (the fallback asks the GPU about
    its alias); MATH for any fake tensor, musa's or the kernel device's (measured there:
    eager CUDA 3, fake CUDA 0)."""
    from torch._subclasses.fake_tensor import is_fake

    def choice(query, *args, **kwargs):
        calls.append((query.device.type, is_fake(query)))
        return gpu.MATH if is_fake(query) else gpu.CUDNN
    return choice


@pytest.mark.parametrize("fake", [True, False], ids=["traced", "eager"])
def test_cuda_driver_sdpa_traces_the_kernel_devices_choice(monkeypatch, fake):
    calls = []
    monkeypatch.setattr(gpu, "KERNEL_DEVICE", KIND)
    monkeypatch.setattr(torch.ops.aten, "_fused_sdp_choice", _answer_like_the_meta_kernel(calls))
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=torch.bfloat16, device="musa") for _ in range(3))
    if fake:
        gm = make_fx(lambda q, k, v: gpu._sdpa(q, k, v, is_causal=True),
                     tracing_mode="fake")(q, k, v)
        targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
        # the GPU's kernel, as eager takes it; the question itself left nothing in the graph
        assert torch.ops.aten._scaled_dot_product_cudnn_attention.default in targets, gm.graph
        assert not any("math" in str(t) or "empty_strided" in str(t) for t in targets), gm.graph
        assert calls == [(KIND, False)]  # asked of real stand-ins on the kernel device
    else:
        assert gpu.sdp_choice(q, k, v, None, 0.0, True) == gpu.CUDNN
        assert calls == [("musa", False)]  # eager asks the fallback, with the musa tensors themselves


@BF16
def test_compiled_sdpa_takes_the_kernel_eager_takes():
    """The attention op in the compiled graph is the one eager's choice names."""
    ops = {gpu.FLASH: "_scaled_dot_product_flash_attention",
           gpu.EFFICIENT: "_scaled_dot_product_efficient_attention",
           gpu.CUDNN: "_scaled_dot_product_cudnn_attention",
           int(SDPBackend.OVERRIDEABLE): "_scaled_dot_product_fused_attention_overrideable"}
    q, k, v = (torch.randn(2, 4, 32, 64, dtype=torch.bfloat16, device="musa", requires_grad=True)
               for _ in range(3))
    eager = int(torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, True))
    assert eager in ops, f"eager takes the math path here ({eager}): nothing to compare"
    seen = []

    def backend(gm, example_inputs):
        # the joint graph as AOTAutograd traced it, before any move or lowering
        from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

        def fw(g, _):
            seen.extend(str(n.target) for n in g.graph.nodes if n.op == "call_function")
            return make_boxed_func(g.forward)
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

    fn = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                       backend=backend, fullgraph=True)
    fn(q, k, v).sum().backward()
    assert any(ops[eager] in t for t in seen), (ops[eager], seen)
    assert not any("_scaled_dot_product_attention_math" in t for t in seen), seen


@BF16
def test_compiled_sdpa_over_a_fused_qkv_view_matches_eager():
    """HF GPT-2's attention inputs: transposed views of one qkv projection. Compiled code
    takes the strides of the fused op's meta kernel (the query's dim order for the output,
    the inputs' for the gradients); musa's flash kernels returned contiguous tensors on
    the host driver, which Inductor's stride check refused."""
    b, t, heads, d = 2, 16, 4, 16

    def attend(qkv):
        q, k, v = (z.view(b, t, heads, d).transpose(1, 2) for z in qkv.split(heads * d, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)

    x = torch.randn(b, t, 3 * heads * d, dtype=torch.bfloat16, device="musa")
    outs, grads = [], []
    for fn in (torch.compile(attend), attend):
        xi = x.clone().requires_grad_()
        out = fn(xi)
        out.float().pow(2).sum().backward()
        outs.append(out)
        grads.append(xi.grad)
    torch.testing.assert_close(outs[0], outs[1], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(grads[0], grads[1], atol=5e-2, rtol=5e-2)
