"""State: refs (jax.new_ref), every indexer and ref transform, addupdate with duplicates, run_state.

Against XLA:CPU where JAX can discharge the program (indexers), against values computed by hand
with NumPy where it cannot (ref transpose/reshape views: JAX's discharge raises on them)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax._src.state import primitives as state_prims
from jax.experimental import pallas as pl

import interp
from conformance.values import assert_same_bits
from tests.support import reference, xla_cpu

new_ref = jax.new_ref
X = np.arange(24, dtype=np.float32).reshape(4, 6) - 5.5


def same(fn, *args):
    ref, xla = reference(fn, *args), xla_cpu(fn, *args)
    for r, x in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(xla)):
        assert isinstance(r, np.ndarray)
        assert_same_bits(r, x)
    return ref


INDEXERS = {
    "ellipsis": lambda r, i, a: r[...],
    "int": lambda r, i, a: r[2],
    "negative_int": lambda r, i, a: r[-1, -2],
    "dynamic_int": lambda r, i, a: r[i],
    "slice": lambda r, i, a: r[1:3, ::2],
    "ds_dynamic": lambda r, i, a: r[pl.ds(i, 2)],
    "ds_strided": lambda r, i, a: r[:, pl.ds(1, 2, stride=3)],
    "array": lambda r, i, a: r[a],
    "array_then_slice": lambda r, i, a: r[a, 1:4],
    "int_then_array": lambda r, i, a: r[1, a],
    "arrays_separated": lambda r, i, a: r.at[:, :][a, 2:4],
    "two_arrays": lambda r, i, a: r[a, a],
    "at_chain": lambda r, i, a: r.at[1:][:, a],
    "at_chain_int": lambda r, i, a: r.at[:, ::2][1],
}


@pytest.mark.parametrize("name", sorted(INDEXERS))
def test_get_every_indexer(name):
    idx = INDEXERS[name]
    f = lambda x, i, a: idx(new_ref(x), i, a)
    same(f, X, np.int32(1), np.array([0, 3, 3, -1], np.int32))


# Writes through the same indexers (array indexers with distinct entries: a set with duplicate
# indices has no single defined result).
SETTERS = {
    "ellipsis": lambda r, i, a, v: r.__setitem__(..., v),
    "int": lambda r, i, a, v: r.__setitem__(2, v),
    "negative_int": lambda r, i, a, v: r.__setitem__((-1, -2), v),
    "dynamic_int": lambda r, i, a, v: r.__setitem__(i, v),
    "slice": lambda r, i, a, v: r.__setitem__((slice(1, 3), slice(None, None, 2)), v),
    "ds_dynamic": lambda r, i, a, v: r.__setitem__(pl.ds(i, 2), v),
    "ds_strided": lambda r, i, a, v: r.__setitem__((slice(None), pl.ds(1, 2, stride=3)), v),
    "array": lambda r, i, a, v: r.__setitem__(a, v),
    "array_then_slice": lambda r, i, a, v: r.__setitem__((a, slice(1, 4)), v),
    "int_then_array": lambda r, i, a, v: r.__setitem__((1, a), v),
    "at_chain": lambda r, i, a, v: r.at[1:].__setitem__((slice(None), a), v),
    "at_chain_int": lambda r, i, a, v: r.at[:, ::2].__setitem__(1, v),
}


@pytest.mark.parametrize("name", sorted(SETTERS))
def test_swap_every_indexer(name):
    def f(x, i, a):
        r = new_ref(x)
        old = INDEXERS[name](r, i, a)
        SETTERS[name](r, i, a, old * 2 + 1)
        return old, r[...]
    same(f, X, np.int32(1), np.array([0, 3, -2], np.int32))


def _access_eqns(fn, *args):
    """Every get/swap/addupdate equation of ``fn``'s jaxpr (sub-jaxprs included)."""
    out = []

    def walk(jaxpr):
        for e in jaxpr.eqns:
            if e.primitive.name in ("get", "swap", "addupdate"):
                out.append(e)
            for v in e.params.values():
                for x in (v if isinstance(v, (tuple, list)) else (v,)):
                    j = getattr(x, "jaxpr", x)
                    if hasattr(j, "eqns"):
                        walk(j)
    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return out


