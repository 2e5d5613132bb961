"""Output-layout parity over PyTorch's OpInfo database: musa against the CPU and meta.

Eager code trusts an output's strides (``.view`` after a transpose, ``out=``,
``as_strided``) and compiled code trusts the meta kernel's; a musa kernel that
returns the right values in another layout reads wrong data silently there.
For every op in ``common_methods_invocations.op_db`` (float32 by default), its samples
as given, made non-contiguous (``SampleInput.noncontiguous``), with transposed memory,
and channels_last for 4-D inputs, and for ops with an ``out=`` form that form with
out tensors of size 0 and of the right shape over transposed memory (which must be
written through and returned), run on the CPU, musa, the meta device and as
FakeTensors of musa tensors (what torch.compile traces: the meta kernels reached
through musa's own choices, such as its SDPA backend). Every tensor output (and,
where the op has autograd, every input gradient) is compared in sizes, significant
strides (of dims longer than 1, as Inductor's and PyTorch's meta tests check them),
storage offset, dtype and whether it aliases an input. A CPU-vs-meta difference is
stock PyTorch's and is recorded apart from musa's (``musa_owned`` says what counts).

    python -m torch_musa.testing.layout_sweep [--dtypes float32,float16,bfloat16] [--sample N]
        [--ops NAME ...] [--json out.json] [--md out.md] [--png out.png]
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten, tree_map

from torch_musa._table import render

from .sweep_common import draw_counts, load_testing_db, progress_bar, to_device, weighted_sum

MAX_SAMPLES = 3
MAX_DISTINCT = 6
_CONV_REASON = (
    "PyTorch's fake convolution_backward picks the layout per convolution backend and gives "
    "PrivateUse1's (Overrideable) contiguous gradients; musa's convolution_backward_overrideable runs "
    "the CPU's kernel, which keeps channels_last as the CPU device (and cuDNN) does. Eager code reads "
    "the real strides; compiled code gets the values right (a compiled channels_last Conv2d/"
    "ConvTranspose2d stack's gradients match eager: tests/ops/test_layout_parity.py)")
#: (op, sample variant, output kind, field) -> why musa keeps this layout. Counted apart.
KNOWN = {(op, "channels_last", "grad", "strides"): _CONV_REASON
         for op in ("nn.functional.conv2d", "nn.functional.conv_transpose2d")}
KNOWN[("_native_batch_norm_legit", "out-transposed", "out", "sizes")] = (
    "stock PyTorch: in eval mode the CPU kernel returns empty save_mean/save_invstd, the meta kernel "
    "(C,)-shaped ones; musa runs the CPU's kernel and matches the CPU (the functional form's "
    "difference is recorded as stock CPU-vs-meta)")


def known_reason(m) -> str | None:
    """The reason a mismatch is kept on purpose (``KNOWN``), or None."""
    return KNOWN.get((m.op, m.sample.split("/")[-1], m.where.split("[")[0], m.field))


# Ops whose output layout is not an op contract: their results are not compared.
# (None so far; add an op here only with the reason next to it.)
SKIP: dict[str, str] = {}


@dataclass
class Mismatch:
    op: str
    sample: str      # "<index>/<variant>": as-is | noncontiguous | transposed | channels_last, or
                     # out-empty | out-transposed (the op's out= form: out tensors of size 0, or
                     # of the right shape over transposed memory)
    where: str       # "out[i]" or "grad[i]"
    against: str     # cpu | meta
    field: str       # sizes | strides | storage_offset | dtype | aliases_input | count
    musa: str
    reference: str


@dataclass
class OpResult:
    op: str
    dtype: str = "float32"
    samples: int = 0
    meta_ran: int = 0
    meta_only: int = 0  # samples the CPU could not run: musa held to meta alone
    contract_samples: list = field(default_factory=list)  # samples whose meta layout is known
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


def _signature(sample) -> tuple:
    """What makes a sample take another kernel path: its tensors' ranks and its keyword names."""
    ts = [t for t in tree_flatten((sample.input, sample.args))[0] if isinstance(t, torch.Tensor)]
    return tuple(t.dim() for t in ts), tuple(sorted(sample.kwargs))


def _pick(samples: list) -> list:
    """The first MAX_SAMPLES samples, plus the first of every other signature (4-D attention
    inputs come after the 3-D ones), up to MAX_DISTINCT in all."""
    picked, seen = list(samples[:MAX_SAMPLES]), {_signature(x) for x in samples[:MAX_SAMPLES]}
    for x in samples[MAX_SAMPLES:]:
        if len(picked) >= MAX_DISTINCT:
            break
        sig = _signature(x)
        if sig not in seen:
            seen.add(sig)
            picked.append(x)
    return picked


