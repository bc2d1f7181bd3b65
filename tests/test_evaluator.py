"""The interpreter core: plans and their caching, options, errors, interpret()'s pytree handling,
static arguments, keyword arguments, and JAX configuration read at call time."""
from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import interp
from interp import evaluator
from interp.errors import UnsupportedPrimitiveError
from interp.options import Options
from interp.registry import EXTENDED_RULES, REFUSED, RULES
from tests.support import with_params, x64

ints = np.arange(6, dtype=np.int32) - 2


# --- plans --------------------------------------------------------------------------------------

def test_plan_cached_per_jaxpr_and_options():
    closed = jax.make_jaxpr(lambda x: x * 2 + 1)(ints)
    a = evaluator.get_plan(closed.jaxpr, Options())
    assert evaluator.get_plan(closed.jaxpr, Options()) is a
    b = evaluator.get_plan(closed.jaxpr, Options(uninitialized="zero"))
    assert b is not a and b.options.uninitialized == "zero"


def test_loop_body_plan_built_once(monkeypatch):
    built = []

    class CountingPlan(evaluator.Plan):
        __slots__ = ()

        def __init__(self, jaxpr, options):
            built.append(jaxpr)
            super().__init__(jaxpr, options)

    monkeypatch.setattr(evaluator, "Plan", CountingPlan)
    f = interp.interpret(lambda x: lax.fori_loop(0, 50, lambda i, c: c * 3 + i, x))
    np.testing.assert_array_equal(f(ints), jax.jit(lambda x: lax.fori_loop(
        0, 50, lambda i, c: c * 3 + i, x))(ints))
    n = len(built)
    assert n <= 3  # the program and the loop body (and its cond for a while): not one per iteration
    f(ints + 1)
    assert len(built) == n  # a second call re-traces nothing and builds nothing


def test_interpret_traces_once_per_signature():
    traces = []

    def f(x, y):
        traces.append(1)
        return x + y

    g = interp.interpret(f)
    g(ints, ints)
    g(ints + 1, ints)
    assert len(traces) == 1
    g(ints.astype(np.float32), ints.astype(np.float32))
    g(np.int32(1), ints)
    assert len(traces) == 3


def test_plan_steps_release_intermediates():
    closed = jax.make_jaxpr(lambda x: ((x + 1) * 2 - 3, x))(ints)
    plan = evaluator.get_plan(closed.jaxpr, Options())
    freed = {s for step in plan.steps for s in step[6]}
    inputs_outputs = set(plan.in_slots) | set(plan.out_slots)
    assert freed and not freed & inputs_outputs


def test_dropped_outputs():
    f = lambda x: lax.scan(lambda c, a: (c + a, c * a), 0, x)[1]  # the final carry is dropped
    np.testing.assert_array_equal(interp.interpret(f)(ints), jax.jit(f)(ints))


# --- options ------------------------------------------------------------------------------------

