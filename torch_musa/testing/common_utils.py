"""The real torch_musa.testing.common_utils' helpers: cycles per millisecond of
``torch.musa._sleep``, freezing the RNGs, the cpu/musa parametrisation, exact
equality."""
from __future__ import annotations

import contextlib
import functools
import statistics

import torch
from torch.utils._mode_utils import no_dispatch

try:
    import pytest
except ImportError:  # pragma: no cover - plain unittest
    pytest = None

__all__ = ["get_cycles_per_ms", "freeze_rng_state", "cpu_and_musa", "needs_musa", "assert_equal",
           "spawn_isolated_test"]


@functools.lru_cache
def get_cycles_per_ms() -> float:
    """How many ``torch.musa._sleep`` cycles make a millisecond of device time, measured
    with timing events (the mean of 10 runs less the 2 fastest and 2 slowest)."""

    def measure() -> float:
        start = torch.musa.Event(enable_timing=True)
        end = torch.musa.Event(enable_timing=True)
        start.record()
        torch.musa._sleep(1_000_000)
        end.record()
        end.synchronize()
        return 1_000_000 / start.elapsed_time(end)

    vals = sorted(measure() for _ in range(10))
    return statistics.mean(vals[2:-2])


@contextlib.contextmanager
def freeze_rng_state():
    """Restore the CPU and current musa generators' states after the block (outside any
    dispatch mode or functorch transform, as torch's own helper)."""
    with no_dispatch(), torch._C._DisableFuncTorch():
        cpu_state = torch.get_rng_state()
        musa_state = torch.musa.get_rng_state() if torch.musa.is_available() else None
    try:
        yield
    finally:
        with no_dispatch(), torch._C._DisableFuncTorch():
            if musa_state is not None:
                torch.musa.set_rng_state(musa_state)
            torch.set_rng_state(cpu_state)


def cpu_and_musa():
    """``("cpu", "musa")`` for ``pytest.mark.parametrize``, musa marked ``needs_musa``."""
    return ("cpu", pytest.param("musa", marks=pytest.mark.needs_musa))


def needs_musa(test_func):
    """Mark a test as needing the musa device (``pytest.mark.needs_musa``)."""
    return pytest.mark.needs_musa(test_func)


def assert_equal(actual, expected, **kwargs) -> None:
    """``torch.testing.assert_close`` with no tolerance (values must be identical)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, **kwargs)


def spawn_isolated_test(fn):
    """Run each call of the test ``fn`` in a fresh Python interpreter (the real
    torch_musa's decorator, for tests whose process state must not leak into others).

    The child imports ``fn``'s module (by name, else from its file, with this
    process's ``sys.path``) and calls the undecorated function with the same
    (picklable) arguments; a failure there raises ``RuntimeError`` carrying the
    child's stderr. Put it above ``pytest.mark.parametrize``::

        @spawn_isolated_test
        @pytest.mark.parametrize("n", [1, 2])
        def test_foo(n): ...
    """
    import inspect
    import os
    import pickle
    import subprocess
    import sys

    try:
        source_file = inspect.getfile(fn)
    except TypeError:
        source_file = None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> None:
        payload = pickle.dumps({"module": fn.__module__, "qualname": fn.__qualname__,
                                "file": source_file, "sys_path": list(sys.path),
                                "args": args, "kwargs": kwargs})
        proc = subprocess.run([sys.executable, "-m", "torch_musa.testing.common_utils"],
                              input=payload, capture_output=True, env=os.environ.copy())
        if proc.returncode != 0:
            raise RuntimeError("[Error raised in subprocess]:\n"
                               + proc.stderr.decode(errors="replace"))

    wrapper._isolated_fn = fn
    return wrapper


def _run_isolated() -> None:
    """The child side of :func:`spawn_isolated_test`: payload on stdin."""
    import importlib
    import importlib.util
    import pickle
    import sys

    job = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = job["sys_path"]
    try:
        module = importlib.import_module(job["module"])
    except ImportError:
        if not job["file"]:
            raise
        spec = importlib.util.spec_from_file_location(job["module"], job["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[job["module"]] = module
        spec.loader.exec_module(module)
    obj = module
    for part in job["qualname"].split("."):
        obj = getattr(obj, part)
    obj = getattr(obj, "_isolated_fn", obj)
    obj(*job["args"], **job["kwargs"])


if __name__ == "__main__":
    _run_isolated()
