"""The ``musagraphs`` dynamo backend: ``torch.compile(backend="musagraphs")``.

As torch's ``cudagraphs`` backend for CUDA (and the real torch_musa's backend of this
name): AOTAutograd's forward and backward graphs run op by op (no Inductor), captured
and replayed as MUSA graphs by ``musagraph_trees``. A graph that mutates a non-static
input, has CPU nodes or several devices, or an op graphs cannot hold runs without
graphs, with CUDA's skip message. Registered with dynamo when its backend registry is
imported.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["MusagraphsBackend", "check_multiple_devices_or_any_cpu_nodes", "musagraphs",
           "register"]

DEVICE = "musa"


def check_multiple_devices_or_any_cpu_nodes(device_node_mapping: dict) -> str | None:
    """CUDA's device check, for a graph with a musa device: ``None`` for one musa device,
    else CUDA's skip message (CPU nodes first, then the devices)."""
    from torch._inductor import cudagraph_utils
    from torch._inductor.cudagraph_utils import format_default_skip_message

    devices = {d: n for d, n in device_node_mapping.items() if d.type != "meta"}
    if cpu_node := devices.get(torch.device("cpu")):
        msg = f"cpu device ({cpu_node.name})"
        if stack_trace := cudagraph_utils._get_use_stack_trace(cpu_node):
            return format_default_skip_message(f"{msg}. Found from : \n {stack_trace}")
        return format_default_skip_message(msg)
    if len(devices) == 1 and next(iter(devices)).type == DEVICE:
        return None
    return format_default_skip_message(f"multiple devices: {', '.join(map(repr, devices))}")


def _check_for_skip(aot_model: torch.fx.GraphModule, num_fixed: int) -> str | None:
    from torch._dynamo import config
    from torch._dynamo.backends import cudagraphs as cuda_backend
    from torch._inductor.cudagraph_utils import format_default_skip_message
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    if not config.cudagraph_backend_support_input_mutation:
        if reason := cuda_backend.check_for_mutation_ignore_cuda_graph_managed_tensor(aot_model, num_fixed):
            return reason
    if reason := check_multiple_devices_or_any_cpu_nodes(cuda_backend.get_device_node_mapping(aot_model)):
        return reason
    if node := get_first_incompatible_cudagraph_node(aot_model):
        return format_default_skip_message(f"incompatible op ({node.name})")
    return None


def _device_index(gm: torch.fx.GraphModule) -> int:
    from torch._dynamo.backends.cudagraphs import get_device_node_mapping

    device = next(iter(get_device_node_mapping(gm)))
    return device.index if device.index is not None else torch.musa.current_device()


def musagraphs(dynamo_model: torch.fx.GraphModule, dynamo_inputs: Sequence[Any]) -> Any:
    """Compile ``dynamo_model`` to MUSA graphs of its AOTAutograd graphs."""
    from torch._dynamo.backends import cudagraphs as cuda_backend
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._inductor.cudagraph_utils import get_placeholder_info, log_cudagraph_skip_and_bump_counter
    from torch._inductor.utils import BoxedBool, count_tangents, num_fw_fixed_arguments

    from torch_musa._inductor.musagraph_trees import get_manager, musagraphify_impl

    graphed = BoxedBool(True)
    forward_device = [None]

    def graphify(aot_model, aot_inputs, fixed: int, *, is_backward: bool, is_inference: bool):
        run = musagraphify_impl(
            boxed_nop(aot_model, aot_inputs), aot_inputs, range(fixed),
            device_index=_device_index(aot_model), is_backward=is_backward,
            is_inference=is_inference, stack_traces=cuda_backend.get_stack_traces(aot_model),
            placeholders=get_placeholder_info(aot_model.graph),
            mutated_input_idxs=tuple(cuda_backend.find_input_mutations(aot_model.graph)))
        return run

    def forward(aot_model, aot_inputs, is_inference: bool = False):
        fixed = num_fw_fixed_arguments(len(dynamo_inputs), len(aot_inputs))
        if reason := _check_for_skip(aot_model, fixed):
            BoxedBool.disable(graphed)
            log_cudagraph_skip_and_bump_counter(f"skipping cudagraphs due to {reason}")
            return boxed_nop(aot_model, aot_inputs)
        forward_device[0] = _device_index(aot_model)
        return graphify(aot_model, aot_inputs, fixed, is_backward=False, is_inference=is_inference)

    def backward(aot_model, aot_inputs):
        if not graphed:
            return aot_model
        fixed = count_tangents(aot_model)
        if reason := _check_for_skip(aot_model, fixed):
            log_cudagraph_skip_and_bump_counter(f"skipping cudagraphs due to {reason}")
            manager = get_manager(forward_device[0], create_if_none_exists=True)
            run = boxed_nop(aot_model, aot_inputs)

            def backward_without_graphs(inputs: list) -> Any:
                manager.set_to_running_backward()  # the forward's outputs are free after it
                return run(inputs)

            backward_without_graphs._boxed_call = True
            return backward_without_graphs
        return graphify(aot_model, aot_inputs, fixed, is_backward=True, is_inference=False)

    return aot_autograd(
        fw_compiler=forward, bw_compiler=backward,
        inference_compiler=functools.partial(forward, is_inference=True),
        keep_inference_input_mutations=torch._dynamo.config.cudagraph_backend_keep_input_mutation,
    )(dynamo_model, dynamo_inputs)


class MusagraphsBackend:
    """What dynamo's registry holds: the backend, and the reset ``torch._dynamo.reset()`` calls."""

    compiler_name = "musagraphs"

    def __call__(self, model, inputs):
        return musagraphs(model, inputs)

    @staticmethod
    def reset() -> None:
        from torch_musa._inductor.musagraph_trees import reset_musagraph_trees

        reset_musagraph_trees()


def register(registry=None) -> None:
    """Register ``musagraphs`` with dynamo's backend registry (idempotent)."""
    from torch._dynamo.backends import registry as dynamo_registry

    registry = registry or dynamo_registry
    if "musagraphs" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=MusagraphsBackend(), name="musagraphs")
