"""Turning a Test into tensors and a callable, checking it, and timing it per device."""
from __future__ import annotations

import dataclasses
import hashlib
import math
import traceback
from typing import Any

import torch

from torch_musa.testing.tolerances import tolerance

from .config import DTYPES, Test, eval_expr
from .formulas import resolve_callable
from . import timing


@dataclasses.dataclass
class Settings:
    min_time: float = 0.05
    warmup: int = 2
    warmup_time: float = 0.005
    iterations: int | None = None
    rotate_bytes: int = 32 << 20     # rotate input sets until this many bytes are touched
    max_rotations: int = 16
    rotate_budget: int = 256 << 20   # never hold more than this in rotated inputs
    min_block_time: float = 1e-3
    rounds: int = 3                  # timing rounds, alternating between the devices
    seed: int = 0

    def as_dict(self):
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- resolving ops
def resolve_op(name: str):
    """A dotted name on an allowlisted root: torch.x, F.x, nn.x, Tensor.x, aten.x.overload,
    bench.x (the composites), looked up through torch's operator namespaces only
    (formulas.resolve_callable); ValueError otherwise."""
    return resolve_callable(name)


def _env(test: Test) -> dict:
    dt = DTYPES[test.dtype]
    return {**test.params, "elem": torch.empty((), dtype=dt).element_size(), "dtype": dt}


def _dims(test: Test, spec_shape) -> list[int]:
    env = _env(test)
    out = []
    for d in spec_shape:
        v = d if isinstance(d, int) else eval_expr(d, env)
        if isinstance(v, (list, tuple)):
            out.extend(int(x) for x in v)
        else:
            out.append(int(v))
    return out


def _seed_for(test_id: str, k: int, base: int) -> int:
    h = hashlib.sha256(f"{base}:{test_id}:{k}".encode()).digest()
    return int.from_bytes(h[:6], "little")


