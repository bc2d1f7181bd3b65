"""PRNG primitives and jax.random samplers: the reference against XLA:CPU, bit for bit.

Bits, keys, split, fold_in and rng_bit_generator are bit-exact with XLA:CPU for every JAX PRNG
implementation, both jax_threefry_partitionable modes and both x64 modes. Samplers built from
exact ops are bit-exact; the others are measured in ULPs against the budget in spec/random.py.
"""
from __future__ import annotations


import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax._src.random import prng as jax_prng

import interp
from conformance import checks
from conformance.values import assert_same_bits
from interp import prng
from interp.errors import UnsupportedPrimitiveError
from interp.rules.random import OWN_PRIMITIVES, KeyArray
from spec import random as spec_random
from tests.support import x64, xla_cpu

IMPLS = sorted(jax_prng.prngs)  # every implementation the installed JAX registers
NATIVE_IMPLS = [i for i in IMPLS if i in prng.IMPLS]
SHAPES = [(), (0,), (1,), (7,), (3, 5), (5, 3, 7), (2, 1, 3, 4), ((1 << 16) + 3,)]


@pytest.fixture(params=[True, False], ids=["partitionable", "legacy"])
def partitionable(request):
    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param)
    yield request.param
    jax.config.update("jax_threefry_partitionable", old)


def _same(ref, xla, msg=""):
    ref_leaves, xla_leaves = jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(xla)
    assert len(ref_leaves) == len(xla_leaves)
    for i, (r, x) in enumerate(zip(ref_leaves, xla_leaves)):
        assert_same_bits(r, x, err_msg=f"{msg} output {i}")


def test_every_registered_impl_is_native():
    """Each impl the installed JAX registers has a NumPy implementation (not the traced fallback).

    Impls that Pallas modules register when imported (pallas.tpu's kernel keys, the shipped
    pallas.ops.tpu.random kernels' "pallas_threefry2x32" / "pallas_philox4x32"; whether they are
    registered depends on what else ran in this worker) are Pallas programs: they run through the
    traced fallback and the Pallas engine (tests/test_pallas_ops.py)."""
    jax_impls = {name for name in jax_prng.prngs if "pallas" not in name}
    assert jax_impls <= set(prng.IMPLS)


# (impl, jax_threefry_partitionable, jax_enable_x64). Only threefry2x32 and rbg read the
# partitionable flag; x64 changes seeds and 64-bit bits (uint32 low words / 32-bit rbg draws
# without it). XLA:CPU compile time dominates these tests, so each mode appears where it matters.
KEY_OP_CASES = [("threefry2x32", p, x) for p in (True, False) for x in (True, False)] + [
    ("rbg", True, True), ("rbg", False, False), ("unsafe_rbg", True, True),
    ("philox4x32", True, True), ("philox2x32", True, False)]
# threefry4x32's unrolled lowering takes XLA:CPU minutes to compile per call site on JAX 0.10.2:
# its key operations are checked against JAX's own definition evaluated op by op
# (test_impls_vs_traced_definition) and its hash primitive against XLA:CPU.
# bit width -> shapes: scalar, empty, odd sizes, no even dimension, rank 3+, unit dims; the
# legacy threefry layout (padding, byte views) depends on them most
BITS_SHAPES = {32: [(), (0,), (7,), (5, 3, 7), (2, 1, 3, 4)], 8: [(7,), (3, 5)], 16: [(5, 3, 7)],
               64: [(), (3, 5)]}
BITS_SHAPES_SMALL = {32: [(), (5, 3, 7)], 8: [(7,)], 16: [(2, 1, 3)], 64: [(3, 5)]}


def compile_o0(fn, *args):
    """``fn`` compiled by XLA:CPU without backend optimisation (twice as fast to compile), for
    integer-only programs, whose results no optimisation may change; outputs as NumPy."""
    with jax.default_device(jax.devices("cpu")[0]):
        compiled = jax.jit(fn).lower(*args).compile(
            compiler_options={"xla_backend_optimization_level": 0,
                              "xla_llvm_disable_expensive_passes": True})
    return lambda *a: jax.tree_util.tree_map(np.asarray, compiled(*a))


def xla_cpu_o0(fn, *args):
    return compile_o0(fn, *args)(*args)


