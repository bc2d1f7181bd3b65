"""lax_structure rules against XLA:CPU, bitwise (data movement is exact for every dtype).

XLA:CPU does not preserve NaN payloads when it moves some narrow floats (bfloat16, float8_e5m2,
e4m3, e3m4: it quiets them, see spec/lax_structure.py), so comparisons with XLA:CPU ignore NaN
payloads; ``test_nan_payloads_are_preserved`` checks the reference keeps every bit.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import interp
from conformance.values import arrays, assert_same_bits
from interp import dtypes as D
from interp.rules import lax_structure
from tests.support import assert_tree_same_bits, reference, with_params, x64, xla_cpu

ALL_DTYPES = [pytest.param(d, id=d.name) for d in D.ALL]
# The rules of this family (checked against its stated semantics and coverage below).
MINE = {"broadcast_in_dim", "reshape", "squeeze", "transpose", "rev", "concatenate", "pad", "iota",
        "split", "copy", "stage", "tile", "stack", "unstack", "empty", "empty2", "tie"}


def all_structure_ops(x):
    """Every structural primitive once, on a (2, 3, 4) array."""
    pad_value = x[0, 0, 0]
    return dict(
        broadcast=lax.broadcast_in_dim(x[:, :1], (5, 2, 3, 4), (1, 2, 3)),
        reshape=lax.reshape(x, (4, 6)),
        reshape_dims=lax.reshape(x, (6, 4), dimensions=(2, 0, 1)),
        squeeze=lax.squeeze(x[:, :1], (1,)),
        expand=lax.expand_dims(x, (0, 3)),
        transpose=lax.transpose(x, (2, 0, 1)),
        rev=lax.rev(x, (0, 2)),
        concat=lax.concatenate([x, x[:, ::-1], x[:, :0]], 1),
        pad=lax.pad(x, pad_value, [(1, -1, 1), (-2, 3, 0), (0, 0, 2)]),
        split=lax.split(x, (1, 0, 3), axis=2),
        copy=lax.copy_p.bind(x),
        tile=jnp.tile(x, (2, 1, 3)),
        stack=jnp.stack([x, x[::-1]], axis=2),
        unstack=lax.unstack_p.bind(x, axis=1) if hasattr(lax, "unstack_p") else
        jax._src.lax.lax.unstack_p.bind(x, axis=1),
    )


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@settings(max_examples=3)
@given(data=st.data())
def test_every_structure_op_every_dtype(dtype, data):
    x = data.draw(arrays(dtype, (2, 3, 4)))
    with x64():
        assert_tree_same_bits(reference(all_structure_ops, x), xla_cpu(all_structure_ops, x))


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if D.is_float(d.values[0])])
def test_nan_payloads_are_preserved(dtype):
    """Every NaN bit pattern of the dtype survives each structural op (checked against the same
    movement done on the raw storage integers, not against the reference itself)."""
    storage = D.storage_uint(dtype)
    n = min(D.bit_width(dtype), 16)
    pool = np.arange(2 ** n, dtype=np.uint64).astype(storage)
    if D.bit_width(dtype) > 16:  # float32/64: NaNs with assorted payloads in the top bits
        pool = (pool << np.array(D.bit_width(dtype) - 16, storage)) | np.array(1, storage)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(pool.view(dtype).astype(np.float64))
    raw = np.resize(pool[nan], 24).reshape(2, 3, 4)
    if raw.size == 0:
        pytest.skip("dtype has no NaN")
    with x64():
        out = reference(all_structure_ops, raw.view(dtype))
    raw_moved = all_structure_ops_numpy(raw)
    for key, expected in raw_moved.items():
        for a, e in zip(jax.tree_util.tree_leaves(out[key]), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_array_equal(np.asarray(a).view(storage), e, err_msg=key)


def all_structure_ops_numpy(r):
    """The movements of ``all_structure_ops`` written with NumPy on raw storage integers."""
    pad = np.full((2 + 1 + 1 - 1, 3 + 1, 4 + 3 * 2), r[0, 0, 0], r.dtype)
    pad_full = np.full((1 + 3, 3 + 3, 4 + 6), r[0, 0, 0], r.dtype)
    pad_full[1::2, :3, ::3] = r
    pad = pad_full[:3, 2:]
    return dict(broadcast=np.broadcast_to(r[None, :, :1], (5, 2, 3, 4)),
                reshape=r.reshape(4, 6), reshape_dims=r.transpose(2, 0, 1).reshape(6, 4),
                squeeze=r[:, 0], expand=r[None, :, :, None], transpose=r.transpose(2, 0, 1),
                rev=r[::-1, :, ::-1], concat=np.concatenate([r, r[:, ::-1]], 1), pad=pad,
                split=[r[..., :1], r[..., 1:1], r[..., 1:]], copy=r, tile=np.tile(r, (2, 1, 3)),
                stack=np.stack([r, r[::-1]], 2), unstack=[r[:, i] for i in range(3)])


@st.composite
def shaped(draw, max_rank=4):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=max_rank)))
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.5 - 3


@settings(max_examples=20)
@given(x=shaped(), data=st.data())
def test_transpose_rev_reshape_shapes(x, data):
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, max(x.ndim - 1, 0)), max_size=x.ndim))))
    dims = tuple(d for d in dims if d < x.ndim)
    flat = (x.size,)

    def f(x):
        return (lax.transpose(x, perm), lax.rev(x, dims), lax.reshape(x, flat, dimensions=perm),
                lax.broadcast_in_dim(x, (2,) + x.shape, tuple(range(1, x.ndim + 1))))
    assert_tree_same_bits(reference(f, x), xla_cpu(f, x))


@settings(max_examples=25)
@given(x=shaped(), data=st.data())
def test_pad_negative_and_interior(x, data):
    config = []
    for n in x.shape:
        interior = data.draw(st.integers(0, 2))
        body = n + max(n - 1, 0) * interior
        lo = data.draw(st.integers(-body, 3))
        hi = data.draw(st.integers(-(body + lo) if body + lo > 0 else 0, 3))
        config.append((lo, hi, interior))
    config = tuple(config)

    def f(x):
        return lax.pad(x, np.float32(-0.0), config)
    assert_tree_same_bits(reference(f, x), xla_cpu(f, x))


@settings(max_examples=15)
@given(x=shaped(max_rank=3).filter(lambda a: a.ndim > 0), data=st.data())
def test_concatenate_split_stack(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    n = x.shape[axis]
    cut = data.draw(st.integers(0, n))

    def f(x):
        a, b = lax.split(x, (cut, n - cut), axis=axis)
        return (lax.concatenate([b, a, b], axis), jnp.stack([x, x], axis=axis),
                jnp.tile(x, (2,) * x.ndim))
    assert_tree_same_bits(reference(f, x), xla_cpu(f, x))


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if not D.is_bool(d.values[0])])
def test_iota_every_dtype_past_its_range(dtype):
    """iota converts 0, 1, 2... like an integer conversion: ints wrap, floats round to nearest even
    and overflow per type (e4m3fn to NaN, e2m1fn saturates...)."""
    n = 600 if D.bit_width(dtype) <= 16 else 70

    def f():
        return (lax.iota(dtype, n), lax.broadcasted_iota(dtype, (3, 5, 2), 1),
                lax.broadcasted_iota(dtype, (0, 4), 1), lax.broadcasted_iota(dtype, (2, 3), 0))
    with x64():
        assert_tree_same_bits(reference(f), xla_cpu(f))


def test_iota_large_float32_rounds():
    """Past 2**24 float32 iota values round to nearest even."""
    with x64():
        f = lambda: lax.dynamic_slice(lax.iota(jnp.float32, 2 ** 24 + 8), (2 ** 24 - 8,), (16,))
        assert_tree_same_bits(reference(f), xla_cpu(f))


def test_empty_follows_the_uninitialized_option():
    def f():
        return (lax.empty((2, 3), jnp.float32), lax.empty((2,), jnp.int8),
                lax.empty((2,), jnp.uint16), lax.empty((1,), jnp.bool_))
    nan = interp.interpret(f, uninitialized="nan")()
    assert np.isnan(nan[0]).all()
    assert (nan[1] == -128).all() and (nan[2] == 65535).all() and nan[3].all()  # bool poison: True
    zero = interp.interpret(f, uninitialized="zero")()
    for z in zero:
        assert not np.asarray(z).astype(bool).any()
    # XLA:CPU lowers lax.empty to zeros: the "zero" option reproduces it exactly.
    assert_tree_same_bits(zero, xla_cpu(f))


def test_empty2_and_tie():
    from jax._src import core as jax_core
    from jax._src.lax import lax as lax_internal
    space = jax_core.ShapedArray((), jnp.float32).memory_space
    closed = jax.make_jaxpr(lambda x, y: (lax_internal.empty2(jnp.float32, memory_space=space),
                                          lax_internal.tie_p.bind(x, y)))(1.0, 2.0)
    e2, tied = interp.eval_jaxpr(closed, np.float32(1), np.float32(2))
    assert np.isnan(e2) and e2.shape == () and tied == 2.0
    e2_zero, _ = interp.eval_jaxpr(closed, np.float32(1), np.float32(2), uninitialized="zero")
    assert e2_zero == 0 and not np.signbit(e2_zero)


def _raises_unwritten(f, *args, match="never written"):
    with pytest.raises(interp.errors.UninitializedReadError, match=match):
        interp.interpret(f, uninitialized="raise")(*args)


def test_empty_c3_under_raise_tracks_writes():
    """uninitialized='raise': a lax.empty value carries which elements were written through the
    primitives that only move data (dynamic_update_slice, scatter, slices, pad, concatenate,
    select, loops and calls); a read of a never-written element raises, at the reading equation or
    when the program returns it; reads of written elements give XLA:CPU's bits."""
    x = np.arange(4, dtype=np.float32) - 1.5
    e = lambda: lax.empty((4,), jnp.float32)  # noqa: E731  (jnp.empty is zeros on JAX 0.10.2)

    def fill(n):
        return lambda x: lax.fori_loop(0, n, lambda i, a: a.at[i].set(x[i] * 2), e())

    def same_as_xla(f):
        assert_tree_same_bits(interp.interpret(f, uninitialized="raise")(x), xla_cpu(f, x))

    same_as_xla(lambda x: lax.dynamic_update_slice(e(), x, (0,)))            # fully overwritten
    same_as_xla(fill(4))                                                      # while carry + scatter
    same_as_xla(lambda x: fill(3)(x)[:3])                                     # only written elements
    same_as_xla(lambda x: jnp.concatenate([e()[:2], x])[2:] + jnp.pad(e()[:1], (1, 4))[2:])
    same_as_xla(lambda x: lax.select(x > -9, x, e()))
    same_as_xla(lambda x: jax.jit(lambda a: a.at[1:].set(x[1:]))(e())[1:])   # through a call
    _raises_unwritten(lambda x: e() + x, x, match="'add' reads")
    _raises_unwritten(lambda x: fill(3)(x).sum(), x, match=r"'reduce_sum' reads .*\(1 of 4, first at index \(3,\)\)")
    _raises_unwritten(fill(3), x, match="program output")                    # returned unwritten
    _raises_unwritten(lambda x: jnp.where(x > 0, x, e()), x)
    _raises_unwritten(lambda x: x[lax.convert_element_type(e()[0], jnp.int32)], x)   # as an index