def make_inputs(test: Test, k: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Input set ``k`` of a test, on the CPU; the same on every device and every run."""
    g = torch.Generator().manual_seed(_seed_for(test.id, k, seed))
    env = _env(test)
    out = {}
    # random values are drawn in float32 (float64 for a float64 test), then cast
    gen_dt = torch.float64 if DTYPES[test.dtype] in (torch.float64, torch.complex128) else torch.float32
    for spec in test.case.inputs:
        shape = _dims(test, spec.shape)
        dt = DTYPES[spec.dtype] if spec.dtype else DTYPES[test.dtype]
        low = eval_expr(spec.low, env) if isinstance(spec.low, str) else spec.low
        high = eval_expr(spec.high, env) if isinstance(spec.high, str) else spec.high
        init = spec.init
        if init == "randint":
            lo = int(low if low is not None else 0)
            hi = int(high if high is not None else 10)
            t = torch.randint(lo, max(hi, lo + 1), shape, generator=g, dtype=torch.int64)
        elif init == "bool":
            t = torch.rand(shape, generator=g) < 0.5
        elif init == "ones":
            t = torch.ones(shape)
        elif init == "zeros":
            t = torch.zeros(shape)
        elif init == "arange":
            t = torch.arange(math.prod(shape)).reshape(shape)
        elif init == "perm":
            t = torch.randperm(math.prod(shape), generator=g).reshape(shape)
        elif init == "rand":
            lo = float(low if low is not None else 0.0)
            hi = float(high if high is not None else 1.0)
            t = torch.rand(shape, generator=g, dtype=gen_dt) * (hi - lo) + lo
        elif init == "positive":
            t = torch.rand(shape, generator=g, dtype=gen_dt) * 0.9 + 0.1
        else:  # randn
            t = torch.randn(shape, generator=g, dtype=gen_dt)
        if spec.scale != 1.0 and t.is_floating_point():
            t = t * spec.scale
        t = t.to(dt)
        if not spec.contiguous and t.dim() >= 2:
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        out[spec.name] = t
    return out


def _resolve_args(value, env):
    if isinstance(value, str) and value.startswith("$"):
        return eval_expr(value[1:], env)
    if isinstance(value, list):
        return [_resolve_args(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _resolve_args(v, env) for k, v in value.items()}
    return value


def build_call(test: Test, tensors: dict[str, torch.Tensor], device: torch.device):
    """(fn, args, kwargs) so that fn(*args, **kwargs) runs the case."""
    case = test.case
    env = {**_env(test), **tensors, "device": device}
    op = resolve_op(case.op)
    args = _resolve_args(case.args, env) if case.args is not None else list(tensors.values())
    kwargs = _resolve_args(case.kwargs, env)
    return op, args, kwargs


def flatten_tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in flatten_tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in flatten_tensors(o)]
    return []


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def compare(ref: torch.Tensor, got: torch.Tensor, rtol=None, atol=None) -> tuple[bool, str, float]:
    """(ok, why, normalised error). The error is max |got-ref| / (atol + rtol*|ref|); <=1 passes."""
    ref, got = ref.detach().cpu(), got.detach().cpu()
    if ref.shape != got.shape:
        return False, f"shape {tuple(got.shape)} != {tuple(ref.shape)}", math.inf
    if ref.dtype != got.dtype:
        return False, f"dtype {got.dtype} != {ref.dtype}", math.inf
    if ref.numel() == 0:
        return True, "", 0.0
    if not (ref.is_floating_point() or ref.is_complex()):
        bad = (ref != got).sum().item()
        return bad == 0, (f"{bad} of {ref.numel()} elements differ" if bad else ""), float(bad > 0)
    # a case may loosen the dtype's tolerances (the package's policy), never tighten them
    r_def, a_def = tolerance(ref.dtype)
    rtol = r_def if rtol is None else max(float(rtol), r_def)
    atol = a_def if atol is None else max(float(atol), a_def)
    r64 = ref.to(torch.complex128 if ref.is_complex() else torch.float64)
    g64 = got.to(r64.dtype)
    nan_r, nan_g = torch.isnan(r64), torch.isnan(g64)
    if not torch.equal(nan_r, nan_g):
        return False, "NaN pattern differs", math.inf
    fin = ~nan_r
    r64, g64 = r64[fin], g64[fin]
    inf_r = torch.isinf(r64)
    if inf_r.any() and not torch.equal(r64[inf_r], g64[inf_r]):
        return False, "inf values differ", math.inf
    r64, g64 = r64[~inf_r], g64[~inf_r]
    if r64.numel() == 0:
        return True, "", 0.0
    diff = (g64 - r64).abs()
    err = (diff / (atol + rtol * r64.abs())).max().item()
    if math.isnan(err) or err > 1.0:
        idx = int((diff / (atol + rtol * r64.abs())).argmax())
        return False, (f"max abs err {diff.max().item():.3g} (ref {r64.flatten()[idx].item():.4g}, "
                       f"got {g64.flatten()[idx].item():.4g}; rtol {rtol:g}, atol {atol:g})"), err
    return True, "", err


@dataclasses.dataclass
class Prepared:
    run: Any                 # fn(i) for timing
    outputs: list            # the reference outputs (and grads), on the CPU
    in_bytes: int
    out_bytes: int
    rotations: int


def prepare(test: Test, device: torch.device, settings: Settings, upcast: bool = False) -> Prepared:
    """Build the input sets on ``device``, run once for the check, and return a timed callable.

    ``upcast``: one input set only, floating inputs turned to float64 (after rounding to the
    test's dtype): the ground truth that settles a disagreement between devices.
    """
    device = torch.device(device)
    bwd = test.mode == "fwd+bwd"
    first_cpu = make_inputs(test, 0, settings.seed)
    if upcast:
        first_cpu = {k: (t.double() if t.is_floating_point() else t) for k, t in first_cpu.items()}
    set_bytes = max(1, _nbytes(first_cpu.values()))
    n_sets = max(1, min(settings.max_rotations, math.ceil(settings.rotate_bytes / set_bytes),
                        settings.rotate_budget // set_bytes))
    if upcast:
        n_sets = 1
    # input rotation: the other sets are copies of set 0 at other addresses, made on the
    # device (same values, so every set computes the same thing; caches see new memory)
    base = {name: t.to(device) for name, t in first_cpu.items()}
    sets = []
    for k in range(n_sets):
        dev = {}
        for name, t in base.items():
            spec = next(s for s in test.case.inputs if s.name == name)
            d = t if k == 0 else t.clone()
            if bwd and spec.grad and (d.is_floating_point() or d.is_complex()):
                d.requires_grad_(True)
            dev[name] = d
        sets.append(dev)
    calls = []
    for s in sets:
        fn, args, kwargs = build_call(test, s, device)
        leaves = [t for t in s.values() if t.requires_grad]
        calls.append((fn, args, kwargs, leaves))

    # one checked run on input set 0
    fn, args, kwargs, leaves = calls[0]
    if bwd:
        with torch.enable_grad():
            out = fn(*args, **kwargs)
        outs = [t for t in flatten_tensors(out) if t.requires_grad]
        if not outs or not leaves:
            raise RuntimeError("forward+backward: no output or input requires grad")
        g = torch.Generator().manual_seed(_seed_for(test.id, -1, settings.seed))
        rnd = DTYPES[test.dtype] if DTYPES[test.dtype].is_floating_point else torch.float64
        grad_outs = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(rnd).to(o.dtype)
                     .to(device) for o in outs]
        grads = torch.autograd.grad(outs, leaves, grad_outs, allow_unused=True)
        result = flatten_tensors(out) + [gr for gr in grads if gr is not None]
    else:
        with torch.no_grad():
            out = fn(*args, **kwargs)
        result = flatten_tensors(out)
        grad_outs = None
    timing.synchronize(device)
    out_bytes = _nbytes(flatten_tensors(out))
    ref = [r.detach().to("cpu") for r in result]

    n = len(calls)
    if bwd:
        def run(i):
            f, a, kw, lv = calls[i % n]
            o = f(*a, **kw)
            os_ = [t for t in flatten_tensors(o) if t.requires_grad]
            torch.autograd.grad(os_, lv, grad_outs, allow_unused=True)
    else:
        def run(i):
            f, a, kw, _ = calls[i % n]
            f(*a, **kw)
    return Prepared(run=run, outputs=ref, in_bytes=set_bytes, out_bytes=out_bytes, rotations=n)


def _formula(text, test, default=None):
    if text is None:
        return default
    try:
        return float(eval_expr(text, _env(test)))
    except Exception:
        return default


def run_test(test: Test, devices: list[torch.device], settings: Settings) -> list[dict]:
    """Check every device against the first, then time the ones that passed. One row per device.

    Timing is done in ``settings.rounds`` rounds that alternate between the devices, so a
    change in machine load between the first device and the last shows in both.
    """
    rows, preps = [], []
    reference = truth = None
    for di, device in enumerate(devices):
        row = {"id": test.id, "suite": test.case.suite, "op": test.case.full_name,
               "case": test.case.name, "params": _jsonable(
                   {k: v for k, v in test.params.items() if k not in test.case.params}),
               "dtype": test.dtype, "mode": test.mode, "tags": test.tags, "device": str(device),
               "status": "ok", "checked": False, "error": None, "max_err": None}
        rows.append(row)
        preps.append(None)
        try:
            prep = prepare(test, device, settings)
        except Exception as e:  # noqa: BLE001 - every failure is a row, never a crash
            row.update(status="error", error=_short_error(e))
            continue
        preps[-1] = prep
        if di == 0:
            reference = prep.outputs
        elif reference is not None and test.case.check:
            ok, why, err = _check_all(reference, prep.outputs, test)
            row["checked"], row["max_err"] = True, err
            if not ok:
                if truth is None:
                    truth = _ground_truth(test, settings)
                ok, note = _arbitrate(reference, prep.outputs, truth, test, str(device))
                if note.startswith("FIRST_WRONG: "):
                    # the first device is the one that is off: it is not timed either
                    note = note[len("FIRST_WRONG: "):]
                    if rows[0]["status"] == "ok":
                        rows[0].update(status="wrong", checked=True,
                                       error=f"disagrees with {device}; {note}")
                    note = f"the first device is wrong: {note}"
                row["check_note"] = note
                if not ok:
                    row.update(status="wrong", error=f"{why}; {note}")

    timed = [(row, prep, device) for row, prep, device in zip(rows, preps, devices)
             if row["status"] == "ok"]
    rounds = 1 if settings.iterations is not None else max(1, settings.rounds)
    parts: dict[int, list] = {id(r): [] for r, _, _ in timed}
    for k in range(rounds):
        for row, prep, device in timed:
            if row["status"] != "ok":
                continue
            try:
                with torch.set_grad_enabled(test.mode == "fwd+bwd"):
                    m = timing.measure(prep.run, device, min_time=settings.min_time / rounds,
                                       warmup=settings.warmup if k == 0 else 1,
                                       warmup_time=settings.warmup_time if k == 0 else 0.0,
                                       iterations=settings.iterations,
                                       min_block_time=settings.min_block_time,
                                       min_blocks=max(2, 5 // rounds + (5 % rounds > k)))
                parts[id(row)].append(m)
            except Exception as e:  # noqa: BLE001
                row.update(status="error", error=_short_error(e))
    for row, prep, device in timed:
        if row["status"] != "ok":
            continue
        stats = timing.merge(parts[id(row)]).stats()
        stats["rounds"] = len(parts[id(row)])
        row.update(stats)
        row["rotations"] = prep.rotations
        med = stats["median_s"]
        bwd = test.mode == "fwd+bwd"
        flops = _formula(test.case.flops, test)
        nbytes = _formula(test.case.bytes, test, float(prep.in_bytes + prep.out_bytes))
        if bwd:
            fb = _formula(test.case.flops_bwd, test)
            flops = flops + fb if (flops is not None and fb is not None) else None
            bb = _formula(test.case.bytes_bwd, test)
            nbytes = nbytes + bb if bb is not None else None
        row["flops"] = flops
        row["bytes"] = nbytes
        row["gflops"] = flops / med / 1e9 if flops and med > 0 else None
        row["gbps"] = nbytes / med / 1e9 if nbytes and med > 0 else None
    return rows


def _ground_truth(test: Test, settings: Settings):
    try:
        return prepare(test, torch.device("cpu"), settings, upcast=True).outputs
    except Exception as e:  # noqa: BLE001
        return e


def _arbitrate(ref, got, truth, test, devname="this device") -> tuple[bool, str]:
    """The devices disagree beyond the dtype's tolerance: a device passes if its distance to
    a float64 CPU result is within twice the first device's distance (plus the dtype's atol).
    When instead the first device is the one far off, the note starts with FIRST_WRONG."""
    first_wrong = []
    if isinstance(truth, BaseException):
        return False, f"no float64 ground truth to arbitrate ({_short_error(truth)})"
    if not (len(ref) == len(got) == len(truth)):
        return False, "output counts differ"
    worst = []
    for k, (r, g, t) in enumerate(zip(ref, got, truth)):
        if r.shape != g.shape or r.shape != t.shape or r.dtype != g.dtype:
            return False, f"output {k}: shapes or dtypes differ"
        if not (r.is_floating_point() or r.is_complex()):
            if not torch.equal(r, g):
                return False, f"output {k}: integer results differ"
            continue
        t64 = t.detach().to(torch.float64)
        e_ref = (r.to(torch.float64) - t64).abs().nan_to_num(nan=math.inf).max().item() if r.numel() else 0.0
        e_got = (g.to(torch.float64) - t64).abs().nan_to_num(nan=math.inf).max().item() if g.numel() else 0.0
        atol = tolerance(r.dtype)[1]
        worst.append(f"{k}: {e_got:.3g} vs {e_ref:.3g}")
        if not e_got <= 2 * e_ref + atol:
            return False, (f"against a float64 CPU result, output {k} is off by {e_got:.3g}, "
                           f"the first device by {e_ref:.3g}")
        if e_ref > 2 * e_got + atol:
            first_wrong.append(f"output {k} is off by {e_ref:.3g} against a float64 CPU result, "
                               f"{devname} by {e_got:.3g}")
    if first_wrong:
        return True, "FIRST_WRONG: " + "; ".join(first_wrong)
    return True, "within 2x of the first device's error against float64 (" + "; ".join(worst) + ")"


def _check_all(ref, got, test):
    if len(ref) != len(got):
        return False, f"{len(got)} outputs, reference has {len(ref)}", math.inf
    worst = 0.0
    for k, (r, g) in enumerate(zip(ref, got)):
        ok, why, err = compare(r, g, test.case.rtol, test.case.atol)
        if not ok:
            return False, f"output {k}: {why}", err
        worst = max(worst, err)
    return True, "", worst


def _short_error(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    first = msg[0] if msg else type(e).__name__
    return first[:300]


def _jsonable(v):
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def format_exception(e):
    return "".join(traceback.format_exception(e))
