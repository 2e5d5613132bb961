"""MUSA graphs: ``torch.musa.MUSAGraph``, ``graph``, ``graph_pool_handle``,
``make_graphed_callables``, ``is_current_stream_capturing`` -- torch.cuda's graph API.

Under the cuda driver musa streams are CUDA streams and musa memory is CUDA's
caching allocator's, so a MUSA graph *is* a CUDA graph (``torch.cuda.CUDAGraph``
captures on the current stream, which is the current musa stream).

Under the host driver kernels run on the CPU as they are issued, so capture
records instead: a dispatch mode below autograd sees each op issued on musa
with its argument tensors (the static memory), runs it once (for shapes and
aliasing), and hands it to the runtime's replay list (``_C._GraphExec``). Replay
calls the ops again, without Python, on the same tensors and writes results
into the tensors captured then, so updating static inputs in place and
replaying updates static outputs in place, as on CUDA. To keep CUDA's
"capture runs nothing" observable, musa memory that existed before capture and
that captured ops wrote is put back at capture end, and the default generator of
the capturing device is restored (replays draw fresh random numbers from it, so a
replay after ``manual_seed(s)`` draws what eager code would). Memory allocated
during capture belongs to the graph's pool and lives as long as a graph uses it.
What capture forbids raises CUDA's "operation not permitted when stream is
capturing" and invalidates the capture; ``graph`` then ends it cleanly.
"""
from __future__ import annotations

import gc
import itertools
import sys
import threading
import warnings
import weakref
from typing import Any, Callable

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa.core import _lazy
from torch_musa.core.memory import empty_cache
from torch_musa.core.device import synchronize
from torch_musa.core.streams import Stream, current_stream, default_stream
from torch_musa.core.streams import stream as _stream_ctx

__all__ = [
    "MUSAGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
    "run_host_callable",
    "update_musa_graph_with_profile",
]

# graph_pool_handle()'s type (torch.cuda._POOL_HANDLE): a pool id, (0, n) or (n, 0).
_POOL_HANDLE = torch.cuda._POOL_HANDLE
_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}
_pools: "weakref.WeakValueDictionary[tuple[int, int], _Pool]" = weakref.WeakValueDictionary()
_pools_lock = threading.Lock()


def update_musa_graph_with_profile() -> None:
    """The real torch_musa's hook for using graphs under torch.profiler: there the musa
    runtime only reports a graph's kernels to the profiler for graphs instantiated while
    it runs, so its patched ``torch.profiler`` calls this when a trace starts, to
    re-instantiate every live graph. Here nothing needs re-instantiating, and this does
    nothing: on the host driver a replay calls each captured op through the dispatcher,
    so with ``ProfilerActivity.MUSA`` every replayed kernel is recorded as an eager one is
    (under the op that launched it, with device time); under the cuda driver graphs are
    CUDA graphs, whose kernels CUPTI records on replay (``ProfilerActivity.CUDA``).
    Code written for the real torch_musa may keep calling it."""


def _cuda_default_generator(device: int) -> torch.Generator:
    """CUDA's own default generator of ``device``: the one CUDA's capture puts in capture
    mode (musa's wraps it, and the wrapper cannot take graphsafe_set_state). Under
    cuda_compat torch.cuda's tuple is musa's: musa's generator is all there is to name."""
    gens = torch.cuda.default_generators
    g = gens[device] if device < len(gens) else None
    return g if isinstance(g, torch.Generator) and g.device.type == "cuda" else _C._default_generator(device)


class _Pool:
    """A graph memory pool id shared by graphs; where the allocator has no pools (a pluggable
    allocator), it also owns the tensors the captures allocated, alive while a graph uses it."""

    def __init__(self, pool_id: tuple[int, int]):
        self.id = pool_id
        self.tensors: list[torch.Tensor] = []


def _pool(pool_id: tuple[int, int]) -> _Pool:
    with _pools_lock:
        p = _pools.get(pool_id)
        if p is None:
            p = _pools[pool_id] = _Pool(pool_id)
        return p


