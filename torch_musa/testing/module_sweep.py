"""Run PyTorch's ModuleInfo database (``common_modules.module_db``) on musa against the CPU.

For every ``nn`` module in the database (and the dropout modules, which it
lacks), every float dtype the hardware profile has (float32, float16,
bfloat16; float64 only where the profile has it) and a few of the module's
generated inputs (training mode, and eval mode too where the two differ):

- forward: a module built on the CPU with a fixed seed, and a deep copy moved
  with ``.to("musa")``, give the same outputs (dtype-aware tolerances) and the
  same buffers afterwards (BatchNorm running stats; dropout under one seed);
- backward: the same gradients for every input and every parameter;
- identity: ``.to("musa")``, ``musa:0 -> musa:1``, ``.cpu()``, ``.half()`` /
  ``.to(dtype)`` keep each Parameter object, its ``.grad`` object and the
  hooks registered on it, as they do on CUDA (an optimizer built before the
  move, or tied weights, depend on it);
- state_dict: the musa module's ``state_dict`` saved with ``torch.save`` loads
  into a fresh CPU module and a fresh musa module (``map_location="musa"``)
  with the same values.

A pair counts when the CPU runs it: inputs the CPU cannot build or run are
skipped, as the database's own CPU tests would fail them too. A tool, so it
lives with the testing tools: it drives modules, ``torch.musa`` and the
checkpoint path, all layers below.

    python -m torch_musa.testing.module_sweep [--sample N] [--modules nn.Linear,...]
        [--max-inputs N] [--json out.json] [--md out.md] [--png out.png]
"""
from __future__ import annotations

import argparse
import collections
import copy
import importlib.metadata
import io
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_musa._table import render
from torch_musa._driver import KERNEL_DEVICE
from torch_musa.config import CONFIG

from .dtypes import LOW_PRECISION
from .sweep_common import (ERROR_FACTOR, compare, distances_from_reference, draw_counts, load_testing_db,
                           name_list, pick_entries, profile_limited, progress_bar, rate, to_device,
                           weighted_grads, weighted_sum, why)
from .tolerances import tolerance

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
CHECKS = ("forward", "backward", "identity", "state_dict")
MAX_INPUTS = 8   # per module and mode, spread over the generated list
SEED = 0
# Half precision where musa runs another algorithm or summation order than the CPU (musa's
# flash attention; RNNs project the input per step on any device but the CPU): musa's error
# against float32 must be of the CPU's order, at most ERROR_FACTOR times it (musa's attention
# alone is no less accurate than the CPU's: error ratio median 0.7, max 2.3).


@dataclass
class Result:
    module: str
    dtype: str
    forward: str     # pass | fail | skip
    backward: str    # pass | fail | n/a (nothing to differentiate, or the CPU cannot)
    identity: str    # pass | fail | n/a (no parameters)
    state_dict: str  # pass | fail | n/a (empty state)
    inputs: int = 0  # module inputs compared
    reason: str = ""
    # checks that passed against the float32 result, not the CPU's bits (half precision)
    by_float32: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.forward == "pass" and all(getattr(self, c) in ("pass", "n/a") for c in CHECKS[1:])

    @property
    def note(self) -> str:
        return (f"{' and '.join(self.by_float32)} within {ERROR_FACTOR}x the CPU's distance from float32"
                if self.by_float32 else "")


