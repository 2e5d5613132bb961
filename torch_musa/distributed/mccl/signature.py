"""The cross-rank signature check: do the ranks call the same collective?

Gloo itself does not check what the ranks pass: a rank that receives more bytes than it
expects aborts its process (gloo::EnforceNotMet in the transport thread: no exception to
catch), and tensors of the same byte size but different dtypes are reduced as garbage.
mccl therefore checks each collective signature (collective, op/root, shapes, dtypes) across
the ranks the first time this rank uses it on a group, through the group's store (a few store
round trips, once). Calls whose signature was verified before go straight to the engine, so
the steady state (a training loop repeating its collectives) costs a set lookup. The C++
kernels keep their own set and call :func:`first_use_check` on a miss.

MCCL_CHECK_COLLECTIVES: ``first`` (default) as above; ``all``: PyTorch's ProcessGroupWrapper
checks every call (set up by the backend factory); ``off``: no check.
"""
from __future__ import annotations

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


def reset_group(dist_opts):
    """A group named ``dist_opts.group_id`` is being (re)created: forget what was verified
    under that name and, in ``first`` mode, start checking it."""
    mode = CONFIG.mccl_check_collectives
    torch.ops.mccl.set_first_use_check(mode == "first")  # off: the C++ kernels skip even their lookup
    GROUPS.pop(dist_opts.group_id, None)
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


def first_use_check(group, name, extra, tensors, dtype_only=False):
    """Check ``name(extra) tensors`` across the ranks of ``group`` unless verified before.

    Raises MCCLError on every rank when they disagree (naming each rank's collective, shapes and
    dtypes). Called by the Python kernels and, on a miss of their own cache, by the C++ ones.
    """
    g = GROUPS.get(group)
    if g is None:
        return
    sig = f"{name}({extra}) {_sig_of(tensors, dtype_only)}"
    if sig in g.ok or g.n >= CHECK_LIMIT:
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


def check(pg, name, extra, tensors, dtype_only=False):
    """The Python kernels' entry: a set lookup once the signature was verified."""
    if GROUPS:
        first_use_check(_c10d.ProcessGroup.unbox(pg).group_name, name, extra, tensors, dtype_only)


def op_name(reduce_op) -> str:
    """``SUM``, ``MAX``, ...: the name of the TorchScript ReduceOp a kernel receives."""
    return _c10d.ReduceOp.RedOpType(reduce_op.op()).name
