"""One diagnosis session: every collector around a piece of the user's work,
cut into steps (one per ``optimizer.step()``, or by the caller), stopped after
a bounded number of them."""
from __future__ import annotations

import time

from torch.optim.optimizer import register_optimizer_step_post_hook
from tqdm import tqdm

import torch_musa.ops
from torch_musa import _driver
from torch_musa.config import CONFIG
from torch_musa.ops.registry import set_rnn_cpu_layers
from torch_musa.utils.doctor.cuda_isms import CudaApiRecorder
from torch_musa.utils.doctor.frames import UserCode
from torch_musa.utils.doctor.memory import MemoryRecorder
from torch_musa.utils.doctor.ops import OpRecorder
from torch_musa.utils.doctor.syncs import SyncRecorder


class StepLimitReached(BaseException):
    """Ends the user's script after the last step asked for (a BaseException, so
    that the script's own ``except Exception`` does not swallow it)."""


class Session:
    """``with Session(roots, max_steps) as s: ...`` records; ``s.to_json()`` is the raw data.

    ``steps_from_optimizer``: a step ends at each ``optimizer.step()`` (any optimizer);
    otherwise the caller calls ``step_done()``. ``progress``: show a progress bar.
    """

    def __init__(self, roots: list[str], max_steps: int | None = None, steps_from_optimizer: bool = True,
                 progress: bool = False):
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be a positive number of steps, got {max_steps}")
        self.user = UserCode(roots)
        self.max_steps = max_steps
        self.steps_done = 0
        self.ops = OpRecorder(self.user)
        self.memory = MemoryRecorder(self.user)
        self.syncs = SyncRecorder(self.user)
        self.cuda_api = CudaApiRecorder(self.user)
        self.ops.on_op.append(self.memory.on_op)
        self.syncs.fallback_site = lambda: self.ops.backward_site
        self._hook = None
        self._steps_from_optimizer = steps_from_optimizer
        self._bar = tqdm(total=max_steps, unit="step", desc="musa-doctor", disable=not progress,
                         leave=False, dynamic_ncols=True)
        self._started = 0.0
        self.elapsed = 0.0
        #: called with the session after each step (the worker saves the data so far)
        self.on_step = lambda session: None
        self.ops.on_op.append(self._tick)

    def _tick(self, _name: str) -> None:
        n = len(self.ops.steps[-1])
        if n % 2000 == 0:
            self._bar.set_postfix(ops=n, refresh=True)

    def __enter__(self):
        torch_musa.ops.reset_fallback_stats()
        # The ops a card runs: its torch_musa steps recurrent layers with the fused cells,
        # where the host driver would take the CPU device's whole layer.
        self._rnn_cpu_layers = set_rnn_cpu_layers(False)
        self._started = time.perf_counter()
        self.memory.__enter__()
        self.syncs.__enter__()
        self.cuda_api.__enter__()
        self.ops.__enter__()
        if self._steps_from_optimizer:
            self._hook = register_optimizer_step_post_hook(lambda *_: self.step_done())
        return self

    def step_done(self) -> None:
        """Ends a step; raises StepLimitReached after the last one asked for."""
        self.steps_done += 1
        self.ops.close_step()
        self.syncs.close_step()
        self.memory.close_step()
        self._bar.update(1)
        self.elapsed = time.perf_counter() - self._started
        self.on_step(self)
        if self.max_steps is not None and self.steps_done >= self.max_steps:
            raise StepLimitReached(self.steps_done)

    def __exit__(self, *exc):
        if self._hook is not None:
            self._hook.remove()
        self.ops.__exit__(None, None, None)
        self.cuda_api.__exit__(None, None, None)
        self.syncs.__exit__(None, None, None)
        if self.ops.steps[-1] or not self.memory.per_step:
            self.memory.close_step()        # the unfinished step (or the whole run, without steps)
        self.memory.__exit__(None, None, None)
        set_rnn_cpu_layers(self._rnn_cpu_layers)
        self._bar.close()
        self.elapsed = time.perf_counter() - self._started
        return False

    def to_json(self) -> dict:
        return {"driver": _driver.NAME, "profile": CONFIG.profile.key, "steps_completed": self.steps_done,
                "max_steps": self.max_steps, "elapsed_s": round(self.elapsed, 3),
                **self.ops.to_json(), "fallback": torch_musa.ops.fallback_stats(),
                "native_here": sorted(set(torch_musa.ops.coverage()["native"])),
                "memory": self.memory.to_json(), "syncs": self.syncs.to_json(),
                "cuda_api": self.cuda_api.to_json()}
