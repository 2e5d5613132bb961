"""torch.musa's submodules hold what torch.cuda's do: ``torch.musa.memory`` every name of
``torch.cuda.memory.__all__`` (CUDA → MUSA), one implementation shared with ``torch.musa``;
``torch.musa.amp`` torch.cuda.amp's ``amp_definitely_not_available``."""
import os

import torch
import torch.cuda.amp
import torch.cuda.memory


def test_memory_submodule_has_every_name_of_torch_cuda_memory():
    names = [n.replace("CUDA", "MUSA") for n in torch.cuda.memory.__all__]
    assert [n for n in names if not hasattr(torch.musa.memory, n)] == []
    for name in names:  # re-exported, not a second implementation
        if hasattr(torch.musa, name):
            assert getattr(torch.musa, name) is getattr(torch.musa.memory, name), name


def test_the_names_added_to_memory_work_there():
    mem = torch.musa.memory
    assert mem.get_per_process_memory_fraction() == torch.musa.get_per_process_memory_fraction()
    assert 0 < mem.get_per_process_memory_fraction() <= 1
    x = torch.ones(4).pin_memory()
    stats = mem.host_memory_stats()
    assert stats["allocations.current"] >= 1
    assert mem.host_memory_stats_as_nested_dict()["allocations"]["current"] == stats["allocations.current"]
    mem.reset_peak_host_memory_stats()
    assert mem.host_memory_stats()["allocations.peak"] == mem.host_memory_stats()["allocations.current"]
    mem.reset_accumulated_host_memory_stats()
    assert mem.host_memory_stats()["allocations.allocated"] == 0
    del x
    torch.ones(1, device="musa")
    processes = mem.list_gpu_processes(0).splitlines()
    # (On a shared GPU other processes are listed too, in no order of ours.)
    assert processes[0] == "GPU:0"
    assert any(f"process {os.getpid():>10d} uses" in line for line in processes[1:]), processes
    assert torch.musa.monitoring.list_gpu_processes is mem.list_gpu_processes


def test_amp_has_amp_definitely_not_available():
    assert hasattr(torch.cuda.amp, "amp_definitely_not_available")
    assert torch.musa.amp.amp_definitely_not_available is torch.musa.amp_definitely_not_available
    assert torch.musa.amp.amp_definitely_not_available() is (not torch.musa.is_available())
    assert "amp_definitely_not_available" in torch.musa.amp.__all__
