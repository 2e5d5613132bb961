"""PyTorch's ImageNet example wraps the model in ``nn.DataParallel(model).cuda()``
by default: the same pattern on musa:0/musa:1 trains as one device does (a smoke
test of the pattern; the comm primitives have their own tests).

DataParallel splits the batch, runs a replica per device and sums the replicas'
gradients, so its float sums are in another order than the one-device run's:
compared at a tolerance of a few float32 ulps of the values involved.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ._common import assert_same, assert_same_params, feature_batches, params_of, train_steps

TOL = {"atol": 1e-6, "rtol": 1e-5}


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))


@pytest.mark.requires_devices(2)
def test_data_parallel_trains_like_one_device():
    model = nn.DataParallel(_model()).to("musa")
    assert model.device_ids == list(range(torch.musa.device_count())), \
        "DataParallel should take every musa device by default"
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = feature_batches(3, 8, 12, 3)
    losses = train_steps(model, opt, batches, "musa", nn.CrossEntropyLoss())
    out = model(batches[0][0].to("musa"))
    assert out.device == torch.device("musa:0")

    ref = _model()
    ref_losses = train_steps(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), batches,
                             "cpu", nn.CrossEntropyLoss())
    assert_same(torch.tensor(losses), torch.tensor(ref_losses), "DataParallel losses", **TOL)
    assert_same_params({k.removeprefix("module."): v for k, v in params_of(model).items()},
                       params_of(ref), "DataParallel parameters", **TOL)