def test_empty_under_raise_in_a_ref():
    """new_ref(lax.empty(...)) (Pallas mpmd's output buffers) is a tracked ref: reading an element
    written through the ref is fine, reading one never written raises."""
    def prog(read):
        def f(x):
            r = jax.new_ref(lax.empty((4,), jnp.float32))
            r[1] = x[0]
            return r[read]
        return f
    x = np.arange(4, dtype=np.float32) + 1
    assert interp.interpret(prog(1), uninitialized="raise")(x) == 1
    _raises_unwritten(prog(2), x)


def test_empty_tracking_only_under_raise():
    """Plans under the other options run the rules themselves (no wrapper on the normal path)."""
    from interp.evaluator import get_plan
    from interp.options import Options
    jaxpr = jax.make_jaxpr(lambda x: x + lax.empty((3,), jnp.float32))(np.ones(3, np.float32)).jaxpr
    plain = [step[0] for step in get_plan(jaxpr, Options()).steps]
    wrapped = [step[0] for step in get_plan(jaxpr, Options(uninitialized="raise")).steps]
    assert all(r.__name__ != "step" for r in plain) and all(r.__name__ == "step" for r in wrapped)
    # buffer reuse (the rules' inplace hook) is kept under "raise"
    assert [hasattr(r, "inplace") for r in plain] == [hasattr(r, "inplace") for r in wrapped]
    assert np.isnan(interp.interpret(lambda: lax.empty((2,), jnp.float32))()).all()


