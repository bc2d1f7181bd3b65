"""Indexing primitives beyond lax_structure's gather/scatter cases: scatter-sub, and the slicing
and scatter primitives on more dtypes and shapes (scalar updates, size 0, rank 3). Bit-exact on
every backend: data movement, and integer (wrapping) or single-update float arithmetic."""
from __future__ import annotations

import numpy as np
from jax import lax

from spec import compliance as C

from ._elementwise import BF16, BOOL, C64, F16, F32, F64, I8, I32, U8, U32
from ._programs import program_cases

DT = (F32, I32, BF16, U8)
NDT = (F16, F64, I8, U32, C64)


def _scatter_1d(op):
    """x[idx[k]] op= u[k] along dimension 0 (scatter/scatter-add/scatter-sub primitives)."""
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))

    def fn(x, i, u):
        return op(x, i[:, None], u, dnums, mode=lax.GatherScatterMode.FILL_OR_DROP)
    return fn


def _scatter_rows(op):
    """Rows x[idx[k], :, :] op= u[k] of a rank-3 operand (update window dims 1, 2)."""
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))

    def fn(x, i, u):
        return op(x, i[:, None], u, dnums, mode=lax.GatherScatterMode.CLIP)
    return fn


def cases():
    P = program_cases
    fam = "lax_indexing"
    # Integer scatter-sub with duplicate indices: wrapping arithmetic, so every order of applying the
    # updates gives the same result (exact); out-of-range indices are dropped (FILL_OR_DROP).
    yield from P(fam, "scatter_sub_int_dups_drop", _scatter_1d(lax.scatter_sub), [(6,), (16,)], (I32, U8),
                 int_inputs={1: (-3, 8, (16,))}, primitives=["scatter-sub"], nightly_dtypes=(I8, U32))
    # Float scatter-sub without duplicates (a permutation of the rows): one rounding per element.
    yield from P(fam, "scatter_sub_rows_rank3", lambda x, u: _scatter_rows(lax.scatter_sub)(
        x, np.array([3, 0, 2], np.int32), u), [(4, 2, 3), (3, 2, 3)], (F32, BF16), primitives=["scatter-sub"],
        nightly_dtypes=(F16, F64), modes=C.exact("ieee754"))
    # Clamped rank-3 row scatter (set): indices out of range are clamped to the last row.
    yield from P(fam, "scatter_rows_clip_rank3", lambda x, i, u: _scatter_rows(lax.scatter)(x, i, u),
                 [(4, 2, 3), (2, 2, 3)], DT, int_inputs={1: (5, 9, (2,))}, primitives=["scatter"],
                 nightly_dtypes=NDT + (BOOL,))
    yield from P(fam, "scatter_add_int_scalar_updates", _scatter_1d(lax.scatter_add), [(5,), (9,)], (I32, U8),
                 int_inputs={1: (-2, 6, (9,))}, primitives=["scatter-add"])
    # Slices of rank 3 (strided), size-0 results, dynamic slices of a scalar-sized window.
    yield from P(fam, "slice_rank3_strided", lambda x: lax.slice(x, (0, 1, 0), (2, 4, 5), (1, 2, 3)),
                 [(2, 4, 5)], DT, primitives=["slice"], nightly_dtypes=NDT + (BOOL,))
    yield from P(fam, "slice_size0", lambda x: lax.slice(x, (1, 3), (1, 5)), [(3, 5)], (F32, I32),
                 primitives=["slice"])
    yield from P(fam, "dynamic_slice_rank3_clamped", lambda x, i: lax.dynamic_slice(x, (i[0], i[1], i[2]), (1, 2, 3)),
                 [(2, 4, 5)], DT, int_inputs={1: (-6, 6, (3,))}, primitives=["dynamic_slice"],
                 nightly_dtypes=NDT + (BOOL,))
    yield from P(fam, "dynamic_update_slice_scalar_window",
                 lambda x, u, i: lax.dynamic_update_slice(x, u, (i[0], i[1])), [(3, 4), (1, 1)], DT,
                 int_inputs={2: (-5, 5, (2,))}, primitives=["dynamic_update_slice"], nightly_dtypes=NDT + (BOOL,))
    yield from P(fam, "gather_rank3_fill",
                 lambda x, i: x.at[i].get(mode="fill", fill_value=1 if x.dtype == bool else 5), [(4, 2, 3)], DT,
                 int_inputs={1: (-6, 6, (5,))}, primitives=["gather"], nightly_dtypes=NDT + (BOOL,))
