"""torch_musa.distributed.loss: cross entropy over class-sharded logits, against F.cross_entropy."""
import os

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

import torch_musa  # noqa: F401
from torch_musa.distributed.loss import parallel_fused_cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_single_device_matches_cross_entropy(reduction):
    torch.manual_seed(0)
    logits = torch.randn(5, 37)
    target = torch.randint(37, (5,))
    x = logits.to("musa").requires_grad_()
    loss = parallel_fused_cross_entropy(x, target.to("musa"), reduction=reduction)
    (loss * 2).backward()
    ref_x = logits.double().requires_grad_()
    ref = F.cross_entropy(ref_x, target, reduction=reduction)
    (ref * 2).backward()
    assert loss.device.type == "musa"
    torch.testing.assert_close(loss.cpu().double(), ref.detach())
    torch.testing.assert_close(x.grad.cpu().double(), ref_x.grad)
    assert torch.equal(x.detach().cpu(), logits)  # the logits are not overwritten


def test_bad_reduction_names_what_is_allowed():
    x = torch.randn(2, 3, device="musa")
    with pytest.raises(ValueError, match=r"reduction must be one of \('mean', 'sum'\), got 'none'"):
        parallel_fused_cross_entropy(x, torch.zeros(2, dtype=torch.long, device="musa"), reduction="none")


def _two_ranks(rank, world, store, results):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    dist.init_process_group("mccl", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.musa.set_device(rank % torch.musa.device_count())
    mesh = init_device_mesh("musa", (world,))
    torch.manual_seed(0)
    logits, target = torch.randn(6, 10), torch.randint(10, (6,))
    ref_x = logits.double().requires_grad_()
    ref = F.cross_entropy(ref_x, target)
    ref.backward()
    out = {}
    for name in ("parallel_fused_cross_entropy", "loss_parallel"):
        x = distribute_tensor(logits.to("musa").requires_grad_(), mesh, [Shard(1)])
        if name == "loss_parallel":
            with loss_parallel():
                loss = F.cross_entropy(x, target.to("musa"))
                loss.backward()
        else:
            loss = parallel_fused_cross_entropy(x, target.to("musa"))
            loss.backward()
        grad = x.grad.to_local().cpu().double()
        want = ref_x.grad.chunk(world, dim=1)[rank]
        out[name] = [float((loss.to_local().cpu().double() - ref.detach()).abs()),
                     float((grad - want).abs().max()), list(grad.shape)]
    results[rank] = out
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_match_cross_entropy(tmp_path):
    world = 2
    results = mp.Manager().dict()
    mp.spawn(_two_ranks, args=(world, str(tmp_path / "store"), results), nprocs=world)
    for rank in range(world):
        for name, (loss_err, grad_err, shape) in results[rank].items():
            assert loss_err < 1e-6 and grad_err < 1e-6, (rank, name, loss_err, grad_err)
            assert shape == [6, 5]
