"""Correctly rounded FFTs: every output element's real and imaginary part is the exact DFT value
(of the exact input values) rounded once to the output type (spec/lax_contractions.py fft).

Three tiers, each deciding what the one before could not:

1. Direct DFT per axis in the wide type (complex128 for complex64 results, clongdouble for
   complex128), with twiddles cos/sin(2 pi r / n) of the reduced exponent r = jk mod n, and a
   rigorous componentwise error bound carried from axis to axis: per axis
   |err_out| <= sum_j b_j + c (sum_j |y_j| + b_j), c = 3 (n + 4) u + 2 delta_w (naive complex
   multiply sqrt(5) u, a sum of n terms in any order gamma_n, twiddle error delta_w). Where
   part +- bound round to one value, that value is the correctly rounded result.
2. Undecided elements: the exact DFT sum in the cyclotomic field Q(zeta_M), M = lcm(lengths, 4):
   the value is sum_r c_r zeta^r with exact dyadic c_r; its real (imaginary) part reduced modulo
   the M-th cyclotomic polynomial is its unique representation in the power basis, rational iff
   only the constant term is left. Rational parts (exact zeros of symmetric inputs, sums with
   twiddles +-1, +-i, 1/2...) are rounded exactly (an exact zero is +0): no precision loop can
   decide a value that is itself a rounding boundary.
3. Irrational undecided parts: mpmath at 128..4096 bits with Ziv's test; still undecided:
   ArithmeticError (loud, never an uncertified value).
Float64 parts skip tier 1 for a double-double tier (Dot2 with double-double twiddles), since a
long double bound O(n u) rarely decides them. Inputs holding inf/NaN take pocketfft's IEEE
propagation instead (no finite value to certify).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import dtypes as D
from .lax_reductions import round_float
from .lax_special import _fraction_round

LD = np.dtype(np.longdouble)
_DELTA_W = {np.dtype(np.float64): 2.0 ** -50, LD: 2.0 ** -58}   # twiddle error bounds (with margin)


def _twiddles(n: int, k: np.ndarray, sign: int, real) -> np.ndarray:
    """exp(sign * 2 pi i (j k mod n) / n) for j = 0..n-1 (rows k), in the real type ``real``."""
    r = (np.outer(k, np.arange(n)) % n).astype(real)
    two_pi = 2 * np.arccos(real.type(-1))    # pi to the precision of ``real`` (np.pi is float64)
    ang = two_pi * (r / real.type(n))
    ang = ang.astype(real)
    w = np.empty(ang.shape, np.dtype(np.clongdouble) if real == LD else np.dtype(np.complex128))
    w.real, w.imag = np.cos(ang), sign * np.sin(ang)
    return w


def _axis_transform(y, b, axis, n_out, sign, scale, real, weights=None):
    """DFT of y (wide complex) along ``axis`` to ``n_out`` bins, with its error bound b (same shape
    as y, per element). ``weights``: per input index coefficients (irfft's 1/2/1), applied
    exactly (powers of two). Returns (y', b')."""
    u = float(np.finfo(real).eps) / 2
    n = y.shape[axis]
    y = np.moveaxis(y, axis, -1)
    b = np.moveaxis(b, axis, -1)
    if weights is not None:
        y = y * weights
        b = b * weights
    length = scale if scale is not None else n
    out = np.empty(y.shape[:-1] + (n_out,), np.result_type(y.dtype, np.complex128))
    step = max(1, (1 << 20) // max(1, length))        # twiddle rows per block: bounded memory
    with np.errstate(all="ignore"):
        for k0 in range(0, n_out, step):
            w = _twiddles(length, np.arange(k0, min(n_out, k0 + step)), sign, real)[:, :n]
            out[..., k0:k0 + w.shape[0]] = y @ w.T
        c = 3 * (n + 4) * u + 2 * _DELTA_W[real]
        tot = np.sum(np.abs(y), axis=-1, keepdims=True) + np.sum(b, axis=-1, keepdims=True)
        bound = np.sum(b, axis=-1, keepdims=True) + real.type(c) * tot
        bound = np.broadcast_to(bound, out.shape).astype(real)
    return np.moveaxis(out, -1, axis), np.moveaxis(bound, -1, axis)


def fft_value(kind: str, x: np.ndarray, fft_lengths, out_dtype) -> np.ndarray:
    """lax.fft of ``x`` (kind FFT, IFFT, RFFT, IRFFT) correctly rounded to ``out_dtype``."""
    out_dtype = np.dtype(out_dtype)
    cplx = out_dtype if D.is_complex(out_dtype) else np.dtype(
        np.complex64 if out_dtype == np.float32 else np.complex128)
    real = np.dtype(np.float64) if cplx == np.complex64 else LD
    part = np.dtype(np.float32) if cplx == np.complex64 else np.dtype(np.float64)
    nd = len(fft_lengths)
    axes = list(range(x.ndim - nd, x.ndim))
    wide = np.dtype(np.complex128) if real == np.float64 else np.dtype(np.clongdouble)
    if not np.all(np.isfinite(np.asarray(x).astype(cplx))):
        return _pocketfft(kind, np.asarray(x), fft_lengths, axes, wide, out_dtype)
    y = np.asarray(x).astype(wide)
    b = np.zeros(y.shape, real)
    lengths = [int(n) for n in fft_lengths]
    total = math.prod(lengths)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1
    if kind in ("FFT", "IFFT", "RFFT"):
        order = axes[::-1]          # RFFT: the last axis first (real input, half the bins)
        for a, n in zip(order, lengths[::-1]):
            n_out = n // 2 + 1 if (kind == "RFFT" and a == axes[-1]) else n
            y, b = _axis_transform(y, b, a, n_out, sign, n, real)
    elif kind == "IRFFT":
        for a, n in zip(axes[:-1], lengths[:-1]):
            y, b = _axis_transform(y, b, a, n, sign, n, real)
        n = lengths[-1]
        y = np.take(y, np.arange(n // 2 + 1), axis=axes[-1])
        b = np.take(b, np.arange(n // 2 + 1), axis=axes[-1])
        weights = _irfft_weights(n).astype(real)
        y, b = _axis_transform(y, b, axes[-1], n, sign, n, real, weights=weights)
        y = y.real.astype(real)
    else:
        raise NotImplementedError(kind)
    u = float(np.finfo(real).eps) / 2
    if kind in ("IFFT", "IRFFT"):
        with np.errstate(all="ignore"):
            y = y / real.type(total)
            b = b / real.type(total) + (np.abs(y) * real.type(u) if total & (total - 1) else 0)
    if part == np.float64:
        # long double (64 bits) with an O(n u) bound rarely decides float64 parts: the double-
        # double tier decides them instead.
        b = np.full(y.shape, np.inf, real)
    return _certify(kind, y, b, np.asarray(x), lengths, out_dtype, part)


def _pocketfft(kind, x, fft_lengths, axes, wide, out_dtype):
    """inf/NaN inputs: an FFT algorithm's IEEE propagation (pocketfft in the wide type; a direct
    DFT would turn inf * (1 + 0i) into inf + NaN i where butterflies keep inf + 0i, as XLA:CPU).
    Not a certified value: the inf/NaN pattern depends on the algorithm."""
    with np.errstate(all="ignore"):
        if kind == "FFT":
            y = np.fft.fftn(x.astype(wide), axes=axes)
        elif kind == "IFFT":
            y = np.fft.ifftn(x.astype(wide), axes=axes)
        elif kind == "RFFT":
            y = np.fft.rfftn(x.astype(wide.type(0).real.dtype), s=fft_lengths, axes=axes)
        else:
            y = np.fft.irfftn(x.astype(wide), s=fft_lengths, axes=axes)
        return y.astype(out_dtype)


def _irfft_weights(n: int) -> np.ndarray:
    """c2r: bin 0 once, bins 1..ceil(n/2)-1 twice, the Nyquist bin (even n) once."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def _certify(kind, y, b, x, lengths, out_dtype, part):
    parts = [y.real, y.imag] if D.is_complex(out_dtype) else [y]
    rounded, undecided = [], []
    uint = D.storage_uint(part)
    for p in parts:
        with np.errstate(all="ignore"):
            lo, hi = round_float(p - b, part), round_float(p + b, part)
        rounded.append(np.array(round_float(p, part), part))
        undecided.append(lo.view(uint) != hi.view(uint))
    if any(u.any() for u in undecided) and part == np.float64:
        _double_double_tier(kind, x, lengths, rounded, undecided)
    if any(u.any() for u in undecided):
        exact = _Exact(kind, x, lengths)
        for which, (r, und) in enumerate(zip(rounded, undecided)):
            for idx in zip(*np.nonzero(und)):
                r[idx] = exact.part(idx, which, part)
    if D.is_complex(out_dtype):
        out = np.empty(y.shape, out_dtype)
        out.real, out.imag = rounded
        return out
    return rounded[0].astype(out_dtype)


