"""Devices: selection, count, properties (from the hardware profile)."""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import torch

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa.config import CONFIG
from torch_musa.config.profiles import PROFILES, cuda_device_properties
from torch_musa.core import _lazy

_device_t = torch.device | str | int | None

# Other device types that name musa devices: torch_musa.cuda_compat adds "cuda"
# while it is enabled, so every device argument of torch.cuda.* (torch.musa.*
# then) takes CUDA's spellings.
_ALIASES: frozenset[str] = frozenset()


def _parse_device(text: str) -> torch.device:
    """``torch.device(text)``, where a misspelt type's error also names musa's spellings:
    PyTorch's own message (c10's parser, out of reach) lists the backend as
    'privateuseone'."""
    try:
        return torch.device(text)
    except RuntimeError as e:
        if not str(e).startswith("Expected one of"):
            raise
        kind = text.split(":", 1)[0]
        guess = difflib.get_close_matches(kind, ["musa", *sorted(_ALIASES)], 1)
        hint = f"did you mean '{text.replace(kind, guess[0], 1)}'? " if guess else ""
        raise RuntimeError(f"{e} ({hint}torch.musa takes 'musa' or 'musa:N'; PyTorch lists the musa "
                           "backend as 'privateuseone')") from None


def _get_device_index(device: _device_t, optional: bool = False) -> int:
    """The musa index that ``device`` names; the current one for None/'musa'."""
    if isinstance(device, str):
        device = _parse_device(device)
    if isinstance(device, torch.device):
        if device.type != "musa" and device.type not in _ALIASES:
            raise ValueError(f"Expected a musa device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a musa device with a specified index or an integer, but got None")
        return current_device()
    if not isinstance(device, int):
        raise TypeError(f"Expected a musa device, index or string, got {type(device).__name__}")
    _C._check_device(device)
    return device


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return CONFIG.device_count


def current_device() -> int:
    _lazy._lazy_init()
    return _C._get_device()


def _no_device(device: Any) -> bool:
    """None or a negative index: no device, which torch.cuda's setters skip."""
    return device is None or (isinstance(device, int) and device < 0)


def set_device(device: _device_t) -> None:
    if _no_device(device):
        return
    idx = _get_device_index(device, optional=True)
    _lazy._lazy_init()
    _C._set_device(idx)


class device:
    """Context manager that changes the current musa device."""

    def __init__(self, device: Any):
        self.idx = -1 if _no_device(device) else _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx != -1:
            _lazy._lazy_init()
            self.prev_idx = _C._get_device()
            if self.prev_idx != self.idx:
                _C._set_device(self.idx)

    def __exit__(self, *exc) -> bool:
        if self.idx != -1 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor) current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "musa" else None)


def synchronize(device: _device_t = None) -> None:
    """Wait for all work queued on every stream of ``device`` (Ctrl-C interrupts the wait)."""
    _lazy._lazy_init()
    idx = _get_device_index(device, optional=True)
    _C._synchronize_device(idx)


@dataclasses.dataclass(frozen=True)
class _MusaDeviceProperties:
    """The fields of CUDA's device properties, which PyTorch and CUDA code read.

    ``gcnArchName`` is the device name, as on CUDA builds of PyTorch (ROCm
    alone puts a ``gfx`` target there).
    """

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: bool
    is_multi_gpu_board: bool
    max_threads_per_multi_processor: int
    max_threads_per_block: int
    warp_size: int
    regs_per_multiprocessor: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    L2_cache_size: int
    clock_rate: int
    memory_clock_rate: int
    memory_bus_width: int
    uuid: str
    pci_bus_id: int
    pci_device_id: int
    pci_domain_id: int

    @property
    def gcnArchName(self) -> str:  # noqa: N802 (CUDA's spelling)
        return self.name

    def __repr__(self) -> str:
        return (
            f"_MusaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
            f"pci_domain_id={self.pci_domain_id}, "
            f"L2_cache_size={self.L2_cache_size // (1 << 20)}MB)"
        )


# Simulated devices sit on consecutive PCI buses from here, one per physical index.
_FIRST_PCI_BUS = 0x10


