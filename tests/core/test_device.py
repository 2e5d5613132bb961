"""Devices: count, selection, guards, properties, bad indices, cross-device use."""
import dataclasses

import pytest
import torch

import torch_musa
from torch_musa.config import CONFIG
from torch_musa.config.profiles import PROFILES


def test_musa_is_the_accelerator_with_the_configured_devices():
    """The host driver's profiles (less what MUSA_VISIBLE_DEVICES hides), or the GPUs."""
    assert torch.musa.is_available()
    assert torch.musa.device_count() == CONFIG.device_count >= 1
    assert torch.accelerator.device_count() == CONFIG.device_count
    assert torch.accelerator.current_accelerator() == torch.device("musa")
    assert torch.get_device_module("musa") is torch.musa


@pytest.mark.requires_devices(2)
def test_tensors_land_on_the_named_device():
    a = torch.ones(3, device="musa:1")
    assert a.device == torch.device("musa", 1) and a.is_musa
    assert (a + a).device.index == 1
    assert torch.ones(2).musa(1).device.index == 1
    assert torch.nn.Linear(2, 2).musa(1).weight.device.index == 1


@pytest.mark.requires_devices(2)
def test_current_device_is_thread_local_and_guarded():
    import threading

    torch.musa.set_device(1)
    assert torch.musa.current_device() == 1
    assert torch.empty(1, device="musa").device.index == 1
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.musa.current_device()))
    t.start(); t.join()
    assert seen == [0]
    with torch.musa.device(0):
        assert torch.musa.current_device() == 0
    assert torch.musa.current_device() == 1
    x = torch.ones(1, device="musa:0")
    with torch.musa.device_of(x):
        assert torch.musa.current_device() == 0


@pytest.mark.requires_devices(2)
def test_peer_access():
    """Distinct devices are peers on the host driver (all in host RAM); under the cuda driver
    CUDA answers. No device is its own peer (CUDA answers so too); a bad index names the range."""
    want = torch.cuda.can_device_access_peer(0, 1) if CONFIG.driver == "cuda" else True
    assert torch.musa.can_device_access_peer(0, 1) is want
    assert torch.musa.can_device_access_peer("musa:1", torch.device("musa", 0)) is want
    assert torch.musa.can_device_access_peer(1, 1) is False
    n = torch.musa.device_count()
    with pytest.raises(IndexError, match=f"musa:{n}: this process sees {n} musa device"):
        torch.musa.can_device_access_peer(0, n)


def test_is_compiled_means_the_runtime_serves_the_configured_driver(monkeypatch):
    assert torch.musa._is_compiled() and torch_musa._C._driver_name() == CONFIG.driver
    other = "host" if CONFIG.driver == "cuda" else "cuda"
    monkeypatch.setattr(torch_musa._driver, "CONFIG", dataclasses.replace(CONFIG, driver=other))
    assert not torch.musa._is_compiled()


def test_the_modeled_cards_come_two_to_a_machine():
    assert {p.num_devices for p in PROFILES.values()} == {2}


def test_invalid_index_names_the_range():
    n = torch.musa.device_count()  # 2 on the host driver's default profile
    with pytest.raises(IndexError, match=rf"musa:7.*{n} musa device\(s\).*0\.\.{n - 1}"):
        torch.empty(2, device="musa:7")
    with pytest.raises(IndexError, match="musa:7"):
        torch.musa.set_device(7)
    assert torch.ones(1, device="musa").item() == 1.0  # still usable


@pytest.mark.requires_devices(2)
def test_cross_device_ops_raise_the_same_device_error():
    a = torch.ones(3, device="musa:0")
    with pytest.raises(RuntimeError, match="same device.*musa:0 and musa:1"):
        a + torch.ones(3, device="musa:1")
    with pytest.raises(RuntimeError, match="same device.*musa:0 and cpu"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.nn.functional.conv2d(torch.ones(1, 1, 3, 3, device="musa:0"), torch.ones(1, 1, 1, 1, device="musa:1"))
    # a CPU scalar (0-dim) mixes, as on CUDA
    assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))
    # CPU indices are accepted, as on CUDA
    assert a[torch.tensor([0, 2])].device == a.device


@pytest.mark.requires_profile("s4000", reason="the MTT S4000's properties")
@pytest.mark.requires_devices(2)
def test_properties_of_the_default_profile():
    p = torch.musa.get_device_properties(0)
    assert p.name == "MTT S4000" and (p.major, p.minor) == (2, 2)
    assert p.total_memory == 48 << 30
    # 384-bit GDDR6 at 16 Gb/s: 768 GB/s (CUDA's units: kHz, bits)
    assert 2 * p.memory_clock_rate * 1e3 * p.memory_bus_width / 8 == 768e9
    assert p.uuid != torch.musa.get_device_properties(1).uuid
    assert torch.musa.get_device_capability() == (2, 2)
    assert torch.musa.get_device_name("musa:1") == "MTT S4000"
    assert torch.musa.is_bf16_supported()
    assert "mp_22" in torch.musa.get_arch_list()


# Every field of CUDA's device properties (torch/csrc/cuda/Module.cpp): PyTorch reads
# them (inductor's heuristics and cache key, the profiler's trace, _device_limits).
CUDA_PROPERTY_FIELDS = (
    "name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated",
    "is_multi_gpu_board", "max_threads_per_multi_processor", "max_threads_per_block",
    "warp_size", "regs_per_multiprocessor", "shared_memory_per_block",
    "shared_memory_per_block_optin", "shared_memory_per_multiprocessor", "gcnArchName",
    "uuid", "L2_cache_size", "clock_rate", "memory_clock_rate", "memory_bus_width",
    "pci_bus_id", "pci_device_id", "pci_domain_id",
)