def test_key_op_cases_cover_every_impl():
    assert {c[0] for c in KEY_OP_CASES} | {"threefry4x32"} == set(NATIVE_IMPLS)


@pytest.mark.parametrize("impl,part,enable_x64", KEY_OP_CASES,
                         ids=[f"{i}-{'part' if p else 'legacy'}-{'x64' if x else 'x32'}"
                              for i, p, x in KEY_OP_CASES])
def test_key_ops_bits_vs_xla(impl, part, enable_x64):
    """seed, split, fold_in and bits of every width over scalar, empty, odd, rank-3+ and
    > 2**16-element shapes; batched keys (vmap, including rbg's first-key batching rule)."""
    def f(seed):
        k = jax.random.key(seed, impl=impl)
        ks = jax.random.split(k, 3)
        out = {"split": jax.random.key_data(jax.random.split(k, (2, 3))),
               "fold": jax.random.key_data(jax.random.fold_in(k, 0x8000_0001)),
               "vfold": jax.random.key_data(jax.vmap(jax.random.fold_in)(ks, jnp.arange(3))),
               "vsplit": jax.random.key_data(jax.vmap(lambda q: jax.random.split(q, 2))(ks)),
               "vbits": jax.vmap(lambda q: jax.random.bits(q, (5,)))(ks),
               "batched_bits": jax_prng.random_bits(ks, 32, (2, 3))}
        if impl in ("threefry2x32", "rbg"):
            out["big"] = jax.random.bits(k, ((1 << 16) + 3,))
        for width, shapes in (BITS_SHAPES if impl == "threefry2x32" else BITS_SHAPES_SMALL).items():
            for j, shape in enumerate(shapes):
                out[f"b{width}_{j}"] = jax_prng.random_bits(k, width, shape)
        return out

    old = jax.config.jax_threefry_partitionable
    try:
        jax.config.update("jax_threefry_partitionable", part)
        with x64(enable_x64):
            seed = np.int64(-3) if enable_x64 else np.int32(-3)
            _same(interp.interpret(f)(seed), xla_cpu_o0(f, seed), f"{impl}")
    finally:
        jax.config.update("jax_threefry_partitionable", old)


@pytest.mark.parametrize("seed_dtype", ["int8", "uint8", "int16", "int32", "uint32", "int64",
                                        "uint64"])
def test_seed_dtypes(seed_dtype):
    with x64(True):
        info = np.iinfo(seed_dtype)
        seeds = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2], seed_dtype)
        f = lambda s: [jax.random.key_data(jax.vmap(lambda x: jax.random.key(x, impl=i))(s))  # noqa: E731
                       for i in NATIVE_IMPLS]
        _same(interp.interpret(f)(seeds), xla_cpu(f, seeds))


_SEED_FNS = {}


@settings(max_examples=20)
@given(seed=st.integers(-2**63, 2**64 - 1), enable_x64=st.booleans())
def test_seeds_hypothesis(seed, enable_x64):
    """Seeds over the whole int64/uint64 range (JAX truncates them to int32 without x64), legacy
    uint32 keys (PRNGKey) and typed keys; one compilation per mode, seeds as arguments."""
    with x64(enable_x64):
        seed = np.int64(seed - 2**64 if seed >= 2**63 else seed) if enable_x64 else np.int32(seed % 2**31)

        def f(s):
            k = jax.random.PRNGKey(s)
            t = jax.random.key(s, impl="philox4x32")
            return (k, jax.random.split(k, 2), jax.random.bits(k, (3, 3), jnp.uint16),
                    jax.random.key_data(jax.random.fold_in(t, s)))

        if enable_x64 not in _SEED_FNS:
            _SEED_FNS[enable_x64] = (interp.interpret(f), jax.jit(f))
        ref, xla = _SEED_FNS[enable_x64]
        with jax.default_device(jax.devices("cpu")[0]):
            _same(ref(seed), jax.tree_util.tree_map(np.asarray, xla(seed)))


def test_random_seed_offset():
    old = jax.config.jax_random_seed_offset
    try:
        jax.config.update("jax_random_seed_offset", 12345)
        f = lambda s: jax.random.key_data(jax.random.key(s))  # noqa: E731
        _same(interp.interpret(f)(7), xla_cpu(f, 7))
        assert interp.interpret(f)(7).tolist() == [0, 7 + 12345]
    finally:
        jax.config.update("jax_random_seed_offset", old)


