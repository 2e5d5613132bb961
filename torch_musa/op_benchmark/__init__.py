"""Operator micro-benchmarks for torch_musa: suites as YAML data, device-agnostic timing,
a cross-device correctness gate, JSON/CSV/PNG reports, --compare and --capture.

    python -m torch_musa.op_benchmark --device musa,cpu --tag-filter short

API: ``load_suites``, ``expand``, ``run_tests``, ``measure``, ``record`` (capture).
The ``musa-bench`` command runs it. (The repository's ``benchmarks/`` holds the
whole-system benchmark scripts and their results; this package times single ops.)
"""
from .config import SuiteError, expand, load_suite, load_suites, parse_suite  # noqa: F401
from .timing import measure  # noqa: F401


def run_tests(tests, devices, settings=None, progress=False):
    """Run expanded tests on devices; one result dict per (test, device)."""
    import torch
    from . import cli, runner
    return cli.run_tests(tests, [torch.device(d) for d in devices],
                         settings or runner.Settings(), progress=progress)


def record(device_type=None, **kwargs):
    """``with record() as rec: model(x)`` records the aten op cases a run dispatches;
    then ``rec.write_suite("model.yaml")``. See torch_musa.op_benchmark.capture.Recorder."""
    from .capture import Recorder
    return Recorder(device_type=device_type, **kwargs)
