"""Data-parallel training with DistributedDataParallel and NCCL (CUDA style).

    python train_ddp.py --world-size 2 --steps 10

Spawns one process per GPU; each sets its device from LOCAL_RANK, joins the
`nccl` process group and trains a small MLP on its shard of a synthetic set.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def worker(local_rank, args):
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, rank=local_rank, world_size=args.world_size)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device(f"cuda:{local_rank}")
    else:
        device = torch.device("cpu")
    torch.manual_seed(args.seed)

    g = torch.Generator().manual_seed(args.seed)
    data = TensorDataset(torch.randn(args.steps * 16 * args.world_size, 20, generator=g),
                         torch.randn(args.steps * 16 * args.world_size, 1, generator=g))
    sampler = DistributedSampler(data, num_replicas=args.world_size, rank=local_rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=16, sampler=sampler)

    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        if local_rank == 0:
            print(f"step {step} loss {avg.item() / args.world_size:.6f} backend {dist.get_backend()}")
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=min(2, max(1, torch.cuda.device_count())))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=29533)
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