@pytest.mark.parametrize("wrap", [True, False])
@pytest.mark.parametrize("name", sorted(INDEXERS))
def test_compiled_indexer_matches_generic_resolution(name, wrap):
    """An access's precompiled index (``prepare``, built once per equation) is the generic
    pytree resolution's, for every indexer it accepts, also for negative indices with and without
    wrapping (Pallas refs do not wrap); array indexers and view chains keep the generic path."""
    from interp.pallas.memory import KernelRef
    from interp import ref_indexing
    idx = INDEXERS[name]
    f = lambda x, i, a: idx(new_ref(x), i, a)
    args = (X, np.int32(-1), np.array([0, 3, 3, -1], np.int32))
    eqns = _access_eqns(f, *args)
    assert eqns
    for e in eqns:
        leaves = e.invars[1 + (e.primitive.name != "get"):]
        fast = ref_indexing.compile_indexer(e.params["tree"], leaves)
        has_array = any(getattr(v.aval, "shape", ()) != () for v in leaves)
        assert (fast is None) == (has_array or name.startswith("at_chain")), name
        if fast is None:
            continue
        # Dynamic leaves: the jaxpr's operands (i = -1, literal ints), as the plan passes them.
        for i in (np.int32(-1), np.int32(1)):
            flat = [np.asarray(v.val) if isinstance(v, jax.extend.core.Literal) else i
                    for v in leaves]
            buf = np.zeros(e.invars[0].aval.shape, np.float32)
            ref = interp.refs.Ref(buf) if wrap else KernelRef(buf, "block", None)
            assert ref.wraps_negative_indices == wrap
            want, _ = ref_indexing._resolve(None, ref, flat, e.params["tree"])
            got = fast(flat, ref.shape, wrap)
            assert got == want, (name, got, want)


def test_compiled_indexer_out_of_bounds_is_loud():
    # The precompiled path still goes through Ref.read's bounds check (static and dynamic).
    with pytest.raises(interp.OutOfBoundsError):
        reference(lambda x: new_ref(x)[4], X)
    with pytest.raises(interp.OutOfBoundsError):
        reference(lambda x, i: new_ref(x)[i, 1], X, np.int32(-5))
    with pytest.raises(interp.OutOfBoundsError):
        reference(lambda x, i: new_ref(x).__setitem__((slice(None), pl.ds(i, 2)), x[:, :2]), X,
                  np.int32(5))


def test_index_held_in_a_ref():
    def f(x, idx):
        r, ir = new_ref(x), new_ref(idx)
        return r[ir]
    out = same(f, X[0], np.array([4, 0, 2, -1], np.int32))
    assert_same_bits(out, X[0][[4, 0, 2, -1]])


def test_swap_with_unique_array_indices():
    def f(x, a, v):
        r = new_ref(x)
        old = r.swap(v, idx=(a, slice(1, 4))) if hasattr(r, "swap") else None
        r[1, a] = v[:, 0]
        return old, r[...]
    same(f, X, np.array([2, 0, -1], np.int32), np.full((3, 3), 7.0, np.float32))


def test_addupdate_accumulates_every_duplicate():
    idx = np.array([1, 3, 1, 1, 0, 3], np.int32)
    v = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], np.float32)

    def f(x, idx, v):
        r = new_ref(x)
        state_prims.ref_addupdate(r, (idx,), v)
        state_prims.ref_addupdate(r, (pl.ds(2, 3),), v[:3])
        return r[...]
    x = np.zeros(6, np.float32)
    expected = x.copy()
    for k, j in enumerate(idx):  # independent: one addition per update
        expected[j] += v[k]
    expected[2:5] += v[:3]
    out = same(f, x, idx, v)
    assert_same_bits(out, expected)