def test_options_validated():
    with pytest.raises(ValueError):
        interp.interpret(lambda x: x, uninitialized="garbage")
    with pytest.raises(ValueError):
        interp.interpret(lambda x: x, grid_order="random")
    with pytest.raises(TypeError, match="unknown interpreter option"):
        interp.interpret(lambda x: x, no_such_option=True)
    f = interp.interpret(lambda x: x, uninitialized="zero", seed=3)
    assert f.options == Options(uninitialized="zero", seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.options.seed = 4


def test_eval_jaxpr_options_and_consts():
    c = jnp.arange(6, dtype=jnp.int32)
    closed = jax.make_jaxpr(lambda x: x * c)(ints)
    out = interp.eval_jaxpr(closed, ints, check_avals=False)
    assert isinstance(out, list) and type(out[0]) is np.ndarray
    np.testing.assert_array_equal(out[0], ints * np.arange(6))
    with pytest.raises(TypeError):
        interp.eval_jaxpr(closed, ints, ints)


# --- errors -------------------------------------------------------------------------------------

def _made_up(name, **params):
    from jax.extend.core import Primitive
    p = Primitive(name)
    p.def_abstract_eval(lambda x, **kw: x)
    return lambda x: p.bind(x, **params)


def test_unsupported_primitive_error():
    prim = _made_up("test_evaluator_unknown", colour="blue")
    with pytest.raises(UnsupportedPrimitiveError) as e:
        interp.interpret(prim)(ints)
    assert isinstance(e.value, NotImplementedError)
    assert e.value.primitive == "test_evaluator_unknown" and e.value.params == {"colour": "blue"}
    assert "test_evaluator_unknown" in str(e.value) and jax.__version__ in str(e.value)
    assert interp.coverage().get("test_evaluator_unknown") in (None, "unsupported")


def test_wrong_result_aval_is_a_bug(monkeypatch):
    prim = _made_up("test_evaluator_bad_rule")
    monkeypatch.setitem(RULES, "test_evaluator_bad_rule", lambda eqn, x: x.astype(np.int64))
    with pytest.raises(AssertionError, match="test_evaluator_bad_rule.*bug in the reference"):
        interp.interpret(prim)(ints)
    # check_avals=False trusts the rule (used by rules that evaluate many tiny sub-jaxprs).
    out = interp.interpret(prim, check_avals=False)(ints)
    assert out.dtype == np.int64
    monkeypatch.setitem(RULES, "test_evaluator_bad_rule", lambda eqn, x: float(x[0]))
    with pytest.raises(AssertionError, match="returned output 0 as"):
        interp.interpret(prim)(ints)


def test_wrong_aval_among_multiple_results_is_a_bug(monkeypatch):
    # Multiple results (loops, calls) are checked against their (shape, dtype), computed once per
    # plan: a wrong one names its position; check_avals=False trusts the rule.
    from jax.extend.core import Primitive
    p = Primitive("test_evaluator_two_results")
    p.multiple_results = True
    p.def_abstract_eval(lambda x: [x, x])
    monkeypatch.setitem(RULES, "test_evaluator_two_results", lambda eqn, x: [x, x.astype(np.int64)])
    with pytest.raises(AssertionError, match="returned output 1 as int64"):
        interp.interpret(lambda x: p.bind(x))(ints)
    out = interp.interpret(lambda x: p.bind(x), check_avals=False)(ints)
    assert out[1].dtype == np.int64
    monkeypatch.setitem(RULES, "test_evaluator_two_results", lambda eqn, x: [x, 3])
    with pytest.raises(AssertionError, match="returned output 1 as Noneint, expected int32"):
        interp.interpret(lambda x: p.bind(x) + [1])(ints)
    monkeypatch.setitem(RULES, "test_evaluator_two_results", lambda eqn, x: [x, x + 1])
    got = interp.interpret(lambda x: p.bind(x) + [2])(ints)
    np.testing.assert_array_equal(got[1], ints + 1)


def test_effect_only_rule_result_count_is_checked(monkeypatch):
    # A primitive with no outputs (DMA starts, semaphore signals): its rule's [] is skipped
    # cheaply, and a rule returning something there is still reported as a bug.
    from jax.extend.core import Primitive
    p = Primitive("test_evaluator_effect_only")
    p.multiple_results = True
    p.def_abstract_eval(lambda x: [])
    seen = []
    monkeypatch.setitem(RULES, "test_evaluator_effect_only", lambda eqn, x: seen.append(x) or [])

    def f(x):
        p.bind(x)
        return x + 1
    np.testing.assert_array_equal(interp.interpret(f)(ints), ints + 1)
    assert len(seen) == 1
    monkeypatch.setitem(RULES, "test_evaluator_effect_only", lambda eqn, x: [x])
    with pytest.raises(AssertionError, match="returned 1 outputs, expected 0"):
        interp.interpret(lambda x: f(x))(ints)   # (a new trace: plans look rules up once)


# --- interpret(): pytrees, static arguments, kwargs ---------------------------------------------

def test_pytrees_in_and_out():
    def f(d, t):
        return {"sum": d["a"] + t[0], "nested": (d["b"] * 2, [t[1], None])}
    args = ({"a": ints, "b": ints.astype(np.float32)}, (np.int32(3), ints))
    out = interp.interpret(f)(*args)
    want = jax.jit(f)(*args)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(want)
    for o, w in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
        assert type(o) is np.ndarray and o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)


def test_static_argnums_and_argnames():
    def f(x, n, *, mode):
        return x * n if mode == "mul" else x + n
    g = interp.interpret(f, static_argnums=1, static_argnames="mode")
    np.testing.assert_array_equal(g(ints, 3, mode="mul"), ints * 3)
    np.testing.assert_array_equal(g(ints, 3, mode="add"), ints + 3)
    np.testing.assert_array_equal(g(ints, 4, mode="add"), ints + 4)


