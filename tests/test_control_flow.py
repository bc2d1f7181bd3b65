"""Control flow and calls: the reference against XLA:CPU, bitwise (the programs are built from
integer ops or float ops that are exact on their inputs, so XLA's fusion/FMA cannot change them)."""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import io_callback

import interp
from conformance.values import arrays, assert_same_bits
from interp.rules import control_flow as cf
from tests.support import reference, xla_cpu

ints = np.array([3, -7, 0, 12, 5, -1], np.int32)
# Small integer-valued floats: sums and products of a few of them are exact in float32.
floats = np.array([1.0, -2.0, 0.5, 3.0, -0.25, 4.0], np.float32)


def same(fn, *args):
    ref, xla = reference(fn, *args), xla_cpu(fn, *args)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    xla_leaves, xla_tree = jax.tree_util.tree_flatten(xla)
    assert ref_tree == xla_tree
    for r, x in zip(ref_leaves, xla_leaves):
        assert isinstance(r, np.ndarray), type(r)
        assert_same_bits(r, x)
    return ref


# --- cond ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("pred", [True, False])
def test_cond_bool(pred):
    f = lambda p, x: lax.cond(p, lambda x: x * 3 + 1, lambda x: x - 2, x)
    same(f, pred, ints)


@pytest.mark.parametrize("i", [-3, 0, 1, 2, 7])
def test_switch_clamps(i):
    branches = [lambda x: x + 1, lambda x: x * x, lambda x: -x]
    same(lambda i, x: lax.switch(i, branches, x), i, ints)



@pytest.mark.parametrize("i", [-1, 3, 100, np.iinfo(np.int32).min])
def test_cond_index_out_of_range_runs_last_branch(i):
    # XLA Conditional: an out-of-range index executes the last branch (lax.switch clamps first,
    # so the raw primitive is bound here).
    from jax._src.lax.control_flow.conditionals import cond_p

    def f(i, x):
        branches = tuple(jax.make_jaxpr(b)(x) for b in
                         (lambda x: x + 1, lambda x: x * 2, lambda x: x - 5))
        return cond_p.bind(i, x, branches=branches)[0]
    out = same(f, np.int32(i), ints)
    np.testing.assert_array_equal(out, ints - 5)


def test_cond_multiple_operands_and_outputs():
    def f(p, x, y):
        return lax.cond(p, lambda a, b: (a + b, a * 2.0, b), lambda a, b: (a - b, b, a), x, y)
    same(f, True, floats, floats[::-1].copy())
    same(f, False, floats, floats[::-1].copy())


def test_platform_dependent_picks_cpu_branch():
    f = lambda x: lax.platform_dependent(x, cpu=lambda x: x + 1, default=lambda x: x * 10)
    out = same(f, ints)
    np.testing.assert_array_equal(out, ints + 1)
    g = lambda x: lax.platform_dependent(x, tpu=lambda x: x + 1, default=lambda x: x * 10)
    np.testing.assert_array_equal(same(g, ints), ints * 10)


# --- loops --------------------------------------------------------------------------------------

def test_fori_loop_int():
    same(lambda x: lax.fori_loop(0, 17, lambda i, c: c * 3 + i, x), ints)


def test_while_tuple_carry_and_consts():
    def f(x, limit):
        def cond(c):
            return c[0] < limit
        def body(c):
            i, acc, y = c
            return i + 1, acc + y * i, y ^ i
        return lax.while_loop(cond, body, (0, jnp.zeros_like(x), x))
    same(f, ints, np.int32(9))


def test_while_zero_iterations():
    same(lambda x: lax.while_loop(lambda c: c > 100, lambda c: c + 1, x), np.int32(3))


def test_while_batched_predicate():
    # vmap of a while loop with a per-row trip count: rows that are done keep their value.
    f = jax.vmap(lambda x: lax.while_loop(lambda c: c < 50, lambda c: c * 3 + 1, x))
    out = same(f, np.array([1, 60, 7, -2, 49], np.int32))
    assert out[1] == 60


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 2, 3, True])
def test_scan(reverse, unroll):
    def f(c0, xs, w):
        def body(c, x):
            a, b = c
            return (a + x * w, b ^ a), (a * 2, x - b)
        return lax.scan(body, c0, xs, reverse=reverse, unroll=unroll)
    xs = np.arange(20, dtype=np.int32).reshape(5, 4) - 7
    same(f, (np.zeros(4, np.int32), np.ones(4, np.int32)), xs, np.int32(3))


