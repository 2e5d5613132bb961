"""What the database sweeps share: musa against the CPU device, compared the same way.

``opinfo_sweep`` (op_db) and ``module_sweep`` (module_db) load PyTorch's test databases, move inputs,
compare results, take gradients, tell the hardware profile's dtype limit from
real failures and draw their counts through these helpers, so both report the
same thing the same way.
"""
from __future__ import annotations

import difflib
import importlib
import sys

import torch
from torch.utils._pytree import tree_flatten

from .tolerances import tolerance

# The error a profile without the dtype raises (csrc/aten/kernel_call.cpp, KernelCall::unsupported).
PROFILE_LIMIT = "is not supported by the musa hardware profile"


def profile_limited(reason: str) -> bool:
    """The failure is the profile refusing a dtype it lacks (by design, with a clear error)."""
    return PROFILE_LIMIT in reason


def progress_bar(todo: list, show: bool, unit: str):
    """tqdm over the sweep's cases on stderr; a log (not a terminal) gets a line a minute."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(todo, disable=not show, file=sys.stderr, unit=unit, dynamic_ncols=tty,
                mininterval=0.1 if tty else 60.0)


def load_testing_db(module: str, name: str):
    """``torch.testing._internal.<module>.<name>``. Importing PyTorch's test harness runs
    ``torch.backends.disable_global_flags()``, which would make later plain
    ``torch.backends.cudnn.benchmark = True`` lines in the same process raise;
    the flag is put back as it was."""
    flags_were_free = not torch.backends.flags_frozen()
    db = getattr(importlib.import_module(f"torch.testing._internal.{module}"), name)
    if flags_were_free:  # torch.backends wraps its module: reach the real globals
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return db


def name_list(text: str | None) -> list[str] | None:
    """A ``--modules`` / ``--ops`` value (comma-separated names) as a list; None when not given."""
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def pick_entries(entries: list, names: list[str] | None, sample: int, db: str, offset: int = 0) -> list:
    """The database entries whose ``name`` is in ``names`` (every entry of a name: an op's
    variants too), else every ``sample``-th entry from ``offset``. A name the database lacks is a
    ValueError naming it, the closest names it has, and where to list them all."""
    if not names:
        return entries[offset % sample::sample]
    known = {e.name for e in entries}
    unknown = [n for n in names if n not in known]
    if unknown:
        hints = [f"{n} (closest: {', '.join(difflib.get_close_matches(n, known, 3)) or 'none'})"
                 for n in unknown]
        raise ValueError(f"not in {db}: {'; '.join(hints)}; it has {len(known)} names "
                         f"(sorted({{e.name for e in {db}}}) lists them)")
    return [e for e in entries if e.name in names]


def to_device(x, device):
    """A detached copy of a tensor on ``device`` that requires grad as ``x`` does; other values as they are."""
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        return y.requires_grad_(x.requires_grad) if y.is_floating_point() or y.is_complex() else y
    return x


def compare(a, b, dtype, values: bool = True) -> None:
    """Raise when the musa results ``b`` differ from the CPU's ``a`` (same structure,
    musa tensors, values within ``tolerance(dtype)``; ``values=False``: shapes and dtypes only)."""
    fa, _ = tree_flatten(a)
    fb, _ = tree_flatten(b)
    assert len(fa) == len(fb), f"{len(fa)} outputs on cpu, {len(fb)} on musa"
    rtol, atol = tolerance(dtype)
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


def weighted_sum(out):
    """A scalar of every output that requires grad, each element weighted 1, 2 or 3 (so a
    gradient routed to the wrong element shows); None when no output requires grad."""
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return None
    return sum((o.float() * (1 + torch.arange(o.numel(), device=o.device).reshape(o.shape) % 3)).sum()
               for o in outs)


def weighted_grads(inputs, out):
    """Gradients of ``weighted_sum(out)`` with respect to every tensor in ``inputs`` that
    requires grad (None where unused); None when there is nothing to differentiate."""
    ins = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    loss = weighted_sum(out)
    if loss is None or not ins:
        return None
    return torch.autograd.grad(loss, ins, allow_unused=True)


#: Where musa's kernels are not the CPU's (another algorithm or summation order), musa's
#: distance from a more precise reference may be at most this many times the CPU's own: a
#: wrong formula is off by the size of the values; another order, by a few ulps compounded
#: through the layers. module_sweep: half precision against float32; model_sweep: float32
#: against float64.
ERROR_FACTOR = 4


def distances_from_reference(cpu: torch.Tensor, got: torch.Tensor, ref: torch.Tensor,
                             what: str) -> tuple[float, float, float]:
    """The CPU's and musa's largest distances from ``ref`` and ``ref``'s scale (max |ref|),
    NaN left out; an AssertionError naming ``what`` where musa has NaN and the CPU not, or the
    reverse."""
    a, b, r = cpu.double(), got.cpu().double(), ref.double()
    assert torch.equal(b.isnan(), a.isnan()), f"{what}: NaN where the CPU has none, or the reverse"
    return ((a - r).abs().nan_to_num(0).max().item(), (b - r).abs().nan_to_num(0).max().item(),
            r.abs().nan_to_num(0).max().item())


def why(e: BaseException) -> str:
    """The error in one line (assert_close's details included), cut at 300 characters."""
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def rate(passed: int, total: int) -> float:
    return passed / max(1, total)


def draw_counts(path: str, rows: list[str], counts: dict[str, list[int]], colors: dict[str, str],
                title: str, xlabel: str, height: float = 3.6) -> None:
    """A horizontal stacked bar per row: ``counts[kind][i]`` pairs of each kind in row i."""
    import matplotlib  # drawing only: the sweeps run without it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, height))
    left = [0] * len(rows)
    for kind, color in colors.items():
        ax.barh(rows, counts[kind], left=left, color=color, label=kind)
        left = [a + b for a, b in zip(left, counts[kind])]
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
