"""In-place random initialisation of DTensors on musa (host driver).

DTensor takes any device whose module has ``set_rng_state`` for CUDA-like and runs
its random ops through ``OffsetBasedRNGTracker``, which reads the generator state
as CUDA's Philox (seed, offset) and moves the offset so that each shard draws its
slice of the full tensor's numbers. musa's generator under the host driver is the
CPU's mt19937 (no offset to move), so the tracker failed with an AssertionError:
FSDP2's meta-device init (``to_empty`` + ``reset_parameters``) died.

For the in-place random ops that initialisation uses (``normal_``, ``uniform_``,
``bernoulli_``) every rank draws the full tensor from its generator and keeps its
own shard (``distribute_tensor`` with ``src_data_rank=None``: no communication).
That keeps what the tracker promises on CUDA: the shards together are the tensor
an unsharded run draws from the same seed, and every rank's generator advances
alike. The price is one full-size temporary per call. ``F.dropout`` is served too
(musa's dropout is the composite over ``bernoulli_``); ``rand_like`` and the other
out-of-place random ops still go through the tracker.
"""
from __future__ import annotations

import torch

from torch_musa._driver import pick

__all__ = ["install", "RANDOM_INPLACE_OPS"]

#: aten overloads served here: the in-place draws of ``torch.nn.init``.
RANDOM_INPLACE_OPS = ("normal_.default", "uniform_.default", "bernoulli_.float")

_installed = False


def _random_inplace(op_call, args, kwargs):
    """The handler DTensor calls for an in-place random op on a DTensor."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    self = args[0]
    local = self._local_tensor
    if local.device.type != "musa" or local.is_meta:
        op_call(local, *args[1:], **kwargs)  # what DTensor does where it has no tracker
        return self
    spec = self._spec
    full = torch.empty(self.shape, dtype=self.dtype, device=local.device)
    op_call(full, *args[1:], **kwargs)
    placements = [Replicate() if p.is_partial() else p for p in spec.placements]
    mine = distribute_tensor(full, spec.mesh, placements, src_data_rank=None).to_local()
    local.copy_(mine)
    return self


def install() -> None:
    """Serve DTensor's in-place random ops on musa (idempotent; host driver only: under the
    cuda driver musa's generator is CUDA's Philox, which DTensor's tracker reads)."""
    pick(host=_install_own, cuda=lambda: None)()


def _install_own() -> None:
    global _installed
    if _installed:
        return
    from torch.distributed.tensor import DTensor

    handlers = DTensor._op_dispatcher._custom_op_handlers
    for name in RANDOM_INPLACE_OPS:
        packet, overload = name.split(".")
        handlers[getattr(getattr(torch.ops.aten, packet), overload)] = _random_inplace
    _installed = True
