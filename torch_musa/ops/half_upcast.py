"""float16/bfloat16 for ops whose CPU kernels have no such kernel, computed in float32.

MUSA and CUDA cards compute these ops in half precision (OpInfo's ``dtypesIfCUDA``
has float16/bfloat16 where ``dtypes``, the CPU's, has not), but the host driver runs
the CPU's kernels, which raise ``"..." not implemented for 'Half'``. For the ops in
``HALF_UPCAST_OPS`` musa computes on the host in float32 over the tensors' own bytes
(no stream synchronisation) and rounds the results once to the requested dtype, as
Dynamic Double Casting does for float64. Other dtypes take the same CPU kernel
unchanged. Their backward ops are listed too, so autograd works in half precision.

How the list was found: for every op in ``op_db`` with float16/bfloat16 in
``dtypesIfCUDA`` but not in ``dtypes``, the aten op that raised on the CPU (a
dispatch mode over the samples); ``ctc_loss`` (module_db's CTCLoss) is added by hand.
Not here, and why (``NOT_COVERED``): pairs that reach no musa kernel or would put a
Python kernel on a hot path.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_musa import _C
from torch_musa.config import CONFIG

#: aten op overload -> the OpInfo (or module) names it serves.
HALF_UPCAST_OPS = {
    "avg_pool3d": "nn.functional.avg_pool3d",
    "avg_pool3d_backward": "nn.functional.avg_pool3d (backward)",
    "_upsample_bilinear2d_aa": "_upsample_bilinear2d_aa, interpolate(antialias=True)",
    "_upsample_bilinear2d_aa_backward": "_upsample_bilinear2d_aa (backward)",
    "_upsample_bicubic2d_aa": "interpolate(mode='bicubic', antialias=True)",
    "_upsample_bicubic2d_aa_backward": "interpolate(mode='bicubic', antialias=True) (backward)",
    "multi_margin_loss": "nn.functional.multi_margin_loss",
    "multi_margin_loss_backward": "nn.functional.multi_margin_loss (backward)",
    "multilabel_margin_loss_forward": "nn.functional.multilabel_margin_loss",
    "multilabel_margin_loss_backward": "nn.functional.multilabel_margin_loss (backward)",
    "_ctc_loss": "nn.functional.ctc_loss, nn.CTCLoss",
    "_ctc_loss.Tensor": "nn.functional.ctc_loss, nn.CTCLoss",
    "_ctc_loss_backward": "nn.functional.ctc_loss (backward)",
    "_ctc_loss_backward.Tensor": "nn.functional.ctc_loss (backward)",
}

#: OpInfo names (fnmatch patterns) whose float16/bfloat16 pairs CUDA has, the CPU lacks
#: and this module leaves alone, and why. complex32 pairs (exp, sum, div, ...) are not
#: covered either: hot ops whose native kernels must not pass through Python.
NOT_COVERED = {
    "fft.*": "the FFT front end refuses Half on any device but CUDA before a musa kernel "
             "is reached",
    "nn.functional.rrelu": "rrelu_with_noise writes its noise with the device's generator; "
                           "the CPU fallback keeps its float32 draws",
    "torch.ops.aten._flash_attention_forward": "CUDA's own attention kernel; musa's "
        "scaled_dot_product_attention has its own (torch_musa.attention)",
    "torch.ops.aten._efficient_attention_forward": "CUDA's own attention kernel; musa's "
        "scaled_dot_product_attention has its own (torch_musa.attention)",
}

#: Composite ops whose own code builds a half tensor on the CPU (ctc_loss's mean
#: reduction: at::tensor(target_lengths, log_probs' options), which the CPU cannot
#: make in float16): computed in float32 from above autograd and rounded once.
HALF_UPCAST_COMPOSITE = ("ctc_loss.IntList", "ctc_loss.Tensor")

_UP = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
_DOUBLE = {torch.float64: torch.float32, torch.complex128: torch.complex64}


def _musa(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "musa"


def _up_for(op, dtypes, device) -> dict:
    """The dtypes to compute in a wider one for this call: float16/bfloat16 always; on a
    profile without float64, float64/complex128 in float32/complex64 where Dynamic
    Double Casting is on, else the profile's own error, as every other op gives."""
    lacking = CONFIG.profile.unsupported_dtypes()
    for dt in dtypes:
        if dt not in lacking:
            continue
        if dt in _DOUBLE:
            # The runtime decides (TORCH_USE_MUSA_DOUBLE_CAST / set_double_cast): this
            # raises its error, naming the profile, unless double casting is on.
            torch.zeros((), dtype=dt, device=device).neg()
            return {**_UP, **_DOUBLE}
        raise RuntimeError(f"{op}: dtype {dt} is not supported by the musa hardware profile "
                           f"{CONFIG.profile.name}. Use float32, or a profile that has it "
                           "(TORCH_MUSA_PROFILE).")
    return _UP


def _make_kernel(op):
    """The musa kernel of ``op``: the CPU kernel over the tensors' bytes, in float32
    for float16/bfloat16 inputs, results rounded back and written to musa memory."""
    writes = [i for i, a in enumerate(op._schema.arguments) if a.alias_info and a.alias_info.is_write]
    if writes:
        raise ValueError(f"{op}: half_upcast serves functional ops only")
    name = op.name()

    def kernel(*args, **kwargs):
        flat, _ = tree_flatten((args, kwargs))
        devs = [t.device for t in flat if _musa(t)]
        device = devs[0]
        for d in devs:
            if d != device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found "
                                   f"at least two devices, {device} and {d}! ({op})")
        up = _up_for(op, [t.dtype for t in flat if _musa(t)], device)
        low = next((t.dtype for t in flat if _musa(t) and t.dtype in up), None)

        def host(t):
            if not _musa(t):
                return t
            h = _C._kernel_alias(t)
            return h.to(up[t.dtype]) if t.dtype in up else h

        def back(r):
            if not isinstance(r, torch.Tensor):
                return r
            dtype = low if low is not None and r.dtype == up[low] else r.dtype
            # The CPU kernel's layout (channels_last in, channels_last out), as meta promises.
            res = torch.empty_like(r, dtype=dtype, device=device)
            if res.numel():
                _C._kernel_alias(res).copy_(r)
            return res

        with _C._KernelSpan(name):  # torch.profiler's device time of the op
            return tree_map(back, op(*tree_map(host, args), **tree_map(host, kwargs)))

    return kernel


def _make_composite(op):
    """``op``'s CompositeImplicitAutograd code, on float32 for a half first input."""
    def kernel(first, *args, **kwargs):
        if first.dtype in _UP:
            return op.decompose(first.to(_UP[first.dtype]), *args, **kwargs).to(first.dtype)
        return op.decompose(first, *args, **kwargs)

    return kernel


def _overload(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def kernel(name: str):
    """The kernel of a ``HALF_UPCAST_OPS`` op (musa_functions.yaml names this factory;
    ops/kernels.py registers it, host driver only: the cuda driver's kernels are CUDA's,
    which have these dtypes)."""
    op = _overload(name)
    # A backend kernel on a composite op would cut it off from autograd.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"), op
    return _make_kernel(op)


def composite(name: str):
    """The autograd-key kernel of a ``HALF_UPCAST_COMPOSITE`` op (see ``kernel``)."""
    return _make_composite(_overload(name))
