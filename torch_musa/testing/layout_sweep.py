"""Output-layout parity over PyTorch's OpInfo database: musa against the CPU and meta.

Eager code trusts an output's strides (``.view`` after a transpose, ``out=``,
``as_strided``) and compiled code trusts the meta kernel's; a musa kernel that
returns the right values in another layout reads wrong data silently there.
For every op in ``common_methods_invocations.op_db`` (float32), its samples as
given, made non-contiguous (``SampleInput.noncontiguous``), transposed, and
channels_last for 4-D inputs, run on the CPU, musa and the meta device: every
tensor output (and, where the op has autograd, every input gradient) must
match in sizes, significant strides (those of dims longer than 1, as
Inductor's and PyTorch's meta tests check them), storage offset, dtype and
whether it aliases an input. A CPU-vs-meta difference is stock PyTorch's and
is recorded apart from musa's.

    python -m torch_musa.testing.layout_sweep [--sample N] [--json out.json] [--md out.md] [--png out.png]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten, tree_map

from .sweep_common import draw_counts, load_testing_db, to_device, weighted_sum

MAX_SAMPLES = 3
# Ops whose output layout is not an op contract: their results are not compared.
# (None so far; add an op here only with the reason next to it.)
SKIP: dict[str, str] = {}


@dataclass
class Mismatch:
    op: str
    sample: str      # "<index>/<variant>": variant is as-is | noncontiguous | transposed | channels_last
    where: str       # "out[i]" or "grad[i]"
    against: str     # cpu | meta
    field: str       # sizes | strides | storage_offset | dtype | aliases_input | count
    musa: str
    reference: str


@dataclass
class OpResult:
    op: str
    samples: int = 0
    meta_ran: int = 0
    musa_vs_cpu: list = field(default_factory=list)
    musa_vs_meta: list = field(default_factory=list)
    cpu_vs_meta: list = field(default_factory=list)  # stock PyTorch's, not musa's
    skipped: str = ""


def significant_strides(t: torch.Tensor) -> tuple:
    """Strides of the dims that have more than one element (others never change an address);
    () for an empty tensor."""
    if t.numel() == 0:
        return ()
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


def _storages(tensors) -> set:
    out = set()
    for t in tensors:
        try:
            out.add(StorageWeakRef(t.untyped_storage()).cdata)
        except Exception:
            pass
    return out


def describe(outs, inputs) -> list:
    """Per tensor output: (sizes, significant strides, storage_offset, dtype, aliases an input),
    or None for a non-tensor."""
    ins = _storages([t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)])
    rows = []
    for o in outs:
        if not isinstance(o, torch.Tensor) or o.layout != torch.strided:
            rows.append(None)
            continue
        try:
            alias = StorageWeakRef(o.untyped_storage()).cdata in ins
        except Exception:
            alias = None
        rows.append({"sizes": tuple(o.shape), "strides": significant_strides(o),
                     "storage_offset": o.storage_offset() if o.numel() else 0,
                     "dtype": str(o.dtype).replace("torch.", ""), "aliases_input": alias})
    return rows


def diff(a: list, b: list, prefix: str) -> list[tuple]:
    """(where, field, a's, b's) for every field that differs between two ``describe`` lists."""
    if len(a) != len(b):
        return [(prefix, "count", str(len(a)), str(len(b)))]
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x is None or y is None:
            continue
        for k in ("sizes", "dtype", "strides", "storage_offset", "aliases_input"):
            if x[k] is None or y[k] is None:
                continue
            if x[k] != y[k]:
                out.append((f"{prefix}[{i}]", k, str(x[k]), str(y[k])))
                if k in ("sizes", "dtype"):
                    break  # the rest follows from it
    return out


def _move(device):
    def f(x):
        if isinstance(x, torch.Tensor):
            return to_device(x, device)
        if isinstance(x, torch.device) and x.type == "cpu" or x == "cpu":
            return torch.device(device)
        return x
    return f


def _same_layout_copy(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` on ``device`` with its strides and storage offset (``.to`` keeps dense layouts
    only; a sample made non-contiguous or a view must stay one)."""
    if t.layout != torch.strided:
        return t.detach().to(device)
    need = max(t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1, 0) \
        if t.numel() else 0
    base = torch.empty(max(need, t.storage_offset()), dtype=t.dtype, device=device)
    y = base.as_strided(t.shape, t.stride(), t.storage_offset())
    if device != "meta" and t.numel():
        y.copy_(t.detach())
    if t.requires_grad and (t.is_floating_point() or t.is_complex()):
        y = y.detach().requires_grad_(True)  # a leaf with the same layout
    return y


def _place(x, device):
    if isinstance(x, torch.Tensor):
        return _same_layout_copy(x, device)
    return _move(device)(x)


