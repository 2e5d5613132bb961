"""``mccl``: the collective backend for ``musa`` tensors.

On the host driver, device memory is host RAM, so ``mccl`` does not carry a
collective engine of its own: it runs PyTorch's Gloo on zero-copy host aliases
of the musa tensors (``torch_musa._C._kernel_alias``: a CPU tensor over the same
bytes, same sizes/strides/offset). Gloo reads and writes the musa tensors'
memory in place; nothing is staged or copied back.

How it plugs in:

* ``Backend.register_backend("mccl", ..., devices=["musa"])``: the creator
  returns a ``ProcessGroupGloo`` that the ``ProcessGroup`` keeps as its musa
  backend, so ``init_process_group("mccl")``, ``device_id=musa:i`` and
  ``"cpu:gloo,musa:mccl"`` build ordinary C++ process groups (DDP, FSDP2,
  DeviceMesh, functional collectives, subgroups see nothing unusual).
* PyTorch routes every collective through the ``c10d::*`` operators, keyed by
  the tensors' device. The kernels below replace the stock ``PrivateUse1``
  (musa) ones: alias the tensors, call the group's musa backend (Gloo), and
  hand back a ``Work`` whose future yields the musa tensors.
* Synchronous calls (``async_op=False``) wait inside the kernel, so a failure
  is raised there, naming the collective; asynchronous ones report it from
  ``Work.wait()`` / the future, also naming the collective.

Under the cuda driver (``TORCH_MUSA_DRIVER=cuda``) musa memory is GPU memory:
the aliases are CUDA tensors over the same bytes and the engine is NCCL (or
Gloo's CUDA paths when ranks share a GPU, see :func:`engine`). Completion is
then stream-ordered: a synchronous call makes the current stream wait for the
collective, and async futures carry the musa device so their consumers wait
on the collective's events, as with NCCL on cuda tensors.
"""
from __future__ import annotations

import datetime
import functools
import os
import queue
import threading
import warnings

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torch_musa.config import CONFIG
from torch_musa.distributed import _C as _mccl_C  # loading it registers the C++ kernels

__all__ = ["version", "is_available", "engine", "VERSION"]

#: Version of the mccl layer (major, minor, patch); the engine is Gloo or NCCL (see engine()).
VERSION = (1, 1, 0)

_ProcessGroup = _c10d.ProcessGroup
_ProcessGroupGloo = dist.ProcessGroupGloo
_unbox_pg = _ProcessGroup.unbox
_work_from_future = _c10d._create_work_from_future
_MUSA = None  # torch.device("musa"), set at install time
_LIB = None   # the torch.library.Library holding the kernels (kept alive)
#: c10d ops served by the C++ kernels in this process (see torch_musa.distributed.native)
NATIVE_OPS: tuple = ()


def version():
    """Version of mccl as a tuple ``(major, minor, patch)``, like ``torch.cuda.nccl.version()``."""
    return VERSION


def is_available(tensors=None) -> bool:
    """True when mccl can serve ``tensors`` (musa tensors, dense)."""
    if not dist.is_available() or not dist.is_gloo_available():
        return False
    if tensors is None:
        return True
    return all(isinstance(t, torch.Tensor) and t.device.type == "musa" and t.layout == torch.strided
               for t in tensors)


# --------------------------------------------------------------------------- aliases
def _load_alias():
    from torch_musa import _C

    fn = getattr(_C, "_kernel_alias", None)
    if fn is None:
        raise RuntimeError(
            "torch_musa._C._kernel_alias is missing: this build of the torch_musa extension "
            "predates the mccl backend; rebuild torch_musa")
    return fn


_host_alias = None   # the alias the kernels use: _kernel_alias, or _staged_alias under the cuda driver
_kernel_alias = None  # torch_musa._C._kernel_alias: host tensor (host driver) or CUDA tensor (cuda driver)
_TL = threading.local()


def _staged_alias(t):
    """Under the cuda driver: a host copy of ``t`` while a Gloo call is being staged
    (one per tensor and call, written back by :func:`_run_staged`), else the CUDA alias."""
    scope = getattr(_TL, "scope", None)
    if scope is None:
        return _kernel_alias(t)
    hit = scope.get(id(t))
    if hit is None:
        hit = scope[id(t)] = (t, t.cpu())
    return hit[1]


def _run_staged(fn, args, kwargs):
    """Gloo on the cuda driver (ranks sharing a GPU): Gloo's transports read host
    memory, so the call runs on host copies and completes before it returns."""
    scope = _TL.scope = {}
    try:
        res = fn(*args, **kwargs)
        _TL.scope = None
        if not scope:  # nothing staged, or point-to-point calls that took their copies along
            return res
        for w in (res if isinstance(res, (tuple, list)) else [res]):
            if isinstance(w, torch.ScriptObject):
                _c10d.Work.unbox(w).wait()  # done before the host copies are written back
        for t, h in scope.values():
            t.copy_(h)
        return res
    finally:
        _TL.scope = None


def _a(t):
    """Host alias of a musa tensor (zero-copy); other tensors pass through."""
    if t.device.type == "musa":
        return _host_alias(t)
    return t


def _al(ts):
    return [_host_alias(t) if t.device.type == "musa" else t for t in ts]


def _all(tss):
    return [[_host_alias(t) if t.device.type == "musa" else t for t in ts] for ts in tss]


