"""Hugging Face's ``kernels`` library: musa is a device with no hub kernels.

transformers (5.x) kernelizes every model it loads, ``from_pretrained(device_map=...)``
included, through ``kernels.kernelize(model, device="<device type>")``, and ``kernels``
checks that string against a fixed set of device types (cpu, cuda, mps, neuron, npu,
rocm, tpu, xpu), so a musa model fails to load. ``kernels`` has no registry of device
types; given a ``torch.device`` of any other type it already kernelizes, keeping the
model's own layers wherever no kernel is mapped for that type. The string check is the
only thing in the way: this widens it to accept musa, and leaves every other type to
``kernels``' own check. transformers maps no kernels to musa, so the loaded model
computes with its own layers, as on the CPU.
"""
from __future__ import annotations

import functools
import sys
from types import ModuleType

import torch

from torch_musa._post_import import when_imported

__all__ = ["install", "accepts_musa"]

# Where kernels (0.19) keeps the check; the package's `kernelize` attribute is the
# function, so the module is reached through sys.modules by the import hook.
_CHECK_MODULE = "kernels._internals.layer.kernelize"
_CHECK = "_validate_device_type"


def _musa_type() -> str:
    return torch._C._get_privateuse1_backend_name()


def _widen(module: ModuleType) -> None:
    check = getattr(module, _CHECK, None)
    if check is None:
        raise AttributeError(f"{module.__name__}.{_CHECK} is gone: this kernels version is not known to torch_musa")
    if getattr(check, "_accepts_musa", False):
        return

    @functools.wraps(check)
    def validate_device_type(device_type: str) -> None:
        if device_type != _musa_type():
            check(device_type)

    validate_device_type._accepts_musa = True
    setattr(module, _CHECK, validate_device_type)


def accepts_musa() -> bool:
    """Whether the loaded ``kernels`` accepts the device type ``"musa"`` (False if not loaded)."""
    module = sys.modules.get(_CHECK_MODULE)
    return module is not None and getattr(getattr(module, _CHECK, None), "_accepts_musa", False)


def install() -> None:
    """Widen the check once ``kernels`` is imported (now, if it already is)."""
    when_imported(_CHECK_MODULE, _widen,
                  failure="transformers' from_pretrained on musa needs use_kernels=False or USE_HUB_KERNELS=0")