def _run(op, sample, device, backward, args_on_cpu=False):
    """Place the sample on ``device`` (same layouts), run it, and describe outputs and gradients.
    ``args_on_cpu``: tensors other than the input stay on the CPU (tensor_split's indices must).
    ``device="fake"``: FakeTensors of musa tensors, what torch.compile traces with: the meta
    kernels reached through musa's own choices (SDPA's backend is chosen per device)."""
    if device in ("fake", "fake-cpu"):
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=True)
        real = _place_all(sample, "musa" if device == "fake" else "cpu", args_on_cpu)
        inp = tree_map(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t, real)
        with mode:
            return _run_placed(op, inp, backward)
    return _run_placed(op, _place_all(sample, device, args_on_cpu), backward)


def _place_all(sample, device, args_on_cpu):
    return (_place(sample.input, device),
            *tree_map(lambda v: _place(v, "cpu" if args_on_cpu else device), (sample.args, sample.kwargs)))


def _run_placed(op, inp, backward):
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


def _try(op, sample, device, backward):
    """``_run``, or None where the device cannot run the sample (no meta kernel,
    data-dependent output shape)."""
    try:
        try:
            return _run(op, sample, device, backward)
        except RuntimeError as e:
            if "to be on cpu" not in str(e):
                raise
            return _run(op, sample, device, backward, args_on_cpu=True)
    except Exception:
        return None


class _OutCall:
    """``op(..., out=...)`` with out tensors made for its functional result: ``empty`` (size 0,
    resized by the kernel) or ``transposed`` (the right shape over transposed memory, which the
    kernel must write through, keeping its strides). Returns what the call returned, and raises
    when that is not the out tensor itself."""

    def __init__(self, op, kind: str):
        self.op, self.kind = op, kind

    def _make(self, t):
        if self.kind == "empty":
            return torch.empty(0, dtype=t.dtype, device=t.device)
        return _swap_memory(torch.empty(t.shape, dtype=t.dtype, device=t.device))

    def __call__(self, inp, *args, **kwargs):
        with torch.no_grad():
            ref = self.op(inp, *args, **kwargs)
            flat = tree_flatten(ref)[0]
            if not flat or not all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in flat):
                raise TypeError("no strided tensor outputs to pass as out=")
            outs = [self._make(t) for t in flat]
            got = self.op(inp, *args, out=outs[0] if isinstance(ref, torch.Tensor) else tuple(outs), **kwargs)
        got = tree_flatten(got)[0]
        for g, o in zip(got, outs):
            if StorageWeakRef(g.untyped_storage()).cdata != StorageWeakRef(o.untyped_storage()).cdata:
                raise RuntimeError("out= returned a tensor that is not the out tensor")
        return got


def _compare(res: OpResult, name: str, tag: str, fn, s, backward: bool) -> None:
    """Run ``fn`` over sample ``s`` on the CPU, musa, the meta device and as FakeTensors of
    musa tensors, and record in ``res`` every layout difference."""
    try:
        cpu = _run(fn, s, "cpu", backward)
    except Exception:
        cpu = None  # the CPU refuses this sample: meta is the reference
    try:
        try:
            musa = _run(fn, s, "musa", backward)
        except RuntimeError as e:
            if "to be on cpu" not in str(e):
                raise
            musa = _run(fn, s, "musa", backward, args_on_cpu=True)
    except Exception as e:
        if cpu is not None:
            res.samples += 1
            res.musa_vs_cpu.append(Mismatch(name, tag, "op", "cpu", "raised",
                                            f"{type(e).__name__}: {str(e).splitlines()[0][:120]}", "ran"))
        return
    meta = _try(fn, s, "meta", backward)   # stock PyTorch's meta kernels on the meta device
    fake = _try(fn, s, "fake", backward)   # the same through musa's choices, as compile traces
    contract = fake if fake is not None else meta
    if cpu is None and contract is None:
        return
    res.samples += 1
    res.meta_ran += contract is not None
    if contract is not None:
        res.contract_samples.append(tag)
    if cpu is None:
        cpu = (None, None)
        res.meta_only += 1
    for where, a, b in (("out", musa[0], cpu[0]), ("grad", musa[1], cpu[1])):
        if a is not None and b is not None:
            res.musa_vs_cpu += [Mismatch(name, tag, w, "cpu", f, x, y) for w, f, x, y in diff(a, b, where)]
    if contract is not None:
        against = "meta" if fake is not None else "meta-device"
        for where, a, m in (("out", musa[0], contract[0]), ("grad", musa[1], contract[1])):
            if a is not None and m is not None:
                res.musa_vs_meta += [Mismatch(name, tag, w, against, f, x, y)
                                     for w, f, x, y in diff(a, m, where)]
    # Stock PyTorch's own disagreements: the CPU against the meta device and against the
    # meta kernels over FakeTensors of CPU tensors (the contract compile assumes on the CPU).
    fake_cpu = _try(fn, s, "fake-cpu", backward) if cpu[0] is not None else None
    for ref, label in ((meta, "meta-device"), (fake_cpu, "meta-cpu")):
        if ref is None:
            continue
        for where, c, m in (("out", cpu[0], ref[0]), ("grad", cpu[1], ref[1])):
            if c is not None and m is not None:
                res.cpu_vs_meta += [Mismatch(name, tag, w, label, f, x, y) for w, f, x, y in diff(c, m, where)]


