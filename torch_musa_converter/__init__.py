"""Fast start for the ``musa-converter`` command (the console script points here).

Importing anything under ``torch_musa`` first runs ``torch_musa/__init__.py``,
which imports torch and starts the runtime (2-4 s). Rewriting text needs none
of that, so this launcher puts an empty placeholder for the package root in
``sys.modules`` (its ``__path__`` is the real package folder) and then imports
the converter, which only uses ``torch_musa.cuda_mapping`` (PyYAML) and libcst.
The placeholder is only installed when ``torch_musa`` is not imported yet, and
only in this command's own process; ``python -m torch_musa.utils.musa_converter``
still works and loads the whole package.
"""
import importlib.util
import sys
import types


def _install_root_placeholder() -> None:
    if "torch_musa" in sys.modules:
        return
    spec = importlib.util.find_spec("torch_musa")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("musa-converter: the torch_musa package is not installed")
    root = types.ModuleType("torch_musa", "placeholder: musa-converter does not load torch")
    root.__path__ = list(spec.submodule_search_locations)
    sys.modules["torch_musa"] = root


_install_root_placeholder()

from torch_musa.utils.musa_converter.cli import main  # noqa: E402  (needs the placeholder)

__all__ = ["main"]
