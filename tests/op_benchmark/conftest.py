import pytest
import torch


@pytest.fixture(scope="session")
def musa():
    """The musa device (tests/conftest.py imports torch_musa, which registers it)."""
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
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)
