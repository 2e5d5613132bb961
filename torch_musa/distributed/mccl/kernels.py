"""The Python c10d kernels for musa (PrivateUse1) tensors.

PyTorch routes every collective through the ``c10d::*`` operators, keyed by the
tensors' device. The hot ones (all_reduce, broadcast, all_gather_into_tensor,
reduce_scatter_tensor) are C++ kernels (``csrc/mccl_ops.cpp``), registered when
``torch_musa.distributed._C`` loads; :func:`register` adds these for every other
op: alias the tensors, call the group's musa backend (Gloo or NCCL), finish
(wait, or hand back a Work whose future yields the musa tensors).
"""
from __future__ import annotations

import datetime
import functools
import inspect
import warnings
from typing import Callable, NamedTuple

import torch
from torch._C import _distributed_c10d as _c10d

from torch_musa.distributed import _C as _mccl_C  # noqa: F401  (defines torch.ops.mccl)
from torch_musa.distributed.mccl.aliases import STAGE_GLOO, alias, alias_list, alias_lists, run_staged
from torch_musa.distributed.mccl.errors import InvalidPeerError, MCCLError, named_error
from torch_musa.distributed.mccl.signature import check, note_p2p, op_name
from torch_musa.distributed.mccl.works import (
    CopyBack, Seq, completer, done_work, finish, finish_many, inflight)

_MUSA = torch.device("musa")
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
    """The factor of a PREMUL_SUM ReduceOp (a float, or a 1-element tensor as an alias); else None."""
    if op.op() != _PREMUL_SUM:
        return None
    factor = torch.ops.mccl.premul_factor(op)  # the TorchScript ReduceOp does not expose it
    if factor.dim() == 0 and factor.dtype == torch.float64 and factor.device.type == "cpu":
        return factor.item()
    return alias(factor)


def _scaled(t, factor):
    """A new tensor holding ``t * factor`` (t left as it is)."""
    a = alias(t)
    return torch.mul(a, factor.to(a.dtype) if isinstance(factor, torch.Tensor) else factor)


def _backend(pg):
    return _c10d.ProcessGroup.unbox(pg)._get_backend(_MUSA)


def _options(cls, async_op, timeout=-1, **fields):
    """The backend's options object of one call: ``fields`` as given, async-ness and
    the call's timeout (ms; negative: the group's)."""
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    o.asyncOp = async_op
    if timeout is not None and timeout >= 0:
        o.timeout = datetime.timedelta(milliseconds=timeout)
    return o


def _check_same(name, tensors, what="tensors"):
    """Local consistency: every tensor of one call shares its dtype (like NCCL)."""
    if len(tensors) > 1:
        d0 = tensors[0].dtype
        for t in tensors[1:]:
            if t.dtype != d0:
                raise MCCLError(f"mccl {name}: {what} have different dtypes ({d0} vs {t.dtype})")


# --------------------------------------------------------------------------- kernels
class Kernel(NamedTuple):
    """A Python c10d kernel: ``fn(name, *the op's arguments)``; ``name`` is the collective's
    name in errors and cross-rank checks; ``group_arg`` and ``peer_arg`` are where the
    process group and the peer rank (send/recv) sit among the op's arguments; ``staged``:
    whether it runs on host copies where Gloo cannot read the aliases."""
    fn: Callable
    name: str
    group_arg: int
    peer_arg: int | None
    staged: bool


#: c10d op -> its musa kernel, as recorded by @kernel
KERNELS: dict[str, Kernel] = {}


def kernel(op: str, name: str, staged: bool = True):
    """Record the decorated function as the musa kernel of ``c10d::<op>``, the collective
    ``name``. The positions of its process group and peer (a ``dst`` or ``src``
    parameter, checked before the engine sees it) come from its signature."""
    def record(fn):
        params = list(inspect.signature(fn).parameters)[1:]  # after `name`
        peer = next((params.index(p) for p in ("dst", "src") if p in params), None)
        KERNELS[op] = Kernel(fn, name, params.index("process_group"), peer, staged)
        return fn
    return record


