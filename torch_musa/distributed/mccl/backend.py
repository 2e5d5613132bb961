"""The ``mccl`` backend itself: which engine a group gets, the factory
``torch.distributed`` calls for each group, and :func:`install`.

``Backend.register_backend("mccl", ..., devices=["musa"])``: the factory returns a
``ProcessGroupGloo`` (or, under the cuda driver, a ``ProcessGroupNCCL``) that the
``ProcessGroup`` keeps as its musa backend, so ``init_process_group("mccl")``,
``device_id=musa:i`` and ``"cpu:gloo,musa:mccl"`` build ordinary C++ process
groups (DDP, FSDP2, DeviceMesh, functional collectives, subgroups see nothing
unusual).
"""
from __future__ import annotations

import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _create_process_group_wrapper

from torch_musa.config import CONFIG
from torch_musa.distributed import dtensor_random
from torch_musa.distributed import _C as _mccl_C  # noqa: F401  (registers the C++ kernels)
from torch_musa.distributed.mccl import kernels, signature
from torch_musa.distributed.mccl.aliases import ALIAS_DEVICE, STAGE_GLOO
from torch_musa.distributed.mccl.errors import MCCLError

#: Version of the mccl layer (major, minor, patch); the engine is Gloo or NCCL (see engine()).
VERSION = (1, 1, 0)
#: c10d ops served by the C++ kernels (csrc/mccl_ops.cpp); kernels.KERNELS serve the others.
NATIVE_OPS = tuple(torch.ops.mccl.native_ops())


def version():
    """Version of the library that runs the collectives, ``(major, minor, patch)``.

    Under the cuda driver with NCCL that is NCCL (``torch.cuda.nccl.version()``), as
    a user reading this to choose a code path needs; otherwise mccl's own layer over
    Gloo (:data:`VERSION`), since Gloo carries no version of its own.
    """
    if ALIAS_DEVICE == "cuda" and engine() == "nccl":
        return tuple(torch.cuda.nccl.version()[:3])
    return VERSION


def is_available(tensors=None) -> bool:
    """True when mccl can serve ``tensors`` (musa tensors, dense)."""
    if not dist.is_available() or not dist.is_gloo_available():
        return False
    if tensors is None:
        return True
    return all(isinstance(t, torch.Tensor) and t.device.type == "musa" and t.layout == torch.strided
               for t in tensors)


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
    if ALIAS_DEVICE != "cuda":  # NCCL reads CUDA memory only
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


def _set_names(opts, dist_opts):
    try:
        opts.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
        opts.group_name = dist_opts.group_id
    except Exception:  # noqa: BLE001  (informational fields)
        pass


def _gloo_backend(dist_opts, backend_options=None):
    gloo = dist.ProcessGroupGloo
    timeout = dist_opts.timeout
    if backend_options is not None and isinstance(backend_options, gloo._Options):
        opts = backend_options
        opts._timeout = timeout
        if not opts._devices:
            opts._devices = [gloo.create_default_device()]
        backend = gloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, opts)
    else:
        backend = gloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, timeout)
    _set_names(backend.options, dist_opts)
    signature.reset_group(dist_opts)
    if CONFIG.mccl_check_collectives == "all" and dist.get_debug_level() != dist.DebugLevel.DETAIL:
        # Cross-rank fingerprint check (op, shapes, dtypes) before every collective: PyTorch's
        # ProcessGroupWrapper, which TORCH_DISTRIBUTED_DEBUG=DETAIL also installs (then not twice).
        backend = _create_process_group_wrapper(
            backend, f"mccl_check:{dist_opts.group_id}", dist_opts.store, dist_opts.group_rank,
            dist_opts.group_size, timeout)
    return backend


def _nccl_backend(dist_opts, backend_options=None):
    """A ProcessGroupNCCL serving the musa device (cuda driver: musa:i is cuda:i)."""
    nccl = dist.ProcessGroupNCCL
    opts = backend_options if isinstance(backend_options, nccl.Options) else nccl.Options()
    opts._timeout = dist_opts.timeout
    _set_names(opts, dist_opts)
    backend = nccl(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, opts)
    signature.reset_group(dist_opts)  # NCCL hangs (rather than aborts) on mismatched ranks
    return backend


# init_process_group(device_id=musa:i) binds the group to musa:i, and the ProcessGroup
# hands its bound device to each backend it registers; ProcessGroupNCCL knows only
# CUDA devices (its guard, its tensor checks), and under the cuda driver musa:i is
# cuda:i. These two wrappers give NCCL the CUDA name of the same device.

def _as_cuda(device):
    device = torch.device(device)
    return torch.device("cuda", device.index) if device.type == "musa" else device


def _connect_musa_as_cuda(connect):
    @functools.wraps(connect)
    def eager_connect_single_device(self, device=None):
        return connect(self, None if device is None else _as_cuda(device))
    eager_connect_single_device.__wrapped_for_musa__ = True
    return eager_connect_single_device


def _register_nccl_bound_to_cuda(register):
    @functools.wraps(register)
    def _register_backend(self, device, backend_type, backend=None):
        bound = self.bound_device_id
        if bound is None or bound.type != "musa" or not isinstance(backend, dist.ProcessGroupNCCL):
            return register(self, device, backend_type, backend)
        self.bound_device_id = _as_cuda(bound)
        try:
            return register(self, device, backend_type, backend)
        finally:
            self.bound_device_id = bound
    _register_backend.__wrapped_for_musa__ = True
    return _register_backend


def _create_backend(dist_opts, backend_options=None):
    """``register_backend`` creator (extended API): the Gloo or NCCL backend for the musa device."""
    # A musa process group is what DTensor on musa needs first: serve its random
    # initialisation from here, so that importing torch_musa does not import DTensor.
    dtensor_random.install()
    if engine(dist_opts.group_size) == "nccl":
        return _nccl_backend(dist_opts, backend_options)
    return _gloo_backend(dist_opts, backend_options)


def install():
    """Register ``mccl`` with torch.distributed (idempotent)."""
    if not dist.is_available():
        return False
    if STAGE_GLOO:  # the C++ kernels alias as host tensors unless told
        torch.ops.mccl.set_alias_device(ALIAS_DEVICE, True)
    kernels.register()
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is not None and not hasattr(nccl.eager_connect_single_device, "__wrapped_for_musa__"):
        nccl.eager_connect_single_device = _connect_musa_as_cuda(nccl.eager_connect_single_device)
        pg = dist.ProcessGroup
        pg._register_backend = _register_nccl_bound_to_cuda(pg._register_backend)
    if "mccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("mccl", _create_backend, extended_api=True, devices=["musa"])
    return True
