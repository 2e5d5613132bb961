"""Builds the runtime core (torch_musa._C) against the installed torch."""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

sources = sorted(glob.glob(os.path.join("torch_musa", "csrc", "*.cpp")))

setup(
    ext_modules=[
        CppExtension(
            "torch_musa._C",
            sources,
            extra_compile_args=["-O2", "-std=c++17", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
