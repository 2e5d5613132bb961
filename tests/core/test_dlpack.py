"""DLPack on musa: zero-copy round trips, device index, memory accounting,
streams, and the errors for what cannot work."""
import gc

import numpy as np
import pytest
import torch
from torch.utils.dlpack import DLDeviceType


# Every device there is (the cuda driver on one GPU has musa:0 alone).
DEVICES = [f"musa:{i}" for i in range(torch.musa.device_count())]
LAST = DEVICES[-1]


def cycles(ms: float) -> int:
    return int(ms * 1e-3 * torch.musa.get_device_properties(0).clock_rate * 1e3)


@pytest.mark.parametrize("where", DEVICES)
def test_dlpack_device_is_the_extension_device_of_the_cpp_mapping(where):
    x = torch.ones(2, device=where)
    dev = x.__dlpack_device__()
    assert dev == (DLDeviceType.kDLExtDev, torch.device(where).index)
    assert dev == torch._C._torchDeviceToDLDevice(x.device)  # what the C++ converter writes
    assert torch.ones(2).__dlpack_device__() == (DLDeviceType.kDLCPU, 0)  # CPU untouched


@pytest.mark.parametrize("where", DEVICES)
def test_from_dlpack_is_zero_copy_and_writes_go_both_ways(where):
    x = torch.arange(6.0, device=where)
    y = torch.from_dlpack(x)
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    y[0] = -1
    x[5] = 50
    assert x.cpu().tolist() == y.cpu().tolist() == [-1, 1, 2, 3, 4, 50]
    for capsule in (torch.utils.dlpack.to_dlpack(x), x.__dlpack__(),
                    x.__dlpack__(max_version=(1, 0))):  # legacy and versioned capsules
        z = torch.utils.dlpack.from_dlpack(capsule)
        assert z.device == x.device and z.data_ptr() == x.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64])
def test_from_dlpack_keeps_dtype_and_strides(dtype):
    base = torch.arange(24, device="musa").reshape(4, 6).to(dtype)
    view = base[1:, ::2]
    y = torch.from_dlpack(view)
    assert y.dtype == dtype and y.shape == view.shape and y.stride() == view.stride()
    assert y.data_ptr() == view.data_ptr() and torch.equal(y.cpu(), view.cpu())


def test_tensor_subclass_goes_through_torch_function():
    class Sub(torch.Tensor):
        pass

    x = torch.arange(3.0, device="musa").as_subclass(Sub)
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)
    assert torch.from_dlpack(x).data_ptr() == x.data_ptr()


def test_memory_accounting_across_the_round_trip():
    gc.collect()
    base = torch.musa.memory_allocated()
    x = torch.arange(1 << 16, dtype=torch.float32, device="musa")
    held = torch.musa.memory_allocated()
    assert held - base >= x.nbytes
    y = torch.from_dlpack(x)
    assert torch.musa.memory_allocated() == held  # no copy, no second allocation
    expected = x.cpu()
    del x
    gc.collect()
    assert torch.musa.memory_allocated() == held  # the import keeps the musa storage
    filler = torch.full((1 << 16,), 7.0, device="musa")  # would reuse a freed block
    assert torch.equal(y.cpu(), expected)
    del y, filler
    gc.collect()
    assert torch.musa.memory_allocated() == base


def test_device_and_copy_arguments():
    x = torch.arange(4.0, device="musa")
    on_cpu = torch.from_dlpack(x, device="cpu")
    assert on_cpu.device.type == "cpu" and on_cpu.tolist() == [0, 1, 2, 3]
    on_last = torch.from_dlpack(x, device=LAST)
    assert on_last.device == torch.device(LAST) and on_last.cpu().tolist() == [0, 1, 2, 3]
    copied = torch.from_dlpack(x, copy=True)
    assert copied.device == x.device and copied.data_ptr() != x.data_ptr()
    same = torch.from_dlpack(x, device="musa:0", copy=False)
    assert same.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="without copying"):
        torch.from_dlpack(x, device="cpu", copy=False)


def test_what_cannot_be_exported():
    with pytest.raises(BufferError, match="gradient"):
        torch.from_dlpack(torch.ones(2, device="musa", requires_grad=True))
    with pytest.raises(BufferError, match="conjugate"):
        torch.from_dlpack(torch.ones(2, dtype=torch.complex64, device="musa").conj())
    x = torch.ones(2, device="musa")
    with pytest.raises(TypeError, match="stream must be an int"):
        x.__dlpack__(stream=torch.musa.Stream())
    with pytest.raises(ValueError, match="not a musa stream handle"):
        x.__dlpack__(stream=-2)
    # numpy reads host memory only: its own error, as for a CUDA tensor (a BufferError
    # where the export is a GPU's, under the cuda driver)
    with pytest.raises((RuntimeError, BufferError), match="[Dd]evice"):
        np.from_dlpack(x)
    assert np.from_dlpack(x, device="cpu").tolist() == [1, 1]  # the producer copies


def test_stream_argument_orders_the_consumer_stream():
    x = torch.ones(2, device="musa")
    consumer = torch.musa.Stream()
    torch.musa._sleep(cycles(150))  # the producer's (current) stream is busy
    x.__dlpack__(stream=-1)
    assert consumer.query()  # -1: no synchronization
    x.__dlpack__(stream=consumer.musa_stream)
    assert not consumer.query()  # the consumer now waits for the producer's work
    torch.musa.synchronize()
    side = torch.musa.Stream()
    with torch.musa.stream(side):
        torch.musa._sleep(cycles(150))
        x.__dlpack__(stream=None)  # None: the default stream waits
    assert not torch.musa.default_stream().query()
    torch.musa.synchronize()
