"""C++ extensions for the musa device, as ``torch.utils.cpp_extension`` builds CUDA ones.

``MUSAExtension`` / ``CppExtension`` (setup.py, with ``BuildExtension``), ``load`` and
``load_inline`` (just in time) are torch's, with the runtime's public headers
(``#include <torch_musa/csrc/core/MUSAGuard.h>``) on the include path and the runtime
library (``libtorch_musa.so``) linked, so that code written for the real torch_musa
(``c10::musa::MUSAGuard``, ``getCurrentMUSAStream``, ``TORCH_LIBRARY_IMPL(..., PrivateUse1,
...)``) compiles and runs on the device. C++ sources build everywhere.

MUSA C sources (``.mu``, with ``.muh`` headers: what ``musa-converter`` makes of ``.cu``/
``.cuh``) need a GPU compiler. Under the cuda driver they compile as CUDA with nvcc (torch's
CUDAExtension); elsewhere asking for them raises an error that names what is missing.
See docs/CPP.md.
"""
from __future__ import annotations

import hashlib
import os
import tempfile

import torch
from torch.utils import cpp_extension as _cpp

from torch_musa.config import CONFIG

__all__ = ["MUSAExtension", "CppExtension", "BuildExtension", "load", "load_inline",
           "include_paths", "library_paths", "MUSA_HOME"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIR = os.path.join(_PACKAGE, "lib")
MUSA_SOURCE_SUFFIXES = (".mu",)
MUSA_HEADER_SUFFIXES = (".muh",)

#: The MUSA toolkit's root (MUSA_HOME, else /usr/local/musa where it exists), as the real
#: torch_musa's. This torch_musa does not compile with it: see ``MUSAExtension``.
MUSA_HOME: str | None = CONFIG.musa_home or (
    "/usr/local/musa" if os.path.isdir("/usr/local/musa") else None)

#: torch's BuildExtension: it builds MUSAExtension and CppExtension as any extension.
BuildExtension = _cpp.BuildExtension


def _runtime_include_dirs() -> list[str]:
    # <torch_musa/csrc/core/Device.h> from the package's parent; the headers' own
    # includes ("core/Device.h") from csrc
    return [os.path.dirname(_PACKAGE), os.path.join(_PACKAGE, "csrc")]


def include_paths(device_type: str = "musa") -> list[str]:
    """torch's include directories (CUDA's too under the cuda driver) and the runtime's:
    the package's parent (``<torch_musa/csrc/core/Device.h>``) and ``torch_musa/csrc``
    (the headers' own includes)."""
    _check_device_type(device_type)
    torch_type = "cuda" if device_type == "musa" and _gpu_compiler_available() else "cpu"
    return _cpp.include_paths(torch_type) + _runtime_include_dirs()


def library_paths(device_type: str = "musa") -> list[str]:
    """torch's library directories and the one of ``libtorch_musa.so``."""
    _check_device_type(device_type)
    torch_type = "cuda" if device_type == "musa" and _gpu_compiler_available() else "cpu"
    return _cpp.library_paths(torch_type) + [_LIBRARY_DIR]


def _check_device_type(device_type: str) -> None:
    if device_type not in ("musa", "cpu"):
        raise ValueError(f"device_type must be 'musa' or 'cpu', not {device_type!r}")


def _link_args() -> list[str]:
    # The rpath finds the runtime library where it is (the one torch_musa._C loaded).
    return [f"-Wl,-rpath,{_LIBRARY_DIR}"]


def _gpu_compiler_available() -> bool:
    """Whether .mu sources can compile here: the cuda driver, with torch built with CUDA and
    CUDA's toolkit found (CUDA_HOME)."""
    return CONFIG.driver == "cuda" and torch.version.cuda is not None and _cpp.CUDA_HOME is not None


def _no_gpu_compiler(what: list[str]) -> RuntimeError:
    shown = ", ".join(os.path.basename(s) for s in what[:3]) + (" ..." if len(what) > 3 else "")
    if CONFIG.driver != "cuda":
        why = (f"the {CONFIG.driver} driver runs kernels on the CPU and has no GPU compiler "
               "(the MUSA toolkit's mcc is not supported by this torch_musa)")
    elif torch.version.cuda is None:
        why = f"the cuda driver needs torch built with CUDA to compile them (torch {torch.__version__})"
    else:
        why = "CUDA's toolkit was not found (set CUDA_HOME to the directory that holds bin/nvcc)"
    return RuntimeError(
        f"MUSA C sources ({shown}) need a GPU toolkit: {why}. Under TORCH_MUSA_DRIVER=cuda "
        "with CUDA's toolkit they compile as CUDA with nvcc; elsewhere build the C++ sources "
        "only (.cpp: CppExtension, or load/load_inline without musa_sources).")


def _as_cuda(source: str, directory: str) -> str:
    """A .cu file in `directory` that includes the .mu `source` (nvcc picks the language
    from the suffix; the include keeps the .mu file's own relative includes working)."""
    source = os.path.abspath(source)
    os.makedirs(directory, exist_ok=True)
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    path = os.path.join(directory, f"{os.path.splitext(os.path.basename(source))[0]}_{digest}.cu")
    text = f'// compiled as CUDA by torch_musa.utils.musa_extension\n#include "{source}"\n'
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)
    return path


