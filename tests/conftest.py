import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_musa  # noqa: F401


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for settings read at import)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


@pytest.fixture
def subpython():
    return run_python


@pytest.fixture(autouse=True)
def _restore_device():
    yield
    torch.musa.set_device(0)


def pytest_collection_modifyitems(config, items):
    """Under the cuda driver, the tests listed in cuda_driver_expected_failures.yaml
    are expected to fail, each for the reason given there (host-driver behaviour
    a GPU does not have); everything else must pass."""
    from torch_musa import _state

    if _state.driver != "cuda":
        return
    import fnmatch
    import pathlib

    import yaml

    listed = yaml.safe_load(
        (pathlib.Path(__file__).parent / "cuda_driver_expected_failures.yaml").read_text()) or {}
    for item in items:
        for prefix, reason in listed.items():
            if item.nodeid == prefix or item.nodeid.startswith((prefix + "[", prefix + "/")) or \
                    item.nodeid.startswith(prefix + "::") or ("*" in prefix and fnmatch.fnmatch(item.nodeid, prefix)):
                item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
                break