@kernel("allreduce_coalesced_", "all_reduce_coalesced")
def _allreduce_coalesced_(name, tensors, process_group, reduce_op, async_op=True, timeout=-1):
    b = _backend(process_group)
    check(process_group, name, op_name(reduce_op), tensors)
    o = _options(_c10d.AllreduceCoalescedOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, name))
    f = _premul_factor(reduce_op)
    if f is not None:
        for t in tensors:
            alias(t).copy_(_scaled(t, f))
    w = b.allreduce_coalesced(alias_list(tensors), o)
    return finish(name, b, w, async_op, tensors, tensors)


@kernel("reduce_", "reduce")
def _reduce_(name, tensors, process_group, reduce_op, root_rank, root_tensor, async_op=True, timeout=-1):
    b = _backend(process_group)
    check(process_group, name, f"{op_name(reduce_op)}, root={root_rank}", tensors)
    o = _options(_c10d.ReduceOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, name), rootRank=root_rank, rootTensor=root_tensor)
    f = _premul_factor(reduce_op)
    if f is not None:  # inputs stay as they are (like nccl); the root gets the scaled sum
        tmp = [_scaled(t, f) for t in tensors]
        w = inflight.add(b.reduce(tmp, o))
        if b.rank() == root_rank:
            if not async_op:
                done = finish(name, b, w, async_op, tensors, tensors)
                for t, x in zip(tensors, tmp):
                    alias(t).copy_(x)
                return done
            return completer.complete(CopyBack(w, [alias(t) for t in tensors], tmp), name, b, tensors,
                                      tensors)
        return finish(name, b, w, async_op, tensors, tensors)
    w = b.reduce(alias_list(tensors), o)
    return finish(name, b, w, async_op, tensors, tensors)


@kernel("allgather_", "all_gather")
def _allgather_(name, output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op, timeout)
    for outs in output_tensors:
        _check_same(name, list(outs) + list(input_tensors), "input and output tensors")
    check(process_group, name, "", [input_tensors, output_tensors])
    w = b.allgather(alias_lists(output_tensors), alias_list(input_tensors), o)
    return output_tensors, finish(name, b, w, async_op, output_tensors, input_tensors)


@kernel("allgather_coalesced_", "all_gather_coalesced")
def _allgather_coalesced_(name, output_lists, input_list, process_group, async_op=True):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op)
    w = b.allgather_coalesced(alias_lists(output_lists), alias_list(input_list), o)
    return finish(name, b, w, async_op, output_lists, input_list)


@kernel("allgather_into_tensor_coalesced_", "all_gather_into_tensor_coalesced")
def _allgather_into_tensor_coalesced_(name, outputs, inputs, process_group, async_op=True):
    b = _backend(process_group)
    o = _options(_c10d.AllgatherOptions, async_op)
    # Gloo has no coalesced variant of its own for every build: issue them in order.
    ws = [b._allgather_base(alias(out), alias(inp), o) for out, inp in zip(outputs, inputs)]
    return finish_many(name, b, ws, async_op, outputs, inputs)


@kernel("reduce_scatter_", "reduce_scatter")
def _reduce_scatter_(name, output_tensors, input_tensors, process_group, reduce_op, async_op=True,
                     timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.ReduceScatterOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, name))
    for out, ins in zip(output_tensors, input_tensors):
        _check_same(name, [out] + list(ins), "input and output tensors")
        for t in ins:
            if t.numel() != out.numel():
                raise MCCLError(f"mccl {name}: every input must have the output's size "
                                f"{tuple(out.shape)}, got {tuple(t.shape)}")
    check(process_group, name, op_name(reduce_op), [output_tensors, input_tensors])
    f = _premul_factor(reduce_op)
    ins = alias_lists(input_tensors) if f is None else [[_scaled(t, f) for t in ts] for ts in input_tensors]
    w = b.reduce_scatter(alias_list(output_tensors), ins, o)
    return output_tensors, finish(name, b, w, async_op, output_tensors, input_tensors, False)