def test_typed_key_arguments_and_results():
    """Typed key arrays go in as arguments and come out as KeyArray with JAX's key dtype."""
    k = jax.random.split(jax.random.key(3, impl="rbg"), 4)
    out = interp.interpret(lambda k: jax.random.split(k[1]))(k)
    assert isinstance(out, KeyArray) and out.dtype == k.dtype and out.shape == (2,)
    np.testing.assert_array_equal(out.data, jax.random.key_data(jax.random.split(k[1])))
    np.testing.assert_array_equal(jax.random.key_data(out.to_jax()), out.data)
    with pytest.raises(TypeError):
        np.asarray(out)


@pytest.mark.parametrize("impl", ["threefry2x32", "philox2x32"])  # key shapes (2,) and (1,)
def test_key_arrays_through_structural_ops(impl):
    """Broadcast, reshape, transpose, slicing, dynamic indexing, gather, scatter, concatenate,
    stack, where, rev, eq on key arrays: the key data moves as JAX's KeyTyRules move it."""
    def f(k, i, idx, mask):
        ks = jax.random.split(k, (3, 4))
        parts = [ks.T, ks.reshape(12)[::5], ks[i], ks[:, i], ks[idx], ks.at[1, idx].set(ks[0, :2]),
                 jnp.concatenate([ks, ks[:1]]), jnp.stack([ks[0], ks[2]], axis=1),
                 jnp.where(mask, ks, ks[::-1]), jnp.broadcast_to(ks[0], (2, 4)), ks[None],
                 lax.dynamic_update_slice(ks, ks[:1, :2], (i, i)), ks[np.array([True, False, True])]]
        eqs = [ks == ks[::-1], ks != ks[::-1], ks[0] == ks[0]]
        return [jax.random.key_data(p) for p in parts] + eqs

    args = (jax.random.key(11, impl=impl), np.int32(1), np.array([2, 0], np.int32),
            np.array([[True, False, True, False]] * 3))
    _same(interp.interpret(f)(*args), xla_cpu(f, *args))


def test_key_arrays_through_control_flow():
    def f(k):
        def body(c):
            i, key = c
            return i + 1, jax.random.split(key)[0]
        _, kw = lax.while_loop(lambda c: c[0] < 5, body, (0, k))
        kc = lax.cond(True, lambda q: jax.random.fold_in(q, 3), lambda q: q, k)
        ks, bits = lax.scan(lambda key, _: (jax.random.split(key)[1], jax.random.bits(key)),
                            k, None, length=4)
        _, kys = lax.scan(lambda c, q: (c, jax.random.fold_in(q, 1)), 0, jax.random.split(k, 3))
        return [jax.random.key_data(x) for x in (kw, kc, ks, kys, jax.random.clone(k))] + [bits]

    k = jax.random.key(5)
    _same(interp.interpret(f)(k), xla_cpu(f, k))


# --- the hash primitives and XLA's RngBitGenerator --------------------------------------------

@pytest.mark.parametrize("name", ["threefry2x32", "philox4x32", "threefry4x32", "philox2x32"])
def test_hash_primitives_broadcast(name):
    from jax._src.random import philox2x32, philox4x32, threefry2x32, threefry4x32
    prim = {"threefry2x32": threefry2x32.threefry2x32_p, "philox4x32": philox4x32.philox4x32_p,
            "threefry4x32": threefry4x32.threefry4x32_p, "philox2x32": philox2x32.philox2x32_p}[name]
    nargs = {"threefry2x32": 4, "philox4x32": 6, "threefry4x32": 8, "philox2x32": 3}[name]
    rng = np.random.default_rng(0)
    args = [rng.integers(0, 2**32, size=(3, 1) if i % 2 else (3, 5), dtype=np.uint32)
            for i in range(nargs - 1)] + [np.uint32(0xFFFFFFFF)]
    args = [np.broadcast_to(a, (3, 5)).copy() for a in args]  # the primitive wants equal shapes
    f = lambda *a: prim.bind(*a)  # noqa: E731
    _same(interp.interpret(f)(*args), xla_cpu(f, *args))


