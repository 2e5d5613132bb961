"""Lazy initialisation and the fork guard, as torch.cuda has them.

``torch.utils.checkpoint`` saves and restores a device's RNG state only when
``torch.<device>._initialized`` is true, so this flag is part of the contract:
without it recomputed dropout masks differ and gradients come out wrong.
"""
from __future__ import annotations

import os
import threading
import traceback

from torch_musa import _C

_lock = threading.RLock()
_tls = threading.local()
_initialized = False
_in_bad_fork = False
_queued_calls: list = []  # (callable, the caller's stack) in call order
_queued_seeds: dict = {}  # "seed" / "seed_all" -> the latest such call, newest kind last


class BadForkError(RuntimeError):
    pass


class DeferredMusaCallError(RuntimeError):
    """A call queued before initialisation failed when initialisation ran it."""


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


def _lazy_call(fn, *, seed: bool = False, seed_all: bool = False) -> None:
    """Run ``fn`` now if initialised, else at initialisation.

    Seeding calls replace earlier ones of their kind, as on CUDA: the last
    ``manual_seed_all`` before the first tensor is the one that counts.
    """
    with _lock:
        if is_initialized():
            fn()
            return
        entry = (fn, traceback.format_stack())
        if seed or seed_all:
            kind = "seed_all" if seed_all else "seed"
            _queued_seeds.pop(kind, None)
            _queued_seeds[kind] = entry  # dicts keep insertion order: newest last
        else:
            _queued_calls.append(entry)


def _lazy_init() -> None:
    """Initialise once, thread-safely; a reentrant call from the queued calls returns."""
    global _initialized
    if is_initialized() or getattr(_tls, "is_initializing", False):
        return
    with _lock:
        if is_initialized():
            return
        if _in_bad_fork:
            raise BadForkError(_bad_fork_message())
        _C._mark_initialized()
        _tls.is_initializing = True
        try:
            # As on CUDA: queued calls in order, then the seeds (newest last).
            calls = _queued_calls + list(_queued_seeds.values())
            _queued_calls.clear()
            _queued_seeds.clear()
            for fn, stack in calls:
                try:
                    fn()
                except Exception as e:
                    raise DeferredMusaCallError(
                        f"MUSA call failed lazily at initialization with error: {e}\n\n"
                        "MUSA call was originally invoked at:\n\n" + "".join(stack)
                    ) from e
        finally:
            _tls.is_initializing = False
        _initialized = True


def init() -> None:
    """Initialise the musa runtime now rather than on first use."""
    _lazy_init()


def _after_fork_in_child() -> None:
    global _initialized, _in_bad_fork
    if _initialized or _C._is_initialized():
        _initialized = False
        _in_bad_fork = True


os.register_at_fork(after_in_child=_after_fork_in_child)
