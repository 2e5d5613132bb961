"""FSDP test scaffolding with the real torch_musa's names (``torch_musa.testing.common_fsdp``).

``FSDPTest`` is a ``unittest.TestCase`` that pytest can collect: each test method runs in
``world_size`` spawned ranks (one per musa device, at most 8) joined to one process group
(mccl), and the parent passes only when every rank exits cleanly. ``run_subtests`` runs a
function over the product of keyword values inside those ranks, and
``check_sharded_parity`` compares an FSDP2 (DTensor) module with its replicated twin.
"""
from __future__ import annotations

import itertools
import os
import sys
import time
import traceback
import types
import unittest
from functools import wraps
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from torch_musa.distributed import register as _register_mccl

from .decorators import gen_ip_port

__all__ = ["skip_if_lt_x_gpu", "FSDPTest", "run_subtests", "check_sharded_parity"]


def skip_if_lt_x_gpu(x: int):
    """Skip the test when fewer than ``x`` musa devices are visible."""
    return pytest.mark.skipif(torch.musa.device_count() < x,
                              reason=f"Need at least {x} MUSA devices")


class FSDPTest(unittest.TestCase):
    """Run each test method on ``world_size`` spawned ranks in one process group.

    In the parent (``rank == MAIN_PROCESS_RANK``) the method only waits for the ranks;
    a rank whose test raises exits with ``TEST_ERROR_EXIT_CODE`` and the parent fails,
    ending the other ranks at once instead of letting them hang in a collective.
    """

    MAIN_PROCESS_RANK = -1
    TEST_ERROR_EXIT_CODE = 10
    TEST_NORM_EXIT_CODE = 0
    #: seconds the parent waits for the ranks before it ends them and fails
    TIMEOUT = 300

    def __init__(self, method_name: str = "runTest") -> None:
        super().__init__(method_name)
        setattr(self, method_name, self.join_or_run(getattr(self, method_name)))

    def runTest(self):  # noqa: N802 (unittest's name) — the no-op default method
        pass

    @property
    def world_size(self) -> int:
        return min(torch.musa.device_count(), 8)

    @property
    def process_group(self):
        return dist.distributed_c10d._get_default_group()

    def _device_mesh_plan(self, device: str = "musa", hybrid_shard: bool = False):
        """A 1-D mesh ("dp_replicate") over all ranks, or for hybrid sharding a 2 x (n/2)
        mesh ("dp_replicate", "dp_shard")."""
        if not hybrid_shard:
            return init_device_mesh(device, (self.world_size,), mesh_dim_names=("dp_replicate",))
        if self.world_size % 2:
            raise ValueError(f"hybrid sharding needs an even world size, not {self.world_size}")
        return init_device_mesh(device, (2, self.world_size // 2),
                                mesh_dim_names=("dp_replicate", "dp_shard"))

    def join_or_run(self, fn):
        @wraps(fn)
        def wrapper(self):
            if self.rank == self.MAIN_PROCESS_RANK:
                self._join_processes()
            else:
                fn()

        return types.MethodType(wrapper, self)

    def setUp(self) -> None:
        super().setUp()
        # One address for every rank: gen_ip_port keeps it in the environment the spawned
        # ranks inherit.
        addr, port = gen_ip_port()
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
        self.processes = []
        self.rank = self.MAIN_PROCESS_RANK
        if self._testMethodName != "runTest":
            self._spawn_processes()

    def tearDown(self) -> None:
        super().tearDown()
        for p in getattr(self, "processes", []):
            if p.is_alive():
                p.terminate()
            p.join(5)
        self.processes = []

    def _current_test_name(self) -> str:
        return self.id().split(".")[-1]

    def _start_processes(self, proc) -> None:
        self.processes = []
        for rank in range(self.world_size):
            p = proc(target=self.__class__._run, name=f"process {rank}",
                     args=(rank, self._current_test_name()))
            p.start()
            self.processes.append(p)

    def _spawn_processes(self) -> None:
        self._start_processes(torch.multiprocessing.get_context("spawn").Process)

    def _join_processes(self) -> None:
        deadline = time.monotonic() + self.TIMEOUT
        failed = None
        while failed is None:
            codes = [p.exitcode for p in self.processes]
            if self.TEST_ERROR_EXIT_CODE in codes:
                failed = f"rank {codes.index(self.TEST_ERROR_EXIT_CODE)} failed (its output says why)"
            elif all(c is not None for c in codes):
                bad = [(r, c) for r, c in enumerate(codes) if c != self.TEST_NORM_EXIT_CODE]
                failed = f"ranks exited abnormally (rank, exit code): {bad}" if bad else ""
            elif time.monotonic() > deadline:
                failed = f"ranks still running after {self.TIMEOUT} s (exit codes {codes})"
            else:
                time.sleep(0.1)
        if failed:
            for p in self.processes:
                if p.is_alive():
                    p.terminate()
            raise AssertionError(f"{self._current_test_name()}: {failed}")

    def run_test(self, test_name: str) -> None:
        try:
            getattr(self, test_name)()
        except Exception:  # noqa: BLE001 — any failure ends this rank with the error code
            print(f"Caught exception:\n{traceback.format_exc()}exiting process {self.rank} "
                  f"with exit code {self.TEST_ERROR_EXIT_CODE}", flush=True)
            sys.exit(self.TEST_ERROR_EXIT_CODE)

    @classmethod
    def _run(cls, rank: int, test_name: str) -> None:
        self = cls(test_name)
        self.rank = rank
        _register_mccl()
        backend = "mccl" if torch.musa.is_available() else "gloo"
        if torch.musa.is_available() and torch.musa.device_count():
            torch.musa.set_device(rank % torch.musa.device_count())
        dist.init_process_group(backend=backend, rank=rank, world_size=self.world_size)
        dist.barrier()
        self.run_test(test_name)
        dist.barrier()
        dist.destroy_process_group()

    def run_subtests(self, *args, **kwargs):
        return run_subtests(self, *args, **kwargs)


def run_subtests(cls_inst: Any, subtest_config: dict[str, list[Any]], test_fn: Callable,
                 *test_args, **test_kwargs: Any):
    """Call ``test_fn`` once per combination of the keyword values in ``subtest_config``
    (their product, in the mapping's order), each as a ``subTest``, the ranks meeting at
    a barrier after each: the process group is set up once for all of them."""
    keys = list(subtest_config)
    for values in itertools.product(*(subtest_config[k] for k in keys)):
        kwargs = dict(zip(keys, values))
        with cls_inst.subTest(**kwargs):
            if dist.get_rank() == 0:
                print(f"Current test case's param: {kwargs}", flush=True)
            test_fn(*test_args, **test_kwargs, **kwargs)
        dist.barrier()


def check_sharded_parity(cls, replicated_module: torch.nn.Module, sharded_module: torch.nn.Module,
                         prefixes_to_ignore: tuple[str, ...] = ()):
    """Each sharded parameter (a DTensor) and its gradient equal the replicated module's,
    distributed the same way. ``prefixes_to_ignore``: removed from the sharded names
    (wrappers' prefixes) before the names are matched."""
    for (r_name, r_param), (s_name, s_param) in zip(replicated_module.named_parameters(),
                                                    sharded_module.named_parameters()):
        for prefix in prefixes_to_ignore:
            s_name = s_name.replace(prefix, "")
        assert r_name == s_name, f"parameter {s_name!r} where {r_name!r} was expected"
        assert isinstance(s_param, DTensor), f"{s_name} is not sharded (not a DTensor)"
        mesh, placements = s_param.device_mesh, s_param.placements
        if tuple(placements) == (Shard(0), Shard(0)):
            raise AssertionError("FSDP's (Shard(0), Shard(0)) layout is not distribute_tensor()'s; "
                                 "the parameters cannot be compared through it")
        ref = distribute_tensor(r_param.detach(), mesh, placements)
        assert torch.allclose(s_param.to_local(), ref.to_local()), f"{s_name} differs"
        if r_param.grad is None:
            assert s_param.grad is None, f"{s_name} has a gradient, the replicated one none"
            continue
        assert isinstance(s_param.grad, DTensor), f"{s_name}'s gradient is not a DTensor"
        ref_grad = distribute_tensor(r_param.grad, mesh, placements)
        assert torch.allclose(s_param.grad.to_local(), ref_grad.to_local()), f"{s_name}'s gradient differs"