RBG_SHAPES = [(), (0,), (5,), (4,), (7, 3), (3, 5, 7), (9, 1, 6), (1001,)]
RBG_KEYS = [[0, 0, 0, 0], [1, 2, 3, 4], [0xFFFFFFFF] * 4, [0xFFFFFFF0, 0xFFFFFFFF, 5, 0]]
ALGS = [lax.RandomAlgorithm.RNG_DEFAULT, lax.RandomAlgorithm.RNG_THREE_FRY,
        lax.RandomAlgorithm.RNG_PHILOX]


# RNG_DEFAULT is PHILOX on XLA:CPU: one width suffices to show it
RBG_CASES = [(a, d) for a in ALGS[1:] for d in ("uint8", "uint16", "uint32", "uint64")] + [
    (ALGS[0], "uint32")]


@pytest.mark.parametrize("alg,dtype", RBG_CASES, ids=[f"{a}-{d}" for a, d in RBG_CASES])
def test_rng_bit_generator_vs_xla(alg, dtype):
    """Every algorithm x output width x shape rule (even/odd/no even dim/rank 3/scalar/empty), the
    u32[4] key and the u64[2] state, counters near 2**64 (carry), and the new state."""
    with x64(True):
        def f(k32, k64):
            outs = []
            for shape in RBG_SHAPES:
                outs += list(lax.rng_bit_generator(k32, shape, dtype=dtype, algorithm=alg))
                outs += list(lax.rng_bit_generator(k64, shape, dtype=dtype, algorithm=alg))
            return outs

        ref, xla = interp.interpret(f), None
        for key in RBG_KEYS:
            k32 = np.array(key, np.uint32)
            k64 = prng.u32x4_to_state(k32)
            xla = xla or compile_o0(f, k32, k64)
            _same(ref(k32, k64), xla(k32, k64), f"{alg} {dtype} {key}")


@settings(max_examples=10)
@given(words=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4),
       shape=st.lists(st.integers(0, 7), max_size=3).map(tuple),
       alg=st.sampled_from(ALGS), dtype=st.sampled_from(["uint8", "uint32"]))
def test_rng_bit_generator_hypothesis(words, shape, alg, dtype):
    k = np.array(words, np.uint32)
    f = lambda k: lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=alg)  # noqa: E731
    _same(interp.interpret(f)(k), xla_cpu(f, k))


@pytest.mark.parametrize("impl", ["philox4x32", "threefry2x32"])
def test_bench_random_bits_compares_the_same_bits(impl, monkeypatch):
    """bench/random_bits.py times the reference and XLA:CPU on the same key and reports whether
    their bits agree: at a small size, they do, and both sides were timed."""
    from bench import random_bits
    monkeypatch.setattr(random_bits, "N", 4099)
    cmp, same = random_bits.measure(impl, True, repeats=2)
    assert same and cmp.out_a.shape == (4099,) and cmp.a > 0 and cmp.b > 0
    assert cmp.cpu_a >= 0 and cmp.cpu_b >= 0


def test_rng_bit_generator_u64x3_philox_state():
    """u64[3] PHILOX state (key, counter lo, counter hi): the 128-bit counter carries into the
    high word, and the new state is the counter advanced by the number of 128-bit blocks."""
    key, lo, hi = np.uint64(0x0123456789ABCDEF), np.uint64(2**64 - 1), np.uint64(7)
    new, bits = prng.rng_bit_generator(np.array([key, lo, hi]), (8,), np.uint32, "PHILOX")
    np.testing.assert_array_equal(new, np.array([key, 1, 8], np.uint64))  # +2 blocks, carried
    k0, k1 = np.uint32(0x89ABCDEF), np.uint32(0x01234567)
    block0 = prng.philox4x32(k0, k1, *map(np.uint32, (0xFFFFFFFF, 0xFFFFFFFF, 7, 0)))
    block1 = prng.philox4x32(k0, k1, *map(np.uint32, (0, 0, 8, 0)))
    np.testing.assert_array_equal(bits, np.array(list(block0) + list(block1), np.uint32))


