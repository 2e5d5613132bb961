"""torch.musa.jiterator: C++ template functors compiled at run time into elementwise ops
(torch.cuda.jiterator's contract: broadcasting, type promotion, noncontiguous inputs,
keyword scalars, several outputs by reference), checked against the same math on the CPU."""
import pytest
import torch

import torch_musa  # noqa: F401

J = torch.musa.jiterator
# The host driver's own words and limits (under the cuda driver CUDA's jiterator answers).
HOST_ONLY = pytest.mark.requires_host_driver(
    "the host compiler's messages and limits (complex dtypes, graph capture)")

AXPY = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }"


def test_docstring_example_broadcasts_and_takes_keyword_scalars():
    f = J._create_jit_fn(AXPY, alpha=1.0)
    a = torch.randn(5, 4, device="musa")
    b = torch.randn(4, device="musa")
    out = f(a, b)  # the default alpha
    assert out.device.type == "musa" and out.shape == (5, 4) and out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), -a.cpu() + b.cpu())
    torch.testing.assert_close(f(a, b, alpha=3.14).cpu(), -a.cpu() + 3.14 * b.cpu())
    at = torch.randn(4, 5, device="musa").t()  # noncontiguous
    assert not at.is_contiguous()
    torch.testing.assert_close(f(at, b, alpha=-2.0).cpu(), -at.cpu() - 2.0 * b.cpu())
    with pytest.raises(KeyError, match="beta is not declared"):
        f(a, b, beta=1.0)


def test_helper_functions_and_cuda_math_names():
    code = "template <typename T> T util_fn(T x, T y) { return ::sin(x) + ::cos(y); }"
    code += "template <typename T> T my_kernel(T x, T y, T val) { return ::min(val, util_fn(x, y)); }"
    f = J._create_jit_fn(code, val=0.5)
    assert f.kernel_name == "my_kernel"
    a = torch.randn(64, device="musa", dtype=torch.float64)
    b = torch.randn(64, device="musa", dtype=torch.float64)
    ref = torch.clamp(torch.sin(a.cpu()) + torch.cos(b.cpu()), max=0.5)
    out = f(a, b)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.cpu(), ref)


def test_type_promotion_follows_torch():
    f = J._create_jit_fn("template <typename T> T add3(T x, T y) { return x + y + T(3); }")
    i = torch.arange(6, device="musa")  # int64
    x = torch.randn(6, device="musa")
    out = f(i, x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), i.cpu() + x.cpu() + 3)
    ii = f(i, torch.ones(6, dtype=torch.int32, device="musa"))
    assert ii.dtype == torch.int64 and ii.cpu().tolist() == [4, 5, 6, 7, 8, 9]
    h = torch.randn(6, device="musa").half()
    oh = f(h, h)  # computed in float, returned as half
    assert oh.dtype == torch.float16
    torch.testing.assert_close(oh.cpu(), (h.cpu().float() * 2 + 3).half())
    assert f(torch.empty(0, 3, device="musa"), x[:3]).shape == (0, 3)


def test_multiple_outputs_by_reference():
    code = ("template <typename T> void sincos(T x, T scale, T& s, T& c) "
            "{ s = scale * ::sin(x); c = scale * ::cos(x); }")
    f = J._create_multi_output_jit_fn(code, num_outputs=2, scale=2.0)
    x = torch.randn(3, 7, device="musa")
    s, c = f(x, scale=0.5)
    torch.testing.assert_close(s.cpu(), 0.5 * torch.sin(x.cpu()))
    torch.testing.assert_close(c.cpu(), 0.5 * torch.cos(x.cpu()))


@HOST_ONLY
def test_errors_name_what_was_wrong():
    f = J._create_jit_fn(AXPY, alpha=1.0)
    with pytest.raises(ValueError, match="must be musa tensors"):
        f(torch.ones(2), torch.ones(2, device="musa"))
    with pytest.raises(ValueError, match="up to|1 to 8"):
        f(*[torch.ones(1, device="musa")] * 9)
    with pytest.raises(ValueError, match="no template function"):
        J._create_jit_fn("float f(float x) { return x; }")
    with pytest.raises(TypeError, match="must be a bool, int or float"):
        J._create_jit_fn(AXPY, alpha="1")
    bad = J._create_jit_fn("template <typename T> T broken(T x) { return x +; }")
    with pytest.raises(RuntimeError, match="did not compile"):
        bad(torch.ones(2, device="musa"))
    with pytest.raises(TypeError, match="not torch.complex64"):
        f(torch.ones(2, dtype=torch.complex64, device="musa"), torch.ones(2, device="musa"))
    x = torch.ones(4, device="musa")
    f(x, x)  # compiled before capture
    g = torch.musa.MUSAGraph()
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with torch.musa.graph(g):
            f(x, x)


# Issue 35, item 8: the compile cache was used even at mode 0777, where any local user could plant
# `<hash>.so` before we dlopen it. Ours is narrowed to 0700; another's, or a link, is refused.
@HOST_ONLY
def test_the_compile_cache_is_private(tmp_path, monkeypatch):
    import os
    import stat
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"torch_musa_jiterator_{os.getuid()}"
    folder.mkdir()
    os.chmod(folder, 0o777)
    f = J._create_jit_fn(f"template <typename T> T private_{os.getpid()}(T x) {{ return x + 1; }}")
    assert f(torch.ones(2, device="musa")).tolist() == [2.0, 2.0]
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    libs = list(folder.glob("*.so"))
    assert libs and all(p.stat().st_uid == os.getuid() and not p.stat().st_mode & 0o022 for p in libs)

    def compile_in(tag):
        g = J._create_jit_fn(f"template <typename T> T {tag}_{os.getpid()}(T x) {{ return x; }}")
        return g(torch.ones(1, device="musa"))

    folder.rename(tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RuntimeError, match="is not a directory"):
        compile_in("linked")
    folder.unlink()
    if os.getuid() == 0:  # only root can give a folder away
        folder.mkdir(mode=0o700)
        os.chown(folder, 65534, 65534)
        with pytest.raises(RuntimeError, match="belongs to another user"):
            compile_in("foreign")


def test_a_planted_library_is_not_loaded(tmp_path):
    import os
    from torch_musa.core import jiterator as impl
    lib = tmp_path / "x.so"
    assert not impl._ours(str(lib))
    lib.write_bytes(b"")
    os.chmod(lib, 0o755)
    assert impl._ours(str(lib))
    os.chmod(lib, 0o777)  # writable by others: compiled again over it
    assert not impl._ours(str(lib))
    if os.getuid() == 0:
        os.chmod(lib, 0o755)
        os.chown(lib, 65534, 65534)
        assert not impl._ours(str(lib))
