"""``torch_musa.distributed.fsdp``: FSDP's gradient scaler for musa (the real torch_musa's
``ShardedGradScaler``, whose device defaults to musa instead of cuda)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.amp.grad_scaler import OptState
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as _TorchShardedGradScaler

from torch_musa.config import CONFIG


class ShardedGradScaler(_TorchShardedGradScaler):
    """torch.distributed.fsdp's ShardedGradScaler with ``device="musa"`` by default.

    As torch_musa.amp's GradScaler, ``1 / scale`` is computed in float64 only where the
    hardware profile has float64, else in float32 (exact for the power-of-two scales).
    Without a process group (one process) it unscales alone instead of raising.
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
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = (self._scale.double().reciprocal().float() if CONFIG.profile.supports_fp64
                     else self._scale.reciprocal())
        found_inf = torch.full((1,), 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, True)
        state["stage"] = OptState.UNSCALED
        if dist.is_available() and dist.is_initialized():  # the ranks agree on whether any found inf
            works = [dist.all_reduce(f, async_op=True, group=self.process_group)
                     for f in state["found_inf_per_device"].values()]
            for work in works:
                work.wait()


__all__ = ["ShardedGradScaler"]
