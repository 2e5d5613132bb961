"""musa_converter: port CUDA PyTorch code to torch_musa.

Command line: ``musa-converter -r PATH [-l LAUNCH] [-e EXCLUDED ...] [--dry-run]``
or ``python -m torch_musa.utils.musa_converter``. From Python::

    from torch_musa.utils.musa_converter import convert_source, port_source, run, Options

One versioned mapping table (``mapping.yaml``) drives this converter and the
runtime layer ``torch_musa.cuda_compat``.
"""
from torch_musa.utils.musa_converter.c_porter import port_source
from torch_musa.utils.musa_converter.engine import Options, run
from torch_musa.utils.musa_converter.python_rewriter import convert_source
from torch_musa.utils.musa_converter.table import TABLE_PATH, load_table, review_items

__all__ = ["Options", "run", "convert_source", "port_source", "load_table", "review_items",
           "TABLE_PATH"]