# --------------------------------------------------------------------------- errors
class MCCLError(RuntimeError):
    """A collective on the mccl backend failed (a peer died, timed out or disagreed)."""


def _describe(tensors):
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.append(_describe(t))
        elif isinstance(t, torch.Tensor):
            out.append(f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}")
    return "[" + ", ".join(out) + "]"


def _named_error(name, backend, tensors, exc):
    if isinstance(exc, MCCLError):
        return exc
    msg = str(exc)
    try:
        where = f"rank {backend.rank()} of {backend.size()}"
    except Exception:  # noqa: BLE001
        where = "this rank"
    if tensors and isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    hint = ""
    low = msg.lower()
    if "timed out" in low or "timeout" in low:
        hint = (" (a peer did not join the collective within the process group timeout: it may "
                "have died, be stuck, or be running a different collective)")
    elif "connection closed" in low or "connection reset" in low or "broken pipe" in low:
        hint = " (a peer process exited or closed its connection)"
    elif "preamble" in low or "size mismatch" in low or "mismatch" in low or "nbytes" in low:
        hint = (" (the ranks passed tensors of different shapes or dtypes"
                + ("" if _check_collectives() or "Detected mismatch" in msg else
                   "; set MCCL_CHECK_COLLECTIVES=all for a cross-rank check before each collective") + ")")
    return MCCLError(f"mccl {name} failed on {where}, local tensors {_describe(tensors)}{hint}: {msg}")


def _resolved(name, backend, tensors, value, errors, fut):
    try:
        fut.value()
    except Exception as exc:  # noqa: BLE001
        err = _named_error(name, backend, tensors, exc)
        errors.append(err)
        raise err from exc
    return value


def _settle(out, name, backend, tensors, value, errors, fut):
    try:
        fut.value()
    except Exception as exc:  # noqa: BLE001
        _fail(out, errors, _named_error(name, backend, tensors, exc))
    else:
        out.set_result(value)


def _device_of(*values):
    for v in values:
        for t in ([v] if isinstance(v, torch.Tensor) else v if isinstance(v, (list, tuple)) else []):
            if isinstance(t, torch.Tensor) and t.device.type == "musa":
                return t.device
            if isinstance(t, (list, tuple)):
                d = _device_of(t)
                if d is not None:
                    return d
    return torch.device("musa", torch.musa.current_device())


class _Completer:
    """Completes futures for Gloo works that have none (reduce_scatter, send, recv).

    One thread per outstanding work (threads are reused once idle), so a work
    never waits behind another one, whatever order the ranks complete them in.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = 0
        self._q = queue.SimpleQueue()

    def complete(self, work, name, backend, tensors, value):
        """A held Work that completes (its future yielding ``value``) once ``work`` has,
        waited on here rather than on a thread per call."""
        fut, errors = torch.futures.Future(), []
        self._submit((work, fut, errors, name, backend, tensors, value))
        return _held(_MusaWork(fut, name, errors))

    def _submit(self, item):
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._q.put(item)
        if spawn:
            threading.Thread(target=self._run, name="mccl-completer", daemon=True).start()

    def _run(self):
        while True:
            work, fut, errors, name, backend, tensors, value = self._q.get()
            try:
                work.wait()
            except Exception as exc:  # noqa: BLE001
                _fail(fut, errors, _named_error(name, backend, tensors, exc))
            else:
                fut.set_result(value)
            del work, fut, errors, backend, tensors, value
            with self._lock:
                self._idle += 1


_completer = _Completer()


class _MusaWork(dist.Work):
    """The Work of an asynchronous mccl collective.

    ``wait()`` raises the collective's error (naming it), ``is_completed()``
    polls, ``get_future()`` yields the musa tensors. It is handed out only inside
    a held Work (:func:`_held`): a Python subclass of ``Work`` lives in its Python
    object, and C++ holders of it alone (DDP, the functional collectives'
    registry) would otherwise reach the base ``Work::wait`` once it was collected.
    """

    def __init__(self, fut, name, errors=None):
        super().__init__()
        self._fut = fut
        self._name = name
        self._errors = errors

    def wait(self, timeout=None):  # noqa: ARG002  (Gloo enforces the group's timeout)
        try:
            self._fut.wait()
        except Exception:
            if self._errors:  # the MCCLError itself, not the future's RuntimeError
                raise self._errors[0] from None
            raise
        return True

    def get_future(self):
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        if not self._fut.done():
            raise RuntimeError("mccl work is not completed yet")
        return self.exception() is None

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except Exception as exc:  # noqa: BLE001
            return self._errors[0] if self._errors else exc
        return None

    def result(self):
        return list(_flat_tensors(self._fut.wait()))

    def synchronize(self):
        self.wait()

    def __repr__(self):
        return f"<mccl Work {self._name} completed={self.is_completed()}>"


def _flat_tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat_tensors(v)


def _held(work):
    """``work`` boxed inside a C++ Work that owns it: the Python object lives as long
    as anyone, C++ or Python, holds the Work (csrc/py_work.cpp)."""
    return _mccl_C._hold_work(work).boxed()


def _fail(fut, errors, err):
    """Complete ``fut`` with a real error (seen through C++ as well, unlike
    ``Future.set_exception``) and keep ``err`` for the Work's ``wait()`` to raise."""
    errors.append(err)
    _mccl_C._set_future_error(fut, err)