def test_rng_uniform_is_loud_about_b_le_a_and_in_range():
    f = lambda a, b: lax.rng_uniform(a, b, (1000,))  # noqa: E731
    x = interp.interpret(f)(np.float32(-2), np.float32(3))
    assert x.dtype == np.float32 and np.all((x >= -2) & (x < 3)) and len(np.unique(x)) > 900
    n = interp.interpret(f)(np.int32(-5), np.int32(7))
    assert n.dtype == np.int32 and set(np.unique(n)) == set(range(-5, 7))
    with pytest.raises(UnsupportedPrimitiveError):
        interp.interpret(f)(np.float32(1), np.float32(1))


def _rng_uniform_cases():
    from conformance.cases import random as random_cases
    return {c.id: c for c in random_cases._rng_uniform_cases()}


@pytest.mark.parametrize("case_id", sorted(_rng_uniform_cases()))
def test_rng_uniform_statistical_cases(case_id):
    """The rng_uniform conformance cases: the reference's draws pass the STATISTICAL checks and
    stay inside [a, b); XLA:CPU's draws pass the same checks, and its float draws in a range of
    four ulps reach b (about one in eight), which the suite reports as the recorded divergence."""
    from conformance.judge import compare
    from reports.schema import Record
    from spec import divergences
    case = _rng_uniform_cases()[case_id]
    inputs = case.make_inputs(0)
    with case.context():
        ref = interp.interpret(case.fn)(*inputs)
        xla = xla_cpu(case.fn, *inputs)
    for side, (q, outside) in (("reference", ref), ("XLA:CPU", xla)):
        res = checks.check_statistical(q)
        assert res.passed, f"{side}: {res.detail}"
    assert int(ref[1]) == 0
    is_float = np.asarray(inputs[0]).dtype.kind not in "iu"
    if is_float:   # P(no b in 1024 draws) = (7/8)**1024 ~ 1e-59
        assert int(xla[1]) > 0
    else:
        assert int(xla[1]) == 0
    rec = Record(case=case.id, runner="xla:cpu")
    with case.context():
        compare(case, "xla:cpu", inputs, ref, xla, rec, first_divergence=False)
    if is_float:
        assert rec.outcome == "known-divergence", rec
        assert divergences.BY_ID["xla-rng-uniform-reaches-b"].link in str(rec.known_divergence)
    else:
        assert rec.outcome == "pass", rec


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_rng_uniform_narrow_range_is_uniform_below_b(dtype):
    """In a range of four ulps the reference draws each of the four values about equally often
    (rounded toward a: chi-square p > 1e-6 for this fixed seed) and never b."""
    from scipy import stats
    dt = jnp.dtype(dtype)
    lo = np.asarray(1, dt)
    hi = lo
    for _ in range(4):
        hi = np.nextafter(hi, np.asarray(2, dt))
    with x64(dtype == "float64"):
        x = interp.interpret(lambda a, b: lax.rng_uniform(a, b, (4096,)))(lo, hi)
    values, counts = np.unique(x, return_counts=True)
    assert x.dtype == dt and len(values) == 4 and values.min() == lo and values.max() < hi
    assert stats.chisquare(counts).pvalue > 1e-6, counts


# --- samplers ----------------------------------------------------------------------------------

