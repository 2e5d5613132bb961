import gc
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG
from torch_musa.config.profiles import PROFILES


def load_benchmark(name: str):
    """A script of benchmarks/ as a module (the folder is not a package)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for settings read at import)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


@pytest.fixture
def subpython():
    return run_python


@pytest.fixture
def planted():
    """``planted(op, fn, ns="aten")`` registers ``fn`` as the musa (PrivateUse1) kernel of
    ``ns::op`` through torch.library (a wrong kernel, for tools that must catch it); undone after."""
    libs = []

    def plant(op, fn, ns="aten"):
        lib = torch.library.Library(ns, "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "overriding a previously registered kernel"
            # Planting one op twice in a test: torch 2.11 refuses unless told (2.13 allows).
            lib.impl(op, fn, "PrivateUse1", allow_override=True)
        libs.append(lib)
    yield plant
    for lib in libs:
        lib._destroy()


@pytest.fixture
def empty_musa_cache():
    """Tests that read the allocator's layout start and end with nothing cached."""
    gc.collect()
    torch.musa.empty_cache()
    yield
    gc.collect()
    torch.musa.empty_cache()


@pytest.fixture(autouse=True)
def _restore_device():
    yield
    torch.musa.set_device(0)


@pytest.fixture(autouse=True)
def _restore_float32_precision():
    """A test that runs an example in-process (examples/cuda/train_lm.py allows TF32)
    must not leave TF32 on for the next test in its worker: the GPU suite at c392621
    and a391468 failed compare-tool tests that ran after one and saw TF32 products."""
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]


MARKERS = {
    "requires_host_driver(reason, unsafe_elsewhere=False, may_pass_elsewhere=False)": "checks "
    "what only the host driver does (its allocator, its hardware profiles, CPU kernels bit for "
    "bit); under another driver an expected failure, strict; not strict with "
    "may_pass_elsewhere=True, for claims another driver meets by chance for some inputs (a GPU "
    "kernel that happens to round as the CPU's); skipped with unsafe_elsewhere=True where "
    "running it there would harm the process (a GPU kernel's illegal access or device-side "
    "assert poisons its CUDA context)",
    "requires_devices(n)": "needs at least n musa devices; skipped with fewer",
    "requires_profile(*keys, reason=None)": "needs one of these hardware profiles (s80, s4000, "
    "s5000); skipped under any other (the cuda driver's is the GPU's)",
    "needs_musa": "torch_musa.testing's mark (the real torch_musa's name): the test needs a musa "
    "device, which every run here has",
}


def pytest_configure(config):
    for spec, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{spec}: {meaning}")


def requirement_outcome(marks, driver: str, profile: str, devices: int):
    """What a test's requirement markers make of it in this run: None (it runs),
    ("skip", reason) when the run lacks the devices or the profile it needs (there is
    nothing to check), or ("xfail", reason) when it checks host-driver behaviour under
    another driver: it must still run and fail, strictly, so a mark that no longer
    holds fails the run instead of hiding a passing test; ("xfail_loose", reason) for a
    claim another driver may meet by chance (may_pass_elsewhere)."""
    skips, fails, loose = [], [], []
    for m in marks:
        if m.name == "requires_devices":
            (n,) = m.args
            if not isinstance(n, int) or n < 1:
                raise pytest.UsageError(f"requires_devices(n) takes a device count >= 1, not {n!r}")
            if devices < n:
                skips.append(f"needs {n} musa devices, this run has {devices}")
        elif m.name == "requires_profile":
            unknown = [k for k in m.args if k not in PROFILES]
            if not m.args or unknown:
                raise pytest.UsageError(f"requires_profile takes hardware profile keys "
                                        f"({', '.join(PROFILES)}), not {list(m.args)!r}")
            if profile not in m.args:
                why = m.kwargs.get("reason")
                skips.append(f"needs hardware profile {' or '.join(m.args)}, this run has "
                             f"{profile}" + (f" ({why})" if why else ""))
        elif m.name == "requires_host_driver":
            if len(m.args) != 1 or not isinstance(m.args[0], str) or not m.args[0].strip():
                raise pytest.UsageError("requires_host_driver(reason) needs the reason the test "
                                        "fails under other drivers")
            if driver != "host":
                if m.kwargs.get("unsafe_elsewhere"):
                    skips.append(f"host driver only, unsafe to run under the {driver} driver: "
                                 f"{m.args[0]}")
                elif m.kwargs.get("may_pass_elsewhere"):
                    loose.append(m.args[0])
                else:
                    fails.append(m.args[0])
    if skips:
        return "skip", "; ".join(skips)
    if fails:
        return "xfail", f"host driver only ({driver} driver here): " + "; ".join(fails + loose)
    if loose:
        return "xfail_loose", (f"host driver only ({driver} driver here, may pass): "
                               + "; ".join(loose))
    return None


def pytest_collection_modifyitems(config, items):
    """Requirement markers (MARKERS) against this run's driver, profile and device count."""
    devices = torch.musa.device_count()
    for item in items:
        outcome = requirement_outcome(item.iter_markers(), CONFIG.driver, CONFIG.profile.key, devices)
        if outcome is None:
            continue
        kind, reason = outcome
        item.add_marker(pytest.mark.skip(reason=reason) if kind == "skip"
                        else pytest.mark.xfail(reason=reason, strict=kind == "xfail"))
