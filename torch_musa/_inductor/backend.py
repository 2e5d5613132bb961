"""Inductor's backend for the musa device (``register_backend_for_device("musa", ...)``).

Under the host driver a musa tensor's memory is host RAM (``data_ptr()`` is a host
address), so Inductor's C++/OpenMP CPU kernels run over it unchanged: the scheduling
is Inductor's ``CppScheduling``. What differs from the CPU device is the wrapper:

* kernel calls: Inductor's Python wrapper knows how to call a C++ kernel only for
  the ``cpu`` and ``mps`` devices, and raises ``device musa nyi`` for any other;
* allocations: for a device without a fast path it allocates with ``device='musa'``,
  the *current* device, so a graph over ``musa:1`` would return tensors on
  ``musa:0``; ours names the index.

A post-grad pass refuses dtypes the hardware profile lacks, as eager's kernels do
(the compiled kernels never pass through them). Under the cuda driver musa memory
is GPU memory: each graph is compiled for the GPU instead (``kernel_device.py``).
"""
from __future__ import annotations

import hashlib
import importlib
import sys

import torch
import torch._inductor.ir
import torch._inductor.kernel.mm_common  # noqa: F401  (binds get_current_backend; see below)
import torch._inductor.lowering as lowering
import torch._inductor.utils
from torch._inductor.codegen.common import (
    IndentedBuffer,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling, CppVecKernel, cexpr_index
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.ir import get_device_type
from torch._inductor.lowering import fallback_handler, lowerings
from torch._inductor.scheduler import BaseSchedulerNode
from torch._inductor.virtualized import V

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa._inductor import kernel_device
from torch_musa._inductor.aoti import MusaCppWrapperCpu
from torch_musa.config import CONFIG
from torch_musa.ops.dtype_policy import DTYPE_AGNOSTIC_OPS

__all__ = ["register", "MusaPythonWrapperCodegen", "MusaDeviceOpOverrides", "ProfileDtypeCheck"]

DEVICE = "musa"


# Names the generated wrapper binds in its header for profiled kernel calls.
_PROFILED_CALL = "_musa_profiled_kernel_call"
_PROFILER_MODULE = "_musa_autograd_profiler"
_PROFILER_ON = f"{_PROFILER_MODULE}._is_profiler_enabled"


def profiled_kernel_call(name: str, kernel, *args, **kwargs):
    """Call a compiled musa kernel as torch.profiler sees a CUDA one (Triton's launcher
    does the same): an op named after the kernel, with the kernel's span on the current
    stream as its musa device time, ``musa_kernel:<name>``. The kernel runs on the calling
    thread under the host driver, so that span is its device time."""
    with torch._C._profiler._RecordFunctionFast(name), _C._KernelSpan(name):
        return kernel(*args, **kwargs)


class _MusaWrapperMixin:
    """What the musa wrapper changes in Inductor's Python wrapper (see the module doc)."""

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                     **kwargs):
        from torch._inductor.virtualized import V

        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == DEVICE:
            name = kernel_name
            if torch._inductor.config.triton.cudagraphs:
                # reduce-overhead: a MUSA graph capture records C++ kernels through this call
                call_args = [kernel_name, *call_args, f"name={kernel_name!r}"]
                kernel_name = "musa_run_host_callable"
            # Under torch.profiler the kernel is an op of its own name with its span as
            # musa device time (profiled_kernel_call); otherwise a plain call.
            args = ", ".join(call_args)
            self.writeline(f"{_PROFILED_CALL}({name!r}, {kernel_name}, {args}) "
                           f"if {_PROFILER_ON} else {self.wrap_kernel_call(kernel_name, call_args)}")
            return
        return super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                                    triton=triton, **kwargs)

    def write_header(self) -> None:
        super().write_header()
        self.header.writeline(f"from torch.autograd import profiler as {_PROFILER_MODULE}")
        self.header.writeline(f"from {__name__} import profiled_kernel_call as {_PROFILED_CALL}")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                        is_pinned=False):
        if device.type != DEVICE or torch._inductor.config.test_configs.track_memory_lifecycle:
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape,
                                           is_pinned)
        if allocation_shape is None:
            allocation_shape = shape
        shape_t = self.codegen_python_shape_tuple(shape)
        alloc_t = self.codegen_python_shape_tuple(allocation_shape)
        stride_t = self.codegen_python_shape_tuple(stride)
        index = device.index if device.index is not None else 0
        out = f"{name} = empty_strided({alloc_t}, {stride_t}, device='{DEVICE}:{index}', dtype={dtype})"
        if shape_t != alloc_t:
            out += f".as_strided({shape_t}, {stride_t})"
        return out


