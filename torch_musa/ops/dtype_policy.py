"""Ops that only move or select data, so any dtype may pass through them even
on a profile that cannot compute in it (factories, copies, views, indexing,
comparisons). Every other op raises for a dtype the profile lacks.
The one place this list lives.
"""
DTYPE_AGNOSTIC_OPS = frozenset(
    "aten::" + name
    for name in """
    fill_ zero_ clone contiguous copy_ _to_copy _copy_from cat stack narrow_copy
    _unsafe_view view_as_real view_as_complex flip roll repeat tile unfold
    index index_select index_put_ _index_put_impl_ gather scatter masked_select
    masked_fill_ masked_scatter_ take put_ where nonzero
    slice_scatter select_scatter as_strided_scatter diagonal_scatter
    eq ne lt le gt ge equal isnan isinf isfinite isposinf isneginf
    _local_scalar_dense empty_like resize_ set_ detach_copy alias_copy
    """.split()
)