class _HostCard:
    """The host driver's devices: the modeled card's."""

    @staticmethod
    def uuid(physical: int) -> str:
        """One derived from "MUSA", the arch and the index."""
        p = CONFIG.profile
        return f"4d555341-{p.major:02x}{p.minor:02x}-4000-8000-{physical:012x}"

    @staticmethod
    def pci_location(physical: int) -> tuple[int, int, int]:
        """(bus, device, domain): consecutive buses, one per physical index."""
        return _FIRST_PCI_BUS + physical, 0, 0

    @staticmethod
    def can_access_peer(a: int, b: int) -> bool:
        """All devices live in host RAM: any two distinct ones can."""
        return a != b


class _GpuCard:
    """The cuda driver's devices: the GPU's own answers."""

    @staticmethod
    def uuid(physical: int) -> str:
        return str(cuda_device_properties(physical).uuid)

    @staticmethod
    def pci_location(physical: int) -> tuple[int, int, int]:
        """(bus, device, domain): the GPU's own (NUMA binding reads it)."""
        props = cuda_device_properties(physical)
        return tuple(int(getattr(props, f"pci_{n}_id", 0)) for n in ("bus", "device", "domain"))

    @staticmethod
    def can_access_peer(a: int, b: int) -> bool:
        return torch._C._cuda_canDeviceAccessPeer(a, b)  # cuda_compat binds torch.cuda's name here


_CARD = pick(host=_HostCard, cuda=_GpuCard)
_uuid, _pci_location = _CARD.uuid, _CARD.pci_location


def get_device_properties(device: _device_t = None) -> _MusaDeviceProperties:
    idx = _get_device_index(device, optional=True)
    p = CONFIG.profile
    physical = CONFIG.physical_indices[idx]
    pci_bus, pci_device, pci_domain = _pci_location(physical)
    return _MusaDeviceProperties(
        name=p.name,
        major=p.major,
        minor=p.minor,
        total_memory=CONFIG.capacity_bytes,
        multi_processor_count=p.multi_processor_count,
        is_integrated=False,
        is_multi_gpu_board=False,
        max_threads_per_multi_processor=p.max_threads_per_multi_processor,
        max_threads_per_block=p.max_threads_per_block,
        warp_size=p.warp_size,
        regs_per_multiprocessor=p.regs_per_multiprocessor,
        shared_memory_per_block=p.shared_memory_per_block,
        shared_memory_per_block_optin=p.shared_memory_per_block_optin,
        shared_memory_per_multiprocessor=p.shared_memory_per_multiprocessor,
        L2_cache_size=p.l2_cache_size,
        clock_rate=p.clock_rate_khz,
        memory_clock_rate=p.memory_clock_rate_khz,
        memory_bus_width=p.memory_bus_width,
        uuid=_uuid(physical),
        pci_bus_id=pci_bus,
        pci_device_id=pci_device,
        pci_domain_id=pci_domain,
    )


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple[int, int]:
    p = get_device_properties(device)
    return p.major, p.minor


def get_arch_list() -> list[str]:
    """Architectures this build serves (the host driver serves them all)."""
    if not is_available():
        return []
    return sorted({f"mp_{p.arch}" for p in PROFILES.values()})


def get_gencode_flags() -> str:
    """mcc's flags for the architectures in get_arch_list(), as the real torch_musa compiles
    for them: ``--offload-arch=mp_21 --offload-arch=mp_22 ...`` (torch.cuda's answer is
    nvcc's ``-gencode`` flags); empty when no musa device is available."""
    return " ".join(f"--offload-arch={arch}" for arch in get_arch_list())


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return is_available() and CONFIG.profile.supports_bf16


def can_device_access_peer(device: _device_t, peer_device: _device_t) -> bool:
    """Whether ``device`` can access ``peer_device``'s memory directly. The host driver's
    devices all live in host RAM, so any two distinct ones can; under the cuda driver
    CUDA answers. A device is never its own peer (CUDA answers False there too)."""
    a = _peer_index(device, "device id")
    b = _peer_index(peer_device, "peer device id")
    return _CARD.can_access_peer(a, b)


def _peer_index(device: _device_t, what: str) -> int:
    try:
        return _get_device_index(device, optional=True)  # IndexError naming the valid range
    except IndexError as e:
        # torch.cuda's (and the real torch_musa's) AssertionError words, with the range.
        raise _InvalidDeviceId(str(e).replace("Invalid device", f"Invalid {what}", 1)) from None


class _InvalidDeviceId(AssertionError, IndexError):
    """A device index out of range where torch.cuda raises ``AssertionError("Invalid device id")``
    (can_device_access_peer); still the IndexError this project raises for a bad index."""
