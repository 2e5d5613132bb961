"""Debugging tools: compare every device op with CPU, track NaN/Inf to the op that made it.

    from torch_musa.utils.compare_tool import CompareWithCPU, NanInfTracker, open_module_tracker

    open_module_tracker(model)                 # ops get paths like model.layers.3.attn.q_proj
    with CompareWithCPU(output_dir="cmp") as cmp:       # or NanInfTracker(...)
        for batch in data:
            loss = model(batch).sum(); loss.backward(); opt.step()
            cmp.step()

Both hook at the dispatch level (a TorchDispatchMode), so every aten op is seen,
forward and backward, whatever Python API produced it. They work on any device
type (musa, CUDA, ...); CompareWithCPU re-runs on CPU.
"""
from .compare import (CompareError, CompareWithCPU, compare_for_single_op, compare_outputs,
                      compare_tensor, save_data_for_op)
from .module_tracker import ModuleTrackerHandle, open_module_tracker
from .nan_inf import NanInfTrackError, NanInfTracker, nan_inf_track_for_single_op

__all__ = [
    "CompareWithCPU", "NanInfTracker", "open_module_tracker", "compare_for_single_op",
    "nan_inf_track_for_single_op", "CompareError", "NanInfTrackError",
    "ModuleTrackerHandle", "compare_tensor", "compare_outputs", "save_data_for_op",
]
