"""The comparison every real-code test makes: a run on musa against the same run
on the CPU device, started from the same seed.

Under the host driver both devices run the same host kernels and musa draws the
CPU's random numbers, so the default is bit-identity; under the cuda driver it is
torch_musa.testing.reference's CPU tolerance (tests that need the CPU's random
numbers say so). A test that allows more says why where it passes a tolerance.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import torch
from torch import nn

from torch_musa.testing import assert_close
from torch_musa.testing.reference import cpu_tolerance


def assert_same(actual, expected, what: str, *, atol: float | None = None,
                rtol: float | None = None, dtype: torch.dtype = torch.float32) -> None:
    """``actual`` (any device) equals ``expected`` within atol/rtol, at least the
    driver's CPU tolerance for ``dtype`` (bit for bit under the host driver)."""
    default = cpu_tolerance(dtype)
    atol = default["atol"] if atol is None else max(atol, default["atol"])
    rtol = default["rtol"] if rtol is None else max(rtol, default["rtol"])
    assert_close(actual, expected, atol=atol, rtol=rtol, check_device=False, equal_nan=True,
                 msg=f"{what}: musa differs from the CPU run (atol={atol}, rtol={rtol})")


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of every parameter by name, tied names included."""
    return {name: p.detach().to("cpu", copy=True)
            for name, p in model.named_parameters(remove_duplicate=False)}


def assert_same_params(actual: dict, expected: dict, what: str, **tol) -> None:
    assert actual.keys() == expected.keys(), f"{what}: parameter names differ"
    for name in expected:
        assert_same(actual[name], expected[name], f"{what}, parameter {name}", **tol)


def token_batches(steps: int, batch: int, seq: int, vocab: int, seed: int = 0
                  ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Language-model batches (inputs, next-token targets), the same on every run."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def feature_batches(steps: int, batch: int, features: int, classes: int, seed: int = 0
                    ) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, features, generator=g),
             torch.randint(0, classes, (batch,), generator=g)) for _ in range(steps)]


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, batches, device, loss_fn
                ) -> list[float]:
    """One optimizer step per batch; the losses as Python floats."""
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