def test_scan_length_only_and_empty():
    same(lambda c: lax.scan(lambda c, _: (c + 1, c * c), c, None, length=6), np.int32(2))
    same(lambda c, xs: lax.scan(lambda c, x: (c + x, c), c, xs), np.int32(2), np.zeros((0,), np.int32))


def test_scan_layout_of_installed_jax():
    # One layout per JAX version: num_consts/num_carry (<= 0.10) or ft_in/ft_out flat trees.
    w = jnp.arange(6, dtype=jnp.int32)  # closed over: a scan const
    jaxpr = jax.make_jaxpr(lambda c, xs: lax.scan(lambda c, x: (c + x * w, c), c, xs))(
        np.zeros(6, np.int32), np.ones((3, 6), np.int32))
    eqn = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan")
    assert cf.scan_layout(eqn.params) == (1, 1)
    assert ("num_consts" in eqn.params) != ("ft_in" in eqn.params)


def test_nested_control_flow():
    def f(x, p):
        def outer(i, c):
            inner = lax.scan(lambda a, y: (a + y * i, a), c, x)[0]
            return lax.cond(p, lambda v: v + inner, lambda v: v - inner, c)
        return lax.fori_loop(0, 4, outer, jnp.int32(1))
    same(f, ints, True)
    same(f, ints, False)


# --- transformations of control flow (float programs exact on these inputs) -------------------

def _poly_scan(x):
    return lax.scan(lambda c, a: (c * a + a, c), 1.0, x)[0]


def _poly_fori(x):
    return lax.fori_loop(0, 3, lambda i, c: c * x + 1.0, x)


def _poly_cond(x):
    return lax.cond(x[0] > 0, lambda v: v * v * 2.0, lambda v: v * 3.0 - v, x)


@pytest.mark.parametrize("fn", [_poly_scan, _poly_fori, _poly_cond], ids=["scan", "fori", "cond"])
def test_grad_jvp_vmap(fn):
    x = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
    total = lambda v: jnp.sum(fn(v))
    same(jax.grad(total), x)
    same(lambda v, t: jax.jvp(fn, (v,), (t,)), x, np.ones_like(x))
    same(jax.vmap(fn), np.stack([x, -x, x * 2]))


# --- calls --------------------------------------------------------------------------------------

def test_jit_closed_call_remat():
    inner = jax.jit(lambda a, b: (a * b, a - b))
    f = lambda x: jax.checkpoint(lambda y: inner(y, y + 1)[0] + inner(y, 3)[1])(x)
    same(f, ints)
    same(jax.grad(lambda x: jnp.sum(jax.checkpoint(lambda y: y * y * 3.0)(x))), floats)


def test_core_call_is_its_callee():
    # JAX 0.10's core.call_p ("call"): bound with the callee as a subfun; jax.jit lowers it.
    from jax._src import api_util, core
    from jax._src import linear_util as lu
    if core.call_p.name != "call":
        pytest.skip("JAX 0.11 on: core.call_p is eval_jaxpr (core.py call_p = eval_jaxpr_p), "
                    "tested as eval_jaxpr")
    body = lambda a: [a * 3 - 1]

    def f(a):
        callee = lu.wrap_init(body, debug_info=api_util.debug_info("call", body, (a,), {}))
        return core.call_p.bind(a, subfuns=(callee,))[0] + 2
    assert "call" in {e.primitive.name for e in jax.make_jaxpr(f)(ints).eqns}
    same(f, ints)


def test_program_order_is_its_callee():
    overlap = pytest.importorskip("jax.experimental.overlap",
                                  reason="jax.experimental.overlap.program_order is new in JAX 0.11")
    pair = lambda a, b: (a * b, a - b)
    for ordered in (overlap.program_order(pair, enforce=False),
                    overlap.program_order(pair, enforce=False, exclude_argnames="b")):
        f = lambda x: ordered(x, x + 1)
        assert "program_order" in {e.primitive.name for e in jax.make_jaxpr(f)(ints).eqns}
        same(f, ints)


def test_jit_constants_are_numpy():
    c = jnp.arange(6, dtype=jnp.int32)  # a jax.Array closed over: a jaxpr constant
    same(jax.jit(lambda x: x * c + c), ints)


def test_custom_jvp_and_vjp():
    @jax.custom_jvp
    def f(x):
        return x * x

    f.defjvp(lambda p, t: (f(p[0]), t[0] * 10.0))

    @jax.custom_vjp
    def g(x):
        return x * 3.0

    g.defvjp(lambda x: (x * 3.0, x), lambda r, ct: (ct * r,))
    same(f, floats)
    same(g, floats)
    same(jax.grad(lambda x: jnp.sum(f(x) + g(x))), floats)