class MusaPythonWrapperCodegen(_MusaWrapperMixin, PythonWrapperCodegen):
    """Inductor's Python wrapper, calling C++ kernels over musa memory."""

    def write_header(self) -> None:
        super().write_header()
        if torch._inductor.config.triton.cudagraphs:  # subgraphs' code shares this header
            self.imports.writeline(
                "from torch_musa.core.graphs import run_host_callable as musa_run_host_callable")

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return _MusaSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return MusaPythonWrapperCodegen()


class _MusaSubgraphWrapperCodegen(_MusaWrapperMixin, SubgraphPythonWrapperCodegen):
    """The same for subgraphs (``torch.cond``, ``while_loop`` bodies)."""


class MusaDeviceOpOverrides(CpuDeviceOpOverrides):
    """Device statements the wrapper writes: the device switch names the musa index.

    The host driver runs a kernel on the calling thread, so there is no stream to
    fetch and nothing to wait for after a kernel: those stay the CPU's.
    """

    def set_device(self, device_idx: int) -> str:
        return f"torch.musa.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.musa.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.musa.device({device_idx})"


# Eager's exemptions, plus the conversion that ``Tensor.to`` decomposes into here.
_AGNOSTIC = DTYPE_AGNOSTIC_OPS | {"prims::convert_element_type"}


class ProfileDtypeCheck(CustomGraphModulePass):
    """Refuses a compiled graph that computes in a dtype the hardware profile lacks.

    Eager musa kernels check every operand against the profile; Inductor's kernels
    never reach them, so the graph is checked once, at compile time, by the same
    rule: any op touching a musa tensor of an unsupported dtype, except the
    dtype-agnostic ones (copies, views, fills). With TORCH_USE_MUSA_DOUBLE_CAST=1,
    float64 is allowed (the compiled code computes it in float64).
    """

    def _unsupported(self) -> frozenset:
        bad = set(CONFIG.profile.unsupported_dtypes())
        if CONFIG.double_cast:
            bad -= {torch.float64, torch.complex128}
        return frozenset(bad)

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        bad = self._unsupported()
        if not bad:
            return
        for node in gm.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            name = node.target._schema.name
            if name in _AGNOSTIC:
                continue
            for value in [node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)]:
                for t in value if isinstance(value, (list, tuple)) else [value]:
                    if (isinstance(t, torch.Tensor) and t.device.type == DEVICE
                            and t.dtype in bad):
                        raise RuntimeError(
                            f"torch.compile on musa: {name} ({node.target.__name__}) computes in "
                            f"{t.dtype}, which the musa hardware profile {CONFIG.profile.name} "
                            f"does not support. Use a supported dtype, or a profile that has it "
                            f"(TORCH_MUSA_PROFILE).")

    def uuid(self) -> bytes:
        # Compiled graphs are cached on disk: one checked under another profile must not be
        # reused, nor one lowered before a change to this backend's lowerings (the version).
        key = f"musa-dtype-check-v11:{sorted(map(str, self._unsupported()))}"
        return hashlib.sha256(key.encode()).digest()


def _cuda_driver_scheduling(scheduler):
    raise RuntimeError(
        "torch.compile on musa under the cuda driver compiles each graph for the GPU "
        "(torch_musa/_inductor/kernel_device.py); Inductor reached code generation for a "
        "musa buffer, which that move should have made a cuda one. Please report the model.")


