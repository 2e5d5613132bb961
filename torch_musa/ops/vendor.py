"""The real torch_musa's vendor operators, with its signatures and meanings.

The real package adds them to PyTorch by patching it (``native_functions.yaml``,
``torch/nn/functional.py``, ``torch/nn/modules/activation.py``); here they are plain
Python over existing ops, so autograd, FakeTensor and torch.compile follow from the
ops they are made of. ``install()`` attaches them where the real package has them:

- ``torch.swish_glu(input)`` and ``torch.nn.functional.swish_glu(input)``:
  ``silu(a) * b`` with ``a, b = input.chunk(2, -1)``, computed in float32 and returned
  in the input's dtype (float32, float16, bfloat16); with backward.
- ``torch.gated_silu(input)``: the same product in the input's dtype (float32,
  float16; at least two dimensions).
- ``torch.rope(input, freq_cis, rotary_interleaved, batch_first,
  multi_latent_attention=False)`` and ``torch.nn.functional.rope`` (the flags default
  to False there): rotary position embedding of ``input`` (S, B, H, D), or
  (B, S, H, D) with ``batch_first``, by the angles ``freq_cis`` (S, R), R <= D:
  ``t * cos + rotate(t) * sin`` on the first R features, the rest passed through;
  backward for ``input`` only, as the real package's.
- ``torch.nn.RoPE(freq_cis, rotary_interleaved=False, batch_first=False,
  multi_latent_attention=False)`` (``freq_cis`` a buffer) and ``torch.nn.SwishGLU()``.

Like the real package's, these serve musa tensors only; CPU tensors raise
``"<op> only supported in torch_musa."``.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function_unary, has_torch_function_variadic

_DEVICE = "musa"


def _check(name: str, input: Tensor, dtypes: tuple[torch.dtype, ...], what: str) -> None:
    if input.device.type != _DEVICE:
        raise RuntimeError(f"{name} only supported in torch_musa.")
    if input.dtype not in dtypes:
        raise RuntimeError(f"{name}: {what}, but now is {input.dtype}")


def _halves(name: str, input: Tensor) -> tuple[Tensor, Tensor]:
    if input.dim() == 0 or input.shape[-1] % 2:
        raise RuntimeError(f"{name}: the last dimension of input must be even, got shape {tuple(input.shape)}")
    return input.chunk(2, dim=-1)


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def swish_glu(input: Tensor) -> Tensor:
    """silu(first half of the last dim) * second half, in float32, in input's dtype."""
    if has_torch_function_unary(input):
        return handle_torch_function(swish_glu, (input,), input)
    _check("swish_glu", input, _FLOATS, "SwiGLU only supports float32/float16/bfloat16")
    gate, up = _halves("swish_glu", input.float())
    return (torch.nn.functional.silu(gate) * up).to(input.dtype)


def gated_silu(input: Tensor) -> Tensor:
    """silu(first half of the last dim) * second half, in input's dtype (fp32/fp16)."""
    if has_torch_function_unary(input):
        return handle_torch_function(gated_silu, (input,), input)
    _check("gated_silu", input, (torch.float32, torch.float16),
           "Dtype of input tensor of gated silu only support fp32 / fp16")
    if input.dim() < 2:
        raise RuntimeError("Dim of input tensor of gated silu should greater than 1")
    x, y = _halves("gated_silu", input)
    # the kernel: silu in float32, rounded to the input's dtype, times y in that dtype
    return torch.nn.functional.silu(x.float()).to(input.dtype) * y


def _rotate(t: Tensor, interleaved: bool) -> Tensor:
    if not interleaved:  # halves: (t1, t2) -> (-t2, t1)
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((-t2, t1), dim=-1)
    # neighbouring pairs: (t0, t1) -> (-t1, t0)
    return torch.stack((-t[..., 1::2], t[..., 0::2]), dim=-1).flatten(-2)


