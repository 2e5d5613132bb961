"""Skips and device decorators for tests, and a free address for distributed tests."""
from __future__ import annotations

import functools
import multiprocessing
import os

import torch

from torch_musa.config import CONFIG

from .ports import _bindable, free_port_block

__all__ = [
    "MUSA_AVAILABLE",
    "MULTIGPU_AVAILABLE",
    "skip_if_musa_unavailable",
    "skip_if_not_multiple_musa_device",
    "test_on_nonzero_card_if_multiple_musa_device",
    "gen_ip_port",
]

MUSA_AVAILABLE: bool = torch.musa.is_available()
MULTIGPU_AVAILABLE: bool = MUSA_AVAILABLE and torch.musa.device_count() >= 2

try:
    import pytest

    skip_if_musa_unavailable = pytest.mark.skipif(
        not MUSA_AVAILABLE, reason="No MUSA device is detected")
    skip_if_not_multiple_musa_device = pytest.mark.skipif(
        not MULTIGPU_AVAILABLE, reason="Expect multiple MUSA devices")
except ImportError:  # pragma: no cover - plain unittest
    import unittest

    skip_if_musa_unavailable = unittest.skipIf(not MUSA_AVAILABLE,
                                               "No MUSA device is detected")
    skip_if_not_multiple_musa_device = unittest.skipIf(not MULTIGPU_AVAILABLE,
                                                       "Expect multiple MUSA devices")


def test_on_nonzero_card_if_multiple_musa_device(musa_device: int):
    """Run the decorated test with ``musa:<musa_device>`` as the current device when
    that many devices exist, then once more on the current device (as torch_musa
    does). With too few devices it runs only on the current device."""

    def wrapper(test_func):
        @functools.wraps(test_func)
        def infunc(*args, **kwargs):
            if MUSA_AVAILABLE and torch.musa.device_count() > musa_device:
                with torch.musa.device(musa_device):
                    test_func(*args, **kwargs)
            return test_func(*args, **kwargs)

        return infunc

    return wrapper


# pytest must not collect the decorator factory itself as a test
test_on_nonzero_card_if_multiple_musa_device.__test__ = False


#: Where gen_ip_port hands its choice to the processes spawned after it ("host:port:pid
#: of the process that chose it"): they inherit the environment and read it, through
#: CONFIG, at import, so every rank gets the same pair.
_PORT_ENV = "TORCH_MUSA_TESTING_RENDEZVOUS"
_chosen = ""  # this process's own choice, in the same form


def _process_start(pid: int) -> str:
    """The start time (clock ticks since boot) of process ``pid``, so that a reused
    pid names another file; "" where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _sibling_choice() -> tuple[str, str]:
    """One (host, port) for all the processes started by this one's parent: the first
    to ask picks a free port and writes it down, under a lock, and the others read it."""
    import fcntl
    import tempfile

    ppid = os.getppid()
    folder = os.path.join(tempfile.gettempdir(), f"torch_musa_rendezvous_{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{ppid}-{_process_start(ppid)}")
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            text = f.read().strip()
            if text.count(":") == 1 and text.split(":")[1].isdigit():
                host, port = text.split(":")
                return host, port
            host, port = "127.0.0.1", str(free_port_block())
            f.seek(0)
            f.truncate()
            f.write(f"{host}:{port}\n")
            f.flush()
            return host, port
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def gen_ip_port() -> tuple[str, str]:
    """A (host, port) pair, as strings, for a local rendezvous, the same in every
    process spawned from this one (as the real torch_musa's, whose pair is fixed for
    a while, so that ranks that each call it meet on one port).

    The process that chooses keeps its port while the port is free when asked again
    (a finished group released it); a port taken since is replaced by a fresh one,
    outside the range the OS hands out to other sockets (see ``ports``).
    """
    global _chosen
    saved = _chosen or CONFIG.testing_rendezvous
    parts = saved.split(":")
    if len(parts) == 3 and parts[1].isdigit():
        host, port, owner = parts
        if owner != str(os.getpid()):
            return host, port  # the choice of the process that spawned this one
        if _bindable(int(port)):
            os.environ[_PORT_ENV] = saved  # (again) for the processes spawned from here
            return host, port
    elif multiprocessing.parent_process() is not None:
        # a rank started by mp.spawn/Process whose parent never asked: the ranks are
        # siblings and each calls this on its own, so they agree through a file
        # named after their common parent (the real torch_musa's pair is the same
        # for a few minutes; each rank choosing its own port hangs the rendezvous)
        host, port = _sibling_choice()
        _chosen = os.environ[_PORT_ENV] = f"{host}:{port}:{os.getppid()}"
        return host, port
    host, port = "127.0.0.1", str(free_port_block())
    _chosen = os.environ[_PORT_ENV] = f"{host}:{port}:{os.getpid()}"
    return host, port