_DONE_WORK = None  # set by _install_kernels
_CUDA_ALIASES = False  # the aliases are CUDA tensors (cuda driver); set by _install_kernels
# Gloo calls run on host copies (cuda driver; MCCL_STAGE_GLOO=1 forces it on the host driver,
# which is how CI exercises that path); set by _install_kernels
_STAGE_GLOO = False


def _finish(name, backend, work, async_op, value, tensors, has_future=True):
    """Sync: wait here (errors name the collective). Async: a Work whose future yields ``value``."""
    if work is None:  # NCCL's blocking calls run on the current stream and return no Work
        return _DONE_WORK
    scope = getattr(_TL, "scope", None)
    if scope is not None and not has_future:
        # Staged point-to-point (send/recv; reduce_scatter alike): completing it here could
        # deadlock (the peer may wait for this rank's next call), so a completer thread
        # waits for it and writes the received host copies back.
        pairs = [] if name == "send" else list(scope.values())
        scope.clear()  # nothing left for _run_staged to copy back
        return _completer.complete(_CopyBack(work, [t for t, _ in pairs], [h for _, h in pairs]), name, backend,
                                   tensors, value)
    if scope is not None:  # a staged Gloo call completes here
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001
            raise _named_error(name, backend, tensors, exc) from exc
        return _work_from_future(_done_future(value)).boxed()
    if not async_op:
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001
            raise _named_error(name, backend, tensors, exc) from exc
        # The caller only waits on it (already done): one shared, pre-boxed completed Work.
        return _DONE_WORK
    if not has_future:
        return _completer.complete(work, name, backend, tensors, value)
    errors = []
    if _CUDA_ALIASES:
        # Stream-ordered completion: a future on the musa device (its events order the
        # consumers after the collective), set from the backend's CUDA future.
        fut = torch.futures.Future(devices=[_device_of(value, tensors)])
        work.get_future().add_done_callback(
            functools.partial(_settle, fut, name, backend, tensors, value, errors))
    else:
        fut = work.get_future().then(functools.partial(_resolved, name, backend, tensors, value, errors))
    return _held(_MusaWork(fut, name, errors))


_REDUCE_OPS = {int(v): _c10d.ReduceOp(v) for k, v in _c10d.ReduceOp.RedOpType.__members__.items()
               if k != "PREMUL_SUM"}
_PREMUL_SUM = int(_c10d.ReduceOp.RedOpType.PREMUL_SUM)


def _reduce_op(op, name):
    """The pybind ReduceOp for the TorchScript one the dispatcher hands the kernels.

    PREMUL_SUM (``torch.distributed._make_nccl_premul_sum(factor)``) maps to SUM: the
    kernels scale each rank's input by :func:`_premul_factor` first.
    """
    code = op.op()
    if code == _PREMUL_SUM:
        return _REDUCE_OPS[int(_c10d.ReduceOp.RedOpType.SUM)]
    try:
        return _REDUCE_OPS[code]
    except KeyError:
        raise MCCLError(f"mccl {name}: ReduceOp {_c10d.ReduceOp.RedOpType(code).name} is not supported "
                        f"(mccl runs Gloo: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, and PREMUL_SUM "
                        f"as a scaled SUM)") from None


def _premul_factor(op):
    """The factor of a PREMUL_SUM ReduceOp (a float, or a 1-element tensor as a CPU tensor); else None."""
    if op.op() != _PREMUL_SUM:
        return None
    try:
        factor = torch.ops.mccl.premul_factor(op)  # the TorchScript ReduceOp does not expose it
    except (AttributeError, RuntimeError) as exc:
        raise MCCLError("mccl: ReduceOp.PREMUL_SUM needs the mccl C++ ops (csrc/mccl_ops.cpp): build "
                        "torch_musa with them or set MCCL_NATIVE=1") from exc
    if factor.dim() == 0 and factor.dtype == torch.float64 and factor.device.type == "cpu":
        return factor.item()
    return _a(factor) if factor.device.type == "musa" else factor


def _scaled(t, factor):
    """A CPU tensor holding ``t * factor`` (t's host alias untouched)."""
    a = _a(t)
    return torch.mul(a, factor.to(a.dtype) if isinstance(factor, torch.Tensor) else factor)


def _backend(pg):
    return _unbox_pg(pg)._get_backend(_MUSA)


def _timeout(opts, timeout):
    if timeout is not None and timeout >= 0:
        opts.timeout = datetime.timedelta(milliseconds=timeout)
    return opts


def _options(cls, async_op, timeout=-1, **fields):
    """The backend's options object of one call: ``fields`` as given, async-ness and
    the call's timeout (ms; negative: the group's)."""
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    o.asyncOp = async_op
    return _timeout(o, timeout)


def _check_same(name, tensors, what="tensors"):
    """Local consistency: every tensor of one call shares dtype and device (like NCCL)."""
    if len(tensors) > 1:
        d0 = tensors[0].dtype
        for t in tensors[1:]:
            if t.dtype != d0:
                raise MCCLError(f"mccl {name}: {what} have different dtypes ({d0} vs {t.dtype})")


