"""torch_musa: the ``musa`` accelerator device for stock PyTorch.

Importing this package (or ``import torch`` with PyTorch's backend autoload)
registers the device: the runtime core (torch_musa._C), the ``musa`` name,
``torch.musa`` and the tensor/module/storage methods.
"""
from __future__ import annotations


def _autoload() -> None:
    """Entry point for PyTorch's ``torch.backends`` autoload.

    Defined before ``import torch``: when this package is imported first, torch's
    own autoload looks it up while this module is still initialising.
    """
    import sys  # noqa: PLC0415

    if "torch_musa._unavailable" in sys.modules and sys.modules["torch_musa._unavailable"].error():
        # The configuration was bad: this module is a husk. Forget it, so that an explicit
        # `import torch_musa` runs again and raises the configuration's error.
        sys.modules.pop(__name__, None)


import torch  # noqa: E402

__version__ = "0.1.0"

from torch_musa import _unavailable  # noqa: E402

try:
    from torch_musa.config import CONFIG as _CONFIG  # noqa: E402  (reads the environment, once)
except (ValueError, RuntimeError) as _error:
    # A bad TORCH_MUSA_* value. Under torch's autoload (`import torch`) it must not fail every
    # import of torch in this environment, CPU-only scripts included: warn, and let musa raise
    # it when it is used, as CUDA reports a bad PYTORCH_CUDA_ALLOC_CONF on first use. An
    # explicit `import torch_musa` raises it.
    if not _unavailable.autoloading():
        raise
    _unavailable.install(_error)
else:
    _unavailable.uninstall()  # a stand-in from an earlier autoload, if the environment was fixed since
    from torch_musa import _setup  # noqa: E402, F401  (registers the device)


__all__ = ["__version__"]


def __getattr__(name: str):
    """The real torch_musa is ``torch.musa`` itself, so its top-level names
    (``torch_musa.set_device``, ``torch_musa.is_available``, ``torch_musa.ByteTensor``, ...)
    are torch.musa's."""
    from torch_musa import core as _musa_module  # noqa: PLC0415  (loaded by _setup)

    try:
        return getattr(_musa_module, name)
    except AttributeError:
        raise AttributeError(f"module 'torch_musa' has no attribute {name!r}") from None
