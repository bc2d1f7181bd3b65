"""Compliance checkers: apply a ``spec.compliance.Mode`` to one output (reference vs backend).

Every checker returns a :class:`Check` with the measurements the report shows: pass/fail, the
largest ULP and absolute error, the number of mismatching elements and the first one with both
values. The measurements are computed whatever the mode, so an EXACT failure still says "3 ulp".
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from interp import dtypes as D
from spec import compliance as C

from .values import normalize_nans, bits


@dataclasses.dataclass
class Check:
    passed: bool
    max_ulp: float | None = None
    max_abs_err: float | None = None
    mismatches: int = 0
    first_mismatch: dict | None = None     # {"index": [...], "reference": str, "backend": str}
    detail: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _show(x) -> str:
    x = np.asarray(x)
    if D.is_float(x.dtype):
        return f"{float(x)!r} (bits {int(bits(x.reshape(1))[0]):#x})"
    return repr(x.item()) if x.dtype.itemsize <= 16 else repr(x)


def float_ordinal(x: np.ndarray) -> np.ndarray:
    """Map floats to integers so that consecutive values differ by 1 and +0 == -0 == 0."""
    x = np.asarray(x)
    width = D.bit_width(x.dtype)
    b = bits(x).astype(np.uint64)
    mag = (b & np.uint64((1 << (width - 1)) - 1)).astype(np.int64)
    return np.where((b >> np.uint64(width - 1)) & np.uint64(1), -mag, mag)


def ulp_neighbour(x: np.ndarray, k: int) -> np.ndarray:
    """Real floats ``x`` moved ``k`` steps of float_ordinal (past the largest finite value: the
    infinity); NaN and infinities unchanged; a zero stays a zero of its sign when ``k`` is 0."""
    x = np.asarray(x)
    if k == 0:
        return x
    width = D.bit_width(x.dtype)
    inf_bits = int(bits(np.asarray(np.inf, x.dtype).reshape(1))[0])
    o = float_ordinal(x) + k
    mag = np.minimum(np.abs(o), inf_bits).astype(np.uint64)
    b = np.where(o < 0, mag | np.uint64(1 << (width - 1)), mag)
    out = b.astype(bits(x.reshape(-1)[:0]).dtype).view(x.dtype).reshape(x.shape)
    return np.where(np.isfinite(x.astype(np.float64)), out, x)


def ulp_distance(ref: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Elementwise distance in units in the last place of ``ref``'s dtype (inf if NaN-ness differs)."""
    ref, out = np.asarray(ref), np.asarray(out)
    if D.is_complex(ref.dtype):
        return np.maximum(ulp_distance(ref.real, out.real), ulp_distance(ref.imag, out.imag))
    rn, on = np.isnan(ref.astype(np.float64)), np.isnan(out.astype(np.float64))
    with np.errstate(over="ignore"):
        d = np.array(np.abs(float_ordinal(ref) - float_ordinal(out)), dtype=np.float64)  # 0-d too
    d[rn & on] = 0.0
    d[rn ^ on] = np.inf
    return d


