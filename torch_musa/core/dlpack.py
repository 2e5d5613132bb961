"""DLPack for musa tensors: ``torch.from_dlpack``, ``Tensor.__dlpack__`` and
``__dlpack_device__``.

PyTorch's C++ converter already maps PrivateUse1 to ``kDLExtDev`` (index kept)
both ways, and an imported capsule keeps the exporting tensor, hence its musa
storage, alive. Only the Python methods on ``torch.Tensor`` fail: they test the
device type string ``"privateuse1"``, which the rename to ``"musa"`` changes,
and they handle streams for CUDA alone. This wraps the two methods for musa
tensors and leaves every other device to PyTorch.

Streams, mirroring CUDA's producer side: ``stream=-1`` (the default) does not
synchronize; ``None`` means the device's default stream; any other int is a
musa stream handle (``torch.musa.Stream.musa_stream``; 0 is the default
stream), read on the tensor's own device. The named stream waits for the work
queued on the current stream, the export's own copy included, so a consumer
working on that stream sees the data complete.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.overrides import has_torch_function_unary
from torch.utils.dlpack import DLDeviceType

from torch_musa.core.streams import Event, ExternalStream, current_stream, default_stream

_NO_SYNC = -1


def _check_stream(stream: Any) -> None:
    if stream is None or stream == _NO_SYNC:
        return
    if type(stream) is not int:
        raise TypeError(
            f"__dlpack__: stream must be an int (a musa stream handle, "
            f"torch.musa.Stream.musa_stream), -1 or None, got {type(stream).__name__}")
    if stream < 0:
        raise ValueError(
            f"__dlpack__: stream {stream} is not a musa stream handle; pass a handle "
            "(torch.musa.Stream.musa_stream, 0 for the default stream), -1 for no "
            "synchronization, or None for the default stream")


def _sync_to(stream: int | None, index: int) -> None:
    """Make the consumer's ``stream`` wait for the work queued so far on ``index``."""
    if stream == _NO_SYNC:
        return
    target = default_stream(index) if stream is None else ExternalStream(stream, device=index)
    producer = current_stream(index)
    if target == producer:
        return
    event = Event()
    event.record(producer)
    target.wait_event(event)


def install() -> None:
    original_dlpack = torch.Tensor.__dlpack__
    original_device = torch.Tensor.__dlpack_device__

    def __dlpack__(self, *, stream: Any = _NO_SYNC, max_version=None, dl_device=None,
                   copy=None):
        if has_torch_function_unary(self) or self.device.type != "musa":
            return original_dlpack(self, stream=stream, max_version=max_version,
                                   dl_device=dl_device, copy=copy)
        _check_stream(stream)
        capsule = original_dlpack(self, stream=_NO_SYNC, max_version=max_version,
                                  dl_device=dl_device, copy=copy)
        _sync_to(stream, self.device.index)
        return capsule

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        if has_torch_function_unary(self) or self.device.type != "musa":
            return original_device(self)
        return DLDeviceType.kDLExtDev, self.device.index

    __dlpack__.__doc__ = original_dlpack.__doc__
    torch.Tensor.__dlpack__ = __dlpack__
    torch.Tensor.__dlpack_device__ = __dlpack_device__
