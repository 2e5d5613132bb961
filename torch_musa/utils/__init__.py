"""Utilities shipped with torch_musa (``musa_converter``, ...)."""
