"""The C++ deployment demo (examples/cpp): a model traced on musa in Python, built
with CMake through find_package(TorchMusa), run on musa:0 by a C++ program without
Python, prints the numbers Python printed."""
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


@pytest.mark.timeout(400)
def test_cpp_program_runs_a_traced_model_on_musa(tmp_path):
    cmake = _tool("cmake")
    assert cmake, "cmake is missing: pip install cmake (the test extra lists it)"
    model = tmp_path / "model.pt"
    traced = subprocess.run([sys.executable, os.path.join(EXAMPLE, "trace_model.py"), str(model)],
                            capture_output=True, text=True, timeout=120)
    assert traced.returncode == 0, traced.stderr
    expected = _values(traced.stdout)
    assert len(expected) == 10 and abs(sum(expected) - 2.0) < 1e-5  # two softmax rows

    build = tmp_path / "build"
    prefix = f"{torch.utils.cmake_prefix_path};{torch.musa.cmake_prefix_path}"
    configure = [cmake, "-S", EXAMPLE, "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                 "-DCMAKE_BUILD_TYPE=Release"]
    ninja = _tool("ninja")
    if ninja:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    for cmd in (configure, [cmake, "--build", str(build)]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    # No Python in the program's environment, nor in its libraries.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    program = str(build / "musa_deploy")
    libs = [line.split()[0] for line in
            subprocess.run(["ldd", program], capture_output=True, text=True).stdout.splitlines()]
    assert "libtorch_musa.so" in libs, libs
    assert not [lib for lib in libs if "python" in lib], libs  # libtorch_python, libpython
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