def test_addupdate_2d_array_and_slice_bfloat16():
    bf = np.dtype(ml_dtypes.bfloat16)
    x = np.zeros((3, 4), bf)
    v = np.arange(12, dtype=np.float32).reshape(3, 4).astype(bf)
    idx = np.array([2, 0, 2], np.int32)

    def f(x, idx, v):
        r = new_ref(x)
        state_prims.ref_addupdate(r, (idx, slice(None)), v)
        return r[...]
    expected = np.zeros((3, 4), np.float32)
    for k, j in enumerate(idx):
        expected[j] += v[k].astype(np.float32)
    out = same(f, x, idx, v)
    assert_same_bits(out, expected.astype(bf))


def test_ref_transforms_against_numpy():
    # Transposed/reshaped/bitcast views of a ref (JAX's discharge cannot evaluate them).
    def f(x):
        r = new_ref(x)
        t = r.T[1]
        rs = r.reshape(6, 4)[2]
        bc = r.bitcast(jnp.int32)[0]
        r.T[0, 1] = 100.0
        r.reshape(6, 4)[5, 3] = -100.0
        r.at[1:].reshape(9, 2)[0, 1] = 55.0
        return t, rs, bc, r[...]
    t, rs, bc, final = reference(f, X)
    assert_same_bits(t, X.T[1])
    assert_same_bits(rs, X.reshape(6, 4)[2])
    assert_same_bits(bc, X.view(np.int32)[0])
    expected = X.copy()
    expected.T[0, 1] = 100.0
    expected.reshape(6, 4)[5, 3] = -100.0
    expected[1:].reshape(9, 2)[0, 1] = 55.0
    assert_same_bits(final, expected)


def test_ref_index_out_of_bounds_is_loud():
    f = lambda x, i: new_ref(x)[i]
    with pytest.raises(interp.OutOfBoundsError, match=r"index 4, size 4 \(ref_index/out-of-bounds\)"):
        reference(f, X, np.int32(4))
    with pytest.raises(interp.OutOfBoundsError, match="ref_index/out-of-bounds"):
        reference(lambda x, i: new_ref(x)[pl.ds(i, 3)], X, np.int32(2))
    with pytest.raises(interp.OutOfBoundsError, match="ref_index/out-of-bounds"):
        reference(lambda x, a: new_ref(x)[a], X, np.array([0, 9], np.int32))


def test_ref_index_bitcast_width_a_narrowing_view_raises():
    def f(x):
        return new_ref(x).bitcast(jnp.int16)[...]   # JAX traces it; its discharge would refuse it
    with pytest.raises(interp.UnsupportedPrimitiveError,
                       match="ref_index/bitcast-width: ref bitcast float32 -> int16"):
        reference(f, X)


def test_addupdate_c2_through_a_bitcast_view_raises():
    # JAX refuses `+=` through a bitcast view when tracing: a traced store is re-bound as one.
    def f(x):
        r = new_ref(x)
        r.bitcast(jnp.int32)[0] = jnp.full((6,), 7, jnp.int32)
        return r[...]
    closed = jax.make_jaxpr(f)(X)
    eqns = list(closed.jaxpr.eqns)
    k = next(i for i, e in enumerate(eqns) if e.primitive.name == "swap")
    eqns[k] = eqns[k].replace(primitive=state_prims.addupdate_p, outvars=[])
    with pytest.raises(interp.UnsupportedPrimitiveError, match="addupdate/c2"):
        interp.eval_jaxpr(closed.replace(jaxpr=closed.jaxpr.replace(eqns=eqns)), X)


def test_refs_in_loops_and_calls():
    def f(x):
        r = new_ref(x)

        def body(i, c):
            r[i] = r[i] * 2 + c
            return c + 1
        lax.fori_loop(0, 4, body, jnp.float32(1))
        jax.jit(lambda ref: ref.__setitem__(0, ref[0] + ref[3]))(r)
        lax.cond(x[0, 0] < 0, lambda: r.__setitem__(1, r[2]), lambda: None)
        return r[...]
    same(f, X)