R = jax.random
N = (500,)
SAMPLERS = {
    "bits": lambda k, dt: R.bits(k, N, jnp.uint16),
    "uniform": lambda k, dt: R.uniform(k, N, dt),
    "uniform_range": lambda k, dt: R.uniform(k, N, dt, minval=-3.0, maxval=5.0),
    "randint": lambda k, dt: [R.randint(k, N, -100, 1000, d) for d in
                              (jnp.int8, jnp.int16, jnp.int32, jnp.uint8, jnp.uint32)],
    "bernoulli": lambda k, dt: R.bernoulli(k, 0.3, N),
    "choice": lambda k, dt: R.choice(k, 50, (20,), replace=False),
    "choice_p": lambda k, dt: R.choice(k, 5, (20,), p=jnp.array([.1, .2, .3, .2, .2], dt)),
    "permutation": lambda k, dt: R.permutation(k, 100),
    "shuffle": lambda k, dt: R.permutation(k, jnp.arange(30, dtype=dt)),
    "categorical": lambda k, dt: R.categorical(k, jnp.log(jnp.array([.1, .2, .3, .4], dt)), shape=N),
    "rademacher": lambda k, dt: R.rademacher(k, N),
    "normal": lambda k, dt: R.normal(k, N, dt),
    "truncated_normal": lambda k, dt: R.truncated_normal(k, -1., 2., N, dt),
    "gumbel": lambda k, dt: R.gumbel(k, N, dt),
    "exponential": lambda k, dt: R.exponential(k, N, dt),
    "laplace": lambda k, dt: R.laplace(k, N, dt),
    "logistic": lambda k, dt: R.logistic(k, N, dt),
    "gamma": lambda k, dt: R.gamma(k, 2.5, (100,), dt),
    "beta": lambda k, dt: R.beta(k, 2., 3., (100,), dt),
    "dirichlet": lambda k, dt: R.dirichlet(k, jnp.array([1., 2., 3.], dt), (30,), dt),
    "poisson": lambda k, dt: R.poisson(k, 3.0, (100,)),
    "binomial": lambda k, dt: R.binomial(k, 10, 0.3, (100,), dt),
    "multivariate_normal": lambda k, dt: R.multivariate_normal(k, jnp.zeros(3, dt),
                                                               jnp.eye(3, dtype=dt) * 2, (30,)),
    "orthogonal": lambda k, dt: R.orthogonal(k, 4, dtype=dt),
    "ball": lambda k, dt: R.ball(k, 3, shape=(30,), dtype=dt),
    "maxwell": lambda k, dt: R.maxwell(k, N, dt),
    "double_sided_maxwell": lambda k, dt: R.double_sided_maxwell(k, 0., 1., N, dt),
    "weibull_min": lambda k, dt: R.weibull_min(k, 1., 2., N, dt),
    "pareto": lambda k, dt: R.pareto(k, 3., N, dt),
    "t": lambda k, dt: R.t(k, 3., (100,), dt),
    "chisquare": lambda k, dt: R.chisquare(k, 3., (100,), dt),
    "f": lambda k, dt: R.f(k, 3., 4., (100,), dt),
    "cauchy": lambda k, dt: R.cauchy(k, N, dt),
    "loggamma": lambda k, dt: R.loggamma(k, 2.5, (100,), dt),
    "triangular": lambda k, dt: R.triangular(k, 0., 1., 3., N, dt),
    "geometric": lambda k, dt: R.geometric(k, 0.3, N),
    "generalized_normal": lambda k, dt: R.generalized_normal(k, 1.5, (100,), dt),
    "lognormal": lambda k, dt: R.lognormal(k, 0.5, N, dt),
    "wald": lambda k, dt: R.wald(k, 1.0, (100,), dt),
}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance in units in the last place (integers: plain difference; NaN == NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0
    if a.dtype.kind in "iub":
        return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
    return int(np.max(checks.ulp_distance(a, b)))


def _run_or_xfail(fn, *args):
    try:
        return interp.interpret(fn)(*args)
    except UnsupportedPrimitiveError as e:
        if e.primitive in OWN_PRIMITIVES:
            raise
        pytest.xfail(f"needs primitive '{e.primitive}' from another family")


# Nightly-only sampler x dtype combinations. Almost all of a sampler test's cost is XLA:CPU
# compiling the sampler once per dtype (the reference takes a fraction of a second), and the
# gamma rejection loop is the costly one: 2-6 s of CPU per dtype (unloaded: about half) for
# every sampler built on it, several times every other sampler's. CI keeps float32 (and every
# dtype of every other sampler) plus, per family, one member at every dtype: gamma for the
# linear-space gamma samplers (t, generalized_normal, ball), loggamma for the log-space ones
# (beta, dirichlet, chisquare, f), maxwell for double_sided_maxwell. The other members' float16,
# bfloat16 and float64 run under ``HYPOTHESIS_PROFILE=nightly`` (the on-demand deep run,
# tests/conftest.py) against the same recorded budgets; in CI they are reported as skipped with
# that reason, never counted as passed.
NIGHTLY_SAMPLER_DTYPES = {
    n: ("float16", "bfloat16", "float64")
    for n in ("t", "generalized_normal", "ball", "beta", "dirichlet", "chisquare", "f",
              "double_sided_maxwell")}
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "nightly"   # the profile tests/conftest.py loads


def _sampler_groups():
    """(sampler, dtypes) groups, each compiled once (one program with an output per dtype):
    float64 on its own (it runs with jax_enable_x64), the narrower dtypes together, and the
    nightly-only dtypes (NIGHTLY_SAMPLER_DTYPES) in groups of their own."""
    out = []
    for n in sorted(SAMPLERS):
        dts = spec_random.SAMPLERS[n].dtypes
        later = NIGHTLY_SAMPLER_DTYPES.get(n, ())
        for nightly in (False, True):
            chosen = [d for d in dts if (d in later) == nightly]
            marks = [pytest.mark.skipif(not NIGHTLY, reason="costly XLA:CPU compile: runs "
                                        "under HYPOTHESIS_PROFILE=nightly")] if nightly else []
            for group in ([d for d in chosen if d != "float64"],
                          [d for d in chosen if d == "float64"]):
                if group:
                    out.append(pytest.param(n, tuple(group), marks=marks,
                                            id=f"{n}-{'-'.join(_SHORT[d] for d in group)}"))
    return out


_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}
SAMPLER_CASES = _sampler_groups()