def _variants(sample):
    """(name, SampleInput) for the sample as given, non-contiguous, transposed, channels_last."""
    yield "as-is", sample
    try:
        yield "noncontiguous", sample.noncontiguous()
    except Exception:
        pass
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
        return
    if x.dim() >= 2 and any(n > 1 for n in x.shape[-3:]):
        # Every floating tensor keeps its shape over swapped memory: (-2, -1) for a matrix,
        # (-3, -2) above it, the layout of (B, L, H, E) memory viewed as (B, H, L, E).
        yield "transposed", _relayout(sample, _swap_memory)
    if x.dim() == 4 and x.numel() > 1:
        yield "channels_last", _relayout(sample, lambda t: t.contiguous(memory_format=torch.channels_last)
                                         if t.dim() == 4 else t)


def _swap_memory(t: torch.Tensor) -> torch.Tensor:
    if t.dim() < 2:
        return t
    a, b = (-2, -1) if t.dim() == 2 else (-3, -2)
    return t.transpose(a, b).contiguous().transpose(a, b)


def _relayout(sample, f):
    def g(t):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or not t.is_floating_point():
            return t
        return f(t.detach()).requires_grad_(t.requires_grad)

    inp, args, kwargs = tree_map(g, (sample.input, sample.args, sample.kwargs))
    return type(sample)(inp, args=args, kwargs=kwargs, output_process_fn_grad=sample.output_process_fn_grad)


def _run(op, sample, device, backward, args_on_cpu=False):
    """Place the sample on ``device`` (same layouts), run it, and describe outputs and gradients.
    ``args_on_cpu``: tensors other than the input stay on the CPU (tensor_split's indices must)."""
    inp = (_place(sample.input, device),
           *tree_map(lambda v: _place(v, "cpu" if args_on_cpu else device), (sample.args, sample.kwargs)))
    torch.manual_seed(0)
    out = op(inp[0], *inp[1], **inp[2])
    outs = [o for o in tree_flatten(out)[0]]
    fwd = describe(outs, inp)
    grads = None
    if backward:
        leaves = [t for t in tree_flatten(inp)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        loss = weighted_sum(out) if leaves else None
        if loss is not None:
            try:
                g = torch.autograd.grad(loss, leaves, allow_unused=True)
                grads = describe(list(g), ())
                # a gradient's aliasing of the inputs is not an op contract: drop it
                grads = [None if r is None else {**r, "aliases_input": None} for r in grads]
            except Exception:
                grads = None
    return fwd, grads


def run_op(op) -> OpResult:
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    res = OpResult(name)
    if name in SKIP:
        res.skipped = SKIP[name]
        return res
    if torch.float32 not in op.supported_dtypes("cpu"):
        res.skipped = "no float32"
        return res
    backward = bool(op.supports_autograd)
    try:
        samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=backward))[:MAX_SAMPLES]
    except Exception as e:
        res.skipped = f"sample_inputs: {type(e).__name__}"
        return res
    for i, s0 in enumerate(samples):
        try:
            variants = list(_variants(s0))
        except Exception:
            variants = [("as-is", s0)]
        for vname, s in variants:
            tag = f"{i}/{vname}"
            try:
                cpu = _run(op, s, "cpu", backward)
            except Exception:
                continue  # the CPU refuses this sample: nothing to hold musa to
            res.samples += 1
            try:
                try:
                    musa = _run(op, s, "musa", backward)
                except RuntimeError as e:
                    if "to be on cpu" not in str(e):
                        raise
                    musa = _run(op, s, "musa", backward, args_on_cpu=True)
            except Exception as e:
                res.musa_vs_cpu.append(Mismatch(name, tag, "op", "cpu", "raised",
                                                f"{type(e).__name__}: {str(e).splitlines()[0][:120]}", "ran"))
                continue
            try:
                try:
                    meta = _run(op, s, "meta", backward)
                except RuntimeError as e:
                    if "to be on cpu" not in str(e):
                        raise
                    meta = _run(op, s, "meta", backward, args_on_cpu=True)
                res.meta_ran += 1
            except Exception:
                meta = None  # no meta kernel / data-dependent op: CPU only
            for where, a, b in (("out", musa[0], cpu[0]), ("grad", musa[1], cpu[1])):
                if a is not None and b is not None:
                    res.musa_vs_cpu += [Mismatch(name, tag, w, "cpu", f, x, y) for w, f, x, y in diff(a, b, where)]
            if meta is not None:
                for where, a, m in (("out", musa[0], meta[0]), ("grad", musa[1], meta[1])):
                    if a is not None and m is not None:
                        res.musa_vs_meta += [Mismatch(name, tag, w, "meta", f, x, y)
                                             for w, f, x, y in diff(a, m, where)]
                for where, c, m in (("out", cpu[0], meta[0]), ("grad", cpu[1], meta[1])):
                    if c is not None and m is not None:
                        res.cpu_vs_meta += [Mismatch(name, tag, w, "meta", f, x, y)
                                            for w, f, x, y in diff(c, m, where)]
    return res


def ops(sample: int = 1, offset: int = 0, names=None):
    op_db = load_testing_db("common_methods_invocations", "op_db")
    for i, op in enumerate(op_db):
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if names is not None:
            if full in names or op.name in names:
                yield op
        elif i % sample == offset % sample:
            yield op


