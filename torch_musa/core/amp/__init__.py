"""``torch_musa.core.amp``: the real torch_musa's path of the musa GradScaler.

``torch_musa.core.amp.grad_scaler`` holds :class:`GradScaler` (also
``torch.musa.amp.GradScaler``) and re-exports ``OptState``, which FSDP's sharded
grad scaler imports from there.
"""
from torch_musa.core.amp.grad_scaler import GradScaler, OptState

__all__ = ["GradScaler", "OptState"]