def _rope(input: Tensor, freq_cis: Tensor, rotary_interleaved: bool, batch_first: bool,
          multi_latent_attention: bool) -> Tensor:
    _check("rope", input, _FLOATS, "Dtype of input tensor only support Float32 and Float16/Bfloat16")
    if freq_cis.device != input.device:
        raise RuntimeError("rope: device type of input tensor must be same")
    if input.dim() != 4:
        raise RuntimeError(f"rope: input must be 4-dimensional ({'BSHD' if batch_first else 'SBHD'}), "
                           f"got shape {tuple(input.shape)}")
    freq = freq_cis.detach()  # not differentiable, as the real package's
    if freq.dim() == 2:
        seq, rot = freq.shape
        freq = freq.reshape(1, seq, 1, rot) if batch_first else freq.reshape(seq, 1, 1, rot)
    rot = freq.shape[-1]
    if rot > input.shape[-1] or rot % 2:
        raise RuntimeError(f"rope: freq_cis's last dimension ({rot}) must be even and at most input's "
                           f"({input.shape[-1]})")
    x = input.float()
    t, rest = x[..., :rot], x[..., rot:]
    if multi_latent_attention:  # MLA: de-interleave the rotated features first
        t = torch.cat((t[..., 0::2], t[..., 1::2]), dim=-1)
    freq = freq.float()
    t = t * torch.cos(freq) + _rotate(t, rotary_interleaved) * torch.sin(freq)
    return torch.cat((t, rest), dim=-1).to(input.dtype)


def rope_native(input: Tensor, freq_cis: Tensor, rotary_interleaved: bool, batch_first: bool,
                multi_latent_attention: bool = False) -> Tensor:
    """``torch.rope``: the flags are required, as in the real package's schema."""
    if has_torch_function_variadic(input, freq_cis):
        return handle_torch_function(rope_native, (input, freq_cis), input, freq_cis, rotary_interleaved,
                                     batch_first, multi_latent_attention)
    return _rope(input, freq_cis, rotary_interleaved, batch_first, multi_latent_attention)


def rope(input: Tensor, freq_cis: Tensor, rotary_interleaved: bool = False, batch_first: bool = False,
         multi_latent_attention: bool = False) -> Tensor:
    """``torch.nn.functional.rope``: rotary position embedding (see the module's doc)."""
    if has_torch_function_variadic(input, freq_cis):
        return handle_torch_function(rope, (input, freq_cis), input, freq_cis, rotary_interleaved,
                                     batch_first, multi_latent_attention)
    return _rope(input, freq_cis, rotary_interleaved, batch_first, multi_latent_attention)


# Names as the real package's (torch.swish_glu, torch.rope are its native functions).
swish_glu.__name__ = swish_glu.__qualname__ = "swish_glu"
rope_native.__name__ = rope_native.__qualname__ = "rope"


class RoPE(torch.nn.Module):
    """Rotary position embedding with a fixed ``freq_cis`` (a buffer); see ``F.rope``."""

    def __init__(self, freq_cis: Tensor, rotary_interleaved: bool | None = False,
                 batch_first: bool | None = False, multi_latent_attention: bool | None = False) -> None:
        super().__init__()
        self.register_buffer("freq_cis", freq_cis)
        self.rotary_interleaved = rotary_interleaved
        self.batch_first = batch_first
        self.multi_latent_attention = multi_latent_attention

    def forward(self, input: Tensor) -> Tensor:
        return torch.nn.functional.rope(input=input, freq_cis=self.freq_cis,
                                        rotary_interleaved=self.rotary_interleaved,
                                        batch_first=self.batch_first,
                                        multi_latent_attention=self.multi_latent_attention)


class SwishGLU(torch.nn.Module):
    """``F.swish_glu`` as a module."""

    def forward(self, input: Tensor) -> Tensor:
        return torch.nn.functional.swish_glu(input)


RoPE.__module__ = SwishGLU.__module__ = "torch.nn.modules.activation"


def install() -> None:
    """Attach the operators where the real torch_musa has them."""
    import torch.nn.functional as F  # noqa: PLC0415

    torch.swish_glu = swish_glu
    torch.gated_silu = gated_silu
    torch.rope = rope_native
    F.swish_glu = swish_glu
    F.rope = rope
    torch.nn.RoPE = torch.nn.modules.RoPE = torch.nn.modules.activation.RoPE = RoPE
    torch.nn.SwishGLU = torch.nn.modules.SwishGLU = torch.nn.modules.activation.SwishGLU = SwishGLU
