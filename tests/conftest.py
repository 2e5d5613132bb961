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