def _label(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _spread(items: list, n: int) -> list:
    """At most n items, evenly spaced, so later variants (masks, no-batch inputs) are seen too."""
    if len(items) <= n:
        return items
    return [items[i * len(items) // n] for i in range(n)]


def _map_once(fn, tree):
    """tree_map that maps a tensor passed twice (KLDivLoss's input as its own target) to one
    new tensor, so the copies alias as the originals do and gradients add up the same."""
    done: dict[int, object] = {}

    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in done:
            done[id(x)] = fn(x)
        return done[id(x)]
    return tree_map(one, tree)


def _musa(tree):
    return _map_once(lambda x: to_device(x, "musa"), tree)


def _build(mi, ctor, dtype, training: bool, seed: int = SEED) -> torch.nn.Module:
    """The module on the CPU as PyTorch's module tests build it: fixed seed, then ``.to(dtype)``."""
    args, kwargs = copy.deepcopy((ctor.args, ctor.kwargs))
    torch.manual_seed(seed)
    m = mi.module_cls(*args, **kwargs).to(dtype)
    return m.train(training)


def _materialize_lazy(m, fwd) -> None:
    """Initialize a lazy module's parameters on the CPU, without a forward (buffers
    untouched). Only the host driver draws musa's initial weights from the CPU's
    generator; elsewhere a first forward on musa would start from other weights."""
    if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin) and m.has_uninitialized_params():
        torch.manual_seed(SEED)
        m._infer_parameters(m, fwd[0], fwd[1])


def _forward(m, fwd):
    torch.manual_seed(SEED)
    return m(*fwd[0], **fwd[1])


def _backward(out) -> None:
    """``.backward()`` of the sweeps' weighted sum of the outputs (so .grad accumulates)."""
    loss = weighted_sum(out)
    if loss is not None:
        loss.backward()


def _assert_same_state(ref: dict, got: dict, device: str, what: str) -> None:
    """Saved and loaded state is the same bits (no tolerance), on the expected device."""
    assert list(ref) == list(got), f"{what}: keys {list(got)} vs {list(ref)}"
    for k in ref:
        assert got[k].device.type == device, f"{what}: '{k}' is on {got[k].device}, expected {device}"
        try:
            torch.testing.assert_close(got[k].cpu(), ref[k].cpu(), rtol=0, atol=0, equal_nan=True)
        except AssertionError as e:
            raise AssertionError(f"{what}: '{k}': {str(e).strip().splitlines()[0]}") from None


def _widen(tree):
    """Low-precision tensors as float32 leaves (same values, same requires_grad)."""
    return _map_once(lambda x: x.detach().float().requires_grad_(x.requires_grad)
                     if x.dtype in LOW_PRECISION else x, tree)


def _float32_reference(mi, ctor, fwd, dtype, training):
    """The same module and inputs (the low-precision values, widened) run in float32 on the CPU:
    outputs, buffers afterwards, and the gradients (None where the CPU cannot differentiate)."""
    m = _build(mi, ctor, dtype, training).float()
    ins = _widen(fwd)
    out = _forward(m, ins)
    try:
        grads = weighted_grads((ins, list(m.parameters())), out)
    except Exception:
        grads = None
    return out, dict(m.named_buffers()), grads


def _no_farther_than_cpu(cpu, got, ref, dtype) -> None:
    """For each tensor, musa's largest distance from the float32 result is at most ERROR_FACTOR
    times the CPU's, plus the dtype's tolerance at the tensor's scale (rtol * max |ref| + atol):
    another summation order moves single elements by an ulp of the largest ones."""
    fc, fg, fr = (tree_flatten(x)[0] for x in (cpu, got, ref))
    assert len(fc) == len(fg) == len(fr), f"{len(fc)} cpu, {len(fg)} musa, {len(fr)} float32 results"
    rtol, atol = tolerance(dtype)
    for i, (a, b, r) in enumerate(zip(fc, fg, fr)):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            continue
        assert isinstance(b, torch.Tensor) and b.shape == a.shape and b.dtype == a.dtype, \
            f"result {i}: musa {getattr(b, 'shape', b)} vs cpu {a.shape}/{_label(a.dtype)}"
        if not a.numel():
            continue
        e_cpu, e_musa, scale = distances_from_reference(a, b, r, f"result {i}")
        allowed = ERROR_FACTOR * e_cpu + rtol * scale + atol
        assert e_musa <= allowed, (f"result {i} {tuple(a.shape)}: musa is {e_musa:.3g} from the float32 result, "
                                   f"the CPU {e_cpu:.3g} (allowed {allowed:.3g})")


# -- identity ---------------------------------------------------------------------------------

def _moves(dtype) -> list[tuple[str, object, str, torch.dtype]]:
    """(label, Module -> Module, device after, dtype after): every direction CUDA keeps objects in."""
    other = torch.float32 if dtype == torch.float16 else torch.float16
    steps = [(".to('musa')", lambda m: m.to("musa"), "musa:0", dtype)]
    if torch.musa.device_count() > 1:
        steps += [("musa:0 -> musa:1", lambda m: m.to("musa:1"), "musa:1", dtype),
                  ("musa:1 -> musa:0", lambda m: m.to("musa:0"), "musa:0", dtype)]
    steps += [(".cpu()", lambda m: m.cpu(), "cpu", dtype),
              (".musa()", lambda m: m.musa(), "musa:0", dtype),
              (".half()" if other == torch.float16 else ".float()",
               (lambda m: m.half()) if other == torch.float16 else (lambda m: m.float()), "musa:0", other),
              (f".to({_label(dtype)})", lambda m: m.to(dtype), "musa:0", dtype)]
    return steps


def check_identity(mi, ctor, fwd, dtype, training) -> str | None:
    """None when every move keeps the Parameter objects, their .grad objects and their hooks;
    else what broke, step by step. The module runs a CPU forward and backward first (lazy
    modules materialise; every parameter has a .grad, zeros where unused)."""
    m = _build(mi, ctor, dtype, training)
    _backward(_forward(m, fwd))
    params = dict(m.named_parameters())
    if not params:
        return None
    used = [n for n, p in params.items() if p.grad is not None]
    for p in params.values():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    fired = collections.Counter()
    for n, p in params.items():
        if p.requires_grad:
            p.register_hook(lambda g, n=n: fired.update([n]))
    grads = {n: p.grad for n, p in params.items()}
    problems = []
    for label, move, device, to_dtype in _moves(dtype):
        held = dict(m.named_parameters())
        held_grads = {n: p.grad for n, p in held.items()}
        before = {n: p.detach().to("cpu", to_dtype) for n, p in held.items()}
        compatible = torch._has_compatible_shallow_copy_type(
            next(iter(held.values())), torch.empty(0, device=device, dtype=to_dtype))
        move(m)
        now = dict(m.named_parameters())
        new = [n for n in held if now[n] is not held[n]]
        new_grads = [n for n in held if n not in new and now[n].grad is not held_grads[n]]
        wrong = [n for n, p in now.items() if str(p.device) != device or p.dtype != to_dtype
                 or p.grad is None or str(p.grad.device) != device or p.grad.dtype != to_dtype]
        changed = [n for n, p in now.items() if not torch.equal(p.detach().to("cpu"), before[n])]
        if new:
            problems.append(f"{label} replaced {len(new)}/{len(held)} Parameter objects ({new[0]}; "
                            f"torch._has_compatible_shallow_copy_type(param, moved) is {compatible})")
        if new_grads:
            problems.append(f"{label} replaced the .grad object of {new_grads[0]}")
        if wrong:
            p = now[wrong[0]]
            problems.append(f"after {label} {wrong[0]} is {p.device}/{_label(p.dtype)} (its grad "
                            f"{None if p.grad is None else p.grad.device}), expected {device}/{_label(to_dtype)}")
        if changed:
            problems.append(f"{label} changed the values of {changed[0]}")
    if problems:
        return "; ".join(problems)
    # The objects are the originals: hooks registered before the moves fire for a musa
    # backward, which accumulates into the original .grad objects.
    _backward(_forward(m, _musa(fwd)))
    silent = [n for n in used if params[n].requires_grad and not fired[n]]
    if silent:
        problems.append(f"the hook registered on {silent[0]} before the moves did not fire on musa")
    replaced = [n for n in params if m.get_parameter(n) is not params[n] or params[n].grad is not grads[n]]
    if replaced:
        problems.append(f"{replaced[0]} or its .grad is a new object after a musa backward")
    return "; ".join(problems) or None


# -- one (module, dtype) pair ------------------------------------------------------------------

def _inputs(mi, dtype, training: bool, max_inputs: int) -> list:
    torch.manual_seed(SEED)  # the same inputs whatever ran before
    made = mi.module_inputs_func(mi, device="cpu", dtype=dtype, requires_grad=True, training=training)
    return _spread([i for i in made if i.forward_input is not None], max_inputs)


def run_case(mi, dtype, max_inputs: int = MAX_INPUTS) -> Result:
    label = _label(dtype)
    modes = (True, False) if mi.train_and_eval_differ else (True,)
    status = {"forward": "pass", "backward": "n/a", "identity": "n/a", "state_dict": "n/a"}
    reasons: dict[str, str] = {}
    widened: set[str] = set()
    compared = 0
    cpu_errors = []

    def fail(check, why):
        status[check] = "fail"
        reasons.setdefault(check, why)

    # The sweep seeds the CPU and musa generators: the caller's states are put back.
    with torch.random.fork_rng(devices=range(torch.musa.device_count()), device_type="musa"):
        for training in modes:
            mode = "train" if training else "eval"
            try:
                inputs = _inputs(mi, dtype, training, max_inputs)
            except Exception as e:  # the database cannot build inputs: not a musa result
                cpu_errors.append(f"module_inputs_func: {why(e)}")
                continue
            for mod_in in inputs:
                ctor, fi = mod_in.constructor_input, mod_in.forward_input
                fwd = (fi.args, fi.kwargs)
                case = f"[{mode}{', ' + mod_in.desc if mod_in.desc else ''}]"
                try:
                    cpu = _build(mi, ctor, dtype, training)
                    if KERNEL_DEVICE != "cpu":  # the host driver's weights are the CPU's
                        _materialize_lazy(cpu, fwd)
                    dev = copy.deepcopy(cpu)  # lazy modules: moved before their first forward
                    ref = _forward(cpu, fwd)
                except Exception as e:
                    cpu_errors.append(f"cpu raised {why(e)}")
                    continue
                compared += 1
                musa_fwd = _musa(fwd)
                try:
                    dev.to("musa")
                    got = _forward(dev, musa_fwd)
                    cpu_fwd = (ref, dict(cpu.named_buffers()))
                    dev_fwd = (got, dict(dev.named_buffers()))
                    try:
                        compare(cpu_fwd, dev_fwd, dtype)
                    except AssertionError:
                        if dtype not in LOW_PRECISION:
                            raise
                        out32, buf32, _ = _float32_reference(mi, ctor, fwd, dtype, training)
                        _no_farther_than_cpu(cpu_fwd, dev_fwd, (out32, buf32), dtype)
                        widened.add("forward")
                except Exception as e:
                    fail("forward", f"forward{case}: {why(e)}")
                    continue
                try:
                    g_ref = weighted_grads((fwd, list(cpu.parameters())), ref)
                except Exception:
                    g_ref = None  # the CPU cannot differentiate this input either
                if g_ref is not None:
                    status["backward"] = "pass" if status["backward"] == "n/a" else status["backward"]
                    try:
                        g_got = weighted_grads((musa_fwd, list(dev.parameters())), got)
                        try:
                            compare(list(g_ref), list(g_got), dtype)
                        except AssertionError:
                            if dtype not in LOW_PRECISION:
                                raise
                            _no_farther_than_cpu(list(g_ref), list(g_got),
                                                 list(_float32_reference(mi, ctor, fwd, dtype, training)[2]), dtype)
                            widened.add("backward")
                    except Exception as e:
                        fail("backward", f"backward{case}: {why(e)}")
                if list(dev.parameters()):
                    try:
                        problem = check_identity(mi, ctor, fwd, dtype, training)
                    except Exception as e:
                        problem = why(e)
                    if problem:
                        fail("identity", f"identity{case}: {problem}")
                    elif status["identity"] == "n/a":
                        status["identity"] = "pass"
                if dev.state_dict():
                    try:
                        check_state_dict(mi, ctor, dtype, training, dev)
                        status["state_dict"] = "pass" if status["state_dict"] == "n/a" else status["state_dict"]
                    except Exception as e:
                        fail("state_dict", f"state_dict{case}: {why(e)}")
    if not compared:
        return Result(mi.name, label, "skip", "n/a", "n/a", "n/a", 0,
                      cpu_errors[0] if cpu_errors else "no inputs")
    return Result(mi.name, label, *(status[c] for c in CHECKS), compared,
                  "; ".join(reasons[c] for c in CHECKS if c in reasons),
                  [c for c in CHECKS if c in widened and status[c] == "pass"])


def check_state_dict(mi, ctor, dtype, training, dev) -> None:
    """The musa module's state_dict, saved, loads into fresh CPU and musa modules unchanged."""
    saved = {k: v.detach().clone() for k, v in dev.state_dict().items()}
    buf = io.BytesIO()
    torch.save(dev.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    _assert_same_state(saved, loaded, "musa", "torch.load")
    cpu = _build(mi, ctor, dtype, training, seed=SEED + 1)
    cpu.load_state_dict(loaded)
    _assert_same_state(saved, cpu.state_dict(), "cpu", "load_state_dict into a CPU module")
    buf.seek(0)
    fresh = _build(mi, ctor, dtype, training, seed=SEED + 1).to("musa")
    fresh.load_state_dict(torch.load(buf, map_location="musa"))
    _assert_same_state(saved, fresh.state_dict(), "musa", "torch.load(map_location='musa') into a musa module")


# -- the sweep ---------------------------------------------------------------------------------

# module_db has no dropout module. These run in training mode (and eval) under one seed:
# musa draws from a generator like the CPU's, so the masks must be the same bits.
DROPOUT_SHAPES = {torch.nn.Dropout: (4, 5), torch.nn.Dropout1d: (2, 3, 4), torch.nn.Dropout2d: (2, 3, 4, 4),
                  torch.nn.Dropout3d: (2, 3, 2, 4, 4), torch.nn.AlphaDropout: (4, 5),
                  torch.nn.FeatureAlphaDropout: (2, 3, 4, 4)}


def _dropout_infos() -> list:
    ModuleInfo, ModuleInput, FunctionInput = (load_testing_db("common_modules", n)
                                              for n in ("ModuleInfo", "ModuleInput", "FunctionInput"))

    def inputs(mi, device, dtype, requires_grad, training, **kwargs):
        shape = DROPOUT_SHAPES[mi.module_cls]
        return [ModuleInput(constructor_input=FunctionInput(p),
                            forward_input=FunctionInput(torch.testing.make_tensor(
                                shape, device=device, dtype=dtype, requires_grad=requires_grad)),
                            desc=f"p={p}") for p in (0.5, 0.25)]
    return [ModuleInfo(cls, module_inputs_func=inputs, train_and_eval_differ=True) for cls in DROPOUT_SHAPES]


def cases(sample: int = 1, modules: list[str] | None = None):
    """(ModuleInfo, dtype) pairs: module_db and the dropout modules, every Nth or those named."""
    infos = [*load_testing_db("common_modules", "module_db"), *_dropout_infos()]
    lacking = set(CONFIG.profile.unsupported_dtypes())
    for mi in pick_entries(infos, modules, sample, "module_db"):
        for dtype in DTYPES:
            if dtype not in lacking:
                yield mi, dtype


def sweep(sample: int = 1, modules: list[str] | None = None, progress: bool = False,
          max_inputs: int = MAX_INPUTS) -> list[Result]:
    todo = list(cases(sample, modules))
    results = []
    with warnings.catch_warnings(), progress_bar(todo, progress, "pairs") as bar:
        warnings.simplefilter("ignore")
        for mi, dtype in bar:
            bar.set_postfix_str(f"{mi.name} {_label(dtype)}", refresh=False)
            results.append(run_case(mi, dtype, max_inputs))
    return results


def summary(results: list[Result]) -> dict:
    """Pass rates over the pairs the CPU runs, and over those the profile allows (a pair whose
    module computes in a dtype the profile lacks fails by design, with the profile's clear error)."""
    ran = [r for r in results if r.forward != "skip"]
    allowed = [r for r in ran if not profile_limited(r.reason)]
    s = {"pairs": len(ran), "skipped": len(results) - len(ran), "modules": len({r.module for r in ran}),
         "pass_rate": rate(sum(r.passed for r in ran), len(ran))}
    for c in CHECKS:
        s[f"{c}_pass_rate"] = rate(sum(getattr(r, c) in ("pass", "n/a") for r in ran), len(ran))
    s["passed_by_float32"] = sum(r.passed and bool(r.by_float32) for r in ran)
    s["profile_limited"] = len(ran) - len(allowed)
    s["allowed_pass_rate"] = rate(sum(r.passed for r in allowed), len(allowed))
    return s


def headline(s: dict) -> str:
    return (f"{s['pairs']} module/dtype pairs the CPU runs ({s['modules']} modules, {s['skipped']} pairs "
            f"skipped): {s['pass_rate']:.2%} pass every check (forward {s['forward_pass_rate']:.2%}, backward "
            f"{s['backward_pass_rate']:.2%}, identity {s['identity_pass_rate']:.2%}, state_dict "
            f"{s['state_dict_pass_rate']:.2%}; {s['passed_by_float32']} half-precision pairs pass against the "
            f"float32 result, not the CPU's bits); where the profile allows the dtype ({s['profile_limited']} "
            f"pairs need one it lacks): {s['allowed_pass_rate']:.2%}")


def table(results: list[Result], markdown: bool = False) -> str:
    head = ["module", "dtype", *CHECKS, "inputs", "reason or note"]
    rows = [[r.module, r.dtype, *(getattr(r, c) for c in CHECKS), str(r.inputs), r.reason or r.note]
            for r in results]
    return render(head, rows, markdown=markdown)


def write_png(results: list[Result], path: str) -> None:
    """Per check and dtype: pairs passing, not applicable, failing on the profile's dtype limit,
    failing otherwise."""
    dtypes = [d for d in map(_label, DTYPES) if any(r.dtype == d for r in results)]
    rows = [f"{c} {d}" for c in CHECKS for d in dtypes]
    by_float32 = f"pass, against float32 (within {ERROR_FACTOR}x the CPU's error)"
    kinds = {"pass": "tab:green", by_float32: "tab:cyan", "n/a (no parameters, state or gradient)": "tab:olive",
             "profile lacks the dtype": "tab:grey", "fail": "tab:red"}
    counts = {k: [0] * len(rows) for k in kinds}
    for r in results:
        if r.forward == "skip":
            continue
        for c in CHECKS:
            i = rows.index(f"{c} {r.dtype}")
            status = getattr(r, c)
            kind = (by_float32 if status == "pass" and c in r.by_float32 else "pass" if status == "pass"
                    else "n/a (no parameters, state or gradient)" if status == "n/a"
                    else "profile lacks the dtype" if profile_limited(r.reason) else "fail")
            counts[kind][i] += 1
    s = summary(results)
    draw_counts(path, rows, counts, kinds,
                f"module_db on musa vs CPU: {s['pass_rate']:.2%} of {s['pairs']} module/dtype pairs pass every "
                f"check\n(where the profile allows the dtype: {s['allowed_pass_rate']:.2%})",
                "module/dtype pairs", height=1.2 + 0.3 * len(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=1, help="take every Nth module (1 = all)")
    ap.add_argument("--modules", help="comma-separated module_db names (nn.Linear,nn.LSTM); overrides --sample")
    ap.add_argument("--max-inputs", type=int, default=MAX_INPUTS,
                    help=f"module inputs per module and mode, spread over its list (default {MAX_INPUTS})")
    ap.add_argument("--json", help="write the summary and every result here")
    ap.add_argument("--md", help="write the summary and the table as Markdown here")
    ap.add_argument("--png", help="write the counts per check and dtype as a chart here")
    args = ap.parse_args(argv)
    modules = name_list(args.modules)
    t0 = time.time()
    results = sweep(args.sample, modules, progress=True, max_inputs=args.max_inputs)
    seconds = time.time() - t0
    s = summary(results)
    print(table(results))
    print(headline(s))
    meta = {"command": "python -m torch_musa.testing.module_sweep " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
            "profile": torch.musa.get_device_name(), "torch": torch.__version__,
            "torch_musa": importlib.metadata.version("torch_musa"), "seconds": round(seconds, 1)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "summary": s, "results": [asdict(r) for r in results]}, f, indent=2)
    if args.md:
        ran = [r for r in results if r.forward != "skip"]
        with open(args.md, "w") as f:
            f.write(f"# module_db sweep: musa vs CPU\n\n`{meta['command'].strip()}` on {meta['profile']}, "
                    f"torch {meta['torch']}, {meta['seconds']:.0f} s.\n\n{headline(s)}\n\n"
                    f"## Failing pairs\n\n{table([r for r in ran if not r.passed], markdown=True)}\n\n"
                    f"## Pairs the CPU cannot run (skipped)\n\n"
                    f"{table([r for r in results if r.forward == 'skip'], markdown=True)}\n\n"
                    f"## Every pair\n\n{table(results, markdown=True)}\n")
    if args.png:
        write_png(results, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