def test_every_sampler_has_a_spec():
    assert set(SAMPLERS) == set(spec_random.SAMPLERS)


def test_every_sampler_dtype_runs_somewhere():
    """Each sampler x dtype of spec/random.py is in exactly one group (CI or nightly), and every
    family keeps a member at every dtype in CI."""
    pairs = [(c.values[0], d) for c in SAMPLER_CASES for d in c.values[1]]
    assert sorted(pairs) == sorted((n, d) for n in SAMPLERS for d in spec_random.SAMPLERS[n].dtypes)
    in_ci = {(c.values[0], d) for c in SAMPLER_CASES if not c.marks for d in c.values[1]}
    assert all((n, "float32") in in_ci for n in NIGHTLY_SAMPLER_DTYPES)
    for family in ("gamma", "loggamma", "maxwell"):
        assert {(family, d) for d in spec_random.SAMPLERS[family].dtypes} <= in_ci


@pytest.mark.parametrize("name,dtypes", SAMPLER_CASES)
def test_sampler_vs_xla(name, dtypes):
    """Exact samplers are bit-exact with XLA:CPU; transcendental ones stay within the worst case
    measured for this JAX version and dtype in spec/random.py (SAMPLERS[name].budget)."""
    cls = spec_random.SAMPLERS[name]
    fn = lambda k: [SAMPLERS[name](k, jnp.dtype(d)) for d in dtypes]  # noqa: E731
    with x64("float64" in dtypes):
        k = jax.random.key(42)
        refs = _run_or_xfail(fn, k)
        xlas = xla_cpu(fn, k)
    for dtype, ref, xla in zip(dtypes, refs, xlas):
        if cls.exactness == "exact":
            _same(ref, xla, f"{name} {dtype}")
        elif cls.exactness == "fma":
            _check_fma_explained(ref, xla, jnp.dtype(dtype))
        elif cls.exactness == "qr":
            _check_qr_perturbation(name, ref, xla, jnp.dtype(dtype))
        else:
            budget = cls.budget(dtype, jax.__version__)
            worst = max(ulp_distance(r, x) for r, x in
                        zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(xla)))
            assert budget is not None, f"{name} {dtype}: measured {worst} ulp; record it in spec/random.py"
            assert worst <= budget, f"{name} {dtype}: {worst} ulp > recorded {budget}"


def _check_qr_perturbation(name, ref, xla, dt):
    """orthogonal: Q of a normal matrix Z. The reference is checked against Q computed in
    float64 from the reference's own Z (an independent QR: NumPy's LAPACK), and the backend
    against the perturbation bound of a backward-stable QR (spec/random.py), which scales with
    kappa_2(Z) instead of a figure measured on one host."""
    k = jax.random.key(42)
    n = np.asarray(ref).shape[-1]
    with x64(dt == np.float64):
        z = interp.interpret(lambda k: jax.random.normal(k, (n, n), dt))(k).astype(np.float64)
    q, r = np.linalg.qr(z)
    exact = q * np.sign(np.diag(r))[None, :]
    eps = float(np.finfo(dt).eps)
    assert np.abs(np.asarray(ref, np.float64) - exact).max() <= 8 * n * eps, name
    bound = 8 * n * eps * np.linalg.cond(z)
    err = np.abs(np.asarray(xla, np.float64) - exact).max()
    assert err <= bound, f"{name} {dt}: |Q - Q_exact| = {err:.3g} > {bound:.3g}"