def sweep(sample: int = 1, offset: int = 0, names=None, progress: bool = False) -> list[OpResult]:
    todo = list(ops(sample, offset, names))
    results = []
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, op in enumerate(todo):
            results.append(run_op(op))
            if progress and (k % 10 == 0 or k == len(todo) - 1):
                bad = sum(bool(musa_owned(r)) for r in results)
                print(f"\r[{k + 1}/{len(todo)}] {time.time() - t0:.0f}s musa mismatches in {bad} ops "
                      f"{results[-1].op:<36}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return results


def musa_owned(r: OpResult) -> list[Mismatch]:
    """musa's mismatches: differs from the CPU where the CPU agrees with meta (or meta did not
    run), or from meta where the CPU agrees with meta. Where stock CPU and meta disagree on
    the same output field, musa matching either is not counted."""
    stock = {(m.sample, m.where, m.field) for m in r.cpu_vs_meta}
    out = [m for m in r.musa_vs_cpu if (m.sample, m.where, m.field) not in stock]
    seen = {(m.sample, m.where, m.field) for m in out}
    out += [m for m in r.musa_vs_meta
            if (m.sample, m.where, m.field) not in stock and (m.sample, m.where, m.field) not in seen]
    return out


def summary(results: list[OpResult]) -> dict:
    ran = [r for r in results if r.samples]
    return {"ops": len(results), "ops_run": len(ran), "samples": sum(r.samples for r in ran),
            "samples_with_meta": sum(r.meta_ran for r in ran),
            "musa_ops_mismatching": sum(bool(musa_owned(r)) for r in ran),
            "musa_mismatches": sum(len(musa_owned(r)) for r in ran),
            "musa_vs_cpu_mismatches": sum(len(r.musa_vs_cpu) for r in ran),
            "musa_vs_meta_mismatches": sum(len(r.musa_vs_meta) for r in ran),
            "cpu_vs_meta_ops": sum(bool(r.cpu_vs_meta) for r in ran),
            "cpu_vs_meta_mismatches": sum(len(r.cpu_vs_meta) for r in ran)}


def table(results: list[OpResult], limit_per_op: int = 4) -> str:
    s = summary(results)
    lines = ["# Output-layout parity: musa vs CPU and meta (op_db, float32)", "",
             f"{s['ops_run']} ops run ({s['samples']} sample variants, {s['samples_with_meta']} also on meta). "
             f"musa's own mismatches: {s['musa_mismatches']} in {s['musa_ops_mismatching']} ops. "
             f"Stock CPU vs meta (not musa's): {s['cpu_vs_meta_mismatches']} in {s['cpu_vs_meta_ops']} ops.", "",
             "## musa's mismatches", "",
             "| op | sample | output | vs | field | musa | reference |", "|---|---|---|---|---|---|---|"]
    for r in results:
        for m in musa_owned(r)[:limit_per_op]:
            lines.append(f"| {m.op} | {m.sample} | {m.where} | {m.against} | {m.field} | {m.musa} | {m.reference} |")
    lines += ["", "## Stock PyTorch: CPU vs meta (recorded, not counted against musa)", "",
              "| op | sample | output | field | cpu | meta |", "|---|---|---|---|---|---|"]
    for r in results:
        for m in r.cpu_vs_meta[:limit_per_op]:
            lines.append(f"| {m.op} | {m.sample} | {m.where} | {m.field} | {m.musa} | {m.reference} |")
    return "\n".join(lines) + "\n"


def write_png(results: list[OpResult], path: str) -> None:
    rows = ["sizes", "strides", "storage_offset", "dtype", "aliases_input", "count", "raised"]
    kinds = {"musa vs cpu": "tab:red", "musa vs meta": "tab:orange", "stock cpu vs meta": "tab:grey"}
    counts = {k: [0] * len(rows) for k in kinds}
    for r in results:
        for m in musa_owned(r):
            counts["musa vs cpu" if m.against == "cpu" else "musa vs meta"][rows.index(m.field)] += 1
        for m in r.cpu_vs_meta:
            counts["stock cpu vs meta"][rows.index(m.field)] += 1
    s = summary(results)
    draw_counts(path, rows, counts, kinds,
                f"Output-layout mismatches over op_db float32 ({s['ops_run']} ops, {s['samples']} samples)",
                "mismatching outputs/grads")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1, help="take every Nth op (1 = all)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--ops", nargs="*", help="only these op names")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--png")
    args = ap.parse_args(argv)
    from torch_musa.ops import registry

    registry.set_fallback_mode("silent")
    results = sweep(args.sample, args.offset, set(args.ops) if args.ops else None, progress=True)
    s = summary(results)
    print(json.dumps(s))
    for r in results:
        for m in musa_owned(r):
            print(f"  {m.op:<32} {m.sample:<16} {m.where:<8} vs {m.against:<4} {m.field:<14} "
                  f"musa={m.musa} ref={m.reference}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": s, "results": [
                {**asdict(r), "musa_owned": [asdict(m) for m in musa_owned(r)]}
                for r in results if r.samples or r.skipped]}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table(results))
    if args.png:
        write_png(results, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
