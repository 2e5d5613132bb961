import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def musa():
    """Import torch_musa (registers the musa device); skip when it cannot be loaded."""
    try:
        import torch_musa  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"torch_musa not importable: {e}")
    import torch
    if not torch.musa.is_available():
        pytest.skip("no musa device")
    return torch.device("musa")


@pytest.fixture
def fast():
    """Benchmark settings short enough for tests."""
    from torch_musa.op_benchmark.runner import Settings
    return Settings(min_time=0.002, warmup=1, warmup_time=0.0, min_block_time=2e-4,
                    max_rotations=2)


@pytest.fixture(autouse=True)
def _keep_threads():
    """The CLI's --num-threads changes a process-wide setting: put it back."""
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)