_CPP_DEVICES = ("cpu", DEVICE)


def _musa_is_cpp_code(x) -> bool:
    return get_device_type(x) in _CPP_DEVICES


def _node_is_cpp_code(self) -> bool:
    device = self.get_device()
    return device is not None and device.type in _CPP_DEVICES


_stock_get_current_backend = torch._inductor.utils.get_current_backend


def _get_current_backend(device_type: str | None = None) -> str:
    if not device_type:
        from torch._inductor.virtualized import V

        device_type = V.graph.get_current_device_or_throw().type
    if device_type == DEVICE:
        return "cpp"
    return _stock_get_current_backend(device_type)


def _answer_as_cpp_code_for_musa() -> None:
    """Make Inductor's "which code does this device get" questions answer C++ for musa.

    Inductor answers them by device name: ``get_current_backend`` gives any device
    it does not know Triton (so C++ kernels lost their dtype propagation), and the
    ``is_cpu`` predicates, which mean "gets C++ CPU code", turn off what the C++
    backend lacks (loop reordering made for Triton) and pick the CPU's realize
    heuristics. On the host driver musa gets the CPU's C++ code, so they answer as
    for the CPU. ``get_current_backend`` is bound by name in several Inductor
    modules; each binding of the stock function is replaced.
    """
    torch._inductor.ir.is_cpu = _musa_is_cpp_code
    BaseSchedulerNode.is_cpu = _node_is_cpp_code
    for name, module in list(sys.modules.items()):
        if (name.startswith("torch._inductor")
                and getattr(module, "get_current_backend", None) is _stock_get_current_backend):
            module.get_current_backend = _get_current_backend


#: The Inductor functions musa's versions replaced, by the name each was replaced
#: under; musa's versions call them for every other device.
_STOCK: dict = {}


def _replace(owner, key, musa_version) -> None:
    """Put ``musa_version`` in place of ``owner``'s ``key`` (an attribute, or an entry
    when ``owner`` is a dict) once, keeping the one it replaces in ``_STOCK[key]``."""
    table = owner if isinstance(owner, dict) else vars(owner)
    if table.get(key) is musa_version:
        return
    _STOCK[key] = table[key]
    if isinstance(owner, dict):
        owner[key] = musa_version
    else:
        setattr(owner, key, musa_version)


_BERNOULLI_P = torch.ops.aten.bernoulli.p


def _musa_bernoulli_p(x, *args, **kwargs):
    if torch._inductor.config.fallback_random and get_device_type(x) == DEVICE:
        return _STOCK["bernoulli.p fallback"](x, *args, **kwargs)
    return _STOCK[_BERNOULLI_P](x, *args, **kwargs)


def _lower_bernoulli_p_as_one_fallback() -> None:
    """With ``fallback_random``, lower ``aten.bernoulli.p`` on musa as one call of the op.

    musa's ``dropout`` is the CPU device's composite (``empty_like(x).bernoulli_(1 - p)``,
    see csrc/aten/native_kernels.cpp), so a training graph holds ``bernoulli.p(empty)``
    where the CPU's holds ``native_dropout``. Inductor lowers ``bernoulli.p`` as an
    in-place ``bernoulli_`` over a clone of its input; when that result is also saved for
    backward, its scheduler fuses the clone (of an ``empty``: NaN) with the consumers and
    runs the ``bernoulli_`` after them, so SDPA with dropout returned NaN (the same graph
    on the CPU device does too). The functional op draws the same numbers as eager.
    """
    _STOCK.setdefault("bernoulli.p fallback",
                      fallback_handler(_BERNOULLI_P, add_to_fallback_set=False))
    _replace(lowerings, _BERNOULLI_P, _musa_bernoulli_p)


def _musa_use_two_step_variance(x, axis, keepdim, input_dtype):
    stock = _STOCK["use_two_step_variance"]
    device = x.get_device()
    if device is not None and device.type == DEVICE:
        # The rule reads the threshold by device name; musa's C++ code takes the CPU's.
        with torch._inductor.config.patch(
                unroll_reductions_threshold=torch._inductor.config.cpp.use_two_step_variance_threshold):
            return stock(x, axis, keepdim, input_dtype)
    return stock(x, axis, keepdim, input_dtype)


