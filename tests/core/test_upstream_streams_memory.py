"""Streams, events and memory answer as the real torch_musa's (and torch.cuda's) do,
where user code and the real package's own tests look (issue 36, item 5)."""
import pytest
import torch


@pytest.mark.parametrize("bad", [-0.1, 2.0, 1.0000001])
def test_a_memory_fraction_outside_0_1_is_a_value_error_naming_it(bad):
    # torch.cuda and the real torch_musa check the range in Python: ValueError
    # "Invalid fraction value: -0.1. Allowed range: 0~1", before touching the allocator.
    before = torch.musa.get_per_process_memory_fraction(0)
    with pytest.raises(ValueError, match=rf"Invalid fraction value: {bad}\. Allowed range: 0~1"):
        torch.musa.set_per_process_memory_fraction(bad)
    assert torch.musa.get_per_process_memory_fraction(0) == before


def test_a_memory_fraction_of_another_type_is_still_a_type_error():
    with pytest.raises(TypeError, match="Invalid type"):
        torch.musa.set_per_process_memory_fraction(1)


@pytest.mark.requires_devices(2)
def test_peer_access_with_a_bad_index_is_torch_cudas_assertion_error():
    # torch.cuda.can_device_access_peer (and the real torch_musa's) raise
    # AssertionError("Invalid device id") / AssertionError("Invalid peer device id");
    # this project's range detail stays, and the error is still an IndexError.
    n = torch.musa.device_count()
    with pytest.raises(AssertionError, match=f"^Invalid peer device id musa:{n}: this process sees {n}"):
        torch.musa.can_device_access_peer(0, n)
    with pytest.raises(AssertionError, match="^Invalid device id musa:-1"):
        torch.musa.can_device_access_peer(-1, 1)
    with pytest.raises(IndexError, match="^Invalid device id musa:100"):
        torch.musa.can_device_access_peer(100, 0)
    assert torch.musa.can_device_access_peer(0, 0) is False


def test_a_stream_repr_is_the_real_torch_musas():
    # torch_musa/core/stream.py upstream: f"torch_musa.Stream device={self.device} musa_stream={self.musa_stream:#x}"
    s = torch.musa.current_stream()
    assert repr(s) == f"torch_musa.Stream device=musa:0 musa_stream={s.musa_stream:#x}"
    side = torch.musa.Stream()
    assert repr(side) == f"torch_musa.Stream device=musa:0 musa_stream={side.musa_stream:#x}"


def test_a_new_event_has_no_device_until_recorded():
    # CUDAEvent::device() is empty until the event is created at its first record,
    # so torch.cuda.Event().device is None; the real torch_musa's MUSAEvent likewise.
    e = torch.musa.Event()
    assert e.device is None
    assert repr(e) == "<torch_musa.Event uninitialized>"
    e.record()
    assert e.device == torch.device("musa", 0)
    assert e.musa_event != 0 and repr(e) == f"<torch_musa.Event {e.musa_event:#x}>"
    assert torch.musa.current_stream().record_event().device == torch.device("musa", 0)


@pytest.mark.requires_devices(2)
def test_an_event_takes_the_device_of_the_stream_that_records_it():
    e = torch.musa.Event()
    e.record(torch.musa.current_stream(1))
    assert e.device == torch.device("musa", 1)


@pytest.mark.requires_devices(2)
def test_elapsed_time_between_events_of_two_devices_raises():
    # cudaEventElapsedTime refuses events of two devices (torch's
    # test_events_multi_gpu_elapsed_time expects a RuntimeError); say which devices.
    e0, e1 = torch.musa.Event(enable_timing=True), torch.musa.Event(enable_timing=True)
    e0.record(torch.musa.current_stream(0))
    e1.record(torch.musa.current_stream(1))
    torch.musa.synchronize(0)
    torch.musa.synchronize(1)
    for a, b in ((e0, e1), (e1, e0)):
        with pytest.raises(RuntimeError, match=r"different devices \(musa:\d and musa:\d\)"):
            a.elapsed_time(b)
    same = torch.musa.Event(enable_timing=True)
    same.record(torch.musa.current_stream(1))
    same.synchronize()
    assert e1.elapsed_time(same) >= 0


def test_musart_host_register_answers_as_the_runtime():
    # cudaHostRegister / cudaHostUnregister (the musa runtime's are the same API):
    # success once, cudaErrorHostMemoryAlreadyRegistered (712) for a range already
    # registered, cudaErrorHostMemoryNotRegistered (713) for a pointer that is not.
    rt = torch.musa.musart()
    t = torch.ones(20)
    ptr, size = t.data_ptr(), t.numel() * t.element_size()
    assert rt.musaHostRegister(ptr, size, 0) == 0
    try:
        assert int(rt.musaHostRegister(ptr, size, 0)) == 712
        assert int(rt.musaHostRegister(ptr + 16, 8, 0)) == 712  # inside the registered range
        assert rt.musaGetErrorString(712) == "part or all of the requested memory range is already mapped"
    finally:
        assert rt.musaHostUnregister(ptr) == 0
    assert int(rt.musaHostUnregister(ptr)) == 713
    assert rt.musaGetErrorString(713) == "pointer does not correspond to a registered memory region"
    assert int(rt.musaHostRegister(0, size, 0)) == 1 and int(rt.musaHostRegister(ptr, 0, 0)) == 1
    # An error returned as a value is not raised again by the next operator's launch check
    # (CUDA keeps it as the last error; the cuda driver clears it).
    assert (torch.ones(3, device="musa") * 2).sum().item() == 6


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA restores cuda storages itself here")
def test_loading_cuda_storages_without_cuda_points_to_musa():
    # The real torch_musa replaces torch's message for cuda locations on a machine without
    # CUDA with one that names map_location=torch.device('musa').
    want = ("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
            "If you are running on a MUSA enabled machine, please use torch.load with "
            "map_location=torch.device('musa') or map_location=torch.device('cpu') "
            "to map your storages to the MUSA or CPU.")
    for location in ("cuda", "cuda:0", "cuda:1"):
        with pytest.raises(RuntimeError) as info:
            torch.serialization.default_restore_location(torch.UntypedStorage(4), location)
        assert str(info.value) == want
    restored = torch.serialization.default_restore_location(torch.UntypedStorage(4), "musa:0")
    assert restored.device == torch.device("musa", 0)
