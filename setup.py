"""Builds the runtime core (torch_musa._C) against the installed torch.

The operator registrations are generated first from
torch_musa/ops/musa_functions.yaml (torch_musa/ops/codegen.py). Where the
installed torch has CUDA and a CUDA toolkit is found, the cuda driver
(torch_musa/csrc/driver/cuda) is compiled in as well; TORCH_MUSA_BUILD_CUDA=0 leaves
it out.
"""
import glob
import os
import sys

from setuptools import setup

# Building must not load the package being built (torch autoloads an installed
# torch_musa, whose extensions may be stale or missing until this build ends).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
import torch  # noqa: E402
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join("build", "generated")

sys.path.insert(0, os.path.join(HERE, "torch_musa", "ops"))
import codegen  # noqa: E402  (imported by path: the package itself is not built yet)

codegen.write(codegen.Path(GENERATED), codegen.Path(HERE, "torch_musa", "ops", "_generated.py"))
sys.path.pop(0)

csrc = os.path.join("torch_musa", "csrc")
cuda_driver = os.path.join(csrc, "driver", "cuda")
# Every runtime source but the cuda driver's, which needs CUDA (below).
sources = (
    sorted(f for f in glob.glob(os.path.join(csrc, "**", "*.cpp"), recursive=True)
           if not f.startswith(cuda_driver))
    + sorted(glob.glob(os.path.join(GENERATED, "*.cpp")))
)
distributed_sources = sorted(glob.glob(os.path.join("torch_musa", "distributed", "csrc", "*.cpp")))
with_cuda = (
    torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.environ.get("TORCH_MUSA_BUILD_CUDA", "1") != "0"
)
Extension = CppExtension
macros = []
if with_cuda:
    Extension = CUDAExtension
    sources += sorted(glob.glob(os.path.join(cuda_driver, "*.cpp")))
    macros.append(("TORCH_MUSA_WITH_CUDA", None))

setup(
    ext_modules=[
        Extension(
            "torch_musa._C",
            sources,
            include_dirs=[os.path.join(HERE, csrc)],
            define_macros=macros,
            # The C++ standard is the one torch itself was built with (torch's
            # build helpers pass it: C++20 for 2.13, C++17 for 2.11); forcing
            # another mismatches c10's inline code and crashed the first
            # c10::str on the GPU machine.
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"]},
        ),
        # The mccl backend's C++, a module above the runtime (it reaches the
        # runtime through the capsule torch_musa._C exports).
        CppExtension(
            "torch_musa.distributed._C",
            distributed_sources,
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"]},
        ),
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
