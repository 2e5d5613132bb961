"""The step-time estimate: a roofline per op call against a card's published peaks.

Each call that runs a kernel takes
    max(FLOPs / (peak[dtype] * efficiency), bytes * passes / (bandwidth * MEMORY_EFFICIENCY), MIN_KERNEL_S)
where FLOPs come from PyTorch's FLOP counter formulas (matmuls, convolutions,
attention; other ops count as memory-bound), bytes are the sizes of the op's
tensors read and written, and ``passes`` counts the extra sweeps some kernels make
over them. A 16-bit convolution on NCHW tensors also pays for transposing them to
NHWC and back. Host<->device copies take bytes / PCIe bandwidth. Views launch
nothing. The device's time is the sum over calls; eager PyTorch also spends host
time on every op (``HostCosts``: per launching op, per view, and more per call into
the vendor's BLAS and DNN libraries), and the host runs ahead of the device, so the step takes
the larger of the two sums.

Each constant below says where its value comes from; "H200 bench" is
benchmarks/results/cuda_driver.md and "GPT-2 profile" is
benchmarks/results/cuda_driver_gpt2_profile_musa.txt (both measured on an H200,
whose compute units and clocks are the H100's).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict

from torch_musa.utils.doctor.cards import Card

# Large GEMMs: the H200 bench's 8192^2 bf16 matmul ran at 674 TFLOPS, 68 % of the
# dense peak; smaller GEMMs reach less, so 0.6.
COMPUTE_EFFICIENCY = 0.6
# A 16-bit GEMM whose rows are not 16-byte aligned (GPT-2's vocabulary of 50257): cuBLAS
# runs an sm75 cutlass kernel instead; the GPT-2 profile's three LM-head GEMMs
# (3 x 1.265 TFLOP in 30.6 ms) ran at 124 TFLOPS, 12.5 % of the bf16 peak.
UNALIGNED_EFFICIENCY = 0.125
# Streaming kernels: the H200 bench's 64M-element fp32 add moved 805 MB in 193 us, 87 %
# of 4.8 TB/s; smaller and strided kernels reach less, so 0.75.
MEMORY_EFFICIENCY = 0.75
# Back-to-back small kernels finish no faster than this on the device (launch-to-finish).
MIN_KERNEL_S = 3e-6
# Host time per launching op: the GPT-2 profile's leaf ops take 14-23 us of CPU each
# (add_ 14.2, copy_ 14.5, mul 19.7, add 20.5, _to_copy 22.9 us, the launch included);
# with the autograd engine's work per backward node, about 20 us.
HOST_S = 20e-6
# Host time per view or metadata op: the GPT-2 profile's aten::view 2.5, transpose 3.6 us.
HOST_VIEW_S = 3e-6
# Host time per call into the vendor's libraries (cuBLAS and cuDNN on the GPU, muBLAS
# and muDNN on a MUSA card), which plan a call (descriptors, heuristics) before they
# launch it. CPU per call in the H100 profiles: GPT-2's mm 92-105 us, addmm 193 us,
# cuDNN attention 88-139 us (benchmarks/results/cuda_driver_h100_gpt2_compiled_profile_*.txt);
# ResNet-18's cudnn_convolution 93 us and convolution_backward 129 us natively
# (benchmarks/results/doctor_validate_h100_run4_profiles/), where its add_ took 18 us.
HOST_BLAS_S = 100e-6
HOST_DNN_S = 100e-6
# The ops those libraries serve (by name without overload).
BLAS_OPS = frozenset("aten::" + n for n in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "mv", "addmv"))
DNN_OPS = frozenset("aten::" + n for n in (
    "convolution", "_convolution", "convolution_backward", "convolution_overrideable",
    "convolution_backward_overrideable", "cudnn_convolution", "cudnn_convolution_transpose",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_cudnn_attention_forward", "_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_fused_attention_overrideable_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_cudnn_rnn", "_cudnn_rnn_backward", "cudnn_batch_norm", "cudnn_batch_norm_backward"))


def host_class(op: str) -> str:
    """Which of ``HostCosts``' prices a launching op pays: "blas", "dnn" or "op"."""
    name = op.partition(".")[0]
    return "blas" if name in BLAS_OPS else "dnn" if name in DNN_OPS else "op"


@dataclasses.dataclass(frozen=True)
class HostCosts:
    """The host's time per op, by kind. The defaults are the constants above; a run on a
    real device can measure its own host's (benchmarks/doctor_validate.py --calibrate-host)."""
    op_s: float = HOST_S
    view_s: float = HOST_VIEW_S
    blas_s: float = HOST_BLAS_S
    dnn_s: float = HOST_DNN_S
    source: str = "constants (roofline.py)"

    def of(self, op: str) -> float:
        return getattr(self, host_class(op) + "_s")

    def describe(self) -> str:
        return (f"{self.op_s * 1e6:.3g} us per launching op, {self.blas_s * 1e6:.3g} us per BLAS call, "
                f"{self.dnn_s * 1e6:.3g} us per DNN-library call and {self.view_s * 1e6:.3g} us per view, "
                f"from {self.source}")


# Sweeps over the op's tensors beyond the one read and one write its byte count assumes,
# from the kernels' algorithms: batch norm's training forward reads its input twice
# (statistics, then normalisation), its backward reads grad and input twice (the two
# reductions, then the input gradient); softmax's forward reads its input twice (max
# and sum in one pass, then the output; the GPT-2 profile's log_softmax over
# 16384 x 50257 fp32 took 2.92 ms, 3 sweeps at 70 % of 4.8 TB/s); its backward reads the
# gradient once more for the sum.
PASSES = {"aten::native_batch_norm": 1.5, "aten::_native_batch_norm_legit": 1.5,
          "aten::_native_batch_norm_legit_functional": 1.5, "aten::native_batch_norm_backward": 5 / 3,
          "aten::_softmax": 1.5, "aten::_log_softmax": 1.5,
          "aten::_softmax_backward_data": 4 / 3, "aten::_log_softmax_backward_data": 4 / 3}
