"""Dynamo keeps ``torch.musa.amp.autocast`` as one context-manager node, as it keeps
``torch.cuda.amp.autocast``: enter + op + exit (the real torch_musa's
tests/unittest/dynamo/test_ctx_manager.py expects op count 3 and no graph break)."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import torch_musa  # noqa: F401


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _count(fn, *args):
    cnt = torch._dynamo.testing.CompileCounter()
    out = torch._dynamo.optimize(cnt, nopython=True)(fn)(*args)
    return cnt, out


def test_musa_amp_autocast_is_one_ctx_node():
    def f(x, y):
        with torch.musa.amp.autocast(enabled=True):
            return torch.matmul(x, y)

    x = torch.randn(8, 8, device="musa", requires_grad=True)
    y = torch.randn(8, 8, device="musa", requires_grad=True)
    ref = f(x, y)
    cnt, res = _count(f, x, y)
    assert res.dtype == ref.dtype == torch.float16
    assert cnt.frame_count == 1
    assert cnt.op_count == 3  # _enter_autocast + matmul + _exit_autocast
    torch.testing.assert_close(res, ref)


def test_musa_amp_autocast_arguments_reach_the_graph():
    def f(x):
        with torch.musa.amp.autocast(dtype=torch.bfloat16):
            a = torch.mm(x, x)
        with torch.musa.amp.autocast(enabled=False):
            b = torch.mm(x, x)
        return a, b

    x = torch.randn(4, 4, device="musa")
    if torch.bfloat16 not in torch.musa.get_amp_supported_dtype():
        pytest.skip("profile without bfloat16")
    cnt, (a, b) = _count(f, x)
    assert (a.dtype, b.dtype) == (torch.bfloat16, torch.float32)
    assert cnt.op_count == 6


def test_musa_amp_autocast_decorator_and_instance():
    ctx = torch.musa.amp.autocast()

    def f(x):
        with ctx:
            return torch.mm(x, x)

    x = torch.randn(4, 4, device="musa")
    cnt, out = _count(f, x)
    assert out.dtype == torch.float16
    assert cnt.op_count == 3
