"""torch.backends.musa / torch.backends.mudnn: torch.backends.cuda's names, and the SDPA
switches that musa's attention actually obeys."""
import importlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_musa.config import CONFIG


@pytest.fixture(autouse=True)
def _restore_flags():
    m, d = torch.backends.musa.matmul, torch.backends.mudnn
    saved = (m.allow_tf32, m.allow_fp16_reduced_precision_reduction,
             m.allow_bf16_reduced_precision_reduction, d.allow_tf32)
    sdp = (torch._C._get_flash_sdp_enabled(), torch._C._get_overrideable_sdp_enabled(),
           torch._C._get_math_sdp_enabled(), torch._C._get_mem_efficient_sdp_enabled(),
           torch._C._get_cudnn_sdp_enabled())
    yield
    (m.allow_tf32, m.allow_fp16_reduced_precision_reduction,
     m.allow_bf16_reduced_precision_reduction, d.allow_tf32) = saved
    for setter, value in zip((torch._C._set_sdp_use_flash, torch._C._set_sdp_use_overrideable,
                              torch._C._set_sdp_use_math, torch._C._set_sdp_use_mem_efficient,
                              torch._C._set_sdp_use_cudnn), sdp):
        setter(value)


def test_importable_as_torch_backends_modules():
    assert importlib.import_module("torch.backends.musa") is torch.backends.musa
    assert importlib.import_module("torch.backends.mudnn") is torch.backends.mudnn
    assert torch.backends.musa.is_built()


def test_matmul_switches_round_trip_like_cuda():
    m = torch.backends.musa.matmul
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction",
                 "allow_bf16_reduced_precision_reduction"):
        for value in (True, False):
            setattr(m, name, value)
            assert getattr(m, name) is value
    m.allow_fp16_reduced_precision_reduction = (True, True)  # CUDA's (reduced, split_k) form
    assert m.allow_fp16_reduced_precision_reduction is True
    with pytest.raises(AttributeError, match="allow_tf32"):
        m.allow_tf33 = True
    with pytest.raises(AttributeError):
        m.nonexistent
    torch.backends.mudnn.allow_tf32 = True
    assert torch.backends.mudnn.allow_tf32 is True
    with pytest.raises(TypeError, match="bool"):
        torch.backends.mudnn.allow_tf32 = "yes"


@pytest.mark.requires_host_driver("the host driver keeps musa's flags apart from CUDA's")
def test_host_flags_are_musas_own_and_keep_float32_exact():
    cuda_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.musa.matmul.allow_tf32 = not cuda_before
    assert torch.backends.cuda.matmul.allow_tf32 == cuda_before
    torch.backends.musa.matmul.allow_tf32 = True
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    assert torch.equal((a.musa() @ b.musa()).cpu(), a @ b)  # the CPU's kernel: still exact


def test_accelerate_style_setting():
    # accelerate: `torch.backends.musa.matmul.allow_tf32 = True` when a dynamo backend is chosen
    torch.backends.musa.matmul.allow_tf32 = True
    assert torch.backends.musa.matmul.allow_tf32


def test_sdp_switches_are_the_ones_attention_obeys():
    q, k, v = (torch.randn(1, 2, 8, 16, device="musa", dtype=torch.float16) for _ in range(3))
    b = torch.backends.musa
    b.enable_math_sdp(False)
    b.enable_flash_sdp(True)
    b.enable_mem_efficient_sdp(False)  # the GPU's other kernels (cuda driver)
    b.enable_cudnn_sdp(False)
    assert b.flash_sdp_enabled() and not b.math_sdp_enabled()
    F.scaled_dot_product_attention(q, k, v)  # flash alone runs this case
    b.enable_flash_sdp(False)
    assert not b.flash_sdp_enabled()
    assert not torch._C._get_overrideable_sdp_enabled()  # musa's flash answers to both flags
    # CUDA's SDPA words it "No viable backend" (the H200 run), the host driver's dispatch
    # "No available kernel".
    with pytest.raises(RuntimeError, match="No available kernel|No viable backend"):
        F.scaled_dot_product_attention(q, k, v)
    b.enable_math_sdp(True)
    out = F.scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q.float().cpu(), k.float().cpu(), v.float().cpu())
    torch.testing.assert_close(out.float().cpu(), ref, atol=2e-3, rtol=2e-3)
    # the context manager of torch.nn.attention and musa's query functions agree
    with sdpa_kernel([SDPBackend.MATH]):
        assert b.math_sdp_enabled() and not b.flash_sdp_enabled()
    for name in ("mem_efficient", "cudnn"):
        getattr(b, f"enable_{name}_sdp")(False)
        assert not getattr(b, f"{name}_sdp_enabled")()
        getattr(b, f"enable_{name}_sdp")(True)
        assert getattr(b, f"{name}_sdp_enabled")()


def test_preferred_linalg_library():
    lib = torch.backends.musa.preferred_linalg_library()
    assert isinstance(lib, torch._C._LinalgBackend)
    if CONFIG.driver == "host":
        assert torch.backends.musa.preferred_linalg_library("default") == torch._C._LinalgBackend.Default
        with pytest.raises(RuntimeError, match="default"):
            torch.backends.musa.preferred_linalg_library("magma")


def test_mudnn_has_cudnns_functions():
    """torch.backends.mudnn carries version/is_available/set_flags/flags as
    torch.backends.cudnn does (the real torch_musa's module has the same)."""
    d = torch.backends.mudnn
    assert d.flags is torch.musa.mudnn.flags and d.set_flags is torch.musa.mudnn.set_flags
    assert isinstance(d.is_available(), bool)
    if CONFIG.driver == "cuda":
        assert d.version() == torch.backends.cudnn.version()
    else:
        assert d.version() is None and d.is_available()  # no muDNN library: the host's kernels
    saved = (d.allow_tf32, d.enabled, d.benchmark, d.deterministic)
    with d.flags(not saved[0], deterministic=not saved[3], benchmark=True):
        assert d.allow_tf32 is (not saved[0]) and d.deterministic is (not saved[3])
        assert d.benchmark is True and d.enabled is saved[1]  # not given: unchanged
    assert (d.allow_tf32, d.enabled, d.benchmark, d.deterministic) == saved
    with pytest.raises(ZeroDivisionError):  # restored when the block raises too
        with d.flags(allow_tf32=not saved[0], enabled=not saved[1]):
            1 / 0
    assert (d.allow_tf32, d.enabled, d.benchmark, d.deterministic) == saved
    assert d.set_flags(saved[0]) == (saved[0],)