def _variance_as_on_the_cpu() -> None:
    """Give musa the CPU's choice between two-pass and Welford variance.

    Inductor computes a small variance (LayerNorm's, up to
    ``config.cpp.use_two_step_variance_threshold`` elements per row) in two passes on
    the CPU and with Welford elsewhere; Welford costs more per element, and differs in
    the last bits, so a compiled LayerNorm on musa was slower than, and not bit-equal
    to, the same compiled step on the CPU device.
    """
    _replace(lowering, "use_two_step_variance", _musa_use_two_step_variance)


_CONVOLUTION = torch.ops.aten.convolution.default


def _musa_convolution(x, weight, bias, *args, **kwargs):
    stock = _STOCK[_CONVOLUTION]
    if bias is None or get_device_type(x) != DEVICE:
        return stock(x, weight, bias, *args, **kwargs)
    # The lowering peels the bias off into a pointwise add for every device but
    # the one ``ir.get_device_type(x)`` calls "cpu": answer so for this input only.
    stock_device_type = torch._inductor.ir.get_device_type

    def device_type(node):
        return "cpu" if node is x else stock_device_type(node)

    torch._inductor.ir.get_device_type = device_type
    try:
        return stock(x, weight, bias, *args, **kwargs)
    finally:
        torch._inductor.ir.get_device_type = stock_device_type


def _convolution_as_on_the_cpu() -> None:
    """Give musa's convolutions the CPU's two decisions: channels-last layout and the
    bias inside the extern convolution.

    Inductor makes both by device name: ``GraphLowering.decide_layout_opt`` turns
    channels-last on for every graph whose convolutions run on an mkldnn device
    (``SUPPORTED_MKLDNN_DEVICES``), and the convolution lowering peels the bias off into
    a fused add everywhere but on the CPU (for cuDNN). On the host driver musa's
    convolution is the CPU's kernel, so musa took the GPU's decisions for the CPU's
    kernel: a compiled conv -> BatchNorm step differed from compiled CPU's in the last
    bits. Only the graph module's tuple is widened: Inductor's mkldnn fusion passes
    (which call mkldnn ops by name) keep theirs.
    """
    import torch._inductor.graph as graph  # noqa: PLC0415

    if DEVICE not in graph.SUPPORTED_MKLDNN_DEVICES:
        graph.SUPPORTED_MKLDNN_DEVICES = (*graph.SUPPORTED_MKLDNN_DEVICES, DEVICE)
    _replace(lowerings, _CONVOLUTION, _musa_convolution)


def _generating_for_musa() -> bool:
    """Whether the kernel being generated is musa's (no current device: not ours)."""
    device = getattr(V.graph, "current_device", None)
    return device is not None and device.type == DEVICE


def _musa_get_store_line(self, value, var, index, dtype, accu_store=False):
    if (dtype == torch.bool and not accu_store and _generating_for_musa()
            and self._try_get_const_stride(index, self.itervars[self.tiling_idx]) == 1):
        code = IndentedBuffer()
        code.writeline(
            f"[&](const auto& m, bool* out, int64_t n) {{ if constexpr (requires {{ m.is_masked(0); }}) "
            f"{{ for (int64_t i = 0; i < n; ++i) out[i] = m.is_masked(i); }} else {{ m.store(out, n); }} }}"
            f"({value}, {var} + {cexpr_index(index)}, {cexpr_index(self.num_elems)});")
        return code
    return _STOCK["_get_store_line"](self, value, var, index, dtype, accu_store)


