"""Per-device random number generators (same seed, same numbers)."""
from __future__ import annotations

from typing import Any, Iterable

import torch

from torch_musa import _C
from torch_musa.core import _lazy
from torch_musa.core.device import _get_device_index, _parse_device, device_count


def _generator(idx: int) -> torch.Generator:
    return _C._default_generator(idx)


def get_rng_state(device: Any = "musa") -> torch.Tensor:
    """The state of the device's default generator, as a CPU ByteTensor."""
    _lazy._lazy_init()
    return _generator(_get_device_index(device, optional=True)).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Any = "musa") -> None:
    if isinstance(device, str):
        device = _parse_device(device)
    if isinstance(device, torch.device) and device.type != "musa":
        raise ValueError(f"Expected a musa device, but got: {device}")
    state = new_state.clone(memory_format=torch.contiguous_format)
    # The index is resolved when the call runs: before the first tensor, the
    # call waits for initialisation (as on CUDA) instead of forcing it.
    _lazy._lazy_call(lambda: _generator(_get_device_index(device, optional=True)).set_state(state))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    seed = int(seed)
    idx = _C._get_device()
    _lazy._lazy_call(lambda: _generator(idx).manual_seed(seed), seed=True)


def manual_seed_all(seed: int) -> None:
    seed = int(seed)

    def cb():
        for i in range(device_count()):
            _generator(i).manual_seed(seed)

    _lazy._lazy_call(cb, seed_all=True)


def seed() -> None:
    """Seed the current device's generator with a random number."""
    idx = _C._get_device()
    _lazy._lazy_call(lambda: _generator(idx).seed(), seed=True)


def seed_all() -> None:
    def cb():
        s = _generator(0).seed()
        for i in range(1, device_count()):
            _generator(i).manual_seed(s)

    _lazy._lazy_call(cb, seed_all=True)


def initial_seed() -> int:
    _lazy._lazy_init()
    return _generator(_C._get_device()).initial_seed()


def default_generators() -> tuple[torch.Generator, ...]:
    return tuple(_generator(i) for i in range(device_count()))