def test_properties_carry_every_cuda_field():
    import uuid

    props = [torch.musa.get_device_properties(i) for i in range(torch.musa.device_count())]
    p0 = props[0]
    missing = [f for f in CUDA_PROPERTY_FIELDS if not hasattr(p0, f)]
    assert not missing, missing
    assert all(isinstance(getattr(p0, f), int) for f in CUDA_PROPERTY_FIELDS
               if f not in ("name", "gcnArchName", "uuid"))
    assert p0.gcnArchName == p0.name  # as CUDA builds of PyTorch answer (ROCm: a gfx target)
    assert p0.warp_size == 32 and p0.max_threads_per_block % p0.warp_size == 0
    assert p0.max_threads_per_block <= p0.max_threads_per_multi_processor
    assert p0.shared_memory_per_block <= p0.shared_memory_per_block_optin \
        <= p0.shared_memory_per_multiprocessor
    assert p0.memory_clock_rate > 0 and p0.memory_bus_width > 0 and p0.L2_cache_size > 0
    # one device, one identity: valid, distinct UUIDs and PCI locations
    assert len({uuid.UUID(p.uuid) for p in props}) == len(props)
    assert len({(p.pci_domain_id, p.pci_bus_id, p.pci_device_id) for p in props}) == len(props)


@pytest.mark.slow
@pytest.mark.parametrize("profile,name,cap,mem,bf16", [
    ("s80", "MTT S80", (2, 1), 16 << 30, False),
    ("S4000", "MTT S4000", (2, 2), 48 << 30, True),
    ("mtt_s5000", "MTT S5000", (3, 1), 80 << 30, True),
])
@pytest.mark.requires_host_driver(
    "hardware profiles (TORCH_MUSA_PROFILE) model MTT cards on the host driver; under the cuda driver"
    " the profile is the GPU's")
def test_profiles_are_selected_by_environment(subpython, profile, name, cap, mem, bf16):
    r = subpython("""
        import torch, torch_musa
        p = torch.musa.get_device_properties(0)
        print(p.name, torch.musa.get_device_capability(), p.total_memory, torch.musa.is_bf16_supported())
    """, {"TORCH_MUSA_PROFILE": profile})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{name} {cap} {mem} {bf16}"


@pytest.mark.slow
def test_unknown_profile_is_a_clear_error(subpython):
    r = subpython("import torch_musa", {"TORCH_MUSA_PROFILE": "rtx4090"})
    assert r.returncode != 0 and "not a known hardware profile" in r.stderr and "s80" in r.stderr


@pytest.mark.slow
@pytest.mark.requires_host_driver(
    "selects the s80 profile, which only the host driver models; the GPU lacks no dtype")
def test_dtype_the_profile_lacks_raises_naming_the_profile(subpython):
    r = subpython("""
        import torch, torch_musa
        x = torch.ones(3, dtype=torch.bfloat16, device="musa")   # creating and copying is fine
        try:
            x + x
        except RuntimeError as e:
            print("ERR", e)
        print((torch.ones(3, device="musa") * 2).sum().item())  # still usable
        print(x.cpu().dtype)
    """, {"TORCH_MUSA_PROFILE": "s80"})
    assert r.returncode == 0, r.stderr
    assert "ERR aten::add.Tensor: dtype BFloat16" in r.stdout and "MTT S80" in r.stdout
    assert "6.0" in r.stdout and "torch.bfloat16" in r.stdout


@pytest.mark.requires_profile("s80", reason="the MTT S80 has no float64")
def test_float64_compute_is_rejected_on_s80_but_prints():
    x = torch.ones(3, dtype=torch.float64, device="musa")
    with pytest.raises(RuntimeError, match="dtype Double.*MTT S80.*TORCH_MUSA_PROFILE=s4000 or s5000"):
        x * 2
    assert "dtype=torch.float64" in repr(x)
    assert x.cpu().sum().item() == 3.0


_TWO = pytest.mark.requires_devices(2)
_NONE = pytest.mark.requires_host_driver("no device visible: the host driver runs with none, the cuda "
                                         "driver cannot start without a GPU")


@pytest.mark.slow
@pytest.mark.parametrize("spec,count", [pytest.param("1", 1, marks=_TWO), pytest.param("1,0", 2, marks=_TWO),
                                        ("0,5,1", 1), pytest.param("", 0, marks=_NONE),
                                        pytest.param("-1", 0, marks=_NONE)])
def test_visible_devices(subpython, spec, count):
    r = subpython("""
        import torch, torch_musa
        print(torch.musa.device_count(), torch.musa.is_available())
    """, {"MUSA_VISIBLE_DEVICES": spec})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(count), str(count > 0)]


def test_a_cpu_scalar_is_an_input_never_a_written_argument():
    """A 0-dim CPU tensor passes as a scalar input (TensorIterator's rule, on CUDA too),
    but an out= or in-place argument must be on the device: musa wrote an op's result
    into a CPU `out=` (special.i0e) or failed an internal assert (nonzero.out)."""
    x = torch.tensor(0.5, device="musa")
    assert torch.equal((torch.ones(2, device="musa") * torch.tensor(3.0)).cpu(), torch.full((2,), 3.0))
    out = torch.zeros(())
    calls = {
        "boxed fallback": lambda: torch.special.i0e(x, out=out),
        "unboxed out": lambda: torch.add(x, x, out=out),
        "in-place self": lambda: out.add_(x),
        "sized on the host": lambda: torch.nonzero(torch.tensor([0, 1], device="musa"),
                                                   out=torch.empty((), dtype=torch.long)),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match="same device.*musa:0 and cpu"):
            call()
        assert out.item() == 0.0, f"{name}: the CPU tensor was written"
