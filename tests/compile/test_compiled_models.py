"""Compiled models on musa (Inductor, host driver): forward and backward against eager musa
and against the CPU for an MLP, a CNN, a transformer encoder, a sample of module_db, and a
nanoGPT-style training loop with compile=True. Random ops fall back to aten inside the
compiled graphs so dropout draws the eager masks; models are tiny (compile is slow on two cores)."""
import copy
import math

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch._inductor import config as inductor_config

from torch_musa.testing.models import MLP, SmallCNN, SmallTransformer, make_batches
from torch_musa.testing.sweep_common import load_testing_db

TOL = dict(atol=2e-5, rtol=2e-4)


@pytest.fixture(autouse=True)
def _eager_random():
    # cuDNN convolutions default to TF32 (the cuda driver's, as on native CUDA): float32 here.
    torch._dynamo.reset()
    with inductor_config.patch(fallback_random=True), torch.backends.cudnn.flags(allow_tf32=False):
        yield


def _step(model, x, y, device, compiled):
    torch.manual_seed(1)  # dropout masks alike on every run
    m = model.to(device)
    fn = torch.compile(m) if compiled else m
    m.zero_grad(set_to_none=True)
    loss = F.cross_entropy(fn(x.to(device)), y.to(device))
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.cpu() for n, p in m.named_parameters()}


@pytest.mark.parametrize("kind,make", [
    ("mlp", MLP),
    pytest.param("cnn", SmallCNN, marks=pytest.mark.requires_host_driver(
        "SmallCNN trains with dropout: the CPU reference draws the CPU generator's masks, the "
        "cuda driver CUDA's Philox ones")),
    # eval: attention-weight dropout draws its mask at another point of the stream when
    # compiled; with grads required eager still takes the regular (not fast) path
    ("transformer", lambda: SmallTransformer(d_model=32, heads=2, layers=1).eval()),
])
def test_compiled_training_step_matches_eager_and_cpu(kind, make):
    torch.manual_seed(0)
    model = make()
    x, y = next(make_batches(kind, 1, batch=4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    for device, compiled in (("musa", True), ("musa", False), ("cpu", False)):
        model.load_state_dict(state)
        results[device, compiled] = _step(model, x, y, device, compiled)
    loss, grads = results["musa", True]
    for ref in ("musa", False), ("cpu", False):
        ref_loss, ref_grads = results[ref]
        torch.testing.assert_close(loss, ref_loss, **TOL)
        for name, g in grads.items():
            torch.testing.assert_close(g, ref_grads[name], **TOL, msg=lambda m: f"{name}: {m}")


MODULE_SAMPLE = ["nn.Conv1d", "nn.GRUCell"]


@pytest.mark.parametrize("name", MODULE_SAMPLE)
def test_module_db_sample(name):
    module_db = load_testing_db("common_modules", "module_db")  # leaves torch.backends' flags free

    info = next(m for m in module_db if m.name == name)
    inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                     training=True)
    inp = inputs[0]
    torch.manual_seed(0)
    cpu_mod = info.module_cls(*inp.constructor_input.args, **inp.constructor_input.kwargs)
    args = [a.detach() for a in inp.forward_input.args]

    def run(device, compiled):
        mod = copy.deepcopy(cpu_mod).to(device)
        fn = torch.compile(mod) if compiled else mod
        xs = [a.to(device).requires_grad_() for a in args]
        out = fn(*xs, **inp.forward_input.kwargs)
        out.sum().backward()
        return (out.detach().cpu(), [x.grad.cpu() for x in xs],
                [p.grad.cpu() for p in mod.parameters()])

    got = run("musa", True)
    for ref in (run("musa", False), run("cpu", False)):
        torch.testing.assert_close(got, ref, **TOL)


# ---------------------------------------------------------------- a GPT, trained nanoGPT-style
class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, block=16, d=32, heads=2, layers=1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.drop = nn.Dropout(0.0)  # nanoGPT's default
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT
        for p in self.parameters():
            nn.init.normal_(p, std=0.02) if p.dim() > 1 else None

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _train_gpt(device, compile, steps=4):
    torch.manual_seed(0)
    data = torch.randint(0, 64, (2000,))
    model = TinyGPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    fwd = torch.compile(model) if compile else model
    g = torch.Generator().manual_seed(1)
    losses = []
    torch.manual_seed(2)
    for step in range(steps):
        ix = torch.randint(len(data) - 17, (8,), generator=g)
        x = torch.stack([data[i:i + 16] for i in ix]).to(device)
        y = torch.stack([data[i + 1:i + 17] for i in ix]).to(device)
        for group in opt.param_groups:  # nanoGPT's cosine schedule
            group["lr"] = 3e-3 * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, model.lm_head.weight.detach().cpu()


def test_nanogpt_style_training_with_compile():
    compiled, w = _train_gpt("musa", compile=True)
    eager, w_eager = _train_gpt("musa", compile=False)
    cpu, w_cpu = _train_gpt("cpu", compile=False)
    assert compiled[-1] < compiled[0]  # it trains
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(compiled, cpu, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w, w_eager, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(w, w_cpu, atol=1e-4, rtol=1e-3)


@pytest.mark.requires_host_driver("compiled musa takes the CPU's kernels and decisions only "
                                  "on the host driver")
def test_compiled_conv_batchnorm_step_is_compiled_cpus_bit_for_bit():
    # Inductor decides channels-last and where the conv bias goes by device name; musa's
    # convolution is the CPU's kernel, so it must take the CPU's decisions (and the same
    # bits), not the GPU's (NCHW, bias fused into the BatchNorm kernel).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3)).train()
    x = torch.randn(4, 3, 16, 16)
    results = {}
    for device in ("cpu", "musa"):
        torch._dynamo.reset()
        m = copy.deepcopy(model).to(device)
        out = torch.compile(m)(x.to(device))
        out.sum().backward()
        results[device] = out.detach().cpu(), [p.grad.cpu() for p in m.parameters()]
    assert results["musa"][0].stride() == results["cpu"][0].stride()
    assert torch.equal(results["musa"][0], results["cpu"][0])
    for g_musa, g_cpu in zip(results["musa"][1], results["cpu"][1]):
        assert torch.equal(g_musa, g_cpu)


@pytest.mark.requires_host_driver("the layout of musa's convolution kernel is the CPU's only "
                                  "on the host driver")
def test_compiled_channels_last_convolution_keeps_eagers_layout():
    # The traced (fake) convolution must promise the strides the eager kernel gives.
    conv = nn.Conv2d(3, 8, 3, padding=1).to("musa").to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last).to("musa")
    eager = conv(x)
    compiled = torch.compile(conv)(x)
    assert compiled.stride() == eager.stride() == conv.cpu()(x.cpu()).stride()
    assert torch.equal(compiled.cpu(), eager.cpu())
