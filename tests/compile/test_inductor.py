"""torch.compile's default Inductor backend on musa (host driver): registration through
PyTorch's extension points, forward and backward against eager and the CPU, guards,
dynamic shapes, modes, the profile's dtypes, clear errors. Tiny graphs: compiling is
slow on two cores."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend

# What reads the C++ CPU code Inductor writes for the host driver (or its registration there);
# the rest held on the H200 under the cuda driver too (Inductor writes Triton there).
HOST = pytest.mark.requires_host_driver("Inductor's C++ CPU code over host memory")


def _fn(x, w):
    h = torch.relu(x @ w) + torch.sin(x[:, : w.shape[1]])
    return torch.softmax(h, dim=-1).pow(2).sum(dim=0)


def _run(fn, device, *cpu_args, grad=True):
    args = [a.detach().to(device).requires_grad_(grad and a.is_floating_point()) for a in cpu_args]
    out = fn(*args)
    if grad:
        out.sum().backward()
    return out.detach().cpu(), [a.grad.cpu() if grad else None for a in args]


@HOST
def test_registered_through_public_extension_points():
    import torch._inductor.compile_fx  # noqa: F401  (what every compilation loads; registers musa)
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import (
        get_device_op_overrides,
        get_scheduling_for_device,
        get_wrapper_codegen_for_device,
        init_backend_registration,
    )
    from torch._inductor.codegen.cpp import CppScheduling

    from torch_musa._inductor.backend import MusaDeviceOpOverrides, MusaPythonWrapperCodegen
    from torch_musa._inductor.device_interface import MusaInterface

    init_backend_registration()
    assert get_interface_for_device("musa") is MusaInterface
    assert get_interface_for_device("musa:1") is MusaInterface
    assert get_scheduling_for_device("musa") is CppScheduling
    assert get_wrapper_codegen_for_device("musa") is MusaPythonWrapperCodegen
    assert isinstance(get_device_op_overrides("musa"), MusaDeviceOpOverrides)
    iface = MusaInterface
    assert iface.device_count() == torch.musa.device_count() and iface.is_available()
    assert iface.is_dtype_supported(torch.float32)
    assert iface.get_device_properties(0).name == torch.musa.get_device_name(0)


@pytest.mark.slow
@HOST
def test_registration_waits_for_dynamo_import(subpython):
    # `import torch_musa` must not pay for dynamo/Inductor; they register when imported.
    r = subpython("""
        import sys, torch, torch_musa
        assert "torch._dynamo" not in sys.modules and "torch._inductor" not in sys.modules
        from torch._dynamo.device_interface import get_interface_for_device
        print(get_interface_for_device("musa").__name__)
        import torch._inductor.compile_fx
        from torch._inductor.codegen.common import get_scheduling_for_device
        print(get_scheduling_for_device("musa").__name__)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["MusaInterface", "CppScheduling"]


@HOST
def test_forward_backward_fullgraph_against_eager_and_cpu():
    torch._dynamo.reset()
    x, w = torch.randn(6, 8), torch.randn(8, 5)
    compiled = torch.compile(_fn, fullgraph=True)
    out, grads = _run(compiled, "musa", x, w)
    eager_out, eager_grads = _run(_fn, "musa", x, w)
    cpu_out, cpu_grads = _run(_fn, "cpu", x, w)
    ccpu_out, ccpu_grads = _run(compiled, "cpu", x, w)
    for ref_out, ref_grads in ((eager_out, eager_grads), (cpu_out, cpu_grads)):
        torch.testing.assert_close(out, ref_out)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r)
    # the same generated kernels as the compiled CPU step, over musa memory: bit for bit
    assert torch.equal(out, ccpu_out) and all(map(torch.equal, grads, ccpu_grads))


@HOST
@pytest.mark.requires_devices(2)
def test_device_index_is_guarded_and_outputs_stay_on_it():
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("inductor")
    fn = torch.compile(lambda a: (a * 2).cos() + 1, backend=cnt)
    x = torch.randn(4, 4)
    with torch.no_grad():
        y0 = fn(x.to("musa:0"))
        y1 = fn(x.to("musa:1"))   # another index: recompiles, allocates on musa:1
        fn(x.to("musa:0"))
    assert cnt.frame_count == 2
    assert y0.device == torch.device("musa", 0) and y1.device == torch.device("musa", 1)
    torch.testing.assert_close(y1.cpu(), (x * 2).cos() + 1)


def test_dynamic_shapes_compile_once():
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("inductor")
    fn = torch.compile(lambda a: torch.nn.functional.gelu(a).sum(-1), backend=cnt, dynamic=True)
    with torch.no_grad():
        for n in (5, 7, 11):
            x = torch.randn(n, 3)
            torch.testing.assert_close(fn(x.musa()).cpu(), torch.nn.functional.gelu(x).sum(-1))
    assert cnt.frame_count == 1


