"""torch_musa.testing.common_fsdp as the real one: an FSDPTest runs its methods on spawned
ranks over mccl, run_subtests goes through keyword combinations, check_sharded_parity
compares FSDP2 modules with their replicated twins, and a failing rank fails the test."""
import copy
import unittest

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from torch_musa.testing.common_fsdp import (FSDPTest, check_sharded_parity, run_subtests,  # noqa: F401
                                            skip_if_lt_x_gpu)

pytestmark = pytest.mark.slow


class TestFSDPParity(FSDPTest):
    @skip_if_lt_x_gpu(2)
    def test_fully_shard_matches_replicated(self):
        self.run_subtests({"reshard_after_forward": [True, False]}, self._parity)

    def _parity(self, reshard_after_forward):
        torch.manual_seed(0)   # every rank builds the same model and batch
        ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).musa()
        model = copy.deepcopy(ref)
        mesh = self._device_mesh_plan()
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
        x = torch.randn(4, 8, device="musa")
        model(x).square().sum().backward()
        ref(x).square().sum().backward()   # the ranks' mean of equal gradients is this one
        check_sharded_parity(self, ref, model)
        assert self.process_group.size() == self.world_size == 2


class _RankOneFails(FSDPTest):
    """Not a test itself (no test* method): run by the test below."""

    def boom(self):
        if self.rank == 1:
            raise ValueError("rank 1 fails on purpose")


@skip_if_lt_x_gpu(2)
def test_a_failing_rank_fails_the_test():
    result = unittest.TestResult()
    _RankOneFails("boom").run(result)
    assert len(result.failures) == 1, result.errors
    assert "rank 1 failed" in result.failures[0][1]
