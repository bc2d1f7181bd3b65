"""Fusion: the Pallas fuser and block-scaled matmul.

Fuser: every program of conformance/cases/fusion.py FUSER_PROGRAMS (one per block-spec rule
family) is evaluated fused (``fuser.fuse``: input fusion and epilogue pulled into the
pallas_call) and unfused (the ``Fusible`` call with its unfused meaning) by the reference; the two
must agree bit for bit, at the outputs and at every intermediate the fused-vs-unfused report
(conformance/fusion_diff.py) pairs, and each must agree bit for bit with XLA:CPU running the same
program (the fused one through Pallas' HLO interpret mode). The programs do exact or
single-IEEE-operation arithmetic only, so XLA:CPU is exact on them. PRNG inside a fusion is the one
case where fused and unfused differ by design (the fuser folds block indices into the key): checked
against that rule, and the report names random_bits. Deliberately wrong fusions (custom_fusion eval
rules that round differently) check that the report names the right equation, block and values.
What the installed fuser refuses (spec/fusion.py FUSER_LIMITS) is pinned on both JAX versions.

Block-scaled matmul: every BlockScaleConfig mode against an independent exact oracle (Python
Fractions, rounded once with tests/test_lax_reductions.nearest) bitwise, and against XLA:CPU under
the DOT_PRODUCT bound (JAX 0.12: JAX 0.10.2 has no CPU lowering for scaled_matmul). The
quantisation path (ordinary primitives) is compared with XLA:CPU bit for bit, XLA:CPU's two
departures explained element by element: nvfp4 data computed with float32 reciprocals (both
versions), bf16 mxfp8 zero blocks under flush-to-zero (JAX 0.10.2).
"""
from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import interp
from conformance import checks
from conformance.case import rng_for
from conformance import fusion_diff as FD
from conformance.cases import fusion as F
from conformance.values import assert_same_bits
from spec import compliance as C
from spec import fusion as S
from tests.support import xla_cpu
from tests.test_lax_reductions import nearest

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3])
# JAX 0.10.2: scaled_matmul has no MLIR lowering for cpu (only cuda): nothing to compare with.
XLA_SCALED_MATMUL = JAX_VERSION >= (0, 11, 0)
needs_cpu_scaled_matmul = pytest.mark.skipif(
    not XLA_SCALED_MATMUL, reason="JAX 0.10.2 has no XLA:CPU lowering of scaled_matmul")


# JAX 0.10.2 has no mxfp4 BlockScaleConfig (get_scaled_dot_general_config: "Unsupported mode").
needs_mxfp4 = pytest.mark.skipif(not F._has_mode("mxfp4"), reason="this JAX has no mxfp4 BlockScaleConfig")


def _mode_param(mode, *rest):
    return pytest.param(mode, *rest, marks=needs_mxfp4) if mode == "mxfp4" else (mode, *rest)


def _leaves(x):
    return [np.asarray(v) for v in jax.tree.leaves(x)]


def _assert_all_bits(actual, expected, what):
    a, e = _leaves(actual), _leaves(expected)
    assert len(a) == len(e), what
    for i, (x, y) in enumerate(zip(a, e)):
        assert_same_bits(x, y, err_msg=f"{what}, output {i}")


def _eqn_names(jaxpr):
    names = []
    for e in jaxpr.eqns:
        names.append(e.primitive.name)
        for v in e.params.values():
            sub = getattr(v, "jaxpr", None)
            if sub is not None and hasattr(sub, "eqns"):
                names += _eqn_names(sub)
            elif hasattr(v, "eqns"):
                names += _eqn_names(v)
    return names


# ---------------------------------------------------------------------------------- the fuser
EXACT_PROGRAMS = [n for n in F.FUSER_PROGRAMS if n not in F.FUSED_DIFFERS_BY_DESIGN]


@pytest.mark.parametrize("name", EXACT_PROGRAMS)
def test_fused_and_unfused_agree_bitwise(name):
    """Fused and unfused agree at the outputs and at every paired intermediate (the equation
    pairing of conformance/fusion_diff.py raises no false alarm), and each agrees with XLA:CPU."""
    args = F.FUSER_PROGRAMS[name][1](rng_for(f"fusion/fuser/{name}", 0))
    fused, unfused = F.fuser_program(name), F.fuser_program(name, fused=False)
    report, ref_fused, ref_unfused = FD.run_both(fused, unfused, args)
    _assert_all_bits(ref_fused, ref_unfused, f"{name}: reference fused vs unfused")
    assert report["agree"] and report["first_differing_eqn"] is None, FD.format_report(report)
    # At least the kernel's own 2 * x is compared at every grid step (more where fusions compute).
    assert report["pairs"] >= 1 and report["compared"] >= report["pairs"], FD.format_report(report)
    _assert_all_bits(ref_fused, xla_cpu(fused, *args), f"{name}: fused, reference vs Pallas HLO interpret")
    _assert_all_bits(ref_unfused, xla_cpu(unfused, *args), f"{name}: unfused, reference vs XLA:CPU")


