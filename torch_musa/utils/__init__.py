"""Utilities shipped with torch_musa (``musa_converter``, ``musa_extension``, ...)."""

_EXTENSION_NAMES = ("BuildExtension", "MUSAExtension")


def __getattr__(name: str):
    # The real torch_musa's torch_musa.utils.BuildExtension / MUSAExtension, loaded on
    # first use: musa_converter is imported without torch.
    if name in _EXTENSION_NAMES:
        from torch_musa.utils import musa_extension

        return getattr(musa_extension, name)
    raise AttributeError(f"module 'torch_musa.utils' has no attribute {name!r}")
