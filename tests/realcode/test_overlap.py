"""Writes between tensors that share memory answer on musa as on the CPU device.

ATen refuses a write whose input partially overlaps the written-to tensor
("unsupported operation: some elements of the input tensor and the written-to
tensor refer to a single memory location"), because the result would depend on
the order in which elements are visited; where it does not refuse, it defines
the result. Real code meets both (shifts such as ``x[1:] = x[:-1]``, out= into a
view of an input, in-place ops on transposes). musa must raise exactly where the
CPU raises and compute the CPU's values elsewhere: a silent write here trains a
model wrong with no error (issue 18 item 3).

Every case starts from ``x = arange(1., 7.)`` on its device and covers the
device's three kernel paths: native unboxed (add.out, copy_), structured
(sign.out) and the boxed CPU fallback (index_put_, take, nan_to_num).
"""
from __future__ import annotations

import warnings

import pytest
import torch

from torch_musa.testing.reference import kernel_device

#: Under the cuda driver musa answers as cuda does (its kernels, its checks).
REF = kernel_device()

OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to "
           "tensor refer to a single memory location")


def _idx(x, *values):
    return torch.tensor(values, device=x.device)


def _long_idx(x, n):
    return torch.empty(n, dtype=torch.long, device=x.device)


def _setitem(dst, src):
    dst[...] = src


def _storage_resize_keeps_device(x, nbytes):
    s = x.untyped_storage()
    size = s.nbytes()
    s.resize_(nbytes)
    answer = s.device.type == x.device.type, x.untyped_storage().device.type == x.device.type
    s.resize_(size)  # back to x's size: what survived the resize must still be x's values
    if nbytes < size:
        x.zero_()
    return answer


def _set_then_query(x):
    y = torch.empty(0, device=x.device).set_(x)
    return y.is_set_to(x), x.view(6).is_set_to(x), x[:3].is_set_to(x)


