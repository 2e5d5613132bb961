"""Run PyTorch's OpInfo database on musa against the CPU device.

Every op in ``common_methods_invocations.op_db``: its sample inputs for each
dtype (float32, float16, bfloat16 where the profile has it, int64, bool) run
on the CPU and on musa with the same seed, forward and, where the op supports
autograd, backward; results are compared at the package's tolerance policy
(``torch_musa.testing.TOLERANCES``).

    python -m torch_musa.testing.opinfo_sweep [--sample N] [--ops add,mul,...] [--json out.json] [--png out.png]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_musa.config import CONFIG

# PROFILE_LIMIT is part of this module's interface (its tests read it).
from .sweep_common import (PROFILE_LIMIT, compare, draw_counts, load_testing_db,  # noqa: F401
                           name_list, pick_entries, profile_limited, rate, to_device, weighted_grads)
from .tolerances import tolerance

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]
MAX_SAMPLES = 3
# Their values are uninitialised memory: compare shape, dtype and device only.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}


@dataclass
class Result:
    op: str
    dtype: str
    forward: str   # pass | fail | skip
    backward: str  # pass | fail | skip | n/a
    reason: str = ""


def _to_musa_arg(x):
    if isinstance(x, torch.Tensor):
        return to_device(x, "musa")
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("musa")
    if x == "cpu":
        return "musa"
    return x


def _closer_to_float32(op, cpu_in, cpu_result, got, dtype, grads: bool = False) -> bool:
    """For float16/bfloat16: whether musa is no farther than the CPU from the same op in
    float32 on the same inputs (each tensor's largest error, plus one tolerance at its
    scale); ``grads``: the same for the weighted gradients. CUDA and MUSA kernels
    accumulate half precision in float32 where some CPU kernels round partial sums
    (convolutions), so there the CPU is not the referee."""
    if dtype not in (torch.float16, torch.bfloat16):
        return False
    up = tree_map(lambda t: t.detach().float().requires_grad_(t.requires_grad)
                  if isinstance(t, torch.Tensor) and t.dtype == dtype else t, cpu_in)
    torch.manual_seed(0)
    try:
        ref32 = op(up[0], *up[1], **up[2])
        if grads:
            ref32 = weighted_grads(up, ref32)
    except Exception:
        return False
    rtol, atol = tolerance(dtype)
    fa, fb, fr = (tree_flatten(x)[0] for x in (cpu_result, got, ref32))
    if not len(fa) == len(fb) == len(fr):
        return False
    for a, b, r in zip(fa, fb, fr):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or not a.numel():
            continue
        if not isinstance(b, torch.Tensor) or b.shape != a.shape or b.dtype != a.dtype:
            return False
        r, b = r.detach().double(), b.detach().cpu().double()
        e_cpu = (a.detach().double() - r).abs().nan_to_num(0).max().item()
        e_musa = (b - r).abs().nan_to_num(0).max().item()
        if e_musa > e_cpu + rtol * r.abs().nan_to_num(0).max().item() + atol:
            return False
    return True


def run_case(op, dtype) -> Result:
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    label = str(dtype).replace("torch.", "")
    backward = op.supports_autograd and dtype in (torch.float32, torch.float16, torch.bfloat16)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=backward))[:MAX_SAMPLES]
    except Exception as e:  # the database cannot build inputs: not a musa result
        return Result(name, label, "skip", "n/a", f"sample_inputs: {type(e).__name__}")
    if not samples:
        return Result(name, label, "skip", "n/a", "no samples")
    fwd, bwd, reason = "pass", ("pass" if backward else "n/a"), ""
    for s in samples:
        cpu_in = (s.input, s.args, s.kwargs)
        musa_in = tree_map(_to_musa_arg, cpu_in)  # tensors, and device arguments
        torch.manual_seed(0)
        try:
            ref = op(cpu_in[0], *cpu_in[1], **cpu_in[2])
        except Exception as e:
            return Result(name, label, "skip", "n/a", f"cpu raised {type(e).__name__}")
        torch.manual_seed(0)
        try:
            got = op(musa_in[0], *musa_in[1], **musa_in[2])
            try:
                compare(ref, got, dtype, values=op.name not in UNINITIALIZED)
            except AssertionError:
                if not _closer_to_float32(op, cpu_in, ref, got, dtype):
                    raise
        except Exception as e:
            return Result(name, label, "fail", "skip", f"forward: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        if backward and bwd == "pass":
            try:
                g_ref = weighted_grads(cpu_in, ref)
            except Exception:
                continue  # the CPU cannot differentiate this sample either
            try:
                g_got = weighted_grads(musa_in, got)
                if g_ref is not None:
                    try:
                        compare(list(g_ref), list(g_got), dtype)
                    except AssertionError:
                        if not _closer_to_float32(op, cpu_in, list(g_ref), list(g_got), dtype, grads=True):
                            raise
            except Exception as e:
                bwd, reason = "fail", f"backward: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return Result(name, label, fwd, bwd, reason)


def cases(sample: int = 1, offset: int = 0, ops: list[str] | None = None):
    """(OpInfo, dtype) pairs: every Nth op of op_db from ``offset``, or those named (all their variants)."""
    op_db = load_testing_db("common_methods_invocations", "op_db")
    lacking = set(CONFIG.profile.unsupported_dtypes())
    for op in pick_entries(op_db, ops, sample, "op_db", offset):
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype in supported and dtype not in lacking:
                yield op, dtype


def sweep(sample: int = 1, offset: int = 0, progress: bool = False, ops: list[str] | None = None) -> list[Result]:
    todo = list(cases(sample, offset, ops))
    results = []
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (op, dtype) in enumerate(todo):
            results.append(run_case(op, dtype))
            if progress and (k % 50 == 0 or k == len(todo) - 1):
                print(f"\r[{k + 1}/{len(todo)}] {time.time() - t0:.0f}s {results[-1].op:<40}",
                      end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return results


def _rates(ran: list[Result]) -> tuple[float, float]:
    fwd = sum(r.forward == "pass" for r in ran)
    both = sum(r.forward == "pass" and r.backward in ("pass", "n/a") for r in ran)
    return rate(fwd, len(ran)), rate(both, len(ran))


def summary(results: list[Result]) -> dict:
    """Pass rates over every pair run, and over the pairs the profile allows (a pair that
    needs a dtype the profile lacks fails by design, with the profile's clear error)."""
    ran = [r for r in results if r.forward != "skip"]
    fwd, both = _rates(ran)
    allowed_fwd, allowed_both = _rates([r for r in ran if not profile_limited(r.reason)])
    return {"pairs": len(ran), "skipped": len(results) - len(ran),
            "forward_pass_rate": fwd, "forward_backward_pass_rate": both,
            "profile_limited": sum(profile_limited(r.reason) for r in ran),
            "allowed_forward_pass_rate": allowed_fwd, "allowed_forward_backward_pass_rate": allowed_both}


def write_png(results: list[Result], path: str) -> None:
    """Per dtype: pairs passing forward and backward, forward only, failing on the
    profile's dtype limit, failing otherwise."""
    dtypes = [str(d).replace("torch.", "") for d in DTYPES]
    kinds = {"forward + backward": "tab:green", "forward only": "tab:olive",
             "profile lacks the dtype": "tab:grey", "other failure": "tab:red"}
    counts = {k: [0] * len(dtypes) for k in kinds}
    for r in results:
        if r.forward == "skip" or r.dtype not in dtypes:
            continue
        i = dtypes.index(r.dtype)
        if r.forward == "pass" and r.backward in ("pass", "n/a"):
            counts["forward + backward"][i] += 1
        elif r.forward == "pass":
            counts["forward only"][i] += 1
        elif profile_limited(r.reason):
            counts["profile lacks the dtype"][i] += 1
        else:
            counts["other failure"][i] += 1
    s = summary(results)
    draw_counts(path, dtypes, counts, kinds,
                f"OpInfo sweep on musa vs CPU: forward {s['forward_pass_rate']:.2%}, forward+backward "
                f"{s['forward_backward_pass_rate']:.2%}\n(where the profile allows: "
                f"{s['allowed_forward_pass_rate']:.2%} / {s['allowed_forward_backward_pass_rate']:.2%})",
                "op/dtype pairs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1, help="take every Nth op (1 = all)")
    ap.add_argument("--ops", help="comma-separated op_db names (add,nn.functional.conv2d), every variant "
                                  "of each; overrides --sample")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--png", help="write the pass/fail counts per dtype as a chart here")
    args = ap.parse_args(argv)
    results = sweep(args.sample, progress=True, ops=name_list(args.ops))
    s = summary(results)
    print(f"{s['pairs']} op/dtype pairs ({s['skipped']} skipped): forward {s['forward_pass_rate']:.2%}, "
          f"forward+backward {s['forward_backward_pass_rate']:.2%}; where the profile allows the dtype "
          f"({s['profile_limited']} pairs need one it lacks): forward {s['allowed_forward_pass_rate']:.2%}, "
          f"forward+backward {s['allowed_forward_backward_pass_rate']:.2%}")
    failures = [r for r in results if r.forward == "fail" or r.backward == "fail"]
    for r in failures:
        print(f"  {r.op:<40} {r.dtype:<9} fwd={r.forward:<5} bwd={r.backward:<5} {r.reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": s, "results": [asdict(r) for r in results]}, f, indent=2)
    if args.png:
        write_png(results, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
