"""The cuda driver's C++ attention entry (csrc/python/gpu_attention.cpp), on the host.

Under the cuda driver ``scaled_dot_product_attention`` is served by a C++ kernel that
repeats torch_musa/attention/gpu.py's ``_sdpa`` and hands traced inputs (fake tensors)
and a mask that requires grad back to Python. Its fused branches need a GPU (the GPU
suite compares them with native CUDA, tests/core/test_cuda_driver.py); the host driver
answers every rule with a non-CUDA backend, so here both entries take the math kernel
and must agree bit for bit, forward and backward, and the hand-backs must happen
exactly where Python has to answer. A fresh interpreter on the host driver: the
registration replaces the process's SDPA kernel for good.
"""
from __future__ import annotations

CHECK = r"""
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

import torch_musa
from torch_musa import _C
from torch_musa.attention import gpu

handed = []


def python_entry(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    handed.append("fake" if is_fake(q) else "mask grad" if mask is not None and mask.requires_grad
                  else "other")
    # gpu._sdpa asks CUDA's rule of CUDA stand-ins for these, which a CPU-only host lacks.
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


_C._register_gpu_sdpa(python_entry)
_C._register_gpu_sdpa(python_entry)  # once per process: a second call changes nothing
g = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32, grad=False):
    return torch.randn(*shape, generator=g).to("musa", dtype).requires_grad_(grad)


def same(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu()), what


cases = {
    "plain": dict(),
    "bool mask": dict(mask=torch.rand(8, 8, generator=g) > 0.3),
    "bool mask bf16": dict(mask=torch.rand(2, 1, 8, 8, generator=g) > 0.5, dtype=torch.bfloat16),
    "float mask": dict(mask=torch.randn(8, 8, generator=g)),
    "causal, scale": dict(is_causal=True, scale=0.3),
    "gqa": dict(kv_heads=1, enable_gqa=True),
}
for name, c in cases.items():
    dtype = c.get("dtype", torch.float32)
    q = rand(2, 3, 8, 16, dtype=dtype, grad=True)
    k, v = (rand(2, c.get("kv_heads", 3), 8, 16, dtype=dtype, grad=True) for _ in range(2))
    mask = c.get("mask")
    mask = None if mask is None else mask.to("musa", dtype if mask.is_floating_point() else torch.bool)
    kw = dict(is_causal=c.get("is_causal", False), scale=c.get("scale"),
              enable_gqa=c.get("enable_gqa", False))
    out = F.scaled_dot_product_attention(q, k, v, mask, **kw)
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    ref = gpu._sdpa(q, k, v, mask, **kw)
    ref_grads = torch.autograd.grad(ref.float().sum(), (q, k, v))
    same(out, ref, name)
    for a, b in zip(grads, ref_grads):
        same(a, b, name + " grad")
    with torch.no_grad():
        same(F.scaled_dot_product_attention(q, k, v, mask, **kw), ref.detach(), name + " no_grad")
assert handed == [], handed

q, k, v = (rand(1, 2, 4, 8) for _ in range(3))
mask = rand(4, 4, grad=True)
F.scaled_dot_product_attention(q, k, v, mask)
assert handed == ["mask grad"], handed
with FakeTensorMode() as mode:
    fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
    fout = F.scaled_dot_product_attention(fq, fk, fv, is_causal=True)
assert handed == ["mask grad", "fake"], handed
assert is_fake(fout) and fout.shape == q.shape and fout.device == q.device
print("OK")
"""


def test_the_cpp_entry_matches_python_and_hands_back_traced_calls(subpython):
    r = subpython(CHECK, env={"TORCH_MUSA_DRIVER": "host"}, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr
