"""Recognising the known divergences of spec/divergences.py in a failing result: the Failure a
matcher sees, the matchers an entry names (MATCHERS) and the numerical models they use (XLA's
special functions, JAX's lowerings, measured budgets).
"""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Callable, Sequence

import numpy as np

from interp import dtypes as D
from spec import compliance as C
from spec import lax_special as spec_special
from spec.versions import version_in, version_tuple
from spec.divergences import (DIVERGENCES, Divergence, XLA_CPU_CASE_ULP, XLA_CPU_DAZ_INCONSISTENT,
                              XLA_CPU_CASE_ABS, BETAINC_ITERATIONS, BETAINC_MODEL_K,
                              XLA_GPU_CASE_ULP, XLA_GPU_CASE_ABS, LOWERING_MODEL_ULP,
                              GPU_COMPLEX128_MUL_EPS)

from .checks import ulp_distance


@dataclasses.dataclass(frozen=True)
class Failure:
    """What a matcher sees of one failing (case, runner)."""
    case_id: str
    runner: str
    jax_version: str
    primitives: tuple[str, ...]
    reference: Sequence[np.ndarray]
    backend: Sequence[np.ndarray]
    failing_outputs: tuple[int, ...]
    max_ulp: float | None
    inputs: Sequence[np.ndarray] = ()     # the case's arguments (elementwise matchers read them)
    outcome: str = "fail"                 # or "timeout" / "crash": no values then, only the case
    # Per output (indexed like ``reference``): the elements that comply with the reference
    # recomputed under one of the runner's allowances (spec/allowances.py), or None (the output
    # passes, or no replay was possible). An elementwise matcher counts them as explained: one output
    # can mix a flushed subnormal argument (the flush-to-zero allowance) with an accuracy difference.
    allowed: Sequence[np.ndarray | None] = ()
    # The reference's outputs recomputed under each of the runner's allowances that could replay the
    # program (each a full list of outputs, like ``reference``): a matcher whose mechanism composes
    # with an allowance (a kept -0.0 beside flushed subnormals) compares with these too.
    replayed: Sequence[Sequence[np.ndarray]] = ()
    # The case's function (inputs -> outputs), for a matcher whose model re-evaluates the operation
    # with the reference on other operands (a convolution's parameters live in it), or None.
    fn: Callable | None = None

    def allowed_at(self, i: int):
        """Output ``i``'s elements an allowance explains (``allowed``), or False where none does."""
        return np.asarray(self.allowed[i]) if i < len(self.allowed) and self.allowed[i] is not None else False


def _failing_all_zero(f: Failure) -> bool:
    return all(not np.any(np.asarray(f.backend[i])) for i in f.failing_outputs)


def _ulp_below(limit: float):
    return lambda f: f.max_ulp is not None and f.max_ulp <= limit


def _erf_out_of_range(f: Failure) -> bool:
    return any(np.any(np.abs(np.asarray(f.backend[i], np.float64)) > 1) for i in f.failing_outputs)


def _extreme(x) -> np.ndarray:
    """Arguments where XLA:CPU's series/continued-fraction special functions leave their domain of
    accuracy: non-finite, zero, |x| < 2**-20 or |x| > 2**64."""
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(np.asarray(x).astype(np.float64))
        return ~np.isfinite(a) | (a < 2.0 ** -20) | (a > 2.0 ** 64)


def _complex_extreme(z) -> np.ndarray:
    z = np.asarray(z)
    if np.iscomplexobj(z):
        return _extreme(z.real) | _extreme(z.imag)
    return _extreme(z)


# Per primitive: the arguments at which XLA:CPU's special values differ from the reference (the
# reference follows DLMF / C99; XLA:CPU returns NaN for igamma(a = 0 or a huge), 0 or 1 for a tiny a
# (igammac(1.2e-7, 0.1) = -1.2e-7, a negative probability), for zeta(s, q <= 0) (the reference
# follows XLA's continuation -- its poles and reflection, spec/lax_special.py -- but XLA:CPU's own
# evaluation is 1e8 ulp off at q = -9.1 and wrong below q = -10: zeta(2, -20.5) = -0.0476, truly
# 9.822) and NaN at zeta(+inf, q), NaN for polygamma(n, +inf) (0), NaN for
# betainc(a = 3.4e38, ...)), and complex multiply overflows or multiplies inf by a flushed 0 in one
# of its four real products (spec/lax_elementwise.py BACKEND_PROPERTIES complex-mul-div-rounding).
# No upstream issue is filed for these yet: each example above is a one-line reproducer.
XLA_CPU_SPECIAL_ARGS = {
    "igamma": lambda a, x: _extreme(a) | _extreme(x),
    "igammac": lambda a, x: _extreme(a) | _extreme(x),
    "igamma_grad_a": lambda a, x: _extreme(a) | _extreme(x),
    "regularized_incomplete_beta": lambda a, b, x: _extreme(a) | _extreme(b) | _extreme(x),
    "zeta": lambda s, q: _extreme(s) | _extreme(q) | (np.asarray(q, np.float64) <= 0),
    "polygamma": lambda x: _extreme(x),
    "digamma": lambda x: _extreme(x),
    "mul": lambda x, y: _complex_extreme(x) | _complex_extreme(y),
    # JAX 0.10.2: lgamma(1) = 4.7683716e-07 instead of its exact zero (spec/lax_special.py)
    "lgamma": lambda x: np.isin(np.asarray(x, np.float64), (1.0, 2.0)),
    # JAX 0.10.2: asin(2**-126) = 0 (the smallest normal argument; an intermediate underflows)
    "asin": lambda x: np.abs(np.asarray(x, np.float64)) < 2.0 ** -120,
}


