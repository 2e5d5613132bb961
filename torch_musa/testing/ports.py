"""Local rendezvous ports that concurrent test processes do not fight over.

A port the OS hands out for ``bind(0)`` comes from the ephemeral range, the
same range every outgoing connection (NCCL and Gloo bootstraps, store clients)
takes its source port from; with a dozen multi-process launches at once, a
port probed free is often taken before a later rendezvous binds it. Ports
below that range are never handed out implicitly, and giving each pytest-xdist
worker its own share of them keeps parallel workers apart as well.
"""
from __future__ import annotations

import os
import random
import socket

_LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default lower bound


def _worker_share() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index % max(count, 1), max(count, 1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(span: int = 1) -> int:
    """A port p with p .. p+span-1 all free now, outside the ephemeral range and
    inside this test worker's share of the ports below it."""
    if span < 1:
        raise ValueError(f"span must be at least 1, got {span}")
    high = _ephemeral_low()
    if high - _LOWEST < span:  # an unusual port range: fall back to the OS's choice
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    index, count = _worker_share()
    blocks = list(range(_LOWEST, high - span + 1, span))[index::count]
    random.shuffle(blocks)
    for start in blocks[:200]:
        if all(_bindable(p) for p in range(start, start + span)):
            return start
    raise RuntimeError(f"no block of {span} free TCP ports in {_LOWEST}..{high - 1} "
                       f"(test worker {index} of {count})")
