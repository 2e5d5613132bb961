"""The timing engine on a trivial op: blocked autorange, statistics, events, rotation."""
import time

import pytest
import torch

from torch_musa.op_benchmark import timing
from torch_musa.op_benchmark.config import expand, parse_suite
from torch_musa.op_benchmark.runner import prepare, run_test


def test_percentile():
    v = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert timing.percentile(v, 50) == 3.0
    assert timing.percentile(v, 0) == 1.0 and timing.percentile(v, 100) == 5.0
    assert timing.percentile(v, 25) == 2.0 and timing.percentile([1.0, 2.0], 50) == 1.5


def test_trivial_op_on_cpu_uses_blocks():
    a, b = torch.ones(16), torch.ones(16)
    m = timing.measure(lambda i: torch.add(a, b), "cpu", min_time=0.02, min_block_time=1e-3)
    st = m.stats()
    assert m.timer == "perf_counter"
    # one add takes microseconds: a block must hold many calls to reach 1 ms. How many, and
    # how long a block then takes, depends on the load while calibrating and measuring (an
    # H100 host running 16 test workers: 64 calls of 2.9 us), so only "many" is asserted.
    assert m.block_size >= 8
    assert st["blocks"] >= 5 and st["calls"] == st["blocks"] * m.block_size
    assert 0 < st["min_s"] <= st["p10_s"] <= st["median_s"] <= st["p90_s"] <= st["max_s"]
    assert st["median_s"] < 1e-3
    assert m.warmup_calls >= 2


def test_known_duration_is_measured():
    m = timing.measure(lambda i: time.sleep(0.002), "cpu", min_time=0.03, warmup=1,
                       warmup_time=0.0, min_block_time=1e-3)
    assert m.block_size == 1
    assert 0.0019 <= m.stats()["median_s"] <= 0.006


def test_fixed_iterations_and_rotation_index():
    seen = []
    m = timing.measure(lambda i: seen.append(i), "cpu", iterations=3, warmup=2, warmup_time=0.0,
                       min_block_time=1e-4)
    assert len(m.times) == 3
    # the call index keeps counting through warm-up and blocks (it picks the input set)
    assert seen == list(range(len(seen)))


def test_device_timing_goes_through_events(musa):
    x = torch.ones(64, device=musa)
    m = timing.measure(lambda i: x.add(1), musa, min_time=0.01, min_block_time=5e-4)
    assert m.timer == "event"
    assert m.stats()["median_s"] > 0 and m.block_size >= 1


ROT = """
cases:
  - name: neg
    op: torch.neg
    inputs: [{name: x, shape: [N]}]
    configs: [{tags: [short], cross: {N: [8]}}]
"""


def test_input_rotation_and_same_inputs_everywhere(fast):
    (t,) = expand([parse_suite(ROT, "rot.yaml")])
    fast.max_rotations = 4
    p = prepare(t, torch.device("cpu"), fast)
    assert p.rotations == 4          # tiny inputs: several sets so caches do not flatter them
    q = prepare(t, torch.device("cpu"), fast)
    assert torch.equal(p.outputs[0], q.outputs[0])   # seeded: the same on every run
    rows = run_test(t, [torch.device("cpu")], fast)
    (r,) = rows
    assert r["status"] == "ok" and r["rotations"] == 4 and r["median_s"] > 0
    assert r["bytes"] == 8 * 4 * 2 and r["gbps"] > 0
