"""Reductions, cumulative ops, windows, sort and top_k.

Float sums are checked with the DOT_PRODUCT bound (K = reduced length, b = 1): backends may
reduce in any order (XLA:CPU vectorises, GPUs use trees), so only the error bound is defined.
max/min/argmax/sort/top_k and integer reductions are exact (NaN propagation, ties, -0/+0 order).
"""
from __future__ import annotations

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax
from jax._src.lax import windowed_reductions as _wr

from spec import compliance as C

from ._elementwise import BF16, BOOL, F16, F32, F64, I32, U8
from ._programs import program_cases


# cumlogsumexp along 40 elements in [-10, 10]: XLA:CPU (jax 0.12.0.1 and 0.10.2) is at most 1.6 eps*max|in|
# and 1.7 eps relative from the reference over seeds 0..4 (each logaddexp of the scan rounds to the input
# type; the scan is log2(40) ~ 5 levels deep); the budget is 5x that (source "measured").
MODE_CUMLOGSUMEXP = C.abs_rel(8, 8, "measured")


def _abs64(x):
    return np.abs(np.asarray(x, np.float64))


def cases():
    P = program_cases
    fam = "lax_reductions"
    yield from P(fam, "reduce_sum_axis1", lambda x: jnp.sum(x, axis=1), [(4, 100)], (F32,), primitives=["reduce_sum"],
                 modes=C.dot_product(100), dot_bound=lambda x: [_abs64(x).sum(1)], specials=0,
                 nightly_dtypes=(F64,))
    yield from P(fam, "reduce_sum_rank3", lambda x: jnp.sum(x, axis=(0, 2)), [(3, 4, 5)], (F32,),
                 primitives=["reduce_sum"], modes=C.dot_product(15), specials=0,
                 dot_bound=lambda x: [_abs64(x).sum((0, 2))])
    yield from P(fam, "reduce_sum_int", lambda x: jnp.sum(x, axis=0, dtype=x.dtype), [(50, 3)], (I32, U8),
                 primitives=["reduce_sum"])
    yield from P(fam, "reduce_prod_int", lambda x: jnp.prod(x, axis=1, dtype=x.dtype), [(3, 9)], (I32,),
                 primitives=["reduce_prod"])
    yield from P(fam, "reduce_max", lambda x: jnp.max(x, axis=1), [(5, 17)], (F32, BF16, I32),
                 primitives=["reduce_max"], specials=0.4, nightly_dtypes=(F16, F64))
    yield from P(fam, "reduce_min", lambda x: jnp.min(x, axis=0), [(17, 5)], (F32, I32), primitives=["reduce_min"],
                 specials=0.4)
    yield from P(fam, "argmax_nan_ties", lambda x: jnp.argmax(x, axis=1), [(6, 9)], (F32, I32),
                 primitives=["argmax"], specials=0.5, nightly_dtypes=(BF16,))
    yield from P(fam, "argmin", lambda x: jnp.argmin(x, axis=0), [(9, 6)], (F32,), primitives=["argmin"],
                 specials=0.5)
    yield from P(fam, "reduce_and_or", lambda x: (jnp.all(x, axis=1), jnp.any(x, axis=0)), [(4, 7)], (BOOL,),
                 primitives=["reduce_and", "reduce_or"])
    yield from P(fam, "cumsum", lambda x: jnp.cumsum(x, axis=1), [(3, 40)], (F32,), primitives=["cumsum"],
                 modes=C.dot_product(40), dot_bound=lambda x: [np.cumsum(_abs64(x), axis=1)], specials=0)
    yield from P(fam, "cumsum_int", lambda x: jnp.cumsum(x, axis=0, dtype=x.dtype), [(20, 3)], (I32,),
                 primitives=["cumsum"])
    yield from P(fam, "cummax", lambda x: lax.cummax(x, axis=1), [(3, 20)], (F32, I32), primitives=["cummax"],
                 specials=0.3)
    yield from P(fam, "reduce_window_max", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 3), (1, 2),
                                                                       "SAME"), [(6, 9)], (F32,),
                 primitives=["reduce_window_max"], specials=0.3)
    yield from P(fam, "sort_specials", lambda x: jnp.sort(x, axis=1), [(4, 30)], (F32, I32, BF16),
                 primitives=["sort"], specials=0.5, nightly_dtypes=(F16, F64))
    yield from P(fam, "sort_two_operands", lambda k, v: lax.sort((k, v), dimension=0, num_keys=1), [(25,), (25,)],
                 (F32,), primitives=["sort"], specials=0.5)
    yield from P(fam, "argsort_stable", lambda x: jnp.argsort(x, axis=-1, stable=True), [(3, 20)], (F32, I32),
                 primitives=["sort"], specials=0.5)
    yield from P(fam, "top_k", lambda x: lax.top_k(x, 5), [(4, 16)], (F32, I32), primitives=["top_k"],
                 specials=0.2)
    yield from P(fam, "cummin_reverse", lambda x: lax.cummin(x, axis=0, reverse=True), [(12, 3)], (F32, I32),
                 primitives=["cummin"], specials=0.3)
    yield from P(fam, "cumprod_int", lambda x: lax.cumprod(x, axis=1), [(3, 12)], (I32,), primitives=["cumprod"])
    yield from P(fam, "reduce_xor", lambda x: lax.reduce_xor(x, (1,)), [(5, 9)], (I32, U8),
                 primitives=["reduce_xor"])
    yield from P(fam, "reduce_window_min_padded",
                 lambda x: lax.reduce_window(x, jnp.inf, lax.min, (3, 2), (2, 1), ((1, 1), (0, 1))), [(7, 6)],
                 (F32,), primitives=["reduce_window_min"], specials=0.3)
    yield from P(fam, "reduce_window_sum_int", lambda x: lax.reduce_window(x, 0, lax.add, (2, 2), (1, 1), "VALID"),
                 [(5, 6)], (I32,), primitives=["reduce_window_sum"])
    yield from P(fam, "reduce_generic_argmax_pair",
                 lambda x, i: lax.reduce((x, i), (jnp.float32(-jnp.inf), jnp.int32(0)),
                                         lambda a, b: (jnp.maximum(a[0], b[0]),
                                                       jnp.where(a[0] >= b[0], a[1], b[1])), (1,)),
                 [(4, 10)], (F32,), int_inputs={1: (0, 100, (4, 10))}, primitives=["reduce"], specials=0)
    yield from P(fam, "max_pool_grad", jax.grad(lambda x: jnp.sum(lax.reduce_window(
        x, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID") * 3)), [(6, 8)], (F32,),
        primitives=["select_and_scatter_add"], specials=0)
    # Generic reduce_window (a computation that is not add/max/min): integer products wrap, so every
    # association order gives the same result (exact).
    yield from P(fam, "reduce_window_generic_int_mul",
                 lambda x: lax.reduce_window(x, np.array(1, x.dtype), lax.mul, (2, 3), (1, 2), "SAME"), [(5, 7)],
                 (I32, U8), primitives=["reduce_window"])
    # Variadic reduce_window: windowed (max, index of the first max) pairs; comparisons only.
    yield from P(fam, "reduce_window_variadic_argmax",
                 lambda x, i: lax.reduce_window((x, i), (np.array(-np.inf, x.dtype), np.int32(-1)), _argmax_pair,
                                                (3, 2), (2, 1), ((1, 0), (0, 1))),
                 [(6, 5)], (F32,), int_inputs={1: (0, 1000, (6, 5))}, primitives=["reduce_window"], specials=0,
                 nightly_dtypes=(BF16,))
    # JVP of max pooling: the tangent of each window's selected (first maximal) element, data movement.
    yield from P(fam, "max_pool_jvp", lambda x, t: jax.jvp(lambda y: lax.reduce_window(
        y, -jnp.inf, lax.max, (2, 3), (2, 1), ((0, 1), (1, 0))), (x,), (t,))[1], [(6, 7), (6, 7)], (F32,),
        primitives=["select_and_gather_add"], specials=0, nightly_dtypes=(F64, BF16))
    # Generic select_and_scatter (no lax API binds it): integer adds (exact in any order) into the
    # first maximum of each overlapping window, and a float max-scatter (order-independent).
    yield from P(fam, "select_and_scatter_ge_int_add", lambda x, s: _wr._select_and_scatter(
        x, lax.ge, (2, 2), (1, 2), ((0, 1), (1, 0)), s, np.int32(0), lax.add), [(5, 6), (5, 3)], (I32,),
        primitives=["select_and_scatter"])
    yield from P(fam, "select_and_scatter_le_max", lambda x, s: _wr._select_and_scatter(
        x, lax.le, (3, 2), (2, 2), ((1, 1), (0, 0)), s, np.array(-np.inf, x.dtype), lax.max), [(6, 6), (3, 3)],
        (F32,), primitives=["select_and_scatter"], specials=0, nightly_dtypes=(BF16, F64))
    # cumlogsumexp: XLA evaluates an associative scan of logaddexp in the input type; the bound is
    # stated in MODE_CUMLOGSUMEXP.
    yield from P(fam, "cumlogsumexp", lambda x: lax.cumlogsumexp(x, axis=1), [(3, 40)], (F32,),
                 primitives=["cumlogsumexp"], specials=0, modes=MODE_CUMLOGSUMEXP, nightly_dtypes=(F64,))


def _argmax_pair(a, b):
    take_a = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
    return lax.select(take_a, a[0], b[0]), lax.select(take_a, a[1], b[1])
