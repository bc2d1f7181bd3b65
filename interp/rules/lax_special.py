"""Rules: transcendental and special functions (lax_special).

These primitives are defined only by accuracy, so the reference returns the CORRECTLY ROUNDED value
of the exact function (spec/lax_special.py). How, per output dtype:

* A fast wide evaluation ``w``: float64 NumPy/SciPy for outputs up to float32 (every float8/float4,
  bfloat16, float16, float32), long double NumPy ufuncs for float64 outputs (x87 extended, 64-bit
  significand), complex128 / complex long double for complex64 / complex128.
* Ziv's test: with ``rel`` a proven-with-margin bound on the wide evaluation's relative error, if
  ``w*(1-rel)`` and ``w*(1+rel)`` round to the same value of the output dtype, that value is the
  correctly rounded result. Elements that fail the test (and every element of a function with no
  wide evaluation good enough, e.g. SciPy functions for float64 outputs) are recomputed with mpmath,
  itself run in a precision loop until two precisions round to the same result.
* Rounding is done once, exactly (interp/numerics.py round_float): ml_dtypes converts float64 to
  bfloat16/float8 through float32 (double rounding), so narrow outputs are first rounded to float32
  with round-to-odd, which makes the second rounding correct (24 >= p + 2 bits for every narrow
  format).

* Large arguments of the incomplete gamma / beta family, where mpmath does not converge or takes
  minutes, are certified by interp/rules/_special_asymptotic.py (tail bounds that decide 0 / 1,
  Temme's uniform expansion, the beta continued fraction) through the same Ziv test (``numerics.ziv``);
  outside the domain where a SciPy bound is trusted (``Fn.trusted``) no wide value is kept, and an
  element nothing certifies raises UnsupportedPrimitiveError (``Uncertified``).

Special values (NaN, infinities, signed zeros, poles, domain edges) come from the wide evaluation,
which follows C99 Annex F/G, and the per-function fix-ups below, which follow XLA where it defines
them differently (each one is stated in spec/lax_special.py with its source).
"""
from __future__ import annotations

import fractions
import math

import mpmath
import numpy as np
import scipy.special as sc

from interp import dtypes
from interp.registry import register
from interp.rules import _special_asymptotic as asymptotic
from interp.numerics import (Uncertified, mp_round, odd_sum, round_float, round_fraction, rounding_undecided, wrap_int,
                             ziv)

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
LD = np.dtype(np.longdouble)
C128 = np.dtype(np.complex128)
CLD = np.dtype(np.clongdouble)
# float64 results are evaluated in long double only where it really is wider (x87 extended).
HAVE_LD = np.finfo(np.longdouble).nmant >= 63

# ----------------------------------------------------------------------------------------------
# Real functions: a fast wide evaluation, certified by Ziv's test, else mpmath.


def _mp_eval(mpfn, args, dtype, prec0=128):
    """``mpfn`` on exact mpmath copies of ``args`` (tuple of floats), rounded to ``dtype``, with
    the precision raised until two precisions agree on the rounded result."""
    prec = prec0
    last = None
    while True:
        with mpmath.workprec(prec):
            try:
                v = mpfn(*[mpmath.mpf(float(a)) for a in args])
            except mpmath.libmp.NoConvergence as e:
                # loud: the wide value this element would otherwise keep is not certified
                raise Uncertified(f"{getattr(mpfn, '__name__', mpfn)}{tuple(args)}: mpmath did not "
                                  f"converge ({e})") from None
            except (ArithmeticError, ValueError):
                return None
            if isinstance(v, mpmath.mpc):
                if v.imag != 0:
                    return None
                v = v.real
            r = mp_round([v], dtype)[0]
        if last is not None and (r == last or (np.isnan(r) and np.isnan(last))):
            return r
        last = r
        prec += 64
        if prec > 4096:
            # Cost cap: loud, never a value two precisions did not agree on.
            raise Uncertified(f"{getattr(mpfn, '__name__', mpfn)}{tuple(args)}: the rounded result "
                              "did not settle below 4096 bits (reference cost cap)")


class Fn:
    """A real function: ``wide`` (NumPy/SciPy float64), ``ld`` (long double ufunc path or None),
    ``mp`` (mpmath), ``rel`` (relative error bound of ``wide``; of ``ld`` it is ``ld_rel``).

    The wide NumPy ufuncs differ in their last bits between hosts: NumPy picks their float64 loops
    by CPU. On AVX512_SKX hosts exp, log, exp2, log2, log10, expm1, log1p, cbrt, tan, arcsin,
    arccos, arctan, sinh, cosh, arcsinh, arccosh, arctanh, power and arctan2 call Intel SVML's
    high-accuracy ``__svml_<f>8_ha`` (numpy/_core/src/umath/loops_umath_fp.dispatch.c.src,
    loops_exponent_log.dispatch.c.src), at most 1 ulp (Intel's accuracy classes: HA 1 ulp, LA 4
    ulp, oneMKL "Vector Mathematics Performance and Accuracy Data"); tanh is NumPy's port of SVML's
    ``tanh_d_la`` (at most 4 ulp) on AVX2+FMA3, AVX-512, NEON and VSX (loops_hyperbolic.dispatch.cpp.src);
    elsewhere, and for sin and cos always, the C library (glibc: a few ulp at most). NumPy's own
    accuracy tests hold every float64 loop to 1-2 ulp (numpy/_core/tests/data/umath-validation-set-*).
    The default ``rel`` = 2**-44 is 256 float64 ulps: every one of these is inside it with a wide
    margin, so what the Ziv test certifies (never the wide value itself) is the same on every host.
    Long double (float64 outputs) and complex ufuncs have no SIMD loops (glibc's expl, cexp...).
    tests/test_host_independence.py keeps other uses of these ufuncs out of the reference."""

    def __init__(self, wide, mp, rel=2.0 ** -44, ld=None, ld_rel=2.0 ** -56, exact_f64=False,
                 trusted=None, certify=None):
        self.wide, self.mp, self.rel, self.ld, self.ld_rel = wide, mp, rel, ld, ld_rel
        # trusted(*float64 args) -> mask: where ``rel`` bounds the wide (SciPy) evaluation (the
        # domains the tests check); elsewhere every element is certified (mpmath / certify).
        self.trusted = trusted
        # certify(args tuple, dtype) -> the correctly rounded value, or None to use ``mp``; it
        # raises Uncertified where it cannot decide (loud, never the wide value).
        self.certify = certify
        self.exact_f64 = exact_f64       # wide in float64 is already correctly rounded (sqrt)


