"""Train a small CNN on synthetic CIFAR-like data, the usual CUDA way.

    python train_cnn.py --steps 20 [--amp] [--no-cuda]

Written for CUDA; run it on musa with `musa-converter -r . -l train_cnn.py`
or unmodified with `import torch_musa.cuda_compat` / TORCH_MUSA_CUDA_COMPAT=1.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 8 * 8, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset(images, labels)


def main():
    parser = argparse.ArgumentParser(description="CNN training (CUDA)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--amp", action="store_true", help="mixed precision (torch.cuda.amp)")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    parser.add_argument("--save", default="", help="save a checkpoint here")
    args = parser.parse_args()

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    if use_cuda:
        torch.cuda.manual_seed(args.seed)
        torch.backends.cudnn.benchmark = True
    device = torch.device("cuda:0" if use_cuda else "cpu")
    print(f"device: {device} ({torch.cuda.get_device_name(0) if use_cuda else 'cpu'})")

    loader = DataLoader(make_data(args.batch_size * args.steps, args.seed),
                        batch_size=args.batch_size, shuffle=True, pin_memory=use_cuda,
                        generator=torch.Generator().manual_seed(args.seed))
    model = Net()
    if use_cuda:
        model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    model.train()
    start = time.time()
    for step, (images, labels) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.6f}")
    if use_cuda:
        torch.cuda.synchronize()
        print(f"max memory allocated: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"done in {time.time() - start:.2f}s on {next(model.parameters()).device}")

    if args.save:
        torch.save({"model": model.state_dict(), "step": args.steps}, args.save)
        ckpt = torch.load(args.save, map_location="cuda" if use_cuda else "cpu")
        model.load_state_dict(ckpt["model"])
        print(f"checkpoint reloaded on {ckpt['model']['fc.weight'].device}")


if __name__ == "__main__":
    main()
