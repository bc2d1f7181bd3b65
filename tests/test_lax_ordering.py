"""sort, top_k, approx_top_k: bitwise against XLA:CPU (its sort/TopK are exact by definition),
with NaN (both signs), +-inf, +-0 and ties in every dtype family, several operands, num_keys > 1,
stable order, and grad/vmap programs."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

from conformance.values import arrays
from tests.support import xla_cpu
from tests.test_lax_reductions import assert_same_bits, flush_subnormals, ref

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
DTYPES = [np.float32, np.float16, BF16, E4M3, np.int32, np.uint8, np.int8, np.bool_]

EDGE = np.array([3., -0., 0., np.nan, -np.inf, 1., -np.nan, 0., -0., np.inf, 1., -3.], np.float32)


def _check(fn, *args):
    got, want = ref(fn, *args), xla_cpu(fn, *args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert_same_bits(g, w, err_msg=f"inputs {args}")


def sort1(x):
    return lax.sort(x, dimension=1)


def sort0(x):
    return lax.sort(x, dimension=0)


def sort_with_index(x):
    i = lax.broadcasted_iota(np.int32, x.shape, 1)
    return lax.sort((x, i), dimension=1, num_keys=1)


def topk2(x):
    return lax.top_k(x, 2)


def topk_all(x):
    return lax.top_k(x, x.shape[-1])


FNS = [sort1, sort0, sort_with_index, topk2, topk_all]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@settings(max_examples=10)
@given(data=st.data())
def test_sort_topk_bitwise(dtype, data):
    # XLA:CPU compares f32/bf16 subnormals as zero (flush-to-zero allowance): flushed inputs.
    x = flush_subnormals(data.draw(arrays(dtype, (3, 8))))
    for fn in FNS:
        if fn in (topk2, topk_all) and np.dtype(dtype) == np.bool_:
            continue   # top_k rejects bool
        _check(fn, x)


def test_sort_edge_order():
    x = EDGE[None]
    got = ref(sort_with_index, x)
    _check(sort_with_index, x)
    # Stated order: -inf < -3 < -0 == 0 (input order) < 1 < 3 < inf < NaN (all NaN, input order).
    assert got[1][0].tolist() == [4, 11, 1, 2, 7, 8, 5, 10, 0, 9, 3, 6]


def test_sort_num_keys_and_operands():
    k1 = np.array([[1., 0., 1., np.nan, 0., -0., 1.]], np.float32)
    k2 = np.array([[3, 2, 1, 0, 2, 2, 3]], np.int32)
    v = np.array([[10., 20., 30., 40., 50., 60., 70.]], np.float32)
    for nk in (1, 2, 3):
        fn = lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=nk)  # noqa: E731
        _check(fn, k1, k2, v)
    fn = lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2)  # noqa: E731
    assert ref(fn, k1, k2, v)[2][0].tolist() == [20., 50., 60., 30., 10., 70., 40.]


def test_sort_complex_and_unstable():
    c = np.array([1 + 2j, 1 - 0j, np.nan + 0j, 1 + np.nan * 1j, -0. + 1j, 0 + 1j, -np.inf + 5j], np.complex64)
    _check(lambda c: lax.sort(c), c)
    x = np.array([[2., 1., 2., 0., 1.]], np.float32)
    i = np.arange(5, dtype=np.int32)[None]
    fn = lambda x, i: lax.sort((x, i), dimension=1, is_stable=False, num_keys=1)  # noqa: E731
    got = ref(fn, x, i)
    assert_same_bits(got[0], xla_cpu(fn, x, i)[0])        # keys: unique answer
    assert got[1][0].tolist() == [3, 1, 4, 0, 2]           # ties: the reference is stable


def test_top_k_ties_and_specials():
    x = EDGE[None]
    _check(lambda x: lax.top_k(x, 12), x)
    got = ref(lambda x: lax.top_k(x, 12), x)
    # IEEE total order, descending; ties lowest index first.
    assert got[1][0].tolist() == [3, 9, 0, 5, 10, 2, 7, 1, 8, 11, 4, 6]
    xi = np.array([[5, 1, 5, 5, -2, 7]], np.int32)
    _check(lambda x: lax.top_k(x, 4), xi)
    x3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 5
    _check(lambda x: lax.top_k(x, 3), x3)


def test_approx_top_k_cpu_semantics():
    # With NaN or -0.0 XLA:CPU's order depends on k and on the jaxlib version (spec/): the
    # reference gives JAX's sort order, stable: NaN of both signs first, then inf, ... -0 == +0.
    got = ref(lambda x: lax.approx_max_k(x, 12, aggregate_to_topk=False), EDGE[None])
    assert got[1][0].tolist() == [3, 6, 9, 0, 5, 10, 1, 2, 7, 8, 11, 4]
    got = ref(lambda x: lax.approx_min_k(x, 12), EDGE[None])
    assert got[1][0].tolist() == [4, 11, 1, 2, 7, 8, 5, 10, 0, 9, 3, 6]
    # Any k on NaN-free inputs without -0.0: bitwise with XLA:CPU.
    y = (np.arange(30, dtype=np.float32).reshape(5, 6) % 7) - 3
    y[2, 3], y[4, 0] = np.inf, -np.inf
    for k in (1, 2, 4, 5):
        _check(lambda y: lax.approx_max_k(y, k, recall_target=0.5), y)
        _check(lambda y: lax.approx_min_k(y, k, reduction_dimension=0), y)


def test_grad_and_vmap_of_sort_and_top_k():
    x = np.array([[3., 1., 2., 5.], [0., -1., 4., 2.]], np.float32)
    w = np.array([1., 2., 3., 4.], np.float32)
    fns = [jax.grad(lambda x: jnp.sum(jnp.sort(x, axis=1) * w)),
           jax.grad(lambda x: jnp.sum(lax.top_k(x, 2)[0] * w[:2])),
           jax.vmap(lambda r: jnp.argsort(r), in_axes=1),
           jax.vmap(lambda r: lax.top_k(r, 1))]
    for fn in fns:
        _check(fn, x)


def test_approx_top_k_c4_tpu_sized_candidate_set_raises():
    # aggregate_to_topk=False: JAX's shape rule gives the TPU's candidate count, which CPU and GPU
    # do not return (they return k): the reference refuses rather than pick one.
    import interp
    x = np.arange(1024, dtype=np.float32)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="approx_top_k/c4"):
        interp.interpret(lambda x: lax.approx_max_k(x, 4, aggregate_to_topk=False))(x)
