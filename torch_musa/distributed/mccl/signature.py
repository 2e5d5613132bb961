"""The cross-rank signature check: do the ranks call the same collective?

Gloo itself does not check what the ranks pass: a rank that receives more bytes than it
expects aborts its process (gloo::EnforceNotMet in the transport thread: no exception to
catch), and tensors of the same byte size but different dtypes are reduced as garbage.
mccl therefore checks each collective signature (collective, op/root, shapes, dtypes) across
the ranks the first time this rank uses it on a group, through the group's store (a few store
round trips, once). Calls whose signature was verified before go straight to the engine, so
the steady state (a training loop repeating its collectives) costs a set lookup. The C++
kernels keep their own set and call :func:`first_use_check` on a miss.

A verified call that another rank does not make (it calls a new signature instead) would
wait in the engine for the whole timeout: the C++ kernels (all_reduce, broadcast,
all_gather_into_tensor; sync calls and ``Work.wait()``) watch such a wait and, once it has
lasted a second, ask :func:`stalled` whether a peer published a check for this call's position
(the engine's sequence number, less this rank's point-to-point calls). If so, the stalled rank
publishes its call there, so that every rank names the two calls that differ; the ranks that
checked join the stalled call with placeholder tensors (:func:`_join`), so that the engine
completes it on every rank and the group stays usable, and every rank raises.

MCCL_CHECK_COLLECTIVES: ``first`` (default) as above; ``all``: PyTorch's ProcessGroupWrapper
checks every call (set up by the backend factory); ``off``: no check.
"""
from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torch_musa.config import CONFIG
from torch_musa.distributed import _C as _mccl_C  # noqa: F401  (defines torch.ops.mccl)
from torch_musa.distributed.mccl.errors import MCCLError

CHECK_LIMIT = 4096  # new signatures checked per group; later new ones go unchecked


class _SigCheck:
    __slots__ = ("store", "rank", "size", "timeout", "n", "ok")

    def __init__(self, store, rank, size, timeout, group):
        self.store = dist.PrefixStore(f"mccl_sig/{group}/", store)
        self.rank, self.size, self.timeout = rank, size, timeout
        self.n = 0
        self.ok = set()


#: group name -> its check state, for the groups this rank checks
GROUPS: dict = {}
#: group name -> point-to-point calls this rank made on it: they advance the engine's sequence
#: number on the ranks involved only, so a call's position is that number less these
P2P: dict = {}
#: collectives a rank that checked can join with placeholder tensors (the C++ kernels' ones
#: that watch their wait), so that a peer's verified call of that kind completes
JOINABLE = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")


def reset_group(dist_opts):
    """A group named ``dist_opts.group_id`` is being (re)created: forget what was verified
    under that name and, in ``first`` mode, start checking it."""
    mode = CONFIG.mccl_check_collectives
    torch.ops.mccl.set_first_use_check(mode == "first")  # off: the C++ kernels skip even their lookup
    GROUPS.pop(dist_opts.group_id, None)
    P2P.pop(dist_opts.group_id, None)
    torch.ops.mccl.forget_group(dist_opts.group_id)
    if mode == "first" and dist_opts.group_size > 1 and dist.get_debug_level() != dist.DebugLevel.DETAIL:
        GROUPS[dist_opts.group_id] = _SigCheck(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                                               dist_opts.timeout, dist_opts.group_id)


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


def note_p2p(pg):
    """A point-to-point call on ``pg`` (see :data:`P2P`)."""
    if GROUPS:
        name = _c10d.ProcessGroup.unbox(pg).group_name
        P2P[name] = P2P.get(name, 0) + 1


def _position(group, seq):
    """The call's position on ``group`` from the engine's sequence number (None: unknown)."""
    return None if seq is None or seq < 0 else seq - P2P.get(group, 0)


def _ranks(rs) -> str:
    return f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))}"