def _abs_err(ref, out) -> np.ndarray:
    r = np.asarray(ref).astype(np.complex128 if D.is_complex(np.asarray(ref).dtype) else np.float64)
    o = np.asarray(out).astype(r.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.abs(r - o)
    both_nan = np.isnan(r) & np.isnan(o)
    same_inf = np.isinf(r) & (r == o)
    e = np.where(both_nan | same_inf, 0.0, e)
    return np.where(np.isnan(e), np.inf, e)


def _specials_differ(ref, out, zero_sign: bool = True) -> np.ndarray:
    """NaN placement, infinities and (if ``zero_sign``) the sign of zero, per real part."""
    def parts(x):
        x = np.asarray(x)
        if D.is_complex(x.dtype):
            return [x.real, x.imag]
        return [x.astype(np.float64)]
    bad = np.zeros(np.shape(ref), bool)
    for r, o in zip(parts(ref), parts(out)):
        rn, on = np.isnan(r), np.isnan(o)
        bad |= rn != on
        bad |= (np.isinf(r) | np.isinf(o)) & ~(rn | on) & (r != o)
        if zero_sign:
            bad |= (r == 0) & (o == 0) & (np.signbit(r) != np.signbit(o))
    return bad


def _result(bad: np.ndarray, ref, out, *, ulps=None, abs_err=None, detail="") -> Check:
    ref, out = np.asarray(ref), np.asarray(out)
    idx = np.flatnonzero(np.ravel(bad))
    first = None
    if idx.size:
        i = np.unravel_index(idx[0], ref.shape) if ref.shape else ()
        first = {"index": [int(j) for j in i], "reference": _show(ref[i]), "backend": _show(out[i])}
    def mx(a):
        if a is None or np.size(a) == 0:
            return None if a is None else 0.0
        v = float(np.max(a))
        return v if math.isfinite(v) else float("inf")
    return Check(passed=not idx.size, max_ulp=mx(ulps), max_abs_err=mx(abs_err), mismatches=int(idx.size),
                 first_mismatch=first, detail=detail)


def check(mode: C.Mode, ref, out, *, magnitude: float | None = None, bound=None) -> Check:
    """Apply ``mode`` to one output. ``magnitude``: max |input| (ABS_REL); ``bound``: the
    array sum_k |a_k||b_k| (DOT_PRODUCT)."""
    return check_any(mode, [ref], out, magnitude=magnitude, bound=bound)


def check_any(mode: C.Mode, refs, out, *, magnitude: float | None = None, bound=None) -> Check:
    """Like :func:`check`, but an element complies if it complies with any of ``refs`` (the
    reference and its recomputations under an allowance: XLA:CPU flushes subnormals in some
    operations and not in others, so each element may follow either). Measurements are against
    ``refs[0]``."""
    ref, out = np.asarray(refs[0]), np.asarray(out)
    if ref.shape != out.shape or ref.dtype != out.dtype:
        return Check(False, mismatches=int(max(ref.size, out.size)),
                     detail=f"backend returned {out.dtype}{list(out.shape)}, reference {ref.dtype}{list(ref.shape)}")
    if mode.kind == C.STATISTICAL:
        return check_statistical(out)
    bad, detail = None, mode.describe()
    for r in refs:
        b, detail = _bad(mode, np.asarray(r), out, magnitude, bound)
        bad = b if bad is None else bad & b
    is_fp = D.is_float(ref.dtype) or D.is_complex(ref.dtype)
    ulps = ulp_distance(ref, out) if is_fp else None
    if is_fp:
        abs_err = _abs_err(ref, out)
    elif D.is_bool(ref.dtype):
        abs_err = None
    else:
        with np.errstate(over="ignore"):
            abs_err = np.abs(ref.astype(np.float64) - out.astype(np.float64))
    return _result(bad, ref, out, ulps=ulps, abs_err=abs_err, detail=detail)


def complies(mode: C.Mode, ref, out, *, magnitude: float | None = None, bound=None) -> np.ndarray:
    """Per element: does ``out`` comply with ``ref`` under ``mode``? (All False when the shapes or
    dtypes differ, or the mode is not elementwise: STATISTICAL.)"""
    ref, out = np.asarray(ref), np.asarray(out)
    if ref.shape != out.shape or ref.dtype != out.dtype or mode.kind == C.STATISTICAL:
        return np.zeros(out.shape, bool)
    return ~_bad(mode, ref, out, magnitude, bound)[0]


def _bad(mode: C.Mode, ref, out, magnitude, bound):
    """(mask of elements that do not comply, description of the criterion)."""
    is_fp = D.is_float(ref.dtype) or D.is_complex(ref.dtype)
    if mode.kind == C.EXACT or not is_fp:
        return bits(normalize_nans(ref)) != bits(normalize_nans(out)), mode.describe()
    both_zero = (ref == 0) & (out == 0)
    if mode.kind == C.ULP:
        return (ulp_distance(ref, out) > mode.ulp) | (_specials_differ(ref, out) & ~both_zero), mode.describe()
    if mode.kind == C.FP_SPECIAL:
        return _specials_differ(ref, out), mode.describe()
    eps = float(D.finfo(ref.real.dtype if D.is_complex(ref.dtype) else ref.dtype).eps)
    # Bounds on sums: the sign of an exact zero depends on the order of evaluation.
    special = _specials_differ(ref, out, zero_sign=False)
    with np.errstate(invalid="ignore", over="ignore"):
        if mode.kind == C.ABS_REL:
            if magnitude is None:
                raise ValueError("ABS_REL needs the inputs' magnitude")
            tol = mode.atol_eps * eps * magnitude + mode.rtol_eps * eps * np.abs(ref.astype(
                np.complex128 if D.is_complex(ref.dtype) else np.float64))
            detail = f"{mode.describe()}; max|in|={magnitude:.3g}"
            if mode.input_bits:
                if bound is None:
                    raise ValueError("ABS_REL with rounded matmul inputs needs the case's dot_bound")
                u_in = 2.0 ** -mode.input_bits
                tol = tol + (2 * u_in + u_in * u_in) * np.abs(np.asarray(bound, np.float64))
        elif mode.kind == C.DOT_PRODUCT:
            if bound is None:
                raise ValueError("DOT_PRODUCT needs sum |a||b|")
            # Accumulation is at least float32 (XLA accumulates bf16/f16/fp8 dots in f32) unless
            # the mode says narrower (acc_bits), output rounding at the output dtype, inputs at
            # input_bits if a backend rounds them first (matmul-precision allowances).
            u_out = eps / 2
            u_acc = 2.0 ** -mode.acc_bits if mode.acc_bits else min(u_out, 2.0 ** -24)
            u_in = 2.0 ** -mode.input_bits if mode.input_bits else 0.0
            gamma = mode.k * u_acc / (1 - mode.k * u_acc) + 2 * u_in + u_in * u_in + u_out
            bound = np.abs(np.asarray(bound, np.float64))
            tol = gamma * bound
            detail = f"{mode.describe()}; gamma={gamma:.3g}"
            return _dot_product_bad(ref, out, bound, tol, mode, u_out), detail
        else:
            raise ValueError(f"unknown mode {mode.kind}")
        return (_abs_err(ref, out) > tol) | special, detail


def _neighbour_toward(v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The neighbour of each (finite) ``v`` in its own float type in the direction of ``t`` (``v``
    itself where they are equal), as float64."""
    width = D.bit_width(v.dtype)
    b = v.view(D.storage_uint(v.dtype)).astype(np.int64)
    sign = np.int64(1) << (width - 1)
    ordered = np.where(b & sign, -(b & (sign - 1)), b)       # monotone in the value (-0 is 0)
    with np.errstate(invalid="ignore"):
        step = np.sign(np.asarray(t, np.float64) - v.astype(np.float64))
    o = ordered + np.nan_to_num(step).astype(np.int64)
    back = np.where(o < 0, (-o) | sign, o).astype(D.storage_uint(v.dtype)).view(v.dtype)
    return back.astype(np.float64)


def _dot_product_bad(ref, out, bound, tol, mode: C.Mode, u_out: float = 0.0) -> np.ndarray:
    """DOT_PRODUCT's elements out of bound, where the order of the additions is the backend's:
    - the bound is that of |computed - exact| (``tol``: the accumulation and input terms plus the
      backend's own output rounding, u_out sum|a||b|), and the reference is the exact value rounded:
      the backend also complies where its value's rounding interval comes within the accumulation
      and input terms of the reference's, at a point of it no larger than sum|a||b| (a sum exactly
      at the midpoint of two bfloat16 values, plus a term below float32's precision, rounds up in
      the reference and, accumulated in float32, to even on the backend);
    - where the terms' (finite) magnitudes can add up past the accumulator's largest finite value, a
      partial sum may overflow in some order (inf, and NaN when opposite infinities meet): any result;
    - where the exact result is within the bound of the output type's overflow threshold, rounding
      may give the largest finite value or the infinity of the same sign."""
    real = ref.real.dtype if D.is_complex(ref.dtype) else ref.dtype
    out_max = float(D.finfo(real).max)
    acc_max = out_max if mode.acc_bits or np.dtype(real).itemsize >= 8 else float(np.finfo(np.float32).max)
    with np.errstate(invalid="ignore", over="ignore"):
        # (an infinite bound counts an infinite term: strict. A producer that leaves infinite terms
        # out, as the fuzzer's equation.abs_bound does, lets the finite ones tell whether a partial sum
        # can reach the opposite infinity, NaN)
        wild = np.isfinite(bound) & (bound * (1 + 4 * float(np.finfo(np.float32).eps)) >= acc_max)
        bad = (_abs_err(ref, out) > tol) | _specials_differ(ref, out, zero_sign=False)
        if not D.is_complex(ref.dtype):
            r, o = ref.astype(np.float64), out.astype(np.float64)
            rc, oc = np.clip(r, -out_max, out_max), np.clip(o, -out_max, out_max)
            edge = ~np.isnan(r) & ~np.isnan(o) & (np.abs(rc) + tol >= out_max) & (np.abs(rc - oc) <= tol)
            bad &= ~edge
            finite = np.isfinite(r) & np.isfinite(o) & (r != o)
            if u_out and (bad & finite).any():
                rv, ov = np.where(finite, ref, 0).astype(ref.dtype), np.where(finite, out, 0).astype(out.dtype)
                edge_r = (r + _neighbour_toward(rv, o)) / 2      # where the reference's interval meets out's side
                edge_o = (o + _neighbour_toward(ov, r)) / 2
                inner = tol - u_out * bound                      # the accumulation and input terms
                rounding = finite & (np.abs(edge_o - edge_r) <= inner) & (np.abs(edge_r) <= bound)
                bad &= ~rounding
    return bad & ~wild


def check_statistical(out) -> Check:
    """Bit balance per bit position, uniqueness and a byte chi-square test of random bits.

    Thresholds are 6 sigma / p < 1e-9, so a good generator fails with negligible probability.
    """
    from scipy import stats
    x = np.ascontiguousarray(np.asarray(out))
    if D.is_float(x.dtype) or D.is_bool(x.dtype):
        return Check(False, detail=f"STATISTICAL checks integer bits, got {x.dtype}")
    n = x.size
    if n < 256:
        return Check(False, detail=f"STATISTICAL needs >= 256 samples, got {n}")
    width = x.dtype.itemsize * 8
    u = bits(x).astype(np.uint64).ravel()
    ones = np.array([((u >> np.uint64(b)) & np.uint64(1)).mean() for b in range(width)])
    sigma = math.sqrt(0.25 / n)
    problems = []
    worst = int(np.argmax(np.abs(ones - 0.5)))
    if abs(ones[worst] - 0.5) > 6 * sigma:
        problems.append(f"bit {worst} is 1 in {ones[worst]:.3f} of samples (6 sigma = {6 * sigma:.3f})")
    unique = np.unique(u).size
    expected_dupes = n * n / 2 / 2.0 ** width
    if n - unique > max(10 * expected_dupes, 5):
        problems.append(f"{n - unique} repeated values of {n} (expected about {expected_dupes:.2g})")
    counts = np.bincount(x.view(np.uint8).ravel(), minlength=256)
    p = float(stats.chisquare(counts).pvalue)
    if p < 1e-9:
        problems.append(f"byte histogram chi-square p = {p:.2g}")
    return Check(not problems, mismatches=len(problems),
                 detail="STATISTICAL: " + ("; ".join(problems) if problems else
                                           f"bits balanced, {unique}/{n} unique, chi2 p={p:.2g}"))
