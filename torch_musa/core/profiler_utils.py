"""``torch.profiler._utils.BasicEvaluation`` for musa: queue depth and idle time from
musa launches and musa kernels.

torch's class finds launches by CUDA runtime names (``cudaLaunchKernel`` ...) and kernels
by ``DeviceType.CUDA``, and keeps them in ``cuda_events``; on musa it finds nothing, so
every queue depth is 0 and the "CPU (Before musaLaunchKernel)" and "(After ...)" counters
never move. This subclass reads ``musaLaunchKernel``-style launches and
``DeviceType.PrivateUse1`` kernels (memory copies and allocations excluded, as torch
excludes them) and keeps them in ``musa_events``, the real torch_musa's attribute name;
``cuda_events`` names the same list, for code written against torch's class.
:func:`install` puts it at ``torch.profiler._utils.BasicEvaluation``.
"""
from __future__ import annotations

import torch
from torch.profiler import DeviceType
from torch.profiler import _utils as _torch_utils

__all__ = ["BasicEvaluation", "install"]

_LAUNCH_PREFIXES = (
    "musaLaunchKernel",  # musaLaunchKernel, musaLaunchKernelExC
    "__musaLaunchKernel",
    "musaLaunchCooperativeKernel",  # ... and musaLaunchCooperativeKernelMultiDevice
)
_NOT_KERNELS = ("mem", "cpy", "alloc", "free")

_TorchBasicEvaluation = _torch_utils.BasicEvaluation


def _name(event) -> str:
    # a real _KinetoEvent's name is a method; the mocks in tests make it a property
    name = getattr(event, "name", event)
    return str(name() if callable(name) else name)


def _is_launch(event) -> bool:
    return _name(event).startswith(_LAUNCH_PREFIXES)


def _is_kernel(event) -> bool:
    if event.device_type() != DeviceType.PrivateUse1:
        return False
    name = _name(event).lower()
    return not any(word in name for word in _NOT_KERNELS)


def _start_ns(event) -> int:
    if hasattr(event, "start_ns"):
        return event.start_ns()
    if hasattr(event, "start_us"):
        return event.start_us() * 1000
    if hasattr(event, "start_time_ns"):
        return event.start_time_ns
    raise NotImplementedError(f"unknown event type {type(event).__name__}")


class BasicEvaluation(_TorchBasicEvaluation):
    """torch's ``BasicEvaluation`` reading musa launches and kernels (``musa_events``)."""

    musa_events: list

    def compute_queue_depth(self):
        """Queue depth (launched, not yet started kernels) at each launch, kernel and CPU
        event; returns the intervals of the launches and kernels, sets the CPU events'
        ``queue_depth`` metric. Empty when the trace has no musa launches or kernels."""
        if self.profile.kineto_results is None:
            raise AssertionError("kineto_results must not be None")
        kineto_events = list(self.profile.kineto_results.events())
        launches = sorted((e for e in kineto_events if _is_launch(e)), key=_start_ns)
        kernels = sorted((e for e in kineto_events if _is_kernel(e)), key=_start_ns)
        self.musa_events = sorted(launches + kernels, key=_start_ns)
        self.cuda_events = self.musa_events

        # the kernel each launch spawned: the next one (in start order) with its correlation id
        spawned_by: dict = {}
        first_free = 0
        for launch in launches:
            found = next((i for i in range(first_free, len(kernels))
                          if kernels[i].linked_correlation_id() == launch.linked_correlation_id()),
                         None)
            spawned_by[launch] = found
            if found is not None:
                first_free = found

        depths = []
        last_spawned = -1  # index of the newest kernel launched so far
        started = 0  # kernels that have started by the current time
        for event in sorted(launches + kernels + self.events, key=_start_ns):
            is_kineto = hasattr(event, "start_ns") or hasattr(event, "start_us")
            start = _start_ns(event)
            if is_kineto:
                duration = (event.duration_ns() if hasattr(event, "duration_ns")
                            else event.duration_us() * 1000)
                if spawned_by.get(event) is not None:
                    last_spawned = spawned_by[event]
            while started < len(kernels) and _start_ns(kernels[started]) <= start:
                started += 1
            depth = max(last_spawned - started + 1, 0)
            if is_kineto:
                depths.append(_torch_utils.Interval(start, start + duration, depth))
            else:
                self.metrics[_torch_utils.EventKey(event)].queue_depth = depth
        return depths


def install() -> None:
    """Make ``torch.profiler._utils.BasicEvaluation`` musa's (idempotent)."""
    torch.profiler._utils.BasicEvaluation = BasicEvaluation
