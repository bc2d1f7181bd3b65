"""Pallas Triton: the reference's Triton rules (interp/rules/pallas_triton.py) against hand-computed
results and the H100's recorded outputs; the Triton cases (conformance/cases/pallas_triton.py)
against JAX's HLO interpret mode, and against JAX's own Triton lowering run on CPU for an abstract
H100 (no GPU needed to know whether pallas:triton can compile a case)."""
from __future__ import annotations

import functools
from dataclasses import replace
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

import interp
from conformance import execute as X
from conformance.judge import compare, explain_outcome
from reports.schema import BACKEND_UNSUPPORTED, CRASH, FAIL, KNOWN_DIVERGENCE, PASS, REFERENCE_UNSUPPORTED, Record
from conformance.cases import all_cases
from conformance.cases import pallas_triton as cases_mod
from hardware_runners import pallas_lowering
from hardware_runners.base import get_runner

DATA = os.path.join(os.path.dirname(__file__), "data", "h100", "triton_kernels.npz")


def _triton():
    from jax.experimental.pallas import triton as plgpu
    return plgpu


@functools.lru_cache(maxsize=None)
def _quick_cases():
    return {c.id: c for c in cases_mod.cases() if c.profile == "quick"}


def _cheap(case) -> bool:
    # the shipped kernels (ops/, claims/) cost seconds each in the reference: the conformance
    # suite runs them; these unit tests run the kernels written here
    return not case.id.startswith(("pallas_triton/ops/", "pallas_triton/claims/"))


# ------------------------------------------------------------------------------------- counts
def test_at_least_40_cases_run_on_triton_and_each_on_hlo_interpret():
    triton, hlo = get_runner("pallas:triton"), get_runner("pallas:interpret")
    on_triton = [c for c in all_cases("quick").values() if triton.supports(c.as_program())[0]]
    assert len(on_triton) >= 40, len(on_triton)
    assert not [c.id for c in on_triton if not hlo.supports(c.as_program())[0]]
    # ... and at least 40 of them lower through JAX's Triton lowering (checked below per case)
    mine = [c for c in _quick_cases().values() if c.id not in cases_mod.TRITON_LOWERING]
    assert len(mine) >= 40, len(mine)


def test_cli_lists_the_cases_pallas_triton_runs(capsys):
    from conformance.cli import main
    assert main(["list", "--runner", "pallas:triton"]) == 0
    listed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(listed) >= 40 and all(c.startswith(("pallas/", "pallas_triton/")) for c in listed)


def test_every_triton_primitive_is_in_the_reference():
    # Every primitive jax.experimental.pallas.triton binds, and the masked loads/stores it uses,
    # has a rule (elementwise_inline_asm: partial, approx_tanh's instructions only).
    from jax._src.pallas.triton import primitives as triton_prims
    from jax.extend.core import Primitive
    names = {p.name for p in vars(triton_prims).values() if isinstance(p, Primitive)}
    assert {"atomic_rmw", "atomic_cas", "max_contiguous"} <= names
    cov = interp.coverage()
    assert {n: cov.get(n) for n in names | {"masked_load", "masked_swap"} if cov.get(n, "unsupported") ==
            "unsupported"} == {}


# ---------------------------------------------------------- JAX's Triton lowering, on CPU
def _lower_for_h100(case):
    with case.context():
        pallas_lowering.lower_for_h100(case.program(False), case.make_inputs(0))


@pytest.mark.parametrize("case_id", sorted(_quick_cases()))
def test_triton_lowering_as_declared(case_id):
    # Every case lowers to a Triton module for an H100, except those TRITON_LOWERING declares
    # (with the error JAX raises, until the JAX version that fixes it).
    case = _quick_cases()[case_id]
    gate = cases_mod.TRITON_LOWERING.get(case_id)
    if gate is None or not gate.applies():
        _lower_for_h100(case)
        return
    with pytest.raises(Exception) as err:
        _lower_for_h100(case)
    assert any(type(err.value).__name__ == t and m in str(err.value) for t, m in gate.errors), err.value


