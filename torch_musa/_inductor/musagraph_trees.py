"""MUSA graphs for ``torch.compile(mode="reduce-overhead")`` and the ``musagraphs`` backend.

The real torch_musa's module of this name plays, for musa, the role
``torch._inductor.cudagraph_trees`` plays for CUDA: each compiled graph is run once
eagerly (warm-up), then captured as a ``torch.musa.MUSAGraph`` over static inputs and
replayed on later calls, new inputs copied into the static ones. Parameters, buffers
and other static inputs are captured in place; a non-static input that the graph
mutates makes the function run without graphs, with CUDA's skip message.

What is kept from CUDA's trees is their contract, not their machinery: outputs are the
graph's static memory, overwritten by the next replay of the same graph, except that
outputs still needed are never overwritten: a training forward's outputs stay
reserved until a backward runs on the device or a new step begins
(``mark_step_begin``, or ``torch.compiler.cudagraph_mark_step_begin``), and a forward
called again meanwhile replays another capture of the same graph (up to
``MAX_CAPTURES``, then it runs eagerly and warns once). Each capture has its own
memory pool.
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
    """One device's MUSA graphs: the functions wrapped, and which captures' outputs are
    still reserved for a pending backward."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self.functions: weakref.WeakSet[_Function] = weakref.WeakSet()  # alive while compiled code is
        self.backward_runs = 0  # bumped whenever a backward starts on this device

    def set_to_running_backward(self) -> None:
        """A backward is running: forward outputs saved for it are free after it."""
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

    def __init__(self, graph, inputs: list, outputs: Any, output_ptrs: set[int]):
        self.graph, self.inputs, self.outputs, self.output_ptrs = graph, inputs, outputs, output_ptrs
        self.reserved_until: tuple | None = None  # (backward_runs, step) when its outputs free up


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
        key = tuple(x if isinstance(x, int) else
                    (tuple(x.shape), tuple(x.stride()), x.dtype) if isinstance(x, torch.Tensor) else None
                    for x in inputs)
        captures = self.captures.setdefault(key, [])
        for capture in captures:
            if self._is_free(capture) and self._static_inputs_match(capture, inputs):
                return self._replay(capture, inputs)
        if len(captures) >= MAX_CAPTURES:
            if not self.warned_full:
                self.warned_full = True
                warnings.warn(
                    f"musa graphs: {MAX_CAPTURES} captures of one compiled graph all hold outputs "
                    "still reserved for a backward that has not run; running it eagerly. Call "
                    "torch.compiler.cudagraph_mark_step_begin() before each step if those outputs "
                    "are no longer needed.", stacklevel=2)
            return self.model(inputs)
        capture = self._capture(inputs)
        captures.append(capture)
        return self._replay(capture, inputs)

    def _is_free(self, capture: _Capture) -> bool:
        if capture.reserved_until is None:
            return True
        runs, step = capture.reserved_until
        return self.manager.backward_runs != runs or _current_step() != step

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
        ptrs = {_storage_ptr(t) for t in _tensors(outputs)}
        return _Capture(graph, [x if isinstance(x, torch.Tensor) else None for x in static_inputs],
                        outputs, ptrs)

    def _replay(self, capture: _Capture, inputs: list) -> Any:
        for i, x in enumerate(inputs):
            if i in self.static or not isinstance(x, torch.Tensor):
                continue
            dst = capture.inputs[i]
            if dst.data_ptr() != x.data_ptr():
                dst.copy_(x)
        capture.graph.replay()
        inputs.clear()  # boxed calling convention: the callee owns its inputs
        if not (self.is_backward or self.is_inference):
            capture.reserved_until = (self.manager.backward_runs, _current_step())
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
