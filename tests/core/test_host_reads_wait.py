"""A read of device data on the host waits for the work queued on the current stream, as
CUDA's does: a blocking copy to the host (.cpu(), .tolist(), .to("cpu")), .item()
(_local_scalar_dense) and ops that size their result from the data (nonzero). A
non_blocking copy does not wait, and neither does work queued on another stream. A
negative torch.musa._sleep does nothing (CUDA's spin with a negative count)."""
import time

import pytest
import torch

from torch_musa.config import CONFIG

HZ = None


def queue(seconds):
    """Queue `seconds` of device work on the current stream (returns at once)."""
    global HZ
    if HZ is None:
        HZ = torch.musa.get_device_properties(0).clock_rate * 1000
    torch.musa._sleep(int(seconds * HZ))


READS = {
    "item": lambda x: x[1].item(),
    "cpu": lambda x: x.cpu(),
    "tolist": lambda x: x.tolist(),
    "to cpu": lambda x: x.to("cpu"),
    "copy_ into cpu": lambda x: torch.empty(4).copy_(x),
    "nonzero": lambda x: torch.nonzero(x),
    "bool": lambda x: bool(x[1]),
}


@pytest.mark.parametrize("read", [
    pytest.param(r, marks=pytest.mark.skipif(
        CONFIG.driver != "host", reason="CUDA's nonzero reads its count back on a copy that may "
        "or may not wait for the whole stream (both seen on an H100): nothing to assert"))
    if r == "nonzero" else r for r in READS])
def test_a_host_read_waits_for_the_queued_work(read):
    x = torch.arange(4.0, device="musa")
    torch.musa.synchronize()
    s = torch.musa.current_stream()
    queue(0.3)
    assert not s.query()
    t0 = time.perf_counter()
    READS[read](x)
    took = time.perf_counter() - t0
    assert took > 0.25, f"{read} returned after {took:.3f}s with 0.3s queued"
    assert s.query()


@pytest.mark.slow
@pytest.mark.parametrize("pinned", [False, True])
def test_a_non_blocking_copy_does_not_wait(pinned):
    x = torch.arange(4.0, device="musa")
    torch.musa.synchronize()
    s = torch.musa.current_stream()
    queue(2.0)
    try:
        t0 = time.perf_counter()
        if pinned:
            torch.empty(4, pin_memory=True).copy_(x, non_blocking=True)
        else:
            x.to("cpu", non_blocking=True)
        assert time.perf_counter() - t0 < 1.0
        assert not s.query()
    finally:
        torch.musa.synchronize()


@pytest.mark.slow
def test_work_on_another_stream_does_not_hold_a_read_back():
    x = torch.arange(4.0, device="musa")
    torch.musa.synchronize()
    side = torch.musa.Stream()
    with torch.musa.stream(side):
        queue(2.0)
    try:
        t0 = time.perf_counter()
        assert x[2].item() == 2.0 and x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        assert time.perf_counter() - t0 < 1.0
        assert not side.query()
    finally:
        torch.musa.synchronize()


@pytest.mark.slow
def test_a_device_to_device_copy_does_not_wait():
    x = torch.arange(4.0, device="musa")
    torch.musa.synchronize()
    s = torch.musa.current_stream()
    queue(2.0)
    try:
        t0 = time.perf_counter()
        y = x.clone()
        y.copy_(x)
        assert time.perf_counter() - t0 < 1.0
        assert not s.query()
    finally:
        torch.musa.synchronize()


def test_a_negative_sleep_does_nothing():
    torch.musa.synchronize()
    s = torch.musa.current_stream()
    queue(0.3)
    queue(-30)
    assert not s.query()
    t0 = time.perf_counter()
    torch.musa.synchronize()
    assert time.perf_counter() - t0 > 0.2
    queue(-1)  # on an idle stream too: idle again at once (the cuda driver's spin
    deadline = time.perf_counter() + 0.05  # kernel still launches; it ends in microseconds)
    while not s.query() and time.perf_counter() < deadline:
        pass
    assert s.query()
