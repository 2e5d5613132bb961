"""Unified memory (PYTORCH_MUSA_ALLOC_CONF=cpu:unified, torch_musa.use_unified_cpu_allocator):
CPU tensors live in memory the device uses, so moving them to musa copies nothing and
the accounting counts the bytes once."""

import pytest
import torch

import torch_musa

MiB = 1 << 20

pytestmark = [
    pytest.mark.requires_host_driver("unified memory is the host driver's (CUDA managed memory is not wired)"),
    pytest.mark.usefixtures("empty_musa_cache"),
]


def test_to_musa_shares_the_cpu_bytes_and_counts_them_once():
    base = torch.musa.memory_allocated()
    with torch_musa.use_unified_cpu_allocator():
        x = torch.arange(4 * MiB // 4, dtype=torch.float32)  # a CPU tensor in musa memory
    assert x.device.type == "cpu"
    assert torch.musa.memory_allocated() - base == 4 * MiB
    y = x.to("musa")
    assert y.device.type == "musa" and y.data_ptr() == x.data_ptr()  # no copy
    assert torch.musa.memory_allocated() - base == 4 * MiB  # counted once
    y.add_(1)  # one memory: the CPU tensor sees the device's writes
    assert x[:3].tolist() == [1.0, 2.0, 3.0]
    assert torch.equal((y * 2).cpu(), (torch.arange(MiB, dtype=torch.float32) + 1) * 2)
    del x
    assert y.sum().item() == pytest.approx(float(MiB) * (MiB + 1) / 2)
    del y
    assert torch.musa.memory_allocated() == base


def test_plain_cpu_tensors_still_copy():
    x = torch.ones(1000)
    y = x.to("musa")
    assert y.data_ptr() != x.data_ptr()
    y.add_(1)
    assert x[0].item() == 1.0
    with torch_musa.use_unified_cpu_allocator():
        u = torch.ones(10)
    z = u[2:].to("musa")  # a part of the storage: copied
    assert z.data_ptr() != u.data_ptr() + 8 and z.sum().item() == 8.0


def test_torch_load_onto_musa_copies_nothing(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.randn(1024, 1024), "b": torch.randn(1024)}, path)
    ref = torch.load(path)
    with torch_musa.use_unified_cpu_allocator():
        torch.musa.reset_peak_memory_stats()
        base = torch.musa.memory_allocated()
        sd = torch.load(path, map_location="musa")
    assert sd["w"].device.type == "musa" and torch.equal(sd["w"].cpu(), ref["w"])
    grown = torch.musa.memory_allocated() - base
    assert 4 * MiB <= grown <= 4 * MiB + 8192  # the checkpoint's bytes, once


def test_alloc_conf_cpu_unified_from_the_start(subpython):
    r = subpython("""
        import torch, torch_musa
        x = torch.ones(1 << 20)
        y = x.to("musa")
        print(y.data_ptr() == x.data_ptr(), torch.musa.memory_allocated() == 4 << 20)
    """, {"PYTORCH_MUSA_ALLOC_CONF": "cpu:unified"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    bad = subpython("import torch_musa", {"PYTORCH_MUSA_ALLOC_CONF": "cpu:shared"})
    assert bad.returncode != 0 and "bad value in 'cpu:shared'" in bad.stderr
