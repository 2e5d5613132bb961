"""``torch_musa.multi_tensor_apply``: the real torch_musa's (and apex's) multi-tensor applier.

``multi_tensor_applier(op, noop_flag_buffer, tensor_lists, *args)`` calls
``op(chunk_size, noop_flag_buffer, tensor_lists, *args)``: the op walks the lists in
chunks of ``chunk_size`` elements. Upstream's ops (``multi_tensor_l2norm``,
``multi_tensor_lamb`` of its private ``_ext`` library) are not part of this project;
its optimizers use PyTorch's ``_foreach_*``/``_fused_*`` ops instead
(``torch_musa.optim.FusedLAMB``).
"""
from __future__ import annotations

__all__ = ["MultiTensorApply", "multi_tensor_applier"]


class MultiTensorApply:
    """Calls a multi-tensor op with a fixed chunk size."""

    available = True
    warned = False

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size = chunk_size

    def check_avail(self) -> None:
        """Upstream raises here when its extension failed to load; nothing to load here."""

    def __call__(self, op, noop_flag_buffer, tensor_lists, *args):
        self.check_avail()
        return op(self.chunk_size, noop_flag_buffer, tensor_lists, *args)


multi_tensor_applier = MultiTensorApply(2048 * 32)
