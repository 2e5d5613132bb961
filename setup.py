"""Builds the runtime library (torch_musa/lib/libtorch_musa.so, no Python) and its
Python bindings (torch_musa._C) against the installed torch.

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
bindings = os.path.join(csrc, "python")
# Linked last: its initializer registers the device after every other one ran.
registration = os.path.join(csrc, "core", "Registration.cpp")
# The runtime library (torch_musa/lib/libtorch_musa.so): every runtime source but
# the Python bindings and the cuda driver's (which needs CUDA, below). It links
# against libtorch and libc10 only, so that a C++ program has the device without
# Python; --no-undefined makes any Python symbol a link error.
runtime_sources = (
    sorted(f for f in glob.glob(os.path.join(csrc, "**", "*.cpp"), recursive=True)
           if not f.startswith((cuda_driver, bindings)) and f != registration)
    + sorted(glob.glob(os.path.join(GENERATED, "*.cpp")))
)
binding_sources = sorted(glob.glob(os.path.join(bindings, "*.cpp")))
distributed_sources = sorted(glob.glob(os.path.join("torch_musa", "distributed", "csrc", "*.cpp")))
with_cuda = (
    torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.environ.get("TORCH_MUSA_BUILD_CUDA", "1") != "0"
)
RuntimeExtension = CppExtension
macros = []
if with_cuda:
    RuntimeExtension = CUDAExtension
    runtime_sources += sorted(glob.glob(os.path.join(cuda_driver, "*.cpp")))
    macros.append(("TORCH_MUSA_WITH_CUDA", None))
runtime_sources.append(registration)

RUNTIME = "torch_musa.lib.libtorch_musa"
# The C++ standard is the one torch itself was built with (torch's build helpers
# pass it: C++20 for 2.13, C++17 for 2.11); forcing another mismatches c10's
# inline code and crashed the first c10::str on the GPU machine.
# -fno-semantic-interposition and -Bsymbolic-functions (the runtime's link): the
# library's own calls bind inside it, not through the PLT (mm over 8x8 on the host
# driver: 8,172 -> 8,096 instructions per call under callgrind).
CXX_FLAGS = ["-O2", "-g0", "-fno-semantic-interposition"]


class BuildExtensions(BuildExtension.with_options(use_ninja=True)):
    """torch's BuildExtension, building the runtime as a plain shared library
    (libtorch_musa.so, no Python ABI suffix) that ``_C`` links against."""

    def get_ext_filename(self, fullname):
        # distutils asks with the last component only, setuptools with the whole name
        if fullname in (RUNTIME, RUNTIME.rsplit(".", 1)[1]):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def copy_extensions_to_source(self):
        # torch_musa/lib is no package: the in-place copy needs the folder made
        os.makedirs(os.path.join(HERE, *RUNTIME.split(".")[:-1]), exist_ok=True)
        super().copy_extensions_to_source()

    def build_extension(self, ext):
        if ext.name == RUNTIME:
            # CppExtension/CUDAExtension add libtorch_python for Python modules.
            ext.libraries = [lib for lib in ext.libraries if lib != "torch_python"]
        elif ext.name == "torch_musa._C":
            ext.library_dirs.append(os.path.dirname(self.get_ext_fullpath(RUNTIME)))
        super().build_extension(ext)


runtime = RuntimeExtension(
    RUNTIME,
    runtime_sources,
    include_dirs=[os.path.join(HERE, csrc)],
    define_macros=macros,
    # Default visibility: the library's symbols are its C++ API (the headers
    # under torch_musa/csrc, for extensions and programs).
    extra_compile_args={"cxx": CXX_FLAGS},
    # The rpath finds libtorch next to an installed package (site-packages/torch/lib), and
    # where this build found it (a checkout's in-place build): a C++ program's own runpath
    # does not reach the library's dependencies that it does not link itself (libc10_cuda
    # under the cuda driver: the H200 run's deployment test could not start).
    extra_link_args=["-Wl,--no-undefined", "-Wl,-soname,libtorch_musa.so", "-Wl,-Bsymbolic-functions",
                     "-Wl,-rpath,$ORIGIN/../../torch/lib",
                     "-Wl,-rpath," + os.path.join(os.path.dirname(torch.__file__), "lib")]
    + (["-Wl,-rpath," + os.path.join(CUDA_HOME, "lib64")] if with_cuda else []),
)
runtime.libraries = [lib for lib in runtime.libraries if lib != "torch_python"]

setup(
    ext_modules=[
        runtime,
        # The Python bindings, a thin layer over the runtime library (found next
        # to it through the rpath).
        CppExtension(
            "torch_musa._C",
            binding_sources,
            include_dirs=[os.path.join(HERE, csrc)],
            define_macros=macros,
            libraries=["torch_musa"],
            extra_compile_args={"cxx": CXX_FLAGS + ["-fvisibility=hidden"]},
            extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
        ),
        # The mccl backend's C++, a module above the runtime (it reaches the
        # runtime through the capsule torch_musa._C exports).
        CppExtension(
            "torch_musa.distributed._C",
            distributed_sources,
            extra_compile_args={"cxx": CXX_FLAGS + ["-fvisibility=hidden"]},
        ),
    ],
    cmdclass={"build_ext": BuildExtensions},
)
