"""``torch.musa.nvtx``: named ranges and marks (torch.cuda.nvtx's API) that show in
torch.profiler traces (as user annotations on the CPU timeline, the way NVTX ranges
show in Nsight). Without a profiler running they cost one record-function call."""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any

import torch

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]

_local = threading.local()  # this thread's stack of open range_push ranges
_started: dict[int, Any] = {}  # range_start ids -> their record functions (any thread may end one)
_ids = itertools.count(1)
_lock = threading.Lock()


def _enter(msg: str) -> Any:
    return torch.ops.profiler._record_function_enter_new(str(msg), None)


def _exit(handle: Any) -> None:
    torch.ops.profiler._record_function_exit._RecordFunction(handle)


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def range_push(msg: str) -> int:
    """Open a nested range; returns its depth (0-based), as NVTX does."""
    stack = _stack()
    stack.append(_enter(msg))
    return len(stack) - 1


def range_pop() -> int:
    """Close the innermost open range of this thread; returns its depth, -1 if none."""
    stack = _stack()
    if not stack:
        return -1
    _exit(stack.pop())
    return len(stack)


def range_start(msg: str) -> int:
    """Open a range that any thread may close with range_end(id)."""
    rid = next(_ids)
    with _lock:
        _started[rid] = _enter(msg)
    return rid


def range_end(range_id: int) -> None:
    """Close a range opened by range_start."""
    with _lock:
        handle = _started.pop(range_id, None)
    if handle is None:
        raise ValueError(f"torch.musa.nvtx.range_end: no open range with id {range_id}")
    _exit(handle)


def mark(msg: str) -> None:
    """An instant event."""
    _exit(_enter(msg))


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any):
    """Context manager / decorator: a range around its scope; ``msg.format(*args, **kwargs)``."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
