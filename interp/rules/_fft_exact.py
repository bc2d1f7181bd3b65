"""Correctly rounded FFTs: every output element's real and imaginary part is the exact DFT value
(of the exact input values) rounded once to the output type (spec/lax_contractions.py fft).

Tiers, each deciding what the ones before could not:

1. A fast FFT with a rigorous error bound: O(n log n) per axis (mixed-radix Cooley-Tukey,
   decimation in time, with direct radix-p butterflies for prime factors p <= 64 and Bluestein's
   chirp-z convolution for larger prime factors), in float64 for float32 parts, then in
   double-double (error-free TwoSum / Dekker TwoProd, vectorised) for float64 parts and for the
   float32 parts the float64 FFT left. Where part +- bound round to one value, that value is the
   correctly rounded result (decided exactly against the rounding boundaries).
2. Undecided parts (tiny outputs far below ||x||_2): exact integer dot products of the inputs
   (integers times 2**q) with fixed-point twiddles of P = 128, 256, 512 bits (error <= 2 units
   each), vectorised over the elements in Python ints; decided where the interval rounds to one
   value. Parts whose interval holds 0 are left to:
3. The exact DFT sum in the cyclotomic field Q(zeta_M), M = lcm(lengths, 4): the value is
   sum_r c_r zeta^r with exact dyadic c_r; its real (imaginary) part reduced modulo the M-th
   cyclotomic polynomial is its unique representation in the power basis, rational iff only the
   constant term is left (vectorised over the elements when M is a power of two, and then run
   before tier 2 where it fits int64). Rational parts (exact zeros of symmetric inputs, sums with
   twiddles +-1, +-i, 1/2...) are rounded exactly (an exact zero is +0): no precision loop can
   decide a value that is itself a rounding boundary.
4. Irrational undecided parts: mpmath at 128..4096 bits with Ziv's test; still undecided:
   numerics.Uncertified, an ArithmeticError (loud, never an uncertified value).
Inputs holding inf/NaN take pocketfft's IEEE propagation instead (no finite value to certify).

The tier-1 bound (the normwise FFT analysis of Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., section 24.1, evaluated a posteriori). The transform of one batch element
(all of its axes) is a chain of linear stages T_s: a twiddle diagonal (norm 1), blocks of
length-p DFTs (norm sqrt(p)), a Bluestein convolution (norm <= max|B| for its chirp spectrum B),
the IRFFT's Hermitian extension (norm <= sqrt(2)), truncations (norm <= 1). Each stage is
computed from the computed input v_s with a local error ||r_s||_2 <= eta_s N_s ||v_s||_2, N_s >=
||T_s||_2. By induction the relative error rho_s = ||v_s - z_s|| / Z_s (z the exact values,
Z_s = prod N ||x||) obeys 1 + rho_{s+1} <= (1 + rho_s)(1 + eta_s), so
    ||y_hat - y||_2 <= (prod(1 + eta_s) - 1) prod(N_s) ||x||_2 <= 1.01 sum(eta_s) prod(N_s) ||x||_2
for sum(eta_s) <= 2**-10, and a 2-norm bounds every element. Local errors, with u = 2**-53:
- float64 complex: a + b within u(|a| + |b|) (each part rounded once); a w within
  sqrt(2) gamma_2 |a||w| <= 3u |a||w| (with or without FMA); twiddles rounded to float64 within
  1.5u of exp(i theta).
- double-double complex (normalised pairs, |lo| <= u|hi|): a + b (TwoSum of the highs, lows
  added, TwoSum) within 3.01u^2 (|a| + |b|); a w (four Dekker products, each within 8.01u^2
  |a_part||w_part|, and one addition) within 16u^2 |a||w|; twiddles within TW_ERR.
- radix 2: |r| <= c_add (|a| + |b|) per output, eta = sqrt(2) c_add; radix p: each output a sum
  of p twiddled terms, |r| <= (d_tw + c_mul + (p-1) c_add)(1 + 2**-40) sum|a_j|,
  eta = sqrt(p) times that; twiddle diagonal: eta = d_tw + c_mul (1 + d_tw).
- Bluestein (chirp c_j = exp(s i pi j^2 / n), Y = c * IFFT_L(FFT_L(c x) B_hat) / L): the chain
  above with B_hat = FFT_L(conj chirp) computed by the same arithmetic, its error e_B (a 2-norm
  bound) and max|B_hat| entering the pointwise product: eta = (e_B + c_mul max|B_hat|) / N,
  N = max|B_hat| + e_B.
Each batch element is first scaled by a power of two (max |part| in [1/2, 1)): no overflow, and
parts below TINY after scaling are left out of the transform (their whole contribution, at most
2 sum|x_tiny| per element, joins the bound), so every nonzero input is a normal float. Underflow
inside the transform (products of tiny intermediates; Dekker's product then errs by at most
7/2 * 2**-1074, S. Boldo, "Pitfalls of a full floating-point proof", IJCAR 2006) adds at most
ABS_ERR per element: <= 64 roundings of 2**-1070 per element per stage, a perturbation of
2-norm <= 2**20 * 2**-1064 per stage for <= 2**40 elements, amplified by <= 2**40 over <= 128
stages: < 2**-990 in scaled units.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import dtypes
from ..numerics import round_float, round_fraction, two_sum, ziv

LD = np.dtype(np.longdouble)
_U = 2.0 ** -53
TW_ERR = 2.0 ** -101      # |w_hat - w| (complex) of every double-double twiddle (see _roots)
ABS_ERR = 2.0 ** -960     # every underflow effect, per output element, in scaled units
TINY = 2.0 ** -600        # scaled input parts below this are bounded, not transformed
P_DIRECT = 64             # largest prime radix done directly; larger prime factors: Bluestein
_RHO_MAX = 2.0 ** -10     # 1.01 sum(eta) bounds prod(1 + eta) - 1 below this


def fft_value(kind: str, x: np.ndarray, fft_lengths, out_dtype, tiers: dict | None = None) -> np.ndarray:
    """lax.fft of ``x`` (kind FFT, IFFT, RFFT, IRFFT) correctly rounded to ``out_dtype``.
    ``tiers`` (for bench/fft.py): filled with the number of output parts ("parts") and how many
    the float64 FFT ("f64") and the double-double FFT ("dd") decided; the exact tiers did the rest."""
    out_dtype = np.dtype(out_dtype)
    cplx = out_dtype if dtypes.is_complex(out_dtype) else np.dtype(
        np.complex64 if out_dtype == np.float32 else np.complex128)
    part = np.dtype(np.float32) if cplx == np.complex64 else np.dtype(np.float64)
    x = np.asarray(x)
    lengths = [int(n) for n in fft_lengths]
    nd = len(lengths)
    if not np.all(np.isfinite(x.astype(cplx))):
        wide = np.dtype(np.complex128) if part == np.float32 else np.dtype(np.clongdouble)
        return _pocketfft(kind, x, lengths, list(range(x.ndim - nd, x.ndim)), wide, out_dtype)
    out_shape = x.shape[:-1] + ((lengths[-1] // 2 + 1,) if kind == "RFFT" else
                                (lengths[-1],) if kind == "IRFFT" else x.shape[-1:])
    if not math.prod(out_shape):
        return np.zeros(out_shape, out_dtype)
    if kind not in ("FFT", "IFFT", "RFFT", "IRFFT"):
        raise NotImplementedError(kind)
    # Tier 1: float32 parts from a float64 FFT (bound ~ 2**-42 ||x||_2 at n = 1024), what it
    # leaves and float64 parts from a double-double FFT (~ 2**-92 ||x||_2).
    total = math.prod(lengths) if kind in ("IFFT", "IRFFT") else 1
    decided = _tier1(*_fast_fft(kind, x, lengths, _F64), total, _F64, part) if part == np.float32 else []
    n_f64 = sum(int(ok.sum()) for _, ok in decided) if tiers is not None else 0
    if not decided or not all(ok.all() for _, ok in decided):
        dd = _tier1(*_fast_fft(kind, x, lengths, _DD), total, _DD, part)
        decided = [(np.where(ok, r, r2), ok | ok2) for (r, ok), (r2, ok2) in zip(decided, dd)] or dd
    if tiers is not None:
        tiers.update(parts=sum(ok.size for _, ok in decided), f64=n_f64,
                     dd=sum(int(ok.sum()) for _, ok in decided) - n_f64)
    return _certify(kind, decided, x, lengths, out_dtype, part)


# --- error-free transformations and the two arithmetics -----------------------------------------
# A complex array is held as float64 "pairs" (..., 2) = (real, imaginary); a value of an
# arithmetic is a tuple of such arrays: (x,) in float64, (hi, lo) in double-double.

def _split(a):
    """Veltkamp's split into two 26-bit halves (|a| < 2**995: no overflow)."""
    c = 134217729.0 * a
    h = c - (c - a)
    return h, a - h


