"""The rest of torch.cuda's (and the real torch_musa's) names on torch.musa, each
checked against what torch.cuda documents for it."""
import os
import subprocess
import sys

import pytest
import torch

import torch_musa
from torch_musa.testing import api_names


def test_real_torch_musa_names_count():
    found, total, missing = api_names.report()["core"]
    print(f"real torch_musa names present: {found}/{total}; missing: {missing}")
    assert total == 100
    assert found >= 76
    for name in ("musart", "MusaError", "check_error", "_DeviceGuard", "_exchange_device",
                 "_maybe_exchange_device", "_set_stream_by_id", "_set_allocator_settings",
                 "amp_definitely_not_available", "fork_rng", "is_tf32_supported",
                 "current_blas_handle", "current_blaslt_handle", "ipc_collect"):
        assert api_names.present(name), name


def test_top_level_names_are_torch_musa():
    assert torch_musa.set_device is torch.musa.set_device
    assert torch_musa.is_available() is torch.musa.is_available()
    x = torch_musa.ByteTensor([1, 2])
    assert x.dtype == torch.uint8 and x.device.type == "musa"
    assert isinstance(x, torch_musa.ByteTensor) and not isinstance(x, torch_musa.FloatTensor)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        torch_musa.no_such_name  # noqa: B018
    b = torch.ones(3, device="musa").type("torch.musa.BoolTensor")
    assert b.dtype == torch.bool and b.device.type == "musa"


def test_exchange_device_and_guard():
    cur = torch.musa.current_device()
    assert torch.musa._exchange_device(-1) == -1
    assert torch.musa._exchange_device(cur) == cur
    with torch.musa._DeviceGuard(cur):
        assert torch.musa.current_device() == cur
    assert torch.musa._maybe_exchange_device(cur) == cur


@pytest.mark.requires_devices(2)
def test_device_guard_switches_and_restores():
    torch.musa.set_device(0)
    with torch.musa._DeviceGuard(1):
        assert torch.musa.current_device() == 1
    assert torch.musa.current_device() == 0
    assert torch.musa._exchange_device(1) == 0 and torch.musa.current_device() == 1
    torch.musa.set_device(0)


def test_set_stream_by_id():
    s = torch.musa.Stream()
    torch.musa._set_stream_by_id(s.stream_id, s.device_index, s.device_type)
    try:
        assert torch.musa.current_stream().stream_id == s.stream_id
    finally:
        torch.musa.set_stream(torch.musa.default_stream())
    with pytest.raises(ValueError, match="expected a musa stream"):
        torch.musa._set_stream_by_id(0, 0, 0)  # a CPU stream


def test_musart_errors():
    rt = torch.musa.musart()
    assert int(rt.musaError.success) == 0
    torch.musa.check_error(0)
    with pytest.raises(torch.musa.MusaError, match=r"out of memory \(2\)"):
        torch.musa.check_error(2)
    assert issubclass(torch.musa.MusaError, RuntimeError)
    free, total = rt.musaMemGetInfo(0)
    assert 0 < free <= total == torch.musa.get_device_properties(0).total_memory


def test_handles_tf32_amp_ipc():
    h = torch.musa.current_blas_handle()
    assert isinstance(h, int) and h == torch.musa.current_blas_handle()
    import threading
    other = []
    t = threading.Thread(target=lambda: other.append(torch.musa.current_blas_handle()))
    t.start()
    t.join()
    assert other[0] != h  # one handle per thread, as cuBLAS's
    assert torch.musa.is_tf32_supported() == (torch_musa.config.CONFIG.profile.arch >= 22)
    assert torch.musa.amp_definitely_not_available() is False
    assert torch.musa.ipc_collect() is None


def test_memory_fraction_getter():
    before = torch.musa.get_per_process_memory_fraction()
    try:
        torch.musa.set_per_process_memory_fraction(0.25)
        assert torch.musa.get_per_process_memory_fraction(0) == pytest.approx(0.25)
    finally:
        torch.musa.set_per_process_memory_fraction(before)


