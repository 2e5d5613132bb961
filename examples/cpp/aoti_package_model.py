"""Exports the demo model on musa:0 and compiles it into an AOTInductor package for
the C++ program (aoti_main.cpp).

    python examples/cpp/aoti_package_model.py model.pt2

Prints the package's output for the demo's input, one value a line, as aoti_main.cpp
prints it: the two must agree. (The model is trace_model.py's.)
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

import torch_musa  # noqa: F401  (the musa device)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_model import SmallNet, demo_input  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="where the package goes (model.pt2)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SmallNet().eval().to("musa:0")
    x = demo_input("musa:0")
    exported = torch.export.export(model, (x,))
    path = torch._inductor.aoti_compile_and_package(exported, package_path=args.output)
    out = torch._inductor.aoti_load_package(path)(x)
    for v in out.cpu().flatten().tolist():
        print(f"{v:.9g}")


if __name__ == "__main__":
    main()