def _split_sources(sources, directory: str) -> tuple[list[str], bool]:
    """`sources` with .mu files as .cu wrappers and .muh headers left out; whether any
    kernel source was given. Raises where .mu files cannot compile."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    kernels = [s for s in sources if s.endswith(MUSA_SOURCE_SUFFIXES + (".cu",))]
    if kernels and not _gpu_compiler_available():
        raise _no_gpu_compiler(kernels)
    out = []
    for s in sources:
        if s.endswith(MUSA_HEADER_SUFFIXES + (".cuh",)):
            continue  # headers are included, not compiled
        out.append(_as_cuda(s, directory) if s.endswith(MUSA_SOURCE_SUFFIXES) else s)
    return out, bool(kernels)


def _with_runtime(kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    kwargs["include_dirs"] = list(kwargs.get("include_dirs") or []) + _runtime_include_dirs()
    kwargs["library_dirs"] = list(kwargs.get("library_dirs") or []) + [_LIBRARY_DIR]
    kwargs["libraries"] = list(kwargs.get("libraries") or []) + ["torch_musa"]
    kwargs["extra_link_args"] = list(kwargs.get("extra_link_args") or []) + _link_args()
    return kwargs


def MUSAExtension(name, sources, *args, **kwargs):
    """A setuptools Extension for the musa device (the real torch_musa's MUSAExtension).

    C++ sources build with the runtime's headers and library; ``.mu`` sources compile as
    CUDA under the cuda driver (``.cu`` wrappers under ``build/musa_sources``) and raise
    a clear error elsewhere; ``extra_compile_args["mcc"]`` goes to nvcc then. Other
    arguments are torch's ``CppExtension``/``CUDAExtension``'s.
    """
    directory = os.path.join(os.getcwd(), "build", "musa_sources", name)
    sources, has_kernels = _split_sources(sources, directory)
    flags = kwargs.get("extra_compile_args")
    if isinstance(flags, dict) and "mcc" in flags:
        # MUSA's compiler's flags (musa-converter writes "mcc" for "nvcc") go to nvcc
        flags = {k: v for k, v in flags.items() if k != "mcc"}
        if has_kernels:
            flags.setdefault("nvcc", kwargs["extra_compile_args"]["mcc"])
        kwargs["extra_compile_args"] = flags
    make = _cpp.CUDAExtension if has_kernels else _cpp.CppExtension
    return make(name, sources, *args, **_with_runtime(kwargs))


def CppExtension(name, sources, *args, **kwargs):
    """torch's CppExtension with the runtime's headers and library (no kernel sources)."""
    return _cpp.CppExtension(name, sources, *args, **_with_runtime(kwargs))


def _jit_kwargs(name: str, kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    kwargs["extra_include_paths"] = (list(kwargs.get("extra_include_paths") or [])
                                     + _runtime_include_dirs())
    kwargs["extra_ldflags"] = (list(kwargs.get("extra_ldflags") or [])
                               + [f"-L{_LIBRARY_DIR}", "-ltorch_musa"] + _link_args())
    return kwargs


def _jit_directory(name: str, build_directory: str | None) -> str:
    if build_directory:
        return os.path.join(build_directory, "musa_sources")
    return os.path.join(tempfile.gettempdir(), "torch_musa_sources", name)


def load(name, sources, *args, **kwargs):
    """torch's ``load`` (build and import just in time) for the musa device; ``.mu``
    sources as in ``MUSAExtension``."""
    sources, has_kernels = _split_sources(sources, _jit_directory(name, kwargs.get("build_directory")))
    if has_kernels:
        kwargs.setdefault("with_cuda", True)
    return _cpp.load(name, sources, *args, **_jit_kwargs(name, kwargs))


def load_inline(name, cpp_sources, musa_sources=None, functions=None, *args, cuda_sources=None,
                **kwargs):
    """torch's ``load_inline`` for the musa device: ``cpp_sources`` build with the
    runtime's headers and library; ``musa_sources`` (or ``cuda_sources``) are MUSA C,
    compiled as CUDA under the cuda driver and refused elsewhere."""
    kernels = []
    for group in (musa_sources, cuda_sources):
        if group:
            kernels += [group] if isinstance(group, str) else list(group)
    if kernels and not _gpu_compiler_available():
        raise _no_gpu_compiler([f"{name}: musa_sources"])
    if kernels:
        kwargs.setdefault("with_cuda", True)
    return _cpp.load_inline(name, cpp_sources, kernels or None, None, functions, *args,
                            **_jit_kwargs(name, kwargs))