# --------------------------------------------------------------------------- cross-rank check
# Gloo itself does not check what the ranks pass: a rank that receives more bytes than it
# expects aborts its process (gloo::EnforceNotMet in the transport thread: no exception to
# catch), and tensors of the same byte size but different dtypes are reduced as garbage.
# mccl therefore checks each collective signature (collective, op/root, shapes, dtypes) across
# the ranks the first time this rank uses it on a group, through the group's store (a few store
# round trips, once). Calls whose signature was verified before go straight to Gloo, so the
# steady state (a training loop repeating its collectives) costs a set lookup.
# MCCL_CHECK_COLLECTIVES: "first" (default) as above; "all"/"1": PyTorch's ProcessGroupWrapper
# checks every call; "0"/"off": no check.
_CHECK_LIMIT = 4096  # new signatures checked per group; later new ones go unchecked


class _SigCheck:
    __slots__ = ("store", "rank", "size", "timeout", "n", "ok")

    def __init__(self, store, rank, size, timeout, group):
        self.store = dist.PrefixStore(f"mccl_sig/{group}/", store)
        self.rank, self.size, self.timeout = rank, size, timeout
        self.n = 0
        self.ok = set()


_GROUPS: dict = {}


def _check_mode() -> str:
    """MCCL_CHECK_COLLECTIVES: "first", "all" or "off"."""
    return CONFIG.mccl_check_collectives


def _sig_of(tensors, dtype_only=False):
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.append(_sig_of(t, dtype_only))
        elif dtype_only:
            out.append(str(t.dtype).replace("torch.", ""))
        else:
            out.append(f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}")
    return "[" + ", ".join(out) + "]"


def _first_use_check(group, name, extra, tensors, dtype_only=False):
    """Check ``name(extra) tensors`` across the ranks of ``group`` unless verified before.

    Raises MCCLError on every rank when they disagree (naming each rank's collective, shapes and
    dtypes). Called by the Python kernels and, on a miss of their own cache, by the C++ ones.
    """
    g = _GROUPS.get(group)
    if g is None:
        return
    sig = f"{name}({extra}) {_sig_of(tensors, dtype_only)}"
    if sig in g.ok or g.n >= _CHECK_LIMIT:
        return
    n = g.n
    g.n += 1
    st = g.store
    keys = [f"{n}/{r}" for r in range(g.size)]
    st.set(keys[g.rank], sig)
    try:
        st.wait(keys, g.timeout)
    except Exception as exc:  # noqa: BLE001
        try:
            missing = [r for r, k in enumerate(keys) if not st.check([k])]
        except Exception:  # noqa: BLE001
            missing = "some"
        raise MCCLError(
            f"mccl {name} failed on rank {g.rank} of {g.size}: this rank calls {sig} for the first time and "
            f"rank(s) {missing} did not reach the cross-rank shape/dtype check within the timeout: they are "
            f"in a different collective, passed tensors of other shapes/dtypes they used before, or died "
            f"(MCCL_CHECK_COLLECTIVES=all checks every call)") from exc
    vals = [v.decode() for v in st.multi_get(keys)]
    if st.add(f"{n}/read", 1) == g.size:  # the last reader cleans up
        for k in keys + [f"{n}/read"]:
            st.delete_key(k)
    if any(v != sig for v in vals):
        by_sig: dict = {}
        for r, v in enumerate(vals):
            by_sig.setdefault(v, []).append(r)
        parts = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))}: {v}"
                          for v, rs in by_sig.items())
        raise MCCLError(f"mccl {name} failed on rank {g.rank} of {g.size}: the ranks passed different "
                        f"collectives or tensor shapes/dtypes: {parts}")
    g.ok.add(sig)


def _check(pg, name, extra, tensors, dtype_only=False):
    """The Python kernels' entry: a set lookup once the signature was verified."""
    if _GROUPS:
        _first_use_check(_unbox_pg(pg).group_name, name, extra, tensors, dtype_only)


def _op_name(reduce_op):
    code = reduce_op.op()
    return _c10d.ReduceOp.RedOpType(code).name


# --------------------------------------------------------------------------- kernels
_AR_OPTS: dict = {}


def _allreduce_(tensors, process_group, reduce_op, sparse_indices=None, async_op=True, timeout=-1):
    b = _backend(process_group)
    if sparse_indices is not None:
        raise MCCLError("mccl all_reduce: sparse musa tensors are not supported")
    if _GROUPS:
        _check(process_group, "all_reduce", _op_name(reduce_op), tensors)
    code = reduce_op.op()
    if code == _PREMUL_SUM:
        f = _premul_factor(reduce_op)
        for t in tensors:
            a = _a(t)
            a.mul_(f.to(a.dtype) if isinstance(f, torch.Tensor) else f)
    key = (code, async_op, timeout)
    o = _AR_OPTS.get(key)
    if o is None:  # options are read-only to the backend: one per (op, async, timeout)
        o = _options(_c10d.AllreduceOptions, async_op, timeout, reduceOp=_reduce_op(reduce_op, "all_reduce"))
        if len(_AR_OPTS) < 256:
            _AR_OPTS[key] = o
    w = b.allreduce([_host_alias(t) for t in tensors] if tensors[0].device.type == "musa" else _al(tensors), o)
    return tensors, _finish("all_reduce", b, w, async_op, tensors, tensors)


def _allreduce_coalesced_(tensors, process_group, reduce_op, async_op=True, timeout=-1):
    b = _backend(process_group)
    _check(process_group, "all_reduce_coalesced", _op_name(reduce_op), tensors)
    o = _options(_c10d.AllreduceCoalescedOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, "all_reduce_coalesced"))
    f = _premul_factor(reduce_op)
    if f is not None:
        for t in tensors:
            _a(t).copy_(_scaled(t, f))
    w = b.allreduce_coalesced(_al(tensors), o)
    return _finish("all_reduce_coalesced", b, w, async_op, tensors, tensors)


