"""Run PyTorch's OpInfo database on musa against the CPU device.

Every op in ``common_methods_invocations.op_db``: its sample inputs for each
dtype (float32, float16, bfloat16 where the profile has it, int64, bool) run
on the CPU and on musa with the same seed, forward and, where the op supports
autograd, backward; results are compared at dtype-aware tolerances.

    python -m torch_musa.ops.opinfo_sweep [--sample N] [--json out.json] [--png out.png]
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

import torch_musa  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]
TOL = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (1.3e-6, 1e-5)}
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


def _to(x, device):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        return y.requires_grad_(x.requires_grad) if y.is_floating_point() or y.is_complex() else y
    return x


def _to_musa_arg(x):
    if isinstance(x, torch.Tensor):
        return _to(x, "musa")
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("musa")
    if x == "cpu":
        return "musa"
    return x


def _compare(a, b, dtype, values: bool = True) -> None:
    fa, _ = tree_flatten(a)
    fb, _ = tree_flatten(b)
    assert len(fa) == len(fb), f"{len(fa)} outputs on cpu, {len(fb)} on musa"
    rtol, atol = TOL.get(dtype, (0, 0))
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor), f"cpu gave a tensor, musa gave {type(y).__name__}"
            assert y.device.type == "musa", f"result on {y.device}, expected musa"
            if not values:
                assert (x.shape, x.dtype) == (y.shape, y.dtype), f"{x.shape}/{x.dtype} vs {y.shape}/{y.dtype}"
                continue
            torch.testing.assert_close(y.cpu(), x, rtol=rtol, atol=atol, equal_nan=True,
                                       check_dtype=True, check_stride=False)
        elif isinstance(x, float) and x != x:
            assert y != y
        else:
            assert x == y, f"{x!r} != {y!r}"


def _grads(inputs, out):
    """Gradients of a weighted sum of the outputs with respect to every input."""
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    ins = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not ins:
        return None
    loss = sum((o.float() * (1 + torch.arange(o.numel(), device=o.device).reshape(o.shape) % 3)).sum()
               for o in outs)
    return torch.autograd.grad(loss, ins, allow_unused=True)


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
            _compare(ref, got, dtype, values=op.name not in UNINITIALIZED)
        except Exception as e:
            return Result(name, label, "fail", "skip", f"forward: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        if backward and bwd == "pass":
            try:
                g_ref = _grads(cpu_in, ref)
            except Exception:
                continue  # the CPU cannot differentiate this sample either
            try:
                g_got = _grads(musa_in, got)
                if g_ref is not None:
                    _compare(list(g_ref), list(g_got), dtype)
            except Exception as e:
                bwd, reason = "fail", f"backward: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return Result(name, label, fwd, bwd, reason)


def _load_op_db():
    """PyTorch's OpInfo list. Importing it runs its test harness's
    ``torch.backends.disable_global_flags()``, which would make later plain
    ``torch.backends.cudnn.benchmark = True`` lines in the same process raise;
    the flag is put back as it was."""
    flags_were_free = not torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db

    if flags_were_free:  # torch.backends wraps its module: reach the real globals
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return op_db


def cases(sample: int = 1, offset: int = 0):
    op_db = _load_op_db()

    from torch_musa import _state

    lacking = set(_state.profile.unsupported_dtypes())
    for i, op in enumerate(op_db):
        if i % sample != offset % sample:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype in supported and dtype not in lacking:
                yield op, dtype


def sweep(sample: int = 1, offset: int = 0, progress: bool = False) -> list[Result]:
    todo = list(cases(sample, offset))
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


# The error a profile without the dtype raises (csrc/host_call.cpp, HostCall::unsupported).
PROFILE_LIMIT = "is not supported by the musa hardware profile"


def _profile_limited(r: Result) -> bool:
    return PROFILE_LIMIT in r.reason


def _rates(ran: list[Result]) -> tuple[float, float]:
    fwd = sum(r.forward == "pass" for r in ran)
    both = sum(r.forward == "pass" and r.backward in ("pass", "n/a") for r in ran)
    return fwd / max(1, len(ran)), both / max(1, len(ran))


def summary(results: list[Result]) -> dict:
    """Pass rates over every pair run, and over the pairs the profile allows (a pair that
    needs a dtype the profile lacks fails by design, with the profile's clear error)."""
    ran = [r for r in results if r.forward != "skip"]
    fwd, both = _rates(ran)
    allowed_fwd, allowed_both = _rates([r for r in ran if not _profile_limited(r)])
    return {"pairs": len(ran), "skipped": len(results) - len(ran),
            "forward_pass_rate": fwd, "forward_backward_pass_rate": both,
            "profile_limited": sum(_profile_limited(r) for r in ran),
            "allowed_forward_pass_rate": allowed_fwd, "allowed_forward_backward_pass_rate": allowed_both}


def write_png(results: list[Result], path: str) -> None:
    """Per dtype: pairs passing forward and backward, forward only, failing on the
    profile's dtype limit, failing otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        elif _profile_limited(r):
            counts["profile lacks the dtype"][i] += 1
        else:
            counts["other failure"][i] += 1
    fig, ax = plt.subplots(figsize=(9, 3.6))
    left = [0] * len(dtypes)
    for kind, color in kinds.items():
        ax.barh(dtypes, counts[kind], left=left, color=color, label=kind)
        left = [a + b for a, b in zip(left, counts[kind])]
    s = summary(results)
    ax.set_title(f"OpInfo sweep on musa vs CPU: forward {s['forward_pass_rate']:.2%}, forward+backward "
                 f"{s['forward_backward_pass_rate']:.2%}\n(where the profile allows: "
                 f"{s['allowed_forward_pass_rate']:.2%} / {s['allowed_forward_backward_pass_rate']:.2%})",
                 fontsize=9)
    ax.set_xlabel("op/dtype pairs")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1, help="take every Nth op (1 = all)")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--png", help="write the pass/fail counts per dtype as a chart here")
    args = ap.parse_args(argv)
    results = sweep(args.sample, progress=True)
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
