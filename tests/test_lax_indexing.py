"""lax_indexing rules against XLA:CPU (bitwise) and against hand-computed / independently computed
answers where XLA:CPU differs by design (it flushes float32/bfloat16/float64 subnormals in
arithmetic, so float scatter-add/-sub/-mul with subnormals are checked against a sequential
NumPy loop instead).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from jax import lax

import interp
from conformance.values import arrays, assert_same_bits
from interp import dtypes as D
from tests.support import assert_tree_same_bits, reference, with_params, x64, xla_cpu

GD, SD = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers
MODES = ["clip", "fill", "promise_in_bounds"]
INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
ALL_DTYPES = [pytest.param(d, id=d.name) for d in D.ALL]
SCATTERS = {"set": lax.scatter, "add": lax.scatter_add, "sub": lax.scatter_sub,
            "mul": lax.scatter_mul, "min": lax.scatter_min, "max": lax.scatter_max}


def same_as_xla(fn, *args, enable_x64=True):
    with x64(enable_x64):
        ref = reference(fn, *args)
        assert_tree_same_bits(ref, xla_cpu(fn, *args))


def distinct_values(shape, dtype=np.float32):
    """Operand values that are all different, so a misplaced element cannot go unnoticed."""
    return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 0.5 - 7).astype(dtype)


def nice_floats(dtype):
    """Float values whose sums and products stay normal for a few steps (XLA:CPU flushes
    subnormals, the reference does not), plus the specials that are not subnormal; complex values
    have such parts."""
    if D.is_complex(dtype):
        part = nice_floats(np.float32 if np.dtype(dtype) == np.complex64 else np.float64)
        return st.tuples(part, part).map(lambda p: np.array(complex(p[0], p[1])).astype(dtype)[()])
    return st.sampled_from([0.0, -0.0, 0.25, -0.5, 1.0, -1.0, 1.5, 2.0, -3.0, 4.0, 8.0, -6.0,
                            np.inf, -np.inf, np.nan]).map(lambda v: np.array(v).astype(dtype)[()])


# ---- slice, dynamic_slice, dynamic_update_slice ------------------------------------------------

@settings(max_examples=25)
@given(data=st.data())
def test_slice_with_strides(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
    starts, limits, strides = [], [], []
    for n in shape:
        a = data.draw(st.integers(0, n))
        starts.append(a)
        limits.append(data.draw(st.integers(a, n)))
        strides.append(data.draw(st.integers(1, 3)))
    x = distinct_values(shape)
    same_as_xla(lambda x: lax.slice(x, starts, limits, strides), x)


# jaxlib 0.10.2's XLA:CPU clamps a dynamic_update_slice start against dim - size converted to the
# index dtype (297 becomes 41 in int8/uint8); newer XLA:CPU clamps correctly. spec/lax_indexing.py.
OLD_XLA_DUS_NARROW_INDEX_BUG = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 12)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dynamic_slice_clamps_every_index_dtype(index_dtype):
    """Starts are clamped to [0, dim - size] as integers of their own dtype (the primitive, so
    JAX's negative-index wrap-around in lax.dynamic_slice is not involved). Checked against a
    hand clamp and against XLA:CPU."""
    info = np.iinfo(index_dtype)
    x = distinct_values((300, 3))
    update = distinct_values((3, 2)) + 1000
    starts = sorted({int(info.min), -1 if info.min < 0 else 0, 0, 1, 150, 298, 299, 300,
                     int(info.max)})
    f = lambda x, u, i: (lax.dynamic_slice_p.bind(x, i, i, slice_sizes=(2, 2)),
                         lax.dynamic_update_slice_p.bind(x, u, i, i))
    for s in starts:
        if not info.min <= s <= info.max:
            continue
        i = np.array(s, index_dtype)
        with x64():
            got, xla = reference(f, x, update, i), xla_cpu(f, x, update, i)
        r, c = min(max(s, 0), 298), min(max(s, 0), 1)
        assert_same_bits(got[0], x[r:r + 2, c:c + 2])
        want = x.copy()
        r, c = min(max(s, 0), 297), min(max(s, 0), 1)
        want[r:r + 3, c:c + 2] = update
        assert_same_bits(got[1], want)
        assert_same_bits(got[0], xla[0])
        if not (OLD_XLA_DUS_NARROW_INDEX_BUG and info.max < 297):
            assert_same_bits(got[1], xla[1])


@settings(max_examples=20)
@given(data=st.data())
def test_dynamic_slice_and_update_shapes(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    sizes = tuple(data.draw(st.integers(0, n)) for n in shape)
    starts = [np.int32(data.draw(st.integers(-6, 6))) for _ in shape]
    x = distinct_values(shape)
    update = -distinct_values(sizes)
    same_as_xla(lambda x, u, *s: (lax.dynamic_slice_p.bind(x, *s, slice_sizes=sizes),
                                  lax.dynamic_update_slice_p.bind(x, u, *s)), x, update, *starts)


def test_dynamic_slice_wrapper_negative_indices():
    """lax.dynamic_slice adds the dimension to a negative start before the primitive clamps."""
    x = distinct_values((7, 5))
    same_as_xla(lambda x, i, j: (lax.dynamic_slice(x, (i, j), (3, 2)),
                                 lax.dynamic_update_slice(x, x[:2, :2] * 0, (i, j))),
                x, np.int32(-2), np.int32(-9))


# ---- gather ------------------------------------------------------------------------------------

@st.composite
def gather_cases(draw):
    """A random well-formed gather: operand/indices shapes, every dimension-number field."""
    rank = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank))
    dims = list(range(rank))
    batching = sorted(draw(st.permutations(dims))[:draw(st.integers(0, min(2, rank)))])
    for d in batching:
        shape[d] = max(shape[d], 1)
    rest = [d for d in dims if d not in batching]
    start_index_map = draw(st.permutations(rest))[:draw(st.integers(0, len(rest)))]
    collapsed = sorted(d for d in rest if draw(st.booleans()) and shape[d] >= 1)
    slice_sizes = [1 if (d in batching or d in collapsed) else draw(st.integers(0, shape[d]))
                   for d in dims]
    n_plain = draw(st.integers(0, 2))
    batch_rank = n_plain + len(batching)
    positions = draw(st.permutations(range(batch_rank)))[:len(batching)]
    batch_shape = [draw(st.integers(0, 3)) for _ in range(batch_rank)]
    for od, p in zip(batching, positions):
        batch_shape[p] = shape[od]
    n_window = rank - len(collapsed) - len(batching)
    out_rank = batch_rank + n_window
    offset_dims = sorted(draw(st.permutations(range(out_rank)))[:n_window])
    dnums = GD(offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
               start_index_map=tuple(start_index_map), operand_batching_dims=tuple(batching),
               start_indices_batching_dims=tuple(positions))
    bound = max(shape, default=0) + 2
    indices = np.array(draw(st.lists(st.integers(-2, bound),
                                     min_size=int(np.prod(batch_shape)) * len(start_index_map),
                                     max_size=int(np.prod(batch_shape)) * len(start_index_map))),
                       np.int32).reshape(tuple(batch_shape) + (len(start_index_map),))
    return tuple(shape), indices, dnums, tuple(slice_sizes)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=25)
@given(case=gather_cases(), use_fill=st.booleans())
def test_gather_dimension_numbers(mode, case, use_fill):
    shape, indices, dnums, slice_sizes = case
    fill = np.float32(-99.5) if (use_fill and mode == "fill") else None
    same_as_xla(lambda x, i: lax.gather(x, i, dnums, slice_sizes, mode=mode, fill_value=fill),
                distinct_values(shape), indices)


def take_rows(x, i, mode, fill=None):
    """x[i] along axis 0 for i of shape (n, 1): the gather of jnp.take."""
    dn = GD(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(x, i, dn, (1,) + x.shape[1:], mode=mode, fill_value=fill)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@settings(max_examples=2)
@given(data=st.data())
def test_gather_every_dtype_every_mode(dtype, data):
    x = data.draw(arrays(dtype, (5, 3)))
    i = np.array([[0], [4], [-1], [5], [2], [2], [-100], [99]], np.int32)

    def f(x, i):
        windows = GD(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0, 1))
        return ([take_rows(x, i, m) for m in MODES],
                lax.gather(x, np.array([[1, 1], [4, 2], [-1, 9]], np.int32), windows, (2, 2),
                           mode="fill"))
    same_as_xla(f, x, i)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", MODES)
def test_gather_index_dtypes_extremes(index_dtype, mode):
    """Clamping as integers of the index dtype; FILL_OR_DROP first converts indices to int32
    (JAX _gather_fill), so an int64 index of 2**32 + 1 wraps to 1 and is in bounds."""
    info = np.iinfo(index_dtype)
    vals = {int(info.min), int(info.max), 0, 1, 299, 300, 2 ** 32 + 1, -2 ** 40, 2 ** 63 + 5,
            2 ** 31, 2 ** 32 - 1}
    i = np.array(sorted(v for v in vals if info.min <= v <= info.max), index_dtype)[:, None]
    same_as_xla(lambda x, i: take_rows(x, i, mode), distinct_values((300, 2)), i)


def test_gather_fill_defaults_per_dtype():
    """Default fill: NaN for inexact, the minimum for signed, the maximum for unsigned, True for
    bool (jax.lax.gather)."""
    i = np.array([[7]], np.int32)
    with x64():
        for dtype, expected in [(np.float32, np.nan), (np.int16, -32768), (np.uint8, 255),
                                (np.bool_, True), (np.complex64, np.nan)]:
            out = reference(lambda x, i: take_rows(x, i, "fill"), np.zeros((3, 2), dtype), i)
            np.testing.assert_array_equal(out, np.full((1, 2), expected, dtype))


def test_gather_size_zero():
    same_as_xla(lambda x, i: take_rows(x, i, "fill"), distinct_values((4, 0)),
                np.array([[1], [9]], np.int32))
    same_as_xla(lambda x, i: take_rows(x, i, "clip"), distinct_values((4, 3)),
                np.zeros((0, 1), np.int32))


# ---- scatter -----------------------------------------------------------------------------------

@st.composite
def scatter_cases(draw):
    """A random well-formed scatter: shapes and every dimension-number field, indices with
    duplicates and out-of-bounds values."""
    rank = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank))
    dims = list(range(rank))
    batching = sorted(draw(st.permutations(dims))[:draw(st.integers(0, min(2, rank)))])
    rest = [d for d in dims if d not in batching]
    inserted = sorted(d for d in rest if draw(st.booleans()))
    for d in batching + inserted:
        shape[d] = max(shape[d], 1)
    to_operand = draw(st.permutations(rest))[:draw(st.integers(0, len(rest)))]
    window = [d for d in dims if d not in batching and d not in inserted]
    window_sizes = [draw(st.integers(0, shape[d])) for d in window]
    batch_rank = draw(st.integers(0, 2)) + len(batching)
    positions = draw(st.permutations(range(batch_rank)))[:len(batching)]
    batch_shape = [draw(st.integers(0, 4)) for _ in range(batch_rank)]
    for od, p in zip(batching, positions):
        batch_shape[p] = shape[od]
    update_rank = batch_rank + len(window)
    update_window_dims = sorted(draw(st.permutations(range(update_rank)))[:len(window)])
    updates_shape, b, w = [], iter(batch_shape), iter(window_sizes)
    for p in range(update_rank):
        updates_shape.append(next(w) if p in update_window_dims else next(b))
    dnums = SD(update_window_dims=tuple(update_window_dims), inserted_window_dims=tuple(inserted),
               scatter_dims_to_operand_dims=tuple(to_operand),
               operand_batching_dims=tuple(batching),
               scatter_indices_batching_dims=tuple(positions))
    n = int(np.prod(batch_shape)) * len(to_operand)
    indices = np.array(draw(st.lists(st.integers(-2, 3), min_size=n, max_size=n)),
                       np.int32).reshape(tuple(batch_shape) + (len(to_operand),))
    return tuple(shape), indices, tuple(updates_shape), dnums


@pytest.mark.parametrize("kind", list(SCATTERS))
@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=12)
@given(case=scatter_cases(), data=st.data())
def test_scatter_dimension_numbers(kind, mode, case, data):
    shape, indices, updates_shape, dnums = case
    # Known XLA:CPU divergence (spec/lax_indexing.py): with an empty index vector every window
    # lands on the same start, and XLA:CPU mis-applies such duplicates; tested by hand below.
    assume(dnums.scatter_dims_to_operand_dims or np.prod(indices.shape[:-1]) <= 1)
    x = data.draw(arrays(np.float32, shape, elements=nice_floats(np.float32), specials=False))
    u = data.draw(arrays(np.float32, updates_shape, elements=nice_floats(np.float32),
                         specials=False))
    same_as_xla(lambda x, i, u: SCATTERS[kind](x, i, u, dnums, mode=mode), x, indices, u)


def naive_scatter(kind, operand, indices, updates, dn, mode):
    """XLA's Scatter written out literally, one update element at a time (an oracle independent of
    the reference's vectorised index arithmetic)."""
    out = operand.copy()
    rank = operand.ndim
    window = [d for d in range(rank)
              if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    size = [1] * rank
    for d, ud in zip(window, dn.update_window_dims):
        size[d] = updates.shape[ud]
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
    combine = {"set": lambda a, b: b, "add": np.add, "sub": np.subtract, "mul": np.multiply,
               "min": min_, "max": max_}[kind]
    for b in np.ndindex(*indices.shape[:-1]):
        start = [0] * rank
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(indices[b + (k,)])
            if mode == "clip":
                start[d] = min(max(start[d], 0), operand.shape[d] - size[d])
            elif not 0 <= start[d] <= operand.shape[d] - size[d]:
                break  # the whole window is dropped
        else:
            for od, idim in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
                start[od] = b[idim]
            for w in np.ndindex(*[size[d] for d in window]):
                u_index = [0] * updates.ndim
                for p, v in zip(scatter_dims, b):
                    u_index[p] = v
                for p, v in zip(dn.update_window_dims, w):
                    u_index[p] = v
                target = list(start)
                for d, v in zip(window, w):
                    target[d] += v
                with np.errstate(all="ignore"):
                    out[tuple(target)] = combine(out[tuple(target)], updates[tuple(u_index)])
    return out


def min_(a, b):
    """XLA min: NaN propagates, -0.0 < +0.0."""
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    return a if (a < b or (a == b and np.signbit(a))) else b


def max_(a, b):
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    return a if (a > b or (a == b and not np.signbit(a))) else b


@pytest.mark.parametrize("kind", list(SCATTERS))
@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=10)
@given(case=scatter_cases(), data=st.data())
def test_scatter_against_literal_semantics(kind, mode, case, data):
    """Every case, empty index vectors and subnormals included, against ``naive_scatter``."""
    shape, indices, updates_shape, dnums = case
    x = data.draw(arrays(np.float32, shape))
    u = data.draw(arrays(np.float32, updates_shape))
    got = reference(lambda x, i, u: SCATTERS[kind](x, i, u, dnums, mode=mode), x, indices, u)
    assert_same_bits(got, naive_scatter(kind, x, indices, u, dnums, mode))


def _kinds_for(dtype):
    if D.is_bool(dtype):
        return ["set", "min", "max"]
    if D.is_complex(dtype):  # mul/min/max: test_scatter_complex_combiners
        return ["set", "add", "sub"]
    return list(SCATTERS)


ROWS = SD(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
DUP_OOB = np.array([[1], [3], [1], [-1], [5], [1], [0], [3]], np.int32)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@settings(max_examples=2)
@given(data=st.data())
def test_scatter_every_dtype_duplicates_and_out_of_bounds(dtype, data):
    """Every scatter kind the dtype allows, duplicate rows (applied in order) and out-of-bounds
    rows, in every mode. Arithmetic kinds use values without subnormals (XLA:CPU flushes them)."""
    arith_elems = nice_floats(dtype) if D.is_float(dtype) or D.is_complex(dtype) else None
    x = data.draw(arrays(dtype, (4, 2), elements=arith_elems, specials=arith_elems is None))
    u = data.draw(arrays(dtype, (8, 2), elements=arith_elems, specials=arith_elems is None))
    raw_x, raw_u = data.draw(arrays(dtype, (4, 2))), data.draw(arrays(dtype, (8, 2)))
    kinds = _kinds_for(dtype)

    def f(x, u, raw_x, raw_u):
        out = {f"{k}-{m}": SCATTERS[k](x, DUP_OOB, u, ROWS, mode=m) for k in kinds for m in MODES}
        out["set-raw"] = lax.scatter(raw_x, DUP_OOB, raw_u, ROWS, mode="clip")
        return out
    same_as_xla(f, x, u, raw_x, raw_u)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_scatter_complex_combiners(dtype):
    """Complex scatter-mul/-min/-max apply the equation's update computation (the elementwise mul,
    min, max rules) once per update, in order."""
    x = (np.arange(8).reshape(4, 2) + 1j * np.arange(8)[::-1].reshape(4, 2)).astype(dtype)
    u = (np.arange(16).reshape(8, 2) * 0.5 - 1j * (np.arange(16).reshape(8, 2) % 3)).astype(dtype)
    same_as_xla(lambda x, u: [SCATTERS[k](x, DUP_OOB, u, ROWS, mode=m)
                              for k in ("mul", "min", "max") for m in MODES], x, u)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", MODES)
def test_scatter_index_dtypes_extremes(index_dtype, mode):
    info = np.iinfo(index_dtype)
    vals = [v for v in (int(info.min), -1, 0, 299, 300, 2 ** 32 + 1, int(info.max), 5, 5)
            if info.min <= v <= info.max]
    i = np.array(vals, index_dtype)[:, None]
    u = distinct_values((len(vals), 2)) + 1000
    same_as_xla(lambda x, i, u: (lax.scatter(x, i, u, ROWS, mode=mode),
                                 lax.scatter_add(x, i, u, ROWS, mode=mode)),
                distinct_values((300, 2)), i, u)


def test_scatter_duplicates_known_answers():
    """Hand-computed: duplicates apply in order. Last write wins; float32 additions round one at a
    time ((((1e8 + 1) - 1e8) + 1) + 1) + 1 == 3, where an exact sum would give 4."""
    idx = np.zeros((6, 1), np.int32)
    dn = SD(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
    u = np.array([1e8, 1, -1e8, 1, 1, 1], np.float32)
    x = np.zeros(1, np.float32)
    assert reference(lambda x, i, u: lax.scatter_add(x, i, u, dn), x, idx, u)[0] == 3.0
    assert reference(lambda x, i, u: lax.scatter(x, i, u, dn), x, idx, u)[0] == 1.0
    assert reference(lambda x, i, u: lax.scatter(x, i, u, dn), x, idx[:3],
                     np.array([10, 20, 30], np.float32))[0] == 30.0
    same_as_xla(lambda x, i, u: (lax.scatter_add(x, i, u, dn), lax.scatter(x, i, u, dn)), x, idx, u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, D.bfloat16],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["add", "sub", "mul"])
@settings(max_examples=10)
@given(data=st.data())
def test_scatter_arithmetic_with_subnormals_sequential(dtype, kind, data):
    """Against an independent sequential loop (each step rounded to the dtype), with subnormals,
    NaN, inf: XLA:CPU flushes float32/bfloat16/float64 subnormals, so it is not the oracle here."""
    dtype = np.dtype(dtype)
    x = data.draw(arrays(dtype, (3,)))
    u = data.draw(arrays(dtype, (7,)))
    idx = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=7, max_size=7)), np.int32)
    dn = SD(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
    with x64():
        got = reference(lambda x, i, u: SCATTERS[kind](x, i, u, dn), x, idx[:, None], u)
    want = x.copy()
    op = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[kind]
    # float64 arithmetic is IEEE correctly rounded; narrower types: exact-enough in float64, then
    # one rounding (53 >= 2p + 2, so no double-rounding error).
    with np.errstate(all="ignore"):
        for t, v in zip(idx, u):
            if 0 <= t < 3:  # out-of-bounds updates are dropped
                want[t] = np.asarray(op(np.float64(want[t]), np.float64(v))).astype(dtype)
    assert_same_bits(got, want)


def test_scatter_empty_index_vector_known_answers():
    """scatter_dims_to_operand_dims=(): every update window starts at 0 (XLA operation semantics),
    so all updates below go to element 0, in order. XLA:CPU gets this degenerate form wrong (it
    spreads the updates over the operand, or drops some: see spec/lax_indexing.py)."""
    dn = SD(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=())
    x = np.array([1.0, 2.0], np.float32)
    i = np.zeros((2, 0), np.int32)
    u = np.array([5.0, 7.0], np.float32)
    run = lambda op: reference(lambda x, i, u: op(x, i, u, dn), x, i, u)
    np.testing.assert_array_equal(run(lax.scatter), [7.0, 2.0])
    np.testing.assert_array_equal(run(lax.scatter_add), [13.0, 2.0])
    np.testing.assert_array_equal(run(lax.scatter_mul), [35.0, 2.0])
    np.testing.assert_array_equal(run(lax.scatter_min), [1.0, 2.0])
    np.testing.assert_array_equal(run(lax.scatter_max), [7.0, 2.0])
    gd = GD(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=())
    same_as_xla(lambda x, i: lax.gather(x, i, gd, (1,)), x, i)  # gather agrees: [1, 1]


def test_scatter_apply_runs_update_computation_in_order():
    """x.at[i].apply(f) with duplicate i applies f once per occurrence (generic update_jaxpr)."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    i = np.array([0, 2, 0, 0], np.int32)
    same_as_xla(lambda x, i: x.at[i].apply(lambda v: v * 2 + 1), x, i)


# ---- through jax.numpy, grad and vmap ----------------------------------------------------------

@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds", "drop"])
def test_numpy_style_indexing(mode):
    x = distinct_values((5, 4))
    i = np.array([0, 4, -1, -5, 2, 2, 7, -9], np.int32)
    v = distinct_values((8, 4)) + 100

    def f(x, i, v):
        kw = {} if mode is None else {"mode": mode}
        at = x.at[i]
        return dict(get=at.get(**kw), set=at.set(v, **kw), add=at.add(v, **kw),
                    mul=at.multiply(v, **kw), min=at.min(v, **kw), max=at.max(v, **kw),
                    col=x.at[:, i[:3]].get(**kw), pair=x.at[i[:3], i[1:4]].add(1.0, **kw))
    same_as_xla(f, x, i, v, enable_x64=False)


def test_numpy_indexing_forms():
    x = distinct_values((4, 5, 3))
    i = np.array([[0, 3], [3, 1]], np.int32)
    along = np.array([0, 2, -1, 3, 1, -4, 2, 2], np.int32).reshape(4, 1, 2)

    def f(x, i, along):
        return (x[i], x[:, i], x[1, i, ::2], x[..., 1], x[i, 2:, i[0, :1]], x[-1], x[::-2, 1:4:2],
                jnp.take(x, i, axis=1), jnp.take(x, i, axis=2, mode="wrap"),
                jnp.take(x, i, axis=0, mode="fill", fill_value=-1),
                jnp.take_along_axis(x, along, axis=2),
                jnp.take_along_axis(x, along, axis=2, mode="clip"))
    same_as_xla(f, x, i, along, enable_x64=False)


def test_grad_of_indexing_is_a_scatter():
    """The transposes of gather / dynamic_slice are scatter-add / dynamic_update_slice."""
    x = distinct_values((6, 3))
    i = np.array([0, 5, 0, 2, 0], np.int32)

    def loss(x, i):
        return (jnp.sum(x[i] * jnp.arange(15.0).reshape(5, 3))
                + jnp.sum(lax.dynamic_slice(x, (i[3], 1), (2, 2)) ** 2)
                + jnp.sum(x.at[i].get(mode="fill", fill_value=0.0)))
    same_as_xla(jax.grad(loss), x, i, enable_x64=False)


def test_vmap_of_indexing_uses_batching_dims():
    x = distinct_values((3, 6, 2))
    i = np.array([[1, 5], [0, 0], [4, 9]], np.int32)

    def f(x, i):
        return (jax.vmap(lambda a, j: a[j])(x, i),
                jax.vmap(lambda a, j: a.at[j].add(1.0))(x, i),
                jax.vmap(lambda a, j: lax.dynamic_slice(a, (j[0], 0), (2, 2)))(x, i),
                jax.vmap(lambda a, j: lax.dynamic_update_slice(a, -a[:2], (j[1], 0)))(x, i))
    same_as_xla(f, x, i, enable_x64=False)


def test_gather_speed_is_vectorised():
    """A 10**6-element gather and scatter-add run as NumPy array operations, not per element."""
    import time
    x = distinct_values((1000, 1000))
    i = np.random.default_rng(0).integers(0, 1000, (1000, 1), dtype=np.int32)
    f = interp.interpret(lambda x, i: lax.scatter_add(x, i, take_rows(x, i, "clip"), ROWS))
    f(x, i)
    start = time.perf_counter()
    f(x, i)
    assert time.perf_counter() - start < 2.0  # a per-element Python loop would take minutes


# --- statements of spec/lax_indexing.py the rules enforce (by id) ---------------------------------

def test_gather_c4_fill_value_not_representable_raises():
    # JAX converts fill_value to the dtype when it lowers (0.5 -> 0 in int32); the spec refuses it.
    x, i = np.arange(6, dtype=np.int32), np.array([1, 9], np.int32)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="gather/c4: fill_value 0.5"):
        reference(lambda x, i: x.at[i].get(mode="fill", fill_value=0.5), x, i)


def test_gather_c6_one_hot_mode_raises():
    x, i = np.arange(6, dtype=np.float32), np.array([1, 2], np.int32)
    closed = jax.make_jaxpr(lambda x, i: x.at[i].get(mode="clip"))(x, i)
    one_hot = with_params(closed, "gather", mode=lax.GatherScatterMode.ONE_HOT)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="gather/c6: .*ONE_HOT"):
        interp.eval_jaxpr(one_hot, x, i)


def test_dynamic_slice_c4_dynamic_size_operands_raise():
    x, i = np.arange(6, dtype=np.float32), np.int32(1)
    closed = jax.make_jaxpr(lambda x, i: lax.dynamic_slice(x, (i,), (2,)))(x, i)
    eqn = closed.jaxpr.eqns[-1]
    assert eqn.primitive.name == "dynamic_slice"
    sized = closed.replace(jaxpr=closed.jaxpr.replace(
        eqns=[*closed.jaxpr.eqns[:-1], eqn.replace(invars=[*eqn.invars, eqn.invars[-1]])]))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="dynamic_slice/c4"):
        interp.eval_jaxpr(sized, x, i)