# ---------------------------------------------------------- the cases on pallas:interpret
@pytest.mark.parametrize("case_id", sorted(c for c, case in _quick_cases().items() if _cheap(case)))
def test_case_agrees_with_hlo_interpret_or_is_explained(case_id):
    case = _quick_cases()[case_id]
    rec = X.run_case(case, "pallas:interpret", 0, first_divergence=False)
    if case_id == "pallas_triton/elementwise_inline_asm/int32/shl":
        assert rec.outcome == REFERENCE_UNSUPPORTED and "elementwise_inline_asm" in rec.detail
        return
    if rec.outcome == BACKEND_UNSUPPORTED:   # only where the case declares why
        assert hasattr(case.build, "gates") or "dot_general on CPU" in rec.detail, rec.detail
        return
    assert rec.outcome in (PASS, KNOWN_DIVERGENCE), (rec.outcome, rec.detail)
    if rec.outcome == KNOWN_DIVERGENCE:
        assert rec.known_divergence["id"].startswith(("pallas-interpret-", "xla-cpu-dot-algorithm")), rec


@pytest.mark.parametrize("case_id", sorted(c for c, case in _quick_cases().items() if hasattr(case.build, "gates")))
def test_hlo_interpret_gates_still_hold(case_id):
    # The gate's evidence: JAX's HLO interpret mode, run on the kernel without the gate, raises
    # what the gate says. Once JAX runs the kernel, drop the gate.
    case = _quick_cases()[case_id]
    gate = case.build.gates["hlo_interpret"]
    with pytest.raises(Exception) as err:
        with case.context():
            jax.block_until_ready(jax.jit(case.build.ungated(True))(*case.make_inputs(0)))
    assert any(type(err.value).__name__ == t and m in str(err.value) for t, m in gate.errors), err.value


def test_x3_dot_on_hlo_interpret_is_the_float32_dot_a_known_divergence():
    """JAX's HLO interpret mode runs a BF16_BF16_F32_X3 dot on XLA:CPU, which ignores the split
    (spec/lax_contractions.py BACKEND_PROPERTIES): where what X3 drops exceeds its DOT_PRODUCT
    (seeds 1, 3, 4 of 0-11) the record is the known divergence; the divergence explains exactly a
    float32 dot of the unsplit inputs (the exact product rounded), not a value as far on the other
    side of the reference."""
    case = _quick_cases()["pallas_triton/dot/float32/algorithm_BF16_BF16_F32_X3/16x32x32"]
    for seed in (1, 3, 4):
        rec = X.run_case(case, "pallas:interpret", seed, first_divergence=False)
        assert rec.outcome == KNOWN_DIVERGENCE, (seed, rec.outcome, rec.detail)
        assert rec.known_divergence["id"] == "xla-cpu-dot-algorithm-bf16-bf16-f32-not-applied"
    a, b = case.make_inputs(1)
    with case.context():
        ref = np.asarray(interp.interpret(case.reference_program())(a, b))
    f32 = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    mirrored = (2 * ref.astype(np.float64) - f32).astype(np.float32)
    for outs, outcome in ((ref, PASS), (f32, KNOWN_DIVERGENCE), (mirrored, FAIL)):
        rec = Record(case=case.id, runner="pallas:interpret")
        compare(case, "pallas:interpret", [a, b], [ref], [outs], rec, first_divergence=False)
        assert rec.outcome == outcome, (outcome, rec)


# Pallas's Triton lowering of the split presets (jax/_src/pallas/triton/lowering.py
# _dot_general_lowering): components by round to nearest even (truncf), then one float32
# accumulator through the component dots, smallest first.
_SPLIT_ORDER = {"X3": [(1, 0), (0, 1), (0, 0)],
                "X6": [(2, 0), (0, 2), (1, 1), (1, 0), (0, 1), (0, 0)],
                "X9": [(2, 1), (2, 2), (1, 2), (2, 0), (0, 2), (1, 1), (1, 0), (0, 1), (0, 0)]}


