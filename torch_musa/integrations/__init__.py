"""musa in third-party libraries that keep their own list of device types.

Each module here hooks one library through ``torch_musa._post_import`` (nothing is
imported that the user did not import) and changes only what musa needs.
"""
from torch_musa.integrations import hub_kernels

__all__ = ["install"]


def install() -> None:
    """Hook every library integration (run at ``import torch_musa``)."""
    hub_kernels.install()