def test_dynamic_kwargs():
    g = interp.interpret(lambda x, *, y: x - y)
    np.testing.assert_array_equal(g(ints, y=ints * 2), -ints)


def test_python_scalars_are_weakly_typed():
    out = interp.interpret(lambda x, s: x * s)(ints.astype(np.float32), 2)
    assert out.dtype == np.float32


def test_jax_config_read_at_call_time():
    f = interp.interpret(lambda n: jnp.arange(3) + n)
    with x64(False):
        assert f(1).dtype == np.int32
    with x64(True):
        assert f(1).dtype == np.int64
        assert f(np.int64(2)).dtype == np.int64
    with x64(False):
        assert f(1).dtype == np.int32


def test_outputs_never_jax_arrays():
    out = interp.interpret(lambda x: (x, x + 1, jnp.float32(2)))(ints)
    assert all(type(o) is np.ndarray for o in out)


def test_rule_prepare_hook(monkeypatch):
    # A rule with a ``prepare(ctx)`` attribute is specialised once per equation at plan time.
    prepared = []

    def rule(eqn, x):
        raise AssertionError("the prepared function is called instead")

    def prepare(ctx):
        prepared.append(ctx.name)
        return lambda eqn, x: x + np.int32(1)

    rule.prepare = prepare
    prim = _made_up("test_evaluator_prepared")
    monkeypatch.setitem(RULES, "test_evaluator_prepared", rule)
    f = interp.interpret(lambda x: prim(prim(x)))
    np.testing.assert_array_equal(f(ints), ints + 2)
    np.testing.assert_array_equal(f(ints), ints + 2)
    assert prepared == ["test_evaluator_prepared"] * 2


# --- declared parameters: an unknown one is always an UnsupportedPrimitiveError naming it (#15) -----

def _undeclared_allowed(name, rule) -> bool:
    """A refused rule (registered with ``refused=``) only raises its reason, whatever the params."""
    return name in REFUSED


def _takes_var_keyword(fn) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):   # no Python signature: declares (accepts) nothing
        return False
    return any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def test_every_registered_rule_declares_its_parameters():
    undeclared = sorted(f"{kind}:{name} ({getattr(rule, '__qualname__', rule)})"
                        for kind, table in (("rule", RULES), ("extended", EXTENDED_RULES))
                        for name, rule in table.items()
                        if _takes_var_keyword(rule) and not _undeclared_allowed(name, rule))
    assert not undeclared, f"rules taking **params (name every parameter instead): {undeclared}"


