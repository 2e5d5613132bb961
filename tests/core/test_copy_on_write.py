"""Copy-on-write tensors (torch._lazy_clone) keep sharing while only read, as on the CPU.

PyTorch's test_torch.py (test_lazy_clone_binary_op_no_materialize) found musa
copying a COW storage whenever a kernel read it: the host alias took the storage's
mutable data. Values were right; the copy the clone exists to save was made.
"""
import pytest
import torch

import torch_musa  # noqa: F401

is_cow = torch._C._is_cow_tensor

CASES = {
    "binary op reads both": lambda t, c: t + c,
    "reduction": lambda t, c: c.sum(),
    "item": lambda t, c: c[0].item(),
    "copy from the clone": lambda t, c: torch.empty_like(t).copy_(c),
    "to the host": lambda t, c: c.cpu(),
    "view of the clone": lambda t, c: c.view(2, 2),
    "in place on the clone": lambda t, c: c.add_(1),
    "out= into the original": lambda t, c: torch.mul(c, 2, out=t),
    "in place through a view": lambda t, c: c.view(2, 2)[0].zero_(),
    "reads and writes one storage": lambda t, c: torch.add(t, c, out=t),
}


def _run(device, case):
    t = torch.arange(4.0, device=device)
    c = t._lazy_clone()
    out = CASES[case](t, c)
    return is_cow(t), is_cow(c), t.cpu(), c.cpu(), out.cpu() if isinstance(out, torch.Tensor) else out


@pytest.mark.parametrize("case", list(CASES))
def test_cow_sharing_and_values_are_the_cpus(case):
    cpu, musa = _run("cpu", case), _run("musa", case)
    assert musa[:2] == cpu[:2], f"COW state (original, clone) musa={musa[:2]} cpu={cpu[:2]}"
    for a, b in zip(musa[2:], cpu[2:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_write_to_one_twin_leaves_the_other():
    t = torch.arange(6.0, device="musa")
    c = t._lazy_clone()
    torch.add(c, c, out=c)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert c.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