def test_host_memory_stats_follow_pinned_allocations():
    # CUDA's caching host allocator's terms: blocks come in power-of-two size classes;
    # "allocations"/"allocated_bytes" are the blocks held from the driver (freed ones
    # stay cached), "active_*" those in use; _host_emptyCache returns the idle ones.
    torch.musa.init()
    torch.musa._MUSAC._host_emptyCache()
    torch.musa.reset_peak_host_memory_stats()
    before = torch.musa.host_memory_stats()
    t = torch.empty(1000, dtype=torch.uint8).pin_memory()
    during = torch.musa.host_memory_stats()
    assert during["allocated_bytes.current"] == before["allocated_bytes.current"] + 1024
    assert during["active_bytes.current"] == before["active_bytes.current"] + 1024
    assert during["allocations.current"] == before["allocations.current"] + 1
    assert during["num_host_alloc"] == before["num_host_alloc"] + 1
    assert during["host_alloc_time.count"] == before["host_alloc_time.count"] + 1
    del t
    after = torch.musa.host_memory_stats()
    assert after["active_bytes.current"] == before["active_bytes.current"]
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"] + 1024  # cached
    assert after["num_host_free"] == before["num_host_free"]
    torch.musa._MUSAC._host_emptyCache()
    after = torch.musa.host_memory_stats()
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"]
    assert after["allocated_bytes.peak"] >= before["allocated_bytes.current"] + 1024
    assert after["num_host_free"] == before["num_host_free"] + 1
    nested = torch.musa.host_memory_stats_as_nested_dict()
    assert nested["allocations"]["current"] == after["allocations.current"]
    torch.musa.reset_accumulated_host_memory_stats()
    assert torch.musa.host_memory_stats()["allocated_bytes.allocated"] == 0


@pytest.mark.slow
def test_host_memory_stats_count_pinning_before_any_musa_call(subpython):
    """Memory pinned before musa is initialised (pin_memory() does not initialise it) is
    counted: host_memory_stats() returned {} until the first musa call."""
    r = subpython("""
        import torch, torch_musa
        x = torch.empty(10 << 20).pin_memory()
        s = torch.musa.host_memory_stats()
        n = torch.musa.host_memory_stats_as_nested_dict()
        print(x.is_pinned(), torch.musa.is_initialized(), s.get("allocated_bytes.current"),
              s.get("allocations.current"), s.get("num_host_alloc"), n.get("allocated_bytes", {}).get("peak"))
        del x
        print(torch.musa.host_memory_stats().get("active_bytes.current"))
    """, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = r.stdout.split("\n")[:2]
    assert first == f"True False {64 << 20} 1 1 {64 << 20}", r.stdout  # 40 MiB's size class
    assert second == "0", r.stdout


def test_allocator_settings_string():
    torch.musa._set_allocator_settings("max_split_size_mb:64")
    torch.musa._set_allocator_settings("")
    with pytest.raises(ValueError, match="PYTORCH_MUSA_ALLOC_CONF"):
        torch.musa._set_allocator_settings("max_split_size_mb:zero")


def test_fork_rng_restores_musa_state():
    torch.musa.manual_seed(5)
    with torch.musa.fork_rng(devices=[0]):
        torch.rand(3, device="musa")
    a = torch.rand(3, device="musa")
    torch.musa.manual_seed(5)
    b = torch.rand(3, device="musa")
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


@pytest.mark.requires_host_driver("the host driver has no sensors; the cuda driver asks pynvml")
def test_monitoring_on_the_host_driver():
    for fn in (torch.musa.utilization, torch.musa.temperature, torch.musa.power_draw,
               torch.musa.memory_usage):
        with pytest.raises(RuntimeError, match="not available on the host driver"):
            fn()
    p = torch_musa.config.CONFIG.profile
    assert torch.musa.clock_rate() == p.clock_rate_khz // 1000
    torch.musa.init()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="musa")
    assert torch.musa.device_memory_used() == torch.musa.memory_reserved() >= x.numel()
    text = torch.musa.list_gpu_processes()
    assert text.startswith("GPU:0\n") and f"process {os.getpid():>10d} uses" in text
    with pytest.raises(ValueError):
        torch.musa.utilization("cpu")


