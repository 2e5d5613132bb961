"""The C++ deployment demos (examples/cpp), built with CMake through
find_package(TorchMusa) and run on musa:0 by C++ programs without Python: a model
traced on musa (TorchScript), and the same model exported and compiled into an
AOTInductor package. Each prints the numbers Python printed."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

import torch_musa  # noqa: F401

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "cpp")


def _tool(name: str) -> str | None:
    """`name` from PATH, else from the venv (the pip wheels of the test extra)."""
    found = shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    if found is None and name == "cmake":
        try:
            import cmake  # the pip wheel
        except ImportError:
            return None
        found = os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    return found


def _values(text: str) -> list[float]:
    return [float(line) for line in text.split()]


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The CMake project of examples/cpp, built: its build folder."""
    cmake = _tool("cmake")
    assert cmake, "cmake is missing: pip install cmake (the test extra lists it)"
    build = tmp_path_factory.mktemp("cpp") / "build"
    prefix = f"{torch.utils.cmake_prefix_path};{torch.musa.cmake_prefix_path}"
    configure = [cmake, "-S", EXAMPLE, "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                 "-DCMAKE_BUILD_TYPE=Release"]
    ninja = _tool("ninja")
    if ninja:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    for cmd in (configure, [cmake, "--build", str(build)]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return build


# No Python in the programs' environment, nor in their libraries.
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def _check_links_no_python(program: str) -> None:
    libs = [line.split()[0] for line in
            subprocess.run(["ldd", program], capture_output=True, text=True).stdout.splitlines()]
    assert "libtorch_musa.so" in libs, libs
    assert not [lib for lib in libs if "python" in lib], libs  # libtorch_python, libpython


@pytest.mark.timeout(600)
def test_cpp_program_runs_a_traced_model_on_musa(tmp_path, programs):
    model = tmp_path / "model.pt"
    traced = subprocess.run([sys.executable, os.path.join(EXAMPLE, "trace_model.py"), str(model)],
                            capture_output=True, text=True, timeout=120)
    assert traced.returncode == 0, traced.stderr
    expected = _values(traced.stdout)
    assert len(expected) == 10 and abs(sum(expected) - 2.0) < 1e-5  # two softmax rows

    env = ENV
    program = str(programs / "musa_deploy")
    _check_links_no_python(program)
    ran = subprocess.run([program, str(model)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert f"ran on musa:0 of {torch.musa.device_count()} musa device(s)" in ran.stderr
    assert _values(ran.stdout) == expected  # the same kernels: the same bits

    # The program reads MUSA_VISIBLE_DEVICES as Python does (a device count).
    one = subprocess.run([program, str(model)], capture_output=True, text=True,
                         env={**env, "MUSA_VISIBLE_DEVICES": "0"}, timeout=120)
    assert one.returncode == 0 and "of 1 musa device(s)" in one.stderr, one.stderr
    assert _values(one.stdout) == expected


@pytest.mark.timeout(600)
def test_cpp_program_runs_an_aoti_package_on_musa(tmp_path, programs):
    package = tmp_path / "model.pt2"
    made = subprocess.run([sys.executable, os.path.join(EXAMPLE, "aoti_package_model.py"),
                           str(package)], capture_output=True, text=True, timeout=400)
    assert made.returncode == 0, made.stderr[-3000:]
    expected = _values(made.stdout)
    assert len(expected) == 10 and abs(sum(expected) - 2.0) < 1e-5  # two softmax rows

    program = str(programs / "musa_aoti")
    _check_links_no_python(program)
    ran = subprocess.run([program, str(package)], capture_output=True, text=True, env=ENV,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "package device: musa" in ran.stderr, ran.stderr
    assert f"ran on musa:0 of {torch.musa.device_count()} musa device(s)" in ran.stderr
    assert _values(ran.stdout) == expected  # the same compiled model: the same bits
