"""``torch_musa.core._utils``: the real torch_musa's module of device-argument helpers.

``_get_musa_device_index`` answers as upstream's: None and ``"musa"`` name the current
device, ``allow_cpu`` lets a CPU device through as -1, anything else not musa is a
ValueError. The parsing itself is ``torch.musa``'s (``core.device._get_device_index``).
"""
from __future__ import annotations

from typing import Any, Union

import torch

from torch_musa.core.device import _get_device_index, _parse_device, device as _musa_device

__all__ = ["DeviceUnion", "_get_musa_device_index"]

DeviceUnion = Union[torch.device, int, str, None]


def _get_musa_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The musa index :attr:`device` names (a ``torch.device``, ``torch.musa.device``,
    string, int or None); None and a musa device without an index name the current one,
    and with ``allow_cpu`` a CPU device gives -1."""
    if isinstance(device, _musa_device):
        return device.idx
    if isinstance(device, str):
        device = _parse_device(device)
        optional = optional or device.index is None
    if allow_cpu and isinstance(device, torch.device) and device.type == "cpu":
        return -1
    return _get_device_index(device, optional=optional or device is None)