def test_optimization_barrier_and_name():
    from jax.ad_checkpoint import checkpoint_name
    same(lambda x, y: lax.optimization_barrier((x + 1, y)), ints, floats)
    same(lambda x: checkpoint_name(x * 2, "doubled"), ints)


def test_custom_linear_solve():
    def f(b):
        matvec = lambda v: v * 2.0
        return lax.custom_linear_solve(matvec, b, lambda mv, v: v * 0.5)
    same(f, floats)


def test_searchsorted():
    # JAX 0.12: a hijax primitive (call_hi_primitive[SearchSorted]); 0.10: plain lax ops.
    sorted_arr = np.array([-3, 0, 0, 2, 9, 9, 11], np.int32)
    for side in ("left", "right"):
        same(lambda a, q: jnp.searchsorted(a, q, side=side), sorted_arr,
             np.array([-5, 0, 1, 9, 12], np.int32))


def test_composite():
    if not hasattr(lax, "composite"):
        pytest.skip("lax.composite not in this JAX")
    f = lax.composite(lambda x, y: x * y + x, name="my.fma_like")
    same(f, ints, ints[::-1].copy())


# --- callbacks ----------------------------------------------------------------------------------

def test_pure_callback_gets_numpy_and_values():
    seen = []

    def host(x, y):
        seen.append((type(x), x.copy(), y.copy()))
        return (x * 2).astype(np.int32), np.float32(y.sum())

    def f(x, y):
        out_t = (jax.ShapeDtypeStruct(x.shape, np.int32), jax.ShapeDtypeStruct((), np.float32))
        a, s = jax.pure_callback(host, out_t, x + 1, y)
        return a + 1, s
    a, s = reference(f, ints, floats)
    assert seen[0][0] is np.ndarray
    np.testing.assert_array_equal(seen[0][1], ints + 1)
    assert_same_bits(a, (ints + 1) * 2 + 1)
    assert_same_bits(s, np.float32(floats.sum()))


def test_pure_callback_c2_result_checked():
    bad = lambda x: jax.pure_callback(lambda v: np.zeros(3, np.float32),
                                      jax.ShapeDtypeStruct((6,), np.float32), x)
    with pytest.raises(RuntimeError, match=r"Incorrect output shape.*\(pure_callback/c2\)"):
        reference(bad, floats)
    bad_dtype = lambda x: jax.pure_callback(lambda v: np.zeros(6, np.int16),
                                            jax.ShapeDtypeStruct((6,), np.float32), x)
    with pytest.raises(RuntimeError, match=r"Incorrect output dtype.*\(pure_callback/c2\)"):
        reference(bad_dtype, floats)


def test_io_callback_order_and_loop():
    log = []

    def record(tag, v):
        log.append((int(tag), int(v)))
        return np.int32(v * 10)

    def f(x):
        def body(i, c):
            r = io_callback(record, jax.ShapeDtypeStruct((), np.int32), 0, c, ordered=True)
            return c + r
        a = io_callback(record, jax.ShapeDtypeStruct((), np.int32), 1, x, ordered=True)
        return lax.fori_loop(0, 3, body, a)
    out = reference(f, np.int32(2))
    assert log == [(1, 2), (0, 20), (0, 220), (0, 2420)]
    assert out == 2420 + 24200


def test_debug_callback_and_print(capsys):
    got = []
    f = lambda x: (jax.debug.callback(lambda v: got.append(v.copy()), x * 2),
                   jax.debug.print("x={x} first={y}", x=x, y=x[0]), x + 1)[-1]
    out = reference(f, ints)
    np.testing.assert_array_equal(got[0], ints * 2)
    assert capsys.readouterr().out == f"x={ints} first={ints[0]}\n"
    assert_same_bits(out, ints + 1)


# --- errors -------------------------------------------------------------------------------------

def test_unknown_primitive_is_loud():
    from jax.extend.core import Primitive
    p = Primitive("made_up_by_a_test")
    p.def_abstract_eval(lambda x, **kw: x)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="made_up_by_a_test") as e:
        reference(lambda x: p.bind(x, flavour="strange") + 1, floats)
    assert e.value.primitive == "made_up_by_a_test"
    assert e.value.params == {"flavour": "strange"}
    assert jax.__version__ in str(e.value)


def test_coverage_lists_family():
    cov = interp.coverage()
    for name in ("cond", "while", "scan", "jit", "custom_jvp_call", "custom_vjp_call", "remat2",
                 "pure_callback", "io_callback", "debug_callback", "debug_print",
                 "optimization_barrier", "platform_index", "custom_linear_solve"):
        assert cov[name] == "supported", (name, cov.get(name))