# A 16-bit convolution whose channel count is not a multiple of 8 (an RGB input's 3) has
# no tensor-core kernel in cuDNN and is priced at the CUDA cores' FP32 peak (pytorch/pytorch
# issue 54404: ResNet-18's first layer, 3 channels, slower in FP16 than FP32 on A100).
# A 16-bit convolution on NCHW tensors: cuDNN's tensor-core kernels work in NHWC, so its
# tensors are transposed there and back: each is read and written once more. With
# COMPUTE_EFFICIENCY this gives 256 us for the H200 bench's 3x3 256-channel 32x56^2 bf16
# convolution, which measured 261 us.
TRANSPOSE_PASSES = 2.0
BAND = (0.7, 1.5)           # the stated band of uncertainty around the estimate (multipliers)

_DTYPE_KEY = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
              "complex64": "fp32", "complex128": "fp64"}
_CONV = ("aten::convolution", "aten::convolution_backward", "aten::_convolution")


def peaks(card: Card) -> tuple[dict[str, float], list[str]]:
    """TFLOPS per dtype key, with a published figure where there is one and a stated
    derivation where there is not; the derivations, as sentences."""
    p = {k: v for k, v in card.tflops.items() if v}
    said = []

    def derive(key, value, how):
        if key not in p and value:
            p[key] = value
            said.append(f"{card.name} {key}: {value:g} TFLOPS assumed ({how}; not published)")

    derive("fp16", p.get("fp8", 0) / 2, "half the FP8 figure")
    derive("bf16", p.get("fp16", 0), "as FP16")
    derive("fp32", p.get("fp16", 0) / 16, "1/16 of FP16, the ratio of recent data-centre GPUs")
    derive("fp16", p.get("fp32", 0), "as FP32: no matrix-unit figure")
    derive("bf16", p.get("fp32", 0), "as FP32: no matrix-unit figure")
    derive("tf32", p.get("fp16", 0) / 2, "half of FP16")
    derive("fp64", p.get("fp32", 0) / 32, "1/32 of FP32")
    return p, said


def _peak_key(op: str, dtype: str, table: dict) -> str:
    key = _DTYPE_KEY.get(dtype, "fp32")
    if key == "fp32" and op.startswith(_CONV):
        return "tf32"       # cuDNN-style convolutions use TF32 for float32 by default
    return key if key in table else "fp32"


def estimate(calls: list, card: Card, host_costs: HostCosts = HostCosts()) -> dict:
    """The estimate for one step's ``calls`` ((op, dtype, flops, bytes, kind[, layout]) tuples,
    as ``ops.Call``) on ``card``, its host priced at ``host_costs``."""
    table, assumptions = peaks(card)
    bw = card.bandwidth_gbs * 1e9 * MEMORY_EFFICIENCY
    pcie = card.pcie_gbs * 1e9 * MEMORY_EFFICIENCY
    per_op = defaultdict(lambda: {"calls": 0, "time_s": 0.0, "flops": 0, "bytes": 0, "compute_bound": 0})
    device = host = 0.0
    flops_total = bytes_total = 0
    for call in calls:
        op, dtype, flops, moved, kind = call[:5]
        layout = call[5] if len(call) > 5 else ""
        if kind == "view":
            host += host_costs.view_s
            continue
        if kind == "transfer":
            t, compute_bound = moved / pcie, False
        else:
            notes = layout.split()
            peak, eff = table[_peak_key(op, dtype, table)], COMPUTE_EFFICIENCY
            if "unaligned" in notes and op.startswith(_CONV):
                peak = table["fp32"]        # no tensor cores: the CUDA cores' rate
            elif "unaligned" in notes:
                eff = UNALIGNED_EFFICIENCY
            tc = flops / (peak * 1e12 * eff) if flops else 0.0
            tm = moved * PASSES.get(op, 1.0) / bw
            t, compute_bound = max(tc, tm, MIN_KERNEL_S), tc > tm
            if "channels_first" in notes:
                t += moved * TRANSPOSE_PASSES / bw
        device += t
        host += host_costs.of(op)
        flops_total += flops
        bytes_total += moved
        row = per_op[op]
        row["calls"] += 1
        row["time_s"] += t
        row["flops"] += flops
        row["bytes"] += moved
        row["compute_bound"] += compute_bound
    step = max(device, host)
    ops = sorted(({"op": op, **r, "share": r["time_s"] / device if device else 0.0} for op, r in per_op.items()),
                 key=lambda r: -r["time_s"])
    return {"card": card.key, "card_name": card.name, "estimate_s": step, "low_s": step * BAND[0],
            "high_s": step * BAND[1], "device_s": device, "host_s": host,
            "bound": "host (launch overhead)" if host > device else "device",
            "flops": flops_total, "bytes": bytes_total, "ops": ops, "assumptions": assumptions,
            "model": (f"per op max(FLOPs/(peak[dtype]x{COMPUTE_EFFICIENCY}; x{UNALIGNED_EFFICIENCY} for a 16-bit "
                      f"matmul with unaligned rows, the FP32 peak for a 16-bit convolution with unaligned channels), bytes x passes/(bandwidth x{MEMORY_EFFICIENCY}), "
                      f"{MIN_KERNEL_S * 1e6:g} us), plus NCHW<->NHWC transposes for 16-bit NCHW convolutions; "
                      f"step = max(sum over ops, host time of {host_costs.describe()}); "
                      f"band x{BAND[0]}..x{BAND[1]}"),
            "source": card.source}
