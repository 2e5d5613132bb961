"""musa_converter: port CUDA PyTorch code to torch_musa.

Command line: ``musa-converter -r PATH [-l LAUNCH ...] [-e EXCLUDED ...] [--dry-run]``
or ``python -m torch_musa.utils.musa_converter``. From Python::

    from torch_musa.utils.musa_converter import convert_source, port_source, run, Options

One versioned mapping table (``mapping.yaml``) drives this converter and the
runtime layer ``torch_musa.cuda_compat``. Names load lazily, so the runtime
layer can read the table without importing libcst.
"""
import importlib

_EXPORTS = {
    "port_source": "c_porter",
    "Options": "engine",
    "run": "engine",
    "convert_source": "python_rewriter",
    "TABLE_PATH": "table",
    "load_table": "table",
    "review_items": "table",
    "main": "cli",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