# Certified elements remembered per (function, argument bits, dtype): the allowance replays
# (conformance/replay.py) evaluate a program again on inputs that differ in a few elements, and a
# float64 special function costs mpmath up to tens of milliseconds per element (zeta and igammac
# on their 729 specials: 20 s of CPU per evaluation, six evaluations per xla:cpu record).
_CERTIFIED: dict = {}
_CERTIFIED_MAX = 1 << 16


def _certified(fn: Fn, vals: tuple, dtype) -> tuple:
    """(``fn.certify``'s value, else ``_mp_eval``'s, or None; whether certify gave it)."""
    key = (id(fn), tuple(v.hex() for v in vals), dtype.name)   # hex keeps the sign of a zero
    if key not in _CERTIFIED:
        r = fn.certify(vals, dtype) if fn.certify is not None else None
        certified = r is not None     # certify's zeros carry their sign
        if r is None:
            r = _mp_eval(fn.mp, vals, dtype)
        if len(_CERTIFIED) >= _CERTIFIED_MAX:
            _CERTIFIED.clear()
        _CERTIFIED[key] = (r, certified)
    return _CERTIFIED[key]


def evaluate(fn: Fn, args, dtype) -> np.ndarray:
    """Correctly rounded ``fn(*args)`` in the float ``dtype``; shapes already broadcast."""
    dtype = np.dtype(dtype)
    args = [np.asarray(a) for a in args]
    with np.errstate(all="ignore"):
        a64 = [np.asarray(a, F64) for a in args]
        w64 = fn.wide(*a64) if fn.wide is not None else None
        if dtype == F64 and fn.exact_f64:
            return np.asarray(w64, F64)
        if dtype == F64 and HAVE_LD and fn.ld is not None:
            w, rel = np.asarray(fn.ld(*[a.astype(LD) for a in args]), LD), fn.ld_rel
        elif dtype == F64 or w64 is None:
            w, rel = w64, None           # no wide evaluation accurate enough: mpmath everywhere
        else:
            w, rel = np.asarray(w64, F64), fn.rel
        if w is None:
            # mpmath only: specials decided by finite-ness of inputs
            shape = np.broadcast_shapes(*[a.shape for a in args])
            out = np.full(shape, np.nan, dtype)
            redo = np.ones(shape, bool)
        else:
            w = np.asarray(w)
            out = round_float(w, dtype)
            if out is w:    # (round_float returns an array of the dtype itself: out is written below)
                out = w.copy()
            if rel is None or fn.trusted is not None:
                finite_args = np.ones(w.shape, bool)
                for a in a64:
                    finite_args &= np.isfinite(a)
            if rel is None:
                # every element with finite arguments, except SciPy's NaN (a domain error); an
                # infinite SciPy value may be an overflow of its float64 algorithm (lgamma(5e-324))
                redo = finite_args & ~np.isnan(w)
            else:
                redo = rounding_undecided(w, rel, dtype)
            if fn.trusted is not None:
                # outside the trusted domain the wide value (NaN included) is never kept
                redo |= finite_args & ~fn.trusted(*[np.broadcast_to(a, w.shape) for a in a64])
    idx = np.flatnonzero(redo)
    if idx.size:
        flat_args = [np.broadcast_to(a, redo.shape).reshape(-1) for a in args]
        flat_out = out.reshape(-1)
        wz = None if w is None else np.asarray(w).reshape(-1)
        for i in idx:
            vals = tuple(float(a[i]) for a in flat_args)
            if not all(math.isfinite(v) for v in vals):
                continue                  # limits at infinity: the wide evaluation's (C99) value
            r, certified = _certified(fn, vals, dtype)
            if r is None:
                continue                  # mpmath declined (pole, complex result): keep wide
            r = np.asarray(r, F64) if dtype == F64 else np.asarray(r).astype(dtype)
            if r == 0 and wz is not None and not certified and not np.isnan(wz[i]):
                # mpmath has no signed zero: the sign comes from the wide (C99) evaluation
                r = np.copysign(r, np.asarray(wz[i], F64)).astype(dtype)
            flat_out[i] = r
        out = flat_out.reshape(redo.shape)
    return out


# ----------------------------------------------------------------------------------------------
# Complex functions: componentwise correct rounding with the same scheme; the wide error bound is
# normwise (|error| <= rel * |w| per component), so small components fall back to mpmath.


class CFn:
    def __init__(self, wide, mp, rel=2.0 ** -44, ld_rel=2.0 ** -56):
        self.wide, self.mp, self.rel, self.ld_rel = wide, mp, rel, ld_rel


def _real_dtype(dtype):
    return np.dtype(np.float32) if np.dtype(dtype) == np.complex64 else F64


