"""Traces a small model on musa:0 and saves it for the C++ demo (main.cpp).

    python examples/cpp/trace_model.py model.pt

Prints the model's output for the demo's input, one value a line, as main.cpp
prints it: the two must agree.
"""
from __future__ import annotations

import argparse

import torch

import torch_musa  # noqa: F401  (the musa device)


class SmallNet(torch.nn.Module):
    """A convolution, a LayerNorm'd MLP and a softmax: kernels and fallback ops."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.norm = torch.nn.LayerNorm(4 * 4 * 6)
        self.fc1 = torch.nn.Linear(4 * 4 * 6, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).flatten(1)
        h = torch.nn.functional.gelu(self.fc1(self.norm(h)))
        return torch.softmax(self.fc2(h), dim=1)


def demo_input(device: str) -> torch.Tensor:
    """The input main.cpp builds: linspace(-1, 1, 48) as a (2, 1, 4, 6) batch."""
    return torch.linspace(-1, 1, 48).reshape(2, 1, 4, 6).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="where the TorchScript model goes (model.pt)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SmallNet().eval().to("musa:0")
    x = demo_input("musa:0")
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        out = traced(x)
    traced.save(args.output)
    for v in out.cpu().flatten().tolist():
        print(f"{v:.9g}")


if __name__ == "__main__":
    main()