class _F64:
    """Complex float64 arithmetic on pairs (for float32 parts)."""
    c_add = _U
    c_mul = 3 * _U
    d_tw = 1.5 * _U

    @staticmethod
    def lift(x):
        return (x,)

    @staticmethod
    def add(a, b):
        return (a[0] + b[0],)

    @staticmethod
    def sub(a, b):
        return (a[0] - b[0],)

    @staticmethod
    def operand(re, im):
        """A multiplier (re, im: (hi, lo) real arrays) prepared for ``mul``."""
        return re[0][..., None], np.stack([-im[0], im[0]], -1)

    @staticmethod
    def mul(a, w):
        # (xr, xi) * (wr, wr) + (xi, xr) * (-wi, wi): one rounding per product and per sum
        x = a[0]
        return (x * w[0] + x[..., ::-1] * w[1],)


class _DD:
    """Complex double-double arithmetic on pairs (for float64 parts)."""
    c_add = 3.01 * _U ** 2
    c_mul = 16 * _U ** 2
    d_tw = TW_ERR

    @staticmethod
    def lift(x):
        return (x, np.zeros_like(x))

    @staticmethod
    def add(a, b):
        s, e = two_sum(a[0], b[0])
        return two_sum(s, e + (a[1] + b[1]))

    @staticmethod
    def sub(a, b):
        return _DD.add(a, (-b[0], -b[1]))

    @staticmethod
    def operand(re, im):
        def real(h, lo):
            return (h, lo) + _split(h)
        return (real(re[0][..., None], re[1][..., None]),
                real(np.stack([-im[0], im[0]], -1), np.stack([-im[1], im[1]], -1)))

    @staticmethod
    def _scale(xh, xl, w):
        """(xh + xl) * (wh + wl) per element: Dekker's exact xh * wh, the cross terms rounded,
        xl * wl dropped (within 8.01 u^2 |x||w|)."""
        wh, wl, whh, whl = w
        p = xh * wh
        xhh, xhl = _split(xh)
        e = (((xhh * whh - p) + xhh * whl) + xhl * whh) + xhl * whl
        return two_sum(p, e + (xh * wl + xl * wh))

    @staticmethod
    def mul(a, w):
        hi, lo = a
        return _DD.add(_DD._scale(hi, lo, w[0]), _DD._scale(hi[..., ::-1], lo[..., ::-1], w[1]))