def evaluate_complex(fn: CFn, args, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    part = _real_dtype(dtype)
    wide = CLD if (dtype == np.complex128 and HAVE_LD) else C128
    rel = fn.ld_rel if wide == CLD else fn.rel
    if dtype == np.complex128 and not HAVE_LD:
        rel = 0.0
    args = [np.asarray(a) for a in args]
    with np.errstate(all="ignore"):
        w = np.asarray(fn.wide(*[a.astype(wide) if dtypes.is_complex(a.dtype) or dtypes.is_float(a.dtype)
                                 else a for a in args]))
        w = w.astype(wide)
        re_w, im_w = w.real, w.imag
        mag = np.abs(w)
        out = np.empty(w.shape, dtype)
        out.real = round_float(re_w, part)
        out.imag = round_float(im_w, part)
        u = dtypes.storage_uint(part)
        redo = np.zeros(w.shape, bool)
        for c in (re_w, im_w):
            d = mag * mag.dtype.type(rel) if rel else mag
            lo, hi = round_float(c - d, part), round_float(c + d, part)
            redo |= np.isfinite(w.real) & np.isfinite(w.imag) & (lo.view(u) != hi.view(u))
    idx = np.flatnonzero(redo)
    if idx.size:
        flat_args = [np.broadcast_to(a, w.shape).reshape(-1) for a in args]
        flat_out = out.reshape(-1)
        wr, wi = re_w.reshape(-1), im_w.reshape(-1)
        for i in idx:
            vals = [a[i] for a in flat_args]
            # mpmath has no signed zero: on a branch cut with imaginary part -0 use conjugate
            # symmetry f(conj z) = conj f(z), which every function here has.
            conj = dtypes.is_complex(vals[0].dtype) and vals[0].imag == 0 and math.copysign(1, vals[0].imag) < 0
            r = _mp_eval_complex(fn.mp, vals, part, conj)
            if r is None:
                continue
            re, im = r
            if re == 0:
                re = np.copysign(re, np.asarray(wr[i], F64)).astype(part)
            if im == 0:
                im = np.copysign(im, np.asarray(wi[i], F64)).astype(part)
            flat_out[i] = complex(0)
            flat_out.real[i], flat_out.imag[i] = re, im
        out = flat_out.reshape(w.shape)
    return out


def _to_mp(v, conj):
    if np.iscomplexobj(v):
        z = mpmath.mpc(float(v.real), float(v.imag))
        return mpmath.conj(z) if conj else z
    return mpmath.mpf(float(v)) if dtypes.is_float(np.asarray(v).dtype) else mpmath.mpf(int(v))


def _mp_eval_complex(mpfn, vals, part, conj, prec0=128):
    prec, last = prec0, None
    while True:
        with mpmath.workprec(prec):
            try:
                z = mpmath.mpc(mpfn(*[_to_mp(v, conj) for v in vals]))
            except mpmath.libmp.NoConvergence as e:
                # loud, as in _mp_eval: the wide value this element would keep is not certified
                raise Uncertified(f"{getattr(mpfn, '__name__', mpfn)}: mpmath did not converge "
                                  f"({e})") from None
            except (ArithmeticError, ValueError):
                return None
            if conj:
                z = mpmath.conj(z)
            r = (mp_round([z.real], part)[0], mp_round([z.imag], part)[0])
        if last is not None and all(a == b or (np.isnan(a) and np.isnan(b)) for a, b in zip(r, last)):
            return r
        last, prec = r, prec + 64
        if prec > 4096:
            raise Uncertified(f"{getattr(mpfn, '__name__', mpfn)}: the rounded result did not settle "
                              "below 4096 bits (reference cost cap)")


# ----------------------------------------------------------------------------------------------
# The functions.

def _cbrt_mp(x):
    return mpmath.sign(x) * mpmath.cbrt(abs(x))


def _logistic_wide(x):
    return sc.expit(x)


def _logistic_ld(x):
    # 1/(1+exp(-x)): three correctly rounded-ish long double steps, relative error < 4 ulp(LD).
    with np.errstate(over="ignore"):
        return np.reciprocal(np.exp(-x) + x.dtype.type(1))


def _lgamma_mp(x):
    if x <= 0 and x == mpmath.floor(x):
        raise ValueError("pole")
    return mpmath.re(mpmath.loggamma(x))


def _digamma_mp(x):
    if x <= 0 and x == mpmath.floor(x):
        raise ValueError("pole")
    return mpmath.digamma(x)


def _polygamma_wide(n, x):
    # SciPy's polygamma costs time linear in |x| for x < 0 (23 s at x = -1e9): those elements are
    # outside the trusted domain and certified anyway, so SciPy is not asked (NaN placeholder).
    ok = (n == np.floor(n)) & (n >= 0) & (n <= 1000) & ~(x < -2.0 ** 16)
    out = sc.polygamma(np.where(ok, n, 0).astype(np.int64), np.where(ok, x, 1.0))
    return np.where(ok, out, np.nan)


def _polygamma_mp(n, x):
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1 (DLMF 25.11.12), with the Hurwitz zeta
    # of _zeta_mp (negative x included): fast for every order and argument (mpmath's own psi takes
    # minutes for x < -2**24). n = 0 is digamma. (Both refuse the poles x = 0, -1, ...)
    if n != mpmath.floor(n) or n < 0:
        raise ValueError("non-integer order")
    if n == 0:
        return _digamma_mp(x)
    sign = 1 if int(n) % 2 else -1
    return sign * mpmath.factorial(n) * _zeta_mp(n + 1, x)


def _zeta_wide(s, q):
    # SciPy's (Cephes) zeta sums the negative-q terms one by one (minutes at q = -1e9): q <= 0 is
    # outside the trusted domain and certified anyway, so SciPy is not asked (NaN placeholder).
    neg = q <= 0
    return np.where(neg, np.nan, sc.zeta(s, np.where(neg, 1.0, q)))


def _zeta_mp(s, q):
    """Hurwitz zeta sum_k (k + q)^-s for s > 1: q > 0 by mpmath; q < 0 (not an integer) only for
    integer s, where the terms are real (XLA's domain): with f = q - floor(q) in (0, 1) and
    M = -floor(q), the M negative terms are (-1)^s sum_{j=1}^{M} (j - f)^-s, so
    zeta(s, q) = zeta(s, f) + (-1)^s [zeta(s, 1 - f) - zeta(s, 1 - q)] (1 - q = M + 1 - f)."""
    if s <= 1:
        raise ValueError("s <= 1: inf or NaN from the fix-ups")
    if q > 0:
        return mpmath.zeta(s, q)
    if s != mpmath.floor(s) or q == mpmath.floor(q):
        raise ValueError("q <= 0 with non-integer s (NaN) or at a pole: fix-ups")
    f = q - mpmath.floor(q)
    sign = 1 if int(s) % 2 == 0 else -1
    return mpmath.zeta(s, f) + sign * (mpmath.zeta(s, 1 - f) - mpmath.zeta(s, 1 - q))


def _igamma_domain(a, x):
    if a == 0:
        raise ValueError("a = 0: the limit (SciPy's value) is kept")
    if a < 0 or x < 0:   # (mpmath 1.3.0's gammainc(65504, 0, -3) recurses without end)
        raise ValueError("outside the domain a, x >= 0: NaN (_fix_igamma)")


def _igamma_mp(a, x):
    _igamma_domain(a, x)
    return mpmath.gammainc(a, 0, x, regularized=True)


def _igammac_mp(a, x):
    _igamma_domain(a, x)
    return mpmath.gammainc(a, x, mpmath.inf, regularized=True)


def _igamma_grad_a_mp(a, x):
    # d/da P(a, x) = [ln(x) g(a,x) - x^a/a^2 2F2(a,a;a+1,a+1;-x)] / Gamma(a) - P(a,x) psi(a),
    # with g the lower incomplete gamma function (DLMF 8.2.1 differentiated under the integral;
    # the 2F2 form is the series of int_0^x t^(a-1) ln(t) e^-t dt). Cancellation is handled by the
    # precision loop of _mp_eval.
    if a <= 0 or x < 0:
        raise ValueError("domain")
    if x == 0:
        return mpmath.mpf(0)
    g = mpmath.gammainc(a, 0, x)
    p = g / mpmath.gamma(a)
    h = mpmath.hyp2f2(a, a, a + 1, a + 1, -x)
    return (mpmath.log(x) * g - x ** a / a ** 2 * h) / mpmath.gamma(a) - p * mpmath.digamma(a)


def _tail_exponent_prec(*vals):
    """Working precision for a tail exponent: its terms grow like the arguments."""
    return 160 + max(0, max(int(mpmath.mag(mpmath.mpf(v))) for v in vals if v))


def _gamma_certify(upper):
    """P (upper=False) or Q above mpmath's reach: Chernoff decides the far tails, Temme's expansion
    (a >= 2**10) the rest; None: mpmath (a < 2**10, where its gammainc is fast)."""
    def certify(vals, dtype):
        a, x = vals
        if not (a > 0 and x > 0):
            return None                   # a = 0, x = 0, negative: limits and NaN (fix-ups)
        with mpmath.workprec(_tail_exponent_prec(a, x)):
            decided = asymptotic.chernoff_gamma(a, x) > asymptotic.TAIL_NEGLIGIBLE + 1
        if decided:
            # the tail on x's side of a is < 2^-1080: it rounds to 0, its complement to 1
            small = (x > a) if upper else (x < a)
            return np.asarray(0.0 if small else 1.0).astype(dtype)
        name = "igammac" if upper else "igamma"
        return _temme_or_mpmath(a, lambda p: asymptotic.temme_gamma(a, x, upper, p), dtype, f"{name}({a!r}, {x!r})")
    return certify


def _temme_or_mpmath(a, enclose, dtype, what):
    """Temme's enclosure through Ziv's test for a >= 2**10; where it cannot decide, mpmath for
    a < 2**12 (None) and loud above (mpmath does not converge there)."""
    if a < asymptotic.TEMME_MIN_A:
        return None
    try:
        return ziv(enclose, dtype, what)
    except Uncertified:
        if a >= asymptotic.TEMME_ONLY_A:
            raise
        return None


def _igamma_grad_a_certify(vals, dtype):
    """d/da P: zero (negative: P decreases in a) where Cauchy-Schwarz bounds it below 2^-1080,
    |d/da P| <= sqrt(psi'(a) min(P, Q)) <= sqrt((1/a + 1/a^2) exp(-chernoff)); Temme's expansion
    differentiated for a >= 2**10; None: the mpmath closed form."""
    a, x = vals
    if not (a > 0 and x > 0):
        return None
    with mpmath.workprec(_tail_exponent_prec(a, x)):
        a_, log_bound = mpmath.mpf(a), -asymptotic.chernoff_gamma(a, x) / 2
        log_bound += mpmath.log(1 / a_ + 1 / a_ ** 2) / 2
        decided = log_bound < -asymptotic.TAIL_NEGLIGIBLE - 1
    if decided:
        return np.asarray(-0.0).astype(dtype)
    return _temme_or_mpmath(a, lambda p: asymptotic.temme_gamma_grad_a(a, x, p), dtype, f"igamma_grad_a({a!r}, {x!r})")


# mpmath's betainc is fast (measured < 1 s at 128 bits) where max(a, b) <= 3000, and for
# min(a, b) < 1 (checked up to max(a, b) = 1.7e308); it takes minutes at (4096, 4096, 0.5) and
# ~2 s at (1e10, 999) in the left tail. Elsewhere below Temme's range the continued fraction: 20x
# cheaper than mpmath for 1 <= min(a, b) <= 1000 (worst 0.07 s against 2 s, same bits on 250
# random points around the mean up to 1e308). Not for min(a, b) < 1: from the side above the
# mean it computes 1 - I_{1-x}(b, a), which cancels to I ~ 0.2 min(a, b) when b is the small one.
BETA_MP_MAX = 3000.0


def _beta_mp_fast(a, b):
    return (min(a, b) < 1) or (max(a, b) <= BETA_MP_MAX)


def _betainc_certify(vals, dtype):
    """I_x(a, b): Chernoff decides the tails (both below 2^-1080: 0 below the mean a / (a + b),
    1 above); mpmath where it is fast (_beta_mp_fast); Temme's uniform expansion where both a and
    b are at least BETA_TEMME_MIN; between, the continued fraction (at most ~0.85 sqrt(2^16) ~ 220
    steps near the mean). Both through Ziv's test on their stated bounds."""
    a, b, x = vals
    if not (a > 0 and b > 0 and 0 < x < 1):
        return None
    with mpmath.workprec(_tail_exponent_prec(a, b)):
        decided = asymptotic.kl_beta(a, b, x) > asymptotic.TAIL_NEGLIGIBLE + 1
    if decided:
        below = fractions.Fraction(x) * (fractions.Fraction(a) + fractions.Fraction(b)) < fractions.Fraction(a)
        return np.asarray(0.0 if below else 1.0).astype(dtype)
    if _beta_mp_fast(a, b):
        return None
    what = f"regularized_incomplete_beta({a!r}, {b!r}, {x!r})"
    if min(a, b) >= asymptotic.BETA_TEMME_MIN:
        return ziv(lambda p: asymptotic.temme_beta(a, b, x, p), dtype, what + ": Temme's expansion")
    return ziv(lambda p: asymptotic.betainc_cf(a, b, x, p), dtype, what + ": the continued fraction")


def _betainc_mp(a, b, x):
    # mpmath regularises by beta(a, b), whose a + b is rounded to the working precision: with
    # max(a, b) >> 2^prec that drops the smaller one and the result is off by max^min (it gave
    # 1.1e-150 for I(0.5, 1e300, 1e-300) = 0.8427, at every precision alike). mag(max) more bits
    # keep ln Gamma(a + b) right to the working precision.
    with mpmath.workprec(mpmath.mp.prec + max(0, int(mpmath.mag(max(a, b)))) + 16):
        return mpmath.betainc(a, b, 0, x, regularized=True)


def _i0e_mp(x):
    return mpmath.besseli(0, x) * mpmath.exp(-abs(x))


def _i1e_mp(x):
    return mpmath.besseli(1, x) * mpmath.exp(-abs(x))


def _erfinv_mp(x):
    """erf^-1 by Newton's method from SciPy's float64 seed (mpmath.erfinv is ~4 ms per call):
    y <- y - (erf(y) - x) / (2/sqrt(pi) exp(-y^2)); quadratic convergence from ~1e-16."""
    if abs(x) >= 1:
        raise ValueError("erf_inv(+-1) = +-inf, |x| > 1 is NaN: kept from the wide evaluation")
    if x == 0:
        return mpmath.mpf(0)
    y = mpmath.mpf(float(sc.erfinv(float(x))))
    c = 2 / mpmath.sqrt(mpmath.pi)
    for _ in range(12):
        step = (mpmath.erf(y) - x) / (c * mpmath.exp(-y * y))
        y -= step
        if step == 0 or abs(step) < abs(y) * mpmath.mpf(2) ** (-mpmath.mp.prec - 4):
            break
    return y


def _rsqrt_wide(x):
    return 1.0 / np.sqrt(x)


def _rsqrt_ld(x):
    return x.dtype.type(1) / np.sqrt(x)


def _pow_mp(x, y):
    v = mpmath.power(x, y)
    return v


def _igamma_wide(a, x):
    return sc.gammainc(a, x)


def _igammac_wide(a, x):
    return sc.gammaincc(a, x)


def _igamma_grad_a_wide(a, x):
    return None


# Where SciPy's float64 values are trusted within ``rel`` for outputs up to float32 (the domains
# tests/test_lax_special.py checks bitwise); every other element is certified.
MP_MAX = 2.0 ** 24


def _gamma_trusted(a, x):
    return (a < asymptotic.TEMME_MIN_A) & (x <= MP_MAX)


def _polygamma_trusted(n, x):
    return (n <= 1000) & (x > 0)


def _zeta_trusted(s, q):
    return q > 0


def _betainc_trusted(a, b, x):
    # SciPy's betainc: within 2^-41 relative for min(a, b) <= 1000 up to max(a, b) = 3e38
    # (measured against the continued fraction); beyond, NaN (betainc(999, 1.7e308, 5e-306)) or
    # wrong (betainc(999, 1e300, 9.99e-295) = 1.0 for 0.504): never kept there.
    return ((np.minimum(a, b) <= 1000) | (np.maximum(a, b) <= BETA_MP_MAX)) & (np.maximum(a, b) <= 2.0 ** 128)

# The real functions by primitive name: each key is registered as a rule below (the registry's name
# for exp is this table's "exp").
REAL: dict[str, Fn] = {
    "exp": Fn(np.exp, mpmath.exp, ld=np.exp),
    "exp2": Fn(np.exp2, lambda x: mpmath.mpf(2) ** x, ld=np.exp2),
    "expm1": Fn(np.expm1, mpmath.expm1, ld=np.expm1),
    "log": Fn(np.log, mpmath.log, ld=np.log),
    "log1p": Fn(np.log1p, mpmath.log1p, ld=np.log1p),
    "log2": Fn(np.log2, lambda x: mpmath.log(x, 2), ld=np.log2),
    "tanh": Fn(np.tanh, mpmath.tanh, ld=np.tanh),
    "logistic": Fn(_logistic_wide, lambda x: 1 / (1 + mpmath.exp(-x)), ld=_logistic_ld, ld_rel=2.0 ** -58),
    "sin": Fn(np.sin, mpmath.sin, ld=np.sin),
    "cos": Fn(np.cos, mpmath.cos, ld=np.cos),
    "tan": Fn(np.tan, mpmath.tan, ld=np.tan),
    "asin": Fn(np.arcsin, mpmath.asin, ld=np.arcsin),
    "acos": Fn(np.arccos, mpmath.acos, ld=np.arccos),
    "atan": Fn(np.arctan, mpmath.atan, ld=np.arctan),
    "sinh": Fn(np.sinh, mpmath.sinh, ld=np.sinh),
    "cosh": Fn(np.cosh, mpmath.cosh, ld=np.cosh),
    "asinh": Fn(np.arcsinh, mpmath.asinh, ld=np.arcsinh),
    "acosh": Fn(np.arccosh, mpmath.acosh, ld=np.arccosh),
    "atanh": Fn(np.arctanh, mpmath.atanh, ld=np.arctanh),
    "atan2": Fn(np.arctan2, mpmath.atan2, ld=np.arctan2),
    # float64 sqrt is IEEE correctly rounded; narrower formats: 53 >= 2p + 2, so one more rounding
    # of the float64 result is still correct (no Ziv step needed, but harmless).
    "sqrt": Fn(np.sqrt, mpmath.sqrt, exact_f64=True),
    "rsqrt": Fn(_rsqrt_wide, lambda x: 1 / mpmath.sqrt(x), ld=_rsqrt_ld),
    "cbrt": Fn(np.cbrt, _cbrt_mp, ld=np.cbrt),
    "pow": Fn(np.power, _pow_mp, ld=np.power),
    # SciPy (Cephes / Boost) in float64: relative error bounds with a wide margin over the
    # measured/documented accuracy; float64 outputs always use mpmath.
    "erf": Fn(sc.erf, mpmath.erf, rel=2.0 ** -40),
    "erfc": Fn(sc.erfc, mpmath.erfc, rel=2.0 ** -40),
    "erf_inv": Fn(sc.erfinv, _erfinv_mp, rel=2.0 ** -40),
    "lgamma": Fn(sc.gammaln, _lgamma_mp, rel=2.0 ** -40),
    "digamma": Fn(sc.psi, _digamma_mp, rel=2.0 ** -40),
    "polygamma": Fn(_polygamma_wide, _polygamma_mp, rel=2.0 ** -36, trusted=_polygamma_trusted),
    # mpmath's Hurwitz zeta (Euler-Maclaurin) is fast on the whole domain s > 1, q > 0 (measured
    # up to s, q = 3e38, 1e-45 <= q: well under a second at 1024 bits); q < 0 via _zeta_mp.
    "zeta": Fn(_zeta_wide, _zeta_mp, rel=2.0 ** -36, trusted=_zeta_trusted),
    "igamma": Fn(_igamma_wide, _igamma_mp, rel=2.0 ** -32, trusted=_gamma_trusted,
                 certify=_gamma_certify(False)),
    "igammac": Fn(_igammac_wide, _igammac_mp, rel=2.0 ** -32, trusted=_gamma_trusted,
                  certify=_gamma_certify(True)),
    "igamma_grad_a": Fn(None, _igamma_grad_a_mp, certify=_igamma_grad_a_certify),
    "regularized_incomplete_beta": Fn(sc.betainc, _betainc_mp, rel=2.0 ** -32, trusted=_betainc_trusted,
                                      certify=_betainc_certify),
    "bessel_i0e": Fn(sc.i0e, _i0e_mp, rel=2.0 ** -44),
    "bessel_i1e": Fn(sc.i1e, _i1e_mp, rel=2.0 ** -44),
}


COMPLEX: dict[str, CFn] = {
    "exp": CFn(np.exp, mpmath.exp),
    "exp2": CFn(np.exp2, lambda z: mpmath.power(2, z)),
    "expm1": CFn(np.expm1, mpmath.expm1),
    "log": CFn(np.log, mpmath.log),
    "log1p": CFn(np.log1p, mpmath.log1p),
    "log2": CFn(np.log2, lambda z: mpmath.log(z) / mpmath.log(2)),
    "tanh": CFn(np.tanh, mpmath.tanh),
    "logistic": CFn(lambda z: 1 / (1 + np.exp(-z)), lambda z: 1 / (1 + mpmath.exp(-z))),
    "sin": CFn(np.sin, mpmath.sin),
    "cos": CFn(np.cos, mpmath.cos),
    "tan": CFn(np.tan, mpmath.tan),
    "asin": CFn(np.arcsin, mpmath.asin),
    "acos": CFn(np.arccos, mpmath.acos),
    "atan": CFn(np.arctan, mpmath.atan),
    "sinh": CFn(np.sinh, mpmath.sinh),
    "cosh": CFn(np.cosh, mpmath.cosh),
    "asinh": CFn(np.arcsinh, mpmath.asinh),
    "acosh": CFn(np.arccosh, mpmath.acosh),
    "atanh": CFn(np.arctanh, mpmath.atanh),
    "sqrt": CFn(np.sqrt, mpmath.sqrt),
    "rsqrt": CFn(lambda z: 1 / np.sqrt(z), lambda z: 1 / mpmath.sqrt(z)),
    "pow": CFn(np.power, mpmath.power),
}


def _int_exponent(y, dtype):
    """pow(x, int y): JAX converts y to x's dtype first (jax/_src/lax/lax.py _pow_lower)."""
    exact = np.asarray(y).astype(LD if HAVE_LD else F64)   # int64 fits a 64-bit significand
    with np.errstate(over="ignore"):                        # (an overflow is inf, as convert's)
        if dtypes.is_complex(dtype):
            part = _real_dtype(dtype)
            out = np.zeros(exact.shape, dtype)
            out.real = round_float(exact, part)
            return out
        return round_float(exact, dtype)


# The primitives JAX binds with `accuracy` (a tolerance or mode request): jax/_src/lax/lax.py
# (exp_p.bind(x, accuracy=accuracy) ...; log2 from JAX 0.11, erfc in special.py from 0.12). A
# correctly rounded result satisfies every request, so it does not change the reference.
_TAKE_ACCURACY = frozenset({"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "logistic",
                            "sin", "cos", "tan", "sqrt", "rsqrt", "cbrt", "erfc"})


def _rule(name):
    real, cplx = REAL.get(name), COMPLEX.get(name)

    def value(eqn, args):
        dtype = np.dtype(eqn.out_dtype)
        args = [np.asarray(a) for a in args]
        if name == "pow" and dtypes.is_int(args[1].dtype):
            args[1] = _int_exponent(args[1], dtype)
        if dtypes.is_complex(dtype) and cplx is None:
            raise eqn.unsupported(f"complex {name} is not implemented by the reference")
        try:
            if dtypes.is_complex(dtype):
                out = evaluate_complex(cplx, args, dtype)
            elif dtypes.is_float(dtype) and real is not None:
                out = evaluate(real, args, dtype)
            else:
                raise eqn.unsupported(f"dtype {dtype}")
        except Uncertified as e:
            raise eqn.unsupported(f"correct rounding not certified: {e}") from None
        fix = FIXUPS.get(name)
        if fix is not None and dtypes.is_float(dtype):
            out = fix(out, *args)
        return np.asarray(out, dtype).reshape(eqn.out_aval.shape)

    if name in _TAKE_ACCURACY:
        def rule(eqn, *args, accuracy=None):   # (None where this JAX's primitive has none)
            return value(eqn, args)
    else:
        def rule(eqn, *args):
            return value(eqn, args)
    rule.__name__ = f"{name}_rule"
    return rule


def _odd_zero(out, x):
    """Odd functions keep the sign of a zero argument (SciPy's erfinv/i1e return +0 for -0)."""
    return np.where(x == 0, x.astype(out.dtype), out)


def _fix_lgamma(out, x):
    # C99 F.9.5.3: lgamma(+-inf) = +inf (SciPy gives -inf for -inf); XLA:CPU agrees with C99.
    return np.where(np.isinf(x), np.array(np.inf, out.dtype), out)


def _fix_digamma(out, x):
    # XLA's digamma (chlo.digamma decomposition) returns -inf at +-0 and NaN at negative integers;
    # SciPy gives +inf for -0. Measured on XLA:CPU, jax 0.10.2 and 0.12.0.1.
    return np.where(x == 0, np.array(-np.inf, out.dtype), out)


def _fix_igamma(out, a, x):
    # Domain a >= 0, x >= 0 (DLMF 8.2): NaN outside. At a = +-0 the limits P(0, x > 0) = 1,
    # Q(0, x > 0) = 0 (SciPy's convention); XLA is not consistent there (igamma(0, x) is NaN for
    # x < 1 and 1 for x >= 1 on XLA:CPU): recorded in spec/lax_special.py.
    return np.where((a < 0) | (x < 0), np.array(np.nan, out.dtype), out)


def _fix_zeta(out, s, q):
    # XLA's definition (chlo.zeta decomposition, stablehlo ChloDecompositionPatterns
    # materializeZeta), in its order: s < 1 (or NaN): NaN; q <= 0 only for integer s (the terms
    # (k + q)^-s are real), NaN otherwise; then q a non-positive integer is a pole for every s:
    # +inf for even s (both one-sided limits are +inf; s < 1 included, as XLA's select order
    # gives), NaN for odd s; last, s = 1: +inf for every q (the harmonic series diverges).
    # q = -inf has no limit: NaN (XLA treats it as a pole). SciPy's zeta(nan, 0) is inf: NaN.
    dtype = out.dtype
    s_int = (s == np.floor(s)) & np.isfinite(s)
    bad = ~(s >= 1) | np.isnan(q) | (q == -np.inf) | ((q <= 0) & ~s_int)
    out = np.where(bad, np.array(np.nan, dtype), out)
    pole = (q <= 0) & (q == np.floor(q)) & np.isfinite(q)
    with np.errstate(invalid="ignore"):
        even = s_int & (np.fmod(s, 2) == 0)
    out = np.where(pole, np.where(even, np.array(np.inf, dtype), np.array(np.nan, dtype)), out)
    return np.where(s == 1, np.array(np.inf, dtype), out)


def _fix_polygamma(out, n, x):
    # polygamma(n, x) for integer n >= 0 (XLA: NaN for non-integer n). At the poles x = 0, -1, ...
    # the limit exists only for odd n (+inf); even n >= 2 gives NaN; n = 0 is digamma (-inf at
    # +-0, NaN at negative integers, as XLA). psi^(n)(+inf) = (-1)^(n+1) * 0, psi^(n)(-inf) = NaN.
    dtype = out.dtype
    integer = (n == np.floor(n)) & (n >= 0) & np.isfinite(n)
    pole = (x <= 0) & (x == np.floor(x))
    odd = integer & (np.fmod(n, 2) == 1)
    out = np.where(pole & odd, np.array(np.inf, dtype), out)
    out = np.where(pole & ~odd & (n > 0), np.array(np.nan, dtype), out)
    out = np.where(pole & (n == 0), np.where(x == 0, np.array(-np.inf, dtype), np.array(np.nan, dtype)), out)
    out = np.where(x == np.inf, np.where(odd, np.array(0.0, dtype), np.array(-0.0, dtype)), out)
    out = np.where((x == np.inf) & (n == 0), np.array(np.inf, dtype), out)
    out = np.where(~integer | (x == -np.inf) | np.isnan(x), np.array(np.nan, dtype), out)
    return out


FIXUPS: dict = {
    "erf_inv": _odd_zero,
    "bessel_i1e": _odd_zero,
    "lgamma": _fix_lgamma,
    "digamma": _fix_digamma,
    "igamma": _fix_igamma,
    "igamma_grad_a": _fix_igamma,
    "igammac": _fix_igamma,
    "zeta": _fix_zeta,
    "polygamma": _fix_polygamma,
}

for _name in REAL:      # (one rule per REAL key: the names are the table's, above)
    register(_name)(_rule(_name))


def correctly_rounded(name: str, *args, dtype=F64) -> np.ndarray:
    """The reference's ``name`` (a key of REAL) of float ``args``, correctly rounded to ``dtype``:
    the same bits on every host, where NumPy's own transcendental ufuncs are not (Fn's docstring).
    For models, expected values and generated inputs outside the rules."""
    args = np.broadcast_arrays(*[np.asarray(a) for a in args])
    out = evaluate(REAL[name], args, dtype)
    fix = FIXUPS.get(name)
    return np.asarray(fix(out, *args) if fix is not None else out, dtype)


# ----------------------------------------------------------------------------------------------
# one_minus_square (JAX 0.12): 1 - x^2, exact value rounded once (JAX lowers it to (1+x)*(1-x),
# two roundings; the primitive means 1 - x^2: jax/_src/lax/lax.py one_minus_square_p).


def _oms_fraction(v: float):
    if not math.isfinite(v):
        return 1.0 - v * v                  # -inf or nan
    x = fractions.Fraction(v)
    return 1 - x * x


@register("one_minus_square")
def one_minus_square(eqn, x):
    dtype = np.dtype(eqn.out_dtype)
    x = np.asarray(x)
    if dtypes.is_int(dtype):
        wide = np.uint64 if dtypes.is_unsigned(dtype) else np.int64
        with np.errstate(over="ignore"):
            v = x.astype(wide)
            return wrap_int(wide(1) - v * v, dtype).reshape(x.shape)
    if dtypes.is_complex(dtype):
        part = _real_dtype(dtype)
        out = np.empty(x.shape, dtype)
        re, im = x.real.astype(F64).ravel(), x.imag.astype(F64).ravel()
        ore = np.empty(re.shape, part)
        oim = np.empty(re.shape, part)
        for i in range(re.size):
            a, b = re[i], im[i]
            if math.isfinite(a) and math.isfinite(b):
                fa, fb = fractions.Fraction(a), fractions.Fraction(b)
                ore[i] = round_fraction(1 - fa * fa + fb * fb, part)
                oim[i] = round_fraction(-2 * fa * fb, part)
            else:                           # C99 complex arithmetic on 1 - z*z
                with np.errstate(all="ignore"):
                    z = complex(a, b)
                    w = 1 - z * z
                ore[i], oim[i] = w.real, w.imag
        out.real, out.imag = ore.reshape(x.shape), oim.reshape(x.shape)
        return out
    if not dtypes.is_float(dtype):
        raise eqn.unsupported(f"dtype {dtype}")
    if dtype == F64:
        vals = [round_fraction(_oms_fraction(float(v)), F64) for v in x.ravel()]
        return np.array(vals, F64).reshape(x.shape)
    # Narrower floats: x*x is exact in float64 (2p <= 48 bits); TwoSum gives 1 - x*x = hi + lo
    # exactly, round-to-odd folds lo into hi, then one rounding to the dtype.
    with np.errstate(all="ignore"):
        hi = odd_sum(1.0, -(x.astype(F64) ** 2))
        return round_float(hi, dtype).reshape(x.shape)


# ----------------------------------------------------------------------------------------------
# polynomial (JAX 0.12): Horner's rule, acc = acc * x + c from the highest coefficient down, each
# multiply and add rounded to the dtype, exactly as JAX's lowering writes it
# (jax/_src/lax/lax.py _polynomial_lower). Backends that contract mul+add into FMA differ.


def _horner_op(dtype):
    """(mul, add) rounding once to ``dtype``."""
    if dtypes.is_int(dtype):
        wide = np.uint64 if dtypes.is_unsigned(dtype) else np.int64

        def mul(a, b):
            with np.errstate(over="ignore"):
                return wrap_int(a.astype(wide) * b.astype(wide), dtype)

        def add(a, b):
            with np.errstate(over="ignore"):
                return wrap_int(a.astype(wide) + b.astype(wide), dtype)
        return mul, add
    if dtype in dtypes.ML_FLOATS:
        # float32 has >= 2p + 2 bits for every narrow format: one product or sum computed in
        # float32 and rounded to the dtype is correctly rounded (no harmful double rounding).
        def mul(a, b):
            return (a.astype(F32) * b.astype(F32)).astype(dtype)

        def add(a, b):
            return (a.astype(F32) + b.astype(F32)).astype(dtype)
        return mul, add
    # float16/32/64 and complex: NumPy's own ops round once to the dtype (float16 via float32).
    return np.multiply, np.add


@register("polynomial")
def polynomial(eqn, x, *coeffs, unroll=None):
    # `unroll` only chooses how the lowering unrolls the Horner loop; it does not change values.
    dtype = np.dtype(eqn.out_dtype)
    if not (dtypes.is_int(dtype) or dtypes.is_float(dtype) or dtypes.is_complex(dtype)):
        raise eqn.unsupported(f"dtype {dtype}")
    mul, add = _horner_op(dtype)
    shape = eqn.out_aval.shape
    x = np.broadcast_to(np.asarray(x, dtype), shape)
    acc = np.broadcast_to(np.asarray(coeffs[-1], dtype), shape)
    with np.errstate(all="ignore"):
        for c in reversed(coeffs[:-1]):
            acc = add(mul(acc, x), np.broadcast_to(np.asarray(c, dtype), shape))
    return np.array(acc, dtype).reshape(shape)
