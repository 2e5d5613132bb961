"""The runtime configuration: every declared variable, read once at import, frozen.

Everyone reads ``CONFIG`` (``from torch_musa.config import CONFIG``) and nothing
else in torch_musa reads these variables, so changing ``os.environ`` after
``import torch_musa`` changes nothing in this process (as CUDA's variables).
"""
from __future__ import annotations

import dataclasses
import os
import types
from collections.abc import Mapping, MutableMapping

import torch

from torch_musa.config.profiles import PROFILES, HardwareProfile, gpu_profile
from torch_musa.config.variables import (PYTORCH_VARIABLES, VARIABLES, AllocatorSettings, Variable,
                                         cuda_alloc_conf, from_cuda_names, host_allocator_arguments,
                                         visible_devices)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    driver: str  # "host" or "cuda"
    profile: HardwareProfile  # the simulated card, or the GPU under the cuda driver
    physical_indices: tuple[int, ...]  # musa:i is physical device physical_indices[i]
    capacity_bytes: int  # per device
    host_limit_bytes: int  # all devices together; 0: no limit
    allocator: AllocatorSettings
    fallback: str  # "warn", "silent" or "error"
    double_cast: bool
    op_debug_level: int  # 0: off
    op_debug_dir: str
    op_debug_length: int
    op_debug_list: tuple[str, ...]
    op_debug_black_list: tuple[str, ...]
    cuda_compat: bool
    mccl_engine: str  # "auto", "gloo" or "nccl"
    mccl_check_collectives: str  # "first", "all" or "off"
    mccl_stage_gloo: bool
    testing_rendezvous: str  # "host:port:pid" a parent's gen_ip_port chose; "" if none
    musa_home: str  # the MUSA toolkit's root as set; "" if unset
    pytorch_env: Mapping[str, str]  # PyTorch's variables read in its place (PYTORCH_TUNABLEOP_*), as set

    @property
    def device_count(self) -> int:
        return len(self.physical_indices)


def cuda_driver_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The CUDA variables the cuda driver sets: each musa one given, unless its CUDA
    name is set already (an explicit CUDA setting wins)."""
    out = {v.cuda_name: cuda_alloc_conf(environ[v.name]) if v.name == "PYTORCH_MUSA_ALLOC_CONF"
           else environ[v.name]
           for v in VARIABLES.values() if v.cuda_name and v.name in environ and v.cuda_name not in environ}
    return {k: v for k, v in out.items() if v}


def _with_cuda_names(environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` with the CUDA twins standing in for unset musa variables (TORCH_MUSA_CUDA_COMPAT);
    CUDA-only allocator options are dropped silently (cuda_compat warns when it copies them)."""
    values, _ = from_cuda_names(environ, [v.name for v in VARIABLES.values() if v.cuda_twin])
    return {**environ, **values}


def _host_ram_share() -> int:
    """80 % of the host's RAM (0, no limit, where /proc/meminfo is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 * 8 // 10
    except OSError:
        pass
    return 0


def _start_cuda() -> HardwareProfile:
    if torch.version.cuda is None or not torch.cuda.is_available():
        raise RuntimeError(
            "TORCH_MUSA_DRIVER=cuda needs torch with CUDA and a CUDA GPU, but this torch "
            f"({torch.__version__}, CUDA {torch.version.cuda}) sees none; unset "
            "TORCH_MUSA_DRIVER for the host driver.")
    return gpu_profile()


def _read(v: Variable, view: Mapping[str, str], environ: Mapping[str, str]):
    """``v``'s value; a bad value read from its CUDA name (TORCH_MUSA_CUDA_COMPAT) names that."""
    try:
        return v.read(view)
    except ValueError as e:
        if view is not environ and v.name not in environ and v.cuda_name in environ:
            raise ValueError(f"{v.cuda_name}={environ[v.cuda_name]!r} (read as {v.name} under "
                             f"TORCH_MUSA_CUDA_COMPAT=1): {e}") from None
        raise


