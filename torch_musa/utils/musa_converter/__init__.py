"""musa_converter: port CUDA PyTorch code to torch_musa.

Command line: ``musa-converter -r PATH [-l LAUNCH ...] [-e EXCLUDED ...] [--dry-run]``
or ``python -m torch_musa.utils.musa_converter``. From Python::

    from torch_musa.utils.musa_converter import convert_source, port_source, run, Options

One versioned mapping table (``torch_musa/cuda_mapping.yaml``) drives this
converter and ``torch_musa.cuda_compat``. Names load lazily, so the command
starts without importing libcst until it rewrites Python.
"""
import importlib

_EXPORTS = {
    "port_source": "c_porter",
    "Options": "engine",
    "run": "engine",
    "convert_source": "python_rewriter",
    "main": "cli",
}

_TABLE_NAMES = ("TABLE_PATH", "load_table", "review_items")  # re-exported from torch_musa.cuda_mapping

__all__ = sorted([*_EXPORTS, *_TABLE_NAMES])


def __getattr__(name):
    if name in _TABLE_NAMES:
        return getattr(importlib.import_module("torch_musa.cuda_mapping"), name)
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