def _broadcast_(tensors, process_group, root_rank, root_tensor, async_op=True, timeout=-1):
    b = _backend(process_group)
    _check(process_group, "broadcast", f"root={root_rank}", tensors)
    o = _options(_c10d.BroadcastOptions, async_op, timeout, rootRank=root_rank, rootTensor=root_tensor)
    w = b.broadcast(_al(tensors), o)
    return tensors, _finish("broadcast", b, w, async_op, tensors, tensors)


def _reduce_(tensors, process_group, reduce_op, root_rank, root_tensor, async_op=True, timeout=-1):
    b = _backend(process_group)
    _check(process_group, "reduce", f"{_op_name(reduce_op)}, root={root_rank}", tensors)
    o = _options(_c10d.ReduceOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, "reduce"), rootRank=root_rank, rootTensor=root_tensor)
    f = _premul_factor(reduce_op)
    if f is not None:  # inputs stay as they are (like nccl); the root gets the scaled sum
        tmp = [_scaled(t, f) for t in tensors]
        w = b.reduce(tmp, o)
        if b.rank() == root_rank:
            if not async_op:
                done = _finish("reduce", b, w, async_op, tensors, tensors)
                for t, x in zip(tensors, tmp):
                    _a(t).copy_(x)
                return done
            return _completer.complete(_CopyBack(w, [_a(t) for t in tensors], tmp), "reduce", b, tensors, tensors)
        return _finish("reduce", b, w, async_op, tensors, tensors)
    w = b.reduce(_al(tensors), o)
    return _finish("reduce", b, w, async_op, tensors, tensors)


def _allgather_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op, timeout)
    for outs in output_tensors:
        _check_same("all_gather", list(outs) + list(input_tensors), "input and output tensors")
    _check(process_group, "all_gather", "", [input_tensors, output_tensors])
    w = b.allgather(_all(output_tensors), _al(input_tensors), o)
    return output_tensors, _finish("all_gather", b, w, async_op, output_tensors, input_tensors)


def _gather_out(out, inp):
    """Alias of ``out`` shaped as Gloo wants it: inputs concatenated along dim 0.

    ``all_gather_into_tensor`` also accepts a stacked output (world, *input.shape);
    Gloo only the concatenated one. Same bytes either way when ``out`` is contiguous.
    """
    a = _a(out)
    if inp.dim() > 0 and out.is_contiguous() and out.shape[:1] != (0,) and \
            out.numel() % max(inp.numel(), 1) == 0 and out.shape[1:] != inp.shape[1:]:
        ws = out.numel() // max(inp.numel(), 1)
        a = a.view((ws * inp.shape[0],) + tuple(inp.shape[1:]))
    return a


def _reduce_scatter_in(inp, out):
    """Alias of ``inp`` shaped as Gloo wants it (concatenated), for a stacked input."""
    a = _a(inp)
    if out.dim() > 0 and inp.is_contiguous() and inp.shape[1:] != out.shape[1:] and \
            inp.numel() % max(out.numel(), 1) == 0:
        ws = inp.numel() // max(out.numel(), 1)
        a = a.view((ws * out.shape[0],) + tuple(out.shape[1:]))
    return a


def _allgather_base_(output_tensor, input_tensor, process_group, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op, timeout)
    _check_same("all_gather_into_tensor", [output_tensor, input_tensor], "input and output tensors")
    _check(process_group, "all_gather_into_tensor", "", [input_tensor, output_tensor])
    w = b._allgather_base(_gather_out(output_tensor, input_tensor), _a(input_tensor), o)
    return output_tensor, _finish("all_gather_into_tensor", b, w, async_op, [output_tensor], [input_tensor])


def _allgather_coalesced_(output_lists, input_list, process_group, async_op=True):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op)
    w = b.allgather_coalesced(_all(output_lists), _al(input_list), o)
    return _finish("all_gather_coalesced", b, w, async_op, output_lists, input_list)


def _allgather_into_tensor_coalesced_(outputs, inputs, process_group, async_op=True):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op)
    # Gloo has no coalesced variant of its own for every build: issue them in order.
    ws = [b._allgather_base(_a(out), _a(inp), o) for out, inp in zip(outputs, inputs)]
    return _finish_many("all_gather_into_tensor_coalesced", b, ws, async_op, outputs, inputs)


def _reduce_scatter_(output_tensors, input_tensors, process_group, reduce_op, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.ReduceScatterOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, "reduce_scatter"))
    for out, ins in zip(output_tensors, input_tensors):
        _check_same("reduce_scatter", [out] + list(ins), "input and output tensors")
        for t in ins:
            if t.numel() != out.numel():
                raise MCCLError(f"mccl reduce_scatter: every input must have the output's size "
                                f"{tuple(out.shape)}, got {tuple(t.shape)}")
    _check(process_group, "reduce_scatter", _op_name(reduce_op), [output_tensors, input_tensors])
    f = _premul_factor(reduce_op)
    ins = _all(input_tensors) if f is None else [[_scaled(t, f) for t in ts] for ts in input_tensors]
    w = b.reduce_scatter(_al(output_tensors), ins, o)
    return output_tensors, _finish("reduce_scatter", b, w, async_op, output_tensors, input_tensors, False)