@kernel("reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced")
def _reduce_scatter_tensor_coalesced_(name, outputs, inputs, process_group, reduce_op, async_op=True,
                                      timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.ReduceScatterOptions, async_op, timeout,
                 reduceOp=_reduce_op(reduce_op, name))
    f = _premul_factor(reduce_op)
    ws = [inflight.add(b._reduce_scatter_base(alias(out), alias(inp) if f is None else _scaled(inp, f), o))
          for out, inp in zip(outputs, inputs)]
    if async_op:
        return completer.complete(Seq(ws), name, b, inputs, outputs)
    return finish_many(name, b, ws, async_op, outputs, inputs)


@kernel("alltoall_", "all_to_all")
def _alltoall_(name, output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllToAllOptions, async_op, timeout)
    _check_same(name, list(output_tensors) + list(input_tensors), "input and output tensors")
    check(process_group, name, "", input_tensors, dtype_only=True)
    try:
        w = b.alltoall(alias_list(output_tensors), alias_list(input_tensors), o)
    except RuntimeError as exc:
        if "does not support alltoall" not in str(exc):
            raise
        return output_tensors, _alltoall_via_base(b, output_tensors, input_tensors, o)
    return output_tensors, finish(name, b, w, async_op, output_tensors, input_tensors)


def _alltoall_via_base(b, outs, ins, o):
    """Gloo before torch 2.13 has no list all_to_all: one all_to_all_single over the
    flattened tensors, split back into the outputs (completes before it returns)."""
    flat_in = torch.cat([alias(t).reshape(-1) for t in ins])
    flat_out = flat_in.new_empty(sum(t.numel() for t in outs))
    sizes_out, sizes_in = [t.numel() for t in outs], [t.numel() for t in ins]
    w = inflight.add(b.alltoall_base(flat_out, flat_in, sizes_out, sizes_in, o))
    if w is not None:
        w.wait()
    for t, chunk in zip(outs, flat_out.split([t.numel() for t in outs])):
        alias(t).copy_(chunk.view(t.shape))
    return done_work(outs)


@kernel("alltoall_base_", "all_to_all_single")
def _alltoall_base_(name, output, input, process_group, output_split_sizes, input_split_sizes,  # noqa: A002
                    async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.AllToAllOptions, async_op, timeout)
    _check_same(name, [output, input], "input and output tensors")
    check(process_group, name, "", [input], dtype_only=True)
    w = b.alltoall_base(alias(output), alias(input), list(output_split_sizes), list(input_split_sizes), o)
    return finish(name, b, w, async_op, [output], [input])