_TWIDDLES: dict = {}


def _twiddle_table(M: int):
    """cos and sin of 2 pi r / M, r = 0..M-1, each as hi + lo float64 pairs within 2**-104 of
    the exact value (mpmath at 160 bits; cached per M)."""
    hit = _TWIDDLES.get(M)
    if hit is None:
        import mpmath
        vals = np.empty((4, M))
        with mpmath.workprec(160):
            for r in range(M):
                ang = 2 * mpmath.pi * r / M
                for i, v in ((0, mpmath.cos(ang)), (2, mpmath.sin(ang))):
                    hi = float(v)
                    vals[i, r], vals[i + 1, r] = hi, float(v - hi)
        if len(_TWIDDLES) > 64:
            _TWIDDLES.clear()
        hit = _TWIDDLES[M] = vals
    return hit


def _double_double_tier(kind, x, lengths, rounded, undecided):
    """float64 parts as dot products of the exact inputs with double-double twiddles: with
    twiddle = hi + lo + eps (|eps| <= 2**-104), sum x (hi + lo) is a dot product of float64
    vectors evaluated by the double-double Dot2 of lax_reductions.refine_sums with its bound,
    plus 2**-104 sum |x| for the eps; decided where the interval rounds to one float64."""
    from .lax_reductions import refine_sums
    nd = len(lengths)
    M = math.lcm(4, *lengths)
    cs = _twiddle_table(M)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1
    scale = math.prod(lengths) if kind in ("IFFT", "IRFFT") else 1
    in_shape = x.shape[-nd:]
    jj = np.indices(in_shape).reshape(nd, -1)                 # every input multi-index
    keep = jj[-1] <= lengths[-1] // 2 if kind == "IRFFT" else np.ones(jj.shape[1], bool)
    jj = jj[:, keep]
    wgt = _irfft_weights(lengths[-1])[jj[-1]] if kind == "IRFFT" else np.ones(jj.shape[1])
    for which, (r, und) in enumerate(zip(rounded, undecided)):
        todo = np.argwhere(und)
        if not todo.size:
            continue
        rows_a, rows_b = [], []
        for idx in todo:
            batch, k = tuple(idx[:-nd]), idx[-nd:]
            xs = x[batch].reshape(-1)[keep] if batch else x.reshape(-1)[keep]
            a = np.real(xs).astype(np.float64) * wgt
            bb = (np.imag(xs).astype(np.float64) if np.iscomplexobj(xs) else np.zeros(a.shape)) * wgt
            e = (sign * sum(jj[d].astype(np.int64) * int(k[d]) * (M // lengths[d]) for d in range(nd))) % M
            c_hi, c_lo, s_hi, s_lo = cs[0][e], cs[1][e], cs[2][e], cs[3][e]
            if which == 0:        # a cos - b sin
                rows_a.append(np.concatenate([a, a, -bb, -bb]))
                rows_b.append(np.concatenate([c_hi, c_lo, s_hi, s_lo]))
            else:                 # a sin + b cos
                rows_a.append(np.concatenate([a, a, bb, bb]))
                rows_b.append(np.concatenate([s_hi, s_lo, c_hi, c_lo]))
        A, B = np.array(rows_a), np.array(rows_b)
        with np.errstate(all="ignore"):
            v, bound = refine_sums(A, B, LD)
            bound = bound + np.sum(np.abs(A), axis=1).astype(LD) * LD.type(2.0 ** -103)
            v, bound = v / LD.type(scale), bound / LD.type(scale) + np.abs(v) * LD.type(2.0 ** -63)
            lo, hi = (v - bound).astype(np.float64), (v + bound).astype(np.float64)
        ok = lo.view(np.int64) == hi.view(np.int64)
        for t, idx in enumerate(todo):
            if ok[t]:
                r[tuple(idx)] = lo[t]
                und[tuple(idx)] = False


class _Exact:
    """The DFT value of one output element as sum_r c_r zeta_M^r (exact c_r), its exact zero test
    and its mpmath evaluation."""

    def __init__(self, kind, x, lengths):
        self.kind, self.x, self.lengths = kind, x, lengths
        self.nd = len(lengths)
        self.M = math.lcm(4, *lengths)
        self.total = math.prod(lengths)
        self._phi = None

    def _coeffs(self, idx) -> dict:
        """{exponent r: exact coefficient} of the (unscaled) sum for output index ``idx``."""
        M, nd = self.M, self.nd
        batch, k = idx[:-nd] if nd < len(idx) else (), idx[-nd:]
        xs = self.x[tuple(batch)] if batch else self.x
        sign = 1 if self.kind in ("IFFT", "IRFFT") else -1
        weights = _irfft_weights(self.lengths[-1]) if self.kind == "IRFFT" else None
        coeffs: dict = {}
        for j in np.ndindex(xs.shape):
            if self.kind == "IRFFT" and j[-1] > self.lengths[-1] // 2:
                continue
            v = xs[j]
            e = sign * sum(int(ja) * int(ka) * (M // n) for ja, ka, n in zip(j, k, self.lengths)) % M
            re = Fraction(float(np.real(v)))
            im = Fraction(float(np.imag(v))) if np.iscomplexobj(xs) else Fraction(0)
            if weights is not None:
                # Re((a + bi) zeta^e) = a cos - b sin, times the c2r weight:
                # (a zeta^e + a zeta^-e + b i zeta^e - b i zeta^-e) / 2, with i = zeta^(M/4)
                wgt = Fraction(weights[j[-1]]) / 2
                i4 = M // 4
                for r, c in ((e, re), (-e, re), (e + i4, im), (-e + i4, -im)):
                    coeffs[r % M] = coeffs.get(r % M, 0) + wgt * c
                continue
            coeffs[e] = coeffs.get(e, 0) + re
            if im:
                coeffs[(e + M // 4) % M] = coeffs.get((e + M // 4) % M, 0) + im
        return coeffs

    def _phi_M(self) -> list:
        if self._phi is None:
            self._phi = _cyclotomic(self.M)
        return self._phi

    def _part_poly(self, coeffs, which) -> dict:
        """real (which=0) or imaginary (1) part as a polynomial in zeta (exact coefficients)."""
        M = self.M
        out: dict = {}
        for r, c in coeffs.items():
            if which == 0:        # (v + conj v) / 2
                terms = ((r, c / 2), ((-r) % M, c / 2))
            else:                 # (v - conj v) / (2i) = (v - conj v) * zeta^(3M/4) / 2
                s = 3 * M // 4
                terms = (((r + s) % M, c / 2), ((-r + s) % M, -c / 2))
            for e, v in terms:
                out[e] = out.get(e, 0) + v
        return out

    def part(self, idx, which, dtype):
        coeffs = self._coeffs(idx)
        poly = self._part_poly(coeffs, which)
        q = _rational_value(poly, self._phi_M())
        if q is not None:         # exact (zero included: +0), rounded once
            if self.kind in ("IFFT", "IRFFT"):
                q /= self.total
            return np.asarray(_fraction_round(q, dtype)).astype(dtype)[()]
        return _mp_part(coeffs, self.M, which, self.total if self.kind in ("IFFT", "IRFFT") else 1, dtype)


def _mp_part(coeffs, M, which, scale, dtype):
    import mpmath
    from .lax_special import mp_round
    absum = sum(abs(c) for c in coeffs.values())
    for prec in (128, 256, 512, 1024, 2048, 4096):
        with mpmath.workprec(prec + 16):
            tot = mpmath.mpf(0)
            for r, c in coeffs.items():
                ang = 2 * mpmath.pi * mpmath.mpf(r) / M
                tw = mpmath.cos(ang) if which == 0 else mpmath.sin(ang)
                tot += mpmath.mpf(c.numerator) / c.denominator * tw
            v = tot / scale
            e = mpmath.mpf(absum.numerator) / absum.denominator / scale * mpmath.mpf(2) ** (
                -prec + 4 + max(1, len(coeffs)).bit_length())
            lo, hi = mp_round([v - e], dtype)[0], mp_round([v + e], dtype)[0]
        if np.asarray(lo).tobytes() == np.asarray(hi).tobytes():
            return lo
    raise ArithmeticError("fft: an output part not decided at 4096 bits (reference cost cap)")


def _cyclotomic(M: int) -> list:
    """Integer coefficients (lowest degree first) of the M-th cyclotomic polynomial:
    (t^M - 1) divided by Phi_d for every proper divisor d of M."""
    cache: dict = {}

    def phi(n):
        if n in cache:
            return cache[n]
        p = [-1] + [0] * (n - 1) + [1]
        for d in range(1, n):
            if n % d == 0:
                p = _divide(p, phi(d))
        cache[n] = p
        return p
    return phi(M)


def _divide(p: list, q: list) -> list:
    """Exact quotient of integer polynomials (q monic), lowest degree first."""
    p = list(p)
    out = [0] * (len(p) - len(q) + 1)
    for i in range(len(out) - 1, -1, -1):
        c = p[i + len(q) - 1]
        out[i] = c
        if c:
            for j, qc in enumerate(q):
                p[i + j] -= c * qc
    return out


def _rational_value(poly: dict, phi: list):
    """The exact value of sum poly[e] zeta^e (exact dyadic rationals) if it is rational, else None:
    the remainder modulo the monic minimal polynomial ``phi`` of zeta is the unique representation
    in the basis 1, zeta, ..., zeta^(deg-1), rational iff only its constant term is left.
    (Integer arithmetic after scaling by the common power-of-two denominator.)"""
    deg = len(phi) - 1
    poly = {e: c for e, c in poly.items() if c}
    if not poly:
        return Fraction(0)
    den = max(c.denominator for c in poly.values())
    p = [0] * max(max(poly) + 1, deg)
    for e, c in poly.items():
        p[e] += c.numerator * (den // c.denominator)
    nz = [(j, qc) for j, qc in enumerate(phi) if qc]
    for i in range(len(p) - 1, deg - 1, -1):
        c = p[i]
        if c:
            for j, qc in nz:
                p[i - deg + j] -= c * qc
    if any(p[1:deg]):
        return None
    return Fraction(p[0], den)
