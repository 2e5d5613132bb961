"""``torch_musa.distributed.fsdp``: FSDP's gradient scaler for musa (the real torch_musa's
``ShardedGradScaler``, whose device defaults to musa instead of cuda)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as _TorchShardedGradScaler

from torch_musa.core.grad_scaling import unscale_grads


class ShardedGradScaler(_TorchShardedGradScaler):
    """torch.distributed.fsdp's ShardedGradScaler with ``device="musa"`` by default.

    As torch_musa.amp's GradScaler, ``1 / scale`` is computed in float64 only where the
    hardware profile has float64, else in float32 (exact for the power-of-two scales).
    Without a process group (one process) it unscales alone instead of raising; the
    found-inf flags of CPU gradients are all-reduced through musa.
    """

    def __init__(self, device: str = "musa", init_scale: float = 2.0**16,
                 backoff_factor: float = 0.5, growth_factor: float = 2.0,
                 growth_interval: int = 2000, enabled: bool = True, process_group=None):
        kwargs = {} if process_group is None else {"process_group": process_group}
        super().__init__(device=device, init_scale=init_scale, backoff_factor=backoff_factor,
                         growth_factor=growth_factor, growth_interval=growth_interval,
                         enabled=enabled, **kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._enabled:
            return
        if self._device != "musa":
            return super().unscale_(optimizer)
        state = unscale_grads(self, optimizer, allow_fp16=True, found_inf_shape=(1,))
        if dist.is_available() and dist.is_initialized():  # the ranks agree on whether any found inf
            # A CPU-offloaded shard's flag goes through musa, as in the real torch_musa: a
            # group made for mccl alone has no backend for CPU tensors.
            flags = [(f, f.to("musa") if f.device.type == "cpu" else f)
                     for f in state["found_inf_per_device"].values()]
            works = [dist.all_reduce(on_musa, async_op=True, group=self.process_group)
                     for _, on_musa in flags]
            for work in works:
                work.wait()
            for f, on_musa in flags:
                if on_musa is not f:
                    f.copy_(on_musa)


__all__ = ["ShardedGradScaler"]
