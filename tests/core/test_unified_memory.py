"""Unified memory (PYTORCH_MUSA_ALLOC_CONF=cpu:unified, torch_musa.use_unified_cpu_allocator):
CPU tensors live in memory the device uses, so moving them to musa copies nothing and
the accounting counts the bytes once. Under the host driver that memory is a block of the
device's pool (counted in memory_allocated); under the cuda driver it is CUDA managed
memory, which CUDA's caching allocator (musa's statistics there) does not count, as
torch.cuda does not count cudaMallocManaged memory: no device copy is ever allocated."""

import pytest
import torch

import torch_musa
from torch_musa.config import CONFIG

MiB = 1 << 20
# What memory_allocated counts of a unified CPU tensor of `n` bytes.
COUNTED = 1 if CONFIG.driver == "host" else 0

pytestmark = pytest.mark.usefixtures("empty_musa_cache")


def test_to_musa_shares_the_cpu_bytes_and_counts_them_once():
    base = torch.musa.memory_allocated()
    with torch_musa.use_unified_cpu_allocator():
        x = torch.arange(4 * MiB // 4, dtype=torch.float32)  # a CPU tensor in musa memory
    assert x.device.type == "cpu"
    assert torch.musa.memory_allocated() - base == COUNTED * 4 * MiB
    y = x.to("musa")
    assert y.device.type == "musa" and y.data_ptr() == x.data_ptr()  # no copy
    assert torch.musa.memory_allocated() - base == COUNTED * 4 * MiB  # counted once
    y.add_(1)  # one memory: the CPU tensor sees the device's writes
    torch.musa.synchronize()  # (the CPU reads what an asynchronous device wrote)
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
    assert COUNTED * 4 * MiB <= grown <= COUNTED * (4 * MiB + 8192)  # the checkpoint's bytes, once


@pytest.mark.slow
def test_alloc_conf_cpu_unified_from_the_start(subpython):
    r = subpython("""
        import torch, torch_musa
        x = torch.ones(1 << 20)
        y = x.to("musa")
        print(y.data_ptr() == x.data_ptr(), torch.musa.memory_allocated() >> 20)
    """, {"PYTORCH_MUSA_ALLOC_CONF": "cpu:unified"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", str(COUNTED * 4)]
    bad = subpython("import torch_musa", {"PYTORCH_MUSA_ALLOC_CONF": "cpu:shared"})
    assert bad.returncode != 0 and "bad value in 'cpu:shared'" in bad.stderr
