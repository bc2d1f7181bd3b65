"""Allowance explanations, known divergences and the first divergent equation, on XLA:CPU's real
behaviour (it flushes f32 subnormals and contracts mul+add into FMAs) and on hand-made outputs."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from conformance import allowance_models as AM
from conformance import divergence_models as DM
from conformance.case import PALLAS, Case
from conformance.execute import run_case
from conformance.first_divergence import first_divergent_eqn
from conformance.judge import compare
from reports.schema import Record
from conformance.replay import Variant, flush_subnormals, reference_replay
from interp.rules.lax_special import correctly_rounded
from spec import allowances as A
from spec import compliance as C
from spec import divergences as DV

TINY = np.float32(np.finfo(np.float32).tiny)


def _case(fn, inputs, **kw):
    return Case(id="testing/" + kw.pop("name", "case"), fn=fn, inputs=lambda rng: inputs, **kw)


def test_flush_subnormals():
    x = np.array([1e-45, -1e-40, 1.0, 0.0, -0.0, np.nan], np.float32)
    out = flush_subnormals(x)
    assert out.view(np.uint32).tolist()[:5] == [0, 0x80000000, 0x3F800000, 0, 0x80000000]
    assert np.isnan(out[5])
    h = np.array([6e-8], np.float16)                      # f16 keeps subnormals on XLA:CPU
    assert flush_subnormals(h)[0] == h[0]


def test_flush_to_zero_explains_xla_cpu():
    # x * 0.25 of the smallest normal is subnormal: correctly rounded it is TINY/4, XLA:CPU gives 0.
    case = _case(lambda x: x * np.float32(0.25), [np.array([TINY, 3 * TINY, 1.0], np.float32)],
                 primitives=("mul",))
    rec = run_case(case, "xla:cpu")
    assert rec.outcome == "pass-with-allowance" and rec.allowance == "flush-to-zero"
    assert rec.mismatches == 2 and rec.first_mismatch["index"] == [0]


def test_fma_contraction_explains_xla_cpu():
    a, b, c = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23), np.float32(-1)
    # Unfused: a*b rounds to 1.0, so a*b + c = 0. Fused: exactly -2^-46.
    case = _case(lambda a, b, c: a * b + c, [np.array([a]), np.array([b]), np.array([c])], primitives=("mul",))
    jaxpr = jax.make_jaxpr(case.fn)(*case.make_inputs(0))
    fused, _ = reference_replay(jaxpr, case.make_inputs(0), Variant(fma=True))
    assert fused[0][0] == np.float32(-(2.0 ** -46))
    plain, _ = reference_replay(jaxpr, case.make_inputs(0))
    assert plain[0][0] == 0
    rec = run_case(case, "xla:cpu")
    assert rec.outcome == "pass-with-allowance" and rec.allowance == "fma-contraction"


def test_unexplained_difference_is_a_fail_with_values():
    case = _case(lambda x: x + 1, [np.arange(4, dtype=np.float32)], primitives=("add",))
    ref = [np.arange(4, dtype=np.float32) + 1]
    out = [ref[0].copy()]
    out[0][2] = np.nextafter(out[0][2], np.float32(9))
    rec = Record(case=case.id, runner="xla:cpu")
    compare(case, "xla:cpu", case.make_inputs(0), ref, out, rec, first_divergence=False)
    assert rec.outcome == "fail" and rec.max_ulp == 1 and rec.mismatches == 1
    assert rec.first_mismatch["index"] == [2] and rec.first_mismatch["output"] == 0


def test_mode_arguments_computed_once_per_comparison():
    # Every allowance attempt re-checks every output; the case's magnitude (costly for Hessenberg:
    # 2 n**2 SciPy reductions) and dot bounds are computed once all the same.
    calls = {"magnitude": 0, "dot_bound": 0}

    def count(name, value):
        def f(*args):
            calls[name] += 1
            return value
        return f
    x = np.arange(4, dtype=np.float32)
    case = _case(lambda x: (x + 1, x @ x), [x], primitives=("add",),
                 modes=(C.abs_rel(1, 1, "test"), C.dot_product(4)),
                 magnitude=count("magnitude", 4.0), dot_bound=count("dot_bound", [None, np.float64(14)]))
    ref = [x + 1, np.float32(14)]
    out = [ref[0] + 8, ref[1]]                 # 8 ulps of 4 away in output 0: no allowance explains it
    rec = Record(case=case.id, runner="xla:cpu")
    compare(case, "xla:cpu", [x], ref, out, rec, first_divergence=False)
    assert rec.outcome == "fail" and len(AM.for_runner("xla:cpu")) > 1
    assert calls == {"magnitude": 1, "dot_bound": 1}


def test_matmul_precision_allowance_on_tpu_runner_only():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 3)).astype(np.float32)
    case = _case(lambda a, b: a @ b, [a, b], modes=C.dot_product(64), primitives=("dot_general",),
                 dot_bound=lambda a, b: [np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))])
    # What one bf16 pass computes: inputs rounded to bf16, exact products, f32 result.
    bf = lambda x: x.astype(jnp.bfloat16).astype(np.float64)  # noqa: E731
    one_pass = [(bf(a) @ bf(b)).astype(np.float32)]
    exact = [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)]
    for runner, outcome in (("xla:tpu", "pass-with-allowance"), ("xla:cpu", "fail")):
        rec = Record(case=case.id, runner=runner)
        compare(case, runner, [a, b], exact, one_pass, rec, first_divergence=False)
        assert rec.outcome == outcome
    assert rec.max_abs_err > 0
    rec = Record(case=case.id, runner="xla:tpu")
    compare(case, "xla:tpu", [a, b], exact, one_pass, rec)
    assert rec.allowance == "matmul-precision-bf16"


def test_known_divergence_tpu_interpret_prng_zeros():
    case = Case(id="testing/prng", fn=None, build=lambda interpret: None, inputs=lambda rng: [], kind=PALLAS,
                modes=C.statistical(), primitives=("pallas_call", "prng_random_bits"))
    ref = [np.random.default_rng(0).integers(-2 ** 31, 2 ** 31, (16, 128)).astype(np.int32)]
    zeros = [np.zeros((16, 128), np.int32)]
    rec = Record(case=case.id, runner="pallas:tpu-interpret")
    compare(case, "pallas:tpu-interpret", [], ref, zeros, rec)
    assert rec.outcome == "known-divergence"
    assert rec.known_divergence["id"] == "tpu-interpret-prng-zeros"
    # Other runners returning zeros are plain failures; random bits pass.
    rec = Record(case=case.id, runner="pallas:mosaic-tpu")
    compare(case, "pallas:mosaic-tpu", [], ref, zeros, rec)
    assert rec.outcome == "fail"
    rec = Record(case=case.id, runner="pallas:tpu-interpret")
    compare(case, "pallas:tpu-interpret", [], ref, ref, rec)
    assert rec.outcome == "pass"


def test_divergence_version_ranges():
    d = DV.Divergence("x", "link", "s", runners=("xla:cpu",), jax_versions=("0.11", "0.12.1"))
    f = lambda v: DM.Failure("c", "xla:cpu", v, (), [np.zeros(1)], [np.zeros(1)], (0,), 0.0)  # noqa: E731
    assert [DM.matches(d, f(v)) for v in ("0.10.2", "0.11.0", "0.12.0.1", "0.12.1")] == [False, True, True, False]


def test_every_allowance_names_registered_models_and_every_model_is_used():
    assert {a.mode_change[0] for a in A.ALLOWANCES if a.mode_change} == set(AM.MODE_CHANGES)
    assert {a.requires for a in A.ALLOWANCES if a.requires} == set(AM.REQUIRES)


def test_every_divergence_names_a_registered_matcher_and_every_matcher_is_used():
    named = {d.matcher for d in DV.DIVERGENCES if d.matcher is not None}
    assert named == set(DM.MATCHERS)
    assert set(DM.XLA_CPU_SPECIAL_ARGS) == DV.XLA_CPU_SPECIAL_ARG_PRIMITIVES


def test_every_allowance_and_divergence_cites_a_source():
    for a in A.ALLOWANCES:
        assert a.sources and (a.variant or a.mode_change), a.name
    for d in DV.DIVERGENCES:
        assert d.link and d.runners, d.id
    assert {a.name for a in AM.for_runner("xla:cpu")} >= {"flush-to-zero", "fma-contraction"}
    assert "matmul-precision-bf16" not in {a.name for a in AM.for_runner("xla:cpu")}


def test_first_divergent_equation_on_xla_cpu():
    # neg is exact everywhere; the multiply produces a subnormal that XLA:CPU flushes; the add
    # after it only propagates the difference.
    def prog(x):
        y = -x
        z = y * np.float32(0.5)
        return z + np.float32(0)
    x = np.array([TINY, 2.0], np.float32)
    jaxpr = jax.make_jaxpr(prog)(x)
    div = first_divergent_eqn(jaxpr, [x], "xla:cpu")
    assert div["index"] == 1 and div["primitive"] == "mul"
    assert div["first_mismatch"]["index"] == [0]
    # Calls (jit, as jnp functions make) are inlined: the divergence is found inside the call.
    inner = jax.jit(lambda x: -x * np.float32(0.5))
    jaxpr = jax.make_jaxpr(lambda x: inner(x) + np.float32(1))(x)
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns][0] in ("jit", "pjit")
    div = first_divergent_eqn(jaxpr, [x], "xla:cpu")
    assert div["index"] == 1 and div["primitive"] == "mul"


def test_reference_unsupported_and_backend_unsupported_records():
    prim = jax.extend.core.Primitive("conformance_test_unknown")
    prim.def_abstract_eval(lambda x: x)
    prim.def_impl(lambda x: x)
    case = _case(lambda x: prim.bind(x), [np.zeros(2, np.float32)])
    rec = run_case(case, "xla:cpu")
    assert rec.outcome == "reference-unsupported" and "conformance_test_unknown" in rec.detail
    rec = run_case(case, "pallas:interpret")
    assert rec.outcome == "backend-unsupported" and "pallas" in rec.detail
    rec = run_case(case, "xla:tpu")
    assert rec.outcome == "backend-unsupported" and "tpu" in rec.detail


def test_excess_precision_replay_keeps_bf16_chains_in_f32():
    # bf16: 1 + 2^-8 rounds to 1 (ties to even), so (a + b) - a is 0 when every op rounds to bf16;
    # kept in f32 (GPU/TPU excess precision) the chain gives 2^-8 exactly.
    a = np.array([1.0], jnp.bfloat16)
    b = np.array([2.0 ** -8], jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda a, b: (a + b) - a)(a, b)
    plain, _ = reference_replay(jaxpr, [a, b])
    wide, _ = reference_replay(jaxpr, [a, b], Variant(excess=True))
    assert float(plain[0][0]) == 0.0 and float(wide[0][0]) == 2.0 ** -8
    assert wide[0].dtype == jnp.bfloat16
    # An explicit round trip through bf16 is removed: convert(convert(x, bf16), f32) -> x.
    x = np.array([1 + 2.0 ** -10], np.float32)
    jaxpr = jax.make_jaxpr(lambda x: (x.astype(jnp.bfloat16) * 2).astype(np.float32))(x)
    wide, _ = reference_replay(jaxpr, [x], Variant(excess=True))
    plain, _ = reference_replay(jaxpr, [x])
    assert float(plain[0][0]) == 2.0 and float(wide[0][0]) == 2 + 2.0 ** -9


def test_algebraic_rewrite_replay():
    x = np.array([100.0, 1.0], np.float32)
    jaxpr = jax.make_jaxpr(lambda x: jnp.log(jnp.exp(x)))(x)
    plain, _ = reference_replay(jaxpr, [x])
    rewritten, _ = reference_replay(jaxpr, [x], Variant(rewrites=True))
    assert np.isinf(plain[0][0]) and rewritten[0].tolist() == [100.0, 1.0]
    y = np.array([1e30, -3.0], np.float32)
    jaxpr = jax.make_jaxpr(lambda y: jnp.sqrt(y * y))(y)
    assert np.isinf(reference_replay(jaxpr, [y])[0][0][0])
    assert (reference_replay(jaxpr, [y], Variant(rewrites=True))[0][0] == np.abs(y)).all()


def test_fma_replay_rounds_once_even_at_f32_midpoints():
    from conformance.replay import fma_round_f32
    a = np.float32(1 + 2.0 ** -12)
    p = np.float64(a) * np.float64(a)                   # 1 + 2^-11 + 2^-24: an f32 midpoint, exact in f64
    lo, hi = np.float32(1 + 2.0 ** -11), np.float32(1 + 2.0 ** -11 + 2.0 ** -23)
    tiny = np.float64(2.0 ** -60)                        # below half an f64 ulp of p: fl64(p + tiny) == p
    got = fma_round_f32(np.array([p, p, p]), np.array([0.0, tiny, -tiny]))
    assert got.tolist() == [lo, hi, lo]                  # tie to even; otherwise the side of the exact sum
    assert float(np.float32(p + tiny)) == lo             # double rounding would have given lo


# --- GPU allowances on synthetic outputs (the recorded H100 ones: tests/test_conformance_gpu_evidence.py) ---

def _tf32_nearest(x):
    """float32 rounded to 10 explicit mantissa bits, to nearest even (written independently of
    conformance.replay: NumPy's float16 has the same 10-bit mantissa, so rounding the significand
    scaled into float16's normal range gives TF32's rounding of it)."""
    x = np.asarray(x, np.float32)
    m, e = np.frexp(x.astype(np.float64))                # x = m 2^e, 0.5 <= |m| < 1
    return (np.float16(m).astype(np.float64) * 2.0 ** e).astype(np.float32)


def test_tf32_allowance_explains_a_tf32_program_and_not_a_bf16_one():
    rng = np.random.default_rng(0)
    w1, w2 = rng.uniform(-1, 1, (16, 32)).astype(np.float32), rng.uniform(-1, 1, (32, 4)).astype(np.float32)
    x = rng.uniform(-1, 1, (8, 16)).astype(np.float32)

    def prog(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    def backend(rounding):   # every matmul's operands rounded, exact products, float32 result
        h = correctly_rounded("tanh", (rounding(x).astype(np.float64) @ rounding(w1).astype(np.float64)).astype(np.float32),
                              dtype=np.float32)
        return [(rounding(h).astype(np.float64) @ rounding(w2).astype(np.float64)).astype(np.float32)]

    case = _case(prog, [x, w1, w2], primitives=("dot_general",), modes=C.abs_rel(8, 8, "measured"))
    import interp
    ref = [np.asarray(interp.interpret(prog)(x, w1, w2))]
    rec = Record(case=case.id, runner="xla:cuda")
    compare(case, "xla:cuda", case.make_inputs(0), ref, backend(_tf32_nearest), rec, first_divergence=False)
    assert rec.outcome == "pass-with-allowance" and rec.allowance == "matmul-precision-tf32"

    def bf16(a):
        return np.asarray(a, np.float32).astype(jnp.bfloat16).astype(np.float32)
    rec = Record(case=case.id, runner="xla:cuda")
    compare(case, "xla:cuda", case.make_inputs(0), ref, backend(bf16), rec, first_divergence=False)
    assert rec.outcome == "fail"
    rec = Record(case=case.id, runner="xla:cpu")
    compare(case, "xla:cpu", case.make_inputs(0), ref, backend(_tf32_nearest), rec, first_divergence=False)
    assert rec.outcome == "fail"           # TF32 is no allowance of XLA:CPU


def _ulps_away(x, n):
    x = np.asarray(x, np.float32).copy()
    for _ in range(n):
        x = np.nextafter(x, np.float32(np.inf))
    return x


@pytest.mark.parametrize("n, outcome", [(2, "pass-with-allowance"), (3, "fail")])
def test_gpu_div_allowance_is_two_ulp(n, outcome):
    a, b = np.float32([1, 2, 3]), np.float32([3, 7, 11])
    case = _case(lambda a, b: a / b, [a, b], primitives=("div",))
    ref = [a / b]
    rec = Record(case=case.id, runner="xla:cuda")
    compare(case, "xla:cuda", case.make_inputs(0), ref, [_ulps_away(ref[0], n)], rec, first_divergence=False)
    assert rec.outcome == outcome
    if outcome != "fail":
        assert rec.allowance == "gpu-f32-div-sqrt"


def test_gpu_div_allowance_needs_a_division_in_the_program():
    a, b = np.float32([1, 2, 3]), np.float32([3, 7, 11])
    case = _case(lambda a, b: a + b, [a, b], primitives=("add",))
    ref = [a + b]
    rec = Record(case=case.id, runner="xla:cuda")
    compare(case, "xla:cuda", case.make_inputs(0), ref, [_ulps_away(ref[0], 1)], rec, first_divergence=False)
    assert rec.outcome == "fail"


def test_scatter_duplicates_any_update_but_nothing_else():
    x = np.zeros(5, np.float32)
    idx = np.array([1, 3, 1, 1, 4], np.int32)
    upd = np.float32([10, 20, 30, 40, 50])
    case = _case(lambda x, i, u: x.at[i].set(u), [x, idx, upd], primitives=("scatter",))
    ref = [np.float32([0, 40, 0, 20, 50])]                  # XLA:CPU's order: the last duplicate wins
    for got, outcome in [([0, 10, 0, 20, 50], "pass-with-allowance"), ([0, 30, 0, 20, 50], "pass-with-allowance"),
                         ([0, 15, 0, 20, 50], "fail"),        # no update is 15
                         ([0, 10, 10, 20, 50], "fail")]:      # element 2 is hit by nothing: stays 0
        rec = Record(case=case.id, runner="xla:cuda")
        compare(case, "xla:cuda", case.make_inputs(0), ref, [np.float32(got)], rec, first_divergence=False)
        assert rec.outcome == outcome, got
        if outcome != "fail":
            assert rec.allowance == "scatter-duplicate-order"


def test_replay_runs_inside_loops_and_remat():
    # The fma variant contracts mul+add inside a scan body and a remat: the evaluator's observer sees
    # nested equations (the old top-level walk evaluated scan/remat2 as one opaque rule).
    a, b, c = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23), np.float32(-1)

    def body(carry, _):
        return carry, jax.checkpoint(lambda p, q, r: p * q + r)(a, b, c)

    fn = lambda: lax.scan(body, np.float32(0), None, length=2)[1]
    jaxpr = jax.make_jaxpr(fn)()
    names = {e.primitive.name for e in jaxpr.jaxpr.eqns}
    assert "scan" in names
    fused, _ = reference_replay(jaxpr, [], Variant(fma=True))
    plain, _ = reference_replay(jaxpr, [], Variant())
    assert (fused[0] == np.float32(-(2.0 ** -46))).all() and (plain[0] == 0).all()


def test_observed_plans_are_not_shared_with_plain_evaluation():
    import interp
    x = np.float32([TINY / 4 * 3, 1.0])            # a subnormal input
    jaxpr = jax.make_jaxpr(lambda x: x * np.float32(2))(x)
    flushed, _ = reference_replay(jaxpr, [x], Variant(flush=True))
    assert flushed[0][0] == 0
    assert interp.eval_jaxpr(jaxpr, x)[0][0] == np.float32(TINY / 4 * 3) * 2     # the plain plan is unchanged


# Issue 22's table: XLA:CPU (JAX 0.12.0.1, jax.jit(lax.max/min) over a grid of specials) on an AMD
# EPYC with AVX512-BF16, s the smallest bfloat16 subnormal. On each DAZ tie it returns one of the two
# operands unflushed, not decided by their order (max(0, s) = 0 is the first, max(s, 0) = 0 the second).
_S = 2.0 ** -133
_ISSUE_22_TABLE = [   # (primitive, a, b, XLA:CPU)
    ("max", 0.0, _S, 0.0), ("max", -0.0, -_S, -_S), ("max", _S, 0.0, 0.0), ("max", _S, -0.0, -0.0),
    ("max", _S, -_S, -_S),
    ("min", 0.0, _S, _S), ("min", -_S, 0.0, 0.0), ("min", -_S, -0.0, -0.0), ("min", -_S, _S, _S),
]
BF16_DATA = os.path.join(os.path.dirname(__file__), "data", "xla_cpu_avx512_bf16")


def _bf16(values):
    import ml_dtypes
    return np.array(values, np.float32).astype(ml_dtypes.bfloat16)


def _bits(a):
    return np.asarray(a).view(np.uint16).tolist()


def _judge_xla_cpu(case, inputs, outs):
    import interp
    with case.context():
        ref = [np.asarray(interp.interpret(case.fn)(*inputs))]
    rec = Record(case=case.id, runner="xla:cpu")
    compare(case, "xla:cpu", inputs, ref, outs, rec, first_divergence=False)
    return rec, ref


@pytest.mark.parametrize("name", ["max", "min"])
def test_bf16_daz_ties_issue_22_table_is_one_of_the_operands(name):
    rows = [r for r in _ISSUE_22_TABLE if r[0] == name]
    x, y, host = (_bf16([r[i] for r in rows]) for i in (1, 2, 3))
    case = _case(getattr(lax, name), [x, y], primitives=(name,), name=f"bf16-{name}")
    rec, ref = _judge_xla_cpu(case, [x, y], [host])
    assert _bits(ref[0]) != _bits(host)              # (the table's results are not the exact ones)
    assert rec.outcome == "pass-with-allowance" and rec.allowance == "bf16-minmax-daz-compare", rec
    # Nothing wider: in every row, a zero or subnormal that is neither operand fails.
    for k in range(len(rows)):
        for other in (0.0, -0.0, _S, -_S, 2 * _S):
            if _bits(_bf16([other]))[0] in (_bits(x)[k], _bits(y)[k]):
                continue
            wrong = host.copy()
            wrong[k] = _bf16([other])[0]
            rec, _ = _judge_xla_cpu(case, [x, y], [wrong])
            assert rec.outcome == "fail", (name, rows[k], other, rec.allowance)


def test_bf16_daz_tie_in_clamp_may_take_either_operand_of_max_and_of_min():
    # clamp(lo, x, hi) = min(max(x, lo), hi): XLA:CPU on that host (tests/data/xla_cpu_avx512_bf16)
    # gives clamp(0, -1, s) = s (the min's tie took hi), clamp(-0, -s, 1) = -s (the max's took x),
    # clamp(s, -0, -s) = -0 (the max's took x, then the min's tie took it); exact: 0, -0, -s.
    lo, x, hi = _bf16([0.0, -0.0, _S]), _bf16([-1.0, -_S, -0.0]), _bf16([_S, 1.0, -_S])
    host = _bf16([_S, -_S, -0.0])
    case = _case(lax.clamp, [lo, x, hi], primitives=("clamp",), name="bf16-clamp")
    rec, ref = _judge_xla_cpu(case, [lo, x, hi], [host])
    assert _bits(ref[0]) == _bits(_bf16([0.0, -0.0, -_S]))
    assert rec.outcome == "pass-with-allowance" and rec.allowance == "bf16-minmax-daz-compare", rec
    for k, other in ((0, -_S), (1, _S), (2, 2 * _S)):    # a zero or subnormal no tie offers
        wrong = host.copy()
        wrong[k] = _bf16([other])[0]
        assert _judge_xla_cpu(case, [lo, x, hi], [wrong])[0].outcome == "fail"


def _recorded_bf16(version):
    from conformance import outputs as saved
    ins = {(c, s): v for c, s, v in saved.read(os.path.join(BF16_DATA, "inputs-xla_cpu.npz"))}
    return [(c, s, ins[(c, s)], outs)
            for c, s, outs in saved.read(os.path.join(BF16_DATA, f"outputs-xla_cpu-jax{version}.npz"))]


# JAX 0.11.2 and 0.12.0.1 return DAZ ties unflushed; JAX 0.10.2's XLA:CPU flushed the same results
# to zero on that host (recorded too: the flush-to-zero allowance explains it).
@pytest.mark.parametrize("version, allowance", [("0.10.2", "flush-to-zero"), ("0.11.2", "bf16-minmax-daz-compare"),
                                                ("0.12.0.1", "bf16-minmax-daz-compare")])
def test_recorded_avx512_bf16_max_min_clamp_are_explained_and_nothing_wider(version, allowance, monkeypatch):
    """Every record XLA:CPU gave on the AVX512-BF16 host (issue 27: clamp too, every shape) passes
    with that one allowance (some also with flush-to-zero, tried first in a run); the same output
    with one differing element replaced by a subnormal that is neither operand, or with a decided
    element changed, fails."""
    from conformance.cases import all_cases
    cases = all_cases("nightly")
    monkeypatch.setattr(A, "ALLOWANCES", (A.BY_NAME[allowance],))
    records = _recorded_bf16(version)
    assert len(records) >= 7
    for case_id, seed, inputs, outs in records:
        case = cases[case_id]
        rec, ref = _judge_xla_cpu(case, inputs, outs)
        assert _bits(ref[0]) != _bits(outs[0])
        assert rec.outcome == "pass-with-allowance" and rec.allowance == allowance, \
            (case_id, rec.allowance, rec.detail)
        out, r = np.asarray(outs[0]).reshape(-1), np.asarray(ref[0]).reshape(-1)
        differ = np.flatnonzero(out.view(np.uint16) != r.view(np.uint16))
        k = int(differ[0])
        operands = {int(np.broadcast_to(a, np.shape(outs[0])).reshape(-1)[k].view(np.uint16)) for a in inputs}
        wrong_tie = next(v for v in _bf16([_S, -_S, 2 * _S, -2 * _S]) if int(v.view(np.uint16)) not in operands)
        decided = np.flatnonzero(np.abs(r.astype(np.float32)) >= 2.0 ** -126)
        for spoil_at, value in ((k, wrong_tie), (int(decided[0]), r[decided[0]] * 2 + 1)):
            spoiled = out.copy()
            spoiled[spoil_at] = value
            rec, _ = _judge_xla_cpu(case, inputs, [spoiled.reshape(np.shape(outs[0]))])
            assert rec.outcome == "fail", (case_id, spoil_at, rec.allowance)


def test_flush_replay_moves_values_unflushed_through_calls():
    # Under DAZ a sort compares flushed keys but moves the original values: its output is a
    # permutation of its input whether or not the sort sits inside a jit (calls and control flow
    # are transparent to the replay; flushing at a call's boundary would zero the subnormals).
    import ml_dtypes
    from conformance.replay import Variant, reference_replay
    s = 2.0 ** -133
    x = np.array([[s, -0.0, 1.0, -s, 0.5]], ml_dtypes.bfloat16)
    plain = jax.make_jaxpr(lambda a: lax.sort(a, dimension=1))(x)
    called = jax.make_jaxpr(jax.jit(lambda a: lax.sort(a, dimension=1)))(x)
    assert any(e.primitive.name in ("jit", "pjit") for e in called.jaxpr.eqns)
    for jaxpr in (plain, called):
        out = reference_replay(jaxpr, [x], Variant(flush=True))[0][0]
        assert sorted(out.view(np.uint16).ravel().tolist()) == sorted(x.view(np.uint16).ravel().tolist())


def test_flush_replay_reaches_scatter_combiners():
    # A scatter's update_jaxpr is a combiner its rule applies itself (nothing nested is evaluated):
    # the flush replay flushes the scatter as one equation. XLA:CPU (JAX 0.10.2, found by the program
    # fuzzer) returns -0 for min(-2^-133, 0.0016) in a bfloat16 scatter-min.
    import ml_dtypes
    s = -(2.0 ** -133)
    x = np.array([0.0, s, 0.0], ml_dtypes.bfloat16)
    u = np.array([0.0015564], ml_dtypes.bfloat16)
    closed = jax.make_jaxpr(lambda x, i, u: x.at[i].min(u))(x, np.array([1], np.int32), u)
    assert any(e.primitive.name == "scatter-min" for e in closed.jaxpr.eqns)
    out = reference_replay(closed, [x, np.array([1], np.int32), u], Variant(flush=True))[0][0]
    assert out.view(np.uint16).tolist() == [0, 0x8000, 0]


def test_matmul_precision_widens_abs_rel_only_where_the_case_gives_its_matmul_sensitivity():
    """TF32 widens an ABS_REL mode by (2u + u^2) x the case's matmul sensitivity (u = 2^-11), and only
    a mode that says the case gives one (dot_sensitivity); by hand at one element of sensitivity 1."""
    from conformance.checks import complies
    change = AM.mode_change(A.BY_NAME["matmul-precision-tf32"])
    plain = C.abs_rel(8, 8, "measured")
    assert change(plain) == plain and not plain.needs_dot_bound
    tapped = C.abs_rel(8, 8, "measured", dot_sensitivity=True)
    wide = change(tapped)
    assert (wide.input_bits, wide.needs_dot_bound, tapped.needs_dot_bound) == (11, True, False)
    assert "11-bit" in wide.describe()
    u, eps = 2.0 ** -11, 2.0 ** -23
    ref = np.array([0.0], np.float32)
    tol = 8 * eps * 1.0 + (2 * u + u * u) * 1.0          # magnitude 1, |ref| 0, sensitivity 1
    inside, outside = np.array([0.99 * tol], np.float32), np.array([1.01 * tol], np.float32)
    assert complies(wide, ref, inside, magnitude=1.0, bound=np.array([1.0])).all()
    assert not complies(wide, ref, outside, magnitude=1.0, bound=np.array([1.0])).any()
    assert not complies(tapped, ref, inside, magnitude=1.0).any()          # without the allowance: f32 only


def test_fma_replay_covers_float64_and_integer_pow():
    """XLA:CPU contracts float64 a * b + c, c - a * b and integer_pow(a, 3) + c into one FMA: the
    fma replay gives its bits (the exact value of a * b + c rounded once: Fraction arithmetic)."""
    from fractions import Fraction
    from conformance.replay import fma_f64
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-3, 3, 500) for _ in range(3))
    exact = np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)])
    assert (fma_f64(a, b, c) == exact).all()
    from tests.support import x64
    with x64():
        for f in (lambda a, b, c: a * b + c, lambda a, b, c: c - a * b, lambda a, b, c: lax.integer_pow(a, 3) + c):
            closed = jax.make_jaxpr(f)(a, b, c)
            got = np.asarray(jax.jit(f)(a, b, c))
            fused = reference_replay(closed, [a, b, c], Variant(fma=True))[0][0]
            assert fused.dtype == np.float64
            assert (got == fused).all() or (got == reference_replay(closed, [a, b, c])[0][0]).all()


def test_nextafter_under_daz_is_what_xla_cpu_computes():
    # every pair of float32 special values (subnormals, zeros, infinities, NaN...): XLA:CPU compares
    # the flushed operands and steps from x's own bits
    from conformance.replay import nextafter_under_daz
    from conformance.values import special_values
    v = special_values(np.float32)
    x, y = (g.ravel() for g in np.meshgrid(v, v))
    got = np.asarray(jax.jit(lax.nextafter)(x, y))
    model = nextafter_under_daz(x, y)
    same = (got.view(np.uint32) == model.view(np.uint32)) | (np.isnan(got) & np.isnan(model))
    assert same.all(), list(zip(x[~same][:4], y[~same][:4], got[~same][:4], model[~same][:4]))
