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
import re
import tempfile

import torch
from torch.utils import cpp_extension as _cpp

from torch_musa._driver import KERNEL_DEVICE, NAME
from torch_musa.config import CONFIG

__all__ = ["MUSAExtension", "CppExtension", "BuildExtension", "load", "load_inline",
           "include_paths", "library_paths", "MUSA_HOME"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIR = os.path.join(_PACKAGE, "lib")
MUSA_SOURCE_SUFFIXES = (".mu",)
MUSA_HEADER_SUFFIXES = (".muh",)

def _gpu_compiler_available() -> bool:
    """Whether .mu sources can compile here: kernels run on CUDA (the cuda driver), with
    torch built with CUDA and CUDA's toolkit found (CUDA_HOME)."""
    return KERNEL_DEVICE == "cuda" and torch.version.cuda is not None and _cpp.CUDA_HOME is not None


#: The toolkit that compiles MUSA C, as the real torch_musa's MUSA_HOME: MUSA_HOME, else
#: /usr/local/musa where it exists, else under the cuda driver CUDA's toolkit (.mu sources
#: compile as CUDA there), so that a converted setup.py's ``MUSA_HOME is not None`` picks
#: MUSAExtension with its kernels exactly where they can build.
MUSA_HOME: str | None = CONFIG.musa_home or (
    "/usr/local/musa" if os.path.isdir("/usr/local/musa") else None) or (
    _cpp.CUDA_HOME if _gpu_compiler_available() else None)

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


def _no_gpu_compiler(what: list[str]) -> RuntimeError:
    shown = ", ".join(os.path.basename(s) for s in what[:3]) + (" ..." if len(what) > 3 else "")
    if KERNEL_DEVICE != "cuda":
        why = (f"the {NAME} driver runs kernels on the CPU and has no GPU compiler "
               "(the MUSA toolkit's mcc is not supported by this torch_musa)")
    elif torch.version.cuda is None:
        why = f"the cuda driver needs torch built with CUDA to compile them (torch {torch.__version__})"
    else:
        why = "CUDA's toolkit was not found (set CUDA_HOME to the directory that holds bin/nvcc)"
    return RuntimeError(
        f"MUSA C sources ({shown}) need a GPU toolkit: {why}. Under TORCH_MUSA_DRIVER=cuda "
        "with CUDA's toolkit they compile as CUDA with nvcc; elsewhere build the C++ sources "
        "only (.cpp: CppExtension, or load/load_inline without musa_sources).")


def _write(path: str, text: str) -> None:
    """Write only what changed (an unchanged file keeps its time: no rebuild)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


_MACRO = re.compile(r"[A-Za-z_]\w*")


def musa_as_cuda_names() -> dict[str, str]:
    """MUSA C's names that compile as CUDA's under the cuda driver, from musa-converter's
    table read backwards: the runtime API (musaMalloc, musaStream_t, ...), the
    preprocessor and check macros (__MUSA_ARCH__, C10_MUSA_KERNEL_LAUNCH_CHECK) and the
    half/bfloat16 types. Names the runtime's headers define for themselves (MUSAStream,
    getCurrentMUSAStream, the at::musa and c10::musa namespaces) are not among them."""
    from torch_musa.cuda_mapping import load_table

    out = {}
    for cuda, (musa, rule) in load_table().c_symbols.items():
        plain = _MACRO.fullmatch(cuda) and _MACRO.fullmatch(musa) and cuda != musa
        if plain and (rule != "c.symbol" or musa.isupper() or musa.startswith(("__", "mt_"))):
            out[musa] = cuda
    return out


def _shim_headers(directory: str) -> str:
    """An include folder that makes musa-converter's MUSA C compile as CUDA: for each
    header the converter maps (cuda_runtime.h -> musa_runtime.h, c10/cuda/CUDAException.h
    -> torch_musa/csrc/core/MUSAException.h) that the runtime does not provide, a header
    of that name including CUDA's, and musa_as_cuda.h with the names (see
    musa_as_cuda_names). The folder, for the include path."""
    from torch_musa.cuda_mapping import load_table

    root = os.path.join(directory, "musa_as_cuda")
    names = musa_as_cuda_names()
    lines = ["// Generated by torch_musa.utils.musa_extension from musa-converter's table:",
             "// MUSA C's names as CUDA's, for .mu sources compiled by nvcc (the cuda driver).",
             "#pragma once", "#include <cuda_runtime.h>"]
    for musa, cuda in sorted(names.items()):
        if musa in ("__MUSACC__", "__MUSA_ARCH__", "__MUSACC_RTC__", "__MUSA_ARCH_LIST__"):
            lines += [f"#if defined({cuda}) && !defined({musa})", f"#define {musa} {cuda}", "#endif"]
        else:
            lines.append(f"#define {musa} {cuda}")
    _write(os.path.join(root, "musa_as_cuda.h"), "\n".join(lines) + "\n")
    for cuda_header, musa_header in load_table().c_headers.items():
        if cuda_header == musa_header or os.path.exists(os.path.join(os.path.dirname(_PACKAGE), musa_header)):
            continue
        _write(os.path.join(root, musa_header),
               "// Generated: MUSA C compiled as CUDA by torch_musa.utils.musa_extension\n"
               f"#pragma once\n#include <{cuda_header}>\n#include \"musa_as_cuda.h\"\n")
    return root


def _as_cuda(source: str, directory: str) -> str:
    """A .cu file in `directory` that includes the .mu `source` (nvcc picks the language
    from the suffix; the include keeps the .mu file's own relative includes working),
    after the names that make MUSA C compile as CUDA (``_shim_headers``)."""
    source = os.path.abspath(source)
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    path = os.path.join(directory, f"{os.path.splitext(os.path.basename(source))[0]}_{digest}.cu")
    _write(path, "// compiled as CUDA by torch_musa.utils.musa_extension\n"
                 f'#include "musa_as_cuda.h"\n#include "{source}"\n')
    return path


def _split_sources(sources, directory: str) -> tuple[list[str], str | None]:
    """`sources` with .mu files as .cu wrappers and .muh headers left out, and where any
    kernel source was given, the include folder that makes MUSA C compile as CUDA (else
    None). Raises where .mu files cannot compile."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    kernels = [s for s in sources if s.endswith(MUSA_SOURCE_SUFFIXES + (".cu",))]
    if kernels and not _gpu_compiler_available():
        raise _no_gpu_compiler(kernels)
    out = []
    for s in sources:
        if s.endswith(MUSA_HEADER_SUFFIXES + (".cuh",)):
            continue  # headers are included, not compiled
        out.append(_as_cuda(s, directory) if s.endswith(MUSA_SOURCE_SUFFIXES) else s)
    return out, (_shim_headers(directory) if kernels else None)


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
    sources, shim = _split_sources(sources, directory)
    has_kernels = shim is not None
    if has_kernels:
        kwargs["include_dirs"] = [shim] + list(kwargs.get("include_dirs") or [])
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
    sources, shim = _split_sources(sources, _jit_directory(name, kwargs.get("build_directory")))
    if shim is not None:
        kwargs.setdefault("with_cuda", True)
        kwargs["extra_include_paths"] = [shim] + list(kwargs.get("extra_include_paths") or [])
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
        shim = _shim_headers(_jit_directory(name, kwargs.get("build_directory")))
        kwargs["extra_include_paths"] = [shim] + list(kwargs.get("extra_include_paths") or [])
        kernels = ['#include "musa_as_cuda.h"\n' + k for k in kernels]
    return _cpp.load_inline(name, cpp_sources, kernels or None, None, functions, *args,
                            **_jit_kwargs(name, kwargs))
