"""torch_musa.core.grad_scaling: the unscale step GradScaler and ShardedGradScaler share."""
import pytest
import torch

from torch_musa.amp import GradScaler
from torch_musa.config import CONFIG
from torch_musa.core.grad_scaling import inverse_scale, unscale_grads
from torch_musa.distributed.fsdp import ShardedGradScaler


def test_inverse_scale_is_float32_reciprocal():
    for value in (65536.0, 3.0, 1e-3):
        s = torch.tensor([value], device="musa")
        inv = inverse_scale(s)
        assert inv.dtype == torch.float32 and inv.device.type == "musa"
        expected = s.cpu().double().reciprocal().float()  # of the float32 scale held
        if CONFIG.profile.supports_fp64:
            assert torch.equal(inv.cpu(), expected)  # rounded once, from float64
        else:
            torch.testing.assert_close(inv.cpu(), expected, rtol=2e-7, atol=0)


@pytest.mark.parametrize("make,shape", [(lambda: GradScaler(init_scale=8.0), ()),
                                        (lambda: ShardedGradScaler(init_scale=8.0), (1,))])
def test_both_scalers_unscale_once_per_step(make, shape):
    scaler = make()
    p = torch.nn.Parameter(torch.ones(4, device="musa"))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler.scale((p * 3).sum()).backward()
    scaler.unscale_(opt)
    torch.testing.assert_close(p.grad.cpu(), torch.full((4,), 3.0))
    flags = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    assert [tuple(f.shape) for f in flags.values()] == [shape] and not any(f.item() for f in flags.values())
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        unscale_grads(scaler, opt, allow_fp16=False, found_inf_shape=shape)


def test_sharded_scaler_all_reduces_a_cpu_gradients_flag_through_musa(tmp_path):
    # The real torch_musa's FSDP tests run the scaler on CPU gradients in a group made
    # for mccl alone, which has no backend for CPU tensors.
    import torch.distributed as dist

    dist.init_process_group("mccl", store=dist.FileStore(str(tmp_path / "store"), 1),
                            rank=0, world_size=1)
    try:
        scaler = ShardedGradScaler(init_scale=2.0)
        t = torch.tensor([float("inf")])
        t.grad = t.clone()
        opt = torch.optim.SGD([t], lr=1.0)
        scaler.scale(torch.full((1,), 4.0))
        assert scaler.step(opt) is None  # the inf was found: the step is skipped
        flags = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
        assert [f.device.type for f in flags.values()] == ["cpu"]
        assert all(f.item() == 1.0 for f in flags.values())
    finally:
        dist.destroy_process_group()