def test_fused_program_shapes():
    """The fused program really is one pallas_call holding the fusions (and a scalar-prefetch
    operand for the dynamic index); the unfused one holds the Fusible call."""
    args = F.FUSER_PROGRAMS["dynamic_slice"][1](rng_for("x", 0))
    fused = jax.make_jaxpr(F.fuser_program("dynamic_slice"))(*args).jaxpr
    # (a broadcast_in_dim gives the prefetched index its leading unit dimension)
    assert [e.primitive.name for e in fused.eqns][-1] == "pallas_call"
    kernel = fused.eqns[-1].params["jaxpr"]
    assert "dynamic_slice" not in _eqn_names(fused)
    assert len(kernel.invars) == 3     # scalar-prefetch index, x block, output block
    unfused = jax.make_jaxpr(F.fuser_program("dynamic_slice", fused=False))(*args).jaxpr
    names = [e.primitive.name for e in unfused.eqns]
    assert ("call_hi_primitive" if JAX_VERSION >= (0, 11, 0) else "fusible") in names


def test_prng_in_fusion_follows_the_fusers_block_rule():
    """random_bits pulled into a kernel draws per block from the key with the block indices folded
    in (jax/_src/pallas/fuser/block_spec.py _random_bits_eval_rule): fused and unfused differ by
    design. The reference's fused result is that rule, rebuilt here block by block on XLA:CPU."""
    x, kd = F.FUSER_PROGRAMS["prng"][1](rng_for("fusion/fuser/prng", 0))
    ref_fused = interp.interpret(F.fuser_program("prng"))(x, kd)
    ref_unfused = interp.interpret(F.fuser_program("prng", fused=False))(x, kd)
    assert_same_bits(ref_unfused, xla_cpu(F.fuser_program("prng", fused=False), x, kd))
    assert not np.array_equal(ref_fused, ref_unfused)

    def blockwise(x, kd):
        key = jax.random.wrap_key_data(kd, impl="threefry2x32")
        rows = []
        for i in range(F.M // F.BM):
            row = []
            for j in range(F.N // F.BN):
                k = jax.random.fold_in(jax.random.fold_in(key, i), j)
                row.append(jax.random.uniform(k, (F.BM, F.BN), jnp.float32))
            rows.append(jnp.concatenate(row, axis=1))
        return (x + jnp.concatenate(rows, axis=0)) * 2
    assert_same_bits(ref_fused, xla_cpu(blockwise, x, kd))


def test_prng_fusion_diff_names_random_bits():
    """The fused-vs-unfused report of the PRNG program localises the designed difference: the
    first differing equation is random_bits, at grid step (0, 0), on the block [0:8, 0:128]."""
    report = FD.diff_case("fusion/fuser/prng")
    d = report["first_differing_eqn"]
    assert not report["agree"] and d is not None, FD.format_report(report)
    assert (d["primitive"], d["block"], d["window"]) == ("random_bits", [0, 0], [[0, F.BM], [0, F.BN]])


def test_fusion_diff_command(capsys):
    """``python -m conformance.fusion_diff CASE_ID``: the report, exit status 0 when they agree."""
    assert FD.main(["fusion/fuser/slice"]) == 0
    assert capsys.readouterr().out.startswith("fused and unfused agree")
    with pytest.raises(KeyError):
        FD.diff_case("fusion/excess_precision/add_chain/bfloat16")


# A deliberately wrong fusion: the custom_fusion ``third`` means x / 3 (float32), but its eval rule
# (what fuser.fuse puts in the kernel) first rounds its operand to bfloat16. The fused program then
# differs from the unfused one, and the report must name the division.
def _third(x):
    return x / 3


def _wrong_third():
    from jax.experimental.pallas import fuser
    third = fuser.custom_fusion(_third)
    third.def_pull_block_spec(lambda bss: bss)
    third.def_push_block_spec(lambda bss: bss)
    third.def_eval_rule(lambda ctx, x: (x.astype(jnp.bfloat16).astype(jnp.float32) / 3,))
    return third


_THIRD_LINE = f"{_third.__code__.co_filename}:{_third.__code__.co_firstlineno + 1}:"


@pytest.mark.parametrize("where", ["input", "epilogue"])
def test_fusion_diff_names_the_wrong_equation(where):
    from jax.experimental.pallas import fuser
    third, k = _wrong_third(), F.fusible_double()
    prog = (lambda x, y: k(third(x) + y) - y) if where == "input" else (lambda x, y: third(k(x) - y) + y)
    rng = rng_for(f"fusion_diff/{where}", 0)
    x, y = F._f32(rng, (F.M, F.N)), F._f32(rng, (F.M, F.N))
    report = FD.diff(fuser.fuse(prog), prog, (x, y))
    d = report["first_differing_eqn"]
    assert not report["agree"] and d is not None, FD.format_report(report)
    assert d["primitive"] == "div" and d["unfused"]["source"].startswith(_THIRD_LINE), FD.format_report(report)
    # The first grid step and its window; the values are the wrong rule's and x / 3 there.
    assert d["block"] == [0, 0] and d["window"] == [[0, F.BM], [0, F.BN]]
    i = tuple(d["index"])
    operand = x[i] if where == "input" else x[i] * 2 - y[i]   # exact here: (2x - y) is one rounding
    operand = np.float32(operand)
    assert d["unfused_value"] == float(operand / np.float32(3))
    assert d["fused_value"] == float(np.float32(operand.astype(ml_dtypes.bfloat16)) / np.float32(3))
    assert d["unfused_value"] != d["fused_value"]


def test_reference_runner_compares_fused_with_unfused():
    """In the conformance run, the reference runner of a fuser case evaluates the fused and the
    unfused program and passes only when they agree bit for bit; the deliberately wrong fusion is
    a fail whose record names the division as the first divergent equation."""
    import dataclasses
    from jax.experimental.pallas import fuser
    from conformance.execute import run_case
    case = next(c for c in F.cases() if c.id == "fusion/fuser/elementwise")
    assert case.unfused_fn is not None
    rec = run_case(case, "reference")
    assert rec.outcome == "pass" and "fused == unfused" in rec.detail, rec

    third, k = _wrong_third(), F.fusible_double()
    prog = lambda x, y: k(third(x) + y) - y
    wrong = dataclasses.replace(case, id="fusion/fuser/wrong_third", build=lambda interpret: fuser.fuse(prog),
                                unfused_fn=prog)
    rec = run_case(wrong, "reference")
    assert rec.outcome == "fail" and rec.mismatches > 0, rec
    assert rec.first_divergent_eqn["primitive"] == "div", rec.first_divergent_eqn
    assert rec.first_mismatch["reference"] != rec.first_mismatch["backend"]


def test_fusion_diff_names_the_first_inconsistent_block():
    """A deliberately wrong block-spec rule: the custom_fusion ``-x`` pulls the neighbouring block
    column of x. Its own values are a correct block of -x (the wrong one), so the first equation
    whose fused values match no block the step could compute is the add that combines them with
    the right block of y; the report gives the declared window and the wrong one."""
    from jax.experimental.pallas import fuser
    neg1 = fuser.custom_fusion(lambda x: x * -1)

    def wrong_pull(transforms):
        t, = transforms
        inner = t.block_index_transform

        def neighbour(*idx):
            i, j = inner(*idx)
            return i, 1 - j
        return (t.replace(block_index_transform=neighbour),)
    neg1.def_pull_block_spec(wrong_pull)
    neg1.def_eval_rule(lambda ctx, x: (x * -1,))
    k = F.fusible_double()
    prog = lambda x, y: k(neg1(x) + y)   # noqa: E731
    rng = rng_for("fusion_diff/wrong_block", 0)
    x, y = F._f32(rng, (F.M, F.N)), F._f32(rng, (F.M, F.N))
    report = FD.diff(fuser.fuse(prog), prog, (x, y))
    d = report["first_differing_eqn"]
    assert not report["agree"] and d is not None, FD.format_report(report)
    assert (d["primitive"], d["block"], d["window"]) == ("add", [0, 0], [[0, F.BM], [0, F.BN]])
    assert d["other_windows"] == [[[0, F.BM], [F.BN, F.BN]]]
    r, c = d["index"]
    assert d["fused_value"] == float(-x[r, F.BN + c] + y[r, c])
    assert d["unfused_value"] == float(-x[r, c] + y[r, c])


# fusion_diff runs in the reference's own evaluator (conformance/observe.py: a watcher of
# interp.Options.observer), so every equation it records, in calls, Fusible bodies, custom_fusions
# and kernel bodies, is a plan's step: parameters checked when the plan is built, the step hooks
# applied, the result checked against the equation's avals. (Its former walk of its own looked
# rules up itself, entered calls without their rules and ran neither hooks nor result checks: each
# test below failed on it.)
def test_fusion_diff_runs_the_evaluators_step_hooks():
    """Under uninitialized="raise" a lax.empty array written in full before it is read, inside a
    jit call, is no read of never-written memory (the step hooks track the written elements: the
    former walk raised here), and a read of never-written elements raises as the evaluator does."""
    opts = interp.Options(uninitialized="raise")
    x = np.arange(4, dtype=np.float32)
    written = jax.jit(lambda x: lax.dynamic_update_slice(lax.empty((4,), jnp.float32), x, (0,)))
    prog = lambda x: written(x) * 2   # noqa: E731
    report = FD.diff(prog, prog, (x,), options=opts)
    assert report["agree"] and report["pairs"] == 2, FD.format_report(report)   # update, mul
    assert_same_bits(FD.record(prog, (x,), opts)[0][0], x * 2)

    partly = jax.jit(lambda x: lax.dynamic_update_slice(lax.empty((6,), jnp.float32), x, (0,)).sum())
    with pytest.raises(interp.UninitializedReadError) as plain:
        interp.eval_jaxpr(jax.make_jaxpr(partly)(x), x, options=opts)
    with pytest.raises(interp.UninitializedReadError) as watched:
        FD.record(partly, (x,), opts)
    assert "'reduce_sum' reads elements" in str(plain.value) and str(watched.value) == str(plain.value)


def test_fusion_diff_checks_parameters_as_a_plan_does(monkeypatch):
    """A custom_fusion (which fusion_diff enters) whose rule does not declare one of its
    parameters is refused, naming the parameter, exactly as a plan refuses it. The rule here lacks
    eval_rule: it stands for a reference written before JAX added a parameter."""
    from interp import registry

    def without_eval_rule(eqn, *args, jaxpr, num_consts, pallas_jaxpr, pull_block_spec_rule,
                          push_block_spec_rule, pallas_num_consts=0, in_tree=None, out_tree=None,
                          kernel_out_tree=None):
        raise AssertionError("not reached: the plan refuses the equation when it is built")
    monkeypatch.setitem(registry.RULES, "custom_fusion", without_eval_rule)
    third, k = _wrong_third(), F.fusible_double()
    prog = lambda x, y: k(third(x) + y) - y   # noqa: E731
    x = y = np.ones((F.M, F.N), np.float32)
    with pytest.raises(interp.UnsupportedPrimitiveError) as plain:
        interp.eval_jaxpr(jax.make_jaxpr(prog)(x, y), x, y)
    with pytest.raises(interp.UnsupportedPrimitiveError) as watched:
        FD.diff(prog, prog, (x, y))
    assert "'eval_rule' not implemented" in str(plain.value) and str(watched.value) == str(plain.value)


def test_fusion_diff_checks_kernel_results_as_a_plan_does(monkeypatch):
    """A rule returning the wrong dtype (a bug in the reference) inside a fused kernel, at every
    grid step, is reported as the plan reports it, not recorded and compared."""
    from interp import registry
    from jax.experimental.pallas import fuser

    def sin_in_float64(eqn, x, *, accuracy=None):
        return np.sin(np.asarray(x, np.float64))
    monkeypatch.setitem(registry.RULES, "sin", sin_in_float64)
    k = F.fusible_double()
    prog = fuser.fuse(lambda x: k(jnp.sin(x)))
    x = np.ones((F.M, F.N), np.float32)
    closed = jax.make_jaxpr(prog)(x)
    kernel = next(e for e in closed.jaxpr.eqns if e.primitive.name == "pallas_call").params["jaxpr"]
    assert "sin" in {e.primitive.name for e in kernel.eqns}   # pulled into the kernel
    with pytest.raises(AssertionError) as plain:
        interp.eval_jaxpr(closed, x)
    with pytest.raises(AssertionError) as watched:
        FD.record(prog, (x,))
    assert "'sin' returned output 0 as float64" in str(plain.value) and str(watched.value) == str(plain.value)


def test_fusion_diff_block_correspondence():
    """Restricting an unfused value to a kernel step's block: the one window of the operands whose
    array and block shapes match; several windows (a transpose of a square array) are told apart
    by value, else the declared window is taken; squeezed block dimensions index."""
    u = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    blocked = (("blocked", 8, 0), ("blocked", 16, 0))

    def operand(win):
        return ((32, 32), (8, 16), blocked, win)
    block, win, others = FD._block(u, u[8:16, 16:32], [operand(((8, 8), (16, 16)))])
    assert win == ((8, 8), (16, 16)) and others == () and np.array_equal(block, u[8:16, 16:32])
    two = [operand(((0, 8), (0, 16))), operand(((0, 8), (16, 16)))]
    block, win, others = FD._block(u, u[:8, 16:], two)            # the value picks the second
    assert win == ((0, 8), (16, 16)) and others == (((0, 8), (0, 16)),)
    block, win, others = FD._block(u, u[:8, :16] + 1, two, declared=[operand(((0, 8), (16, 16)))])
    assert win == ((0, 8), (16, 16)) and np.array_equal(block, u[:8, 16:])   # no match: the declared
    u3 = u.reshape(4, 8, 32)
    squeezed = (("squeezed", 1, 0), ("blocked", 8, 0), ("blocked", 16, 0))
    block, _, _ = FD._block(u3, u3[2, :, 16:], [((4, 8, 32), (1, 8, 16), squeezed, ((2, 1), (0, 8), (16, 16)))])
    assert np.array_equal(block, u3[2, :, 16:])
    assert FD._block(u, u[:4, :4], [operand(((0, 8), (0, 16)))])[0] is None   # no operand has that block


def test_fuser_reduction_rules():
    """What the installed fuser does with reductions (spec/fusion.py FUSER_REDUCTIONS_*), on both
    JAX versions: reduce_sum is pulled into a kernel (input fusion) and pushed through an epilogue
    when the kernel's block spans the reduced axes (cases epilogue_reduce_sum_*); over a partial
    block it raises; reduce_max / reduce_min / reduce_prod / argmax have no block-spec rule."""
    from jax.experimental.pallas import fuser
    x = np.ones((F.M, F.N), np.float32)
    x3 = np.ones((F.M, F.N, 4), np.float32)
    k = F.fusible_double()
    with pytest.raises(NotImplementedError, match="reduce_sum over partial blocks"):
        jax.make_jaxpr(fuser.fuse(lambda v: k(v).sum(axis=1)))(x)
    for prim, epilogue in (("reduce_max", lambda o: o.max(axis=1)), ("reduce_min", lambda o: o.min(axis=1)),
                           ("argmax", lambda o: jnp.argmax(o, axis=1))):
        kk = F.fusible_double(block=(F.BM, F.N))   # a block spanning the reduced axis
        with pytest.raises(NotImplementedError, match=prim):
            jax.make_jaxpr(fuser.fuse(lambda v: epilogue(kk(v))))(x)
    for prim, fusion in (("reduce_max", lambda v: v.max(axis=-1)), ("reduce_prod", lambda v: v.prod(axis=-1))):
        with pytest.raises(NotImplementedError, match=prim):
            jax.make_jaxpr(fuser.fuse(lambda v: k(fusion(v))))(x3)
    from jax._src.pallas.fuser import block_spec
    for rules in (block_spec.pull_block_spec_rules, block_spec.push_block_spec_rules):
        names = {p.name for p in rules}
        assert "reduce_sum" in names and not names & set(S.FUSER_REDUCTIONS_WITHOUT_RULES)


def test_fuser_limits():
    """spec/fusion.py FUSER_LIMITS, pinned on the installed fuser: the refused epilogues raise as
    stated, and the version-dependent rule tables are as stated (a JAX that adds a rule fails
    this test: then the rule gets a program in FUSER_PROGRAMS)."""
    from jax.experimental.pallas import fuser
    from jax._src.pallas.fuser import block_spec
    x = np.ones((F.M, F.N), np.float32)
    k = F.fusible_double()
    with pytest.raises(AttributeError, match="NoBlockSpec"):
        jax.make_jaxpr(fuser.fuse(lambda a, b: jnp.concatenate([k(a), b], axis=0)))(x, x)
    with pytest.raises(NotImplementedError, match="reshape not supported yet"):
        jax.make_jaxpr(fuser.fuse(lambda a: k(a).reshape(2 * F.M, F.N // 2)))(x)
    with pytest.raises(NotImplementedError, match="dot_general not supported yet"):
        jax.make_jaxpr(fuser.fuse(lambda a, w: k(a) @ w))(x, np.ones((F.N, 128), np.float32))
    for fn in (lambda a: k(-a), lambda a: -k(a)):
        with pytest.raises(NotImplementedError, match="neg"):
            jax.make_jaxpr(fuser.fuse(fn))(x)
    pull = {p.name for p in block_spec.pull_block_spec_rules}
    push = {p.name for p in block_spec.push_block_spec_rules}
    assert {n: n in push for n in S.FUSER_PUSH_RULE_SINCE} == {
        n: JAX_VERSION >= since for n, since in S.FUSER_PUSH_RULE_SINCE.items()}
    assert {n: n in pull and n in push for n in S.FUSER_RULES_SINCE} == {
        n: JAX_VERSION >= since for n, since in S.FUSER_RULES_SINCE.items()}
    assert not {"slice", "dynamic_slice", "squeeze", "tile", "iota", "bitcast_convert_type",
                "random_bits"} & push


def test_custom_fusion_means_its_function():
    from jax.experimental.pallas import fuser

    @fuser.custom_fusion
    def shifted(x):
        return x * 2 + 1

    shifted.def_pull_block_spec(lambda bss: bss)
    shifted.def_eval_rule(lambda ctx, x: (x * 2 + 1,))

    fn = lambda x: shifted(x) - 1   # noqa: E731
    assert "custom_fusion" in [e.primitive.name for e in jax.make_jaxpr(fn)(np.zeros(4, np.float32)).jaxpr.eqns]
    x = np.arange(-8, 8, dtype=np.float32) / 4
    assert_same_bits(interp.interpret(fn)(x), x * 2)   # exact arithmetic: x*2+1-1 == 2x


# ---------------------------------------------------------------------------- block-scaled matmul
def _exact_scaled_matmul(a, b, sa, sb, out_dtype):
    """Fractions: sum_k (a sa)(b sb) per output element, rounded once (independent oracle)."""
    def deq(x, s):
        s = np.repeat(s.astype(np.float64), x.shape[-1] // s.shape[-1], -1)
        return np.vectorize(Fraction, otypes=[object])(x.astype(np.float64)) * \
            np.vectorize(Fraction, otypes=[object])(s)
    da, db = deq(a, sa), deq(b, sb)
    out = np.empty(a.shape[:2] + (b.shape[1],), out_dtype)
    for i in np.ndindex(out.shape):
        out[i] = nearest(sum(da[i[0], i[1]] * db[i[0], i[2]]), out_dtype)
    return out


MODES = [_mode_param("mxfp8", ml_dtypes.float8_e4m3fn), _mode_param("mxfp8", ml_dtypes.float8_e5m2),
         _mode_param("nvfp4", None), _mode_param("mxfp4", None)]


def _mode_inputs(mode, data_type, seed, extreme=False):
    rng = rng_for(f"scaled_matmul/{mode}/{data_type}", seed)
    a, b, sa, sb = F._scaled_matmul_inputs(rng, mode, k=64)
    if data_type is not None:     # mxfp8 with e5m2 data: same scales, other data format
        fmax = float(ml_dtypes.finfo(data_type).max)
        a, b = [np.clip(rng.standard_normal(x.shape) * 4, -fmax, fmax).astype(data_type) for x in (a, b)]
    if extreme:   # the whole e8m0 range: results overflow and underflow float32
        sa = np.exp2(rng.integers(-127, 128, sa.shape).astype(np.float64)).astype(sa.dtype)
        sb = np.exp2(rng.integers(-127, 128, sb.shape).astype(np.float64)).astype(sb.dtype)
    return a, b, sa, sb


@pytest.mark.parametrize("mode,data_type", MODES)
@pytest.mark.parametrize("out_dtype", [np.float32, jnp.bfloat16, np.float16])
def test_scaled_matmul_is_the_rounded_exact_dot(mode, data_type, out_dtype):
    a, b, sa, sb = _mode_inputs(mode, data_type, 0)
    fn = lambda *xs: jax.nn.scaled_matmul(*xs, preferred_element_type=out_dtype)   # noqa: E731
    got = interp.interpret(fn)(a, b, sa, sb)
    assert_same_bits(got, _exact_scaled_matmul(a, b, sa, sb, np.dtype(out_dtype)))


def test_scaled_matmul_extreme_scales():
    a, b, sa, sb = _mode_inputs("mxfp8", None, 1, extreme=True)
    got = interp.interpret(jax.nn.scaled_matmul)(a, b, sa, sb)
    exact = _exact_scaled_matmul(a, b, sa, sb, np.dtype(np.float32))
    assert np.isinf(exact).any()   # these inputs overflow float32 in some elements
    assert_same_bits(got, exact)


@needs_cpu_scaled_matmul
@pytest.mark.parametrize("mode,data_type", MODES)
def test_scaled_matmul_against_xla_cpu(mode, data_type):
    """XLA:CPU dequantises in f32 and accumulates in f32: within the dot-product bound."""
    a, b, sa, sb = _mode_inputs(mode, data_type, 2)
    ref = interp.interpret(jax.nn.scaled_matmul)(a, b, sa, sb)
    out = xla_cpu(jax.nn.scaled_matmul, a, b, sa, sb)
    res = checks.check(C.dot_product(a.shape[-1]), ref, out, bound=F.scaled_matmul_bound(a, b, sa, sb)[0])
    assert res.passed, res
    assert not np.array_equal(F.scaled_matmul_bound(a, b, sa, sb)[0], 0)


def test_lax_scaled_dot_general_dimension_numbers():
    """jax.lax.scaled_dot: scales with the operand's rank, one entry per contracting block."""
    if not hasattr(lax, "scaled_dot"):
        pytest.skip("jax.lax.scaled_dot is not in this JAX")
    rng = rng_for("scaled_dot", 0)
    e4, e8 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
    lhs = (rng.standard_normal((2, 32, 5)) * 8).astype(e4)        # contract dim 1, batch 0
    rhs = (rng.standard_normal((2, 3, 32)) * 8).astype(e4)        # contract dim 2, batch 0
    ls = np.exp2(rng.integers(-4, 5, (2, 2, 5)).astype(np.float64)).astype(e8)
    rs = np.exp2(rng.integers(-4, 5, (2, 3, 2)).astype(np.float64)).astype(e8)
    dn = (((1,), (2,)), ((0,), (0,)))
    fn = lambda a, b, x, y: lax.scaled_dot(a, b, lhs_scale=x, rhs_scale=y, dimension_numbers=dn,   # noqa: E731
                                           preferred_element_type=jnp.float32)
    got = interp.interpret(fn)(lhs, rhs, ls, rs)
    exact = _exact_scaled_matmul(np.swapaxes(lhs, 1, 2), rhs, np.swapaxes(ls, 1, 2), rs, np.dtype(np.float32))
    assert_same_bits(got, exact)
    out = xla_cpu(fn, lhs, rhs, ls, rs)   # the composite's decomposition: bf16 dequantisation (exact here)
    bound = F.scaled_matmul_bound(np.swapaxes(lhs, 1, 2), rhs, np.swapaxes(ls, 1, 2), rs)[0]
    res = checks.check(C.dot_product(32), got, out, bound=bound)
    assert res.passed, res


def _quantize_config(mode, global_scale=None):
    kw = {"global_scale": jnp.float32(global_scale)} if mode == "nvfp4" else {}
    return jax.nn.get_scaled_dot_general_config(mode, **kw)


def _quantizes_in_input_dtype() -> bool:
    """Whether the installed JAX's block-scaled quantize divides in the input's dtype (JAX 0.10.2
    and 0.11.2: bf16 for bf16 inputs) rather than in float32 (0.12): probed from its jaxpr."""
    from jax._src.cudnn.scaled_matmul_stablehlo import quantize
    cfg = _quantize_config("mxfp8", None)
    jaxpr = jax.make_jaxpr(lambda v: quantize(v, cfg))(np.zeros((1, 32), jnp.bfloat16))
    return any(e.primitive.name == "div" and e.outvars[0].aval.dtype == jnp.bfloat16 for e in jaxpr.eqns)


# Where quantize divides bf16 mxfp8 inputs in bf16 (above), XLA:CPU flushes the bf16 scale 2^-127
# of an all-zero block to 0 (0/0: NaN data where the program gives 0; spec/fusion.py DIVERGENCES
# "xla-cpu-bf16-mxfp8-zero-block"): the flush-to-zero allowance.
OLD_BF16_QUANTIZE = _quantizes_in_input_dtype()


def _quantize_input(cfg, mode, global_scale, dtype):
    rng = rng_for(f"quantize/{mode}/{global_scale}", 0)
    # Values over many binades, a zero block and exact block maxima: scale selection and clipping.
    x = (rng.standard_normal((2, 4, 64)) * np.exp2(rng.integers(-6, 7, (2, 4, 1)))).astype(dtype)
    x[0, 0, :32] = 0
    x[1, 1, :16] = np.asarray(float(ml_dtypes.finfo(cfg.data_type).max), dtype)
    return x


@pytest.mark.parametrize("mode,global_scale", [_mode_param("mxfp8", None), _mode_param("mxfp4", None),
                                               _mode_param("nvfp4", 1.0), _mode_param("nvfp4", 0.375)])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_quantize_bitwise_against_xla_cpu(mode, global_scale, dtype):
    from jax._src.cudnn.scaled_matmul_stablehlo import quantize
    cfg = _quantize_config(mode, global_scale)
    x = _quantize_input(cfg, mode, global_scale, dtype)
    fn = lambda v: quantize(v, cfg)   # noqa: E731
    got = interp.interpret(fn)(x)
    want = xla_cpu(fn, x)
    if mode == "nvfp4":
        # XLA:CPU computes nvfp4 data with reciprocal multiplications: explained element by element.
        _check_nvfp4_against_xla_arithmetic(x, global_scale, got, want)
        return
    if OLD_BF16_QUANTIZE and np.dtype(dtype) == np.dtype(jnp.bfloat16) and mode == "mxfp8":
        # XLA:CPU is the program with subnormals flushed (the reference replayed under the
        # flush-to-zero allowance, bit for bit); the program's own result differs in the zero block.
        from conformance.replay import Variant, reference_replay
        flushed, _ = reference_replay(jax.make_jaxpr(fn)(x), [x], Variant(flush=True))
        for f, w, what in zip(flushed, want, ("data", "scales")):
            assert_same_bits(w, f, err_msg=f"XLA:CPU vs flush-to-zero replay, {what}")
        assert np.isnan(np.asarray(want[0])[0, 0, :32].astype(np.float32)).all()
        assert_same_bits(np.asarray(got[0])[0, 0, :32], np.zeros(32, got[0].dtype))
        got, want = [np.asarray(g)[1:] for g in got], [np.asarray(w)[1:] for w in want]   # the rest agrees
    for g, w, what in zip(got, want, ("data", "scales")):
        assert_same_bits(g, w, err_msg=f"{mode} {what}")


E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)   # halfway between adjacent e2m1 values


def _xla_cpu_nvfp4_arithmetic(x, global_scale):
    """quantize(nvfp4) as XLA:CPU's compiled HLO computes it (spec/fusion.py DIVERGENCES
    "xla-cpu-nvfp4-reciprocal"), in float32 NumPy (one rounding per operation, as XLA:CPU):
    every division becomes a multiplication by a float32 reciprocal (x / gs -> x * fl(1/gs),
    amax / 6 -> amax * fl(1/6), v / s -> v * fl(1/s)), and where quantize divides in the input
    dtype (OLD_BF16_QUANTIZE: JAX 0.10.2 and 0.11.2) XLA reassociates the data path into
    x * fl(fl(1/s) * fl(1/gs)). Returns (data quotient before clipping, scales)."""
    f32 = np.float32
    d = np.asarray(x).astype(f32).reshape(x.shape[:-1] + (x.shape[-1] // 16, 16))
    inv_gs = f32(1) / f32(global_scale)
    e = d * inv_gs
    amax = np.abs(e).max(-1, keepdims=True)
    scales = np.clip(amax * (f32(1) / f32(6)), f32(0), f32(448)).astype(ml_dtypes.float8_e4m3fn)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_s = f32(1) / scales.astype(f32)
        q = d * (inv_s * inv_gs) if OLD_BF16_QUANTIZE else e * inv_s
    return q.reshape(x.shape), scales.reshape(scales.shape[:-1])


def _check_nvfp4_against_xla_arithmetic(x, global_scale, got, want):
    """The reference is the program; XLA:CPU is the program with reciprocal multiplications. Both
    are checked: XLA's scales equal the reference's; XLA's data equal the reciprocal arithmetic
    (wherever a block is not all zero); the reference differs from XLA only where the exact
    quotient x / gs / s is an e2m1 midpoint (exact ties, common with bf16 inputs' short
    significands: the reciprocal's rounding error pushes them off the tie)."""
    q, scales = _xla_cpu_nvfp4_arithmetic(x, global_scale)
    assert_same_bits(want[1], scales, err_msg="XLA:CPU scales vs reciprocal arithmetic")
    assert_same_bits(got[1], want[1], err_msg="nvfp4 scales")
    live = np.repeat(scales.astype(np.float32) > 0, 16, axis=-1)
    data = np.clip(q, -6, 6).astype(ml_dtypes.float4_e2m1fn)
    assert_same_bits(np.asarray(want[0])[live], data[live], err_msg="XLA:CPU data vs reciprocal arithmetic")
    assert_same_bits(np.asarray(got[0])[~live], np.asarray(want[0])[~live], err_msg="zero blocks")
    differ = np.asarray(got[0]).view(np.uint8) != np.asarray(want[0]).view(np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):   # the zero blocks: 0 / 0
        exact = np.asarray(x).astype(np.float64) / global_scale / np.repeat(scales.astype(np.float64), 16, -1)
    assert np.isin(np.abs(exact[differ]), E2M1_MIDPOINTS).all(), exact[differ]
    if OLD_BF16_QUANTIZE and np.asarray(x).dtype == np.dtype(jnp.bfloat16) and global_scale == 0.375:
        # The two elements of issue 6 (2/512): quotients exactly 5.0 and -0.25.
        assert sorted(np.abs(exact[differ]).tolist()) == [0.25, 5.0]
    else:
        assert not differ.any()


@needs_cpu_scaled_matmul
@pytest.mark.parametrize("mode,global_scale", [("mxfp8", None), ("nvfp4", None), ("nvfp4", 0.5),
                                               _mode_param("mxfp4", None)])
def test_scaled_dot_general_end_to_end(mode, global_scale):
    """jax.nn.scaled_dot_general (quantise both sides, scaled matmul, global scales) against
    XLA:CPU: the quantised operands agree bitwise (above), the dot within its bound. nvfp4 without
    a global scale uses get_scaled_dot_general_config's default of 1."""
    cfg = jax.nn.get_scaled_dot_general_config(
        mode, **({} if global_scale is None else {"global_scale": jnp.float32(global_scale)}))
    rng = rng_for(f"scaled_dot_general/{mode}", 0)
    x, y = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((3, 64)).astype(np.float32)
    dn = (((1,), (1,)), ((), ()))
    fn = lambda a, b: jax.nn.scaled_dot_general(a, b, dn, configs=[cfg, cfg])   # noqa: E731
    ref, out = interp.interpret(fn)(x, y), xla_cpu(fn, x, y)
    bound = np.abs(x).astype(np.float64) @ np.abs(y).astype(np.float64).T * 2   # quantisation can double |x|
    res = checks.check(C.dot_product(64), ref, out, bound=bound)
    assert res.passed, res


# ---------------------------------------------------------------------------- excess precision
def test_excess_precision_cases_round_per_equation():
    """The excess-precision family's bf16 mul+add: the reference rounds the product to bf16
    before the add (a fused f32 or FMA evaluation would not)."""
    cases = {c.id: c for c in F.cases()}
    case = cases["fusion/excess_precision/mul_add/bfloat16"]
    x, y, z = case.make_inputs(0)
    got = interp.interpret(case.fn)(x, y, z)
    bf = ml_dtypes.bfloat16
    prod = (x.astype(np.float64) * y.astype(np.float64)).astype(np.float32).astype(bf)   # exact product, one rounding
    want = (prod.astype(np.float64) + z.astype(np.float64)).astype(np.float32).astype(bf)
    # (f64 -> f32 -> bf16 double rounding is harmless: bf16 products/sums of bf16 fit in 53 bits
    # and are exactly representable in f32 before the final rounding, except for the sum, whose
    # f32 rounding can only matter when it creates a tie; none occur for these inputs.)
    assert_same_bits(got, want)
    assert len([c for c in cases if "excess_precision" in c]) >= 10


def test_zero_dim_narrow_float_division():
    """0-d bfloat16 arithmetic computed in float64 and rounded once (the quantisers' amax / MAX on
    one block): regression for a 0-d result coming back as shape (1,) from the float64 -> bf16
    rounding (lax_conversions._to_odd_float32)."""
    x = np.asarray(1, jnp.bfloat16)
    fn = lambda v: v / jnp.bfloat16(6)   # noqa: E731
    assert_same_bits(interp.interpret(fn)(x), xla_cpu(fn, x))


def test_fusible_with_captured_constants_unfused():
    """A fusible body that closes over an array (the Fusible call's consts) and calls its input
    fusion directly, evaluated outside fuser.fuse."""
    from jax.experimental.pallas import fuser
    c = jnp.asarray(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6))

    @fuser.fusible
    def shift(x, z):
        assert z is None
        return (x() + c) * c   # (no multiply feeding an add: XLA:CPU would contract it)

    fn = lambda x: shift(x)   # noqa: E731
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 8
    assert_same_bits(interp.interpret(fn)(x), xla_cpu(fn, x))


def test_float64_block_scaled_operands_are_unsupported():
    """A float64 factor makes data * scale inexact in float64: the reference says so."""
    from tests.support import x64
    with x64():
        a = np.ones((1, 2, 64)); s = np.ones((1, 2, 2))
        with pytest.raises(interp.UnsupportedPrimitiveError, match="float64"):
            interp.interpret(jax.nn.scaled_matmul)(a, a, s, s)


def test_nan_scale_and_infinite_data():
    """An e8m0 scale 0xFF is NaN: every output that contracts with its block is NaN; e5m2 inf data
    with a finite scale gives +-inf where no NaN or opposite infinity meets it."""
    a, b, sa, sb = _mode_inputs("mxfp8", ml_dtypes.float8_e5m2, 3)
    sa = sa.copy()
    sa[0, 1, 0] = np.uint8(0xFF).view(ml_dtypes.float8_e8m0fnu)
    a = a.copy()
    a[1, 2, 5] = np.inf
    b = np.abs(b.astype(np.float32)).astype(b.dtype) + np.asarray(1, b.dtype)   # positive rhs
    got = interp.interpret(jax.nn.scaled_matmul)(a, b, sa, sb)
    assert np.isnan(got[0, 1]).all() and not np.isnan(np.delete(got[0], 1, axis=0)).any()
    assert (got[1, 2] == np.inf).all()
    exact_rows = _exact_scaled_matmul(a[:1, :1], b[:1], sa[:1, :1], sb[:1], np.dtype(np.float32))
    assert_same_bits(got[:1, :1], exact_rows)


def test_an_observed_evaluation_watches_every_interpreted_device():
    """Interpreted devices (and a kernel's cores) run on threads of their own: the watcher of the
    observed evaluation (fusion_diff, the allowance replays) sees their equations too. Two devices
    each evaluate sin and psum once."""
    from jax.sharding import PartitionSpec as P
    from conformance.cases.spmd import make_mesh
    from conformance.observe import observe

    class Watcher:
        def __init__(self):
            self.seen = []

        def step(self, ctx, rule, invals, params):
            self.seen.append(ctx.name)
            return rule(ctx, *invals, **params)

    def program(x):
        return jax.shard_map(lambda s: lax.psum(jnp.sin(s), "x"), mesh=make_mesh((2,), ("x",)),
                             in_specs=P("x"), out_specs=P(), check_vma=False)(x)
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    watcher = Watcher()
    got, = observe(jax.make_jaxpr(program)(x), [x], watcher, "devices")
    assert sorted(watcher.seen) == ["psum", "psum", "shard_map", "sin", "sin"]
    want = np.sin(x[:4].astype(np.float64)).astype(np.float32) + np.sin(x[4:].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want.astype(np.float32))