def test_freeze():
    if not hasattr(jax, "ref") or not hasattr(jax.ref, "freeze"):
        pytest.skip("jax.ref.freeze not in this JAX")

    def f(x):
        r = new_ref(x)
        r[1] = x[0]
        return jax.ref.freeze(r)
    out = same(f, X)
    assert_same_bits(out[1], X[0])


def test_run_state():
    from jax._src.state.discharge import run_state

    def body(refs):
        a_ref, b_ref = refs
        b_ref[...] = a_ref[...] * 2
        a_ref[1:3] = b_ref[0:2] + 1

    f = lambda a, b: run_state(body)((a, b))
    a, b = np.arange(5, dtype=np.int32), np.zeros(5, np.int32)
    out = same(f, a, b)
    assert_same_bits(out[0], np.array([0, 1, 3, 3, 4], np.int32))


def test_ref_value_is_copied():
    # new_ref owns a copy: writing it never changes the initial value.
    def f(x):
        r = new_ref(x)
        r[0] = x[1]
        return x, r[...]
    x0, _ = same(f, X)
    assert_same_bits(x0, X)


def test_coverage_lists_family():
    cov = interp.coverage()
    for name in ("get", "swap", "addupdate", "new_ref", "freeze", "run_state", "broadcast_to"):
        assert cov[name] == "supported", (name, cov.get(name))


def test_empty_ref_follows_uninitialized_option():
    from jax._src.core import empty_ref

    def f(x):
        r = empty_ref(jax.ShapeDtypeStruct((3,), jnp.float32))
        i = empty_ref(jax.ShapeDtypeStruct((2,), jnp.int32))
        r[0] = x
        return r[...], i[...]
    f_nan = interp.interpret(f)
    vals, ivals = f_nan(np.float32(2))
    assert vals[0] == 2 and np.isnan(vals[1:]).all()
    assert_same_bits(ivals, np.full(2, np.iinfo(np.int32).min, np.int32))
    vals, ivals = interp.interpret(f, uninitialized="zero")(np.float32(2))
    assert_same_bits(vals, np.array([2, 0, 0], np.float32))
    with pytest.raises(interp.errors.UninitializedReadError, match="never written"):
        interp.interpret(f, uninitialized="raise")(np.float32(2))


def test_create_linear_c1_is_uninitialized_memory():
    # No backend runs CreateBuffer (XLA:CPU: no implementation registered): the known answer is
    # the uninitialized option's fill, as for empty_ref.
    from jax._src import core
    ty = core.ShapedArray((2, 3), jnp.float32)
    f = lambda: state_prims.unpin(state_prims.create_linear(ty))
    assert jax.make_jaxpr(f)().eqns[0].primitive.name == "create_linear"
    assert np.isnan(interp.interpret(f)()).all() and interp.interpret(f)().shape == (2, 3)
    assert_same_bits(interp.interpret(f, uninitialized="zero")(), np.zeros((2, 3), np.float32))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="create_linear/c1: uninitialized='raise'"):
        interp.interpret(f, uninitialized="raise")()


def _hijax_cells():
    from jax._src import hijax
    if not hasattr(hijax, "new_box"):
        pytest.skip("JAX 0.11 removed the hijax Box and Log primitives (jax/_src/hijax.py)")
    return hijax


def test_hijax_box_holds_what_was_set_last():
    hijax = _hijax_cells()

    def f(x):
        box = hijax.new_box()
        hijax.box_set(box, {"a": x * 2, "b": [x]})
        got = hijax.box_get(box)
        hijax.box_set(box, got["a"] + got["b"][0])
        log = hijax.new_log()
        hijax.log_extend(log, {"seen": [got["a"]]})
        return hijax.box_get(box) - 1
    x = np.array([1.5, -2.0, 3.0], np.float32)
    names = {e.primitive.name for e in jax.make_jaxpr(f)(x).eqns}
    assert {"new_box", "box_set", "box_get", "new_log", "log_extend"} <= names
    assert_same_bits(interp.interpret(f)(x), xla_cpu(f, x))