class _Bound:
    """sum(eta_s) and prod(N_s) of a chain of stages (module docstring)."""

    def __init__(self):
        self.eta, self.norm = 0.0, 1.0

    def stage(self, eta: float, norm: float):
        self.eta += eta
        self.norm *= norm

    def rho(self) -> float:
        return 1.01 * self.eta if self.eta <= _RHO_MAX else math.inf


# --- twiddles ------------------------------------------------------------------------------------

_ROOTS: dict = {}


def _roots(M: int) -> np.ndarray:
    """(4, M): cos hi, cos lo, sin hi, sin lo of 2 pi r / M, r < M, each exp(2 pi i r / M) within
    TW_ERR. r = r1 S + r0 (S = ceil(sqrt(M))): exp(2 pi i r0 / M) and exp(2 pi i r1 S / M) from
    mpmath at 160 bits as hi + lo (each part within u^2 (1 + 2**-40), complex 1.42 u^2), their
    double-double product within 1.42 u^2 * 2 + 16 u^2 < 19 u^2 < TW_ERR (cached per M)."""
    hit = _ROOTS.get(M)
    if hit is None:
        import mpmath
        S = math.isqrt(M - 1) + 1
        R = -(-M // S)

        def table(rs):
            out = np.empty((4, len(rs)))
            with mpmath.workprec(160):
                for i, r in enumerate(rs):
                    ang = 2 * mpmath.pi * r / M
                    for j, v in ((0, mpmath.cos(ang)), (2, mpmath.sin(ang))):
                        hi = float(v)
                        out[j, i], out[j + 1, i] = hi, float(v - hi)
            return out
        base, step = table(range(S)), table([r1 * S for r1 in range(R)])
        a = (np.stack([base[0], base[2]], -1)[None], np.stack([base[1], base[3]], -1)[None])
        w = _DD.operand((step[0][:, None], step[1][:, None]), (step[2][:, None], step[3][:, None]))
        hi, lo = (c.reshape(-1, 2)[:M] for c in _DD.mul(a, w))
        hit = np.stack([hi[:, 0], lo[:, 0], hi[:, 1], lo[:, 1]])
        if len(_ROOTS) > 64:
            _ROOTS.clear()
        _ROOTS[M] = hit
    return hit


_OPERANDS: dict = {}


def _operand(arith, M: int, exps: np.ndarray, key):
    """exp(2 pi i exps / M) prepared for ``arith.mul`` (cached under ``key``)."""
    k = (arith, M, key)
    hit = _OPERANDS.get(k)
    if hit is None:
        t = _roots(M)[:, exps % M]
        hit = arith.operand((t[0], t[1]), (t[2], t[3]))
        if len(_OPERANDS) > 256:
            _OPERANDS.clear()
        _OPERANDS[k] = hit
    return hit


def _smallest_prime(n: int) -> int:
    p = 2
    while p * p <= n:
        if n % p == 0:
            return p
        p += 1
    return n


# --- the fast transform --------------------------------------------------------------------------

def _fft1(arith, v, n: int, sign: int, bd: _Bound):
    """Unnormalised DFT (exp(sign 2 pi i jk / n)) along axis -2 of pairs ``v``; stages into ``bd``.
    Decimation in time: x_(j2 p + j1) -> length-m DFTs over j2, twiddles exp(s 2 pi i j1 k2 / n),
    length-p DFTs over j1 giving bin k1 m + k2."""
    if n == 1:
        return v
    p = _smallest_prime(n)
    if p == n and n > P_DIRECT:
        return _bluestein(arith, v, n, sign, bd)
    m = n // p
    lead = v[0].shape[:-2]
    v = tuple(c.reshape(lead + (m, p, 2)).swapaxes(-3, -2) for c in v)
    if m > 1:
        v = _fft1(arith, v, m, sign, bd)
        j1, k2 = np.ogrid[:p, :m]
        v = arith.mul(v, _operand(arith, n, sign * j1 * k2, ("tw", p, sign)))
        bd.stage(arith.d_tw + arith.c_mul * (1 + arith.d_tw), 1.0)
    v = _dft_small(arith, v, p, sign, bd)
    return tuple(c.reshape(lead + (n, 2)) for c in v)


def _dft_small(arith, v, p: int, sign: int, bd: _Bound):
    """Length-p DFTs along axis -3 of pairs (..., p, m, 2), directly."""
    if p == 2:
        a = tuple(c[..., 0, :, :] for c in v)
        b = tuple(c[..., 1, :, :] for c in v)
        bd.stage(math.sqrt(2) * arith.c_add, math.sqrt(2))
        return tuple(np.stack(pair, -3) for pair in zip(arith.add(a, b), arith.sub(a, b)))
    k, j = np.ogrid[:p, :p]
    w = _operand(arith, p, (sign * k * j)[..., None], ("dft", sign))
    t = arith.mul(tuple(c[..., None, :, :, :] for c in v), w)     # (..., k, j, m, 2)
    s = tuple(c[..., 0, :, :] for c in t)
    for jj in range(1, p):
        s = arith.add(s, tuple(c[..., jj, :, :] for c in t))
    c = (arith.d_tw + arith.c_mul * (1 + arith.d_tw) + (p - 1) * arith.c_add) * (1 + 2.0 ** -40)
    bd.stage(math.sqrt(p) * c, math.sqrt(p))
    return s


_CHIRPS: dict = {}


def _chirp(arith, n: int, sign: int):
    """Bluestein's chirp c_j = exp(s i pi j^2 / n) and spectrum B_hat = FFT_L(conj c, wrapped),
    with B_hat's error bound e_B (2-norm, so per element) and max|B_hat|."""
    key = (arith, n, sign)
    hit = _CHIRPS.get(key)
    if hit is None:
        L = 1 << (2 * n - 2).bit_length()               # >= 2n - 1: no wrap-around
        j = np.arange(n, dtype=np.int64)
        chirp = _operand(arith, 2 * n, sign * j * j, ("chirp", sign))
        t = _roots(2 * n)[:, (-sign * j * j) % (2 * n)]  # conj c_m at m and L - m
        b = np.zeros((4, L))
        b[:, :n] = t
        b[:, L - n + 1:] = t[:, :0:-1]
        bb = _Bound()
        bb.stage(arith.d_tw, 1.0)                       # the chirp entries' own error
        hi = np.stack([b[0], b[2]], -1)
        B = _fft1(arith, (hi,) if arith is _F64 else (hi, np.stack([b[1], b[3]], -1)), L, -1, bb)
        e_b = bb.rho() * bb.norm * math.sqrt(2 * n - 1)
        b_max = float(np.max(np.hypot(B[0][:, 0], B[0][:, 1]))) * (1 + 2.0 ** -49)
        lo = B[1] if len(B) > 1 else np.zeros_like(B[0])
        op = arith.operand((B[0][:, 0], lo[:, 0]), (B[0][:, 1], lo[:, 1]))
        norm = b_max + e_b
        hit = (L, chirp, op, (e_b + arith.c_mul * b_max) / norm, norm)
        if len(_CHIRPS) > 32:
            _CHIRPS.clear()
        _CHIRPS[key] = hit
    return hit


def _bluestein(arith, v, n: int, sign: int, bd: _Bound):
    """DFT of prime length n > P_DIRECT as a power-of-two cyclic convolution:
    exp(s 2 pi i jk / n) = c_j c_k conj(c_(k-j)), Y = c * IFFT_L(FFT_L(c x) B) / L."""
    L, chirp, b_op, eta_b, norm_b = _chirp(arith, n, sign)
    tw = arith.d_tw + arith.c_mul * (1 + arith.d_tw)
    inner = _Bound()
    a = arith.mul(v, chirp)
    inner.stage(tw, 1.0)
    a = tuple(np.concatenate([c, np.zeros(c.shape[:-2] + (L - n, 2))], -2) for c in a)
    a = _fft1(arith, a, L, -1, inner)
    a = arith.mul(a, b_op)
    inner.stage(eta_b, norm_b)
    a = _fft1(arith, a, L, 1, inner)
    a = tuple(np.ldexp(c[..., :n, :], -(L.bit_length() - 1)) for c in a)   # / L: exact
    inner.stage(0.0, 1.0 / L)
    a = arith.mul(a, chirp)
    inner.stage(tw, 1.0)
    bd.stage(inner.rho(), inner.norm)
    return a


def _fast_fft(kind, x, lengths, arith):
    """Tier 1: the unnormalised transform of ``x`` computed in ``arith`` on each batch element
    scaled by 2**-e: (v, b, e) with v the arithmetic's arrays (pairs; IRFFT: real parts), b the
    bound on each element's error in scaled units, b and e shaped batch + (1,) * nd."""
    nd = len(lengths)
    xp = np.stack([np.real(x).astype(LD), np.imag(x).astype(LD) if np.iscomplexobj(x)
                   else np.zeros(x.shape, LD)], -1)
    block = tuple(range(x.ndim - nd, x.ndim + 1))                 # transformed axes and the pair
    _, e = np.frexp(np.max(np.abs(xp), axis=block, keepdims=True))
    xs = np.ldexp(xp, -e)                                        # max |part| in [1/2, 1), exact
    tiny = np.abs(xs) < TINY
    tiny_sum = np.sum(np.where(tiny, np.abs(xs), 0), axis=block, keepdims=True)
    xs = np.where(tiny, 0, xs).astype(np.float64)                # exact: normal floats or 0
    norm = np.sqrt(np.sum(xs.astype(LD) ** 2, axis=block, keepdims=True))  # LD: no underflow
    v = arith.lift(xs)
    bd = _Bound()
    axes = list(range(x.ndim - nd, x.ndim))                      # data axes (pair axis last)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1

    def along(v, axis, n):
        v = tuple(np.moveaxis(c, axis, -2) for c in v)
        v = _fft1(arith, v, n, sign, bd)
        return tuple(np.moveaxis(c, -2, axis) for c in v)

    if kind == "IRFFT":
        for a, n in zip(axes[:-1], lengths[:-1]):
            v = along(v, a, n)
        v = tuple(_hermitian(c, lengths[-1]) for c in v)
        bd.stage(0.0, math.sqrt(2))
        v = along(v, axes[-1], lengths[-1])
    else:
        for a, n in zip(axes[::-1], lengths[::-1]):              # RFFT: last axis first, halved
            v = along(v, a, n)
            if kind == "RFFT" and a == axes[-1]:
                v = tuple(c[..., :n // 2 + 1, :] for c in v)
    with np.errstate(all="ignore"):
        # (1 + 2**-20): the long double sums' rounding (< 2**40 terms)
        b = (LD.type(bd.rho() * bd.norm) * norm + ABS_ERR + 2 * tiny_sum) * LD.type(1 + 2.0 ** -20)
    if kind == "IRFFT":
        v = tuple(c[..., 0] for c in v)                          # the real part
    return v, b[..., 0].astype(np.float64) * (1 + 2.0 ** -50), e[..., 0]


def _tier1(v, b, e, total, arith, part):
    """Decisions from the scaled transform ``v`` (pairs, or real for IRFFT) with its scaled bound
    ``b`` and exponents ``e`` (value = v 2**e / total): [(rounded, decided)] per output part."""
    pairs = v[0].ndim > b.ndim
    comps = [tuple(c[..., 0] for c in v), tuple(c[..., 1] for c in v)] if pairs else [v]
    out = []
    for c in comps:
        bb = np.broadcast_to(b, c[0].shape)
        ee = np.broadcast_to(e, c[0].shape)
        if arith is _DD:
            (hi, lo), bb = _dd_divide(c, bb, total)
            out.append(_decide_dd(hi, lo, bb, ee, part))
        else:
            val = np.ldexp(c[0].astype(LD), ee) / LD.type(total)
            out.append(_decide(val, np.ldexp(bb.astype(LD), ee) / LD.type(total), part))
    return out


def _dd_divide(v, b, total):
    """(hi + lo) / total in double-double and the bound b / total: q1 = hi / t, the residual
    hi - q1 t exact (Dekker's product; hi - p exact by Sterbenz), (residual + lo) / t rounded:
    within 12 u^2 |hi| / t (underflow: ABS_ERR); a power of two divides exactly."""
    hi, lo = v
    if total & (total - 1) == 0:
        k = total.bit_length() - 1
        return (np.ldexp(hi, -k), np.ldexp(lo, -k)), np.ldexp(b, -k)
    t = float(total)
    q1 = hi / t
    p = q1 * t
    qh, ql = _split(q1)
    th, tl = _split(t)
    pe = (((qh * th - p) + qh * tl) + ql * th) + ql * tl
    q2 = (((hi - p) - pe) + lo) / t
    return two_sum(q1, q2), (b / t + 12 * _U ** 2 * np.abs(hi) / t) * (1 + 4 * _U)


def _decide_dd(hi, lo, b, e, part):
    """Parts of (hi + lo) 2**e within b 2**e, decided exactly in double-double: the candidate r
    (rounded through long double), then in scaled units d = (hi - r 2**-e) + lo (hi - r 2**-e
    exact by Sterbenz) must satisfy |d| + b < half the gap from r to either neighbour in
    ``part``. Outside the range where every scaled quantity is a normal float64 (tiny or huge
    results), the long double decision with its slack."""
    val = np.ldexp(hi.astype(LD) + lo.astype(LD), e)
    r, ok_ld = _decide(val, np.ldexp(b.astype(LD), e), part)
    fi = np.finfo(part)
    with np.errstate(all="ignore"):
        gap = np.minimum(np.nextafter(r, part.type(np.inf)) - r, r - np.nextafter(r, part.type(-np.inf)))
        r64 = r.astype(np.float64)
        d = (hi - np.ldexp(r64, -e)) + lo
        ok = (np.abs(d) + b) * (1 + 4 * _U) < np.ldexp(gap.astype(np.float64), -e - 1)
        safe = (np.abs(hi) >= 2.0 ** -850) & (np.abs(r64) >= float(fi.tiny) * 2.0 ** 30) \
            & (np.abs(r64) <= float(fi.max) * 2.0 ** -30) & np.isfinite(b)
    return r, np.where(safe, ok, ok_ld)


def _hermitian(c, n):
    """c2r input (..., n // 2 + 1, 2) extended to the full Hermitian spectrum (..., n, 2): bins 0
    and n/2 (even n) lose their imaginary parts, bins n - k are conj(bin k). Exact; norm <= sqrt 2."""
    full = np.zeros(c.shape[:-2] + (n, 2))
    full[..., 0, 0] = c[..., 0, 0]
    K = (n - 1) // 2
    full[..., 1:K + 1, :] = c[..., 1:K + 1, :]
    full[..., n - K:, 0] = c[..., K:0:-1, 0]
    full[..., n - K:, 1] = -c[..., K:0:-1, 1]
    if n % 2 == 0:
        full[..., n // 2, 0] = c[..., n // 2, 0]
    return full


def _decide(v, b, part):
    """``v`` rounded to ``part`` and where all of [v - b, v + b] rounds to it. The slack covers the
    long double roundings of v (the sum hi + lo, a division by the length) and of v +- b."""
    with np.errstate(all="ignore"):
        slack = b * LD.type(1 + 2.0 ** -58) + np.abs(v) * LD.type(2.0 ** -58)
        lo, hi = round_float(v - slack, part), round_float(v + slack, part)
        uint = dtypes.storage_uint(part)
        ok = (lo.view(uint) == hi.view(uint)) & np.isfinite(slack)
        return np.array(round_float(v, part), part), ok


def _certify(kind, decided, x, lengths, out_dtype, part):
    rounded = [r for r, _ in decided]
    undecided = [~ok for _, ok in decided]
    if any(u.any() for u in undecided):
        exact = _Exact(kind, x, lengths)
        for which, (r, und) in enumerate(zip(rounded, undecided)):
            # zeta^(M/2) = -1: the vectorised rational test; first where it runs in int64 (exact
            # zeros are common), after the fixed-point tier where it needs Python ints.
            pow2 = exact.M & (exact.M - 1) == 0
            if pow2 and not _int_inputs(exact)[4]:
                _rational_pow2(exact, which, r, und, part)
            _fixed_point(exact, which, r, und, part)
            if pow2 and _int_inputs(exact)[4]:
                _rational_pow2(exact, which, r, und, part)
            for idx in zip(*np.nonzero(und)):
                r[idx] = exact.part(idx, which, part)
    if dtypes.is_complex(out_dtype):
        out = np.empty(rounded[0].shape, out_dtype)
        out.real, out.imag = rounded
        return out
    return rounded[0].astype(out_dtype)


def _irfft_weights(n: int) -> np.ndarray:
    """c2r: bin 0 once, bins 1..ceil(n/2)-1 twice, the Nyquist bin (even n) once."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


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


class _Exact:
    """The DFT value of one output element as sum_r c_r zeta_M^r (exact c_r), its exact zero test
    and its mpmath evaluation."""

    def __init__(self, kind, x, lengths):
        self.kind, self.x, self.lengths = kind, x, lengths
        self.nd = len(lengths)
        self.M = math.lcm(4, *lengths)
        self.total = math.prod(lengths)
        self._phi = None
        self.ints = None          # _int_inputs' cache

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
            return np.asarray(round_fraction(q, dtype)).astype(dtype)[()]
        return _mp_part(coeffs, self.M, which, self.total if self.kind in ("IFFT", "IRFFT") else 1, dtype)


def _rows(todo, x, nd):
    """Flat batch row of each output index in ``todo``."""
    if x.ndim == nd:
        return np.zeros(len(todo), np.int64)
    return np.ravel_multi_index(tuple(todo[:, :-nd].T), x.shape[:-nd])


def _int_inputs(exact):
    """The inputs as exact integers: (jj, [re, im], q, w, big) with jj (nd, K) the exponents of zeta_M
    per input index and axis, re/im (rows, K) int64 (object, big: Python ints where int64 could
    overflow in the tiers' sums) with part = int * 2**q, w the c2r weights (IRFFT) or 1."""
    if exact.ints is not None:
        return exact.ints
    kind, x, lengths, M, nd = exact.kind, exact.x, exact.lengths, exact.M, exact.nd
    flat = x.reshape((-1, math.prod(x.shape[-nd:])))
    jj = np.indices(x.shape[-nd:]).reshape(nd, -1).astype(np.int64)
    keep = jj[-1] <= lengths[-1] // 2 if kind == "IRFFT" else np.ones(jj.shape[1], bool)
    jj, flat = jj[:, keep], flat[:, keep]
    w = _irfft_weights(lengths[-1])[jj[-1]].astype(np.int64) if kind == "IRFFT" else 1
    comps = [np.real(flat), np.imag(flat) if np.iscomplexobj(flat) else np.zeros(flat.shape)]
    nz = np.concatenate([c[c != 0] for c in comps]).astype(np.float64)
    f, ex = np.frexp(nz)
    m = np.ldexp(f, 53).astype(np.int64)
    low = ex - 53 + (np.frexp((m & -m).astype(np.float64))[1] - 1)      # exponent of the last set bit (exact)
    q = int(np.min(low)) if nz.size else 0                      # every part is an integer * 2**q
    big = nz.size and int(np.max(ex)) - q + 4 + (8 * flat.size).bit_length() > 62
    ints = []
    for c in comps:
        if big:           # mantissa (53-bit int64) shifted left in Python ints
            f, ex = np.frexp(c.astype(np.float64))
            shift = np.where(f == 0, 0, ex.astype(np.int64) - 53 - q)   # < 0: trailing zero bits
            ints.append((np.ldexp(f, 53).astype(np.int64).astype(object) << np.maximum(shift, 0).astype(object))
                        >> np.maximum(-shift, 0).astype(object))
        else:
            ints.append(np.ldexp(c.astype(np.float64), -q).astype(np.int64))
    exact.ints = (jj * np.array([M // n for n in lengths], np.int64)[:, None], ints, q, w, bool(big))
    return exact.ints


_FIXED: dict = {}


def _fixed_roots(M: int, P: int):
    """cos and sin of 2 pi r / M, r < M, times 2**P as Python ints (object arrays), each within 2
    of the exact scaled value: r = r1 S + r0, both factors from mpmath (within 1/2 + 2**-30), their
    complex product (error <= 2 * 0.71 + 0.71**2 2**-P) rounded (1/2). Cached per (M, P)."""
    hit = _FIXED.get((M, P))
    if hit is None:
        import mpmath
        S = math.isqrt(M - 1) + 1
        R = -(-M // S)
        with mpmath.workprec(P + 40):
            def fx(rs):
                angs = [2 * mpmath.pi * r / M for r in rs]
                return (np.array([int(mpmath.nint(mpmath.ldexp(mpmath.cos(a), P))) for a in angs], object),
                        np.array([int(mpmath.nint(mpmath.ldexp(mpmath.sin(a), P))) for a in angs], object))
            bc, bs = fx(range(S))
            sc, ss = fx([r1 * S for r1 in range(R)])
        half = 1 << (P - 1)
        cos = ((sc[:, None] * bc[None, :] - ss[:, None] * bs[None, :] + half) >> P).ravel()[:M]
        sin = ((sc[:, None] * bs[None, :] + ss[:, None] * bc[None, :] + half) >> P).ravel()[:M]
        if len(_FIXED) > 16:
            _FIXED.clear()
        hit = _FIXED[(M, P)] = (cos, sin)
    return hit


def _fixed_point(exact, which, r, und, part):
    """Undecided parts as exact integer dot products with fixed-point twiddles (P = 128, 256, 512
    bits): 2**(P - q) * part = sum_j A_j C_e - B_j S_e + E (which 0; A S + B C for 1) with
    |E| <= 2 sum_j (|A_j| + |B_j|); decided where both ends of the interval round to one value
    (exactly, through Fractions). Vectorised over the elements in Python-int object arrays; what
    it leaves (exact zeros, ties, values below 2**-400 of the inputs) goes on to the exact tiers."""
    kind, x, M, nd = exact.kind, exact.x, exact.M, exact.nd
    todo = np.argwhere(und)
    if not todo.size:
        return
    jj, (A, B), q, w, _ = _int_inputs(exact)
    # Python-int rows only for the batch rows the undecided elements are in (``rows`` indexes them).
    used, rows = np.unique(_rows(todo, x, nd), return_inverse=True)
    A, B = (A[used] * w).astype(object), (B[used] * w).astype(object)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1
    scale = exact.total if kind in ("IFFT", "IRFFT") else 1
    absum = np.sum(np.abs(A), axis=1) + np.sum(np.abs(B), axis=1)
    chunk = max(1, (1 << 20) // max(1, jj.shape[1]))
    straddle: list = []
    for P in (128, 256, 512):
        cos, sin = _fixed_roots(M, P)
        for c0 in range(0, len(todo), chunk):
            idx, rw = todo[c0:c0 + chunk], rows[c0:c0 + chunk]
            e = (sign * (idx[:, -nd:].astype(np.int64) @ jj)) % M
            c, s_ = cos[e], sin[e]
            W = np.sum(A[rw] * c - B[rw] * s_, axis=1) if which == 0 else np.sum(A[rw] * s_ + B[rw] * c, axis=1)
            unit = Fraction(2) ** (q - P) / scale
            for t in range(len(idx)):
                err = 2 * absum[rw[t]]
                if abs(W[t]) <= err:      # maybe an exact zero: for the rational test, not more bits
                    straddle.append(c0 + t)
                    continue
                lo = round_fraction((W[t] - err) * unit, part)
                hi = round_fraction((W[t] + err) * unit, part)
                if np.asarray(lo, part).tobytes() == np.asarray(hi, part).tobytes():
                    r[tuple(idx[t])] = np.asarray(lo).astype(part)[()]
                    und[tuple(idx[t])] = False
        left = und[tuple(todo.T)]
        left[straddle] = False
        todo, rows, straddle = todo[left], rows[left], []
        if not todo.size:
            return


def _rational_pow2(exact, which, r, und, part):
    """Tier 3 for M a power of two, vectorised over the undecided elements: the part's polynomial
    (exact._part_poly's terms, times 4, over the inputs as integers m 2**q) reduced modulo
    Phi_M = t^(M/2) + 1 (zeta^(r + M/2) = -zeta^r) by one grouped integer sum per element; rational
    iff every coefficient but the constant one vanishes. Rational parts are rounded (and marked
    decided) here; the others are left to exact.part (mpmath)."""
    kind, x, M, nd = exact.kind, exact.x, exact.M, exact.nd
    todo = np.argwhere(und)
    if not todo.size:
        return
    jj, ints, q, w, _ = _int_inputs(exact)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1
    half, quarter = M // 2, M // 4
    if kind == "IRFFT":      # 4 * value terms: (e, re w), (-e, re w), (e + M/4, im w), (-e + M/4, -im w)
        shifts, coef = (0, 0, quarter, quarter), [ints[0] * w, ints[0] * w, ints[1] * w, -(ints[1] * w)]
        flips = (1, -1, 1, -1)
    else:                    # 2 * value terms: (e, 2 re), (e + M/4, 2 im)
        shifts, coef, flips = (0, quarter), [2 * ints[0], 2 * ints[1]], (1, 1)
    rows = _rows(todo, x, nd)
    chunk = max(1, (1 << 21) // max(1, 4 * len(coef) * jj.shape[1]))
    den = 4 * (exact.total if kind in ("IFFT", "IRFFT") else 1)
    for c0 in range(0, len(todo), chunk):
        idx, rw = todo[c0:c0 + chunk], rows[c0:c0 + chunk]
        e = sign * (idx[:, -nd:].astype(np.int64) @ jj)                 # (t, K)
        exps, vals = [], []
        for sh, cf, fl in zip(shifts, coef, flips):
            base = fl * e + sh
            # real part: (v + conj v) / 2 -> (r, c), (-r, c); imaginary: (r + 3M/4, c), (-r + 3M/4, -c)
            for ex, sg in (((base, 1), (-base, 1)) if which == 0 else
                           ((base + 3 * quarter, 1), (-base + 3 * quarter, -1))):
                exps.append(ex % M)
                vals.append(cf[rw] * sg)
        exps, vals = np.concatenate(exps, 1), np.concatenate(vals, 1)
        vals = np.where(exps >= half, -vals, vals)
        key = np.arange(len(idx))[:, None] * half + exps % half
        order = np.argsort(key, axis=None, kind="stable")
        key, vals = key.ravel()[order], vals.ravel()[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        sums = np.add.reduceat(vals, starts)
        gk = key[starts]
        row_of, pw = gk // half, gk % half
        irr = np.zeros(len(idx), bool)
        irr[row_of[(pw != 0) & (sums != 0)]] = True
        const = np.zeros(len(idx), object)
        const[row_of[pw == 0]] = sums[pw == 0]
        for t in np.flatnonzero(~irr):
            v = Fraction(int(const[t])) * Fraction(2) ** q / den
            r[tuple(idx[t])] = np.asarray(round_fraction(v, part)).astype(part)[()]
            und[tuple(idx[t])] = False


def _mp_part(coeffs, M, which, scale, dtype):
    """Tier 4: the part in mpmath, decided by Ziv's test (numerics.ziv) at 128..4096 bits: the
    DFT sum evaluated at prec + 16 bits is within sum|c| / scale * 2**(4 + bits(terms) - prec)."""
    import mpmath
    absum = sum(abs(c) for c in coeffs.values())

    def enclose(prec):
        with mpmath.workprec(prec + 16):
            tot = mpmath.mpf(0)
            for r, c in coeffs.items():
                ang = 2 * mpmath.pi * mpmath.mpf(r) / M
                tw = mpmath.cos(ang) if which == 0 else mpmath.sin(ang)
                tot += mpmath.mpf(c.numerator) / c.denominator * tw
            return tot / scale, mpmath.mpf(absum.numerator) / absum.denominator / scale * mpmath.mpf(2) ** (
                -prec + 4 + max(1, len(coeffs)).bit_length())
    return ziv(enclose, dtype, "fft: an output part", precs=(128, 256, 512, 1024, 2048, 4096))


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
