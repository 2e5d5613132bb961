"""Builds the runtime core (torch_musa._C) against the installed torch.

The operator registrations are generated first from
torch_musa/ops/musa_functions.yaml (torch_musa/ops/codegen.py).
"""
import glob
import os
import sys

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join("build", "generated")

sys.path.insert(0, os.path.join(HERE, "torch_musa", "ops"))
import codegen  # noqa: E402  (imported by path: the package itself is not built yet)

codegen.write(codegen.Path(GENERATED), codegen.Path(HERE, "torch_musa", "ops", "_generated.py"))
sys.path.pop(0)

csrc = os.path.join("torch_musa", "csrc")
sources = (
    sorted(glob.glob(os.path.join(csrc, "*.cpp")))
    + sorted(glob.glob(os.path.join(GENERATED, "*.cpp")))
    + [os.path.join("torch_musa", "distributed", "csrc", "mccl_ops.cpp")]
)

setup(
    ext_modules=[
        CppExtension(
            "torch_musa._C",
            sources,
            include_dirs=[os.path.join(HERE, csrc)],
            extra_compile_args=["-O2", "-g0", "-std=c++20", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
