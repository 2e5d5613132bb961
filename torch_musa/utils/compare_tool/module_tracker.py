"""Module context for logged ops: attribute paths, forward/backward, call sites.

``open_module_tracker(model)`` hooks every submodule of ``model``. While a
forward runs, the innermost module's attribute path (``model.layers.3.attn.q_proj``)
is the context of each op; in backward the context comes from gradient hooks on
the module's output (entered when its gradient arrives) and input (left when the
gradient w.r.t. the input is computed). Nothing grows with the number of
steps: hook handles are not kept (they die with the autograd graph).
"""
from __future__ import annotations

import weakref

import torch

from ._common import format_frame, user_frame


class _State:
    def __init__(self) -> None:
        self.fwd: list[str] = []
        self.bwd: list[str] = []
        self.call_site: dict[str, str] = {}      # path -> "file:line in fn" of its last forward call
        self.params: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()
        self.param_names: dict[int, str] = {}
        self.trackers = 0
        self._bw_callback = False

    # ----------------------------------------------------------------- queries
    def current(self, backward: bool) -> str:
        if backward:
            return self.bwd[-1] if self.bwd else ""
        return self.fwd[-1] if self.fwd else ""

    def param_name(self, t: torch.Tensor) -> str | None:
        key = id(t)
        p = self.params.get(key)
        if p is not None and p is t:
            return self.param_names.get(key)
        return None

    # ----------------------------------------------------------------- backward stack
    def _reset_bw(self) -> None:
        self.bwd.clear()
        self._bw_callback = False

    def _push_bw(self, path: str) -> None:
        if not self._bw_callback:
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._reset_bw)
                self._bw_callback = True
            except RuntimeError:
                pass
        # leave modules that are not ancestors (their inputs needed no gradient)
        while self.bwd and not (path == self.bwd[-1] or path.startswith(self.bwd[-1] + ".")):
            self.bwd.pop()
        self.bwd.append(path)

    def _pop_bw(self, path: str) -> None:
        if path in self.bwd:
            while self.bwd:
                if self.bwd.pop() == path:
                    break


STATE = _State()


def current_module(backward: bool | None = None) -> tuple[str, bool]:
    """(module path or '', is_backward) for the op being dispatched now."""
    if backward is None:
        backward = torch._C._current_graph_task_id() != -1
    return STATE.current(backward), backward


def autograd_node_name() -> str:
    node = torch._C._current_autograd_node()
    return node.name() if node is not None else ""


class ModuleTrackerHandle:
    """Returned by open_module_tracker; ``.remove()`` takes the hooks off again."""

    def __init__(self, handles, root_name):
        self._handles = handles
        self.root_name = root_name

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        STATE.trackers = max(0, STATE.trackers - 1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def open_module_tracker(module: torch.nn.Module, root_name: str = "model") -> ModuleTrackerHandle:
    """Give every op logged by CompareWithCPU / NanInfTracker its module context.

    Ops are tagged with the attribute path of the innermost module running them
    (``model.layers.3.attn.q_proj``), ``forward``/``backward``, and the source
    line of the call.
    """
    handles = []
    for name, mod in module.named_modules():
        path = f"{root_name}.{name}" if name else root_name
        handles.append(mod.register_forward_pre_hook(_make_pre(path, is_root=not name)))
        handles.append(mod.register_forward_hook(_make_post(path)))
    for name, p in module.named_parameters():
        STATE.params[id(p)] = p
        STATE.param_names[id(p)] = f"{root_name}.{name}"
    STATE.trackers += 1
    return ModuleTrackerHandle(handles, root_name)


def _first_grad_tensor(obj):
    if isinstance(obj, torch.Tensor):
        return obj if obj.requires_grad else None
    if isinstance(obj, (list, tuple)):
        for x in obj:
            t = _first_grad_tensor(x)
            if t is not None:
                return t
    elif isinstance(obj, dict):
        return _first_grad_tensor(list(obj.values()))
    return None


def _make_pre(path: str, is_root: bool = False):
    st = STATE

    def leave_bw(grad):
        st._pop_bw(path)

    def pre(mod, args):
        if is_root and path in st.fwd:      # a forward that raised left its entries behind
            st.fwd.clear()
        if not st.fwd and torch._C._current_graph_task_id() == -1:
            st.bwd.clear()
        st.fwd.append(path)
        st.call_site[path] = format_frame(user_frame(2))
        if torch.is_grad_enabled():
            t = _first_grad_tensor(args)
            if t is not None:           # its gradient is ready: the module's backward is done
                t.register_hook(leave_bw)
    return pre


def _make_post(path: str):
    st = STATE

    def enter_bw(grad):
        st._push_bw(path)

    def post(mod, args, out):
        if path in st.fwd:
            while st.fwd and st.fwd.pop() != path:
                pass
        if torch.is_grad_enabled():
            t = _first_grad_tensor(out)
            if t is not None:           # the gradient of its output arrives: backward enters
                t.register_hook(enter_bw)
    return post