def _collect(g, n, keys):
    """Every rank's published check ``n`` (dicts: sig, pos, stalled, join); the last reader cleans up."""
    st = g.store
    vals = [json.loads(v.decode()) for v in st.multi_get(keys)]
    if st.add(f"{n}/read", 1) == g.size:
        for k in keys + [f"{n}/read", f"{n}/arrived"]:
            st.delete_key(k)
    return vals


def _joinable(vals):
    """The call the stalled ranks wait in, when every one waits in the same joinable one."""
    joins = [json.dumps(v.get("join"), sort_keys=True) for v in vals if v.get("stalled")]
    if not joins or len(set(joins)) != 1:
        return None
    return next(v["join"] for v in vals if v.get("stalled"))


def _mismatch(vals, joined):
    """``the ranks passed different ...: rank 0: X; rank 1: Y`` and what became of the group."""
    known = [v["pos"] for v in vals if v.get("pos") is not None]
    first = min(known) if known else None
    by_text: dict = {}
    for r, v in enumerate(vals):
        text = v["sig"]
        if v.get("stalled"):
            text += " (a signature verified before: sent to the engine unchecked)"
        elif first is not None and v.get("pos") is not None and v["pos"] > first:
            text += (f" ({v['pos'] - first} call(s) later: its call at this position had a signature "
                     f"verified before and went to the engine unchecked)")
        by_text.setdefault(text, []).append(r)
    parts = "; ".join(f"{_ranks(rs)}: {text}" for text, rs in by_text.items())
    stalled = [r for r, v in enumerate(vals) if v.get("stalled")]
    skewed = first is not None and any(v.get("pos") is not None and v["pos"] != first for v in vals)
    if stalled and joined:
        outcome = (f"; the other ranks joined the call {_ranks(stalled)} had sent to the engine with "
                   f"placeholder tensors, so the group stays usable (the tensors of that call on "
                   f"{_ranks(stalled)} hold no valid result)")
    elif stalled or skewed:
        outcome = ("; a call was left pending in the engine on some ranks: the group is unusable "
                   "(MCCL_CHECK_COLLECTIVES=all checks every call)")
    else:
        outcome = ""
    return f"the ranks passed different collectives or tensor shapes/dtypes: {parts}{outcome}"


def _join(group, spec):
    """Join a peer's stalled call ``spec`` (:data:`JOINABLE`) with placeholder tensors."""
    pg = dist.distributed_c10d._resolve_process_group(group)
    b = pg._get_backend(torch.device("musa"))
    ts = [torch.zeros(shape, dtype=getattr(torch, dt)) for shape, dt in spec["tensors"]]
    name, extra = spec["name"], spec["extra"]

    def reduce_op():
        code = _c10d.ReduceOp.RedOpType.__members__[extra]
        if code == _c10d.ReduceOp.RedOpType.PREMUL_SUM:
            code = _c10d.ReduceOp.RedOpType.SUM
        return _c10d.ReduceOp(code)

    if name == "all_reduce":
        o = _c10d.AllreduceOptions()
        o.reduceOp = reduce_op()
        w = b.allreduce(ts, o)
    elif name == "broadcast":
        o = _c10d.BroadcastOptions()
        o.rootRank, o.rootTensor = int(extra.split("=", 1)[1]), 0
        w = b.broadcast(ts, o)
    elif name == "all_gather_into_tensor":
        inp, out = ts
        w = b._allgather_base(out.reshape(-1), inp.reshape(-1), _c10d.AllgatherOptions())
    else:  # reduce_scatter_tensor
        out, inp = ts
        o = _c10d.ReduceScatterOptions()
        o.reduceOp = reduce_op()
        w = b._reduce_scatter_base(out.reshape(-1), inp.reshape(-1), o)
    w.wait()