def test_mudnn_flags():
    mod = getattr(torch.backends, "mudnn", None)
    if mod is None:
        pytest.skip("torch.backends.mudnn not installed in this build")
    before = mod.allow_tf32
    with torch.musa.flags(allow_tf32=not before):
        assert mod.allow_tf32 is (not before)
    assert mod.allow_tf32 is before
    assert torch.musa.set_flags(before) == (before,)


def test_version_strings():
    assert torch.version.musa == torch.musa.version.musa
    assert isinstance(torch.version.musa, str) and torch.version.musa


def test_autocast_float32_and_set_autocast_enabled():
    a = torch.ones(2, 2, device="musa", dtype=torch.float16)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # CUDA accepts float32 silently
        with torch.autocast("musa", dtype=torch.float32):
            assert torch.is_autocast_enabled("musa")
            assert torch.mm(a, a).dtype == torch.float32
    with torch.musa.amp.autocast(dtype=torch.float32):
        assert torch.get_autocast_dtype("musa") == torch.float32
    torch.set_autocast_enabled("musa", True)
    try:
        assert torch.is_autocast_enabled("musa")
    finally:
        torch.set_autocast_enabled("musa", False)
    assert not torch.is_autocast_enabled("musa")


@pytest.mark.requires_host_driver("the cuda driver's profile is the GPU's, which has float64")
@pytest.mark.parametrize("at_import", ["1", "0"])
def test_double_cast_is_read_once_at_import(subpython, at_import):
    """TORCH_USE_MUSA_DOUBLE_CAST counts as it was at import, for eager ops as for
    Inductor (CONFIG): changing the environment afterwards changes neither."""
    r = subpython("""
        import os, torch, torch_musa
        from torch_musa.config import CONFIG
        def runs():
            try:
                return (torch.ones(3, dtype=torch.float64, device="musa") + 1).dtype == torch.float64
            except RuntimeError as e:
                assert "TORCH_USE_MUSA_DOUBLE_CAST" in str(e), e
                return False
        before = runs()
        os.environ["TORCH_USE_MUSA_DOUBLE_CAST"] = "0" if before else "1"
        print(CONFIG.double_cast, before, runs())
        torch_musa.ops.registry.set_double_cast(not before)  # an explicit switch still works
        flipped = runs()
        torch_musa.ops.registry.set_double_cast(None)  # back to the configured value
        print(flipped, runs())
    """, {"TORCH_MUSA_PROFILE": "s80", "TORCH_USE_MUSA_DOUBLE_CAST": at_import})
    assert r.returncode == 0, r.stderr
    on = str(at_import == "1")
    off = str(at_import != "1")
    assert r.stdout.split() == [on, on, on, off, on], r.stdout


def test_sharded_grad_scaler_defaults_to_musa():
    from torch_musa.distributed.fsdp import ShardedGradScaler
    s = ShardedGradScaler(init_scale=4.0)
    p = torch.nn.Parameter(torch.ones(3, device="musa"))
    opt = torch.optim.SGD([p], lr=0.1)
    s.scale((p * 2).sum()).backward()
    s.step(opt)
    s.update()
    torch.testing.assert_close(p.detach().cpu(), torch.full((3,), 0.8))
    p.grad = torch.full((3,), float("inf"), device="musa")
    s.step(opt)
    s.update()
    assert s.get_scale() == 2.0  # skipped step, scale backed off
    torch.testing.assert_close(p.detach().cpu(), torch.full((3,), 0.8))
