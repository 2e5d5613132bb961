"""Configuration, the bottom layer: every environment variable torch_musa reads
(``variables``), the hardware profiles (``profiles``) and the frozen runtime
configuration built from them once, at import (``CONFIG``, in ``runtime``).

Imports only torch and the standard library. ``python -m torch_musa.config``
prints the configuration; ``--markdown`` prints the README's variable table.
"""
from torch_musa.config.runtime import CONFIG, RuntimeConfig

__all__ = ["CONFIG", "RuntimeConfig"]
