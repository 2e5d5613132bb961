"""Lazy initialisation and the fork guard, as torch.cuda has them."""
from __future__ import annotations

import os
import threading

from torch_musa import _C

_lock = threading.Lock()
_initialized = False
_in_bad_fork = False
_queued_calls: list = []


class BadForkError(RuntimeError):
    pass


def _bad_fork_message() -> str:
    return (
        "Cannot re-initialize MUSA in forked subprocess. To use MUSA with "
        "multiprocessing, you must use the 'spawn' start method "
        "(torch.multiprocessing.set_start_method('spawn'))."
    )


def is_initialized() -> bool:
    return _initialized and not _in_bad_fork


def _is_in_bad_fork() -> bool:
    return _in_bad_fork


def _lazy_call(fn) -> None:
    """Run ``fn`` now if initialised, else at initialisation."""
    with _lock:
        if is_initialized():
            fn()
        else:
            _queued_calls.append(fn)


def _lazy_init() -> None:
    global _initialized
    if is_initialized():
        return
    with _lock:
        if _initialized and not _in_bad_fork:
            return
        if _in_bad_fork:
            raise BadForkError(_bad_fork_message())
        _C._mark_initialized()
        _initialized = True
        calls, _queued_calls[:] = list(_queued_calls), []
    for fn in calls:
        fn()


def init() -> None:
    """Initialise the musa runtime now rather than on first use."""
    _lazy_init()


def _after_fork_in_child() -> None:
    global _initialized, _in_bad_fork
    if _initialized or _C._is_initialized():
        _initialized = True
        _in_bad_fork = True


os.register_at_fork(after_in_child=_after_fork_in_child)
