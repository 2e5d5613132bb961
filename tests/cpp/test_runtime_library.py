"""The runtime library (torch_musa/lib/libtorch_musa.so) is usable without Python:
it needs libtorch and libc10 only, and loading it registers the musa device;
torch_musa._C is a binding layer linked against it."""
import os
import subprocess

import pytest
import torch

import torch_musa

PACKAGE = os.path.dirname(torch_musa.__file__)
LIBRARY = os.path.join(PACKAGE, "lib", "libtorch_musa.so")


def _dynamic(path: str) -> str:
    return subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout


def test_library_needs_no_python():
    # NEEDED entries only: the runpath may name a site-packages/python3.x directory
    needed = [line.split("[", 1)[1].rstrip("]") for line in _dynamic(LIBRARY).splitlines()
              if "(NEEDED)" in line]
    assert "libtorch_cpu.so" in needed and "libc10.so" in needed, needed
    assert not [n for n in needed if "python" in n.lower()], needed  # no libtorch_python/libpython
    undefined = subprocess.run(["nm", "-D", "--undefined-only", LIBRARY], capture_output=True,
                               text=True, check=True).stdout.split()
    python_symbols = [s for s in undefined if s.startswith(("Py", "_Py", "THP"))]
    assert not python_symbols, python_symbols[:10]


def test_bindings_link_against_the_library():
    dynamic = _dynamic(torch_musa._C.__file__)
    assert "[libtorch_musa.so]" in dynamic
    assert "$ORIGIN/lib" in dynamic


@pytest.mark.slow
def test_loading_the_library_registers_the_device(subpython):
    # torch alone (no torch_musa import, no autoload), then the library by path:
    # the device, its kernels and the fallback come from its initializers. (Python's
    # tensor factories import torch.<device>: an empty module stands in for torch.musa.)
    last = torch.musa.device_count() - 1  # not the current device
    r = subpython(f"""
        import ctypes, types, torch
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        ctypes.CDLL({LIBRARY!r}, mode=ctypes.RTLD_GLOBAL)
        assert torch._C._get_privateuse1_backend_name() == "musa"
        torch._register_device_module("musa", types.ModuleType("torch.musa"))
        x = torch.arange(6.0, device="musa:{last}").reshape(2, 3)
        y = torch.nn.functional.softmax(x * 2, dim=1)   # a kernel and the fallback
        assert y.device == torch.device("musa", {last}), y.device
        print(y.cpu().tolist())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    expected = torch.nn.functional.softmax(torch.arange(6.0).reshape(2, 3) * 2, dim=1)
    got = torch.tensor(eval(r.stdout.strip().splitlines()[-1]))
    torch.testing.assert_close(got, expected)


def test_cmake_package_is_shipped():
    assert torch.musa.cmake_prefix_path == torch_musa.core.cmake_prefix_path
    config_dir = os.path.join(torch.musa.cmake_prefix_path, "TorchMusa")
    with open(os.path.join(config_dir, "TorchMusaConfigVersion.cmake")) as f:
        assert f'set(PACKAGE_VERSION "{torch_musa.__version__}")' in f.read()
    with open(os.path.join(config_dir, "TorchMusaConfig.cmake")) as f:
        config = f.read()
    assert "add_library(torch_musa SHARED IMPORTED)" in config
    assert os.path.isfile(os.path.join(PACKAGE, "csrc", "core", "Device.h"))
