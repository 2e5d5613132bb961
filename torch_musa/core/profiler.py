"""``torch.musa.profiler``: torch.cuda.profiler's start/stop/profile, which tell an
attached external profiling tool to start or stop collecting. Under the cuda driver they
are CUDA's musaProfilerStart/Stop (cudaProfilerStart/Stop). The host driver has no external
tool to tell, so they succeed and do nothing, as CUDA's do when no tool is attached; use
``torch.profiler`` (ProfilerActivity.MUSA) to see musa kernels."""
from __future__ import annotations

import contextlib

from torch_musa.core.runtime_api import check_error, musart

__all__ = ["start", "stop", "profile"]


def start() -> None:
    """Start the attached profiling tool's collection (raises MusaError on failure)."""
    check_error(musart().musaProfilerStart())


def stop() -> None:
    """Stop the attached profiling tool's collection (raises MusaError on failure)."""
    check_error(musart().musaProfilerStop())


@contextlib.contextmanager
def profile():
    """Collect inside the block: start() on entry, stop() on exit (also on an error)."""
    try:
        start()
        yield
    finally:
        stop()