def _subnormal(x) -> np.ndarray:
    x = np.asarray(x)
    if np.iscomplexobj(x):
        return _subnormal(x.real) | _subnormal(x.imag)
    if not D.is_float(x.dtype):
        return np.zeros(x.shape, bool)
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
        return (a > 0) & (a < float(D.finfo(x.dtype).tiny))


def _within_abs(prim: str, ref: np.ndarray, out: np.ndarray, table: dict | None = None) -> np.ndarray:
    k = (XLA_CPU_CASE_ABS if table is None else table).get((prim, ref.dtype.name))
    if k is None:
        return np.zeros(ref.shape, bool)
    r, o = ref.astype(np.float64), out.astype(np.float64)
    with np.errstate(all="ignore"):
        return np.abs(o - r) <= k * float(D.finfo(ref.dtype).eps) * np.maximum(1.0, np.abs(r))


def _erf_inv_of_rounded_square(x: np.ndarray, out_dtype) -> np.ndarray:
    """erf_inv(sqrt(fl(x * x))) * sign(x), rounded to ``out_dtype``: what XLA's erf_inv computes up to
    its polynomial's own error. float64 through mpmath (the argument is not rounded: near 1 the
    derivative is ~1e7), narrower dtypes through SciPy in float64."""
    x = np.asarray(x)
    sq = (x * x).astype(np.float64) if x.dtype == np.float64 else (x.astype(np.float32) ** 2).astype(np.float64)
    if x.dtype != np.float64:
        from scipy import special
        with np.errstate(all="ignore"):
            return (np.sign(x.astype(np.float64)) * special.erfinv(np.sqrt(sq))).astype(out_dtype)
    import mpmath
    out = np.empty(x.shape, np.float64)
    with mpmath.workdps(50):
        for idx in np.ndindex(x.shape):
            s = sq[idx]
            if not (0 <= s < 1):
                out[idx] = np.nan
                continue
            out[idx] = float(mpmath.erfinv(mpmath.sqrt(mpmath.mpf(float(s))))) * np.sign(x[idx])
    return out


def _erf_inv_model(f: Failure, args, ref, out, rest) -> np.ndarray:
    model = _erf_inv_of_rounded_square(args[0][rest], ref.dtype)
    return ulp_distance(model, out[rest]) <= _measured_ulp("erf_inv", ref.dtype.name)


