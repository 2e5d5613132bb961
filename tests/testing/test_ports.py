"""Rendezvous ports: free, below the ephemeral range, and one share per xdist worker."""
import socket

import pytest

from torch_musa.testing import ports


def test_block_is_free_and_below_the_ephemeral_range():
    start = ports.free_port_block(span=40)
    assert ports._LOWEST <= start and start + 40 <= ports._ephemeral_low()
    held = []
    try:
        for p in range(start, start + 40):  # every port of the block binds now
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            held.append(s)
    finally:
        for s in held:
            s.close()


def test_xdist_workers_get_disjoint_blocks(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    seen = {}
    for w in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{w}")
        seen[w] = {ports.free_port_block(span=40) for _ in range(20)}
    # each worker's blocks come from its own residue class of 40-port blocks
    for w, starts in seen.items():
        assert {(s - ports._LOWEST) // 40 % 4 for s in starts} == {w}


def test_a_taken_port_is_skipped(monkeypatch):
    monkeypatch.setattr(ports.random, "shuffle", lambda blocks: None)  # first block first
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    first = ports.free_port_block(span=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", first + 1))  # the block's second port is now taken
        assert ports.free_port_block(span=2) != first


def test_bad_span_is_refused():
    with pytest.raises(ValueError, match="span must be at least 1"):
        ports.free_port_block(span=0)
