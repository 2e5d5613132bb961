"""A CUDA extension laid out as PyTorch's extension tutorial (pytorch/extension-cpp) lays
out its own: a C++ file with the op's schema and CPU kernel, a ``csrc/cuda/*.cu`` kernel
registered for CUDA, and a setup.py that globs ``os.path.join(src, "cuda")`` for ``*.cu`` and
builds CUDAExtension where CUDA is available. musa-converter converts it, and the converted
project builds with its own setup.py: under the host driver the C++ part (the CPU kernel,
reached through the fallback), under the cuda driver the .mu kernel as well, compiled as
CUDA and registered for musa.

Converting extension-cpp itself found two silent failures, fixed and pinned here: the
folder name "cuda" in the glob became "musa" (no kernel source found, no error), and the
kernel stayed registered for CUDA while its device checks became PrivateUse1 ones."""
import os
import subprocess
import sys
import textwrap

import pytest

from torch_musa.config import CONFIG

pytestmark = pytest.mark.slow

OPS_CPP = r"""
#include <torch/extension.h>

namespace {
at::Tensor scale_add_cpu(const at::Tensor& a, const at::Tensor& b, double s) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == at::kFloat, "scale_add: float, same sizes");
  at::Tensor ac = a.contiguous(), bc = b.contiguous(), out = at::empty_like(ac);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] * float(s) + pb[i];
  return out;
}
}  // namespace

TORCH_LIBRARY(convext, m) { m.def("scale_add(Tensor a, Tensor b, float s) -> Tensor"); }
TORCH_LIBRARY_IMPL(convext, CPU, m) { m.impl("scale_add", &scale_add_cpu); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
"""

KERNEL_CU = r"""
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <torch/library.h>
#include <ATen/ATen.h>

__global__ void scale_add_kernel(int64_t n, const float* a, const float* b, float s, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * s + b[i];
}

at::Tensor scale_add_cuda(const at::Tensor& a, const at::Tensor& b, double s) {
  TORCH_CHECK(a.device().type() == at::DeviceType::CUDA, "scale_add_cuda: a CUDA tensor");
  at::Tensor ac = a.contiguous(), bc = b.contiguous(), out = at::empty_like(ac);
  const int64_t n = ac.numel();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  scale_add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(
      n, ac.data_ptr<float>(), bc.data_ptr<float>(), float(s), out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

TORCH_LIBRARY_IMPL(convext, CUDA, m) { m.impl("scale_add", &scale_add_cuda); }
"""

SETUP_PY = r"""
import glob
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, "convext", "csrc")
sources = glob.glob(os.path.join(src, "*.cpp"))
kernels = glob.glob(os.path.join(os.path.join(src, "cuda"), "*.cu"))
use_cuda = torch.cuda.is_available() and CUDA_HOME is not None
make = CUDAExtension if use_cuda else CppExtension
setup(name="convext", packages=["convext"],
      ext_modules=[make("convext._C", sources + (kernels if use_cuda else []),
                        extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2"]})],
      cmdclass={"build_ext": BuildExtension})
"""

RUN = """
import sys, torch, torch_musa
sys.path.insert(0, {root!r})
import convext._C  # registers the op
a, b = torch.randn(1000), torch.randn(1000)
want = torch.ops.convext.scale_add(a, b, 2.5)
got = torch.ops.convext.scale_add(a.to("musa"), b.to("musa"), 2.5)
assert got.device.type == "musa", got.device
torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
torch.testing.assert_close(want, a * 2.5 + b)
print(torch._C._dispatch_has_kernel_for_dispatch_key("convext::scale_add", "PrivateUse1"))
"""


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).lstrip())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    base = tmp_path_factory.mktemp("convext")
    orig, conv = str(base / "orig"), str(base / "conv")
    _write(orig, {"setup.py": SETUP_PY, "convext/__init__.py": "",
                  "convext/csrc/ops.cpp": OPS_CPP, "convext/csrc/cuda/scale_add.cu": KERNEL_CU})
    r = subprocess.run([sys.executable, "-m", "torch_musa.utils.musa_converter", "-r", orig,
                        "-o", conv, "--no-progress", "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return conv


def test_the_converted_build_script_still_finds_the_kernels(converted):
    setup_py = open(os.path.join(converted, "setup.py")).read()
    assert 'os.path.join(src, "cuda")' in setup_py  # the folder kept its name
    assert '"*.mu"' in setup_py and "MUSAExtension" in setup_py and "MUSA_HOME" in setup_py
    assert os.listdir(os.path.join(converted, "convext", "csrc", "cuda")) == ["scale_add.mu"]
    kernel = open(os.path.join(converted, "convext", "csrc", "cuda", "scale_add.mu")).read()
    assert "TORCH_LIBRARY_IMPL(convext, PrivateUse1, m)" in kernel
    assert "a.device().type() == at::DeviceType::PrivateUse1" in kernel
    assert "musaStream_t stream = at::musa::getCurrentMUSAStream();" in kernel


def test_the_converted_extension_builds_and_runs_on_musa(converted):
    env = {**os.environ, "MAX_JOBS": "2"}
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=converted,
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    r = subprocess.run([sys.executable, "-c", RUN.format(root=converted)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    # The .mu kernel is built and serves musa tensors only where it can compile (the cuda
    # driver); under the host driver the CPU kernel serves them through the fallback.
    assert r.stdout.split()[-1] == str(CONFIG.driver == "cuda")
