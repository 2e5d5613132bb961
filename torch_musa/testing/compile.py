"""CompileCounter: a ``torch.compile`` backend that counts what it is given."""
from __future__ import annotations

import torch

__all__ = ["CompileCounter"]


class CompileCounter:
    """Use as ``torch.compile(fn, backend=CompileCounter())``.

    Counts the frames (graphs) compiled and the operator nodes in them, keeps
    the graphs, and runs each graph eagerly, so results stay on the device the
    inputs live on (musa tensors run on musa).
    """

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs: list = []

    reset = clear

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.frame_count += 1
        self.graphs.append(gm)
        self.op_count += sum(1 for n in gm.graph.nodes
                             if n.op in ("call_function", "call_method", "call_module"))
        return gm.forward

    def __repr__(self):
        return f"CompileCounter(frame_count={self.frame_count}, op_count={self.op_count})"
