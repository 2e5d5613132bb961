"""``torch.compile(mode="reduce-overhead")`` on musa: Inductor's graphs run as MUSA graphs.

Inductor decides about CUDA graphs by device name, and hands graphs to CUDA's trees;
four places answer differently for musa (host driver: Inductor's C++ kernels, whose
calls the wrapper routes through ``torch.musa.graphs.run_host_callable`` under
reduce-overhead, so capture records them):

* the device check (``cudagraph_utils.check_multiple_devices_or_any_cpu_nodes``)
  accepts exactly one CUDA device; a graph on one musa device passes here, and a
  graph with CPU nodes or several devices gets CUDA's message for it. Whole graphs
  are captured (Inductor's partitions split only around non-GPU nodes, which all
  musa nodes are to it), so CPU nodes are refused as CUDA refuses them without
  partitions;
* capture and replay: ``MusaGraphPolicy``, Inductor's ``CUDAGraphPolicy`` extension
  point, gives musa graphs to ``musagraph_trees`` and any other to CUDA's trees;
* reasons: Inductor logs a skip's reason only for graphs with a CUDA device; for
  musa graphs the same message is logged (and counted, where Inductor counts
  nothing) by ``_report_musa_skips``;
* a backward without graphs after a graphed forward tells the forward's device
  manager, musa's here (``maybe_handle_backward_generation`` asks CUDA's); and
  resetting CUDA's trees (``torch._dynamo.reset()``, a compiled model's reset)
  resets musa's too.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch._inductor.cudagraph_utils as cudagraph_utils
import torch._inductor.output_code as output_code
# The host driver's only (backend.py), which runs the pinned torch 2.13: Inductor's
# CUDA-graph policy hook is new there.
from torch._inductor.cudagraph_utils import CUDAGraphPolicy  # needs torch>=2.13

from torch_musa._inductor import musagraph_trees
from torch_musa._inductor.musagraphs import check_multiple_devices_or_any_cpu_nodes

__all__ = ["MusaGraphPolicy", "install"]

DEVICE = "musa"
_log = torch._logging.getArtifactLogger("torch._inductor.cudagraph_utils", "cudagraphs")
_STOCK: dict[str, Any] = {}


def _has_musa(devices) -> bool:
    return any(torch.device(d).type == DEVICE for d in devices)


def _device_check(device_node_mapping: dict) -> str | None:
    if not _has_musa(device_node_mapping):
        return _STOCK["device_check"](device_node_mapping)
    reason = check_multiple_devices_or_any_cpu_nodes(device_node_mapping)
    if reason is not None:
        _log.warning(reason)  # Inductor logs reasons for CUDA graphs only
    return reason


def _is_musa_graph(example_inputs: Sequence[Any]) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == DEVICE for x in example_inputs)


class MusaGraphPolicy(CUDAGraphPolicy):
    """Inductor's CUDA-graph policy with musa graphs captured by ``musagraph_trees``."""

    def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index: int,
                     is_backward: bool, is_inference: bool, **kwargs):
        if not _is_musa_graph(example_inputs):
            return super().cudagraphify(model, example_inputs, static_input_idxs,
                                        device_index=device_index, is_backward=is_backward,
                                        is_inference=is_inference, **kwargs)
        _reset_musa_trees_too()
        return musagraph_trees.musagraphify(model, static_input_idxs, device_index=device_index,
                                            is_backward=is_backward, is_inference=is_inference,
                                            **kwargs)


def _report_musa_skips(example_inputs, compiled_graph, cudagraphs, constants,
                       boxed_forward_device_index) -> None:
    _STOCK["post_compile"](example_inputs, compiled_graph, cudagraphs, constants,
                           boxed_forward_device_index)
    info = compiled_graph.cudagraph_info
    devices = compiled_graph.device_types
    if info is not None and info.cudagraph_fail_reasons and DEVICE in devices and "cuda" not in devices:
        cudagraph_utils.log_cudagraph_skip_and_bump_counter(
            f"skipping cudagraphs due to {info.cudagraph_fail_reasons}")


def _backward_generation(compiled_graph, boxed_forward_device_index) -> None:
    if DEVICE not in compiled_graph.device_types:
        return _STOCK["backward_generation"](compiled_graph, boxed_forward_device_index)
    if not (compiled_graph.fx_kwargs["is_backward"] and boxed_forward_device_index is not None
            and boxed_forward_device_index.value is not None):
        return None
    manager = musagraph_trees.get_manager(boxed_forward_device_index.value,
                                          create_if_none_exists=False)
    if manager is None:
        return None
    run = compiled_graph.current_callable

    def backward_without_graphs(new_inputs: list) -> Any:
        manager.set_to_running_backward()
        return run(new_inputs)

    compiled_graph.current_callable = backward_without_graphs
    return None


def _reset_graph_trees() -> None:
    _STOCK["reset"]()
    musagraph_trees.reset_musagraph_trees()


def _reset_musa_trees_too() -> None:
    """Once musa graphs exist (CUDA's trees import Inductor's compiler, whose import
    installs the rest, so they are patched here, when both are loaded)."""
    if "reset" in _STOCK:
        return
    import torch._inductor.cudagraph_trees as cudagraph_trees  # noqa: PLC0415

    _STOCK["reset"] = cudagraph_trees.reset_cudagraph_trees
    cudagraph_trees.reset_cudagraph_trees = _reset_graph_trees


def install() -> None:
    """Answer Inductor's CUDA-graph questions for musa (once; leaves a user's policy)."""
    if "device_check" in _STOCK:
        return
    _STOCK["device_check"] = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes
    _STOCK["post_compile"] = output_code.cudagraph_post_compile
    _STOCK["backward_generation"] = output_code.maybe_handle_backward_generation
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _device_check
    output_code.cudagraph_post_compile = _report_musa_skips
    output_code.maybe_handle_backward_generation = _backward_generation
    if torch._inductor.config.cudagraph_policy is None:
        torch._inductor.config.cudagraph_policy = MusaGraphPolicy()
