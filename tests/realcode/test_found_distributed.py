"""Distributed cases found by running PyTorch's distributed examples on musa:
each is the minimal form of what failed.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

DTENSOR_RANDOM_INIT = r'''
import torch, torch_musa, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard
dist.init_process_group("mccl", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("musa", (1,))
torch.manual_seed(0)
d = distribute_tensor(torch.zeros(8, 4, device="musa"), mesh, [Shard(0)])
d.normal_()
torch.manual_seed(0)
plain = torch.zeros(8, 4, device="musa").normal_()
print(torch.equal(d.to_local().cpu(), plain.cpu()))
dist.destroy_process_group()
'''


def test_dtensor_random_init_on_one_rank(subpython):
    """DTensor takes musa for CUDA-like (torch.musa.set_rng_state exists) and ran
    random ops through its Philox offset tracker, which reads musa's mt19937
    generator state as (seed, offset) and raised AssertionError."""
    r = subpython(DTENSOR_RANDOM_INIT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True"], r.stdout


FSDP2_META_INIT = r'''
import sys, torch, torch_musa, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("mccl", init_method="file://" + store, rank=rank, world_size=2)
torch.musa.set_device(rank)
def make():
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 5))  # 5 rows: uneven shards
torch.manual_seed(0)
with torch.device("meta"):
    model = make()
for m in model:
    fully_shard(m)
fully_shard(model)
model.to_empty(device=f"musa:{rank}")
with torch.no_grad():
    for m in model:
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
full = [p.full_tensor().cpu() for p in model.parameters()]
torch.manual_seed(0)
with torch.device(f"musa:{rank}"):
    plain = make()
same = all(torch.equal(a, b.detach().cpu()) for a, b in zip(full, plain.parameters()))
print(rank, same)
dist.destroy_process_group()
'''


@pytest.mark.requires_devices(2)  # a rank per device: on the one-GPU H200 rank 1 had no device
def test_fsdp2_meta_init_reset_parameters_matches_an_unsharded_init(tmp_path):
    """pytorch/examples distributed/FSDP2/example.py: build on the meta device,
    fully_shard, to_empty(device=musa), reset_parameters(). The shards of every
    parameter together must be what an unsharded model draws from the same seed
    (DTensor's promise on CUDA), uneven shards included."""
    script = tmp_path / "fsdp2_init.py"
    script.write_text(FSDP2_META_INIT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "store")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    except subprocess.TimeoutExpired:  # one rank failed, the other waits on it: show both
        for p in procs:
            p.kill()
        pytest.fail("a rank hung:\n" + "\n".join(p.communicate()[1][-2000:] for p in procs))
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    assert sorted(out.split()[-2:] for out, _ in outs) == [["0", "True"], ["1", "True"]], outs