def test_scan_over_and_into_key_arrays():
    # Typed PRNG keys as carry, as xs and as ys (the PRNG family's KeyArray values).
    def f(k, ks):
        def body(c, kx):
            c, sub = jax.random.split(c)
            return c, (sub, jax.random.bits(sub, (2,)) ^ jax.random.bits(kx, (2,)))
        return lax.scan(body, k, ks)
    k = jax.random.key(0)
    ks = jax.random.split(jax.random.key(1), 3)
    (carry, (subs, bits)), (xcarry, (xsubs, xbits)) = reference(f, k, ks), jax.jit(f)(k, ks)
    assert_same_bits(bits, np.asarray(xbits))
    assert_same_bits(subs.data, np.asarray(jax.random.key_data(xsubs)))
    assert_same_bits(carry.data, np.asarray(jax.random.key_data(xcarry)))


def test_placement_and_checks_are_identities():
    from jax.experimental import checkify
    dev = jax.devices("cpu")[0]

    def f(x):
        y = jax.lax.with_sharding_constraint(x * 2, jax.sharding.SingleDeviceSharding(dev))
        checkify.debug_check(y[0] < 1000, "never raised outside checkify")
        return jax.device_put(y, dev) + 1
    same(f, ints)


def test_batched_while_with_key_carry():
    def f(k, n):
        def body(c):
            i, key = c
            return i + 1, jax.random.split(key)[0]
        return lax.while_loop(lambda c: c[0] < n, body, (0, k))[1]
    g = jax.vmap(f)
    keys = jax.random.split(jax.random.key(3), 3)
    n = np.array([0, 2, 5], np.int32)
    assert_same_bits(reference(g, keys, n).data, np.asarray(jax.random.key_data(jax.jit(g)(keys, n))))


def test_linearized_custom_vjp_raises_like_jax():
    @jax.custom_vjp
    def g(x):
        return x * 3.0

    g.defvjp(lambda x: (x * 3.0, x), lambda r, ct: (ct * r,))
    f = lambda x: jax.linearize(g, x)[1](1.0)
    with pytest.raises(TypeError, match="custom_vjp") as xla_err:
        xla_cpu(f, 2.0)
    with pytest.raises(TypeError, match="custom_vjp") as ref_err:
        reference(f, 2.0)
    assert str(ref_err.value) == str(xla_err.value)


@pytest.mark.parametrize("method", ["sequential", "expand_dims"])
def test_vmap_of_pure_callback(method):
    shapes = []

    def host(a):
        shapes.append(a.shape)
        return (a * 2).astype(np.int32)

    f = jax.vmap(lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                                             vmap_method=method))
    x = ints.reshape(3, 2)
    same(f, x)
    # sequential calls the host once per row; expand_dims once with the batch axis
    assert shapes[-1] == ((2,) if method == "sequential" else (3, 2))


def _moves_floats(xs):
    ys = lax.scan(lambda c, x: (x, lax.cond(x[0] == x[0], lambda: c, lambda: x)), xs[0], xs)
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, -c[1]), (0, ys[1]))


def _wraps_ints(xs):
    c, ys = lax.scan(lambda c, x: (c * x + x, c ^ x), xs[0], xs, reverse=True)
    return lax.fori_loop(0, 3, lambda i, cy: (cy[0] * 3 + cy[1][i], cy[1] - cy[0]), (c, ys))


@pytest.mark.parametrize("dtype", ["int8", "uint32", "float32"])
@settings(max_examples=10)
@given(data=st.data())
def test_scan_while_cond_on_special_values(dtype, data):
    # Integer programs wrap; the float program only moves, negates and selects values (exact),
    # so every special value (NaN, inf, -0, subnormals, integer extremes) must come through
    # bit-exactly. (Module-level programs: XLA compiles each once.)
    xs = data.draw(arrays(np.dtype(dtype), (5, 3)))
    same(_moves_floats if np.dtype(dtype).kind == "f" else _wraps_ints, xs)


def test_searchsorted_two_shapes_in_one_program():
    # (HiPrim equality ignores avals: two SearchSorted of different shapes must not share an
    # expansion.)
    def f(a, b, q):
        return jnp.searchsorted(a, q), jnp.searchsorted(b, q)
    same(f, np.array([1, 5, 9], np.int32), np.array([0, 2, 4, 6, 8, 10], np.int32),
         np.array([3, 7], np.int32))