def test_new_box_c1_box_passed_in_is_refused():
    hijax = _hijax_cells()

    def g(box, x):
        hijax.box_set(box, x)
        return x
    box = hijax.Box(np.float32(1))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="box_set.*new_box/c1.*passed into"):
        interp.interpret(g)(box, np.ones(3, np.float32))


def test_new_log_c1_log_passed_in_is_refused():
    hijax = _hijax_cells()

    def g(log, x):
        hijax.log_extend(log, {"seen": [x]})
        return x
    with pytest.raises(interp.UnsupportedPrimitiveError, match="log_extend.*new_log/c1.*passed into"):
        interp.interpret(g)(hijax.Log(), np.ones(3, np.float32))


def test_empty_ref_c1_raise_tracks_writes():
    """uninitialized='raise': reads (get, addupdate, freeze) of elements never written raise;
    once every element read was written the program runs as under 'nan'."""
    from jax._src import core as jcore
    from jax._src.core import empty_ref

    def written(x):
        r = empty_ref(jax.ShapeDtypeStruct((2, 3), jnp.float32))
        r[0] = jnp.full(3, x)
        r[1, 1:] = jnp.ones(2)
        r[1, 0] = x + 1
        r[1, 2] += x
        return r[...], r[1, ::2]
    f = interp.interpret(written, uninitialized="raise")
    assert_same_bits(f(np.float32(2))[0], np.array([[2, 2, 2], [3, 1, 3]], np.float32))
    assert_same_bits(f(np.float32(2))[1], np.array([3, 3], np.float32))

    def partly(op):
        def fn(x):
            r = empty_ref(jax.ShapeDtypeStruct((4,), jnp.int32))
            r[1:3] = jnp.full(2, x)
            return op(r)
        return fn
    ok = interp.interpret(partly(lambda r: r[1:3]), uninitialized="raise")(np.int32(5))
    assert_same_bits(ok, np.array([5, 5], np.int32))
    reads = [lambda r: r[0:2], lambda r: r[3], lambda r: r[...]]
    if hasattr(jcore, "freeze"):
        reads.append(lambda r: jcore.freeze(r))

    def add(r):
        r[2:] += 1
        return r[1]
    for op in reads + [add]:
        with pytest.raises(interp.errors.UninitializedReadError, match=r"never written.*empty_ref/c1"):
            interp.interpret(partly(op), uninitialized="raise")(np.int32(5))


def _scatter_add_program(x, idx, v):
    r = new_ref(x)
    state_prims.ref_addupdate(r, (idx,), v)
    return r[...]


@settings(max_examples=15)
@given(idx=st.lists(st.integers(-6, 5), min_size=8, max_size=8),
       v=st.lists(st.integers(-1000, 1000), min_size=8, max_size=8))
def test_addupdate_duplicates_hypothesis(idx, v):
    # int32 values: every order of additions gives the same sum, so XLA:CPU must agree bitwise.
    x = np.arange(6, dtype=np.int32) * 7
    idx, v = np.array(idx, np.int32), np.array(v, np.int32)
    expected = x.copy()
    for j, u in zip(idx, v):
        expected[j] += u  # negative indices count from the end
    out = same(_scatter_add_program, x, idx, v)
    assert_same_bits(out, expected)


def test_jax_ref_argument_is_mutated_like_jit():
    def f(r, v):
        r[1:3] = r[0:2] * 2 + v
        return r[0]

    mine, theirs = new_ref(X[0].copy()), new_ref(X[0].copy())
    out = reference(f, mine, np.float32(1))
    xla = jax.jit(f)(theirs, np.float32(1))
    assert_same_bits(out, np.asarray(xla))
    assert_same_bits(np.asarray(mine[...]), np.asarray(theirs[...]))