def _reduce_scatter_base_(output_tensor, input_tensor, process_group, reduce_op, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.ReduceScatterOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, "reduce_scatter_tensor"))
    _check_same("reduce_scatter_tensor", [output_tensor, input_tensor], "input and output tensors")
    _check(process_group, "reduce_scatter_tensor", _op_name(reduce_op), [output_tensor, input_tensor])
    inp = _reduce_scatter_in(input_tensor, output_tensor)
    f = _premul_factor(reduce_op)
    if f is not None:
        inp = inp * (f.to(inp.dtype) if isinstance(f, torch.Tensor) else f)
    w = b._reduce_scatter_base(_a(output_tensor), inp, o)
    return output_tensor, _finish("reduce_scatter_tensor", b, w, async_op, [output_tensor], [input_tensor],
                                  False)


def _reduce_scatter_tensor_coalesced_(outputs, inputs, process_group, reduce_op, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.ReduceScatterOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, "reduce_scatter_tensor_coalesced"))
    f = _premul_factor(reduce_op)
    ws = [b._reduce_scatter_base(_a(out), _a(inp) if f is None else _scaled(inp, f), o)
          for out, inp in zip(outputs, inputs)]
    if async_op:
        return _completer.complete(_Seq(ws), "reduce_scatter_tensor_coalesced", b, inputs, outputs)
    return _finish_many("reduce_scatter_tensor_coalesced", b, ws, async_op, outputs, inputs)


def _alltoall_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllToAllOptions, async_op, timeout)
    _check_same("all_to_all", list(output_tensors) + list(input_tensors), "input and output tensors")
    _check(process_group, "all_to_all", "", input_tensors, dtype_only=True)
    try:
        w = b.alltoall(_al(output_tensors), _al(input_tensors), o)
    except RuntimeError as exc:
        if "does not support alltoall" not in str(exc):
            raise
        return output_tensors, _alltoall_via_base(b, output_tensors, input_tensors, o)
    return output_tensors, _finish("all_to_all", b, w, async_op, output_tensors, input_tensors)


def _alltoall_via_base(b, outs, ins, o):
    """Gloo before torch 2.13 has no list all_to_all: one all_to_all_single over the
    flattened tensors, split back into the outputs (completes before it returns)."""
    flat_in = torch.cat([_a(t).reshape(-1) for t in ins])
    flat_out = flat_in.new_empty(sum(t.numel() for t in outs))
    w = b.alltoall_base(flat_out, flat_in, [t.numel() for t in outs], [t.numel() for t in ins], o)
    if w is not None:
        w.wait()
    for t, chunk in zip(outs, flat_out.split([t.numel() for t in outs])):
        _a(t).copy_(chunk.view(t.shape))
    return _work_from_future(_done_future(outs)).boxed()


def _alltoall_base_(output, input, process_group, output_split_sizes, input_split_sizes,  # noqa: A002
                    async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllToAllOptions, async_op, timeout)
    _check_same("all_to_all_single", [output, input], "input and output tensors")
    _check(process_group, "all_to_all_single", "", [input], dtype_only=True)
    w = b.alltoall_base(_a(output), _a(input), list(output_split_sizes), list(input_split_sizes), o)
    return _finish("all_to_all_single", b, w, async_op, [output], [input])