# Ops whose result the host reads (CUDA synchronises for them, which capture forbids).
_HOST_READS = {
    "_local_scalar_dense": ".item() (_local_scalar_dense, a read of device data by the host)",
    "equal": "torch.equal (its bool result is read by the host)",
    "is_nonzero": "a tensor's truth value (read by the host)",
    "nonzero": "nonzero (its output size depends on the data)",
    "masked_select": "masked_select (its output size depends on the data)",
    "_unique": "unique (its output size depends on the data)",
    "_unique2": "unique (its output size depends on the data)",
    "unique_dim": "unique (its output size depends on the data)",
    "unique_consecutive": "unique_consecutive (its output size depends on the data)",
    "unique_dim_consecutive": "unique_consecutive (its output size depends on the data)",
}
_NO_REPLAY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def _is_musa(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "musa"


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


_OUT_VARIANTS: dict[Any, Any] = {}


def _out_variant(func):
    """The ``.out`` overload taking ``func``'s arguments plus one out tensor per result."""
    if func in _OUT_VARIANTS:
        return _OUT_VARIANTS[func]
    found = None
    schema = func._schema
    sig = [(a.name, str(a.type)) for a in schema.arguments]
    if all(str(r.type) == "Tensor" for r in schema.returns):
        packet = func.overloadpacket
        for name in packet.overloads():
            cand = getattr(packet, name)._schema
            outs = [a.name for a in cand.arguments if a.is_out]
            rest = [(a.name, str(a.type)) for a in cand.arguments if not a.is_out]
            if outs and len(outs) == len(schema.returns) and rest == sig:
                found = (getattr(packet, name), outs)
                break
    _OUT_VARIANTS[func] = found
    return found


def _writes_cpu(func, args, kwargs) -> bool:
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            val = args[i] if i < len(args) else kwargs.get(a.name)
            if any(t.device.type == "cpu" for t in _tensors(val)):
                return True
    return False


class _HostCall:
    """A host function over musa memory that a capture recorded; replay calls it again."""

    __slots__ = ("fn", "args", "name", "__weakref__")

    def __init__(self, fn: Callable, args: tuple, name: str):
        self.fn, self.args, self.name = fn, args, name


# Recorded host calls by key, alive while a graph (or a capture) holds them.
_host_calls: "weakref.WeakValueDictionary[int, _HostCall]" = weakref.WeakValueDictionary()
_host_call_keys = itertools.count(1)
_captures_in_progress = 0  # host driver: captures begun and not ended, in any thread
_host_call_op = None


def _replay_host_call(key: int, tensors: list[torch.Tensor]) -> None:
    call = _host_calls.get(key)
    if call is None:
        raise RuntimeError("MUSA graph replay: a recorded host call is gone (its graph was reset)")
    if torch.autograd.profiler._is_profiler_enabled:  # its span is musa device time there
        with _C._KernelSpan(call.name):
            call.fn(*call.args)
        return
    call.fn(*call.args)


def _host_call_operator():
    """``musa::_replay_host_call``: the dispatcher op that carries a host call into the replay
    list (the runtime replays dispatcher ops); its tensors are the memory the call touches."""
    global _host_call_op
    if _host_call_op is None:
        lib = torch.library.Library("musa", "FRAGMENT")  # noqa: TOR901
        lib.define("_replay_host_call(int key, Tensor(a!)[] tensors) -> ()")
        lib.impl("_replay_host_call", _replay_host_call, "CompositeExplicitAutograd")
        _host_call_op = (lib, torch.ops.musa._replay_host_call.default)
    return _host_call_op[1]


def run_host_callable(fn: Callable, *args: Any, name: str | None = None) -> Any:
    """Call ``fn(*args)``, host code over musa tensors' memory (Inductor's C++ kernels under
    the host driver, which the dispatcher never sees); while a MUSA graph captures on this
    thread, the call is recorded too, so that replay calls it again over the same tensors
    (``name``: its kernel's name in torch.profiler's record of a replay).
    Outside capture this is ``fn(*args)``."""
    if not _captures_in_progress:
        return fn(*args)
    tensors = [a for a in args if _is_musa(a)]
    if not tensors:
        return fn(*args)
    call = _HostCall(fn, args, name or getattr(fn, "__name__", "host_call"))
    key = next(_host_call_keys)
    _host_calls[key] = call
    _host_call_operator()(key, tensors)  # a capturing thread's recorder keeps ``call``
    return None


class _Recorder(TorchDispatchMode):
    """Runs and records every op issued on musa during one capture."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps modes' __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports dynamo (seconds); only _CompileSafeRecorder, used once dynamo is loaded, needs it.
        return False

    def __init__(self, device: int, stream_id: int, pool: _Pool, weak: bool):
        super().__init__()
        self.device, self.stream_id, self.pool = device, stream_id, pool
        # weak: the allocator routes this capture to the pool, which keeps the memory while
        # a graph uses it; the replay list then refers to it without owning it (as CUDA's
        # graphs refer to addresses), so memory dropped during capture is reused in the pool.
        self.weak = weak
        self.exec = _C._GraphExec()
        self.fresh: set[int] = set()  # storages allocated during this capture
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # storage -> (bytes, copy)
        self.ops: list[str] = []
        self.host_calls: list[_HostCall] = []  # replay calls these (the list only keys them)
        self.error: str | None = None
        self.warned_cpu = False

    def _forbid(self, what: str) -> None:
        msg = (f"musa error: operation not permitted when stream is capturing: {what} while "
               f"stream {self.stream_id} of musa:{self.device} captures a MUSA graph. "
               "Synchronising, .item(), copies to the CPU and blocking waits on captured work "
               "are not allowed during capture; do them before capture begins or after it ends.")
        if self.error is None:
            self.error = msg
            _C._capture_invalidate(self.device, self.stream_id, msg)
        raise RuntimeError(msg)

    def _check(self, func, args, kwargs) -> None:
        name = func.overloadpacket.__name__
        if name in _HOST_READS:
            self._forbid(_HOST_READS[name])
        if name in ("_to_copy", "to") and kwargs.get("device") is not None and \
                torch.device(kwargs["device"]).type == "cpu":
            self._forbid("a copy to the CPU")
        if name == "copy_" and not _is_musa(args[0]):
            self._forbid("a copy to the CPU")
        if name in ("_copy_from", "_copy_from_and_resize") and not _is_musa(args[1]):
            self._forbid("a copy to the CPU")
        if name in ("index", "index_put_", "index_put") and any(
                t.dtype in (torch.bool, torch.uint8) for t in _tensors(args[1])):
            self._forbid(f"{name} with a boolean mask (its work depends on the data)")

    def _save_written(self, func, args, kwargs) -> None:
        """Keep the bytes of pre-capture memory that this op writes (put back at capture end)."""
        schema = func._schema
        for i, a in enumerate(schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            val = args[i] if i < len(args) else kwargs.get(a.name)
            for t in _tensors(val):
                if not _is_musa(t):
                    continue
                key = _storage_key(t)
                if key == 0 or key in self.fresh or key in self.saved:
                    continue
                raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
                self.saved[key] = (raw, raw.clone())

    def restore(self) -> None:
        for raw, copy in self.saved.values():
            raw.copy_(copy)
        self.saved.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_musa = any(_is_musa(t) for t in inputs)
        if on_musa:
            self._check(func, args, kwargs)
            self._save_written(func, args, kwargs)
        elif not self.warned_cpu and _writes_cpu(func, args, kwargs):
            self.warned_cpu = True
            warnings.warn(f"{func} wrote a CPU tensor during MUSA graph capture; replay repeats "
                          "only musa work, as CUDA graphs do (an optimizer keeping its step count "
                          "on the CPU needs capturable=True).", stacklevel=2)
        if _host_call_op is not None and func is _host_call_op[1]:
            self.host_calls.append(_host_calls[args[0]])
        out = func(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        if on_musa or any(_is_musa(t) for o in outs for t in _tensors(o)):
            self._record(func, args, kwargs, inputs, outs)
        return out

    def _record(self, func, args, kwargs, inputs, outs) -> None:
        in_keys = {_storage_key(t) for t in inputs if _is_musa(t)}
        copy_to = []
        for i, o in enumerate(outs):
            items = [(-1, o)] if isinstance(o, torch.Tensor) else \
                list(enumerate(o)) if isinstance(o, (list, tuple)) else []
            for j, t in items:
                if not _is_musa(t):
                    continue
                key = _storage_key(t)
                if key in in_keys:  # a view of an argument, or the argument written
                    continue
                self.fresh.add(key)
                if self.weak:
                    self.exec.weaken(key, t.untyped_storage().nbytes(), t.device.index)
                else:
                    self.pool.tensors.append(t)
                copy_to.append((i, j, t))
        name = func.overloadpacket.__name__
        writes = any(a.alias_info is not None and a.alias_info.is_write
                     for a in func._schema.arguments)
        if name in _NO_REPLAY or (not copy_to and not writes):
            return  # allocation or view only: nothing to redo on replay
        schema = func._schema
        out_op = _out_variant(func) if copy_to and not writes else None
        if out_op is not None and len(copy_to) == len(out_op[1]) and all(j < 0 for _, j, _ in copy_to):
            # Replay writes straight into the captured outputs (no result to copy).
            kw = dict(kwargs)
            kw.update({n: t for n, (_, _, t) in zip(out_op[1], copy_to)})
            s2 = out_op[0]._schema
            self.exec.add(s2.name, s2.overload_name, tuple(args), kw, [])
        else:
            self.exec.add(schema.name, schema.overload_name, tuple(args), dict(kwargs), copy_to)
        self.ops.append(f"{schema.name}.{schema.overload_name or 'default'}: " + ", ".join(
            f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in inputs))


class _CompileSafeRecorder(_Recorder):
    """The recorder for processes that compile: dynamo does not trace the recording itself."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    __torch_dispatch__ = _Recorder.__torch_dispatch__


class _GraphBase:
    """What both drivers' MUSA graphs share (torch.cuda.CUDAGraph's API)."""

    def __init__(self, keep_graph: bool = False):
        self._generators: list[torch.Generator] = []
        self._debug = False

    @staticmethod
    def _check_mode(capture_error_mode: str) -> None:
        if capture_error_mode not in _MODES:
            raise ValueError(f"capture_error_mode must be one of {sorted(_MODES)}, "
                             f"got {capture_error_mode!r}")

    def __del__(self):
        try:
            if getattr(self, "_recorder", None) is None:
                self.reset()
        except Exception:  # never raise from the garbage collector
            pass


class _HostGraph(_GraphBase):
    """A captured graph of musa work, replayed with ``replay()`` (torch.cuda.CUDAGraph's API).

    The host driver's: capture records each op into the runtime's replay list."""

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)
        self._exec = None
        self._host_calls: list[_HostCall] = []
        self._recorder: _Recorder | None = None
        self._pool: _Pool | None = None
        self._pool_id: tuple[int, int] | None = None
        self._stream: tuple[int, int] | None = None
        self._rng: list[torch.Tensor] = []
        self._ops: list[str] = []
        self._routed = False  # the allocator routes (or routed) this capture to the pool

    @staticmethod
    def _is_current_stream_capturing() -> bool:
        if not _lazy.is_initialized():
            return False
        s = current_stream()
        return _C._stream_is_capturing(s.device_index, s.stream_id)

    @staticmethod
    def _new_pool_id() -> tuple[int, int]:
        return tuple(_C._mempool_new_id(True))

    def capture_begin(self, pool: tuple[int, int] | None = None,
                      capture_error_mode: str = "global") -> None:
        """Begin capturing musa work on the current stream (``graph`` calls this for you)."""
        self._check_mode(capture_error_mode)
        if self._exec is not None or self._recorder is not None:
            raise RuntimeError("This MUSAGraph instance already owns a captured graph. To "
                               "capture a new graph, call reset() or create a new instance.")
        _lazy._lazy_init()
        s = current_stream()
        _C._capture_begin(s.device_index, s.stream_id, _MODES[capture_error_mode])
        self._stream = (s.device_index, s.stream_id)
        self._pool_id = tuple(pool) if pool is not None else tuple(_C._mempool_new_id(False))
        self._pool = _pool(self._pool_id)
        # The caching allocator serves the capturing stream from the pool (CUDA's private
        # pool), which keeps that memory while a graph uses it.
        try:
            _C._musa_beginAllocateToPool(s.device_index, self._pool_id, s.stream_id)
            self._routed = True
        except RuntimeError:  # a pluggable allocator without pools: the graph owns the tensors
            self._routed = False
        gens = [_C._default_generator(s.device_index)] + self._generators
        self._rng = [g.get_state() for g in gens]
        recorder = _CompileSafeRecorder if "torch._dynamo" in sys.modules else _Recorder
        self._recorder = recorder(s.device_index, s.stream_id, self._pool, weak=self._routed)
        self._recorder.__enter__()
        global _captures_in_progress
        _captures_in_progress += 1

    def _finish(self) -> _Recorder:
        global _captures_in_progress
        rec, self._recorder = self._recorder, None
        _captures_in_progress -= 1
        try:
            rec.__exit__(None, None, None)
        finally:
            err = _C._capture_end(*self._stream)
            if self._routed:
                _C._musa_endAllocateToPool(self._stream[0], self._pool_id)
            rec.restore()
            gens = [_C._default_generator(self._stream[0])] + self._generators
            for g, state in zip(gens, self._rng):
                g.set_state(state)
        if err and rec.error is None:
            rec.error = err
        return rec

    def capture_end(self) -> None:
        """End capture; afterwards ``replay()`` re-runs the captured work."""
        if self._recorder is None:
            raise RuntimeError("capture_end() without capture_begin()")
        s = current_stream()
        if (s.device_index, s.stream_id) != self._stream:
            raise RuntimeError("Capture must end on the same stream it began on "
                               f"(musa:{self._stream[0]} stream {self._stream[1]}, now "
                               f"musa:{s.device_index} stream {s.stream_id}).")
        rec = self._finish()
        if rec.error is not None:
            self.reset()
            raise RuntimeError("MUSA graph capture was invalidated by an operation that "
                               f"capture does not permit; the graph is empty. ({rec.error})")
        self._exec, self._ops = rec.exec, rec.ops if self._debug else []
        self._host_calls = rec.host_calls

    def _abort(self) -> None:
        """End a capture that raised: the stream stops capturing and the graph stays empty."""
        if self._recorder is not None:
            self._finish()
        self.reset()

    def replay(self) -> None:
        """Re-run the captured work over the captured memory."""
        if self._exec is None:
            raise RuntimeError("Called MUSAGraph.replay() without a preceding successful capture.")
        self._exec.replay()

    def reset(self) -> None:
        """Drop the captured work (its pool's memory is freed once no graph uses it)."""
        if self._recorder is not None:
            raise RuntimeError("reset() during capture; end the capture first")
        self._exec, self._pool, self._ops, self._host_calls = None, None, [], []
        if self._routed:
            self._routed = False
            _C._musa_releasePool(self._stream[0], self._pool_id)

    def pool(self) -> tuple[int, int]:
        """The id of this graph's memory pool, to pass as ``pool=`` to another capture."""
        if self._pool_id is None:
            raise RuntimeError("pool() before capture_begin(): the graph has no pool yet")
        return self._pool_id

    def register_generator_state(self, generator: torch.Generator) -> None:
        """Let capture leave ``generator`` as it found it too (the default one always is)."""
        self._generators.append(generator)

    def enable_debug_mode(self) -> None:
        """Keep a description of the captured ops for ``debug_dump``."""
        self._debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured ops as a Graphviz DOT chain (after ``enable_debug_mode``)."""
        if not self._debug:
            warnings.warn("MUSA Graphs debug not enabled, set with [graph].enable_debug_mode()")
            return
        lines = ["digraph musa_graph {", "  node [shape=box];"]
        for i, op in enumerate(self._ops):
            label = op.replace('"', "'")
            lines.append(f'  n{i} [label="{i}: {label}"];')
            if i:
                lines.append(f"  n{i - 1} -> n{i};")
        lines.append("}")
        with open(debug_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


class _CudaGraph(_GraphBase):
    """A captured graph of musa work, replayed with ``replay()`` (torch.cuda.CUDAGraph's API).

    The cuda driver's: a CUDA graph (musa streams are CUDA streams, musa memory CUDA's)."""

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)
        # torch.cuda.graphs' class: TORCH_MUSA_CUDA_COMPAT=1 makes torch.cuda.CUDAGraph this one.
        self._cuda = torch.cuda.graphs.CUDAGraph(keep_graph)
        self._cuda_gens: list[torch.Generator] = []  # in capture mode while a CUDA capture runs
        self._cuda_pool: tuple | None = None  # (stream, device, *pool id) while a capture runs

    @staticmethod
    def _is_current_stream_capturing() -> bool:
        return torch._C._cuda_isCurrentStreamCapturing()  # not torch.cuda's name: cuda_compat binds it here

    @staticmethod
    def _new_pool_id() -> tuple[int, int]:
        return torch._C._graph_pool_handle()

    def capture_begin(self, pool: tuple[int, int] | None = None,
                      capture_error_mode: str = "global") -> None:
        """Begin capturing musa work on the current stream (``graph`` calls this for you)."""
        self._check_mode(capture_error_mode)
        s = current_stream()
        if s == default_stream(s.device_index):
            # Checked here: CUDA checks after putting the generators in capture mode, and
            # its refusal left every later draw of the process raising.
            raise RuntimeError("MUSA graphs must be captured on a non-default stream. "
                               "(However, after capture, it's ok to replay them on the "
                               "default stream.)")
        # The generators CUDA's capture puts in capture mode: the current device's
        # default one (musa's default generator is CUDA's there) and those registered.
        self._cuda_gens = ([_cuda_default_generator(torch._C._cuda_getDevice())]
                           + self._generators)
        # The pool named here (one of its own unless shared) so that a capture CUDA fails
        # to end can still give it back: CUDA's capture_end raises before it ends the pool
        # and reset() then skips it, which kept its memory, and a per-allocation capture
        # check, for the rest of the process.
        pool = tuple(pool) if pool is not None else tuple(torch._C._graph_pool_handle())
        try:
            self._cuda.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        except BaseException:
            self._release_cuda_generators()
            raise
        self._cuda_pool = (s, torch._C._cuda_getDevice(), *pool)

    def capture_end(self) -> None:
        """End capture; afterwards ``replay()`` re-runs the captured work."""
        try:
            self._cuda.capture_end()
        except RuntimeError:
            self._release_failed_cuda_capture()
            raise
        self._cuda_gens, self._cuda_pool = [], None

    def _abort(self) -> None:
        """End a capture that raised: the stream stops capturing and the graph stays empty."""
        try:
            self._cuda.capture_end()
        except RuntimeError:
            try:
                self._release_failed_cuda_capture()
            except RuntimeError as e:  # the block's own error is the one to raise
                warnings.warn(f"musa graph capture aborted; its generators or pool were "
                              f"not given back: {e}", RuntimeWarning, stacklevel=3)
        self._cuda_gens, self._cuda_pool = [], None
        self._cuda.reset()

    def _release_failed_cuda_capture(self) -> None:
        """A CUDA capture that failed to end: its generators and its pool back to eager use
        (each tried, the first failure raised after)."""
        errors = []
        try:
            self._release_cuda_generators()
        except RuntimeError as e:
            errors.append(e)
        run, self._cuda_pool = self._cuda_pool, None
        if run is not None:
            stream, device, pool = run[0], run[1], run[2:]
            with _stream_ctx(stream):  # ended (even failed) unless ended on another stream
                capturing = torch._C._cuda_isCurrentStreamCapturing()
            if not capturing:
                try:
                    torch._C._cuda_endAllocateToPool(device, pool)
                    torch._C._cuda_releasePool(device, pool)
                except RuntimeError as e:
                    errors.append(e)
        if errors:
            raise errors[0]

    def _release_cuda_generators(self) -> None:
        """After a capture CUDA invalidated: give the generators back to eager use.

        CUDA's capture_end raises before it takes the generators out of capture mode,
        so every later eager draw on them raised "Offset increment outside graph capture
        encountered unexpectedly" for the rest of the process. Each generator gets a
        fresh state holding its seed and offset (a capture does not advance the eager
        offset), which is what a completed capture would have left."""
        gens, self._cuda_gens = self._cuda_gens, []
        errors = []
        for g in gens:
            try:
                fresh = torch.Generator(device=g.device)
                fresh.set_state(g.get_state())
                g.graphsafe_set_state(fresh)
            except RuntimeError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def replay(self) -> None:
        """Re-run the captured work over the captured memory."""
        self._cuda.replay()

    def reset(self) -> None:
        """Drop the captured work (its pool's memory is freed once no graph uses it)."""
        self._cuda.reset()

    def pool(self) -> tuple[int, int]:
        """The id of this graph's memory pool, to pass as ``pool=`` to another capture."""
        return self._cuda.pool()

    def register_generator_state(self, generator: torch.Generator) -> None:
        """Let capture leave ``generator`` as it found it too (the default one always is)."""
        self._cuda.register_generator_state(generator)
        self._generators.append(generator)

    def enable_debug_mode(self) -> None:
        """Keep a description of the captured ops for ``debug_dump``."""
        self._cuda.enable_debug_mode()
        self._debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured graph to ``debug_path`` (after ``enable_debug_mode``)."""
        self._cuda.debug_dump(debug_path)


#: torch.musa.MUSAGraph: the driver's graphs.
MUSAGraph = pick(host=_HostGraph, cuda=_CudaGraph)
MUSAGraph.__name__ = MUSAGraph.__qualname__ = "MUSAGraph"


def is_current_stream_capturing() -> bool:
    """Whether the current musa stream is capturing a graph."""
    return MUSAGraph._is_current_stream_capturing()


def graph_pool_handle() -> _POOL_HANDLE:
    """An opaque token naming a graph memory pool, to share one pool between captures."""
    return _POOL_HANDLE(MUSAGraph._new_pool_id())


class graph:
    """Captures the musa work of a ``with`` block into ``musa_graph`` (torch.cuda.graph)."""

    default_capture_stream: Stream | None = None

    def __init__(self, musa_graph: MUSAGraph, pool: tuple[int, int] | None = None,
                 stream: torch.Stream | None = None, capture_error_mode: str = "global"):
        if stream is None and self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = Stream()
        self.pool = pool
        self.capture_stream = stream if stream is not None else self.__class__.default_capture_stream
        self.stream_ctx = _stream_ctx(self.capture_stream)
        self.musa_graph = musa_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        synchronize()
        if torch.compiler.config.force_cudagraph_gc:  # as torch.cuda.graph: costly, opt-in
            gc.collect()
        empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.musa_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self.musa_graph.capture_end()
            else:
                self.musa_graph._abort()
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


def _check_callables(callables, sample_args) -> list[tuple[torch.Tensor, ...]]:
    flat_args = []
    for c, args in zip(callables, sample_args):
        if isinstance(c, torch.nn.Module):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise RuntimeError("Modules must not have hooks registered at the time they are "
                                   "passed to make_graphed_callables (registering hooks "
                                   "afterwards is allowed).")
            if any(b.requires_grad for b in c.buffers()):
                raise RuntimeError("In a module passed to make_graphed_callables only parameters "
                                   "may be trainable; all buffers must have requires_grad=False.")
        flat = tuple(_pytree.arg_tree_leaves(*args))
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("make_graphed_callables: sample_args must contain only Tensors; got "
                            f"{[type(a).__name__ for a in flat if not isinstance(a, torch.Tensor)]}")
        flat_args.append(flat)
    return flat_args


def _graphed_function(fwd: MUSAGraph, bwd: MUSAGraph, n_user: int, inputs, outputs,
                      out_spec, grad_outputs, grad_inputs) -> Callable:
    """The autograd Function that replays ``fwd`` forward and ``bwd`` backward."""

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            for static, given in zip(inputs[:n_user], args[:n_user]):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            fwd.replay()
            return tuple(o.detach() for o in outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, given in zip(grad_outputs, grads):
                if static is not None and given is not None and static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            bwd.replay()
            return tuple(g.detach() if g is not None else None for g in grad_inputs)

    def run(*user_args):
        flat = tuple(_pytree.arg_tree_leaves(*user_args))
        if len(flat) != n_user:
            raise TypeError(f"the graphed callable takes the {n_user} tensors of its sample_args, "
                            f"got {len(flat)}")
        out = Graphed.apply(*(flat + tuple(inputs[n_user:])))
        return _pytree.tree_unflatten(list(out), out_spec)

    return run


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: tuple[int, int] | None = None):
    """Graphed versions of callables (functions or modules): forward and backward each replay
    a MUSA graph inside one autograd node (torch.cuda.make_graphed_callables)."""
    if torch.is_autocast_enabled("musa") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. "
                           "Please set `cache_enabled=False`.")
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    flat_args = _check_callables(callables, sample_args)
    params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else () for c in callables]
    surfaces = [flat_args[i] + params[i] for i in range(len(callables))]
    mempool = graph_pool_handle() if pool is None else pool

    def grad_step(c, args, surface, outputs):
        outs = tuple(o for o in _pytree.tree_leaves(outputs)
                     if isinstance(o, torch.Tensor) and o.requires_grad)
        ins = tuple(i for i in surface if i.requires_grad)
        if not outs or not ins:
            return ()
        return torch.autograd.grad(outs, ins, grad_outputs=tuple(torch.empty_like(o) for o in outs),
                                   only_inputs=True, allow_unused=allow_unused_input)

    # Warm up on a side stream (lazy initialisations happen outside capture).
    synchronize()
    with _stream_ctx(Stream()):
        for c, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                grads = grad_step(c, args, surface, c(*args))
                del grads
    synchronize()

    fwd_graphs = [MUSAGraph() for _ in callables]
    bwd_graphs = [MUSAGraph() for _ in callables]
    static_outputs, out_specs = [], []
    for c, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=mempool):
            outputs = c(*args)
        flat_out, spec = _pytree.tree_flatten(outputs)
        static_outputs.append(tuple(flat_out))
        out_specs.append(spec)

    static_grad_outputs, static_grad_inputs = [None] * len(callables), [None] * len(callables)
    for i in reversed(range(len(callables))):
        outs, surface = static_outputs[i], surfaces[i]
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outs)
        with graph(bwd_graphs[i], pool=mempool):
            needed = tuple(o for o in outs if o.requires_grad)
            ins = tuple(t for t in surface if t.requires_grad)
            grads = torch.autograd.grad(needed, ins,
                                        grad_outputs=tuple(g for g in grad_outs if g is not None),
                                        only_inputs=True, allow_unused=allow_unused_input) \
                if needed and ins else ()
        it = iter(grads)
        static_grad_inputs[i] = tuple(next(it) if t.requires_grad else None for t in surface)
        static_grad_outputs[i] = grad_outs

    results = []
    for i, c in enumerate(callables):
        fn = _graphed_function(fwd_graphs[i], bwd_graphs[i], len(flat_args[i]), surfaces[i],
                               static_outputs[i], out_specs[i], static_grad_outputs[i],
                               static_grad_inputs[i])
        if isinstance(c, torch.nn.Module):
            def forward(*args, _fn=fn, _module=c, _training=c.training, _eager=c.forward):
                # The graph holds the training state it was captured in; others run eagerly.
                return _fn(*args) if _module.training == _training else _eager(*args)

            c.forward = forward
            results.append(c)
        else:
            results.append(fn)
    return results[0] if single else tuple(results)
