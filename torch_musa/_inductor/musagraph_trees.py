"""MUSA graphs for ``torch.compile(mode="reduce-overhead")`` and the ``musagraphs`` backend.

The real torch_musa's module of this name plays, for musa, the role
``torch._inductor.cudagraph_trees`` plays for CUDA: each compiled graph is run once
eagerly (warm-up), then captured as a ``torch.musa.MUSAGraph`` over static inputs and
replayed on later calls, new inputs copied into the static ones. Parameters, buffers
and other static inputs are captured in place; a non-static input that the graph
mutates makes the function run without graphs, with CUDA's skip message.

What is kept from CUDA's trees is their contract, not their machinery: outputs are the
graph's static memory, handed out as new tensors over it on every call. A capture
whose outputs are still referenced (by the caller, or saved by autograd for a
backward that has not run) is not replayed over them: the call replays another
capture of the same graph, made on demand (up to ``MAX_CAPTURES``, then it runs
eagerly and warns once), unless a new step has begun since, which lets outputs of
earlier steps be overwritten, as on CUDA: ``mark_step_begin`` (or
``torch.compiler.cudagraph_mark_step_begin``), and for a training forward a backward
run on the device (CUDA's trees end a generation there too; autograd's graph of the
last step, alive until the next ``loss =``, holds the forward's outputs). Each
capture has its own memory pool.
"""
from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._inductor.cudagraph_utils import (
    FunctionID,
    WrappedFunction,
    check_for_mutation,
    log_cudagraph_skip_and_bump_counter,
)

__all__ = [
    "MAX_CAPTURES",
    "MUSAGraphTreeManager",
    "get_manager",
    "mark_step_begin",
    "musagraphify",
    "musagraphify_impl",
    "reset_musagraph_trees",
]

# Captures of one compiled graph kept at once (each with its own memory).
MAX_CAPTURES = 4

_lock = threading.Lock()
_managers: dict[int, "MUSAGraphTreeManager"] = {}
_steps = itertools.count(1)
_step = [0]
_function_ids = itertools.count()


def mark_step_begin() -> None:
    """A new step (iteration) begins: outputs of earlier replays may be overwritten."""
    _step[0] = next(_steps)


def _current_step() -> tuple[int, int]:
    # torch.compiler.cudagraph_mark_step_begin() counts in CUDA's trees; honour it too
    from torch._inductor.cudagraph_trees import MarkStepBox

    return _step[0], MarkStepBox.mark_step_counter


class MUSAGraphTreeManager:
    """One device's MUSA graphs: the compiled functions wrapped for it."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self.functions: weakref.WeakSet[_Function] = weakref.WeakSet()  # alive while compiled code is
        self.backward_runs = 0  # backwards started on this device (CUDA's trees' hook)

    def set_to_running_backward(self) -> None:
        """A backward is running: training forwards' outputs of this step may be overwritten."""
        self.backward_runs += 1

    def shutdown(self) -> None:
        for fn in list(self.functions):
            fn.captures.clear()
            fn.eager_reason = fn.eager_reason or "its graphs were reset"
        self.functions.clear()


def get_manager(device_index: int, create_if_none_exists: bool = True) -> MUSAGraphTreeManager | None:
    """The graph manager of ``musa:device_index`` (created on first use unless told not to)."""
    with _lock:
        manager = _managers.get(device_index)
        if manager is None and create_if_none_exists:
            manager = _managers[device_index] = MUSAGraphTreeManager(device_index)
        return manager


def reset_musagraph_trees() -> None:
    """Drop every capture (``torch._dynamo.reset()`` calls this through the backend)."""
    with _lock:
        managers = list(_managers.values())
        _managers.clear()
    for manager in managers:
        manager.shutdown()