def run_op(op, dtype=torch.float32) -> OpResult:
    """Every sample variant of ``op`` in ``dtype`` on the CPU, musa and meta. Where the CPU
    cannot run a sample (a half dtype its kernels lack, served by musa's own kernel) musa is
    held to meta alone."""
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    res = OpResult(name, str(dtype).replace("torch.", ""))
    if name in SKIP:
        res.skipped = SKIP[name]
        return res
    if dtype not in op.supported_dtypes("cpu") and dtype not in op.supported_dtypes("cuda"):
        res.skipped = f"no {res.dtype}"
        return res
    backward = bool(op.supports_autograd)
    try:
        samples = _pick(list(op.sample_inputs("cpu", dtype, requires_grad=backward)))
    except Exception as e:
        res.skipped = f"sample_inputs: {type(e).__name__}"
        return res
    for i, s0 in enumerate(samples):
        try:
            variants = list(_variants(s0))
        except Exception:
            variants = [("as-is", s0)]
        for vname, s in variants:
            _compare(res, name, f"{i}/{vname}", op, s, backward)
        if op.supports_out:
            for kind in ("empty", "transposed"):
                _compare(res, name, f"{i}/out-{kind}", _OutCall(op, kind), s0, False)
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


def sweep(sample: int = 1, offset: int = 0, names=None, progress: bool = False,
          dtypes=(torch.float32,)) -> list[OpResult]:
    todo = [(op, dt) for op in ops(sample, offset, names) for dt in dtypes]
    results = []
    bad = 0
    with warnings.catch_warnings(), progress_bar(todo, progress, "ops") as bar:
        warnings.simplefilter("ignore")
        for op, dt in bar:
            results.append(run_op(op, dt))
            bad += bool(musa_owned(results[-1]))
            bar.set_postfix_str(f"musa mismatches in {bad} ops; {results[-1].op}", refresh=False)
    return results


def musa_owned(r: OpResult) -> list[Mismatch]:
    """musa's mismatches. The contract is the meta kernels' layout reached through musa's own
    choices (FakeTensors of musa tensors, as torch.compile traces; the meta device where that
    cannot run): musa differing from it counts. Differing from the CPU counts where musa also
    differs from the contract or no contract ran (a musa-only backend, such as flash SDPA in
    half precision, may lay out differently from the CPU's math path when its meta says so).
    Fields where the stock CPU already disagrees with the meta device or with the meta kernels
    over FakeTensors of CPU tensors are stock PyTorch's, not counted."""
    stock = {(m.sample, m.where, m.field) for m in r.cpu_vs_meta}
    against_contract = {(m.sample, m.where, m.field) for m in r.musa_vs_meta}
    has_contract = set(r.contract_samples)
    out = [m for m in r.musa_vs_meta if (m.sample, m.where, m.field) not in stock]
    seen = {(m.sample, m.where, m.field) for m in out}
    out += [m for m in r.musa_vs_cpu
            if (m.sample, m.where, m.field) not in stock | seen
            and ((m.sample, m.where, m.field) in against_contract or m.sample not in has_contract)]
    return out


def summary(results: list[OpResult]) -> dict:
    ran = [r for r in results if r.samples]
    return {"ops": len(results), "ops_run": len(ran), "samples": sum(r.samples for r in ran),
            "samples_with_meta": sum(r.meta_ran for r in ran),
            "samples_meta_only": sum(r.meta_only for r in ran),
            "musa_ops_mismatching": sum(bool(musa_owned(r)) for r in ran),
            "musa_unexplained_mismatches": sum(known_reason(m) is None for r in ran for m in musa_owned(r)),
            "musa_known_mismatches": sum(known_reason(m) is not None for r in ran for m in musa_owned(r)),
            "musa_mismatches": sum(len(musa_owned(r)) for r in ran),
            "musa_vs_cpu_mismatches": sum(len(r.musa_vs_cpu) for r in ran),
            "musa_vs_meta_mismatches": sum(len(r.musa_vs_meta) for r in ran),
            "cpu_vs_meta_ops": sum(bool(r.cpu_vs_meta) for r in ran),
            "cpu_vs_meta_mismatches": sum(len(r.cpu_vs_meta) for r in ran)}