def _gather_(output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    b = _backend(process_group)
    _check(process_group, "gather", f"root={root_rank}", input_tensors)
    o = _options(_c10d.GatherOptions, async_op, timeout, rootRank=root_rank)
    w = b.gather(_all(output_tensors), _al(input_tensors), o)
    return _finish("gather", b, w, async_op, output_tensors, input_tensors)


def _scatter_(output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    b = _backend(process_group)
    _check(process_group, "scatter", f"root={root_rank}", output_tensors)
    o = _options(_c10d.ScatterOptions, async_op, timeout, rootRank=root_rank)
    w = b.scatter(_al(output_tensors), _all(input_tensors), o)
    return output_tensors, _finish("scatter", b, w, async_op, output_tensors, input_tensors)


def _send(tensors, process_group, dst, tag):
    b = _backend(process_group)
    w = b.send(_al(tensors), dst, tag)
    return _finish("send", b, w, True, tensors, tensors, False)


def _recv_(tensors, process_group, src, tag):
    b = _backend(process_group)
    w = b.recv(_al(tensors), src, tag)
    return _finish("recv", b, w, True, tensors, tensors, False)


def _recv_any_source_(tensors, process_group, tag):
    b = _backend(process_group)
    # The Gloo work carries the source rank (Work._source_rank()): hand it back as is.
    return b.recv_anysource(_al(tensors), tag).boxed()


def _barrier(tensor, process_group, device_ids, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.BarrierOptions, async_op, timeout)
    w = b.barrier(o)
    return _finish("barrier", b, w, async_op, [], [])


def _monitored_barrier_(tensor, process_group, device_ids, timeout, wait_all_ranks):
    b = _backend(process_group)
    b.monitored_barrier(datetime.timedelta(milliseconds=timeout), wait_all_ranks)


def _finish_many(name, backend, works, async_op, value, tensors):
    works = [w for w in works if w is not None]  # NCCL's blocking calls return none
    if not async_op:
        for w in works:
            try:
                w.wait()
            except Exception as exc:  # noqa: BLE001
                raise _named_error(name, backend, tensors, exc) from exc
        return (works[-1] if works else _work_from_future(_done_future(value))).boxed()
    futs = [w.get_future() for w in works]
    all_done = torch.futures.collect_all(futs)

    def _cb(f):
        for sub in f.value():
            try:
                sub.value()
            except Exception as exc:  # noqa: BLE001
                raise _named_error(name, backend, tensors, exc) from exc
        return value

    if _CUDA_ALIASES:  # stream-ordered completion, as in _finish
        out = torch.futures.Future(devices=[_device_of(value, tensors)])
        errors = []
        all_done.add_done_callback(functools.partial(_settle_all, out, name, backend, tensors, value, errors))
        return _held(_MusaWork(out, name, errors))
    return _held(_MusaWork(all_done.then(_cb), name))


def _settle_all(out, name, backend, tensors, value, errors, fut):
    for sub in fut.value():
        try:
            sub.value()
        except Exception as exc:  # noqa: BLE001
            _fail(out, errors, _named_error(name, backend, tensors, exc))
            return
    out.set_result(value)


class _CopyBack:
    """Waits on a work, then copies its CPU results into the (aliased) outputs."""

    def __init__(self, work, dsts, srcs):
        self.work, self.dsts, self.srcs = work, dsts, srcs

    def wait(self):
        self.work.wait()
        for d, x in zip(self.dsts, self.srcs):
            d.copy_(x)
        return True


class _Seq:
    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()
        return True


def _done_future(value):
    f = torch.futures.Future()
    f.set_result(value)
    return f


_KERNELS = {
    "allreduce_": _allreduce_,
    "allreduce_coalesced_": _allreduce_coalesced_,
    "broadcast_": _broadcast_,
    "reduce_": _reduce_,
    "allgather_": _allgather_,
    "_allgather_base_": _allgather_base_,
    "allgather_coalesced_": _allgather_coalesced_,
    "allgather_into_tensor_coalesced_": _allgather_into_tensor_coalesced_,
    "reduce_scatter_": _reduce_scatter_,
    "_reduce_scatter_base_": _reduce_scatter_base_,
    "reduce_scatter_tensor_coalesced_": _reduce_scatter_tensor_coalesced_,
    "alltoall_": _alltoall_,
    "alltoall_base_": _alltoall_base_,
    "gather_": _gather_,
    "scatter_": _scatter_,
    "send": _send,
    "recv_": _recv_,
    "recv_any_source_": _recv_any_source_,
    "barrier": _barrier,
    "monitored_barrier_": _monitored_barrier_,
}


# --------------------------------------------------------------------------- backend
def _create_backend(dist_opts, backend_options=None):
    """``register_backend`` creator (extended API): the Gloo or NCCL backend for the musa device."""
    timeout = dist_opts.timeout
    if engine(dist_opts.group_size) == "nccl":
        return _nccl_backend(dist_opts, backend_options)
    if backend_options is not None and isinstance(backend_options, _ProcessGroupGloo._Options):
        opts = backend_options
        opts._timeout = timeout
        if not opts._devices:
            opts._devices = [_ProcessGroupGloo.create_default_device()]
        backend = _ProcessGroupGloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, opts)
    else:
        backend = _ProcessGroupGloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, timeout)
    try:
        backend.options.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
        backend.options.group_name = dist_opts.group_id
    except Exception:  # noqa: BLE001  (informational fields)
        pass
    mode = _check_mode()
    try:  # the C++ kernels skip even their set lookup when the check is off
        torch.ops.mccl.set_first_use_check(mode == "first")
    except (AttributeError, RuntimeError):
        pass
    _GROUPS.pop(dist_opts.group_id, None)
    _forget_native(dist_opts.group_id)
    if mode == "first" and dist_opts.group_size > 1 and dist.get_debug_level() != dist.DebugLevel.DETAIL:
        _GROUPS[dist_opts.group_id] = _SigCheck(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                                                timeout, dist_opts.group_id)
    if mode == "all" and dist.get_debug_level() != dist.DebugLevel.DETAIL:
        # Cross-rank fingerprint check (op, shapes, dtypes) before every collective: PyTorch's
        # ProcessGroupWrapper, which TORCH_DISTRIBUTED_DEBUG=DETAIL also installs (then not twice).
        from torch.distributed.distributed_c10d import _create_process_group_wrapper

        backend = _create_process_group_wrapper(
            backend, f"mccl_check:{dist_opts.group_id}", dist_opts.store, dist_opts.group_rank,
            dist_opts.group_size, timeout)
    return backend


def engine(group_size: int = 1, requested: str | None = None) -> str:
    """The collective engine a group of ``group_size`` ranks gets: ``"gloo"`` or ``"nccl"``.

    The host driver has Gloo only (musa memory is host RAM). Under the cuda driver
    musa memory is GPU memory: NCCL, unless ``MCCL_ENGINE=gloo`` or more ranks share
    this host than it has GPUs (NCCL refuses two ranks on one GPU; Gloo then runs on
    the CUDA aliases). ``requested`` stands for MCCL_ENGINE (default: as configured).
    """
    want = CONFIG.mccl_engine if requested is None else requested
    if want not in ("auto", "gloo", "nccl"):
        raise ValueError(f"mccl engine {want!r}: choose 'auto', 'gloo' or 'nccl'")
    if CONFIG.driver == "host":
        if want == "nccl":
            raise MCCLError("MCCL_ENGINE=nccl needs the cuda driver (TORCH_MUSA_DRIVER=cuda): on the "
                            "host driver musa memory is host RAM and mccl runs Gloo")
        return "gloo"
    if want != "auto":
        if want == "nccl" and not dist.is_nccl_available():
            raise MCCLError("MCCL_ENGINE=nccl: this torch has no NCCL")
        return want
    local = int(os.environ.get("LOCAL_WORLD_SIZE", group_size))
    if dist.is_nccl_available() and local <= torch.cuda.device_count():
        return "nccl"
    return "gloo"


