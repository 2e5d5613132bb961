"""Patterns found by running diffusers (UNet2DModel, UNet2DConditionModel,
AutoencoderKL built from tiny configs, DDPM/DDIM training and sampling) on musa
against the CPU, in plain torch.

The conditional UNet trained bit for bit; UNet2DModel and AutoencoderKL differed
by 1e-8 in their first gradients. The cause is GroupNorm's backward on a
channels_last activation (diffusers' attention blocks hand back
``transpose(-1, -2).reshape(b, c, h, w)``, whose strides are channels_last):
PyTorch's derivative formula (derivatives.yaml, ``native_group_norm``) keeps the
input's memory format on the CPU but makes grad and input contiguous on every
other device, as on CUDA, and the CPU kernel rounds the two layouts differently.
musa takes CUDA's route by design; these tests pin both halves.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torch_musa.testing.reference import cpu_tolerance

from ._common import assert_same, assert_same_params


def _attention_then_group_norm(device, channels_last_input=False):
    """A diffusers-style spatial self-attention block (residual) followed by GroupNorm.

    Returns (output, grads of x / weight / bias) on the CPU and the stride of the
    tensor GroupNorm saw."""
    g = torch.Generator().manual_seed(0)
    b, c, h, w = 2, 16, 4, 4
    x = torch.randn(b, c, h, w, generator=g)
    if channels_last_input:
        x = x.to(memory_format=torch.channels_last)
    proj = torch.randn(c, c, generator=g) / 4
    gn_w, gn_b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    x, proj, gn_w, gn_b = (t.to(device).requires_grad_() for t in (x, proj, gn_w, gn_b))
    seq = x.view(b, c, h * w).transpose(1, 2)                      # (b, hw, c)
    attn = F.scaled_dot_product_attention(seq @ proj, seq, seq)
    back = attn.transpose(-1, -2).reshape(b, c, h, w) + x          # channels_last strides
    out = F.group_norm(back, 4, gn_w, gn_b)
    out.pow(2).mul(torch.arange(out.numel(), device=device).view_as(out) % 7).sum().backward()
    return out.detach().cpu(), [t.grad.cpu() for t in (x, gn_w, gn_b)], back.stride()


def test_attention_block_hands_group_norm_a_channels_last_tensor_on_both_devices():
    *_, cpu_stride = _attention_then_group_norm("cpu")
    *_, stride = _attention_then_group_norm("musa")
    assert stride == cpu_stride, f"musa {stride} vs CPU {cpu_stride}"
    assert stride[1] == 1, f"the pattern no longer makes channels_last strides ({stride}): it tests nothing"


def test_group_norm_backward_on_channels_last_takes_cudas_contiguous_route():
    """Forward as on the CPU; backward = the CPU kernel run on contiguous grad and input
    (derivatives.yaml's non-CPU branch), not the CPU's channels_last kernel."""
    g = torch.Generator().manual_seed(1)
    n, c, hw, groups = 4, 32, 8, 8
    x = torch.randn(n, c, hw, hw, generator=g).to(memory_format=torch.channels_last)
    weight, bias = torch.randn(c, generator=g), torch.randn(c, generator=g)
    grad_out = torch.randn(n, c, hw, hw, generator=g).to(memory_format=torch.channels_last)

    leaves = [t.to("musa").requires_grad_() for t in (x, weight, bias)]
    out = F.group_norm(leaves[0], groups, leaves[1], leaves[2])
    out.backward(grad_out.to("musa"))

    cpu_out, mean, rstd = torch.ops.aten.native_group_norm(x, weight, bias, n, c, hw * hw, groups, 1e-5)
    assert_same(out.detach().cpu(), cpu_out, "group_norm forward on channels_last")
    want = torch.ops.aten.native_group_norm_backward(
        grad_out.contiguous(), x.contiguous(), mean, rstd, weight, n, c, hw * hw, groups,
        [True, True, True])
    for name, leaf, expected in zip(("input", "weight", "bias"), leaves, want):
        assert_same(leaf.grad.cpu(), expected, f"group_norm backward, grad of {name}")


def test_group_norm_on_contiguous_activations_is_identical():
    out, grads = _plain_group_norm("musa")
    cpu_out, cpu_grads = _plain_group_norm("cpu")
    assert_same(out, cpu_out, "group_norm output")
    for got, want, name in zip(grads, cpu_grads, ("input", "weight", "bias")):
        assert_same(got, want, f"group_norm grad of {name}")


def _plain_group_norm(device):
    g = torch.Generator().manual_seed(2)
    leaves = [t.to(device).requires_grad_() for t in
              (torch.randn(3, 16, 5, 5, generator=g), torch.randn(16, generator=g), torch.randn(16, generator=g))]
    out = F.group_norm(leaves[0], 4, leaves[1], leaves[2])
    out.pow(3).sum().backward()
    return out.detach().cpu(), [t.grad.cpu() for t in leaves]


class _TinyDenoiser(nn.Module):
    """What a diffusers UNet block does, contiguous throughout: sinusoidal timestep
    embedding, conv + GroupNorm + SiLU with the embedding added, cross-attention on a
    text context, nearest upsampling back."""

    def __init__(self, c=16, ctx=8):
        super().__init__()
        self.time = nn.Sequential(nn.Linear(c, c), nn.SiLU(), nn.Linear(c, c))
        self.conv_in = nn.Conv2d(3, c, 3, padding=1)
        self.norm = nn.GroupNorm(4, c)
        self.down = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.to_q, self.to_k, self.to_v = nn.Linear(c, c), nn.Linear(ctx, c), nn.Linear(ctx, c)
        self.conv_out = nn.Conv2d(c, 3, 3, padding=1)
        self.c = c

    def forward(self, x, t, context):
        half = self.c // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
        emb = t[:, None].float() * freqs[None]
        emb = self.time(torch.cat([emb.cos(), emb.sin()], dim=-1))
        h = F.silu(self.norm(self.conv_in(x) + emb[:, :, None, None]))
        d = self.down(h)
        b, c, hh, ww = d.shape
        seq = d.flatten(2).transpose(1, 2)
        heads = lambda z: z.view(b, -1, 2, c // 2).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(self.to_q(seq)), heads(self.to_k(context)),
                                           heads(self.to_v(context)))
        a = a.transpose(1, 2).reshape(b, hh * ww, c).transpose(1, 2).reshape(b, c, hh, ww).contiguous()
        up = F.interpolate(d + a, scale_factor=2.0, mode="nearest")
        return self.conv_out(up + h)


def _ddpm_training(device, steps=3):
    torch.manual_seed(0)
    model = _TinyDenoiser().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    betas = torch.linspace(1e-4, 0.02, 100, dtype=torch.float64)
    alphas_cumprod = torch.cumprod(1 - betas, 0).float().to(device)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x0, noise = torch.randn(4, 3, 8, 8, generator=g), torch.randn(4, 3, 8, 8, generator=g)
        t, ctx = torch.randint(0, 100, (4,), generator=g), torch.randn(4, 5, 8, generator=g)
        x0, noise, t, ctx = x0.to(device), noise.to(device), t.to(device), ctx.to(device)
        a = alphas_cumprod[t].sqrt().view(-1, 1, 1, 1)
        s = (1 - alphas_cumprod[t]).sqrt().view(-1, 1, 1, 1)
        loss = F.mse_loss(model(a * x0 + s * noise, t, ctx), noise)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.detach().cpu() for n, p in model.named_parameters()}


def test_ddpm_noise_prediction_training_matches_the_cpu():
    losses, params = _ddpm_training("musa")
    cpu_losses, cpu_params = _ddpm_training("cpu")
    assert_same(torch.tensor(losses), torch.tensor(cpu_losses), "per-step losses")
    if cpu_tolerance(torch.float32)["atol"] > 0:
        # to_k's bias adds the same vector to every key, which softmax ignores: its gradient
        # is zero but for rounding, and AdamW steps ~lr along that rounding's sign, which
        # differs between the GPU's kernels and the CPU's (on the H200: to_k.bias only).
        cpu_params.pop("to_k.bias"), params.pop("to_k.bias")
    assert_same_params(params, cpu_params, "denoiser after 3 AdamW steps")