def table(results: list[OpResult], limit_per_op: int = 4) -> str:
    s = summary(results)
    dts = ", ".join(sorted({r.dtype for r in results}))
    lines = [f"# Output-layout parity: musa vs CPU and meta (op_db; {dts})", "",
             f"{s['ops_run']} op/dtype pairs run ({s['samples']} sample variants, {s['samples_with_meta']} also "
             f"on meta, {s['samples_meta_only']} that the CPU cannot run held to meta alone). "
             f"musa's own mismatches: {s['musa_mismatches']} in {s['musa_ops_mismatching']} ops. "
             f"Stock CPU vs meta (not musa's): {s['cpu_vs_meta_mismatches']} in {s['cpu_vs_meta_ops']} ops.", "",
             f"Of musa's, {s['musa_known_mismatches']} are kept on purpose (`KNOWN`, reasons below) and "
             f"{s['musa_unexplained_mismatches']} are not. \"vs meta\": the meta kernels over FakeTensors "
             "of musa tensors (what torch.compile assumes); \"meta-device\": the meta device, where that "
             "could not run.", "",
             "## musa's mismatches", "",
             render(["op", "dtype", "sample", "output", "vs", "field", "musa", "reference", "known"],
                    [[m.op, r.dtype, m.sample, m.where, m.against, m.field, m.musa, m.reference,
                      "yes" if known_reason(m) else "**no**"]
                     for r in results for m in musa_owned(r)[:limit_per_op]], markdown=True)]
    lines += ["", "Kept on purpose:", ""] + [f"- {' / '.join(k)}: {v}" for k, v in KNOWN.items()]
    lines += ["", "## Stock PyTorch: CPU vs meta (recorded, not counted against musa)", "",
              render(["op", "dtype", "sample", "output", "field", "cpu", "meta"],
                     [[m.op, r.dtype, m.sample, m.where, m.field, m.musa, m.reference]
                      for r in results for m in r.cpu_vs_meta[:limit_per_op]], markdown=True)]
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
                f"Output-layout mismatches over op_db ({s['ops_run']} op/dtype pairs, {s['samples']} samples)",
                "mismatching outputs/grads")


def load(path: str) -> list[OpResult]:
    """The results a ``--json`` file holds."""
    with open(path) as f:
        rows = json.load(f)["results"]
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != "musa_owned"}
        for k in ("musa_vs_cpu", "musa_vs_meta", "cpu_vs_meta"):
            row[k] = [Mismatch(**m) for m in row[k]]
        out.append(OpResult(**row))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1, help="take every Nth op (1 = all)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--ops", nargs="*", help="only these op names")
    ap.add_argument("--dtypes", default="float32", help="comma-separated, e.g. float32,float16,bfloat16")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--merge", nargs="*", help="instead of running: merge these --json files (runs split "
                                               "by dtype, each under 10 minutes) into --json/--md/--png")
    args = ap.parse_args(argv)
    if args.merge:
        merged = {}  # a later file's (op, dtype) replaces an earlier one's (a re-run after a fix)
        for path in args.merge:
            merged.update({(r.op, r.dtype): r for r in load(path)})
        results = list(merged.values())
    else:
        from torch_musa.ops import registry

        registry.set_fallback_mode("silent")
        dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
        results = sweep(args.sample, args.offset, set(args.ops) if args.ops else None, progress=True,
                        dtypes=dtypes)
    s = summary(results)
    if args.json:
        with open(args.json, "w") as f:
            # contract_samples matters only for samples with a musa-vs-CPU mismatch: keep those
            json.dump({"summary": s, "results": [
                {**asdict(r), "contract_samples": [t for t in r.contract_samples
                                                   if t in {m.sample for m in r.musa_vs_cpu}],
                 "musa_owned": [asdict(m) for m in musa_owned(r)]}
                for r in results if r.samples or r.skipped]}, f, separators=(",", ":"))
    if args.md:
        with open(args.md, "w") as f:
            f.write(table(results))
    if args.png:
        write_png(results, args.png)
    print(json.dumps(s))  # after the files: a closed pipe (| head) must not lose them
    for r in results:
        for m in musa_owned(r):
            known = "known" if known_reason(m) else "NEW"
            print(f"  {known:<5} {m.op:<32} {r.dtype:<8} {m.sample:<16} {m.where:<8} vs {m.against:<4} "
                  f"{m.field:<14} musa={m.musa} ref={m.reference}")
    return 1 if s["musa_unexplained_mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