def _declared_programs():
    """Small programs whose equations reach the plan-time specialisations (``prepare``) of the
    rule families: native ufuncs and scalar operators, convert's fast paths, calls, loops,
    conditionals, a Pallas kernel with scoped scratch, typed-key structure rules."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    f32 = np.arange(6, dtype=np.float32)

    def kernel(x_ref, o_ref):
        def body(scratch):
            scratch[...] = x_ref[...] * 2
            o_ref[...] = scratch[...] + 1
        pl.run_scoped(body, pltpu.VMEM(x_ref.shape, x_ref.dtype))

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(f32.shape, f32.dtype), interpret=True)
    return [
        (lambda x, y: (x + y, x * y, x - y, x / y, -x, x < y, x == y), (f32, f32 + 1)),
        (lambda x, y: (x + y, x * y, x * 2.0, 3.0 * y, x == y), (np.float32(2), np.float32(3))),
        (lambda x: (x.astype(np.float32), x.astype(np.int16), x.astype(np.int32)),   # identity, widening
         (np.arange(6, dtype=np.int16),)),
        (lambda x: jax.jit(jnp.sin)(x) + lax.cond(x[0] > 0, jnp.exp, jnp.cos, x), (f32,)),
        (lambda x: lax.scan(lambda c, v: (c + v, c * v), 0.0, x), (f32,)),
        (lambda x: (jnp.sort(x), jnp.sum(x), jnp.argmax(x), jnp.cumsum(x), x[jnp.array([2, 0])]), (f32,)),
        (call, (f32,)),
        (lambda k: jax.random.split(k, 4).reshape(2, 2)[0], (jax.random.key(0),)),
    ]


def _equations(jaxpr):
    from jax.extend import core as jcore
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        yield eqn
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(sub, (jcore.Jaxpr, jcore.ClosedJaxpr)):
                    yield from _equations(sub)


def test_the_functions_prepare_returns_declare_their_parameters():
    seen, undeclared = set(), []
    for fn, args in _declared_programs():
        closed = jax.make_jaxpr(fn)(*args)
        interp.eval_jaxpr(closed, *jax.tree_util.tree_leaves(args))   # runs as traced
        for eqn in _equations(closed):
            ctx = evaluator.EqnContext(eqn, Options())
            rule = evaluator._lookup_rule(ctx)
            prepare = getattr(rule, "prepare", None)
            if prepare is None:
                continue
            prepared = prepare(ctx)
            seen.add(ctx.name)
            if _takes_var_keyword(prepared) and not _undeclared_allowed(ctx.name, rule):
                undeclared.append(f"{ctx.name}: {getattr(prepared, '__qualname__', prepared)}")
    assert not undeclared, undeclared
    assert {"add", "mul", "convert_element_type", "run_scoped"} <= seen, seen   # the test reaches them


def _pallas_double(x):
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


F32 = np.linspace(-2, 2, 6, dtype=np.float32)


@pytest.mark.parametrize("primitive,fn,args", [
    ("jit", jax.jit(jnp.sin), (F32,)),
    ("sort", lax.sort, (F32,)),
    ("reduce_sum", lambda x: lax.reduce(x, np.float32(0), lax.add, (0,)), (F32,)),
    ("exp", jnp.exp, (F32,)),
    ("erf", lax.erf, (F32,)),
    ("pallas_call", _pallas_double, (F32,)),
    ("scan", lambda x: lax.scan(lambda c, v: (c + v, c), 0.0, x), (F32,)),
    ("cond", lambda x: lax.cond(x[0] > 0, jnp.sin, jnp.cos, x), (F32,)),
    ("gather", lambda x: x[jnp.array([3, 1])], (F32,)),
    ("dot_general", lambda x: x @ x, (F32,)),
    ("convert_element_type", lambda x: x.astype(np.float32), (np.arange(6, dtype=np.int16),)),  # fast path
    ("mul", lambda x: x * x, (F32,)),                                    # a prepared native ufunc
    ("add", lambda x, y: x + y, (np.float32(1), np.float32(2))),         # a prepared scalar operator
    ("reduce_window_max", lambda x: lax.reduce_window(x, -np.inf, lax.max, (2,), (1,), "VALID"), (F32,)),
    ("broadcast_in_dim", lambda k: jnp.broadcast_to(k, (2,)), (jax.random.key(0),)),   # key arrays
], ids=lambda v: v if isinstance(v, str) else "")
def test_an_unknown_parameter_on_a_declared_rule_is_unsupported_naming_it(primitive, fn, args):
    closed = jax.make_jaxpr(fn)(*args)
    leaves = jax.tree_util.tree_leaves(args)
    interp.eval_jaxpr(closed, *leaves)   # runs as traced
    with pytest.raises(UnsupportedPrimitiveError, match=r"parameter 'bogus' not implemented") as e:
        interp.eval_jaxpr(with_params(closed, primitive, bogus=1), *leaves)
    assert e.value.primitive == primitive


def test_a_rule_taking_var_keywords_is_refused(monkeypatch):
    # A rule that declares nothing would accept any parameter silently: a programming error.
    prim = _made_up("test_evaluator_undeclared", colour="blue")
    monkeypatch.setitem(RULES, "test_evaluator_undeclared", lambda eqn, x, **params: x)
    with pytest.raises(UnsupportedPrimitiveError, match="must declare the parameters"):
        interp.interpret(prim)(ints)


def test_a_rule_without_a_signature_accepts_no_parameter(monkeypatch):
    # (a C callable, like a ufunc registered directly, has no Python signature to declare with)
    assert evaluator._keywords(np.frompyfunc(lambda eqn, x: x, 2, 1)) == (frozenset(), frozenset())
    assert evaluator._keywords(np.add) == (frozenset(), frozenset())   # (not its casting=, where=...)

    class Opaque:
        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no signature")))

        def __call__(self, eqn, x):
            return x
    assert evaluator._keywords(Opaque()) == (frozenset(), frozenset())
    prim = _made_up("test_evaluator_opaque", colour="blue")
    monkeypatch.setitem(RULES, "test_evaluator_opaque", Opaque())
    with pytest.raises(UnsupportedPrimitiveError, match="parameter 'colour' not implemented"):
        interp.interpret(prim)(ints)
    np.testing.assert_array_equal(interp.interpret(_made_up("test_evaluator_opaque"))(ints), ints)


def test_declared_parameters_of_closures_are_their_defs():
    """_keywords reads a plain function's declaration once per ``def`` (closures that ``prepare``
    makes per equation share it): the same answer as inspect.signature for every closure, also
    where defaults differ; a wrapper (functools.wraps) or a function with its own __signature__
    is still read through inspect, which follows them."""
    import functools
    import inspect

    def make(default):
        def rule(eqn, x, *, a, b=default, c=None):
            return x
        return rule

    def declared(fn):
        ps = inspect.signature(fn).parameters.values()
        kw = [p for p in ps if p.kind is p.KEYWORD_ONLY]
        return frozenset(p.name for p in kw), frozenset(p.name for p in kw if p.default is p.empty)
    first, second = make(1), make(2)
    assert evaluator._keywords(first) == declared(first) == ({"a", "b", "c"}, {"a"})
    assert evaluator._keywords(second) == declared(second)
    second.__kwdefaults__ = {"c": None}          # (b now required: another declaration)
    assert evaluator._keywords(second) == declared(second) == ({"a", "b", "c"}, {"a", "b"})

    @functools.wraps(first)
    def wrapper(*args, **kwargs):
        return first(*args, **kwargs)
    assert evaluator._keywords(wrapper) == declared(wrapper) == ({"a", "b", "c"}, {"a"})

    def plain(**params):
        def rule(eqn, x, **params):
            return x
        rule.__signature__ = params.get("signature")
        return rule
    assert evaluator._keywords(plain()) is None
    assert evaluator._keywords(plain(signature=inspect.signature(first))) == ({"a", "b", "c"}, {"a"})


# --- buffer reuse (interp/evaluator.py DONATE_MIN_ELEMENTS) --------------------------------------

BIG = np.arange(evaluator.DONATE_MIN_ELEMENTS, dtype=np.float32)


def _counting_rule(calls):
    """A rule computing x + 1, with an ``inplace`` variant that records the buffer it was given."""
    def rule(eqn, x):
        calls.append(("fresh", None))
        return x + np.float32(1)

    def inplace(eqn, out, x):
        calls.append(("inplace", id(out)))   # (holding ``out`` itself would forbid its reuse)
        return np.add(x, np.float32(1), out=out)
    rule.inplace = inplace
    return rule


def test_dying_intermediate_buffer_is_reused(monkeypatch):
    calls = []
    monkeypatch.setitem(RULES, "test_evaluator_plus1", _counting_rule(calls))
    prim = _made_up("test_evaluator_plus1")
    x = BIG.copy()
    out = interp.interpret(lambda x: prim(prim(prim(x))))(x)
    np.testing.assert_array_equal(out, BIG + 3)
    np.testing.assert_array_equal(x, BIG)                  # the caller's array is never written
    assert [c[0] for c in calls] == ["fresh", "inplace", "inplace"]
    assert calls[1][1] == calls[2][1]                       # one buffer serves the whole chain
    # Small arrays: not worth it (an allocation costs less than the check).
    calls.clear()
    interp.interpret(lambda x: prim(prim(x)))(BIG[:8])
    assert [c[0] for c in calls] == ["fresh", "fresh"]


def test_no_reuse_of_outputs_aliases_or_caller_arrays(monkeypatch):
    calls = []
    monkeypatch.setitem(RULES, "test_evaluator_plus1", _counting_rule(calls))
    monkeypatch.setitem(RULES, "test_evaluator_alias", lambda eqn, x: x)   # returns its input object
    plus1, alias = _made_up("test_evaluator_plus1"), _made_up("test_evaluator_alias")

    # t is an output: never handed to a rule as scratch, even through an alias that dies.
    def program(x):
        t = plus1(x)
        return plus1(alias(t)), t
    u, t = interp.interpret(program)(BIG)
    np.testing.assert_array_equal(t, BIG + 1)
    np.testing.assert_array_equal(u, BIG + 2)
    assert [c[0] for c in calls] == ["fresh", "fresh"]
    # An alias of the caller's argument: the reference count shows the caller still holds it.
    calls.clear()
    x = BIG.copy()
    out = interp.interpret(lambda x: plus1(alias(x)))(x)
    np.testing.assert_array_equal(x, BIG)
    np.testing.assert_array_equal(out, BIG + 1)
    assert [c[0] for c in calls] == ["fresh"]
    # A value used twice by the equation is not scratch either (its other use reads it).
    calls.clear()
    closed = jax.make_jaxpr(lambda x: plus1(x) * plus1(x))(BIG)
    out = interp.eval_jaxpr(closed, BIG)[0]
    np.testing.assert_array_equal(out, (BIG + 1) * (BIG + 1))


def test_reuse_with_real_rules_is_invisible():
    """Elementwise chains, values used again later, jit-wrapped identities, a value returned
    twice: results equal NumPy's, and the caller's arrays are untouched."""
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(BIG.size).astype(np.float32) for _ in range(3))
    keep = [a.copy() for a in (x, y, z)]

    def program(x, y, z):
        t = x * y
        u = t + z                      # t dies here: u may be computed into t's buffer
        v = jax.jit(lambda a: a)(x) - u   # an alias of the caller's x dies here: never reused
        w = jnp.maximum(v, z) * v
        return u, w, w, -w

    got = interp.interpret(program)(x, y, z)
    t = x * y
    u = t + z
    v = x - u
    w = np.maximum(v, z) * v
    for g, want in zip(got, (u, w, w, -w)):
        np.testing.assert_array_equal(g, want)
    assert got[1] is not got[3]
    for a, b in zip((x, y, z), keep):
        np.testing.assert_array_equal(a, b)
    for dtype in (np.int8, np.float16):
        a = (rng.standard_normal(BIG.size) * 100).astype(dtype)
        got = interp.interpret(lambda a: (a * a + a) - a)(a)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, (a * a + a) - a)


def test_sole_reference_count_calibration():
    args = [np.zeros(3)]
    buf = args[0]
    assert evaluator._refcount_at(args, 0) == evaluator._SOLE
    other = buf  # noqa: F841  (a second holder)
    assert evaluator._refcount_at(args, 0) == evaluator._SOLE + 1


def test_a_primitive_without_a_rule_states_why_where_there_is_a_reason():
    # ffi_call runs native code: coverage() and the error both say so (interp/registry.py NO_RULE).
    import jax
    from interp import coverage
    from interp.registry import NO_RULE
    status = coverage()
    for name, why in NO_RULE.items():
        if name in status:
            assert status[name] == f"unsupported: {why}", name
    assert "ffi_call" in status
    f = jax.ffi.ffi_call("no_such_target", jax.ShapeDtypeStruct((3,), np.float32))
    closed = jax.make_jaxpr(f)(np.zeros(3, np.float32))
    with pytest.raises(UnsupportedPrimitiveError, match="ffi_call.*native code"):
        evaluator.eval_jaxpr(closed, np.zeros(3, np.float32))


def test_primitives_no_traced_program_holds_cannot_be_traced():
    # The NO_RULE reasons that say "no jaxpr can contain it", checked against the installed JAX:
    # zeros_like has no abstract evaluation (ad_util.py), JAX 0.10's log_read's raises (hijax.py).
    import jax
    from jax._src import ad_util, hijax
    from interp.registry import NO_RULE
    assert "no jaxpr can contain it" in NO_RULE["zeros_like"]
    with pytest.raises(NotImplementedError):
        jax.make_jaxpr(lambda x: ad_util.zeros_like_p.bind(x))(np.zeros(3, np.float32))
    if hasattr(hijax, "log_read"):
        with pytest.raises(Exception):
            jax.make_jaxpr(lambda: hijax.log_read(hijax.new_log()))()


def test_no_primitive_of_this_jax_is_silently_unsupported_among_the_stated_ones():
    # Each of these once showed as a bare "unsupported" in docs/coverage-jax-*.md: each now has a
    # rule or a stated reason on every JAX that defines it (core_map excepted: not yet decided).
    from interp import coverage
    status = coverage()
    for name in ("call_hi_primitive_linearized", "create_linear", "from_edtype", "to_edtype",
                 "inspect_sharding", "pack_dtype", "unpack_dtype", "stage", "zeros_like",
                 "program_order", "box_get", "box_set", "new_box", "log_extend", "log_read",
                 "new_log", "call", "jaxpr_call", "emit_pipeline", "pipeline_body"):
        if name in status:
            assert status[name] != "unsupported", name