def _check_fma_explained(ref, xla, dt):
    """uniform(minval, maxval): the program rounds u*(max-min) and then +min; XLA:CPU fuses them
    into one FMA. Every difference must be exactly the FMA's single rounding."""
    k = jax.random.key(42)
    u = np.asarray(interp.interpret(lambda k: jax.random.uniform(k, N, dt))(k), np.float64)
    lo, span = -3.0, float(np.asarray(np.float32(5.0) - np.float32(-3.0)).astype(dt))
    fused = np.maximum(np.asarray(u * span + lo).astype(dt), np.asarray(lo, dt))  # exact in f64
    differs = np.asarray(ref) != np.asarray(xla)
    assert_same_bits(np.asarray(xla), fused.astype(np.asarray(xla).dtype),
                     err_msg="XLA:CPU is the fused multiply-add")
    assert differs.sum() < differs.size  # and the program's rounding is what the reference gives
    per_eq = np.maximum((np.asarray(u * span).astype(dt).astype(np.float64) + lo).astype(dt),
                        np.asarray(lo, dt))
    assert_same_bits(np.asarray(ref), per_eq.astype(np.asarray(ref).dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"] + [
    n for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(jnp, n)])
def test_uniform_every_float_dtype(dtype):
    with x64(dtype == "float64"):
        dt = jnp.dtype(dtype)
        fn = lambda k: jax.random.uniform(k, (4099,), dt)  # noqa: E731
        k = jax.random.key(9)
        _same(_run_or_xfail(fn, k), xla_cpu(fn, k), dtype)


def test_randint_64_bit_widths():
    """randint for the widths that need jax_enable_x64 (and uint16), bit-exact."""
    with x64(True):
        fn = lambda k: [jax.random.randint(k, (300,), lo, hi, d) for lo, hi, d in (  # noqa: E731
            (-2**40, 2**50, jnp.int64), (0, 2**62, jnp.uint64), (3, 60000, jnp.uint16))]
        k = jax.random.key(8)
        _same(_run_or_xfail(fn, k), xla_cpu(fn, k))


def _impl_ops(impl):
    def f(seed):
        k = jax.random.key(seed, impl=impl)
        ks = jax.random.split(k, (2, 3))
        out = [jax.random.key_data(ks), jax.random.key_data(jax_prng.random_fold_in(ks, np.uint32(9))),
               jax.random.key_data(jax.random.fold_in(k, 0xFFFFFFFF))]
        for width, shapes in BITS_SHAPES.items():
            out += [jax_prng.random_bits(k, width, s) for s in shapes]
        return out + [jax_prng.random_bits(ks, 8, (5,))]
    return f


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_traced_fallback_for_unknown_impls(impl, monkeypatch):
    """An impl without a NumPy implementation (a user-registered PRNGImpl) runs its own
    functions traced by JAX, like its lowering: forced here for known impls, against XLA:CPU."""
    import interp.rules.random as rules
    monkeypatch.setattr(rules, "_native", lambda impl: None)
    f = _impl_ops(impl)
    _same(interp.interpret(f)(np.int32(77)), xla_cpu_o0(f, np.int32(77)))


@pytest.mark.parametrize("enable_x64", [True, False], ids=["x64", "x32"])
@pytest.mark.parametrize("impl", NATIVE_IMPLS)
def test_impls_vs_traced_definition(impl, enable_x64, monkeypatch):
    """The NumPy implementations against JAX's own impl functions traced and run op by op (the
    other lax rules, an independent path); the only XLA-free check of threefry4x32's key ops."""
    import interp.rules.random as rules
    f = _impl_ops(impl)
    with x64(enable_x64):
        seed = np.int64(-2**40 - 5) if enable_x64 else np.int32(-5)
        native = interp.interpret(f)(seed)
        monkeypatch.setattr(rules, "_native", lambda impl: None)
        _same(native, interp.interpret(f)(seed), impl)
