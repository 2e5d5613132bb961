"""``torch_musa.core.ao.nn``: fused modules beside ``torch.ao.nn``'s."""
from torch_musa.core.ao.nn import intrinsic

__all__ = ["intrinsic"]