def test_coverage_is_honest():
    cov = interp.coverage()
    for name in MINE:
        assert cov[name] == "supported", name


def test_results_are_writable_arrays():
    """A later state rule may write into a result: none may be a read-only broadcast view."""
    for v in jax.tree_util.tree_leaves(reference(all_structure_ops, np.zeros((2, 3, 4), np.float32))):
        assert v.flags.writeable


def test_structure_grad_and_vmap():
    """Transposes of structural ops are structural ops (pad <-> slice, broadcast <-> reduce_sum)."""
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)

    def loss(x):
        y = lax.pad(x, np.float32(0), [(1, -1, 1), (0, 2, 0), (-1, 0, 0)])
        return jnp.sum(jnp.tile(lax.rev(y, (1,)), (1, 2, 1)) * jnp.arange(y.size * 2).reshape(
            (y.shape[0], y.shape[1] * 2, y.shape[2])).astype(jnp.float32))
    assert_tree_same_bits(reference(jax.grad(loss), x), xla_cpu(jax.grad(loss), x))
    g = jax.vmap(lambda v: (lax.transpose(v, (1, 0)), jnp.stack([v, v]), lax.pad(v, 1.0, [(1, 1, 1), (0, -1, 0)])))
    assert_tree_same_bits(reference(g, x), xla_cpu(g, x))


