"""``torch.musa.jiterator``: elementwise kernels written as a C++ template functor and
compiled at run time (torch.cuda.jiterator's ``_create_jit_fn`` and
``_create_multi_output_jit_fn``).

On the host driver musa memory is host memory and kernels run on the CPU, so the functor
is compiled by the host's C++ compiler (``c++``) into a small shared library, once per
functor, compute type, arity and keyword-argument types (kept in memory and in a
per-user folder under the temporary directory), and run over the tensors' memory in a
loop. As on CUDA: inputs broadcast and promote to a common dtype, noncontiguous inputs
are accepted, keyword arguments are runtime scalars (``double``, ``int64_t`` or ``bool``),
the last template function of the code is the entry, up to 8 inputs and 8 outputs.
Differences: half and bfloat16 are computed in float (the result is cast back), complex
dtypes are not served, there is no autograd (CUDA's has none either), and a call during
graph capture raises (the loop runs outside the dispatcher, so a graph could not replay
it). Under the cuda driver musa memory is CUDA memory: the call is torch.cuda's jiterator
(NVRTC) over CUDA aliases of the musa tensors, and its results come back as musa tensors
sharing their memory.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from typing import Any, Callable

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa.core import _lazy
from torch_musa.core.graphs import is_current_stream_capturing

__all__: list[str] = []

_MAX_ARGS = 8
# compute dtype -> the C++ type the functor is instantiated with
_CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "int64_t",
    torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "bool",
}
_ENTRY = re.compile(r"template\s*<[^{}]*?>\s*[\w:]+\s+(\w+)\s*\(", re.DOTALL)

# The names CUDA device code reaches in the global namespace (::min, ::max, ::sin, ...).
_PRELUDE = """#include <math.h>
#include <stdint.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
template <typename A, typename B> inline auto min(A a, B b) { return a < b ? a : b; }
template <typename A, typename B> inline auto max(A a, B b) { return a < b ? b : a; }
"""

# torch.cuda's launcher (CUDA wheels only), bound here: cuda_compat rebinds torch.cuda's names.
_CUDA_JITERATOR = getattr(torch._C, "_cuda_jiterator_compile_and_launch_kernel", None)
_lock = threading.Lock()
_libs: dict[str, Any] = {}


def _entry_name(code_string: str) -> str:
    names = _ENTRY.findall(code_string)
    if not names:
        raise ValueError("jiterator: no template function found in the code; it must look like "
                         f"'template <typename T> T name(T x, ...) {{ ... }}', got:\n{code_string}")
    return names[-1]  # as on CUDA, the last function is the entry


def _scalar_ctype(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64_t"
    if isinstance(value, float):
        return "double"
    raise TypeError(f"jiterator: keyword argument {name!r} must be a bool, int or float, "
                    f"got {type(value).__name__}")


def _source(code: str, entry: str, ctype: str, n_in: int, extra: list[str], n_out: int,
            by_ref: bool) -> str:
    lines = [_PRELUDE, code, "", 'extern "C" void musa_jiterator_run(long long n, void** in, '
             'void** out, void** extra) {', f"  using T = {ctype};"]
    lines += [f"  const T* i{k} = static_cast<const T*>(in[{k}]);" for k in range(n_in)]
    lines += [f"  T* o{k} = static_cast<T*>(out[{k}]);" for k in range(n_out)]
    lines += [f"  const {t} e{k} = *static_cast<const {t}*>(extra[{k}]);"
              for k, t in enumerate(extra)]
    args = [f"i{k}[j]" for k in range(n_in)] + [f"e{k}" for k in range(len(extra))]
    if by_ref:
        call = f"{entry}<T>({', '.join(args + [f'o{k}[j]' for k in range(n_out)])});"
    else:
        call = f"o0[j] = static_cast<T>({entry}<T>({', '.join(args)}));"
    lines += ["  for (long long j = 0; j < n; ++j) {", f"    {call}", "  }", "}", ""]
    return "\n".join(lines)


def _compiler() -> str:
    for cxx in ("c++", "g++", "clang++"):
        if shutil.which(cxx):
            return cxx
    raise RuntimeError("jiterator needs a C++ compiler on the host driver (c++, g++ or clang++ "
                       "on PATH); none was found")


def _private_folder() -> str:
    """The compile cache, ``$TMPDIR/torch_musa_jiterator_<uid>``: libraries are loaded from
    here, so it must be a directory (not a link) of this user's that no one else can write.
    One of ours with a wider mode (created by hand, or by an older version) is narrowed to 0700;
    anyone else's is refused."""
    folder = os.path.join(tempfile.gettempdir(), f"torch_musa_jiterator_{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"jiterator: {folder} is not a directory (a link or a file); remove it")
    if st.st_uid != os.getuid():
        raise RuntimeError(f"jiterator: {folder} belongs to another user (uid {st.st_uid}); remove it")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


def _ours(path: str) -> bool:
    """Whether ``path`` is a library this user compiled: a file of ours no one else can write.
    Another's (planted while the folder was open to others) is compiled again over it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _load(source: str) -> Any:
    key = hashlib.sha256(source.encode()).hexdigest()[:32]
    with _lock:
        lib = _libs.get(key)
        if lib is not None:
            return lib
        folder = _private_folder()
        so = os.path.join(folder, f"{key}.so")
        if not _ours(so):
            src = os.path.join(folder, f"{key}.{os.getpid()}.cpp")
            tmp = os.path.join(folder, f"{key}.{os.getpid()}.so")
            with open(src, "w") as f:
                f.write(source)
            cmd = [_compiler(), "-std=c++17", "-O2", "-shared", "-fPIC", src, "-o", tmp]
            done = subprocess.run(cmd, capture_output=True, text=True)
            os.unlink(src)
            if done.returncode != 0:
                raise RuntimeError("jiterator: the code did not compile:\n" + done.stderr[-4000:])
            os.chmod(tmp, 0o700)  # whatever the umask: no one else writes a library we load
            os.replace(tmp, so)  # atomic: concurrent processes see a whole library or none
        lib = ctypes.CDLL(so)
        lib.musa_jiterator_run.restype = None
        lib.musa_jiterator_run.argtypes = [ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_void_p]
        _libs[key] = lib
        return lib


_CSCALAR = {"double": ctypes.c_double, "int64_t": ctypes.c_int64, "bool": ctypes.c_bool}


def _pointers(values: list[int]) -> ctypes.Array:
    return (ctypes.c_void_p * max(1, len(values)))(*values)


class _JittedFunction:
    def __init__(self, code_string: str, return_by_ref: bool, num_outputs: int, **kwargs):
        if not (return_by_ref or num_outputs == 1):
            raise ValueError("jiterator: return by value only works for a single output")
        if not 1 <= num_outputs <= _MAX_ARGS:
            raise ValueError(f"jiterator supports 1 to {_MAX_ARGS} outputs, got {num_outputs}")
        self.code_string = code_string
        self.return_by_ref = return_by_ref
        self.num_outputs = num_outputs
        self.kernel_name = _entry_name(code_string)
        for k, v in kwargs.items():
            _scalar_ctype(k, v)
        self.kwargs_dict = kwargs
        self._libs: dict[tuple, Any] = {}  # (compute dtype, arity, keyword types) -> library

    def __call__(self, *tensors: torch.Tensor, **kwargs):
        if not 1 <= len(tensors) <= _MAX_ARGS:
            raise ValueError(f"jiterator supports 1 to {_MAX_ARGS} tensor inputs, got {len(tensors)}")
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.device.type != "musa":
                raise ValueError("jiterator: all inputs must be musa tensors, got "
                                 + ", ".join(str(getattr(t, "device", type(t).__name__))
                                             for t in tensors))
        if len({t.device for t in tensors}) > 1:
            raise ValueError("jiterator: all inputs must be on one musa device, got "
                             + ", ".join(sorted({str(t.device) for t in tensors})))
        values = dict(self.kwargs_dict)
        for key, value in kwargs.items():
            if key not in self.kwargs_dict:
                raise KeyError(f"{key} is not declared in function definition")
            values[key] = value
        return self._launch(tensors, values)

    def _on_host(self, tensors, values: dict):
        """The host driver's: a C++ functor compiled by the host's compiler, looping over
        musa memory."""
        if is_current_stream_capturing():
            raise RuntimeError("jiterator kernels cannot be captured in a MUSA graph on the host "
                               "driver (they run outside the dispatcher, so replay would miss them)")
        _lazy._lazy_init()
        compute, result = elementwise_dtypes(
            *tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        if compute not in _CTYPES:
            raise TypeError(f"jiterator on musa computes in {', '.join(map(str, _CTYPES))} "
                            f"(half and bfloat16 in float32), not {compute}")
        extra = [_scalar_ctype(k, v) for k, v in values.items()]
        key = (compute, len(tensors), tuple(extra))
        lib = self._libs.get(key)
        if lib is None:
            lib = self._libs[key] = _load(_source(
                self.code_string, self.kernel_name, _CTYPES[compute], len(tensors), extra,
                self.num_outputs, self.return_by_ref))
        device = tensors[0].device
        if len({t.shape for t in tensors}) > 1:
            tensors = torch.broadcast_tensors(*tensors)
        ins = [t.to(compute).contiguous() for t in tensors]
        outs = [torch.empty(ins[0].shape, dtype=compute, device=device)
                for _ in range(self.num_outputs)]
        # Host-driver kernels run when they are issued: the inputs are ready, and this
        # loop runs in issue order like any other musa kernel.
        boxed = [_CSCALAR[t](v) for t, v in zip(extra, values.values())]
        n = ins[0].numel()
        if n:
            with _C._KernelSpan(self.kernel_name, ins[0].device.index):  # torch.profiler's
                lib.musa_jiterator_run(
                    n, _pointers([t.data_ptr() for t in ins]),
                    _pointers([t.data_ptr() for t in outs]),
                    _pointers([ctypes.addressof(b) for b in boxed]))
        outs = [o if o.dtype == result else o.to(result) for o in outs]
        return outs[0] if not self.return_by_ref else tuple(outs)

    def _on_cuda(self, tensors, values: dict):
        """The cuda driver's: CUDA's NVRTC jiterator on CUDA aliases."""
        if _CUDA_JITERATOR is None:
            raise RuntimeError("the cuda driver's jiterator needs a PyTorch built with CUDA "
                               "(torch._C._cuda_jiterator_compile_and_launch_kernel)")
        _lazy._lazy_init()
        outs = _CUDA_JITERATOR(self.code_string, self.kernel_name, self.return_by_ref,
                               self.num_outputs, tuple(_C._kernel_alias(t) for t in tensors),
                               values)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        back = _C._from_kernel_outputs(outs, -1, strict=True)  # CUDA memory shared, as musa tensors
        return back[0] if not self.return_by_ref else tuple(back)

    _launch = pick(host=_on_host, cuda=_on_cuda)


def _create_jit_fn(code_string: str, **kwargs) -> Callable:
    """An elementwise op from a C++ template functor returning one value (torch.cuda's
    ``_create_jit_fn``), e.g. ``"template <typename T> T f(T x, T y, T a) { return -x + a * y; }"``
    with ``a=1.0``: ``f(x, y, a=3.14)`` on musa tensors. Keyword arguments become runtime
    scalars with these defaults."""
    return _JittedFunction(code_string, return_by_ref=False, num_outputs=1, **kwargs)


def _create_multi_output_jit_fn(code_string: str, num_outputs: int, **kwargs) -> Callable:
    """Like _create_jit_fn for a functor that writes ``num_outputs`` outputs by reference
    (its last parameters, after the inputs and keyword arguments); returns a tuple."""
    return _JittedFunction(code_string, return_by_ref=True, num_outputs=num_outputs, **kwargs)