def op_debug_dir_error(path: str) -> str | None:
    """Why TORCH_MUSA_OP_DEBUG_DIR cannot be the op log's directory (None if it can): it must be
    a directory, or creatable, and writable. Nothing is created here."""
    p = os.path.abspath(path)
    if os.path.exists(p):
        if not os.path.isdir(p):
            return "exists and is not a directory"
        return None if os.access(p, os.W_OK | os.X_OK) else "is a directory this user cannot write"
    parent = os.path.dirname(p)
    while not os.path.exists(parent):  # the first ancestor present must be a writable directory
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable by this user"
    return None


def _check_op_debug(value: Mapping[str, object], view: Mapping[str, str]) -> None:
    if not value["TORCH_MUSA_OP_DEBUG"]:
        return
    if value["TORCH_MUSA_OP_DEBUG_LIST"] and value["TORCH_MUSA_OP_DEBUG_BLACK_LIST"]:
        raise ValueError("TORCH_MUSA_OP_DEBUG_LIST and TORCH_MUSA_OP_DEBUG_BLACK_LIST cannot be used together")
    directory = str(value["TORCH_MUSA_OP_DEBUG_DIR"])
    why = op_debug_dir_error(directory)
    if why:
        raise VARIABLES["TORCH_MUSA_OP_DEBUG_DIR"].error(
            view.get("TORCH_MUSA_OP_DEBUG_DIR", directory),
            f"{why} (the op log of TORCH_MUSA_OP_DEBUG={value['TORCH_MUSA_OP_DEBUG']} goes there)")


def load(environ: MutableMapping[str, str] = os.environ) -> RuntimeConfig:
    """Read every declared variable from ``environ``.

    Under the cuda driver the musa settings are first set under their CUDA names in
    ``environ`` (CUDA reads them when it starts, which this does to learn the GPU).
    """
    if VARIABLES["TORCH_MUSA_CUDA_COMPAT"].read(environ):
        view = _with_cuda_names(environ)
    else:
        view = environ
    value = {name: _read(v, view, environ) for name, v in VARIABLES.items()}
    _check_op_debug(value, view)
    driver = value["TORCH_MUSA_DRIVER"]
    allocator = value["PYTORCH_MUSA_ALLOC_CONF"]
    if driver == "cuda":
        environ.update(cuda_driver_env(view))
        profile = _start_cuda()
        physical = tuple(range(profile.num_devices))
    else:
        # refuses options the host allocator does not know (the cuda driver passes them to CUDA's)
        host_allocator_arguments(allocator, view.get("PYTORCH_MUSA_ALLOC_CONF"))
        profile = PROFILES[value["TORCH_MUSA_PROFILE"]]
        physical = visible_devices(value["MUSA_VISIBLE_DEVICES"], profile.num_devices)
    capacity = value["TORCH_MUSA_DEVICE_MEMORY"]
    host_limit = value["TORCH_MUSA_HOST_MEMORY_LIMIT"]
    return RuntimeConfig(
        driver=driver,
        profile=profile,
        physical_indices=physical,
        capacity_bytes=profile.total_memory if capacity is None else capacity,
        host_limit_bytes=_host_ram_share() if host_limit is None else host_limit,
        allocator=allocator,
        fallback=value["TORCH_MUSA_FALLBACK"],
        double_cast=value["TORCH_USE_MUSA_DOUBLE_CAST"],
        op_debug_level=value["TORCH_MUSA_OP_DEBUG"],
        op_debug_dir=value["TORCH_MUSA_OP_DEBUG_DIR"],
        op_debug_length=value["TORCH_MUSA_OP_DEBUG_LENGTH"],
        op_debug_list=value["TORCH_MUSA_OP_DEBUG_LIST"],
        op_debug_black_list=value["TORCH_MUSA_OP_DEBUG_BLACK_LIST"],
        cuda_compat=value["TORCH_MUSA_CUDA_COMPAT"],
        mccl_engine=value["MCCL_ENGINE"],
        mccl_check_collectives=value["MCCL_CHECK_COLLECTIVES"],
        mccl_stage_gloo=value["MCCL_STAGE_GLOO"],
        testing_rendezvous=value["TORCH_MUSA_TESTING_RENDEZVOUS"],
        musa_home=value["MUSA_HOME"],
        pytorch_env=types.MappingProxyType({n: environ[n] for n in PYTORCH_VARIABLES if n in environ}),
    )


CONFIG: RuntimeConfig = load()