def _betainc_lentz(a, b, x, tol: float, cap: int):
    """JAX's Lentz loop for the (already swapped) continued fraction, in long double: the iteration
    at which |delta - 1| < tol (cap where it does not converge before the cap) and h there."""
    L = np.longdouble
    a, b, x = (np.asarray(v, np.float64).astype(L) for v in (a, b, x))
    small = L(tol)
    h = np.full(a.shape, small)          # partial denominator 0 at iteration 0 -> small
    c, d = h.copy(), np.zeros_like(h)
    need = np.full(a.shape, cap)
    done = np.zeros(a.shape, bool)
    with np.errstate(all="ignore"):
        for it in range(1, cap):
            m = L((it - 1) // 2)
            if it == 1:
                num = np.ones_like(a)
            elif it % 2 == 0:
                num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            else:
                num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
            c = 1 + num / c
            c = np.where(np.abs(c) < small, small, c)
            d = 1 + num * d
            d = 1 / np.where(np.abs(d) < small, small, d)
            delta = c * d
            h = np.where(done, h, h * delta)
            conv = ~done & (np.abs(delta - 1) < tol)
            need[conv] = it
            done |= conv
            if done.all():
                break
    return need, h.astype(np.float64)


def _betainc_model(f: Failure, args, ref, out, rest) -> np.ndarray:
    """The elements of ``rest`` that the two errors above explain: within v expm1(K eps (S + n)) (plus
    an ulp of the output dtype), a bound beyond the dtype's range (the factor overflows), a zero where
    exp(t) or exp(t) / a underflows (XLA:CPU flushes it), or a fraction that needs the cap."""
    from scipy import special
    a, b, x = (np.asarray(v).astype(np.float64)[rest] for v in args)
    r, o = ref[rest].astype(np.float64), out[rest].astype(np.float64)
    comp = "float64" if ref.dtype == np.float64 else "float32"
    eps, tiny = float(np.finfo(comp).eps), float(np.finfo(comp).tiny)
    cap = BETAINC_ITERATIONS[comp]
    with np.errstate(all="ignore"):
        ac, bc, xc = (v.astype(comp) for v in (a, b, x))      # the branch as XLA decides it
        swap = ~(xc < (ac + 1) / (ac + bc + 2))
        a, b, x = np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1 - x, x)
        s = (np.abs(a * _cr("log", x)) + np.abs(b * _cr("log1p", -x)) + np.abs(special.gammaln(a))
             + np.abs(special.gammaln(b)) + np.abs(special.gammaln(a + b)))
        need, h = _betainc_lentz(a, b, x, eps / 2, cap)
        n = need if version_tuple(f.jax_version) >= (0, 12) else cap
        ulp = np.spacing(np.abs(ref[rest])).astype(np.float64)
        v = np.where(swap, 1 - r, r) + ulp / 2          # the swapped value, from the rounded reference
        grow = _cr("expm1", BETAINC_MODEL_K * eps * (s + n))
        bound = v * grow + ulp
        fits = (np.abs(o - r) <= bound) | (bound > float(np.finfo(ref.dtype).max))
        pre = v * a / h                                   # exp(t)
        fits |= (o == 0) & ~swap & (np.minimum(pre, pre / a) <= tiny * (1 + grow))
    return fits | (need >= cap)


def _measured_ulp(prim: str, dtype: str) -> int:
    budget = spec_special.XLA_CPU_ULP.get(prim, {}).get(dtype, (0, ""))[0]
    return max(budget, XLA_CPU_CASE_ULP.get((prim, dtype), 0))


def _xla_cpu_elementwise(f: Failure, *, model: tuple[str, Callable] | None = None, budgets: "_Budgets | None" = None,
                         model_required: bool = True) -> bool:
    """Every element of every failing output of an elementwise case either stays within XLA:CPU's
    measured ULP budget (or its absolute-error budget, XLA_CPU_CASE_ABS), is explained by an
    allowance, has a subnormal argument of a DAZ-inconsistent primitive (or a subnormal reference
    result that XLA:CPU flushed), or has an argument listed in XLA_CPU_SPECIAL_ARGS. With ``model``
    (primitive, fn): that primitive's remaining elements count if ``fn(f, args, ref, out, rest)``
    (a mask over ``rest``) says the model of XLA's algorithm explains them, and at least one element
    must need the model (unless not ``model_required``). ``budgets``: another backend's measured tables
    (default: XLA:CPU's)."""
    if not f.primitives or not f.inputs:
        return False
    b = budgets or XLA_CPU_BUDGETS
    prim = f.primitives[0]
    needed_model = False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        try:
            args = [np.broadcast_to(np.asarray(a), ref.shape) for a in f.inputs]
        except ValueError:
            return False                      # not elementwise
        ok = np.array(ulp_distance(ref, out) <= b.ulp(prim, ref.dtype.name))    # 0-d too: assignable
        ok |= _within_abs(prim, ref, out, b.abs_table)
        if b.flushes:
            ok |= _subnormal(ref) & ~_subnormal(out) & (np.abs(out.astype(np.complex128)) == 0)
        if b.subnormal_results:
            ok |= _subnormal(ref) & (_subnormal(out) | (np.abs(out.astype(np.complex128)) == 0))
        if prim == "mul":
            if not np.iscomplexobj(ref):
                return False
            # Elements within the case's own DOT_PRODUCT(K=2) bound are no difference at all.
            eps = float(np.finfo(ref.real.dtype).eps) / 2
            with np.errstate(all="ignore"):
                bound = 2 * eps / (1 - 2 * eps) * np.abs(args[0].astype(np.complex128)) * np.abs(
                    args[1].astype(np.complex128))
                ok |= np.abs(ref.astype(np.complex128) - out.astype(np.complex128)) <= bound
        ok |= f.allowed_at(i)       # explained by an allowance (e.g. flush-to-zero)
        if prim in b.daz_inconsistent:
            for a in args:
                ok |= _subnormal(a)
        special = XLA_CPU_SPECIAL_ARGS.get(prim)
        if special is not None:
            ok |= special(*args)
        if model is not None and prim == model[0] and not ok.all():
            rest = ~ok
            fits = np.asarray(model[1](f, args, ref, out, rest), bool)
            needed_model |= bool(fits.any())
            ok[rest] = fits
        if not ok.all():
            return False
    return needed_model or model is None or not model_required


