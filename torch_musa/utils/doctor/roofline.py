"""The step-time estimate: a roofline per op call against a card's published peaks.

Each call that runs a kernel takes
    max(FLOPs / (peak[dtype] * COMPUTE_EFFICIENCY), bytes / (bandwidth * MEMORY_EFFICIENCY), MIN_KERNEL_S)
where FLOPs come from PyTorch's FLOP counter formulas (matmuls, convolutions,
attention; other ops count as memory-bound) and bytes are the sizes of the op's
tensors read and written. Host<->device copies take bytes / PCIe bandwidth.
Views launch nothing. The device's time is the sum over calls; eager PyTorch
also spends HOST_S per launched call on the host, which runs ahead of the device,
so the step takes the larger of the two sums.
"""
from __future__ import annotations

from collections import defaultdict

from torch_musa.utils.doctor.cards import Card

COMPUTE_EFFICIENCY = 0.6    # large GEMMs reach 60-80 % of peak; smaller ones less
MEMORY_EFFICIENCY = 0.75    # streaming kernels reach 70-90 % of the bandwidth
MIN_KERNEL_S = 3e-6         # a kernel's launch-to-finish floor on the device
HOST_S = 8e-6               # eager PyTorch's host cost per launched op (dispatch and launch)
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


def estimate(calls: list, card: Card) -> dict:
    """The estimate for one step's ``calls`` ((op, dtype, flops, bytes, kind) tuples) on ``card``."""
    table, assumptions = peaks(card)
    bw = card.bandwidth_gbs * 1e9 * MEMORY_EFFICIENCY
    pcie = card.pcie_gbs * 1e9 * MEMORY_EFFICIENCY
    per_op = defaultdict(lambda: {"calls": 0, "time_s": 0.0, "flops": 0, "bytes": 0, "compute_bound": 0})
    device = host = 0.0
    flops_total = bytes_total = 0
    for op, dtype, flops, moved, kind in calls:
        if kind == "view":
            continue
        if kind == "transfer":
            t, compute_bound = moved / pcie, False
        else:
            tc = flops / (table[_peak_key(op, dtype, table)] * 1e12 * COMPUTE_EFFICIENCY) if flops else 0.0
            tm = moved / bw
            t, compute_bound = max(tc, tm, MIN_KERNEL_S), tc > tm
        device += t
        host += HOST_S
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
            "model": (f"per op max(FLOPs/(peak[dtype]x{COMPUTE_EFFICIENCY}), bytes/(bandwidth x{MEMORY_EFFICIENCY}), "
                      f"{MIN_KERNEL_S * 1e6:g} us); step = max(sum over ops, {HOST_S * 1e6:g} us host time per op); "
                      f"band x{BAND[0]}..x{BAND[1]}"),
            "source": card.source}