# (name, the operation on x, what the CPU does: "raises" the overlap error or "computes")
CASES = [
    # -- partial overlap: the CPU refuses -------------------------------------------
    ("setitem_shift", lambda x: _setitem(x[1:], x[:-1]), "raises"),
    ("copy_shift", lambda x: x[1:].copy_(x[:-1]), "raises"),
    ("copy_transpose", lambda x: x[:4].view(2, 2).copy_(x[:4].view(2, 2).t()), "raises"),
    ("copy_with_dtype_change", lambda x: x.view(torch.int32)[1:].copy_(x[:-1]), "raises"),
    ("add_inplace_shift", lambda x: x[2:].add_(x[:4]), "raises"),
    ("add_inplace_transpose", lambda x: x[:4].view(2, 2).add_(x[:4].view(2, 2).t()), "raises"),
    ("add_out_shift", lambda x: torch.add(x[:4], 1, out=x[2:]), "raises"),
    ("sub_out_other_overlaps", lambda x: torch.sub(x[2:], x[:4], out=x[:4]), "raises"),
    ("mul_out_both_overlap", lambda x: torch.mul(x[:4], x[1:5], out=x[2:]), "raises"),
    ("neg_out_shift", lambda x: torch.neg(x[:4], out=x[2:]), "raises"),
    ("exp_out_shift", lambda x: torch.exp(x[:4], out=x[2:]), "raises"),
    ("sign_out_shift_structured", lambda x: torch.sign(x[:4], out=x[2:]), "raises"),
    ("nan_to_num_out_shift_fallback", lambda x: torch.nan_to_num(x[:4], out=x[2:]), "raises"),
    ("pow_out_shift", lambda x: torch.pow(x[:4], 2, out=x[2:]), "raises"),
    ("clamp_out_shift", lambda x: torch.clamp(x[:4], 1, 3, out=x[2:]), "raises"),
    ("clamp_min_out_shift", lambda x: torch.clamp_min(x[:4], 0, out=x[2:]), "raises"),
    ("maximum_out_shift", lambda x: torch.maximum(x[:4], x[1:5], out=x[2:]), "raises"),
    ("remainder_out_shift", lambda x: torch.remainder(x[:4], x[1:5], out=x[2:]), "raises"),
    ("floor_divide_out_shift", lambda x: torch.floor_divide(x[:4], 2, out=x[1:5]), "raises"),
    ("where_out_shift", lambda x: torch.where(x[:4] > 2, x[:4], x[1:5], out=x[2:]), "raises"),
    ("lerp_inplace_shift", lambda x: x[2:].lerp_(x[:4], 0.5), "raises"),
    ("addcmul_inplace_shift", lambda x: x[2:].addcmul_(x[:4], x[1:5]), "raises"),
    ("addcdiv_out_shift", lambda x: torch.addcdiv(x[:4], x[1:5], x[2:], out=x[2:]), "raises"),
    ("lt_out_bool_shift",
     lambda x: (lambda b: torch.lt(b[:4], b[1:5], out=b[2:]))(x > 3), "raises"),
    ("bitwise_and_out_int_shift",
     lambda x: (lambda y: torch.bitwise_and(y[:4], y[1:5], out=y[2:]))(x.long()), "raises"),
    ("complex_mul_inplace_shift",
     lambda x: torch.view_as_complex(x.view(3, 2))[1:].mul_(
         torch.view_as_complex(x.view(3, 2))[:2]), "raises"),
    ("cumsum_out_shift", lambda x: torch.cumsum(x[:4], 0, out=x[2:]), "raises"),
    ("cumprod_out_shift", lambda x: torch.cumprod(x[:4], 0, out=x[2:]), "raises"),
    ("sort_out_shift", lambda x: torch.sort(x[:4], out=(x[2:], _long_idx(x, 4))), "raises"),
    ("topk_out_shift", lambda x: torch.topk(x, 4, out=(x[2:], _long_idx(x, 4))), "raises"),
    ("max_dim_out_overlap", lambda x: torch.max(x.view(3, 2), 1, out=(x[:3], _long_idx(x, 3))),
     "raises"),
    ("index_put_values_overlap_self", lambda x: x.index_put_((_idx(x, 0, 1, 2),), x[1:4]),
     "raises"),
    ("index_put_accumulate_overlap",
     lambda x: x.index_put_((_idx(x, 0, 1, 2),), x[1:4], accumulate=True), "raises"),
    ("index_put_values_are_self", lambda x: x.index_put_((_idx(x, 5, 4, 3, 2, 1, 0),), x),
     "raises"),
    ("index_copy_overlap", lambda x: x.index_copy_(0, _idx(x, 0, 1, 2), x[1:4]), "raises"),
    ("index_add_overlap", lambda x: x.index_add_(0, _idx(x, 0, 1, 2), x[1:4]), "raises"),
    ("index_add_out_overlap",
     lambda x: torch.index_add(x[:4], 0, _idx(x, 0, 1), x[1:3], out=x[2:]), "raises"),
    ("scatter_src_overlap", lambda x: x.scatter_(0, _idx(x, 0, 1, 2), x[1:4]), "raises"),
    ("put_overlap", lambda x: x.put_(_idx(x, 0, 1, 2), x[1:4]), "raises"),
    ("gather_out_overlap", lambda x: torch.gather(x[:4], 0, _idx(x, 3, 2, 1, 0), out=x[2:]),
     "raises"),
    ("take_out_is_input", lambda x: torch.take(x, _idx(x, 5, 4, 3, 2, 1, 0), out=x), "raises"),
    ("index_select_out_overlap",
     lambda x: torch.index_select(x, 0, _idx(x, 3, 2, 1, 0), out=x[2:]), "raises"),
    ("masked_select_out_overlap", lambda x: torch.masked_select(x, x > 1, out=x[:4]), "raises"),
    ("cat_out_overlap", lambda x: torch.cat([x[:2], x[2:3]], out=x[1:4]), "raises"),
    ("cat_out_is_input", lambda x: torch.cat([x[:3], x[:3]], out=x), "raises"),
    ("stack_out_overlap", lambda x: torch.stack([x[:3]], out=x[1:4].view(1, 3)), "raises"),
    ("linalg_cross_out_overlap", lambda x: torch.linalg.cross(x[:3], x[3:], out=x[1:4]),
     "raises"),
    # -- internal overlap of the written-to tensor ----------------------------------
    ("add_inplace_on_expanded", lambda x: x[:1].expand(3).add_(1), "raises-internal"),
    # -- aliasing the CPU accepts and defines ----------------------------------------
    ("copy_onto_itself", lambda x: x.copy_(x), "computes"),
    ("copy_disjoint_halves", lambda x: x[:3].copy_(x[3:]), "computes"),
    ("copy_strided_interleaved", lambda x: x.view(2, 3)[:, :2].copy_(x.view(2, 3)[:, 1:]),
     "computes"),
    ("copy_of_rolled_self", lambda x: x.copy_(torch.roll(x, 1)), "computes"),
    ("mul_inplace_by_itself", lambda x: x.mul_(x), "computes"),
    ("div_out_all_same", lambda x: torch.div(x, x, out=x), "computes"),
    ("abs_out_is_input", lambda x: torch.abs(x, out=x), "computes"),
    ("add_inplace_flipped_self", lambda x: x.add_(x.flip(0)), "computes"),
    ("sigmoid_inplace_view", lambda x: x[:4].sigmoid_(), "computes"),
    ("masked_fill_mask_from_self", lambda x: x.masked_fill_(x > 2, 0), "computes"),
    ("masked_scatter_overlap", lambda x: x[:4].masked_scatter_(
        torch.ones(4, dtype=torch.bool, device=x.device), x[2:]), "computes"),
    ("fill_with_element_of_self", lambda x: x[1:].fill_(x[0]), "computes"),
    ("index_fill_with_element_of_self", lambda x: x.index_fill_(0, _idx(x, 0, 1), x[2]),
     "computes"),
    ("cumsum_out_is_input", lambda x: torch.cumsum(x, 0, out=x), "computes"),
    ("cumprod_out_is_input", lambda x: torch.cumprod(x, 0, out=x), "computes"),
    ("sort_out_values_are_input",
     lambda x: torch.sort(x, descending=True, out=(x, _long_idx(x, 6))), "computes"),
    ("sum_out_overlap", lambda x: torch.sum(x.view(2, 3), 1, out=x[:2]), "computes"),
    ("logsumexp_out_overlap", lambda x: torch.logsumexp(x.view(2, 3), 1, out=x[:2]),
     "computes"),
    ("softmax_out_overlap", lambda x: torch._softmax(x[:4], 0, False, out=x[2:]), "computes"),
    ("mm_out_overlap", lambda x: torch.mm(x[:4].view(2, 2), x[2:].view(2, 2),
                                          out=x[:4].view(2, 2)), "computes"),
    ("mm_out_is_both_inputs", lambda x: (lambda a: torch.mm(a, a, out=a))(x[:4].view(2, 2)),
     "computes"),
    ("addmm_out_is_every_input",
     lambda x: (lambda a: torch.addmm(a, a, a, out=a))(x[:4].view(2, 2)), "computes"),
    ("addmm_inplace_self_is_mat1",
     lambda x: x[:4].view(2, 2).addmm_(x[:4].view(2, 2), x[2:].view(2, 2)), "computes"),
    ("bmm_out_is_both_inputs",
     lambda x: (lambda a: torch.bmm(a, a, out=a))(x[:4].view(1, 2, 2)), "computes"),
    ("mv_out_overlap", lambda x: torch.mv(x[:4].view(2, 2), x[:2], out=x[1:3]), "computes"),
    ("narrow_copy_out_overlap", lambda x: torch.narrow_copy(x, 0, 0, 4, out=x[2:]), "computes"),
    ("arange_out_view", lambda x: torch.arange(4, out=x[1:5]), "computes"),
    ("renorm_out_is_input", lambda x: torch.renorm(x.view(2, 3), 2, 0, 1, out=x.view(2, 3)),
     "computes"),
    ("embedding_renorm_inplace",
     lambda x: torch.embedding_renorm_(x.view(3, 2), _idx(x, 0, 1), 1.0, 2.0), "computes"),
    # -- ATen's own aliasing queries --------------------------------------------------
    ("is_set_to", _set_then_query, "computes"),
    ("is_alias_of", lambda x: (torch._C._is_alias_of(x, x[2:]),
                               torch._C._is_alias_of(x, x.clone())), "computes"),
    ("debug_has_internal_overlap", lambda x: (torch._debug_has_internal_overlap(x),
                                              torch._debug_has_internal_overlap(x.expand(2, 6)),
                                              torch._debug_has_internal_overlap(
                                                  x.unfold(0, 2, 1))), "computes"),
    ("storage_resize_grow_keeps_device", lambda x: _storage_resize_keeps_device(x, 48),
     "computes"),
    ("storage_resize_to_zero_keeps_device", lambda x: _storage_resize_keeps_device(x, 0),
     "computes"),
]