class _Capture:
    """One MUSA graph of a function, with its static inputs and outputs."""

    def __init__(self, graph, inputs: list, outputs: Any):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        storages = {}
        for t in _tensors(outputs):
            storages.setdefault(_storage_ptr(t), t.untyped_storage())
        self.output_ptrs = set(storages)
        self.storages = list(storages.values())
        # references to the output memory held by the capture itself; more: handed-out
        # outputs are alive
        self.own_refs = [torch._C._storage_Use_Count(st._cdata) for st in self.storages]
        self.step: tuple | None = None  # the step of the last replay

    def outputs_alive(self) -> bool:
        return any(torch._C._storage_Use_Count(st._cdata) > n
                   for st, n in zip(self.storages, self.own_refs))


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Function:
    """A compiled function as its graphs run it: warm-up, capture, replay."""

    def __init__(self, manager: MUSAGraphTreeManager, model: Callable, static_input_idxs: Sequence[int],
                 *, is_backward: bool, is_inference: bool, placeholders: Sequence,
                 mutated_input_idxs: Sequence[int], constants: tuple):
        self.manager = manager
        self.model = model
        self.static = frozenset(static_input_idxs)
        self.is_backward, self.is_inference = is_backward, is_inference
        self.wrapped = WrappedFunction(model, tuple(static_input_idxs), FunctionID(next(_function_ids)),
                                       tuple(constants), tuple(placeholders), tuple(mutated_input_idxs))
        self.warmed_up = False
        self.eager_reason: str | None = None  # set: never graphed (CUDA's skip message)
        self.captures: dict[tuple, list[_Capture]] = {}
        self.warned_full = False

    # -- what CUDA's trees check before recording
    def _graph_managed(self, t: torch.Tensor) -> bool:
        ptr = _storage_ptr(t)
        return any(ptr in c.output_ptrs for fn in self.manager.functions
                   for caps in fn.captures.values() for c in caps)

    def _check_mutation(self, inputs: list) -> None:
        reason = check_for_mutation(self.wrapped, inputs, self._graph_managed)
        if reason is not None:
            self.eager_reason = reason
            log_cudagraph_skip_and_bump_counter(reason)

    # -- the call
    def __call__(self, inputs: list) -> Any:
        if self.is_backward:
            self.manager.set_to_running_backward()
        if self.eager_reason is not None:
            return self.model(inputs)
        if not self.warmed_up:
            self._check_mutation(inputs)
            self.warmed_up = True
            return self.model(inputs)
        # one set of captures per sizes (static inputs are matched by address below)
        key = tuple(x if isinstance(x, int) else (x.shape, x.stride())
                    for i, x in enumerate(inputs)
                    if isinstance(x, int) or (isinstance(x, torch.Tensor) and i not in self.static))
        captures = self.captures.setdefault(key, [])
        for capture in captures:
            if self._is_free(capture) and self._static_inputs_match(capture, inputs):
                return self._replay(capture, inputs)
        if len(captures) >= MAX_CAPTURES:
            if not self.warned_full:
                self.warned_full = True
                warnings.warn(
                    f"musa graphs: the outputs of {MAX_CAPTURES} captures of one compiled graph "
                    "are all still referenced (kept by the caller or saved for a backward), so "
                    "it runs eagerly; call torch.compiler.cudagraph_mark_step_begin() before "
                    "each step if earlier steps' outputs may be overwritten.", stacklevel=2)
            return self.model(inputs)
        capture = self._capture(inputs)
        captures.append(capture)
        return self._replay(capture, inputs)

    def _step(self) -> tuple:
        step = _current_step()
        if self.is_backward or self.is_inference:
            return step
        return (*step, self.manager.backward_runs)

    def _is_free(self, capture: _Capture) -> bool:
        return capture.step != self._step() or not capture.outputs_alive()

    def _static_inputs_match(self, capture: _Capture, inputs: list) -> bool:
        return all(capture.inputs[i] is None or not isinstance(inputs[i], torch.Tensor)
                   or inputs[i].data_ptr() == capture.inputs[i].data_ptr()
                   for i in self.static if i < len(inputs))

    def _capture(self, inputs: list) -> _Capture:
        static_inputs = []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and i not in self.static:
                buf = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
                buf.copy_(x)
                static_inputs.append(buf)
            else:
                static_inputs.append(x)
        graph = torch.musa.MUSAGraph()
        with torch.musa.device(self.manager.device_index), torch.musa.graph(graph):
            outputs = self.model(list(static_inputs))  # a boxed model empties its argument list
        return _Capture(graph, [x if isinstance(x, torch.Tensor) else None for x in static_inputs],
                        outputs)

    def _replay(self, capture: _Capture, inputs: list) -> Any:
        for i, x in enumerate(inputs):
            if i in self.static or not isinstance(x, torch.Tensor):
                continue
            dst = capture.inputs[i]
            if dst.data_ptr() != x.data_ptr():
                dst.copy_(x)
        capture.graph.replay()
        inputs.clear()  # boxed calling convention: the callee owns its inputs
        capture.step = self._step()
        # New tensor objects over the static memory each time, as CUDA's trees hand out:
        # autograd gives each call's outputs their own history.
        return [_alias(t) if isinstance(t, torch.Tensor) else t for t in capture.outputs]


def _alias(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), t.storage_offset(), t.size(), t.stride())


def _tensors(outputs: Any) -> list[torch.Tensor]:
    return [t for t in (outputs if isinstance(outputs, (list, tuple)) else [outputs])
            if isinstance(t, torch.Tensor)]


def musagraphify_impl(model: Callable, inputs: list, static_input_idxs: Sequence[int], *,
                      device_index: int, is_backward: bool, is_inference: bool,
                      stack_traces: Sequence | None = None, placeholders: Sequence = (),
                      mutated_input_idxs: Sequence[int] = (), constants: tuple = (),
                      compile_id: Any = None) -> Callable[[list], Any]:
    """Wrap ``model`` (a boxed callable: one list of inputs) so that it runs as MUSA graphs.

    The arguments are those of ``torch._inductor.cudagraph_trees.cudagraphify_impl``."""
    del inputs, stack_traces, compile_id  # recording waits for real inputs
    manager = get_manager(device_index)
    fn = _Function(manager, model, static_input_idxs, is_backward=is_backward,
                   is_inference=is_inference, placeholders=placeholders,
                   mutated_input_idxs=mutated_input_idxs, constants=constants)
    manager.functions.add(fn)

    def run(new_inputs: list) -> Any:
        return fn(new_inputs)

    run._boxed_call = True
    return run


def musagraphify(model: Callable, static_input_idxs: Sequence[int] = (), *, device_index: int,
                 is_backward: bool, is_inference: bool, **kwargs: Any) -> Callable[[list], Any]:
    """``torch._inductor.compile_fx.cudagraphify``'s signature, for musa graphs."""
    return musagraphify_impl(model, [], static_input_idxs, device_index=device_index,
                             is_backward=is_backward, is_inference=is_inference, **kwargs)
