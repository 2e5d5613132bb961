"""Cross entropy over class-sharded logits (the real torch_musa's ``torch_musa.distributed.loss``).

``parallel_fused_cross_entropy(input, target, reduction, pg)``: logits of shape (N, C)
whose class dimension is split over the ranks of ``pg`` (a DTensor placed
``Shard(1)``, or each rank's local shard with ``pg``), class-index targets of shape
(N,), and a loss equal to ``F.cross_entropy`` of the whole logits. Each rank
reduces its shard to a per-row max, sum of exponentials and target logit; one
all-gather combines them, so no rank holds all C classes. The gradient of each
shard is that shard's part of softmax minus one-hot. Computed in float32.
Unlike upstream's kernel, the input is left as it was (upstream overwrites the
logits with their gradient during the forward).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["FusedCrossEntropyLossTensorParallel", "parallel_fused_cross_entropy"]

_REDUCTIONS = ("mean", "sum")


def _gather(t: torch.Tensor, pg) -> torch.Tensor:
    """Stack ``t`` from every rank of ``pg``: shape (world, *t.shape)."""
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(pg))]
    dist.all_gather(parts, t.contiguous(), group=pg)
    return torch.stack(parts)


class FusedCrossEntropyLossTensorParallel(torch.autograd.Function):
    """Cross entropy of local logit shards (N, C_local); see the module doc."""

    @staticmethod
    def forward(ctx, input: torch.Tensor, target: torch.Tensor, reduction: str = "mean",
                pg: dist.ProcessGroup | None = None) -> torch.Tensor:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"parallel_fused_cross_entropy: reduction must be one of {_REDUCTIONS}, "
                             f"got {reduction!r}")
        if input.dim() != 2 or target.shape != input.shape[:1]:
            raise ValueError("parallel_fused_cross_entropy: expected logits of shape (N, C) and "
                             f"targets of shape (N,), got {tuple(input.shape)} and {tuple(target.shape)}")
        x = input.detach().float()
        n, width = x.shape
        if pg is not None and dist.get_world_size(pg) > 1:
            rank = dist.get_rank(pg)
            widths = _gather(torch.tensor([width], device=x.device), pg).flatten().tolist()
        else:
            pg, rank, widths = None, 0, [width]
        start = sum(widths[:rank])
        local = target - start
        here = (local >= 0) & (local < width)
        row_max = x.max(dim=1).values
        sum_exp = (x - row_max[:, None]).exp().sum(dim=1)
        picked = x.gather(1, local.clamp(0, width - 1)[:, None]).squeeze(1) * here
        stats = torch.stack([row_max, sum_exp, picked])  # (3, N)
        stats = _gather(stats, pg) if pg is not None else stats[None]
        global_max = stats[:, 0].max(dim=0).values
        total = (stats[:, 1] * (stats[:, 0] - global_max).exp()).sum(dim=0)
        lse = global_max + total.log()
        losses = lse - stats[:, 2].sum(dim=0)
        ctx.save_for_backward(x, lse, local, here)
        ctx.reduction, ctx.n, ctx.dtype = reduction, n, input.dtype
        return losses.mean() if reduction == "mean" else losses.sum()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, lse, local, here = ctx.saved_tensors
        grad = (x - lse[:, None]).exp()
        rows = torch.arange(x.shape[0], device=x.device)[here]
        grad[rows, local[here]] -= 1
        scale = grad_output.float() / ctx.n if ctx.reduction == "mean" else grad_output.float()
        return (grad * scale).to(ctx.dtype), None, None, None


def parallel_fused_cross_entropy(input, target, reduction: str = "mean", pg=None):
    """Cross entropy of (N, C) logits split over ranks by class (see the module doc).

    ``input``: a DTensor placed ``Shard(1)`` on a one-dimensional mesh (``pg`` defaults to
    the mesh's group; the loss is a replicated DTensor), or a plain tensor: this rank's
    shard with ``pg``, or all the logits without. ``reduction``: ``"mean"`` or ``"sum"``.
    """
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if not isinstance(input, DTensor):
        return FusedCrossEntropyLossTensorParallel.apply(input, target, reduction, pg)
    mesh = input.device_mesh
    if mesh.ndim != 1 or tuple(input.placements) not in ((Shard(1),), (Replicate(),)):
        raise ValueError("parallel_fused_cross_entropy: a DTensor input must be placed Shard(1) "
                         f"(or Replicate()) on a one-dimensional mesh, got {input.placements} on "
                         f"a {mesh.ndim}-D mesh")
    if isinstance(target, DTensor):
        target = target.full_tensor()
    if input.placements[0] == Replicate():
        loss = FusedCrossEntropyLossTensorParallel.apply(input.to_local(), target, reduction, None)
    else:
        group = pg if pg is not None else mesh.get_group()
        loss = FusedCrossEntropyLossTensorParallel.apply(input.to_local(), target, reduction, group)
    return DTensor.from_local(loss, mesh, [Replicate()], run_check=False)
