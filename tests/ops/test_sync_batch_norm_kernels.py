"""SyncBatchNorm's CUDA-only kernels on musa (issue 23, item 8), in one process: the
kernels composed as SyncBatchNorm composes them, over a batch split in two simulated
ranks, against BatchNorm on the whole batch (forward, running statistics, backward).
The 2-rank run over mccl is tests/distributed/test_mccl.py::test_sync_batch_norm."""
import pytest
import torch
import torch.nn.functional as F

from torch_musa.testing import dtype_supported


def _sync_bn_by_hand(parts, weight, bias, running_mean, running_var, grads, eps=1e-5, momentum=0.1):
    """What torch/nn/modules/_functions.py's SyncBatchNorm does, the collectives being
    a torch.stack over the parts."""
    stats = [torch.batch_norm_stats(p, eps) for p in parts]
    counts = torch.tensor([p.numel() // p.size(1) for p in parts], device=parts[0].device,
                          dtype=stats[0][0].dtype)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        parts[0], torch.stack([s[0] for s in stats]), torch.stack([s[1] for s in stats]),
        running_mean, running_var, momentum, eps, counts)
    outs = [torch.batch_norm_elemt(p, weight, bias, mean, invstd, eps) for p in parts]
    reduced = [torch.batch_norm_backward_reduce(g, p, mean, invstd, weight, True, True, True)
               for g, p in zip(grads, parts)]
    sum_dy = sum(r[0] for r in reduced)
    sum_dy_xmu = sum(r[1] for r in reduced)
    grad_weight = sum(r[2] for r in reduced)
    grad_bias = sum(r[3] for r in reduced)
    grad_in = [torch.batch_norm_backward_elemt(g, p, mean, invstd, weight, sum_dy, sum_dy_xmu,
                                               counts.to(torch.int32))
               for g, p in zip(grads, parts)]
    return outs, grad_in, grad_weight, grad_bias, mean, invstd


@pytest.mark.parametrize("shape", [(6, 4, 5, 3), (8, 3)])
def test_kernels_compose_to_batch_norm(shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64) * 2 + 1
    w, b = torch.randn(shape[1], dtype=torch.float64), torch.randn(shape[1], dtype=torch.float64)
    g = torch.randn(shape, dtype=torch.float64)
    # reference: BatchNorm in float64 on the CPU over the whole batch
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    rm, rv = torch.zeros(shape[1], dtype=torch.float64), torch.ones(shape[1], dtype=torch.float64)
    y = F.batch_norm(xr, rm, rv, wr, br, training=True, momentum=0.1, eps=1e-5)
    y.backward(g)
    # musa, float32, the batch split 2 + rest as two ranks
    m = lambda t: t.float().musa()  # noqa: E731
    parts = [m(x[:2]), m(x[2:])]
    rm_m, rv_m = torch.zeros(shape[1], device="musa"), torch.ones(shape[1], device="musa")
    outs, gin, gw, gb, mean, invstd = _sync_bn_by_hand(parts, m(w), m(b), rm_m, rv_m, [m(g[:2]), m(g[2:])])
    tol = dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(outs).cpu().double(), y.detach(), **tol)
    torch.testing.assert_close(torch.cat(gin).cpu().double(), xr.grad, **tol)
    torch.testing.assert_close(gw.cpu().double(), wr.grad, **tol)
    torch.testing.assert_close(gb.cpu().double(), br.grad, **tol)
    torch.testing.assert_close(rm_m.cpu().double(), rm, **tol)
    torch.testing.assert_close(rv_m.cpu().double(), rv, **tol)
    assert mean.device.type == "musa" and invstd.dtype == torch.float32


@pytest.mark.parametrize("dtype", [d for d in (torch.float16, torch.bfloat16) if dtype_supported(d)])
def test_half_inputs_keep_float32_statistics(dtype):
    x = torch.randn(4, 3, 5).to(dtype)
    mean, invstd = torch.batch_norm_stats(x.musa(), 1e-5)
    assert mean.dtype == invstd.dtype == torch.float32      # CUDA's accumulate type
    var, ref_mean = torch.var_mean(x.float(), [0, 2], correction=0)
    torch.testing.assert_close(mean.cpu(), ref_mean)
    torch.testing.assert_close(invstd.cpu(), torch.rsqrt(var + 1e-5))
    out = torch.batch_norm_elemt(x.musa(), None, None, mean, invstd, 1e-5)
    assert out.dtype == dtype


def test_module_without_a_process_group_is_batch_norm():
    """Outside a process group nn.SyncBatchNorm is BatchNorm (PyTorch's own rule)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    sbn = torch.nn.SyncBatchNorm(3).musa()
    bn = torch.nn.BatchNorm2d(3)
    torch.testing.assert_close(sbn(x.musa()).cpu(), bn(x), rtol=1e-5, atol=1e-5)
