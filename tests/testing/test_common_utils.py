"""torch_musa.testing's common_utils names and gen_ip_port, as the real package's."""
import multiprocessing
import os

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa import testing
from torch_musa.testing import decorators


def test_get_cycles_per_ms_measures_sleep():
    cycles = testing.get_cycles_per_ms()
    assert cycles > 0
    start = torch.musa.Event(enable_timing=True)
    end = torch.musa.Event(enable_timing=True)
    start.record()
    torch.musa._sleep(int(cycles * 20))
    end.record()
    end.synchronize()
    assert 15 < start.elapsed_time(end) < 60  # ~20 ms of device time


def test_freeze_rng_state_restores_cpu_and_musa():
    torch.manual_seed(1)
    torch.musa.manual_seed(1)
    with testing.freeze_rng_state():
        a_cpu, a_musa = torch.rand(3), torch.rand(3, device="musa")
    b_cpu, b_musa = torch.rand(3), torch.rand(3, device="musa")
    testing.assert_equal(a_cpu, b_cpu)
    testing.assert_equal(a_musa.cpu(), b_musa.cpu())
    with pytest.raises(AssertionError):
        testing.assert_equal(torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]))


def test_cpu_and_musa_params():
    cpu, musa = testing.cpu_and_musa()
    assert cpu == "cpu" and musa.values == ("musa",)
    assert [m.name for m in musa.marks] == ["needs_musa"]
    assert testing.needs_musa(lambda: None).mark.name == "needs_musa"


def _child(queue):
    queue.put(testing.gen_ip_port())


@pytest.mark.slow
def test_gen_ip_port_same_in_sibling_ranks_when_the_parent_never_asked(monkeypatch):
    """upstream's test_dist pattern: only the spawned ranks call gen_ip_port, each
    on its own; they must still meet on one port (each drawing its own hangs)."""
    monkeypatch.delenv(decorators._PORT_ENV, raising=False)
    monkeypatch.setattr(decorators, "_chosen", "")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(queue,)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert got[0] == got[1] and int(got[0][1]) > 0
    assert decorators._PORT_ENV not in os.environ  # the parent's own choice is untouched


@pytest.mark.slow
def test_gen_ip_port_same_in_spawned_ranks(monkeypatch):
    monkeypatch.delenv(decorators._PORT_ENV, raising=False)
    host, port = testing.gen_ip_port()
    assert testing.gen_ip_port() == (host, port)  # free again: kept
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(queue,))
    p.start()
    got = queue.get(timeout=120)
    p.join(60)
    assert got == (host, port)
    import socket
    with socket.socket() as s:  # taken since: the choosing process draws a new one
        s.bind((host, int(port)))
        s.listen()
        again = testing.gen_ip_port()
    assert again != (host, port) and int(again[1]) > 0
    assert os.environ[decorators._PORT_ENV].startswith(f"{again[0]}:{again[1]}:")