@kernel("gather_", "gather")
def _gather_(name, output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    b = _backend(process_group)
    check(process_group, name, f"root={root_rank}", input_tensors)
    o = _options(_c10d.GatherOptions, async_op, timeout, rootRank=root_rank)
    w = b.gather(alias_lists(output_tensors), alias_list(input_tensors), o)
    return finish(name, b, w, async_op, output_tensors, input_tensors)


@kernel("scatter_", "scatter")
def _scatter_(name, output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    b = _backend(process_group)
    check(process_group, name, f"root={root_rank}", output_tensors)
    o = _options(_c10d.ScatterOptions, async_op, timeout, rootRank=root_rank)
    w = b.scatter(alias_list(output_tensors), alias_lists(input_tensors), o)
    return output_tensors, finish(name, b, w, async_op, output_tensors, input_tensors)


def check_peer(name, backend, peer):
    """Raise InvalidPeerError unless ``peer`` (a rank of the group: torch.distributed maps a
    global ``dst``/``src`` to it, and ``group_dst``/``group_src`` are one) is a rank of the group
    other than this one, before the engine sees it: Gloo indexes its connections by it without
    a check (a peer outside the group crashed the process with SIGSEGV/SIGBUS or waited the
    group timeout) and has no connection to the own rank (NCCL has: self is allowed there)."""
    rank, size = backend.rank(), backend.size()
    if 0 <= peer < size and (peer != rank or backend.name() == "nccl"):
        return
    role = "destination" if name == "send" else "source"
    try:
        ranks = list(backend.options.global_ranks_in_group)
    except Exception:  # noqa: BLE001  (informational)
        ranks = []
    members = f" (global ranks {ranks})" if ranks and ranks != list(range(size)) else ""
    allowed = f"a rank of the group in [0, {size}) other than this rank ({rank})"
    if 0 <= peer < size:  # this rank
        raise InvalidPeerError(f"mccl {name}: invalid {role} rank {peer} on rank {rank} of {size}: it is this "
                               f"rank, and mccl's Gloo engine has no connection from a rank to itself; the "
                               f"{role} must be {allowed}{members}")
    raise InvalidPeerError(f"mccl {name}: invalid {role} rank {peer} on rank {rank} of {size}: the group has "
                           f"ranks [0, {size}){members}; the {role} must be {allowed}")


@kernel("send", "send")
def _send(name, tensors, process_group, dst, tag):
    b = _backend(process_group)
    note_p2p(process_group)
    w = b.send(alias_list(tensors), dst, tag)
    return finish(name, b, w, True, tensors, tensors, False)


@kernel("recv_", "recv")
def _recv_(name, tensors, process_group, src, tag):
    b = _backend(process_group)
    note_p2p(process_group)
    w = b.recv(alias_list(tensors), src, tag)
    return finish(name, b, w, True, tensors, tensors, False)


@kernel("recv_any_source_", "recv_anysource")
def _recv_any_source_(name, tensors, process_group, tag):
    b = _backend(process_group)
    note_p2p(process_group)
    # The Gloo work carries the source rank (Work._source_rank()): hand it back as is.
    return inflight.add(b.recv_anysource(alias_list(tensors), tag)).boxed()


@kernel("barrier", "barrier")
def _barrier(name, tensor, process_group, device_ids, async_op=True, timeout=-1):
    b = _backend(process_group)
    o = _options(_c10d.BarrierOptions, async_op, timeout)
    w = b.barrier(o)
    return finish(name, b, w, async_op, [], [])


@kernel("monitored_barrier_", "monitored_barrier", staged=False)
def _monitored_barrier_(name, tensor, process_group, device_ids, timeout, wait_all_ranks):
    b = _backend(process_group)
    b.monitored_barrier(datetime.timedelta(milliseconds=timeout), wait_all_ranks)


def _registered(k: Kernel):
    """The kernel as registered: staged where Gloo cannot read the aliases, and errors
    raised while issuing the collective (argument checks, debug-mode cross-rank checks)
    come out as MCCLError naming the collective."""
    fn = functools.partial(k.fn, k.name)

    @functools.wraps(k.fn)
    def registered(*args, **kwargs):
        if k.peer_arg is not None:  # before the engine (or staging) sees the peer
            check_peer(k.name, _backend(args[k.group_arg]), args[k.peer_arg])
        try:
            if STAGE_GLOO and k.staged and _backend(args[k.group_arg]).name() != "nccl":
                return run_staged(fn, args, kwargs)
            return fn(*args, **kwargs)
        except MCCLError:
            raise
        except Exception as exc:  # noqa: BLE001
            try:
                backend = _backend(args[k.group_arg])
            except Exception:  # noqa: BLE001
                backend = None
            first = args[0]
            raise named_error(k.name, backend, first if isinstance(first, list) else [first], exc) from exc

    return registered


_LIB = None  # the torch.library.Library holding the kernels (kept alive)


def register():
    """Register the Python kernels for musa tensors (idempotent)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        # We replace the stock PrivateUse1 kernels on purpose.
        warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")
        warnings.filterwarnings("ignore", message=".*Warning only once for all operators.*")
        for op, k in KERNELS.items():
            if hasattr(torch.ops.c10d, op):
                lib.impl(op, _registered(k), "PrivateUse1")
    _LIB = lib