@dataclasses.dataclass(frozen=True)
class _Budgets:
    """One backend's measured tables for the special-function matcher."""
    ulp: Callable[[str, str], int]                 # (primitive, dtype) -> ULP budget
    abs_table: dict                                # (primitive, dtype) -> eps * max(1, |f|) multiples
    daz_inconsistent: frozenset                    # primitives whose subnormal arguments explain anything
    flushes: bool                                  # a subnormal reference result may come back as 0
    # a subnormal reference result may come back as any subnormal or zero: the expansions form it from
    # an intermediate that underflowed (igamma's prefactor exp(a log x - x - lgamma(a)) times a series),
    # so only its absolute size, below the smallest normal, is computed
    subnormal_results: bool = False


XLA_CPU_BUDGETS = _Budgets(_measured_ulp, XLA_CPU_CASE_ABS, XLA_CPU_DAZ_INCONSISTENT, True)


def _sqrt_via_float16(f: Failure) -> bool:
    """The backend's sqrt equals the float64 square root rounded to float16 and then to the output
    type (two roundings), bit for bit."""
    if not f.inputs:
        return False
    for i in f.failing_outputs:
        out = np.asarray(f.backend[i])
        with np.errstate(all="ignore"):
            twice = np.sqrt(np.asarray(f.inputs[0]).astype(np.float64)).astype(np.float16).astype(out.dtype)
        same = (twice.view(np.uint8) == out.view(np.uint8)) | (np.isnan(twice.astype(np.float64))
                                                                 & np.isnan(out.astype(np.float64)))
        if twice.shape != out.shape or not same.all():
            return False
    return True


def _all_reduce_extremum_specials(f: Failure) -> bool:
    """Every differing element is a NaN of the reference the backend dropped, or a zero whose
    sign differs: nothing else."""
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if ref.shape != out.shape:
            return False
        with np.errstate(invalid="ignore"):
            differ = (ref.view(np.uint8).reshape(ref.size, -1) != out.view(np.uint8).reshape(out.size, -1)).any(1)
            ok = (np.isnan(ref) & ~np.isnan(out)) | ((ref == 0) & (out == 0))
        if (differ & ~ok.reshape(-1)).any():
            return False
    return True


def _gpu_measured_ulp(prim: str, dtype: str) -> int:
    return max(XLA_GPU_CASE_ULP.get((prim, dtype), 0), C.ulp_budget(prim, dtype) or 0)


# XLA:GPU keeps float32 subnormals (no DAZ), and XLA's lgamma and digamma reflect x < 0.5 through
# sin(pi x) / tan(pi x): for a subnormal x the product pi * x is rounded to the subnormal grid
# (pi * 2^-149 -> 3 * 2^-149), so lgamma(2^-149) = log(pi) - log(3 * 2^-149) = 103.32505 where the
# true value is 103.27893 (6045 ulp; H100, lax_special/lgamma/float32/specials), and digamma(x) ~
# -pi / fl(pi x). openxla/xla xla/hlo/builder/lib/math.cc Lgamma / Digamma (reflection for x < 0.5).
def _reflection_of_subnormal(f: Failure, args, ref, out, rest) -> np.ndarray:
    prim = f.primitives[0]
    x = np.asarray(args[0])[rest]
    if x.dtype not in (np.float32, np.float64):
        return np.zeros(x.shape, bool)
    with np.errstate(all="ignore"):
        t = (np.asarray(np.pi, x.dtype) * np.abs(x)).astype(np.float64)   # rounded to the subnormal grid
        model = (LOG_PI - _cr("log", t)) if prim == "lgamma" else -np.pi / (np.sign(x) * t)
        fits = ulp_distance(model.astype(x.dtype), out[rest]) <= C.ulp_budget(prim, x.dtype)
    return fits & _subnormal(x)


XLA_GPU_MODELS = {"erf_inv": _erf_inv_model, "regularized_incomplete_beta": _betainc_model,
                  "lgamma": _reflection_of_subnormal, "digamma": _reflection_of_subnormal}


XLA_GPU_BUDGETS = _Budgets(_gpu_measured_ulp, XLA_GPU_CASE_ABS, frozenset(), False, subnormal_results=True)