def test_the_family_registers_its_primitives_and_none_it_says_are_not_implemented():
    from interp.registry import RULES
    from spec.lax_structure import NOT_IMPLEMENTED
    mine = {n for n, r in RULES.items() if r.__module__ == "interp.rules.lax_structure"}
    assert mine == MINE
    assert not mine & set(NOT_IMPLEMENTED)


def test_stage_is_the_identity_as_jax_evaluates_it():
    # Tracing records no stage equation (core.py / partial_eval.py stage_value), so the jaxpr is
    # built by hand: neg's equation re-bound to stage_p, then evaluated by JAX's own evaluator
    # (core.eval_jaxpr binds stage_p: EvalTrace.stage_value) and by the reference.
    from jax._src import core
    from jax._src.lax import lax as lax_internal
    x = np.array([1.5, -0.0, np.nan, np.inf], np.float32)
    closed = jax.make_jaxpr(lambda a: lax.neg(a) * 2)(x)
    staged = closed.jaxpr.replace(eqns=[closed.jaxpr.eqns[0].replace(
        primitive=lax_internal.stage_p, params={})] + closed.jaxpr.eqns[1:])
    assert [e.primitive.name for e in staged.eqns] == ["stage", "mul"]
    expect = core.eval_jaxpr(staged, closed.consts, x)
    got = interp.eval_jaxpr(closed.replace(jaxpr=staged), x)
    assert_tree_same_bits(got, [np.asarray(e) for e in expect])


# --- statements of spec/lax_structure.py the rules enforce (by id) -------------------------------
# JAX's tracing refuses these programs, so each test edits a traced equation to reach the rule.

def test_structure_no_dynamic_shapes_raises():
    x = np.ones(3, np.float32)
    closed = jax.make_jaxpr(lambda v: lax.broadcast_in_dim(v, (2, 3), (1,)))(x)
    eqn = closed.jaxpr.eqns[0]
    dynamic = closed.replace(jaxpr=closed.jaxpr.replace(
        eqns=[eqn.replace(invars=[*eqn.invars, eqn.invars[0]])]))   # an extra shape operand
    with pytest.raises(interp.UnsupportedPrimitiveError, match="structure/no-dynamic-shapes"):
        interp.eval_jaxpr(dynamic, x)


def test_pad_c3_negative_interior_padding_raises():
    x = np.arange(3, dtype=np.float32)
    closed = jax.make_jaxpr(lambda v: lax.pad(v, np.float32(0), [(0, 0, 1)]))(x)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="pad/c3: negative interior padding"):
        interp.eval_jaxpr(with_params(closed, "pad", padding_config=((0, 0, -1),)), x)


def test_iota_c4_bool_iota_raises():
    closed = jax.make_jaxpr(lambda: lax.iota(np.int32, 3))()
    with pytest.raises(interp.UnsupportedPrimitiveError, match="iota/c4: iota of dtype bool"):
        interp.eval_jaxpr(with_params(closed, "iota", dtype=np.dtype(bool)))


def test_empty_c4_extended_dtype_raises():
    closed = jax.make_jaxpr(lambda: lax.empty((2,), jnp.float32))()
    key_dtype = jax.random.key(0).dtype
    with pytest.raises(interp.UnsupportedPrimitiveError, match="empty/c4"):
        interp.eval_jaxpr(with_params(closed, "empty", dtype=key_dtype))