@pytest.mark.parametrize("mode", ["max-autotune", "reduce-overhead"])
def test_modes_run(mode):
    # max-autotune: the C++ backend's choices; reduce-overhead: MUSA graphs
    # (tests/compile/test_musagraphs.py checks capture and replay).
    torch._dynamo.reset()
    x = torch.randn(8, 8)
    with torch.no_grad():
        out = torch.compile(lambda a: (a @ a).tanh(), mode=mode)(x.musa())
    torch.testing.assert_close(out.cpu(), (x @ x).tanh())


@HOST
@pytest.mark.requires_profile("s80", reason="a profile without float64")
def test_profile_dtype_limits_hold_in_compiled_code():
    torch._dynamo.reset()
    x = torch.randn(4, device="musa")
    with pytest.raises(Exception, match="does not support"):
        with torch.no_grad():
            torch.compile(lambda a: a.double().exp() * 2)(x)


@pytest.mark.slow
def test_aot_inductor_says_what_is_missing(subpython):
    # In its own interpreter: the failed package keeps the exported module's musa
    # parameters alive for the rest of the process.
    r = subpython("""
        import re, torch, torch_musa
        ep = torch.export.export(torch.nn.Linear(4, 2).musa(), (torch.randn(3, 4, device="musa"),))
        try:
            torch._inductor.aoti_compile_and_package(ep)
        except Exception as e:
            assert re.search("AOTInductor.*not available for the musa device", str(e)), e
            print("refused")
    """)
    assert r.returncode == 0 and "refused" in r.stdout, r.stderr[-3000:]


@pytest.mark.slow
def test_cuda_compat_compiles_and_is_not_rocm(subpython):
    r = subpython("""
        import torch, torch_musa
        assert torch.version.hip is None
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).cuda()
        x = torch.randn(4, 8).cuda()
        y = torch.compile(m)(x)
        y.sum().backward()
        ref = m(x)
        assert y.device.type == "musa" and m[0].weight.grad is not None
        torch.testing.assert_close(y, ref)
        print("ok")
    """, env={"TORCH_MUSA_CUDA_COMPAT": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


@HOST
def test_sdpa_dropout_with_fallback_random_matches_eager_and_cpu():
    # musa's dropout is the CPU's composite (bernoulli_ over empty_like); Inductor's
    # in-place lowering of bernoulli.p ran the draw after its consumers (NaN output).
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()

    def attn(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q * 2, q, dropout_p=0.5)

    x = torch.randn(2, 2, 8, 4)
    results = []
    with inductor_config.patch(fallback_random=True):
        for fn, device in ((torch.compile(attn), "musa"), (attn, "musa"), (attn, "cpu")):
            torch.manual_seed(3)
            results.append(_run(fn, device, x))
    (out, grads), *refs = results
    no_drop = torch.nn.functional.scaled_dot_product_attention(x, x * 2, x)
    assert not out.isnan().any() and not torch.allclose(out, no_drop)  # dropout did drop
    for ref_out, ref_grads in refs:
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(grads[0], ref_grads[0])


@HOST
def test_layer_norm_compiles_to_the_cpu_kernels_bit_for_bit():
    # Inductor picks two-pass vs Welford variance by device name; musa takes the CPU's rule.
    torch._dynamo.reset()
    norm = torch.nn.LayerNorm(64)
    x = torch.randn(16, 64)
    results = []
    for device in ("musa", "cpu"):
        model = torch.compile(norm.to(device))
        results.append(_run(lambda a: model(a).pow(2), device, x))
    (out, grads), (cpu_out, cpu_grads) = results
    assert torch.equal(out, cpu_out) and torch.equal(grads[0], cpu_grads[0])


@HOST
def test_bool_masks_are_stored_and_loaded_lane_by_lane_and_exact():
    # PyTorch's VecMask store to / load from bool was 5x-20x slower than eager's ops;
    # musa's kernels convert lane by lane: same values, tails (13 = 8 + 5) included.
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x = torch.randn(13, 16)
    fn = torch.compile(lambda a, m: (a.relu(), a <= 0, torch.where(m, a, 0.0)))
    (relu, mask, picked), (code,) = run_and_get_code(fn, x.musa(), (x > 0.5).musa())
    assert "is_masked" in code and "bit_cast<float>" in code
    assert torch.equal(relu.cpu(), x.relu()) and torch.equal(mask.cpu(), x <= 0)
    assert torch.equal(picked.cpu(), torch.where(x > 0.5, x, 0.0))