def _xla_gpu_elementwise(f: Failure) -> bool:
    prim = f.primitives[0] if f.primitives else ""
    model = (prim, XLA_GPU_MODELS[prim]) if prim in XLA_GPU_MODELS else None
    return _xla_cpu_elementwise(f, model=model, budgets=XLA_GPU_BUDGETS, model_required=False)


def _round_to(v, dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(v, np.float64).astype(dtype).astype(np.float64)


def _cr(name: str, x, dtype=np.float64) -> np.ndarray:
    """The reference's correctly rounded ``name`` (interp lax_special), as float64 values: the
    models' transcendental steps give the same bits on every host (NumPy's ufuncs do not)."""
    from interp.rules.lax_special import correctly_rounded
    with np.errstate(all="ignore"):
        return correctly_rounded(name, np.asarray(x, np.float64), dtype=dtype).astype(np.float64)


LN2, INV_LN2, LOG_PI = 0.6931471805599453, 1.4426950408889634, 1.1447298858494002   # correctly rounded


def _exp2_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    ln2 = _round_to(LN2, dtype)
    with np.errstate(all="ignore"):
        return [_cr("exp", _round_to(ln2 * x, dtype), dtype), _cr("exp", _round_to(ln2 * x, np.float32), dtype)]


def _logistic_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    with np.errstate(all="ignore"):
        return [1 / _round_to(1 + _cr("exp", -x, dtype), dtype)]


def _log2_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    inv_ln2 = _round_to(INV_LN2, dtype)
    with np.errstate(all="ignore"):
        return [_cr("log", x, dtype) * inv_ln2, _cr("log", x, np.float32) * inv_ln2]


LOWERING_MODELS = {"exp2": _exp2_models, "logistic": _logistic_models, "log2": _log2_models}


def _lowering_model_explains(f: Failure) -> bool:
    """Every element of every failing output is within its mode (the compliance budget of the
    primitive), explained by an allowance, or within LOWERING_MODEL_ULP of one of the lowering's
    models; at least one element needs a model."""
    if len(f.primitives) != 1 or f.primitives[0] not in LOWERING_MODELS or len(f.inputs) != 1:
        return False
    prim, needed = f.primitives[0], False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if ref.dtype.name not in LOWERING_MODEL_ULP or np.shape(f.inputs[0]) != ref.shape:
            return False
        ok = ulp_distance(ref, out) <= C.ulp_budget(prim, ref.dtype)
        ok |= f.allowed_at(i)
        fits = np.zeros(ref.shape, bool)
        for model in LOWERING_MODELS[prim](f.inputs[0], ref.dtype):
            with np.errstate(all="ignore"):
                fits |= ulp_distance(model.astype(ref.dtype), out) <= LOWERING_MODEL_ULP[ref.dtype.name]
        needed |= bool((fits & ~ok).any())
        if not (ok | fits).all():
            return False
    return needed


def _gpu_complex_mul(f: Failure) -> bool:
    if f.primitives != ("mul",) or len(f.inputs) != 2:
        return False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if not np.iscomplexobj(ref):
            return False
        try:
            a, b = (np.broadcast_to(np.asarray(x), ref.shape) for x in f.inputs)
        except ValueError:
            return False
        with np.errstate(all="ignore"):
            scale = np.abs(a.astype(np.complex128)) * np.abs(b.astype(np.complex128))
            err = np.abs(ref.astype(np.complex128) - out.astype(np.complex128))
        k = GPU_COMPLEX128_MUL_EPS if ref.dtype == np.complex128 else 1.0
        ok = err <= k * float(np.finfo(ref.real.dtype).eps) * scale
        ok |= _complex_extreme(a) | _complex_extreme(b) | _subnormal(a) | _subnormal(b)
        ok |= f.allowed_at(i)
        if not ok.all():
            return False
    return True


def _one_lane_survives(f: Failure) -> bool:
    """pallas_triton atomic cases (inputs idx, val, init; output 0 the ref): every element is init or
    op(init, v) for one lane's v hitting it (JAX's gather -> op -> scatter-set discharge)."""
    if len(f.inputs) != 3 or not f.backend:
        return False
    idx, val, init = (np.asarray(a) for a in f.inputs)
    op = {"add": np.add, "max": np.maximum, "min": np.minimum}.get(f.case_id.split("/")[1].replace("atomic_", ""))
    if op is None:
        return False
    got = np.asarray(f.backend[0])
    for i in range(init.size):
        cands = [init[i]] + [op(init[i], v).astype(init.dtype) for v in val[idx == i]]
        if not any(np.array_equal(got[i], c) for c in cands):
            return False
    return True


def _cas_float_compare(f: Failure) -> bool:
    """pallas_triton atomic_cas cases: the backend's two refs are what a float (not bitwise) compare gives."""
    if not f.inputs or len(f.backend) < 2:
        return False
    v = np.asarray(f.inputs[0])
    with np.errstate(invalid="ignore"):
        want = [v[3] if v[0] == v[2] else v[0], v[5] if v[1] == v[4] else v[1]]
    return all(np.array_equal(np.asarray(f.backend[i]), want[i], equal_nan=True) for i in range(2))


def _dot_unrounded(f: Failure) -> bool:
    """The backend's dot is the float32 product of unrounded operands (within the float32 dot bound)."""
    if len(f.inputs) != 2 or not f.backend:
        return False
    a, b = (np.asarray(x, np.float64) for x in f.inputs)
    exact, bound = a @ b, np.abs(a) @ np.abs(b)
    k = a.shape[-1]
    return bool(np.all(np.abs(np.asarray(f.backend[0], np.float64) - exact) <= (k + 2) * 2.0 ** -24 * bound))


def _only_the_draws_outside_fail(f: Failure) -> bool:
    """rng_uniform cases: output 1 (the count of draws outside [a, b)) is the only failing one."""
    return set(f.failing_outputs) == {1}


def _rank3_outputs_fail(f: Failure) -> bool:
    return all(np.ndim(f.reference[i]) >= 3 for i in f.failing_outputs)


_within_256_ulp = _ulp_below(256)


def _atomic_duplicate_targets(f: Failure) -> bool:
    """Only the ref and the values seen fail (outputs 0 and 2), and the lanes' targets (output 1)
    hold duplicates."""
    return (set(f.failing_outputs) <= {0, 2}
            and len(np.unique(f.reference[1])) < np.size(f.reference[1]))


def _xla_cpu_erf_inv_model(f: Failure) -> bool:
    return _xla_cpu_elementwise(f, model=("erf_inv", _erf_inv_model))


def _xla_cpu_betainc_model(f: Failure) -> bool:
    return _xla_cpu_elementwise(f, model=("regularized_incomplete_beta", _betainc_model))


# --- XLA:CPU rewrites found by the program fuzzer (docs/findings.md) ------------------------------

def _identical(a, b) -> np.ndarray:
    """Elementwise: the same value and sign (NaN matches NaN, whatever its sign and payload)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if not (D.is_float(a.dtype) or D.is_complex(a.dtype)):
        return a == b
    wa, wb = a.astype(np.complex128 if D.is_complex(a.dtype) else np.float64), b.astype(
        np.complex128 if D.is_complex(b.dtype) else np.float64)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(wa) & np.isnan(wb)
        same_sign = np.signbit(wa.real) == np.signbit(wb.real)
        return (ulp_distance(a, b) == 0) & (same_sign | nan)


def _elementwise_failing(f: Failure, model: Callable, arity: int) -> bool:
    """Every failing element of every failing output is explained by an allowance or by
    ``model(args, ref, out) -> mask`` (args: the operands broadcast to the output); at least one
    element needs the model."""
    needed = False
    if len(f.inputs) != arity:
        return False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        try:
            args = [np.broadcast_to(np.asarray(a), ref.shape) for a in f.inputs]
        except ValueError:
            return False
        same = _identical(ref, out)
        ok = same | f.allowed_at(i)
        with np.errstate(all="ignore"):
            fits = np.asarray(model(args, ref, out), bool)
        needed |= bool((fits & ~ok).any())
        if not (ok | fits).all():
            return False
    return needed


def _adds_zero_as_identity(f: Failure) -> bool:
    def model(args, ref, out):
        x, y = (a.astype(np.float64) for a in args)
        neg_zero = (x == 0) & np.signbit(x)
        other_zero = (y == 0)
        if f.primitives[0] == "sub":          # x - (-0.0) is x + 0.0
            other_zero &= np.signbit(y)
        r, o = ref.astype(np.float64), out.astype(np.float64)
        return neg_zero & other_zero & (r == 0) & ~np.signbit(r) & (o == 0) & np.signbit(o)
    return f.primitives[:1] in (("add",), ("sub",)) and _elementwise_failing(f, model, 2)


def _kernel_adds_zero_as_identity(f: Failure) -> bool:
    """Every failing element of a kernel that adds floats is +0.0 in the reference and -0.0 in the
    backend (which addition it was is not visible from outside the kernel), or is so against the
    reference replayed under an allowance (XLA:CPU flushes a subnormal to -0.0, then keeps it)."""
    if "add" not in f.primitives:
        return False
    for i in f.failing_outputs:
        out = np.asarray(f.backend[i])
        ok = f.allowed_at(i)
        for refs in (f.reference, *f.replayed):
            ref = np.asarray(refs[i])
            if ref.shape != out.shape or ref.dtype != out.dtype or ref.dtype.kind != "f":
                return False
            r, o = ref.astype(np.float64), out.astype(np.float64)
            ok = ok | _identical(ref, out) | ((r == 0) & ~np.signbit(r) & (o == 0) & np.signbit(o))
        if not ok.all():
            return False
    return True


def reciprocal_quotient(x, y, dtype) -> np.ndarray:
    """x / y as XLA:CPU's algsimp computes a division by a constant or broadcast value:
    x * fl(1 / y) in float32, rounded to ``dtype`` (xla-cpu-divide-by-constant-as-reciprocal).
    A float16 reciprocal is itself a float16 value (the optimized HLO keeps the f16 divide and
    multiply: `constant(0.099976)` for 1 / 10); bfloat16's is float32 (XLA:CPU computes bfloat16
    arithmetic in float32 and converts the product)."""
    x, y = (np.asarray(a).astype(np.float32) for a in (x, y))
    recip = (np.float32(1) / y).astype(np.float32)
    if np.dtype(dtype) == np.float16:
        recip = recip.astype(np.float16).astype(np.float32)
    return (x * recip).astype(np.float32).astype(dtype)


def _division_as_reciprocal(f: Failure) -> bool:
    def model(args, ref, out):
        return _identical(reciprocal_quotient(args[0], args[1], out.dtype), out)
    return np.asarray(f.reference[0]).dtype.name in ("float32", "float16", "bfloat16") and \
        _elementwise_failing(f, model, 2)


def _product_with_bool_as_select(f: Failure) -> bool:
    def model(args, ref, out):
        fits = np.zeros(ref.shape, bool)
        for p, x in (args, args[::-1]):
            p = p.astype(np.float64)
            flag = (p == 0) | (p == 1)
            want = np.where(p == 1, x, np.zeros((), x.dtype)).astype(out.dtype)
            fits |= flag & _identical(want, out)
        return fits
    return not np.iscomplexobj(f.reference[0]) and _elementwise_failing(f, model, 2)


def _clz_folded_negative(f: Failure) -> bool:
    def model(args, ref, out):
        x = args[0]
        width = D.bit_width(x.dtype)
        return (x.astype(np.int64) < 0) & (out.astype(np.int64) == width - 64)
    return _elementwise_failing(f, model, 1)


def _convolution_skips_padding(f: Failure) -> bool:
    """The backend's convolution leaves out the taps on padding and on lhs-dilation holes (where the
    definition multiplies the kernel by a zero): per failing element, the value of the finite terms
    of the real taps (within the DOT_PRODUCT bound, K <= the kernel's size) plus their non-finite
    terms (inf or NaN, summed as IEEE 754 does), and at least one element whose reference that
    changes. Where the finite terms' magnitudes can add up past the accumulator's largest value, a
    partial sum may overflow in the backend's order (as checks._dot_product_bad allows): there the
    element is NaN, or (no NaN term, no opposite infinities) the infinity of the infinite terms, or
    anything where there is none."""
    if f.fn is None or len(f.inputs) != 2 or not all(D.is_float(np.asarray(v).dtype) for v in f.inputs):
        return False
    import interp
    x, w = (np.asarray(v) for v in f.inputs)
    conv = interp.interpret(f.fn)

    def run(a, b):
        with np.errstate(all="ignore"):
            return [np.asarray(o).astype(np.float64) for o in conv(a.astype(x.dtype), b.astype(w.dtype))]

    def counts(*pairs):     # per output element: the real (not padding) taps with either pair of masks
        per_pair = [run(a.astype(np.float64), b.astype(np.float64)) for a, b in pairs]
        return [sum(outs) for outs in zip(*per_pair)]

    with np.errstate(all="ignore"):
        xs, ws = x.astype(np.float64), w.astype(np.float64)
        finite_x, finite_w = (np.where(np.isfinite(v), v, 0) for v in (xs, ws))
        x_any, w_any = np.ones(x.shape), np.ones(w.shape)
        n_nan = counts((np.isnan(xs), w_any), (x_any, np.isnan(ws)), (xs == 0, np.isinf(ws)), (np.isinf(xs), ws == 0))
        n_pos = counts((xs > 0, ws == np.inf), (xs < 0, ws == -np.inf), (xs == np.inf, ws > 0), (xs == -np.inf, ws < 0))
        n_neg = counts((xs > 0, ws == -np.inf), (xs < 0, ws == np.inf), (xs == np.inf, ws < 0), (xs == -np.inf, ws > 0))
        finite = run(finite_x, finite_w)
        magnitude = run(np.abs(finite_x), np.abs(finite_w))
    acc_max = float(np.finfo(np.float64 if x.dtype.itemsize >= 8 else np.float32).max)
    needed = False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if i >= len(finite) or finite[i].shape != ref.shape or not D.is_float(ref.dtype):
            return False
        with np.errstate(all="ignore"):
            to_nan = (n_nan[i] > 0) | ((n_pos[i] > 0) & (n_neg[i] > 0))
            special = np.where(to_nan, np.nan, np.where(n_pos[i] > 0, np.inf, np.where(n_neg[i] > 0, -np.inf, 0.0)))
            model = finite[i] + special
            o = out.astype(np.float64)
            r = ref.astype(np.float64)
            tol = (w.size + 1) * float(D.finfo(ref.dtype).eps) * magnitude[i]
            # where the reference is finite no tap met a non-finite weight: an order difference
            same = _identical(ref, out) | (np.isfinite(r) & np.isfinite(o) & (np.abs(o - r) <= tol))
            overflow = magnitude[i] * (1 + 4 * float(np.finfo(np.float32).eps)) >= acc_max
            same |= overflow & (np.isnan(o) | ~to_nan & ((special == 0) | (o == special)))
            skipped = ~np.isfinite(r) & (_identical(model.astype(ref.dtype), out) | (
                np.isfinite(model) & np.isfinite(o) & (np.abs(o - model) <= tol)))
        if not (same | skipped).all():
            return False
        needed |= bool((skipped & ~same).any())
    return needed


def _subnormals_returned_as_zero(f: Failure) -> bool:
    """Every differing element of every failing output is a subnormal of the reference that the
    backend returned as a zero of its sign (a data movement that flushed it)."""
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if ref.shape != out.shape or not D.is_float(ref.dtype):
            return False
        r, o = ref.astype(np.float64), out.astype(np.float64)
        subnormal = (r != 0) & (np.abs(r) < float(D.finfo(ref.dtype).tiny))
        flushed = subnormal & (o == 0) & (np.signbit(o) == np.signbit(r))
        if not (_identical(ref, out) | flushed).all():
            return False
    return bool(f.failing_outputs)


# The matchers spec/divergences.py entries name.
MATCHERS: dict[str, Callable[[Failure], bool]] = {
    "kernel_adds_zero_as_identity": _kernel_adds_zero_as_identity,
    "all_reduce_extremum_specials": _all_reduce_extremum_specials,
    "atomic_duplicate_targets": _atomic_duplicate_targets,
    "cas_float_compare": _cas_float_compare,
    "dot_unrounded": _dot_unrounded,
    "adds_zero_as_identity": _adds_zero_as_identity,
    "division_as_reciprocal": _division_as_reciprocal,
    "product_with_bool_as_select": _product_with_bool_as_select,
    "clz_folded_negative": _clz_folded_negative,
    "convolution_skips_padding": _convolution_skips_padding,
    "subnormals_returned_as_zero": _subnormals_returned_as_zero,
    "erf_out_of_range": _erf_out_of_range,
    "failing_all_zero": _failing_all_zero,
    "gpu_complex_mul": _gpu_complex_mul,
    "lowering_model_explains": _lowering_model_explains,
    "one_lane_survives": _one_lane_survives,
    "only_the_draws_outside_fail": _only_the_draws_outside_fail,
    "rank3_outputs_fail": _rank3_outputs_fail,
    "sqrt_via_float16": _sqrt_via_float16,
    "within_256_ulp": _within_256_ulp,
    "xla_cpu_betainc_model": _xla_cpu_betainc_model,
    "xla_cpu_elementwise": _xla_cpu_elementwise,
    "xla_cpu_erf_inv_model": _xla_cpu_erf_inv_model,
    "xla_gpu_elementwise": _xla_gpu_elementwise,
}


def matches(d: Divergence, f: Failure) -> bool:
    """Whether the known divergence ``d`` explains the failing result ``f``."""
    if f.outcome not in d.outcomes:
        return False
    if not any(fnmatch.fnmatchcase(f.runner, p) for p in d.runners):
        return False
    if d.cases and not any(fnmatch.fnmatchcase(f.case_id, p) for p in d.cases):
        return False
    if d.primitives and not set(d.primitives) & set(f.primitives):
        return False
    if d.dtypes and not any(np.asarray(f.backend[i]).dtype.name in d.dtypes for i in f.failing_outputs):
        return False
    if not version_in(f.jax_version, d.jax_versions):
        return False
    return d.matcher is None or bool(MATCHERS[d.matcher](f))


def find(f: Failure) -> Divergence | None:
    """The first known divergence (spec/divergences.py) that explains ``f``, or None."""
    for d in DIVERGENCES:
        if matches(d, f):
            return d
    return None
