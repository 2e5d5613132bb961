"""The timing engine: device-agnostic, blocked autorange, robust statistics.

A device other than the CPU is synchronised only through ``torch.accelerator``
and timed with device events (``torch.Event(enable_timing=True)``); if its
events cannot time, the wall clock between two synchronisations is used. The
CPU is timed with ``time.perf_counter``. Nothing here looks at a device's name.

Not ``torch.utils.benchmark.Timer``: it reads the wall clock after a
``torch.accelerator.synchronize()`` (no device events), runs a statement string
with no call index (input rotation needs one), sizes blocks by powers of ten
until the timer costs 1e-4 of a block (``min_block_time``, ``min_blocks``,
``max_blocks`` and ``iterations`` would not hold: a 2 ms op gets 100 calls a
block), adds its own warm-up to every ``timeit``, and runs on one thread unless told.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from typing import Callable

import torch


def _is_cpu(device: torch.device) -> bool:
    return device.type == "cpu"


@contextlib.contextmanager
def on_device(device: torch.device):
    """Make ``device`` current for its accelerator while timing (no-op on the CPU)."""
    if _is_cpu(device) or device.index is None:
        yield
        return
    with torch.accelerator.device_index(device.index):
        yield


def synchronize(device: torch.device) -> None:
    if not _is_cpu(device):
        torch.accelerator.synchronize(device)


class Timer:
    """Times a block of calls on one device; returns seconds."""

    def __init__(self, device: torch.device, use_events: bool = True):
        self.device = torch.device(device)
        self.kind = "perf_counter"
        if not _is_cpu(self.device) and use_events:
            try:
                s = torch.Event(device=self.device, enable_timing=True)
                e = torch.Event(device=self.device, enable_timing=True)
                s.record()
                e.record()
                e.synchronize()
                s.elapsed_time(e)
                self.kind = "event"
            except Exception:  # events without timing: fall back to the wall clock
                self.kind = "sync+perf_counter"
        elif not _is_cpu(self.device):
            self.kind = "sync+perf_counter"

    def time_block(self, fn: Callable[[int], None], n: int, start_index: int = 0) -> float:
        dev = self.device
        if self.kind == "event":
            s = torch.Event(device=dev, enable_timing=True)
            e = torch.Event(device=dev, enable_timing=True)
            synchronize(dev)
            s.record()
            for i in range(start_index, start_index + n):
                fn(i)
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / 1e3
        synchronize(dev)
        t0 = time.perf_counter()
        for i in range(start_index, start_index + n):
            fn(i)
        synchronize(dev)
        return time.perf_counter() - t0

    def overhead(self, repeats: int = 20) -> float:
        """The median time of an empty block: what one measurement costs by itself."""
        samples = [self.time_block(lambda i: None, 1) for _ in range(repeats)]
        return statistics.median(samples)


@dataclasses.dataclass
class Measurement:
    times: list[float]            # seconds per call, one per block
    block_size: int
    calls: int
    timer: str
    timer_overhead: float
    warmup_calls: int

    def stats(self) -> dict:
        t = sorted(self.times)
        return {
            "median_s": percentile(t, 50), "mean_s": statistics.fmean(t),
            "min_s": t[0], "max_s": t[-1],
            "p10_s": percentile(t, 10), "p25_s": percentile(t, 25),
            "p75_s": percentile(t, 75), "p90_s": percentile(t, 90),
            "stdev_s": statistics.stdev(t) if len(t) > 1 else 0.0,
            "iqr_s": percentile(t, 75) - percentile(t, 25),
            "blocks": len(t), "block_size": self.block_size, "calls": self.calls,
            "timer": self.timer, "timer_overhead_s": self.timer_overhead,
            "warmup_calls": self.warmup_calls,
        }


def merge(parts: list[Measurement]) -> Measurement:
    """One measurement from several rounds of the same thing (per-call times pooled)."""
    if len(parts) == 1:
        return parts[0]
    return Measurement(times=[t for p in parts for t in p.times],
                       block_size=max(p.block_size for p in parts),
                       calls=sum(p.calls for p in parts), timer=parts[0].timer,
                       timer_overhead=min(p.timer_overhead for p in parts),
                       warmup_calls=sum(p.warmup_calls for p in parts))


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return sorted_values[lo]
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def measure(fn: Callable[[int], None], device, *, min_time: float = 0.1,
            warmup: int = 2, warmup_time: float = 0.01, iterations: int | None = None,
            min_block_time: float = 1e-3, overhead_factor: float = 100.0,
            min_blocks: int = 5, max_blocks: int = 1000, use_events: bool = True) -> Measurement:
    """Time ``fn(i)`` (``i`` counts calls, for input rotation) on ``device``.

    1. warm-up: ``warmup`` calls, then more until ``warmup_time`` has passed;
    2. blocked autorange: the block size doubles until one block takes at least
       ``max(min_block_time, overhead_factor * timer overhead)``, so the cost of
       reading the timer is negligible against what a block measures;
    3. blocks are timed until ``min_time`` is spent (at least ``min_blocks``, at
       most ``max_blocks``), or exactly ``iterations`` blocks when given.
    """
    device = torch.device(device)
    timer = Timer(device, use_events)
    with on_device(device):
        overhead = timer.overhead()
        i = 0
        t0 = time.perf_counter()
        synchronize(device)
        while i < warmup or (time.perf_counter() - t0 < warmup_time and i < 10_000):
            fn(i)
            i += 1
            if i >= warmup and warmup_time <= 0:
                break
        synchronize(device)
        warmup_calls = i
        target = max(min_block_time, overhead_factor * overhead)
        n = 1
        while True:
            dt = timer.time_block(fn, n, i)
            i += n
            if dt >= target or n >= 1 << 20:
                break
            # jump straight towards the target, at most 8x at a time
            grow = min(8.0, max(2.0, 1.2 * target / max(dt, 1e-9)))
            n = max(n + 1, int(n * grow))
        times = [dt / n]
        spent = dt
        while True:
            if iterations is not None:
                if len(times) >= iterations:
                    break
            elif (spent >= min_time and len(times) >= min_blocks) or len(times) >= max_blocks:
                break
            dt = timer.time_block(fn, n, i)
            i += n
            spent += dt
            times.append(dt / n)
        if iterations is not None and len(times) > iterations:
            times = times[:iterations]
    return Measurement(times=times, block_size=n, calls=n * len(times), timer=timer.kind,
                       timer_overhead=overhead, warmup_calls=warmup_calls)
