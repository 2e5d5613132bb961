"""Forking after musa was used: a clear error in the child; spawn works."""
import multiprocessing as mp

import pytest
import torch


def _touch_musa(q):
    try:
        torch.ones(1, device="musa")
        q.put("no error")
    except RuntimeError as e:
        q.put(str(e))


def _api_call(q):
    try:
        torch.musa.current_device()
        q.put("no error")
    except RuntimeError as e:
        q.put(str(e))


def _spawned(q, index):
    import torch_musa  # noqa: F401
    q.put(torch.ones(2, device=f"musa:{index}").sum().item())


def test_touching_musa_in_a_forked_child_raises():
    torch.ones(1, device="musa")  # the parent has used the device
    ctx = mp.get_context("fork")
    for target in (_touch_musa, _api_call):
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q,))
        p.start()
        msg = q.get(timeout=60)
        p.join(60)
        assert "Cannot re-initialize MUSA in forked subprocess" in msg and "spawn" in msg


@pytest.mark.slow
def test_spawn_works():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_spawned, args=(q, torch.musa.device_count() - 1))  # the last device
    p.start()
    assert q.get(timeout=120) == 2.0
    p.join(60)
    assert p.exitcode == 0