def _musa_get_vec_load_line(self, var, index, dtype, load_mask=None):
    if dtype != torch.bool or not _generating_for_musa():
        return _STOCK["_get_vec_load_line"](self, var, index, dtype, load_mask)
    buf = f"{var} + {cexpr_index(index)}" if index != 0 else var
    return (f"[&](const bool* p, int64_t n) {{ using M = {self._get_mask_type()}; "
            f"__at_align__ float t[M::size()] = {{}}; for (int64_t i = 0; i < n; ++i) "
            f"t[i] = c10::bit_cast<float>(-static_cast<int32_t>(p[i])); "
            f"return M(at::vec::VectorizedN<float, {self._get_num_vectors(torch.float)}>::loadu(t)); }}"
            f"({buf}, {cexpr_index(self.num_elems)})")


def _store_bool_masks_lane_by_lane() -> None:
    """On musa, write a vectorized comparison's bool result lane by lane, and read
    bool masks back without a branch per lane.

    Inductor stores it with ``VecMask<float, 1>::store(bool*)``, whose generic
    conversion to ``Vectorized<bool>`` costs ~5 ms per 262,144 elements on an AVX2 host
    (eager's comparison: ~0.2 ms; lane by lane: ~0.2 ms). Training graphs hit it wherever
    the partitioner saves a ReLU's mask for backward, so the compiled transformer step
    was slower than eager. Reading the mask back, ``VecMask<float, 1>::from(bool*, n)``
    branches on every lane: 2.2 ms per 262,144 random lanes, 0.4 ms branch-free. The CPU
    device keeps PyTorch's code.
    """
    _replace(CppVecKernel, "_get_vec_load_line", _musa_get_vec_load_line)
    _replace(CppVecKernel, "_get_store_line", _musa_get_store_line)


_BUILTIN_DEVICE_OP_OVERRIDES = (
    "torch._inductor.codegen.cpu_device_op_overrides",
    "torch._inductor.codegen.cuda.device_op_overrides",
    "torch._inductor.codegen.mps_device_op_overrides",
    "torch._inductor.codegen.mtia.device_op_overrides",
    "torch._inductor.codegen.xpu.device_op_overrides",
)


def _load_builtin_device_op_overrides() -> None:
    """Register PyTorch's own devices' op overrides before musa's.

    torch 2.11 loads them lazily, and only while the table is empty: with musa's
    entry in it, cuda never got its own, and a compiled CUDA graph's wrapper took
    the CPU's device guard (``with pass:``, a syntax error; seen on the H200).
    """
    for name in _BUILTIN_DEVICE_OP_OVERRIDES:
        try:
            importlib.import_module(name)
        except ImportError:  # a device this torch does not ship
            pass


def _host_driver_scheduling():
    """The host driver's: the CPU's C++ scheduling over musa memory (host RAM), answering
    Inductor's questions as for the CPU's code; graphs that get the C++ wrapper
    (AOTInductor, ``cpp_wrapper=True``) compile as CPU graphs (``aoti.py``)."""
    kernel_device.install("cpu", ProfileDtypeCheck(), only_cpp_wrapper=True)
    _answer_as_cpp_code_for_musa()
    _lower_bernoulli_p_as_one_fallback()
    _variance_as_on_the_cpu()
    _convolution_as_on_the_cpu()
    _store_bool_masks_lane_by_lane()
    from torch_musa._inductor import reduce_overhead  # noqa: PLC0415  (imports Inductor's output code)

    reduce_overhead.install()  # mode="reduce-overhead": MUSA graphs
    return CppScheduling


def _cuda_driver_install():
    """The cuda driver's: each graph compiles with Inductor's own CUDA path (kernel_device)."""
    kernel_device.install("cuda", ProfileDtypeCheck())
    return _cuda_driver_scheduling


def register() -> None:
    """Register the musa backend with Inductor (idempotent)."""
    scheduling = pick(host=_host_driver_scheduling, cuda=_cuda_driver_install)()
    register_backend_for_device(
        DEVICE,
        scheduling,
        MusaPythonWrapperCodegen,
        MusaCppWrapperCpu,
        device_custom_pass=ProfileDtypeCheck(),
    )
    _load_builtin_device_op_overrides()
    register_device_op_overrides(DEVICE, MusaDeviceOpOverrides())
