"""Streams and events: ordering, asynchrony of _sleep, timing, non_blocking copies."""
import time

import pytest
import torch


def cycles(ms: float) -> int:
    """_sleep cycles for ``ms`` at the device's clock (the profile's, or the GPU's)."""
    return int(ms * 1e-3 * torch.musa.get_device_properties(0).clock_rate * 1e3)


@pytest.mark.requires_devices(2)
def test_default_and_current_streams():
    s = torch.musa.current_stream()
    assert s == torch.musa.default_stream() and s.stream_id == 0
    assert torch.musa.current_stream(1).device == torch.device("musa", 1)
    new = torch.musa.Stream()
    assert new != s and new.device == torch.device("musa", 0)
    with torch.musa.stream(new):
        assert torch.musa.current_stream() == new
        assert torch.accelerator.current_stream() == new
    assert torch.musa.current_stream() == s
    on1 = torch.musa.Stream("musa:1")
    with torch.musa.stream(on1):  # switches device too
        assert torch.musa.current_device() == 1
    assert torch.musa.current_device() == 0
    ext = torch.musa.ExternalStream(0x1234)
    assert ext.stream_id == 0x1234
    assert torch.musa.Stream(priority=-1).priority == -1


def test_sleep_is_asynchronous_and_synchronize_waits():
    s = torch.musa.Stream()
    with torch.musa.stream(s):
        t0 = time.perf_counter()
        torch.musa._sleep(cycles(200))
        enqueue = time.perf_counter() - t0
        done = torch.musa.Event()
        done.record()
    assert enqueue < 0.05  # returned long before the 200 ms of device work
    assert not s.query() and not done.query()
    assert torch.musa.default_stream().query()  # other streams are independent
    t0 = time.perf_counter()
    s.synchronize()
    assert time.perf_counter() - t0 > 0.1
    assert s.query() and done.query()


def test_event_timing_measures_the_sleep():
    start, end = torch.musa.Event(enable_timing=True), torch.musa.Event(enable_timing=True)
    start.record()
    torch.musa._sleep(cycles(50))
    end.record()
    end.synchronize()
    assert 45 <= start.elapsed_time(end) <= 200
    untimed = torch.musa.Event()
    untimed.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        start.elapsed_time(untimed)
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        torch.musa.Event(enable_timing=True).elapsed_time(end)


def test_wait_event_and_wait_stream_order_streams():
    producer, consumer = torch.musa.Stream(), torch.musa.Stream()
    with torch.musa.stream(producer):
        torch.musa._sleep(cycles(100))
    consumer.wait_stream(producer)
    assert not consumer.query()  # consumer now waits for the producer's sleep
    marker = torch.musa.Event()
    marker.record(consumer)
    marker.synchronize()
    assert producer.query()  # consumer's point is after the producer's work
    e = torch.musa.Event()
    with torch.musa.stream(producer):
        torch.musa._sleep(cycles(50))
        e.record()
    consumer.wait_event(e)
    assert not consumer.query()
    torch.musa.synchronize()
    assert consumer.query()


def test_torch_stream_and_event_work_the_same_way():
    s = torch.Stream(device="musa")
    e1, e2 = torch.Event(device="musa", enable_timing=True), torch.Event(device="musa", enable_timing=True)
    with s:
        e1.record(s)
        torch.musa._sleep(cycles(30))
        e2.record(s)
    torch.accelerator.synchronize()
    assert e1.elapsed_time(e2) >= 25


def test_work_on_a_side_stream_gives_the_right_values():
    s = torch.musa.Stream()
    x = torch.arange(1000.0, device="musa")
    s.wait_stream(torch.musa.current_stream())
    with torch.musa.stream(s):
        y = (x * 2).sum()
        y.record_stream(s)
    torch.musa.current_stream().wait_stream(s)
    assert y.item() == 999000.0


@pytest.mark.requires_devices(2)
def test_non_blocking_copies_round_trip():
    src = torch.randn(1 << 16).pin_memory()
    dev = src.to("musa", non_blocking=True)
    back = torch.empty_like(src).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.musa.current_stream().synchronize()
    assert torch.equal(back, src)
    assert torch.equal(dev.to("musa:1", non_blocking=True).cpu(), src)
