"""Known divergences: real upstream bugs and documented differences, each with a link, the
runners and JAX versions it affects, and a matcher that recognises it in a failing result.

A failing (case, runner) whose difference one of these matches is reported as
``known-divergence`` with the link; when the upstream bug is fixed the case passes and the
nightly history shows it as fixed.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Callable, Sequence

import numpy as np

from . import lax_special as _lax_special


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


@dataclasses.dataclass(frozen=True)
class Divergence:
    id: str
    link: str
    summary: str
    runners: tuple[str, ...]                    # fnmatch patterns
    primitives: tuple[str, ...] = ()            # the case must exercise one of these (empty: any)
    dtypes: tuple[str, ...] = ()                # a failing output must have one of these (empty: any)
    jax_versions: tuple[str, str | None] = ("0", None)   # [first affected, first fixed)
    match: Callable[[Failure], bool] | None = None        # extra recognition on the values
    # What the entry explains: "fail" (values differ), "timeout" (the backend never returns),
    # "crash" (the backend process dies). Timeouts and crashes carry no values: such an entry names
    # the cases it explains (fnmatch patterns of case ids) and its matcher sees no outputs.
    outcomes: tuple[str, ...] = ("fail",)
    cases: tuple[str, ...] = ()                 # fnmatch patterns of case ids (empty: any)

    def __post_init__(self):
        if set(self.outcomes) - {"fail"} and not self.cases:
            raise ValueError(f"divergence {self.id}: a timeout/crash entry must name its cases")

    def matches(self, f: Failure) -> bool:
        if f.outcome not in self.outcomes:
            return False
        if not any(fnmatch.fnmatchcase(f.runner, p) for p in self.runners):
            return False
        if self.cases and not any(fnmatch.fnmatchcase(f.case_id, p) for p in self.cases):
            return False
        if self.primitives and not set(self.primitives) & set(f.primitives):
            return False
        if self.dtypes and not any(np.asarray(f.backend[i]).dtype.name in self.dtypes for i in f.failing_outputs):
            return False
        if not _version_in(f.jax_version, self.jax_versions):
            return False
        return self.match is None or bool(self.match(f))


def _vtuple(v: str) -> tuple:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _version_in(v: str, rng) -> bool:
    lo, hi = rng
    return _vtuple(v) >= _vtuple(lo) and (hi is None or _vtuple(v) < _vtuple(hi))


def _failing_all_zero(f: Failure) -> bool:
    return all(not np.any(np.asarray(f.backend[i])) for i in f.failing_outputs)


def _ulp_below(limit: float):
    return lambda f: f.max_ulp is not None and f.max_ulp <= limit


def _erf_out_of_range(f: Failure) -> bool:
    return any(np.any(np.abs(np.asarray(f.backend[i], np.float64)) > 1) for i in f.failing_outputs)


# --- XLA:CPU special functions and subnormal arguments (found by the conformance cases) -------------
# Worst ULP distance from the correctly rounded reference seen on the conformance cases (quick
# profile, seed 0, JAX 0.10.2 and 0.12.0.1) where it exceeds spec/lax_special.py XLA_CPU_ULP (the
# regression budgets measured on DOMAINS by tests/test_lax_special.py). Keys: (primitive, dtype).
XLA_CPU_CASE_ULP: dict[tuple[str, str], int] = {
    ("digamma", "float32"): 29,     # digamma(1.5) (near the root 1.4616...: 0.0364900 vs 0.0364899)
    ("logistic", "float16"): 4,     # a float16 subnormal result (2**-22) returned as 0
    ("lgamma", "float32"): 57,      # JAX 0.10.2 only (0.12.0.1 stays within 6): lgamma(x) = 0.2322603
    # Found by the nightly seed search (2026-11-23; the worst elements confirmed with mpmath at 60
    # digits: the reference is right). Sampled measurements: budget = 2 x the worst seen; the
    # specials grid is fixed, so its measurement is exhaustive and the budget is the worst itself.
    ("bessel_i1e", "float64"): 14,  # 7 ulp at x = 7.9903 (15 seeds of .../bessel_i1e/float64/33x65, JAX 0.12.0.1; 6 on 0.10.2)
    # computed in float32 and rounded: igammac(6.1035e-5, 0.09998) = 1.1081e-4 vs 1.1128e-4 (8 ulp; for a
    # tiny a XLA forms 1 - P(a, x) in float32, losing the digits of Q ~ 1e-4), igammac(65504, 65504) 2 ulp
    ("igammac", "float16"): 8,
    ("igamma_grad_a", "float64"): 392,   # 196 ulp on a result of -1.67e-57 (a = 19.84, x = 0.01024; 4 seeds of 33x65)
    # 630 ulp at (a, x) = (49.636, 58.055), Q = 0.1190 (11 seeds of 33x65, JAX 0.12.0.1; 481 in 6 on 0.10.2): XLA forms the
    # prefactor x^a e^-x / Gamma(a) as exp(a log x - x - lgamma(a)), whose argument is a difference of
    # terms of size ~a log x (~200 here): their absolute rounding error becomes the relative error of Q
    ("igammac", "float64"): 1260,
    # Found by the program fuzzer (JAX 0.12.0.1, inputs past the measured domain's 12): erfc(24.525142673650148)
    # 244 ulp off (the result is ~1e-263); 2 x that, the rule above
    ("erfc", "float64"): 488,
}
# Primitives whose XLA:CPU results at a subnormal argument are neither the value there nor the value
# at zero (the flush-to-zero allowance): DAZ reads the argument as 0 in one part of the expansion and
# not in another. Observed: cbrt(+-2**-149) = -5.6e-16, atan2(+-2**-149, +-2**-149) = NaN,
# pow(2**-149, 0.1) = 2**-15 (as if x = 2**-150), nextafter(2**-149, -2**-149) = -2**-149 (x == y after
# DAZ returns y's raw bits), igamma(2**-149, x) = NaN, complex mul (2**-149) * inf = NaN. lgamma
# (JAX 0.10.2) gives the value at zero (+inf), which flush-to-zero would explain, but in the same output
# as accuracy differences, which the allowance's replay alone cannot.
XLA_CPU_DAZ_INCONSISTENT = frozenset({
    "cbrt", "atan2", "pow", "nextafter", "mul", "igamma", "igammac", "igamma_grad_a", "digamma",
    "polygamma", "zeta", "regularized_incomplete_beta", "lgamma"})


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
    from interp import dtypes as D
    if not D.is_float(x.dtype):
        return np.zeros(x.shape, bool)
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
        return (a > 0) & (a < float(D.finfo(x.dtype).tiny))


# Errors that are absolute, not relative: in units of eps * max(1, |f(x)|) of the output dtype, the
# largest |backend - reference| XLA:CPU reaches, where that exceeds the ULP budget. XLA's digamma and
# lgamma (openxla/xla xla/hlo/builder/lib/math.cc Digamma, Lgamma: Lanczos approximation with g = 7,
# plus the reflection formula for x < 0.5) add terms of size O(1) and more (log t, A'(z)/A(z), g/t;
# lgamma: (z + 1/2 - t/log t) log t, log(pi) - log|sin(pi x)|), so their rounding errors are a few
# eps in absolute terms, and near a zero of the function (digamma: 1.4616..., -0.5040..., -1.5734...;
# lgamma: 1, 2, -2.457...) the ULP distance has no bound. Measured (nightly 2026-11-23, the cases'
# input distribution, every element checked against the correctly rounded reference, the worst
# points confirmed with mpmath at 60 digits; JAX 0.12.0.1 / 0.10.2): digamma float64 9.0 / 7.5
# (151 / 23 seeds of lax_special/digamma/float64/33x65; ULPs up to 11930 at x = 1.46179), digamma
# float32 10.75 (100 seeds of .../float32/33x65; 73648 ulp at x = -0.50407), lgamma float64 23 / 23
# (100 / 50 seeds; 944043 ulp at x = 2.0000117). Budget: 2 x the larger measurement (the rule of
# spec/lax_special.py XLA_CPU_ULP).
XLA_CPU_CASE_ABS: dict[tuple[str, str], float] = {
    ("digamma", "float64"): 18,
    ("digamma", "float32"): 22,
    ("lgamma", "float64"): 46,
    ("lgamma", "float32"): 62,      # JAX 0.10.2: 31 (60 seeds; 80059 ulp at the zero -2.45709); 0.12.0.1: 1.9
}


def _within_abs(prim: str, ref: np.ndarray, out: np.ndarray, table: dict | None = None) -> np.ndarray:
    k = (XLA_CPU_CASE_ABS if table is None else table).get((prim, ref.dtype.name))
    if k is None:
        return np.zeros(ref.shape, bool)
    from interp import dtypes as D
    r, o = ref.astype(np.float64), out.astype(np.float64)
    with np.errstate(all="ignore"):
        return np.abs(o - r) <= k * float(D.finfo(ref.dtype).eps) * np.maximum(1.0, np.abs(r))


# XLA's erf_inv (math.cc ErfInv32 / ErfInv64, Giles' polynomials) computes w = -log1p(-x * x): the
# product x * x is rounded before 1 - x^2 is formed, and near |x| = 1 that rounding is a large
# relative error of 1 - x^2. XLA:CPU's result is then the erf_inv of sqrt(fl(x * x)), not of x:
# within 3.8 ulp of that (float32: every 7th float32 in [2^-60, 1) and every float32 in [0.5, 1),
# 80 million values; float64: the 200 worst of 4 million values near 1, with mpmath), while it is
# up to 64.7 ulp from erf_inv(x) in float32 (at x = 0.99982744, exhaustively over [0.5, 1); the
# sample below 0.5 stays within 3.5) and 498928 ulp in float64 (at 1 - x = 7.45e-9 = 2^-27, where
# the dropped low part of x^2, k^2 2^-106 for x = 1 - k 2^-53, reaches half an ulp of 1). Same on JAX
# 0.10.2 and 0.12.0.1. Computing 1 - x^2 as (1 - x)(1 + x) would remove it (an upstream report).
XLA_ERF_INV_F32_WORST_ULP = 65      # the exhaustive float32 maximum above, rounded up


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
    from conformance.checks import ulp_distance
    model = _erf_inv_of_rounded_square(args[0][rest], ref.dtype)
    return ulp_distance(model, out[rest]) <= _measured_ulp("erf_inv", ref.dtype.name)


# JAX's betainc lowering (jax/_src/lax/special.py regularized_incomplete_beta_impl, a port of XLA's
# math.cc; the same on JAX 0.10.2 and 0.12.0.1) computes I_x(a, b) = h * exp(t) / a with, after the
# swap to (b, a, 1 - x) where x >= (a + 1) / (a + b + 2) (then the result is 1 - that),
# t = a log x + b log1p(-x) - (lgamma(a) + lgamma(b) - lgamma(a + b)), and h the continued fraction
# DLMF 8.17.22 by Lentz's method, stopped after num_iterations (200 float32, 600 float64; narrower
# dtypes are computed in float32). Two errors follow:
# 1. t is a sum of terms of size up to S = |a log x| + |b log1p(-x)| + |lgamma(a)| + |lgamma(b)| +
#    |lgamma(a + b)|, each rounded: an absolute error ~eps S in t, a relative error expm1(eps S) of
#    the swapped value v (I or 1 - I), so an absolute error of v expm1(eps S) in the result (1 - v
#    turns it into a large relative error when I is small: float32 737 ulp at (17.06, 0.1, 0.9556)).
#    Each iteration adds a rounding to h too; on JAX 0.10.2 the loop runs until every element of the
#    array has converged (0.12 masks converged elements), so every element may take up to the cap.
# 2. Near the mean the fraction needs more iterations as a + b grows (a = b at the mean: float64 53
#    at 1e2, 495 at 1e5, 2227 at 1e7; float32 275 at 1e5): past the cap h is a truncated approximant
#    and the result anything (float64 betainc(1e9, 1e9, 0.5) = -1.1955; float32 -inf, 1.0 on 0.10.2).
# Measured (2026-11-23, JAX 0.10.2 and 0.12.0.1; 3405 float32 and 3767 float64 points: a, b = 10^1..
# 10^12 with b/a = 1, 3, 1/3, 30 at the mean +- 0, 0.5, 1, 3, 6 sd, and one parameter 0.5 / 2 / 20 /
# 200 at quantiles 1e-6..0.99; plus 8 seeds of the nightly's 33x65, 1x130, 2x3x4 cases): where the
# fraction converges within the cap, |XLA - I| - ulp(I) <= v expm1(R eps (S + n)) with n the
# iterations run (0.12: the element's own; 0.10.2: the cap) holds with R <= 0.74 (float32) and 2.82
# (float64, JAX 0.10.2; 1.64 on 0.12.0.1), zeros from an underflowing exp(t) aside; no point that
# needs more than the cap was within the ULP budget. K = 2 x the worst, as for the measured budgets.
BETAINC_ITERATIONS = {"float32": 200, "float64": 600}
BETAINC_MODEL_K = 6


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
        s = (np.abs(a * np.log(x)) + np.abs(b * np.log1p(-x)) + np.abs(special.gammaln(a))
             + np.abs(special.gammaln(b)) + np.abs(special.gammaln(a + b)))
        need, h = _betainc_lentz(a, b, x, eps / 2, cap)
        n = need if _vtuple(f.jax_version) >= (0, 12) else cap
        ulp = np.spacing(np.abs(ref[rest])).astype(np.float64)
        v = np.where(swap, 1 - r, r) + ulp / 2          # the swapped value, from the rounded reference
        grow = np.expm1(BETAINC_MODEL_K * eps * (s + n))
        bound = v * grow + ulp
        fits = (np.abs(o - r) <= bound) | (bound > float(np.finfo(ref.dtype).max))
        pre = v * a / h                                   # exp(t)
        fits |= (o == 0) & ~swap & (np.minimum(pre, pre / a) <= tiny * (1 + grow))
    return fits | (need >= cap)


def _measured_ulp(prim: str, dtype: str) -> int:
    budget = _lax_special.XLA_CPU_ULP.get(prim, {}).get(dtype, (0, ""))[0]
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
    from conformance.checks import ulp_distance
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
        if i < len(f.allowed) and f.allowed[i] is not None:
            ok |= np.asarray(f.allowed[i])       # explained by an allowance (e.g. flush-to-zero)
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


# --- XLA:GPU special functions (the H100 evidence, JAX 0.11.2) -----------------------------------------
# The same XLA math.cc / JAX special.py algorithms as on XLA:CPU, evaluated with XLA:GPU's own float32
# arithmetic (PTX div.full, sqrt.approx and approximate transcendentals): the worst ULP distance from
# the correctly rounded reference on every recorded output (quick profile at seed 0 plus every failing
# seed of the nightly; elements at XLA_CPU_SPECIAL_ARGS arguments or with subnormal arguments or
# results excluded), measured by docs/gpu-triage.md's procedure. Budget: 2 x the worst measured, the
# rule of spec/lax_special.py XLA_CPU_ULP; the specials grids are exhaustive, so theirs count as is.
XLA_GPU_CASE_ULP: dict[tuple[str, str], int] = {
    # (primitive, dtype): 2 x worst measured (the worst in a comment)
    ("bessel_i0e", "float32"): 10,       # 5
    ("bessel_i0e", "float64"): 14,       # 7
    ("bessel_i1e", "float32"): 18,       # 9
    ("bessel_i1e", "float64"): 16,       # 8
    ("erf", "float32"): 8,               # 4
    ("erf_inv", "float32"): 22,          # 11
    ("erf_inv", "float64"): 38,          # 19
    ("erfc", "float32"): 110,            # 55
    ("erfc", "float64"): 198,            # 99
    ("igamma", "float32"): 1080,         # 540
    ("igamma", "float64"): 2268,         # 1134
    ("igamma_grad_a", "float32"): 246,   # 123
    ("igamma_grad_a", "float64"): 406,   # 203 at (a, x) = (17.057, 0.01): -1.3553e-48
    ("igammac", "float16"): 18,          # 9
    ("igammac", "float32"): 848,         # 424
    ("igammac", "float64"): 332,         # 166
    ("polygamma", "float32"): 22,        # 11
    ("polygamma", "float64"): 22,        # 11
    ("tanh", "float32"): 8,              # 4 (XLA's own budget: 3)
    ("zeta", "float32"): 18,             # 9
    ("zeta", "float64"): 60,             # 30
}
# Absolute errors (eps * max(1, |f|) multiples) where XLA's digamma/lgamma add O(1) terms (see
# XLA_CPU_CASE_ABS): 2 x the worst measured on the H100.
XLA_GPU_CASE_ABS: dict[tuple[str, str], float] = {
    ("digamma", "float32"): 20,          # 10.0 at x = 2.7948 (ULPs up to 498 near its zeros)
    ("digamma", "float64"): 88,          # 43.7 at x = -17.4015 (a reflection, |pi / tan(pi x)| ~ 1)
    ("lgamma", "float32"): 45,           # 22.5 at x = -3.0641 (ULPs up to 891)
    ("lgamma", "float64"): 27,           # 13.1 at x = -3.8389 (at its zeros 1 and 2 no ULP bound holds)
}


def _gpu_measured_ulp(prim: str, dtype: str) -> int:
    from spec import compliance as C
    return max(XLA_GPU_CASE_ULP.get((prim, dtype), 0), C.ulp_budget(prim, dtype) or 0)


# XLA:GPU keeps float32 subnormals (no DAZ), and XLA's lgamma and digamma reflect x < 0.5 through
# sin(pi x) / tan(pi x): for a subnormal x the product pi * x is rounded to the subnormal grid
# (pi * 2^-149 -> 3 * 2^-149), so lgamma(2^-149) = log(pi) - log(3 * 2^-149) = 103.32505 where the
# true value is 103.27893 (6045 ulp; H100, lax_special/lgamma/float32/specials), and digamma(x) ~
# -pi / fl(pi x). openxla/xla xla/hlo/builder/lib/math.cc Lgamma / Digamma (reflection for x < 0.5).
def _reflection_of_subnormal(f: Failure, args, ref, out, rest) -> np.ndarray:
    from conformance.checks import ulp_distance
    from spec import compliance as C
    prim = f.primitives[0]
    x = np.asarray(args[0])[rest]
    if x.dtype not in (np.float32, np.float64):
        return np.zeros(x.shape, bool)
    with np.errstate(all="ignore"):
        t = (np.asarray(np.pi, x.dtype) * np.abs(x)).astype(np.float64)   # rounded to the subnormal grid
        model = (np.log(np.pi) - np.log(t)) if prim == "lgamma" else -np.pi / (np.sign(x) * t)
        fits = ulp_distance(model.astype(x.dtype), out[rest]) <= C.ulp_budget(prim, x.dtype)
    return fits & _subnormal(x)


XLA_GPU_MODELS = {"erf_inv": _erf_inv_model, "regularized_incomplete_beta": _betainc_model,
                  "lgamma": _reflection_of_subnormal, "digamma": _reflection_of_subnormal}
XLA_GPU_BUDGETS = _Budgets(_gpu_measured_ulp, XLA_GPU_CASE_ABS, frozenset(), False, subnormal_results=True)


def _xla_gpu_elementwise(f: Failure) -> bool:
    prim = f.primitives[0] if f.primitives else ""
    model = (prim, XLA_GPU_MODELS[prim]) if prim in XLA_GPU_MODELS else None
    return _xla_cpu_elementwise(f, model=model, budgets=XLA_GPU_BUDGETS, model_required=False)


# --- JAX lowerings that round in the operand's own dtype (found on the H100 evidence) ---------------
# jax/_src/lax/lax.py _exp2_lower: exp2(x) = exp(log(2) * x) with log(2) a constant of x's dtype, so
# the product's rounding (bf16: ln 2 itself is 0.6914, 2.5e-3 off) becomes a relative error of the
# result; lax.py logistic_impl (GPU/CPU lowering): 1 / (1 + exp(-x)) with exp and the sum rounded
# to x's dtype (the H100's optimized HLO keeps exp and add in bf16/f16; a float16 exp(-x) overflows
# to inf below x = -11.09 and the result is 0). Each model is the lowering with every intermediate
# rounded to the dtype (or, for the product feeding exp, kept in float32: XLA may fuse it), the
# last operation correctly rounded; the backend must be within LOWERING_MODEL_ULP of it. log2 (JAX >=
# 0.11, lax.py _log2_lower) is log(x) * fl(1 / ln 2), the same way: bfloat16 log2(0.006226) = -7.375
# for -7.3125 (2 ulp).
LOWERING_MODEL_ULP = {"float32": 7, "float64": 5, "bfloat16": 1, "float16": 1}   # exp: accuracy_budget.h GPU, JAX f64 tolerance; narrow: 1


def _round_to(v, dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(v, np.float64).astype(dtype).astype(np.float64)


def _exp2_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    ln2 = _round_to(np.log(2.0), dtype)
    with np.errstate(all="ignore"):
        return [np.exp(_round_to(ln2 * x, dtype)), np.exp(_round_to(ln2 * x, np.float32))]


def _logistic_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    with np.errstate(all="ignore"):
        return [1 / _round_to(1 + _round_to(np.exp(-x), dtype), dtype)]


def _log2_models(x: np.ndarray, dtype) -> list[np.ndarray]:
    x = np.asarray(x).astype(np.float64)
    inv_ln2 = _round_to(1.4426950408889634, dtype)
    with np.errstate(all="ignore"):
        return [_round_to(np.log(x), dtype) * inv_ln2, _round_to(np.log(x), np.float32) * inv_ln2]


LOWERING_MODELS = {"exp2": _exp2_models, "logistic": _logistic_models, "log2": _log2_models}


def _lowering_model_explains(f: Failure) -> bool:
    """Every element of every failing output is within its mode (the compliance budget of the
    primitive), explained by an allowance, or within LOWERING_MODEL_ULP of one of the lowering's
    models; at least one element needs a model."""
    from conformance.checks import ulp_distance
    from spec import compliance as C
    if len(f.primitives) != 1 or f.primitives[0] not in LOWERING_MODELS or len(f.inputs) != 1:
        return False
    prim, needed = f.primitives[0], False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if ref.dtype.name not in LOWERING_MODEL_ULP or np.shape(f.inputs[0]) != ref.shape:
            return False
        ok = ulp_distance(ref, out) <= C.ulp_budget(prim, ref.dtype)
        if i < len(f.allowed) and f.allowed[i] is not None:
            ok |= np.asarray(f.allowed[i])
        fits = np.zeros(ref.shape, bool)
        for model in LOWERING_MODELS[prim](f.inputs[0], ref.dtype):
            with np.errstate(all="ignore"):
                fits |= ulp_distance(model.astype(ref.dtype), out) <= LOWERING_MODEL_ULP[ref.dtype.name]
        needed |= bool((fits & ~ok).any())
        if not (ok | fits).all():
            return False
    return needed


# --- XLA:GPU complex multiply (the H100 evidence, JAX 0.11.2) ------------------------------------------
# XLA expands a complex multiply into real products and sums without C99 Annex G's recovery of
# infinities: (1.5 + 1.2e-7j) * (3.4e38 + inf j) is (nan + inf j) where the reference gives
# (-inf + inf j); a part that overflows or meets a flushed subnormal is lost the same way. On ordinary
# complex128 arguments the H100's result is up to 1.48 eps |a||b| from the correctly rounded product
# (3 of 2145 elements of lax_elementwise/mul_complex/complex128/33x65 at seed 0, e.g. (100 - 100j) *
# (0.53954216782201 - 0.55270783468416j): real part -1.3165666862147631, correctly rounded
# -1.3165666862147702), past the case's DOT_PRODUCT(K=2) bound of eps |a||b|; complex64 stays within it.
# Budget: 2 x the worst measured.
GPU_COMPLEX128_MUL_EPS = 3.0


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
        if i < len(f.allowed) and f.allowed[i] is not None:
            ok |= np.asarray(f.allowed[i])
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


DIVERGENCES: tuple[Divergence, ...] = (
    Divergence(
        "xla-cpu-all-reduce-extremum-nan-zero",
        "https://openxla.org/stablehlo/spec#all_reduce (the reduction body JAX emits is "
        "stablehlo.maximum / minimum, https://openxla.org/stablehlo/spec#maximum: NaN propagates)",
        "XLA:CPU's all-reduce with a maximum/minimum body (lax.pmax/pmin on floats) drops NaN "
        "operands and, between -0.0 and +0.0, returns the lowest-numbered device's zero (8 host "
        "devices, JAX 0.10.2 and 0.12.0.1). Found by this suite (spmd cases, spec/spmd.py pmax).",
        runners=("xla:cpu",), primitives=("pmax", "pmin"),
        match=lambda f: f.case_id.startswith("spmd/") and _all_reduce_extremum_specials(f)),
    Divergence(
        "tpu-interpret-prng-zeros",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py "
        "(prng_random_bits_p: 'TODO(jburnim): Implement this properly?' returns jnp.zeros)",
        "JAX's TPU interpret mode ignores pltpu.prng_seed and returns all zeros from "
        "pltpu.prng_random_bits (and from the stateful samplers built on it).",
        runners=("pallas:tpu-interpret",),
        primitives=("prng_random_bits",),
        match=_failing_all_zero),
    Divergence(
        "xla-rng-uniform-reaches-b",
        "https://openxla.org/xla/operation_semantics#rng (RNG_UNIFORM: values in [a, b)); "
        "xla/service/rng_expander.cc (a + (b - a) * u, rounded to nearest; float16/bfloat16 drawn in "
        "float32 and converted)",
        "XLA's lax.rng_uniform returns b itself: in a range of four ulps about one draw in eight "
        "is b (every float dtype; XLA:CPU on JAX 0.10.2 and 0.12.0.1; XLA:GPU on an H100, JAX 0.11.2: "
        "126-144 of 1024 draws, the optimized HLO is the same RngExpander arithmetic over Philox bits), and "
        "float16/bfloat16 draws reach 1.0 on [0, 1). Found by this suite (conformance/cases/random.py "
        "rng_uniform cases, output 1).",
        runners=("xla:cpu", "xla:cuda"), primitives=("rng_uniform",),
        match=lambda f: f.case_id.startswith("random/rng_uniform/") and set(f.failing_outputs) == {1}),
    Divergence(
        "pallas-ops-tpu-threefry-rank3",
        "https://github.com/jax-ml/jax/blob/main/jax/experimental/pallas/ops/tpu/random/prng_utils.py "
        "(blocked_iota/compute_scalar_offset use total_shape[0..1] as strides)",
        "The shipped Pallas TPU threefry kernel (plthreefry_random_bits) equals partitionable "
        "jax.random.bits only for rank <= 2: for rank >= 3 its counters use the wrong strides. "
        "Found by this suite (docs/prng.md; verified for (2,5,7) and (3,4,300)).",
        runners=("pallas:*",), primitives=("threefry2x32",),
        match=lambda f: f.case_id.startswith("pallas/claims/tpu_threefry")
        and all(np.ndim(f.reference[i]) >= 3 for i in f.failing_outputs)),
    Divergence(
        "jax-39707-log1p-f64-cpu", "https://github.com/jax-ml/jax/issues/39707",
        "float64 log1p on XLA:CPU is up to ~129 ulp from the correctly rounded result.",
        runners=("xla:cpu",), primitives=("log1p",), dtypes=("float64", "complex128"),
        match=_ulp_below(256)),
    Divergence(
        "jax-14717-erf-above-one-cpu", "https://github.com/jax-ml/jax/issues/14717",
        "erf returns values slightly above 1 on XLA:CPU.",
        runners=("xla:cpu", "pallas:interpret", "pallas:tpu-interpret"), primitives=("erf",),
        match=_erf_out_of_range),
    Divergence(
        "jax-19011-fp8-minmax-nan", "https://github.com/jax-ml/jax/issues/19011",
        "min/max of fp8 values with NaN do not propagate NaN on some backends.",
        runners=("xla:*",), primitives=("max", "min"),
        dtypes=("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")),
    Divergence(
        "jax-19689-frexp-subnormal-tpu", "https://github.com/jax-ml/jax/issues/19689",
        "frexp of subnormals is wrong on TPU (no subnormal support).",
        runners=("xla:tpu",), primitives=("frexp",)),
    Divergence(
        "jax-25047-pallas-gpu-float-to-int8", "https://github.com/jax-ml/jax/issues/25047",
        "Pallas GPU converts negative floats to int8 as 0.",
        runners=("pallas:triton",), primitives=("convert_element_type",), dtypes=("int8",)),
    Divergence(
        "xla-40862-f64-rsqrt-blackwell", "https://github.com/openxla/xla/issues/40862",
        "f64 rsqrt is inaccurate on NVIDIA Blackwell.",
        runners=("xla:cuda",), primitives=("rsqrt",), dtypes=("float64",)),
    Divergence(
        "pallas-interpret-triton-atomic-duplicates",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_rmw_discharge_rule: x_new = ref.at[idx].set(monoid(ref[idx], val)))",
        "JAX's HLO interpret mode discharges a Triton atomic_add/max/min as gather -> op -> "
        "scatter-set, so when several lanes of one atomic hit the same element all but one update "
        "is lost (a GPU applies every lane's update atomically). Distinct indices agree. Found by "
        "this suite (pallas/triton_atomics_add_max_cas/duplicates_indices; JAX 0.10.2 and 0.12.0.1).",
        runners=("pallas:interpret",), primitives=("atomic_rmw",),
        # The case's outputs 0 and 2 are the atomically updated refs; output 1 echoes the indices.
        match=lambda f: f.case_id.startswith("pallas/triton_atomics_") and set(f.failing_outputs) <= {0, 2}
        and len(np.unique(f.reference[1])) < np.size(f.reference[1])),
    Divergence(
        "pallas-triton-maxnum", "jax/_src/pallas/triton/lowering.py (lax.max_p/min_p lower to arith maxnumf/minnumf)",
        "Pallas Triton lowers max/min to maxnum/minnum, which drop NaN instead of propagating it.",
        runners=("pallas:triton",), primitives=("max", "min")),
    Divergence(
        "xla-cpu-e3m4-sqrt-via-f16",
        "conformance case lax_special/sqrt/float8_e3m4/exhaustive (found by this suite; every value checked)",
        "XLA:CPU computes float8_e3m4 sqrt in float16 and rounds twice (float64 value -> float16 -> e3m4), "
        "so a root just below an e3m4 midpoint that rounds onto it in float16 goes up: sqrt(0.96875) = 1.0, "
        "the correctly rounded e3m4 value is 0.96875. The other one-byte floats are computed through "
        "float32 and are exact. XLA:GPU (H100, JAX 0.11.2) gives the same bits for all 256 values.",
        runners=("xla:cpu", "xla:cuda"), primitives=("sqrt",), dtypes=("float8_e3m4",), match=_sqrt_via_float16),
    Divergence(
        "xla-erf-inv-rounded-square",
        "https://github.com/openxla/xla/blob/main/xla/hlo/builder/lib/math.cc (ErfInv32 / ErfInv64: "
        "w = -Log1p(-x * x)); spec/divergences.py XLA_ERF_INV_F32_WORST_ULP (the measurement)",
        "XLA's erf_inv forms 1 - x^2 from the rounded product x * x, so near |x| = 1 it computes "
        "erf_inv(sqrt(fl(x * x))) instead of erf_inv(x): up to 65 ulp off in float32 (x = 0.99982744, "
        "measured over every float32 in [0.5, 1)) and 498928 ulp in float64 (1 - x = 2^-27), while staying "
        "within 3.8 ulp of erf_inv(sqrt(fl(x * x))). Computing (1 - x)(1 + x) would avoid it. Found by this "
        "suite (nightly lax_special/erf_inv/float64/33x65 and float32/2x3x4 at seed 595; JAX 0.10.2 and 0.12.0.1).",
        runners=("xla:cpu",), primitives=("erf_inv",),
        match=lambda f: _xla_cpu_elementwise(f, model=("erf_inv", _erf_inv_model))),
    Divergence(
        "xla-betainc-prefactor-and-iteration-cap",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/lax/special.py (regularized_incomplete_beta_impl: "
        "exp(log(x) * a + log1p(-x) * b - lbeta_ab) / a with lbeta_ab = lgamma(a) + lgamma(b) - lgamma(a + b); "
        "lentz_thompson_barnett_algorithm(num_iterations=200 if float32 else 600); ported from XLA's math.cc); "
        "spec/divergences.py _betainc_model (the model and its measurement); reproducers (JAX 0.10.2 and "
        "0.12.0.1, jax_enable_x64): lax.betainc(1e9, 1e9, 0.5) = -1.1955 (I = 0.5); lax.betainc(1e12, 3e12, "
        "0.25) = 72.04; float32 lax.betainc(*np.float32([1e9, 1e9, 0.5])) = -inf (1.0 on 0.10.2); float32 "
        "(17.059217, 0.1, 0.95561355) = 0.036376417 (I = 0.036379162: 737 ulp; 0.03637481 on 0.10.2)",
        "JAX's betainc on XLA:CPU forms its prefactor as exp of a sum of terms as large as lgamma(a + b), "
        "whose rounding (~eps of their size) is the relative error of I or, above the mean, of 1 - I; and it "
        "stops Lentz's continued fraction after 200 (float32) / 600 (float64) iterations, which near the mean "
        "needs more once a + b exceeds about 1e5 (float32) / 6e5 (float64): the result is then arbitrary, "
        "even outside [0, 1]. float32 is 0.7378 for 0.6915 at a = b = 1e5, half a standard deviation above "
        "the mean. The matcher recomputes both per element (the loop's iteration count in long double).",
        runners=("xla:cpu",), primitives=("regularized_incomplete_beta",),
        match=lambda f: _xla_cpu_elementwise(f, model=("regularized_incomplete_beta", _betainc_model))),
    Divergence(
        "xla-gpu-complex-mul",
        "spec/divergences.py _gpu_complex_mul and GPU_COMPLEX128_MUL_EPS (measured on the H100 evidence, "
        "docs/gpu-triage.md); reproducer (H100, JAX 0.11.2): jnp.complex64(1.5 + 1.1920929e-07j) * "
        "jnp.complex64(3.4028235e+38 + np.inf * 1j) = (nan+infj), the reference (-inf+infj)",
        "XLA:GPU's complex multiply has no C99 Annex G recovery (an infinite or huge part gives NaN where the "
        "reference keeps the infinity), loses parts that overflow or meet subnormals, and on ordinary complex128 "
        "arguments is up to 1.48 eps |a||b| off (complex64: within the case's bound). Per element: within 3 eps "
        "|a||b| (complex128), or an argument with a non-finite, huge, tiny or subnormal part.",
        runners=("xla:cuda",), primitives=("mul",), dtypes=("complex64", "complex128"), match=_gpu_complex_mul),
    Divergence(
        "jax-lowering-rounds-in-dtype",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/lax/lax.py (_exp2_lower: hlo.exponential(hlo.multiply("
        "log2, x)) with log2 = np.log(2) in x's dtype; logistic_impl: div(one, add(one, exp(neg(x)))), "
        "lowered with mlir.lower_fun on GPU and CPU); spec/divergences.py LOWERING_MODELS; reproducers "
        "(H100, JAX 0.11.2): jnp.exp2(np.float16(11.96)) = 4012 (2^11.96 = 3986.3); "
        "jax.nn.sigmoid(jnp.bfloat16(-0.1001)) = 0.4785 (0.4750 correctly rounded)",
        "exp2, log2 and logistic are not lowered to one operation: exp2(x) is exp(fl(fl(ln 2) * x)), log2(x) is "
        "fl(log(x)) * fl(1 / ln 2) and logistic(x) is 1 / fl(1 + fl(exp(-x))), every intermediate rounded to x's dtype, so float32 exp2 is up to 60 ulp "
        "off for |x| ~ 95, float16/bfloat16 exp2 up to 13 / 75 ulp, bfloat16 logistic 2 ulp and float16 logistic "
        "0 instead of a tiny result once exp(-x) overflows. The matcher recomputes the lowering per element "
        "(XLA:CPU runs the same lowering: its records are matched by xla-cpu-special-functions' measurements).",
        runners=("xla:cuda", "xla:rocm"), primitives=("exp2", "logistic", "log2"), match=_lowering_model_explains),
    Divergence(
        "xla-gpu-special-functions",
        "spec/divergences.py XLA_GPU_CASE_ULP / XLA_GPU_CASE_ABS (measured on the H100 evidence, JAX 0.11.2; "
        "docs/gpu-triage.md) and the models XLA_GPU_MODELS; openxla/xla xla/hlo/builder/lib/math.cc",
        "XLA:GPU evaluates XLA's special-function expansions (math.cc; JAX's special.py ports) with its "
        "approximate float32 division, square root and transcendentals: digamma, lgamma, polygamma, zeta, "
        "erfc, igamma*, betainc and the Bessel functions exceed the compliance budget by the measured amounts; "
        "at extreme arguments they return NaN/inf/0/1 as on XLA:CPU (XLA_CPU_SPECIAL_ARGS); lgamma and "
        "digamma of a float32 subnormal reflect through a pi * x rounded to the subnormal grid (lgamma(2^-149) = "
        "103.32505, truly 103.27893); erf_inv and betainc follow the models of their XLA:CPU entries.",
        runners=("xla:cuda",),
        primitives=("digamma", "lgamma", "polygamma", "zeta", "erfc", "erf", "erf_inv", "igamma", "igammac",
                    "igamma_grad_a", "random_gamma_grad", "regularized_incomplete_beta", "bessel_i0e",
                    "bessel_i1e", "tanh"),
        match=_xla_gpu_elementwise),
    Divergence(
        "xla-cpu-special-functions",
        "spec/divergences.py XLA_CPU_CASE_ULP / XLA_CPU_CASE_ABS / XLA_CPU_DAZ_INCONSISTENT / XLA_CPU_SPECIAL_ARGS; "
        "spec/lax_special.py XLA_CPU_ULP (measured by tests/test_lax_special.py)",
        "XLA:CPU's own approximations exceed the compliance ULP budget (XLA's accuracy_budget.h or "
        "JAX's test tolerance) by the measured amounts (on the quick cases, seed 0: exp2 float32 35 ulp, "
        "bfloat16 69; igamma float32 802 ulp, igammac 115, betainc 166, polygamma 17, igamma_grad_a 21, "
        "digamma 29 near its root, lgamma 57 on JAX 0.10.2; all within spec/lax_special.py XLA_CPU_ULP "
        "or XLA_CPU_CASE_ULP; digamma and lgamma err by a few eps absolutely, unboundedly many ulp near "
        "their zeros: XLA_CPU_CASE_ABS); at subnormal arguments some functions return neither the value there nor "
        "at zero (cbrt, atan2, pow, nextafter, complex mul, igamma...); and at extreme arguments "
        "(0, tiny, huge, +-inf) the special functions return NaN/inf/0/1 where the reference follows "
        "DLMF; zeta with q < -5 loses all accuracy on XLA:CPU.",
        runners=("xla:cpu",),
        primitives=tuple(sorted(set(_lax_special.XLA_CPU_ULP) | {p for p, _ in XLA_CPU_CASE_ULP}
                                | XLA_CPU_DAZ_INCONSISTENT | set(XLA_CPU_SPECIAL_ARGS))),
        match=_xla_cpu_elementwise),
    Divergence(
        "xla-cpu-threefry4x32-fold-in-split-hang",
        "conformance case random/split_fold_in/threefry4x32-partitionable (found by this suite; reproducer: "
        "jax-conformance repro random/split_fold_in/threefry4x32-partitionable --runner xla:cpu --isolated "
        "--timeout 25, JAX 0.10.2)",
        "XLA:CPU of JAX 0.10.2 compiles jax.random.split(jax.random.fold_in(key, 7), 3) of a threefry4x32 key "
        "(jax_threefry_partitionable=True) in about 2 s and its execution then never returns (no result after "
        "60 s in the quick profile, 25 s by hand); JAX 0.12.0.1 returns the reference's bits. The reference's "
        "threefry4x32 bits are checked against the Random123 known-answer vectors (tests/test_prng_kat.py).",
        runners=("xla:cpu",), outcomes=("timeout",), jax_versions=("0.10.2", "0.12.0.1"),
        cases=("random/split_fold_in/threefry4x32-partitionable",)),
    Divergence(
        "xla-cpu-igamma-huge-argument-hang",
        "https://github.com/openxla/xla/blob/main/xla/hlo/builder/lib/math.cc (IgammaSeries: a while loop "
        "until the term c / ans <= eps, with no iteration cap); spec/lax_special.py (the special-functions "
        "measurement of igamma at large a); reproducer: jax.jit(lax.igamma)(x, x) with x = [1.7976931348623157e308] "
        "under jax_enable_x64 never returns (25 s by hand, JAX 0.10.2 and 0.12.0.1)",
        "XLA:CPU's float64 igamma(a, x) sums its power series until the terms are below eps with no iteration "
        "cap; near a = x the terms decay like exp(-k^2 / 2a), so about sqrt(a) iterations: at a = x = DBL_MAX "
        "(in the special-value grid) it never returns. The nightly's lax_special/igamma/float64/specials timeout "
        "(300 s); the reference gives 0.5 there (0.7 s CPU for the whole grid).",
        runners=("xla:cpu",), outcomes=("timeout",), cases=("lax_special/igamma/float64/specials",)),
    # -- SPMD Pallas kernels (conformance/cases/spmd.py) ------------------------------------------
    Divergence(
        "pallas-tpu-interpret-all-gather-dma-order",
        "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/pallas/mosaic/interpret/shared_memory.py "
        "(Semaphore.wait: 'This approach will tend to run DMAs as late as possible, as well as "
        "out-of-order', tasks.pop() takes the newest DMA; params.py dma_execution_mode='on_wait' runs "
        "a DMA's read and write separately); one-line reproducer: jax-conformance repro "
        "spmd/pallas/all_gather_shipped/float32/8 --runner pallas:tpu-interpret",
        "The shipped jax.experimental.pallas.ops.tpu.all_gather forwards slot s to its right "
        "neighbour after a dma_wait on the receive semaphore that the left neighbour's DMAs of "
        "slots s and s+1 both signal with the same byte count. JAX's TPU interpret mode completes "
        "a waited DMA semaphore's DMAs newest first and a DMA's send and receive sides separately, "
        "so the wait can be satisfied by slot s+1 and the device forwards slot s before it lands "
        "(never-written NaN; its race detector reports the read, and raises on 0.12). On 2 devices "
        "there is one step and no overlap. Which DMA such a wait sees is undefined (spec/spmd.py "
        "remote-dma/completion-order): the kernel is at fault (docs/findings.md), interpret mode "
        "picks another order. The reference, completing in start order, gives lax.all_gather's "
        "values on 2, 4, 8 and 2x4 devices, and with detect_races=True raises "
        "DmaCompletionOrderError on 4, 8 and 2x4.",
        runners=("pallas:tpu-interpret",), outcomes=("fail", "crash"),
        cases=("spmd/pallas/all_gather_shipped/*", "spmd/pallas/claims/all_gather_shipped/*")),
    # -- Pallas Mosaic GPU (conformance/cases/pallas_mosaic_gpu.py) ---------------------------
    Divergence(
        "pallas-gpu-interpret-attention-effects",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic/interpret/thread_map.py "
        "(_run_jaxpr lowers each warpgroup's jaxpr with jax.jit, and mlir.lower_jaxpr_to_module refuses "
        "the Mosaic GPU effects the kernel still carries); one-line reproducer: jax-conformance repro "
        "pallas_mosaic_gpu/ops/attention/f16/1x256x2x64/causal=False --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run the shipped attention_mgpu kernel: a warpgroup "
        "thread fails with 'ValueError: Cannot lower jaxpr with effects: {IOEffect, "
        "_WGMMAPipelineEffect, MemoryEffect}', reported through the CPU callback as JaxRuntimeError "
        "INTERNAL (a crash of the backend, JAX 0.12.0.1 on CPU; the research that first saw it: "
        "run_state and wgmma with a register operand are missing there).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/ops/attention/*", "pallas_mosaic_gpu/claims/attention_vs_softmax/*")),
    Divergence(
        "pallas-gpu-interpret-ignores-partitioned-copies",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (_interpret_copy_gmem_to_smem_p never reads collective_axes or "
        "leader_tracked); reproducer: jax-conformance repro "
        "pallas_mosaic_gpu/cluster_partitioned/f32/2x64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode copies the whole source of a PARTITIONED cluster copy into "
        "each block's (smaller) SMEM, so block 1 gets rows 0..63 of x instead of its slice 64..127 "
        "(primitives.py copy_gmem_to_smem: 'block 0 gets src[0:128, :], block 1 gets "
        "src[128:256, :]').",
        runners=("pallas:gpu-interpret",), outcomes=("fail",),
        cases=("pallas_mosaic_gpu/cluster_partitioned/*",)),
    Divergence(
        "pallas-gpu-interpret-dynamic-scheduling-axis",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (axis resolution: 'Collective axis `None` not found among axes' for "
        "the run_scoped of plgpu.dynamic_scheduling_loop, collective_axes=thread_axis=None); "
        "reproducer: jax-conformance repro pallas_mosaic_gpu/dynamic_scheduling/f32/6x8x128 "
        "--runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.dynamic_scheduling_loop in a kernel "
        "without num_threads/thread_name: the loop allocates its scratch with "
        "run_scoped(collective_axes=thread_axis), None there, and the interpreter looks the axis "
        "None up (ValueError, a crash of the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/dynamic_scheduling/*",)),
    Divergence(
        "pallas-gpu-interpret-collective-tcgen05",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "gpu_callbacks.py (tcgen05_mma task: 'AssertionError: collective_axis not supported "
        "yet'); reproducer: jax-conformance repro pallas_mosaic_gpu/ops/blackwell_ragged_dot/"
        "f16/512x128x256/4groups --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode asserts on the 2-CTA (collective) tcgen05_mma that the "
        "shipped blackwell_ragged_dot_mgpu issues (a crash of the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/ops/blackwell_ragged_dot/*",)),
    Divergence(
        "pallas-gpu-interpret-async-store-smem",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (no rule for async_store_smem: it falls to "
        "_interpret_arithmetic_primitive, which binds it with the interpreter's buffer keys, and "
        "primitives.py _async_store_smem_abstract_eval raises 'ref must be a reference, got "
        "int32[6]'); reproducer: jax-conformance repro pallas_mosaic_gpu/cluster_store/f32/"
        "2x64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.async_store_smem (a store into another "
        "block's SMEM): it binds the primitive with buffer keys in place of refs (a crash of "
        "the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/cluster_store/*",)),
    Divergence(
        "pallas-gpu-interpret-register-lhs-wgmma",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "gpu_callbacks.py (wgmma passes a register LHS to HostAllocationKey.from_array: "
        "'ValueError: Expected shape (6,) but got (128, 64)'); reproducer: jax-conformance repro "
        "'pallas_mosaic_gpu/ops/hopper_mixed_type_matmul/int8xbf16/256x256x256/cluster=None' "
        "--runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run a wgmma whose LHS is a register value (the "
        "shipped hopper_mixed_type_matmul_mgpu converts int8 to bf16 in registers first): a "
        "crash of the backend. On JAX 0.10.2 the same ValueError ('Expected shape (5,) but got "
        "(128, 64)') fails the io_callback and the kernel's other threads then wait forever: a "
        "timeout (no result after 600 s, by the reproducer with --isolated --timeout 600).",
        runners=("pallas:gpu-interpret",), outcomes=("crash", "timeout"),
        cases=("pallas_mosaic_gpu/ops/hopper_mixed_type_matmul/*",)),
    Divergence(
        "pallas-gpu-interpret-barrier-test",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (no rule for barrier_test_p: it falls to "
        "_interpret_arithmetic_primitive, which binds it with the interpreter's buffer keys, and "
        "primitives.py _barrier_test_abstract_eval raises 'barrier must be a reference, got "
        "int32[6]'); reproducer: jax-conformance repro pallas_mosaic_gpu/barrier_test_poll/f32/"
        "64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.barrier_test (a non-blocking test of a "
        "barrier phase): it binds the primitive with buffer keys in place of refs (a crash of "
        "the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/barrier_test_poll/*",)),
    Divergence(
        "pallas-gpu-interpret-0.10-retraces-every-thread",
        "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/pallas/mosaic/interpret/thread_map.py "
        "(_run_jaxpr jits a function nested in itself, so the jit cache never hits; JAX 0.11.2 "
        "moved it to top level 'so that caching works properly'); reproducer (JAX 0.10.2): "
        "jax-conformance repro pallas_mosaic_gpu/ops/hopper_matmul/f16/512x256x512 --runner "
        "pallas:gpu-interpret --isolated --timeout 600",
        "JAX 0.10.2's Mosaic GPU interpret mode (jax._src.pallas.mosaic_gpu.interpret, not yet "
        "exported) re-traces and recompiles each Pallas thread's jaxpr at every grid point and "
        "warpgroup (about 0.3 s each): the shipped hopper matmul (132 clusters, 3 warpgroups) "
        "took 136 s per call on an idle 2-vCPU VM where 0.12 takes 7.9 s (2026-11-27), past the "
        "quick profile's 60 s; under load the reproducer gave no result in 420 s and its worker "
        "printed no error (a slow run, not a failure).",
        runners=("pallas:gpu-interpret",), outcomes=("timeout",), jax_versions=("0", "0.11.2"),
        cases=("pallas_mosaic_gpu/ops/hopper_matmul/*", "pallas_mosaic_gpu/claims/hopper_matmul_vs_dot/*")),
    # -- Pallas Triton (conformance/cases/pallas_triton.py) --------------------------------------
    Divergence(
        "pallas-triton-vector-integer-atomic-minmax-assert",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/primitives.py "
        "(_atomic_lowering_rule: isinstance(val.type, ir.IntegerType) is False for a tensor; fixed in 0.12.0 "
        "by lowering._element_type(val.type)); one-line reproducer (CPU, abstract H100, JAX 0.10.2/0.11.2): "
        "tests/test_pallas_triton.py::test_triton_lowering_as_declared",
        "JAX's Triton lowering before 0.12 sends an integer atomic_max/atomic_min over a vector of indices "
        "down the float path (_expand_atomic_fp_min_max), whose _fp_bits_type asserts on an integer type: "
        "the kernel never compiles (AssertionError). Seen on the H100 with JAX 0.11.2 "
        "(pallas/triton_atomics_add_max_cas/*); scalar-index integer atomics lower correctly.",
        runners=("pallas:triton",), outcomes=("crash",), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/atomic_max/int32/distinct", "pallas_triton/atomic_max/int32/duplicates",
               "pallas_triton/atomic_max/int32/masked", "pallas_triton/atomic_min/int32/distinct",
               "pallas_triton/atomic_min/int32/duplicates", "pallas_triton/atomic_min/int32/masked",
               "pallas/triton_atomics_add_max_cas/*")),
    Divergence(
        "pallas-triton-vector-integer-atomic-add-as-fadd",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/primitives.py "
        "(_atomic_lowering_rule, same test as the min/max crash); reproducer: pallas_call(debug=True) of "
        "pallas_triton/atomic_add/int32/distinct lowered for an abstract H100 on CPU prints "
        "'tt.atomic_rmw fadd, acq_rel, gpu, %p : (tensor<16x!tt.ptr<i32>>, tensor<16xi32>)'",
        "JAX's Triton lowering before 0.12 emits a float add (tt.atomic_rmw fadd) for an integer atomic_add "
        "over a vector of indices; Triton's PTX for FADD is atom.add.f32, which adds the bit patterns as "
        "floats (or the kernel fails to compile). Not yet observed on a GPU: the H100 run crashed on the "
        "min/max of the same kernel first.",
        runners=("pallas:triton",), outcomes=("fail", "crash"), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/atomic_add/int32/distinct", "pallas_triton/atomic_add/int32/duplicates",
               "pallas_triton/atomic_add/int32/masked")),
    Divergence(
        "pallas-triton-cache-modifier-keyerror",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/lowering.py (_load: "
        "_STR_TO_CACHE_MODIFIER = {str(c): c for c in tt_dialect.CacheModifier} has keys 'ca', 'cg', ... but is "
        "indexed with the accepted spellings '.ca' / '.cg'; 0.12.0 indexes cache_modifier.removeprefix('.')); "
        "one-line reproducer (CPU, abstract H100, JAX 0.10.2/0.11.2): "
        "tests/test_pallas_triton.py::test_triton_lowering_as_declared[pallas_triton/load_cache_modifier_cg/int32/128]",
        "Before JAX 0.12 every plgpu.load with a cache_modifier ('.ca' or '.cg', the only ones it accepts) "
        "fails in the Triton lowering with KeyError: '.cg' (found by lowering the case on CPU).",
        runners=("pallas:triton",), outcomes=("crash",), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/load_cache_modifier_cg/*",)),
    Divergence(
        "pallas-interpret-triton-atomic-duplicates-last-lane",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_rmw_discharge_rule: x_new = ref.at[idx].set(monoid(ref[idx], val)))",
        "JAX's HLO interpret mode discharges a Triton atomic add/max/min as gather -> op -> scatter-set: "
        "where several lanes hit one element, one lane's update survives instead of all of them. Modelled: "
        "every element of the backend's result is init or op(init, v) for the value v of one lane that hits it.",
        runners=("pallas:interpret",), primitives=("atomic_rmw",), outcomes=("fail",),
        cases=("pallas_triton/atomic_*/duplicates",),
        match=lambda f: _one_lane_survives(f)),
    Divergence(
        "pallas-interpret-triton-atomic-cas-float-compare",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_cas_discharge_rule: jnp.where(ref == cmp, val, ref)); Triton: atom.cas.b32 "
        "(triton-lang/triton test/TritonGPU/atomic-cas.mlir)",
        "JAX's HLO interpret mode compares a float compare-and-swap as floats (+0.0 == -0.0 swaps, NaN never "
        "swaps); the GPU instruction compares bit patterns. Modelled: the backend's refs are the float-compare "
        "results.",
        runners=("pallas:interpret",), primitives=("atomic_cas",), outcomes=("fail",),
        cases=("pallas_triton/atomic_cas/float32/*",), match=lambda f: _cas_float_compare(f)),
    Divergence(
        "xla-cpu-dot-algorithm-bf16-bf16-f32-not-applied",
        "reproducer: jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32, "
        "preferred_element_type=jnp.float32)) on float32 inputs, XLA:CPU (JAX 0.12.0.1): within 7e-5 of the exact "
        "float32 product, 0.7 from the product of the bf16-rounded inputs (16x32 @ 32x32, values in [-8, 8])",
        "XLA:CPU computes a BF16_BF16_F32 dot of float32 operands in float32 without rounding the operands to "
        "bfloat16 (the algorithm's meaning, jax/_src/lax/lax.py get_algorithm_compute_types); JAX's HLO interpret "
        "mode of a Pallas kernel inherits it. Modelled: the backend is within the float32 dot bound of the exact "
        "product.",
        runners=("pallas:interpret",), primitives=("dot_general",), outcomes=("fail",),
        cases=("pallas_triton/dot/float32/algorithm_BF16_BF16_F32/*",), match=lambda f: _dot_unrounded(f)),
    Divergence(
        "xla-gpu-exp2-f64-argument",
        "H100 evidence (JAX 0.11.2): lax_special/exp2/float64/33x65 at seed 0, x = 34.99297383812594: "
        "34192807617.114216 where exp(fl(fl(ln 2) x)) = 34192807617.114456 (63 ulp) = exp of the double 2 ulp "
        "below fl(fl(ln 2) x); the smaller shapes of the case agree with exp(fl(fl(ln 2) x)) within 1 ulp; "
        "openxla/xla xla/codegen/intrinsic/accuracy/accuracy_budget.h kExpF64Budget (GPU: 1 ulp); "
        "docs/gpu-triage.md (finding: which code XLA:GPU emits for that shape is not established)",
        "JAX lowers float64 exp2(x) as exp(fl(fl(ln 2) x)), which amplifies an error in the argument by the "
        "argument itself (d exp(y) / exp(y) = dy). In one shape of the evidence, 5 of 2145 results of XLA:GPU "
        "are the exponential, within 1 ulp, of a double 1 or 2 ulp from fl(fl(ln 2) x) rather than of "
        "fl(fl(ln 2) x) (up to 63 ulp for |x| ~ 35), as if the multiply and the exponential's range reduction "
        "were evaluated together; the cause is not established. Modelled per element: the result is within "
        "1 ulp of exp(a) for a double a within EXP2_F64_ARGUMENT_ULP ulp of fl(fl(ln 2) x).",
        runners=("xla:cuda",), primitives=("exp2",), dtypes=("float64",), outcomes=("fail",),
        match=lambda f: _exp2_f64_shifted_argument(f)),
    # -- XLA:CPU rewrites found by the program fuzzer (docs/findings.md, "XLA:CPU: found by the
    # program fuzzer"); each matcher recomputes the rewritten expression per element ----------------
    Divergence(
        "xla-cpu-add-zero-keeps-negative-zero",
        "docs/findings.md#xla-cpu-x--00-keeps-the-sign-of-a-negative-zero; reproducer (XLA:CPU, JAX 0.10.2 "
        "and 0.12.0.1, every float type): jax.jit(lambda x: x + np.float32(0))(np.float32(-0.0)) = -0.0",
        "XLA:CPU compiles x + 0.0 as x: for x = -0.0 it returns -0.0 where IEEE 754 addition gives +0.0 "
        "(disabling no HLO pass changes it: the code generator folds the addition). Per element: the "
        "reference is +0.0, the backend -0.0, the operand -0.0 and the other operand a zero.",
        runners=("xla:cpu",), primitives=("add", "sub"), outcomes=("fail",), match=lambda f: _adds_zero_as_identity(f)),
    Divergence(
        "xla-cpu-divide-by-constant-as-reciprocal",
        "docs/findings.md#xla-cpu-x--c-is-x--1c; reproducer (XLA:CPU, JAX 0.10.2 and 0.12.0.1): "
        "jax.jit(lambda x: x / np.float32(5))(np.float32(-1.1046107e-03)) = -2.2092216e-04, the correctly "
        "rounded quotient is -2.2092214e-04; --xla_disable_hlo_passes=algsimp gives the quotient",
        "XLA's algebraic simplifier (algsimp) rewrites a float division by a constant or by a broadcast "
        "value as a multiplication by its reciprocal, rounded twice: up to 1 ulp from the correctly rounded "
        "quotient (float32; float16 computed in float32). Per element: the backend's value is x * fl(1 / y), "
        "each product rounded in float32 (float16/bfloat16: then rounded to the type).",
        runners=("xla:cpu",), primitives=("div",), outcomes=("fail",), match=lambda f: _division_as_reciprocal(f)),
    Divergence(
        "xla-cpu-multiply-by-converted-bool-as-select",
        "docs/findings.md#xla-cpu-x--convertp-is-selectp-x-0; reproducer (XLA:CPU, JAX 0.10.2 and 0.12.0.1): "
        "jax.jit(lambda x, p: x * p.astype(np.float32))(np.float32(np.nan), False) = 0.0 (IEEE: NaN); "
        "--xla_disable_hlo_passes=algsimp gives NaN",
        "XLA's algebraic simplifier rewrites x * convert(p) for a boolean p as select(p, x, 0): where p is "
        "false the product is +0.0, never NaN (NaN or inf times 0) or -0.0 (a negative x times 0). Per "
        "element: one operand is 0 or 1 and the backend's value is the other operand where it is 1, +0.0 "
        "where it is 0.",
        runners=("xla:cpu",), primitives=("mul",), outcomes=("fail",), match=lambda f: _product_with_bool_as_select(f)),
    Divergence(
        "xla-cpu-constant-folded-clz-of-negative",
        "docs/findings.md#xla-cpu-jax-0102-constant-folded-clz-of-a-negative-value; reproducer (XLA:CPU, JAX "
        "0.10.2): jax.jit(lambda: lax.clz(np.int32(-1)))() = -32, at run time 0; JAX 0.11.2 folds it to 0",
        "JAX 0.10.2's XLA constant-folds clz of a negative integer as width - 64 (int32 -32, int16 -48, int8 "
        "-56) instead of 0: the count of a sign-extended 64-bit value, less 64 - width. Per element: a "
        "negative operand and the backend's value width - 64.",
        runners=("xla:cpu",), primitives=("clz",), jax_versions=("0", "0.11.2"), outcomes=("fail",),
        match=lambda f: _clz_folded_negative(f)),
)

BY_ID = {d.id: d for d in DIVERGENCES}


def _identical(a, b) -> np.ndarray:
    """Elementwise: the same value and sign (NaN matches NaN, whatever its sign and payload)."""
    from conformance.checks import ulp_distance
    from interp import dtypes as D
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
        ok = same | (np.asarray(f.allowed[i]) if i < len(f.allowed) and f.allowed[i] is not None else False)
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


def _division_as_reciprocal(f: Failure) -> bool:
    def model(args, ref, out):
        x, y = (a.astype(np.float32) for a in args)
        recip = (np.float32(1) / y).astype(np.float32)
        prod = (x * recip).astype(np.float32)
        return _identical(prod.astype(out.dtype), out)
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
        from interp import dtypes as D
        x = args[0]
        width = D.bit_width(x.dtype)
        return (x.astype(np.int64) < 0) & (out.astype(np.int64) == width - 64)
    return _elementwise_failing(f, model, 1)


def find(f: Failure) -> Divergence | None:
    for d in DIVERGENCES:
        if d.matches(f):
            return d
    return None


# --- XLA:GPU float64 exp2 (the H100 evidence, JAX 0.11.2) ----------------------------------------------
# The worst argument shift measured (2 ulp of fl(fl(ln 2) x), lax_special/exp2/float64/33x65 seed 0)
# times 2, the rule of docs/gpu-triage.md; the exponential itself within 1 ulp (XLA's GPU budget for
# f64 exp) plus NumPy's own rounding of the model: 2 ulp.
EXP2_F64_ARGUMENT_ULP = 4
EXP2_F64_EXP_ULP = 2


def _exp2_f64_shifted_argument(f: Failure) -> bool:
    """Every element of every failing float64 output is within exp2's budget, explained by an
    allowance, or within EXP2_F64_EXP_ULP of exp(a) for a double a at most EXP2_F64_ARGUMENT_ULP
    ulp from fl(fl(ln 2) x); at least one element needs the shifted argument."""
    from conformance.checks import ulp_distance
    from spec import compliance as C
    if tuple(f.primitives) != ("exp2",) or len(f.inputs) != 1:
        return False
    x = np.asarray(f.inputs[0])
    needed = False
    for i in f.failing_outputs:
        ref, out = np.asarray(f.reference[i]), np.asarray(f.backend[i])
        if ref.dtype != np.float64 or x.dtype != np.float64 or x.shape != ref.shape:
            return False
        ok = ulp_distance(ref, out) <= C.ulp_budget("exp2", ref.dtype)
        if i < len(f.allowed) and f.allowed[i] is not None:
            ok |= np.asarray(f.allowed[i])
        y = np.float64(np.log(2.0)) * x
        lo, hi, fits = y, y, np.zeros(ref.shape, bool)
        with np.errstate(all="ignore"):
            for _ in range(EXP2_F64_ARGUMENT_ULP + 1):
                for a in (lo, hi):
                    fits |= ulp_distance(np.exp(a), out) <= EXP2_F64_EXP_ULP
                lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
        needed |= bool((fits & ~ok).any())
        if not (ok | fits).all():
            return False
    return needed