@pytest.mark.parametrize("split", sorted(_SPLIT_ORDER))
def test_split_dot_length_bounds_a_float32_emulation_of_the_triton_lowering(split):
    """spec/lax_contractions.py split_dot_length, step by step, on a float32 emulation of the
    lowering (one addition at a time; a GPU's tensor cores may sum otherwise): the emulation is
    within gamma_{n-1} sum|c_i c'_j| of the exact sum of its products, sum|c_i c'_j| <= w sum|a||b|, and the case's mode passes it."""
    import ml_dtypes
    from conformance.checks import check
    case = _quick_cases()[f"pallas_triton/dot/float32/algorithm_BF16_BF16_F32_{split}/16x32x32"]
    u, u_acc = 2.0 ** -8, 2.0 ** -24
    for seed in range(4):
        a, b = case.make_inputs(seed)
        comps = []
        for x in (a, b):
            cs, rest = [], x
            for _ in range(3):
                cs.append(rest.astype(ml_dtypes.bfloat16).astype(np.float32))
                rest = (rest - cs[-1]).astype(np.float32)
            comps.append(cs)
        acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
        exact = np.zeros(acc.shape)          # the float64 sum: within n 2**-53 size of the exact one
        size = np.zeros(acc.shape)
        for i, j in _SPLIT_ORDER[split]:
            for kk in range(a.shape[1]):
                p = np.outer(comps[0][i][:, kk], comps[1][j][kk, :])   # exact in float32
                acc = (acc + p).astype(np.float32)
                exact += p.astype(np.float64)
                size += np.abs(p.astype(np.float64))
        n = len(_SPLIT_ORDER[split]) * a.shape[1]
        bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        assert np.all(np.abs(acc - exact) <= ((n - 1) * u_acc / (1 - (n - 1) * u_acc) + n * 2.0 ** -53) * size)
        assert np.all(size <= ((1 + u) / (1 - u)) ** 2 * bound)
        with case.context():
            ref = np.asarray(interp.interpret(case.reference_program())(a, b))
        c = check(case.modes, ref, acc, bound=bound)
        assert c.passed, (seed, c)


def test_crash_of_the_pre_012_lowering_is_a_known_divergence():
    # What the H100 recorded for JAX 0.11.2 (an AssertionError from the lowering) becomes a
    # known divergence for exactly those cases and JAX versions.
    rec = Record(case="pallas_triton/atomic_max/int32/distinct", runner="pallas:triton", outcome=CRASH,
                 jax_version="0.11.2")
    assert explain_outcome(replace(rec), ("atomic_rmw",)).outcome == KNOWN_DIVERGENCE
    assert explain_outcome(replace(rec, jax_version="0.12.0.1"), ("atomic_rmw",)).outcome == CRASH
    assert explain_outcome(replace(rec, case="pallas_triton/atomic_max/float32/distinct"),
                           ("atomic_rmw",)).outcome == CRASH


# --------------------------------------------------------------------------- rules by hand
def _call(kernel, outs, *args):
    return interp.interpret(lambda *a: pl.pallas_call(kernel, out_shape=outs,
                                                      compiler_params=_triton().CompilerParams())(*a))(*args)


def test_atomic_cas_compares_bit_patterns():
    # atomic_cas/bitwise-compare: +0.0 held, cmp -0.0: no swap; NaN held, cmp the same NaN: swap.
    def kernel(v_ref, a_ref, b_ref):
        a_ref[...] = v_ref[0]
        b_ref[...] = v_ref[1]
        _triton().atomic_cas(a_ref, v_ref[2], v_ref[3])
        _triton().atomic_cas(b_ref, v_ref[4], v_ref[5])
    v = np.array([0.0, np.nan, -0.0, 5.0, np.nan, 6.0], np.float32)
    a, b = _call(kernel, [jax.ShapeDtypeStruct((), jnp.float32)] * 2, v)
    assert np.signbit(a) == np.False_ and a == 0.0
    assert b == 6.0


