"""Comparators: is a musa result close enough to its reference?

Every comparator checks the shape and the dtype, then the values. Called as
``comparator(result, golden)`` it answers True/False (the torch_musa API);
``comparator.check(result, golden, op=..., dtype=...)`` raises an
``AssertionError`` whose message names the op, the dtype, how many elements
differ, the worst element (index, both values, the error) and the tolerance.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Optional

import torch

__all__ = [
    "Comparator",
    "DefaultComparator",
    "BooleanComparator",
    "AbsDiffComparator",
    "RelDiffComparator",
    "QuantizedComparator",
    "assert_close",
    "assert_allclose",
]


def _fmt(x: float) -> str:
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.8g}"


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _to_cpu(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def _as_float64(t: torch.Tensor) -> torch.Tensor:
    """Values as float64 (complex as a trailing (real, imag) dimension)."""
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.to(torch.float64)


def _index(flat_index: int, shape) -> tuple:
    if len(shape) == 0:
        return ()
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape)))


class Comparator:
    """Base class for comparing a musa result with its (usually CPU) golden value.

    Subclasses either implement :meth:`_elementwise` (error and allowed error
    per element) or, as torch_musa allows, set ``self._comparator`` to a
    callable ``(result, golden) -> bool``.
    """

    #: short description of the rule, shown in failure messages
    rule = ""
    #: whether ``comparator(result, golden)`` requires equal dtypes. Upstream's
    #: DefaultComparator/QuantizedComparator use ``torch.allclose``, which refuses
    #: different dtypes; its Boolean/AbsDiff/RelDiff comparators use ``==`` and
    #: subtraction, which promote, so a dtype difference passes on the values.
    _call_checks_dtype = True

    def __init__(self):
        self._comparator: Optional[Callable] = None
        self._atol = 1e-5
        self._rtol = 1e-5
        self._equal_nan = False

    # -- torch_musa API ---------------------------------------------------------------
    def __call__(self, result, golden) -> bool:
        """True when ``result`` matches ``golden`` (shape, dtype where the rule needs
        one dtype, and values)."""
        return self.mismatch(result, golden, check_dtype=self._call_checks_dtype) is None

    def get_tolerance(self):
        return self._atol, self._rtol, self._equal_nan

    # -- detailed checking ------------------------------------------------------------
    def check(self, result, golden, *, op: str | None = None, dtype=None, name: str | None = None,
              check_dtype: bool = True, result_label: str = "musa",
              golden_label: str = "reference") -> None:
        """Raise AssertionError with a full report when ``result`` does not match."""
        problem = self.mismatch(result, golden, check_dtype=check_dtype,
                                result_label=result_label, golden_label=golden_label)
        if problem is None:
            return
        head = []
        if op is not None:
            head.append(f"op {op}")
        if dtype is not None:
            head.append(f"dtype {_dtype_name(dtype)}")
        if name is not None:
            head.append(name)
        title = f"{type(self).__name__} failed" + (f" for {', '.join(head)}" if head else "")
        raise AssertionError(f"{title}:\n  {problem}")

    def mismatch(self, result, golden, *, check_dtype: bool = True, result_label: str = "musa",
                 golden_label: str = "reference") -> str | None:
        """None if ``result`` matches ``golden``, else a description of the first problem."""
        if not isinstance(result, torch.Tensor) or not isinstance(golden, torch.Tensor):
            if isinstance(result, torch.Tensor) != isinstance(golden, torch.Tensor):
                return (f"type mismatch: {result_label} is {type(result).__name__}, "
                        f"{golden_label} is {type(golden).__name__}")
            return self._scalar_mismatch(result, golden, result_label, golden_label)
        if tuple(result.shape) != tuple(golden.shape):
            return (f"shape mismatch: {result_label} {tuple(result.shape)} vs "
                    f"{golden_label} {tuple(golden.shape)}")
        if check_dtype and result.dtype != golden.dtype:
            return (f"dtype mismatch: {result_label} {_dtype_name(result.dtype)} vs "
                    f"{golden_label} {_dtype_name(golden.dtype)}")
        return self._value_mismatch(_to_cpu(result), _to_cpu(golden), result_label, golden_label)

    def widened(self, atol: float, rtol: float) -> "Comparator":
        """A copy whose tolerances are at least ``atol``/``rtol``."""
        other = copy.copy(self)
        other._atol = max(self._atol, atol)
        other._rtol = max(self._rtol, rtol)
        return other

    # -- the value comparison ---------------------------------------------------------
    def _elementwise(self, a: torch.Tensor, e: torch.Tensor):
        """(error, allowed) per element for finite float64 values; None if not elementwise."""
        return None

    def _tolerance_text(self) -> str:
        return f"atol={_fmt(self._atol)} rtol={_fmt(self._rtol)}"

    def _scalar_mismatch(self, result, golden, rl, gl):
        if isinstance(result, (int, float, complex, bool)) and isinstance(
                golden, (int, float, complex, bool)) and not isinstance(result, bool):
            return self.mismatch(torch.tensor(result), torch.tensor(golden), check_dtype=False,
                                 result_label=rl, golden_label=gl)
        if result != golden:
            return f"values differ: {rl}={result!r} {gl}={golden!r}"
        return None

    #: Elements compared at a time: float64 temporaries stay this small however
    #: large the tensors are (a 12146x256x7x7 uint8 comparison needed 9 GB at once).
    _CHUNK = 1 << 20

    def _value_mismatch(self, result, golden, rl, gl) -> str | None:
        if result.numel() == 0:
            return None
        legacy = self._elementwise(torch.zeros(1, dtype=torch.float64),
                                   torch.zeros(1, dtype=torch.float64)) is None
        if legacy:
            if self._comparator is None:
                raise NotImplementedError("Comparator is not implemented by a subclass")
            if not callable(self._comparator):
                raise TypeError("self._comparator must be a callable type")
        if (result.dtype == golden.dtype and result.shape == golden.shape
                and not result.is_complex() and torch.equal(result, golden)):
            return None  # identical, compared in the inputs' own dtype
        if legacy and bool(self._comparator(result, golden)):
            return None  # a legacy comparator callable decides for the whole tensor
        ra = torch.view_as_real(result.resolve_conj()) if result.is_complex() else result
        ga = torch.view_as_real(golden.resolve_conj()) if golden.is_complex() else golden
        shape = tuple(ra.shape)
        ra, ga = ra.reshape(-1), ga.reshape(-1)
        total = ra.numel()
        n_bad = 0
        worst = None  # (score, flat index, result value, golden value, allowed or None, finite)
        for lo in range(0, total, self._CHUNK):
            chunk = self._chunk_mismatch(ra[lo:lo + self._CHUNK], ga[lo:lo + self._CHUNK])
            if chunk is None:
                continue
            count, score, i, av, ev, allowed, finite = chunk
            n_bad += count
            if worst is None or score > worst[0]:
                worst = (score, lo + i, av, ev, allowed, finite)
        if n_bad == 0:
            return None
        _, flat, av, ev, allowed, finite = worst
        idx = _index(flat, shape)
        abs_err = abs(av - ev) if not (math.isnan(av) or math.isnan(ev)) else math.nan
        rel = abs_err / abs(ev) if ev not in (0.0,) and not math.isnan(abs_err) else math.inf
        if abs_err == 0:
            rel = 0.0
        lines = [
            f"{n_bad} of {total} elements differ ({100.0 * n_bad / total:.3g}%)",
            f"worst at index {idx}: {rl}={_fmt(av)} {gl}={_fmt(ev)} "
            f"abs error={_fmt(abs_err)} rel error={_fmt(rel)}",
            f"tolerance: {self._tolerance_text()}"
            + (f"; allowed here {_fmt(allowed)}" if not legacy and finite else ""),
        ]
        if result.is_complex():
            lines.append("(complex values compared as (real, imag) pairs: the last index "
                         "selects the part)")
        return "\n  ".join(lines)

    def _chunk_mismatch(self, ra: torch.Tensor, ga: torch.Tensor):
        """One chunk's (bad count, worst score, its index, both values, allowed, finite),
        or None when the chunk matches. Values in float64, a chunk at a time."""
        a, e = ra.to(torch.float64), ga.to(torch.float64)
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        both_nan = nan_a & nan_e
        inf_any = torch.isinf(a) | torch.isinf(e)
        finite = ~(nan_a | nan_e | inf_any)
        bad = nan_a ^ nan_e
        if not self._equal_nan:
            bad |= both_nan
        bad |= inf_any & ~(nan_a | nan_e) & (a != e)
        err = torch.zeros_like(a)
        allowed = torch.zeros_like(a)
        ea = self._elementwise(a[finite], e[finite])
        if ea is None:  # the legacy comparator already failed the tensor
            err[finite] = (a[finite] - e[finite]).abs()
            bad |= finite & (err > 0)
        else:
            err[finite], allowed[finite] = ea
            bad |= finite & ~(err <= allowed)
        count = int(bad.sum())
        if count == 0:
            return None
        err = torch.where(bad & ~finite, torch.full_like(err, math.inf), err)
        # worst: the largest error beyond what is allowed
        score = torch.where(bad, err - allowed, torch.full_like(err, -math.inf))
        score = torch.nan_to_num(score, nan=math.inf, posinf=math.inf)
        i = int(torch.argmax(score))
        return (count, float(score[i]), i, a[i].item(), e[i].item(),
                None if ea is None else allowed[i].item(), bool(finite[i]))


class DefaultComparator(Comparator):
    """``|result - golden| <= abs_diff + rel_diff * |golden|`` element by element."""

    rule = "|musa - ref| <= atol + rtol * |ref|"

    def __init__(self, abs_diff: float = 1e-7, rel_diff: float = 1e-5, equal_nan: bool = False):
        super().__init__()
        self._atol, self._rtol, self._equal_nan = abs_diff, rel_diff, equal_nan

    def _elementwise(self, a, e):
        return (a - e).abs(), self._atol + self._rtol * e.abs()

    def _tolerance_text(self):
        return f"atol={_fmt(self._atol)} rtol={_fmt(self._rtol)} ({self.rule})"


class AbsDiffComparator(Comparator):
    """``|result - golden| <= abs_diff`` element by element."""

    _call_checks_dtype = False  # upstream's rule promotes dtypes

    def __init__(self, abs_diff: float = 1e-3, equal_nan: bool = False):
        super().__init__()
        self._atol, self._rtol, self._equal_nan = abs_diff, 0.0, equal_nan

    def _elementwise(self, a, e):
        return (a - e).abs(), torch.full_like(e, self._atol)

    def _tolerance_text(self):
        return f"abs_diff={_fmt(self._atol)} (|musa - ref| <= abs_diff)"


class RelDiffComparator(Comparator):
    """``|result - golden| / |golden| <= rel_diff``; where golden is 0, result must be 0."""

    _call_checks_dtype = False  # upstream's rule promotes dtypes

    def __init__(self, rel_diff: float = 1e-5, equal_nan: bool = False):
        super().__init__()
        self._atol, self._rtol, self._equal_nan = 0.0, rel_diff, equal_nan

    def _elementwise(self, a, e):
        diff = (a - e).abs()
        rel = torch.where(e == 0, torch.where(diff == 0, 0.0, math.inf), diff / e.abs())
        return rel, torch.full_like(e, self._rtol)

    def _tolerance_text(self):
        return f"rel_diff={_fmt(self._rtol)} (|musa - ref| / |ref| <= rel_diff)"


class BooleanComparator(Comparator):
    """Exact equality (bool masks, indices, integer results)."""

    _call_checks_dtype = False  # upstream's rule promotes dtypes

    def __init__(self, equal_nan: bool = False):
        super().__init__()
        self._atol, self._rtol, self._equal_nan = 0.0, 0.0, equal_nan

    def _elementwise(self, a, e):
        return (a - e).abs(), torch.zeros_like(e)

    def widened(self, atol, rtol):
        return self  # exact by definition

    def _tolerance_text(self):
        return "exact equality"


class QuantizedComparator(Comparator):
    """Quantized tensors: same qscheme, scale(s), zero point(s) and axis; integer
    representations and dequantized values within the tolerance."""

    def __init__(self, abs_diff: float = 1e-6, rel_diff: float = 1e-5, equal_nan: bool = False,
                 is_per_tensor: bool = True):
        super().__init__()
        self._atol, self._rtol, self._equal_nan = abs_diff, rel_diff, equal_nan
        self._per_tensor = is_per_tensor

    def _value_mismatch(self, result, golden, rl, gl):
        if not (result.is_quantized and golden.is_quantized):
            return (f"expected quantized tensors: {rl} is_quantized={result.is_quantized}, "
                    f"{gl} is_quantized={golden.is_quantized}")
        if result.qscheme() != golden.qscheme():
            return f"qscheme mismatch: {rl} {result.qscheme()} vs {gl} {golden.qscheme()}"
        if self._per_tensor:
            rs, gs = result.q_scale(), golden.q_scale()
            if abs(rs - gs) > self._atol + self._rtol * abs(gs):
                return f"q_scale mismatch: {rl}={_fmt(rs)} {gl}={_fmt(gs)} (atol={_fmt(self._atol)} rtol={_fmt(self._rtol)})"
            if result.q_zero_point() != golden.q_zero_point():
                return (f"q_zero_point mismatch: {rl}={result.q_zero_point()} "
                        f"{gl}={golden.q_zero_point()}")
        else:
            if result.q_per_channel_axis() != golden.q_per_channel_axis():
                return (f"q_per_channel_axis mismatch: {rl}={result.q_per_channel_axis()} "
                        f"{gl}={golden.q_per_channel_axis()}")
            for what in ("q_per_channel_scales", "q_per_channel_zero_points"):
                sub = DefaultComparator(self._atol, self._rtol).mismatch(
                    getattr(result, what)(), getattr(golden, what)(), check_dtype=False,
                    result_label=rl, golden_label=gl)
                if sub:
                    return f"{what} mismatch:\n  {sub}"
        default = DefaultComparator(self._atol, self._rtol, self._equal_nan)
        sub = default.mismatch(result.int_repr(), golden.int_repr(), result_label=rl,
                               golden_label=gl)
        if sub:
            return f"int_repr mismatch:\n  {sub}"
        sub = default.mismatch(result.dequantize(), golden.dequantize(), result_label=rl,
                               golden_label=gl)
        if sub:
            return f"dequantized values mismatch:\n  {sub}"
        return None


# -- functional API -----------------------------------------------------------------------

def _tensors_on_cpu(x):
    return torch.utils._pytree.tree_map(
        lambda t: _to_cpu(t) if isinstance(t, torch.Tensor) else t, x)


def _devices(x):
    return [t.device for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None, **kwargs):
    """:func:`torch.testing.assert_close` that also works across devices and says more.

    Values are compared on the CPU (so a musa tensor in a dtype the profile
    cannot compute in still compares). With ``check_device=False`` a musa
    result can be compared with a CPU reference directly. A failure names the
    worst element with both values.
    """
    if check_device:
        da, de = _devices(actual), _devices(expected)
        for i, (x, y) in enumerate(zip(da, de)):
            if x != y:
                raise AssertionError(
                    (msg + "\n" if isinstance(msg, str) else "")
                    + f"The values for attribute 'device' do not match: {x} != {y} "
                    f"(tensor {i}); pass check_device=False to compare across devices.")
    a_cpu, e_cpu = _tensors_on_cpu(actual), _tensors_on_cpu(expected)
    try:
        torch.testing.assert_close(
            a_cpu, e_cpu, allow_subclasses=allow_subclasses, rtol=rtol, atol=atol,
            equal_nan=equal_nan, check_device=False, check_dtype=check_dtype,
            check_layout=check_layout, check_stride=check_stride, msg=msg, **kwargs)
    except AssertionError as err:
        detail = None
        if (isinstance(a_cpu, torch.Tensor) and isinstance(e_cpu, torch.Tensor)
                and a_cpu.shape == e_cpu.shape and not a_cpu.is_quantized):
            if rtol is None or atol is None:
                from torch.testing._comparison import default_tolerances
                rtol, atol = default_tolerances(a_cpu, e_cpu)
            detail = DefaultComparator(atol, rtol, equal_nan).mismatch(
                a_cpu, e_cpu, check_dtype=False, result_label="actual", golden_label="expected")
        if detail and msg is None:
            raise AssertionError(f"{err}\n  {detail}") from None
        raise


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """The old ``torch.testing.assert_allclose``: ``expected`` may be any array-like and
    is converted to ``actual``'s dtype; devices are not compared."""
    if not isinstance(actual, torch.Tensor):
        actual = torch.tensor(actual)
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected, dtype=actual.dtype)
    actual, expected = _to_cpu(actual), _to_cpu(expected)
    if expected.dtype != actual.dtype:
        expected = expected.to(actual.dtype)
    if expected.shape != actual.shape:
        expected = expected.expand_as(actual)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_device=False, check_dtype=False, msg=msg or None)
