"""Route structured ops straight to the C++ fallback.

For a structured op, PyTorch registers a generic wrapper for the functional
and in-place variants that every backend inherits: it allocates the output
through the dispatcher, runs the meta function, and only then calls the
``.out`` kernel. On musa that kernel is the fallback anyway, so sending the
functional and in-place variants to the fallback directly skips that detour
(the host kernel still runs its own meta step).

Likewise for the few ops that have both a CPU kernel and a generic
CompositeExplicitAutograd one (``addr``: ``math_addr``): musa would inherit the
generic decomposition and round differently from the CPU device; routing them
to the fallback runs the CPU kernel itself.

And for the ``_foreach_*`` ops, whose generic kernel is a loop of per-tensor ops
while CUDA has multi-tensor kernels of its own: under the cuda driver the fallback
runs CUDA's, one launch for the list.
"""
from __future__ import annotations

import torch

from torch_musa import _C
from torch_musa._driver import KERNEL_DEVICE


def structured_wrapper_ops() -> list[str]:
    ops = []
    for full in torch._C._dispatch_get_registrations_for_dispatch_key(
        "CompositeExplicitAutogradNonFunctional"
    ):
        if not full.startswith("aten::"):
            continue
        name = full[len("aten::"):]
        if name.endswith("_copy") or ".out" in name:
            continue
        # Native kernels and registry ops already have a musa kernel.
        if torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(full, "CPU"):
            ops.append(name)
    return sorted(ops)


def generic_decomposition_ops() -> list[str]:
    ops = []
    for full in torch._C._dispatch_get_registrations_for_dispatch_key("CompositeExplicitAutograd"):
        if (full.startswith("aten::")
                and torch._C._dispatch_has_kernel_for_dispatch_key(full, "CPU")
                and not torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1")):
            ops.append(full[len("aten::"):])
    return sorted(ops)


def kernel_device_foreach_ops() -> list[str]:
    """The ``_foreach_*`` ops the kernel device serves with kernels of its own.

    Inherited, their generic kernel loops over the list with one musa op per tensor:
    under the cuda driver fused AdamW's ``_foreach_add_`` of GPT-2's 148 step counters
    took 148 ops, ~2 ms of host time per step on an H100, where CUDA launches one kernel.
    The CPU has no foreach kernels (it runs the same loop), so the host driver gets none.
    """
    key = KERNEL_DEVICE.upper()
    return sorted(
        full[len("aten::"):]
        for full in torch._C._dispatch_get_registrations_for_dispatch_key("CompositeExplicitAutograd")
        if full.startswith("aten::_foreach_")
        and torch._C._dispatch_has_kernel_for_dispatch_key(full, key)
        and not torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1"))


#: CompositeExplicitAutograd out= forms with no CPU kernel of their own that refuse any
#: device but CPU/CUDA/XPU themselves, though their functional op works on musa
#: (``torch.mode(x, out=...)``: "mode only supports CPU, CUDA and XPU device type, got:
#: musa"; found by torch_musa.testing.layout_sweep's out= forms). The fallback runs the
#: CPU device's path and writes into the musa out tensors, keeping their strides.
DEVICE_CHECKING_COMPOSITES = ["mode.values"]


def install() -> None:
    _C._register_fallback_ops(structured_wrapper_ops() + generic_decomposition_ops()
                              + DEVICE_CHECKING_COMPOSITES)
    # Chosen, not missing: counted among the fallback's ops, but TORCH_MUSA_FALLBACK
    # neither warns of them (fused AdamW warned of its _foreach_add_ under the cuda
    # driver on every first step) nor refuses them.
    _C._register_fallback_ops(kernel_device_foreach_ops(), chosen=True)