def test_atomic_add_duplicates_apply_every_lane():
    def kernel(i_ref, v_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        _triton().atomic_add(o_ref, (i_ref[...],), v_ref[...])
    idx = np.array([0, 1, 0, 0, 3, 1, 0, 2], np.int32)
    val = np.arange(1, 9, dtype=np.int32)
    got = _call(kernel, jax.ShapeDtypeStruct((4,), jnp.int32), idx, val)
    np.testing.assert_array_equal(got, np.bincount(idx, weights=val, minlength=4).astype(np.int32))


def test_approx_tanh_is_the_correctly_rounded_tanh():
    x = np.concatenate([np.linspace(-12, 12, 501, dtype=np.float32),
                        np.array([0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan], np.float32)])
    got = _call(lambda x_ref, o_ref: o_ref.__setitem__(Ellipsis, _triton().approx_tanh(x_ref[...])),
                jax.ShapeDtypeStruct(x.shape, jnp.float32), x)
    import mpmath
    with mpmath.workdps(60):
        # (mpmath has no -0.0: zeros, infinities and NaN from the IEEE definition, tanh(+-0) = +-0)
        want = np.array([np.float32(float(mpmath.tanh(mpmath.mpf(float(v))))) if np.isfinite(v) and v != 0
                         else np.tanh(v) for v in x], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_arbitrary_inline_asm_is_refused_by_name():
    def kernel(x_ref, o_ref):
        [o_ref[...]] = _triton().elementwise_inline_asm(
            "shl.b32 $0, $1, 3;", args=[x_ref[...]], constraints="=r,r", pack=1,
            result_shape_dtypes=[jax.ShapeDtypeStruct(x_ref.shape, x_ref.dtype)])
    with pytest.raises(interp.UnsupportedPrimitiveError, match="elementwise_inline_asm.*shl.b32"):
        _call(kernel, jax.ShapeDtypeStruct((16,), jnp.int32), np.arange(16, dtype=np.int32))


# ----------------------------------------------------------------- recorded H100 outputs
# (tests/data/h100/README.md says where they come from.) Bounds: bitwise where the H100 and the
# reference compute the same float16 operations in the same order (softmax, rms_norm: measured
# bitwise on JAX 0.10.2, 0.11.2 and 0.12.0.1); otherwise one rounding of the output apart plus
# the reassociated float32 sums: float32 kernels within 4 eps * max|out| (measured 2), float16
# kernels within 2 eps(f16) * max|out| (measured 1), decode attention (float32 output of float16
# probabilities) within 2 eps(f16) * max|out| (measured 0.7).
_H100 = {
    "softmax/float16": ("bitwise", None), "rms_norm/float16": ("bitwise", None),
    "softmax/float32": ("eps", 4), "layer_norm/float32": ("eps", 4), "rms_norm/float32": ("eps", 4),
    "layer_norm/float16": ("eps", 2), "mha/causal=True": ("eps", 2), "paged_attention": ("eps", 2),
    "decode_mqa": ("eps16", 2),
}


def _h100_fn(name):
    import importlib
    ops = lambda m: importlib.import_module(f"jax.experimental.pallas.ops.gpu.{m}")
    kernel = name.split("/")[0]
    if kernel == "softmax":
        return functools.partial(ops("softmax").softmax, axis=-1)
    if kernel in ("layer_norm", "rms_norm"):
        return getattr(ops(kernel), kernel)
    if kernel == "mha":
        att = ops("attention")
        return functools.partial(att.mha, segment_ids=None, causal=True,
                                 block_sizes=att.BlockSizes(block_q=64, block_k=64))
    if kernel == "decode_mqa":
        return functools.partial(ops("decode_attention").mqa, block_k=128, k_splits=4)
    return functools.partial(ops("paged_attention").paged_attention, block_h=16, pages_per_compute_block=4,
                             k_splits=2)


@pytest.mark.parametrize("name", sorted(_H100))
def test_reference_agrees_with_recorded_h100_outputs(name):
    data = np.load(DATA)
    key = f"triton/{name}"
    ins = [data[f"{key}/in{i}"] for i in range(5) if f"{key}/in{i}" in data.files]
    want = data[f"{key}/out0"]
    got = np.asarray(interp.interpret(_h100_fn(name))(*ins))
    assert got.dtype == want.dtype and got.shape == want.shape
    how, n = _H100[name]
    if how == "bitwise":
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        return
    eps = float(np.finfo(np.float16 if how == "eps16" else want.dtype).eps)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
    assert err <= n * eps * np.abs(want.astype(np.float64)).max(), err