def _nccl_backend(dist_opts, backend_options=None):
    """A ProcessGroupNCCL serving the musa device (cuda driver: musa:i is cuda:i)."""
    nccl = dist.ProcessGroupNCCL
    opts = backend_options if isinstance(backend_options, nccl.Options) else nccl.Options()
    opts._timeout = dist_opts.timeout
    try:
        opts.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
        opts.group_name = dist_opts.group_id
    except Exception:  # noqa: BLE001  (informational fields)
        pass
    backend = nccl(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, opts)
    _GROUPS.pop(dist_opts.group_id, None)
    _forget_native(dist_opts.group_id)
    mode = _check_mode()
    try:
        torch.ops.mccl.set_first_use_check(mode == "first")
    except (AttributeError, RuntimeError):
        pass
    # NCCL hangs (rather than aborts) on mismatched ranks: the same first-use check.
    if mode == "first" and dist_opts.group_size > 1 and dist.get_debug_level() != dist.DebugLevel.DETAIL:
        _GROUPS[dist_opts.group_id] = _SigCheck(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                                                dist_opts.timeout, dist_opts.group_id)
    return backend


def _check_collectives() -> bool:
    """True when every collective is checked across ranks (MCCL_CHECK_COLLECTIVES=all)."""
    return _check_mode() == "all"


def _forget_native(group):
    """Drop the C++ kernels' verified signatures of a group name being (re)created."""
    try:
        torch.ops.mccl.forget_group(group)
    except (AttributeError, RuntimeError):
        pass


_USER_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced", "broadcast_": "broadcast",
    "reduce_": "reduce", "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced", "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single", "gather_": "gather", "scatter_": "scatter", "send": "send",
    "recv_": "recv", "recv_any_source_": "recv_anysource", "barrier": "barrier",
    "monitored_barrier_": "monitored_barrier",
}


_GROUP_THIRD = ("allgather_", "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
                "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "alltoall_",
                "alltoall_base_", "gather_", "scatter_")  # ops whose process group is the third argument


def _named_kernel(op_name, fn):
    """Errors raised while issuing the collective (argument checks, debug-mode
    cross-rank checks) come out as MCCLError naming the collective."""
    name = _USER_NAMES.get(op_name, op_name)

    group_arg = 2 if op_name in _GROUP_THIRD else 1

    @functools.wraps(fn)
    def kernel(*args, **kwargs):
        try:
            if _STAGE_GLOO and op_name != "monitored_barrier_" and \
                    _backend(args[group_arg]).name() != "nccl":
                return _run_staged(fn, args, kwargs)
            return fn(*args, **kwargs)
        except MCCLError:
            raise
        except Exception as exc:  # noqa: BLE001
            try:
                backend = _backend(args[group_arg])
            except Exception:  # noqa: BLE001
                backend = None
            first = args[0]
            raise _named_error(name, backend, first if isinstance(first, list) else [first], exc) from exc

    return kernel


def _install_kernels():
    global _LIB, _MUSA, _host_alias, _kernel_alias
    if _LIB is not None:
        return
    _kernel_alias = _host_alias = _load_alias()
    _MUSA = torch.device("musa")
    global _DONE_WORK, _CUDA_ALIASES
    _DONE_WORK = _work_from_future(_done_future([])).boxed()
    _CUDA_ALIASES = CONFIG.driver == "cuda"
    global _STAGE_GLOO
    _STAGE_GLOO = _CUDA_ALIASES or CONFIG.mccl_stage_gloo
    if _STAGE_GLOO:
        _host_alias = _staged_alias
    lib = torch.library.Library("c10d", "IMPL")
    global NATIVE_OPS
    with warnings.catch_warnings():
        # We replace the stock PrivateUse1 kernels on purpose.
        warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")
        warnings.filterwarnings("ignore", message=".*Warning only once for all operators.*")
        from torch_musa.distributed import native

        NATIVE_OPS = tuple(native.native_ops())  # C++ kernels (csrc/mccl_ops.cpp), when available
        if NATIVE_OPS and _STAGE_GLOO:  # the C++ kernels alias as host tensors unless told
            try:
                torch.ops.mccl.set_alias_device("cuda" if _CUDA_ALIASES else "cpu", True)
            except (AttributeError, RuntimeError):  # a build that predates the cuda driver
                NATIVE_OPS = ()
        for name, fn in _KERNELS.items():
            if hasattr(torch.ops.c10d, name) and name not in NATIVE_OPS:
                lib.impl(name, _named_kernel(name, fn), "PrivateUse1")
    _LIB = lib


def install():
    """Register ``mccl`` with torch.distributed (idempotent)."""
    if not dist.is_available():
        return False
    _install_kernels()
    if "mccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("mccl", _create_backend, extended_api=True, devices=["musa"])
    return True
