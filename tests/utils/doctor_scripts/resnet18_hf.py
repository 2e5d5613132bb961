"""A ResNet-18 (Hugging Face transformers' ResNet with basic blocks [2, 2, 2, 2],
from a config) trained with SGD on random images, written for CUDA."""
import argparse

import torch
from transformers import ResNetConfig, ResNetForImageClassification

p = argparse.ArgumentParser()
p.add_argument("--image", type=int, default=32)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--steps", type=int, default=10)
a = p.parse_args()

torch.manual_seed(0)
cfg = ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512],
                   embedding_size=64, num_labels=10)
model = ResNetForImageClassification(cfg).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(a.steps):
    x = torch.randn(a.batch, 3, a.image, a.image, device="cuda")
    y = torch.randint(0, 10, (a.batch,), device="cuda")
    loss = model(pixel_values=x, labels=y).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.3f}")
