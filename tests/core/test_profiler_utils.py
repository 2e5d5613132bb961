"""torch.profiler._utils.BasicEvaluation on musa: musa launches and PrivateUse1 kernels give
the queue depths and idle time, kept in ``musa_events`` (the real torch_musa's
tests/unittest/profiler/test_profiler.py, TestExperimentalUtils, expects these numbers)."""
import unittest.mock
from dataclasses import dataclass, field

import torch
from torch.profiler import DeviceType, _utils

import torch_musa  # noqa: F401


@dataclass(frozen=True)
class _Kineto:
    name: str
    start_us: int
    duration_us: int
    corr: int
    on_device: bool

    def start_ns(self):
        return self.start_us * 1000

    def duration_ns(self):
        return self.duration_us * 1000

    def linked_correlation_id(self):
        return self.corr

    def device_type(self):
        return DeviceType.PrivateUse1 if self.on_device else DeviceType.CPU


@dataclass(frozen=True)
class _Cpu:
    name: str
    id: int
    start_time_ns: int
    duration_time_ns: int
    correlation_id: int = 0
    children: list = field(default_factory=list)

    @property
    def end_time_ns(self):
        return self.start_time_ns + self.duration_time_ns


def _profile():
    launches = [_Kineto("musaLaunchKernel", t, 100, i + 1, False)
                for i, t in enumerate((400, 500, 600, 700, 800, 1500))]
    kernels = [_Kineto("GPU", t, 100, i + 1, True)
               for i, t in enumerate((900, 1000, 1100, 1200, 1300, 1700))]
    starts = (0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1100, 1200)
    names = ["CPU (Before musaLaunchKernel)"] * 4 + ["CPU (After musaLaunchKernel)"] * 4 \
        + ["CPU (After GPU)"] * 4
    cpu = [_Cpu(n, i + 1, s * 1000, 500000 if i == 11 else 100000)
           for i, (n, s) in enumerate(zip(names, starts))]
    prof = unittest.mock.Mock()
    prof.kineto_results.events = unittest.mock.Mock(return_value=launches + kernels)
    prof.kineto_results.experimental_event_tree = unittest.mock.Mock(return_value=cpu)
    return prof


def test_basic_evaluation_is_musas():
    assert _utils.BasicEvaluation.__module__ == "torch_musa.core.profiler_utils"


def test_queue_depth_of_musa_launches_and_kernels():
    ev = _utils.BasicEvaluation(_profile())
    got = [(d.queue_depth, e.name) for d, e in zip(ev.queue_depth_list, ev.musa_events)]
    assert got == [(1, "musaLaunchKernel"), (2, "musaLaunchKernel"), (3, "musaLaunchKernel"),
                   (4, "musaLaunchKernel"), (5, "musaLaunchKernel"), (4, "GPU"), (3, "GPU"),
                   (2, "GPU"), (1, "GPU"), (0, "GPU"), (1, "musaLaunchKernel"), (0, "GPU")]
    cpu = [(ev.metrics[k].queue_depth, k.event.name) for k in ev.event_keys]
    assert [d for d, _ in cpu] == [0, 0, 0, 0, 1, 2, 3, 4, 5, 4, 2, 1]
    assert ev.cuda_events is ev.musa_events


def test_idle_time_counts_where_the_queue_is_empty():
    ev = _utils.BasicEvaluation(_profile())
    idle = [ev.metrics[k].idle_time_ns for k in ev.event_keys]
    assert idle == [100000, 100000, 100000, 100000, 0, 0, 0, 0, 0, 0, 0, 100000]


def test_cpu_only_trace_has_no_queue():
    x = torch.ones(64, 64)
    with torch.profiler.profile() as prof:
        for _ in range(3):
            x = x @ x
    ev = _utils.BasicEvaluation(prof.profiler)
    assert ev.musa_events == [] and not ev.compute_queue_depth()


def test_real_musa_trace_reads_kernel_names():
    a = torch.randn(32, 32, device="musa")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.MUSA]) as prof:
        for _ in range(2):
            a = a @ a
        torch.musa.synchronize()
    ev = _utils.BasicEvaluation(prof.profiler)
    assert ev.musa_events, "the musa kernels of the trace"
    assert all(e.device_type() == DeviceType.PrivateUse1 or e.name().startswith("musaLaunch")
               for e in ev.musa_events)
    assert len(ev.queue_depth_list) == len(ev.musa_events)
