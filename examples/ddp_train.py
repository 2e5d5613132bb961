"""DistributedDataParallel training on musa devices with the mccl backend.

Run with torchrun (one process per rank; rank r uses musa:(r % device_count)):

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --steps 30

Trains a small MLP regressor on a synthetic task (y = tanh(x @ w)), each rank on its shard of
every batch (DistributedSampler), and prints the loss, the throughput and,
at the end, a check that every rank holds the same parameters.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torch_musa  # noqa: F401  (registers the musa device)
import torch_musa.distributed

torch_musa.distributed.register()  # no-op when torch_musa already did it


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--backend", default="mccl", help='e.g. "mccl" or "cpu:gloo,musa:mccl"')
    args = ap.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("musa", local_rank % torch.musa.device_count())
    torch.musa.set_device(device)
    dist.init_process_group(args.backend, device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    # synthetic regression data: y = tanh(x @ w)
    g = torch.Generator().manual_seed(0)
    w_true = torch.randn(16, 4, generator=g) / 4
    x = torch.randn(args.batch_size * args.steps, 16, generator=g)
    y = torch.tanh(x @ w_true)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size // world, sampler=sampler, drop_last=True)

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4)).to(device)
    ddp = DDP(model, device_ids=[device.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)

    if rank == 0:
        print(f"backend {dist.get_backend()} (mccl {'.'.join(map(str, torch.musa.mccl.version()))}), "
              f"{world} ranks, global batch {args.batch_size}, {args.steps} steps")
    t0 = time.perf_counter()
    for step, (xb, yb) in enumerate(loader):
        xb, yb = xb.to(device), yb.to(device)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()  # gradients all-reduced over mccl, bucket by bucket
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:4d}  loss {mean.item():.5f}")
    dt = time.perf_counter() - t0

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    same = all(torch.equal(c.cpu(), flat.cpu()) for c in copies)
    if rank == 0:
        print(f"{args.steps * args.batch_size / dt:.0f} samples/s; parameters identical on all ranks: {same}")
    dist.destroy_process_group()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