# Cases musa still gets wrong today: each fails loudly (strict) once it passes, so
# take it out of this dict then.
FAILING_TODAY: dict[str, str] = {}


def _plain(value):
    """A device-free form of what an operation returned, for comparing across devices."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.detach().cpu().tolist())
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    raise TypeError(f"case returned {type(value).__name__}; return tensors, tuples or scalars")


def _outcome(fn, device):
    x = torch.arange(1.0, 7.0, device=device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's notice and resize warnings
            result = fn(x)
    except RuntimeError as err:
        return "raises", str(err)
    return "computes", (_plain(result), x.cpu().tolist())


def _params():
    for name, fn, cpu in CASES:
        marks = ([pytest.mark.xfail(strict=True, reason=FAILING_TODAY[name])]
                 if name in FAILING_TODAY else [])
        yield pytest.param(fn, cpu, id=name, marks=marks)


@pytest.mark.parametrize("fn, cpu_does", list(_params()))
def test_overlapping_write_answers_as_on_the_cpu(fn, cpu_does):
    cpu_kind, cpu_value = _outcome(fn, "cpu")
    if cpu_does == "raises":
        assert cpu_kind == "raises" and OVERLAP in cpu_value, (
            f"the table says the CPU refuses this write, but the CPU {cpu_kind}: {cpu_value}")
    elif cpu_does == "raises-internal":
        assert cpu_kind == "raises" and "more than one element of the written-to" in cpu_value
    else:
        assert cpu_kind == "computes", (
            f"the table says the CPU computes, but it raised: {cpu_value}")
    musa_kind, musa_value = _outcome(fn, "musa")
    if REF != "cpu":
        ref_kind, ref_value = _outcome(fn, REF)
        if cpu_kind == "raises" and ref_kind == "computes":
            # CUDA writes without the check: the values depend on the GPU's schedule
            assert musa_kind == "computes", f"{REF} writes, but musa raised: {musa_value}"
            return
        cpu_kind, cpu_value = ref_kind, ref_value
    if cpu_kind == "raises":
        assert musa_kind == "raises", (
            f"the CPU raises {cpu_value!r}, but musa wrote without an error and left "
            f"x = {musa_value[1]}")
        assert musa_value == cpu_value
    else:
        assert musa_kind == "computes", (
            f"the CPU computes {cpu_value}, but musa raised: {musa_value}")
        assert musa_value == cpu_value, (
            f"musa computed (result, x) = {musa_value}, the CPU {cpu_value}")


def test_the_table_covers_the_issue_cases():
    """The cases issue 18 names and at least 16 partial overlaps are in the table."""
    names = {name for name, _, _ in CASES}
    assert {"setitem_shift", "add_inplace_shift", "add_out_shift", "index_put_values_overlap_self",
            "cumprod_out_shift", "is_set_to", "storage_resize_grow_keeps_device"} <= names
    assert sum(cpu == "raises" for _, _, cpu in CASES) >= 16
    assert len(names) == len(CASES), "two cases share a name"
