"""torch.musa's legacy storage classes (FloatStorage, ...) and the rest of the real
torch_musa's top-level names, each against what torch.cuda (or the CPU) does."""
import pickle
import sys
import warnings

import pytest
import torch

import torch_musa
from torch_musa.testing import api_names

STORAGES = {"DoubleStorage": torch.float64, "FloatStorage": torch.float32,
            "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
            "LongStorage": torch.int64, "IntStorage": torch.int32, "ShortStorage": torch.int16,
            "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
            "ComplexDoubleStorage": torch.complex128, "ComplexFloatStorage": torch.complex64}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated (as on CUDA)
        yield


def test_same_storage_classes_as_torch_cuda():
    assert {n for n in STORAGES if hasattr(torch.cuda, n)} == set(STORAGES)
    for name, dtype in STORAGES.items():
        cls = getattr(torch.musa, name)
        assert cls.dtype == dtype and cls.__module__ == "torch.musa"
        assert torch_musa.__getattr__(name) is cls


def test_construct_on_musa_like_the_cpu_classes():
    s = torch.musa.FloatStorage(5)
    assert s.device.type == "musa" and s.dtype == torch.float32 and s.size() == 5
    data = torch.musa.IntStorage([3, -1, 7])
    assert data.device.type == "musa" and data.tolist() == torch.IntStorage([3, -1, 7]).tolist()
    assert torch.is_storage(data)
    with pytest.raises(RuntimeError, match="from_buffer: Not available for musa storage"):
        torch.musa.ByteStorage.from_buffer(b"ab")


def test_a_musa_tensors_storage_is_named_and_matched():
    for dtype, name in ((torch.float32, "FloatStorage"), (torch.int64, "LongStorage"),
                        (torch.bool, "BoolStorage")):
        t = torch.zeros(3, dtype=dtype, device="musa")
        st = t._typed_storage()
        assert st.type() == f"torch.musa.{name}"  # torch.cuda.<name> on CUDA, torch.<name> on CPU
        assert isinstance(st, getattr(torch.musa, name))
        assert not isinstance(st, torch.musa.DoubleStorage)
        assert not isinstance(t.cpu()._typed_storage(), getattr(torch.musa, name))


def test_musa_storage_round_trips_through_pickle():
    t = torch.arange(4.0, device="musa")
    back = pickle.loads(pickle.dumps(t._typed_storage()))
    assert back.device.type == "musa" and back.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_real_top_level_names_are_the_memory_and_graph_ones():
    assert torch.musa._record_memory_history is torch.musa.memory._record_memory_history
    assert torch.musa._dump_snapshot is torch.musa.memory._dump_snapshot
    h = torch.musa.graph_pool_handle()
    assert torch.musa._POOL_HANDLE(h) == h  # as the real torch_musa's graph test checks


def test_extension_names_load_on_first_use():
    from torch_musa.utils import musa_extension
    assert torch.musa.BuildExtension is musa_extension.BuildExtension
    assert torch_musa.MUSAExtension is musa_extension.MUSAExtension


@pytest.mark.slow
def test_importing_torch_musa_does_not_load_setuptools():
    import subprocess
    code = "import sys, torch_musa; print('torch.utils.cpp_extension' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_count_of_real_names():
    found, total, missing = api_names.report()["core"]
    assert total == 100 and found >= 99, missing