def first_use_check(group, name, extra, tensors, dtype_only=False, seq=-1):
    """Check ``name(extra) tensors`` across the ranks of ``group`` unless verified before.

    Raises MCCLError on every rank when they disagree (naming each rank's collective, shapes and
    dtypes). Called by the Python kernels and, on a miss of their own cache, by the C++ ones.
    ``seq``: the engine's sequence number before the call (or a callable giving it; -1: unknown).
    """
    g = GROUPS.get(group)
    if g is None:
        return
    sig = f"{name}({extra}) {_sig_of(tensors, dtype_only)}"
    if sig in g.ok or g.n >= CHECK_LIMIT:
        return
    pos = _position(group, seq() if callable(seq) else seq)
    n = g.n
    g.n += 1
    st = g.store
    keys = [f"{n}/{r}" for r in range(g.size)]
    st.set(keys[g.rank], json.dumps({"sig": sig, "pos": pos}))
    st.add(f"{n}/arrived", 1)
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
            f"in a different collective (one verified before goes to the engine unchecked), passed tensors "
            f"of other shapes/dtypes they used before, or died (MCCL_CHECK_COLLECTIVES=all checks every "
            f"call)") from exc
    vals = _collect(g, n, keys)
    if any(v["sig"] != sig for v in vals):
        spec = _joinable(vals)
        joined = False
        if spec is not None:
            try:
                _join(group, spec)
                joined = True
            except Exception:  # noqa: BLE001  (the message then says the group is unusable)
                pass
        raise MCCLError(f"mccl {name} failed on rank {g.rank} of {g.size}: {_mismatch(vals, joined)}")
    g.ok.add(sig)


def stalled(group, name, extra, tensors, seq):
    """A verified C++ call on ``group`` has waited in the engine a while (``seq``: the engine's
    sequence number, this call included). If a peer published a first-use check for this call's
    position, publish this call there too and return ``(error, after_completion)``: the error to
    raise, once the call completed when the peers join it (so the group stays usable); else None."""
    g = GROUPS.get(group)
    if g is None:
        return None
    st, n = g.store, g.n
    if st.add(f"{n}/arrived", 0) == 0:  # no rank checks a new signature at this rank's next index
        return None
    pos = _position(group, seq - 1)
    if pos is None:
        return None
    keys = [f"{n}/{r}" for r in range(g.size)]
    peer = None
    for r, k in enumerate(keys):
        if r != g.rank and st.check([k]) and json.loads(st.get(k).decode()).get("pos") == pos:
            peer = r
            break
    if peer is None:  # a later call's check (a root that completed its broadcast): keep waiting
        return None
    sig = f"{name}({extra}) {_sig_of(tensors)}"
    join = None
    if name in JOINABLE:
        join = {"name": name, "extra": extra,
                "tensors": [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in tensors]}
    g.n += 1
    st.set(keys[g.rank], json.dumps({"sig": sig, "pos": pos, "stalled": True, "join": join}))
    st.add(f"{n}/arrived", 1)
    try:
        st.wait(keys, g.timeout)
    except Exception:  # noqa: BLE001
        return (f"rank {peer} checks a new signature at this call's position, and not every rank published "
                f"its call there within the timeout: the group is unusable", False)
    vals = _collect(g, n, keys)
    if all(v["sig"] == sig for v in vals):  # the same call after all: the engine completes it
        return None
    joined = _joinable(vals) is not None
    return _mismatch(vals, joined), joined


def _seq(p):
    """The engine's sequence number on ``p`` (Gloo's; -1 under NCCL or where there is none)."""
    try:
        b = p._get_backend(torch.device("musa"))
        return -1 if b.name() == "nccl" else b._get_sequence_number_for_group()
    except Exception:  # noqa: BLE001
        return -1


def check(pg, name, extra, tensors, dtype_only=False):
    """The Python kernels' entry: a set lookup once the signature was verified."""
    if GROUPS:
        p = _c10d.ProcessGroup.unbox(pg)
        first_use_check(p.group_name, name, extra, tensors, dtype_only, lambda: _seq(p))


def op_name(reduce_op) -> str:
    """``SUM``, ``MAX``, ...: the name of the TorchScript ReduceOp a kernel receives."""
    return _c10d.ReduceOp.RedOpType(reduce_op.op()).name
