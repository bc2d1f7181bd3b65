"""fft correctly rounded (interp/rules/_fft_exact.py): every output part against the DFT
evaluated in mpmath at 300 bits (independent: direct sum with exp(i pi t), no cyclotomic
reduction, no wide tier), exact zeros and rational outputs against Fractions, XLA:CPU within its
FFT error bound."""
from __future__ import annotations

import math

import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import interp
import interp.rules._fft_exact as F
from conformance.values import assert_same_bits
from interp.numerics import mp_round
from interp.rules.lax_special import correctly_rounded
from tests.support import x64, xla_cpu


def _dft_oracle(x: np.ndarray, sign: int, scale: int, part) -> np.ndarray:
    """Direct DFT along the last axis at 300 bits, each part rounded once to ``part``."""
    n = x.shape[-1]
    out = np.empty(x.shape, complex)
    with mpmath.workprec(300):
        tw = [mpmath.expjpi(sign * mpmath.mpf(2 * r) / n) for r in range(n)]
        for b in np.ndindex(x.shape[:-1]):
            row = [mpmath.mpc(float(v.real), float(v.imag)) for v in x[b]]
            for k in range(n):
                v = mpmath.fsum(row[j] * tw[j * k % n] for j in range(n)) / scale
                out[b + (k,)] = complex(mp_round([v.real], part)[0], mp_round([v.imag], part)[0])
    return out


@pytest.mark.parametrize("cdtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_fft_ifft_rfft_correctly_rounded(cdtype):
    part = np.float32 if cdtype == np.complex64 else np.float64
    rng = np.random.default_rng(3)
    c = (rng.standard_normal((2, 12)) + 1j * rng.standard_normal((2, 12))).astype(cdtype)
    r = rng.standard_normal((2, 10)).astype(part)
    with x64(cdtype == np.complex128):
        got = interp.interpret(lambda c, r: (jnp.fft.fft(c), jnp.fft.ifft(c), jnp.fft.rfft(r)))(c, r)
        xla = xla_cpu(lambda c, r: (jnp.fft.fft(c), jnp.fft.ifft(c), jnp.fft.rfft(r)), c, r)
    want = (_dft_oracle(c, -1, 1, part), _dft_oracle(c, 1, 12, part), _dft_oracle(r.astype(complex), -1, 1, part)[:, :6])
    eps = float(np.finfo(part).eps)
    for g, w, x, arg in zip(got, want, xla, (c, c, r)):
        assert_same_bits(g, w.astype(cdtype))
        # XLA:CPU's own FFT: within c log2(n) eps |x|_2 of the correctly rounded result.
        assert np.max(np.abs(g - x)) <= 16 * 4 * eps * np.sqrt(np.sum(np.abs(arg.astype(complex)) ** 2))


def test_fft_exact_zeros_and_rational_outputs():
    """Symmetric inputs have exact zero parts (+0, never a precision loop); twiddles +-1, +-i give
    rational outputs, which may be rounding boundaries themselves (rounded exactly)."""
    c = np.full((1, 8), 1 + 2j, np.complex64)
    out = interp.interpret(jnp.fft.fft)(c)
    want = np.zeros((1, 8), np.complex64)
    want[0, 0] = 8 + 16j
    assert_same_bits(out, want)
    # n = 4: x0 + x1 + x2 + x3 etc. are exact sums; 1 + 2**-24 + ... lands on a float32 tie.
    x = np.array([[1.0, 2.0 ** -24, 0.0, 0.0]], np.float32)
    out = interp.interpret(jnp.fft.rfft)(x)
    # bin 0: 1 + 2**-24 is a tie, to even (1.0); bin 2: 1 - 2**-24 is a float32
    assert_same_bits(out.real, np.array([[1.0, 1.0, 1.0 - 2.0 ** -24]], np.float32))
    assert_same_bits(out.imag, np.array([[0.0, -(2.0 ** -24), 0.0]], np.float32))
    # irfft, n = 4: x_n = (X0 + 2 Re(X1 i^n) + X2 (-1)^n) / 4 with X1 = -2**-23 i gives 1, 1 + 2**-24
    # (a tie: 1.0), 1, 1 - 2**-24: the imaginary parts' sign matters.
    spec = np.array([[4, -(2.0 ** -23) * 1j, 0]], np.complex64)
    out = interp.interpret(lambda v: jnp.fft.irfft(v, 4))(spec)
    assert_same_bits(out, np.array([[1.0, 1.0, 1.0, 1.0 - 2.0 ** -24]], np.float32))


def test_irfft_and_fft2_correctly_rounded():
    rng = np.random.default_rng(4)
    spec = (rng.standard_normal((2, 7)) + 1j * rng.standard_normal((2, 7))).astype(np.complex64)
    out = interp.interpret(lambda v: jnp.fft.irfft(v, 12))(spec)
    # c2r: bins 0 and 6 (Nyquist) enter with their real parts only, the others twice.
    full = np.concatenate([spec.real[:, :1], spec[:, 1:6], spec.real[:, 6:7], np.conj(spec[:, 5:0:-1])], axis=1)
    want = _dft_oracle(full.astype(np.complex128), 1, 12, np.float32).real.astype(np.float32)
    assert_same_bits(out, want)
    c = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    out = interp.interpret(jnp.fft.fft2)(c)
    with mpmath.workprec(300):
        want = np.empty((3, 4), np.complex64)
        for k0 in range(3):
            for k1 in range(4):
                v = mpmath.fsum(mpmath.mpc(float(c[j0, j1].real), float(c[j0, j1].imag))
                                * mpmath.expjpi(-2 * (mpmath.mpf(j0 * k0) / 3 + mpmath.mpf(j1 * k1) / 4))
                                for j0 in range(3) for j1 in range(4))
                want[k0, k1] = complex(mp_round([v.real], np.float32)[0], mp_round([v.imag], np.float32)[0])
    assert_same_bits(out, want)


def test_fft_non_finite_inputs_match_xla_cpu():
    """inf/NaN inputs: an FFT algorithm's IEEE propagation (inf + 0i stays, not inf + NaN i)."""
    c = np.array([[1, np.inf, 2]], np.complex64)
    r = np.array([[1, np.inf, 2, np.nan]], np.float32)
    fn = lambda c, r: (jnp.fft.fft(c), jnp.fft.rfft(r))  # noqa: E731
    got, want = interp.interpret(fn)(c, r), xla_cpu(fn, c, r)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


# ------------------------------------------------------------------ the fast tier and its bound

def _exact_nd(x: np.ndarray, sign: int) -> np.ndarray:
    """Unnormalised DFT over every axis of ``x`` at 250 bits (object array of mpc): a direct sum
    with twiddles exp(i pi t) from mpmath, independent of the reference's stages and bound."""
    idx = list(np.ndindex(x.shape))
    L = math.lcm(*x.shape)
    out = np.empty(x.shape, object)
    with mpmath.workprec(250):
        tw = [mpmath.expjpi(sign * mpmath.mpf(2 * r) / L) for r in range(L)]
        xs = [(mpmath.mpc(float(np.real(x[j])), float(np.imag(x[j]))), j) for j in idx if x[j] != 0]
        for k in idx:
            out[k] = mpmath.fsum(v * tw[sum(a * b * (L // n) for a, b, n in zip(j, k, x.shape)) % L]
                                 for v, j in xs)
    return out


def _irfft_exact(spec: np.ndarray, block) -> np.ndarray:
    """Unnormalised IRFFT at 250 bits as XLA defines it (rank 1 or 2): the complex inverse DFT
    along the leading axis, then c2r along the last: bins 0 and n/2 lose their imaginary parts,
    bin n - k is conj(bin k)."""
    n = block[-1]
    rows = spec.reshape(-1, spec.shape[-1])
    with mpmath.workprec(250):
        z = [[mpmath.mpc(float(v.real), float(v.imag)) for v in row] for row in rows]
        if len(block) == 2:
            n0 = block[0]
            z = [[mpmath.fsum(z[k0][k] * mpmath.expjpi(mpmath.mpf(2 * k0 * r) / n0) for k0 in range(n0))
                  for k in range(len(z[0]))] for r in range(n0)]
        out = np.empty((len(z), n), object)
        for r, row in enumerate(z):
            full = [row[k] if k <= n // 2 else mpmath.conj(row[n - k]) for k in range(n)]
            full[0] = mpmath.mpc(full[0].real)
            if n % 2 == 0:
                full[n // 2] = mpmath.mpc(full[n // 2].real)
            for j in range(n):
                out[r, j] = mpmath.fsum(f * mpmath.expjpi(mpmath.mpf(2 * k * j) / n) for k, f in enumerate(full)).real
    return out.reshape(tuple(block))


def _inputs(kind: str, shape, rng) -> np.ndarray:
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    if kind == "range":         # parts from 2**-40 to 2**40 of each other
        return z * correctly_rounded("exp2", rng.uniform(-40, 40, shape))   # (the same on every host)
    if kind == "extreme":       # float64 only: 2**-900 .. 2**900 (the TINY split, no overflow)
        return z * np.ldexp(1.0, rng.choice([-900, -300, 0, 300, 900], shape))
    if kind == "sparse":        # mostly exact zeros
        return np.where(rng.random(shape) < 0.8, 0, z)
    if kind == "even":          # real, x_j = x_(-j mod n): every imaginary output part is exactly 0
        r = rng.standard_normal(shape)
        return (r + np.roll(np.flip(r, -1), 1, -1)) + 0j
    return z


_FAST_CASES = [((64,), "normal"), ((97,), "normal"), ((31,), "range"), ((45,), "sparse"),
               ((67,), "even"), ((96,), "range"), ((134,), "sparse"), ((6, 10), "normal"), ((5, 7), "range")]


@pytest.mark.parametrize("arith", ["_F64", "_DD"])
@pytest.mark.parametrize("shape,kind", _FAST_CASES, ids=lambda v: str(v))
def test_fast_tier_bound_holds(arith, shape, kind):
    """Every element of the fast tier's value is within its bound of the exact DFT (powers of two,
    primes <= 64 direct, primes > 64 by Bluestein (alone and as the factor of 134), odd and mixed
    composites, rank 2; huge dynamic
    range, exact zeros, symmetric inputs), for FFT, IFFT (unnormalised here) and RFFT."""
    ar = getattr(F, arith)
    rng = np.random.default_rng(sum(shape) + len(kind))
    x = _inputs(kind, shape, rng)
    if arith == "_F64":
        x = x.astype(np.complex64).astype(complex)   # the float64 tier serves float32 parts
    for fft_kind, sign in (("FFT", -1), ("IFFT", 1), ("RFFT", -1)):
        arg = x.real.copy() if fft_kind == "RFFT" else x
        exact = _exact_nd(arg.astype(complex), sign)
        if fft_kind == "RFFT":
            exact = exact[..., : shape[-1] // 2 + 1]
        _check_bound(ar, fft_kind, arg, list(shape), exact)


def _check_bound(ar, fft_kind, arg, lengths, exact):
    v, b, e = F._fast_fft(fft_kind, arg[None], lengths, ar)
    parts = [c[0] for c in v]
    scale = 2.0 ** int(np.ravel(e)[0])
    bound = mpmath.mpf(float(np.ravel(b)[0])) * scale
    assert 0 < bound < math.inf
    worst = 0
    with mpmath.workprec(250):
        for k in np.ndindex(exact.shape):
            val = [sum(mpmath.mpf(float(p[k + (c,)] if p.ndim > len(k) else p[k])) for p in parts) * scale
                   for c in ((0, 1) if parts[0].ndim > len(k) else (0,))]
            ex = exact[k]
            err = abs(mpmath.mpc(*val) - ex) if len(val) == 2 else abs(val[0] - ex.real)
            worst = max(worst, err / bound)
    assert worst <= 1, (fft_kind, float(worst))


@pytest.mark.parametrize("arith", ["_F64", "_DD"])
@pytest.mark.parametrize("block", [(16,), (5, 9)], ids=str)
def test_fast_tier_bound_holds_irfft(arith, block):
    """IRFFT (unnormalised): the Hermitian extension's norm and the real part, rank 1 and 2."""
    ar = getattr(F, arith)
    n = block[-1]
    spec = _inputs("range", block[:-1] + (n // 2 + 1,), np.random.default_rng(n))
    if arith == "_F64":
        spec = spec.astype(np.complex64).astype(complex)
    _check_bound(ar, "IRFFT", spec, list(block), _irfft_exact(spec, block))


def test_fast_tier_bound_holds_extreme_range():
    """float64 inputs 2**-900 .. 2**900 in one transform: parts below TINY after scaling are
    bounded (not transformed), nothing overflows or underflows."""
    rng = np.random.default_rng(7)
    x = _inputs("extreme", (40,), rng)
    _check_bound(F._DD, "FFT", x, [40], _exact_nd(x, -1))


@pytest.mark.parametrize("cdtype,n", [(np.complex64, 4096), (np.complex128, 4096), (np.complex128, 1000)],
                         ids=str)
def test_fast_tier_decides_nearly_everything(cdtype, n):
    """On random inputs the fast tier (its bound is ~2**-42 ||x|| for float32 parts, ~2**-90 ||x||
    for float64 parts) leaves fewer than 0.1% of the parts to the exact tiers."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))).astype(cdtype)
    part = np.dtype(np.float32 if cdtype == np.complex64 else np.float64)
    ar = F._F64 if cdtype == np.complex64 else F._DD
    decided = F._tier1(*F._fast_fft("FFT", x, [n], ar), 1, ar, part)
    assert np.mean([ok.mean() for _, ok in decided]) > 0.999


def test_fft_value_tier_counts():
    """fft_value's ``tiers`` counts (bench/fft.py reports them) against the tier-1 decisions made
    directly, and the result does not depend on being counted. float32 parts: the float64 FFT,
    then double-double for what it left; the tiny bins of a rounded cosine go to the exact tiers."""
    n = 256
    j = np.arange(n)
    rng = np.random.default_rng(5)
    rand = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))).astype(np.complex64)
    cosine = np.cos(2 * np.pi * 5 * j / n).astype(np.float32)[None].astype(np.complex64)
    for x in (rand, cosine):
        counts: dict = {}
        got = F.fft_value("FFT", x, [n], np.complex64, tiers=counts)
        assert_same_bits(got, F.fft_value("FFT", x, [n], np.complex64))
        f64 = [ok for _, ok in F._tier1(*F._fast_fft("FFT", x, [n], F._F64), 1, F._F64, np.dtype(np.float32))]
        dd = [ok for _, ok in F._tier1(*F._fast_fft("FFT", x, [n], F._DD), 1, F._DD, np.dtype(np.float32))]
        assert counts == {"parts": 2 * x.size, "f64": sum(int(o.sum()) for o in f64),
                          "dd": sum(int((o2 & ~o).sum()) for o, o2 in zip(f64, dd))}
    assert counts["f64"] + counts["dd"] < counts["parts"]        # the cosine's exact tiers ran
    counts = {}
    F.fft_value("FFT", rand.astype(np.complex128), [n], np.complex128, tiers=counts)
    assert counts["f64"] == 0 and counts["dd"] > 0


@pytest.mark.parametrize("part", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_mpmath_tier_correctly_rounded(part):
    """Tier 4 (numerics.ziv on the DFT sum) against the sum at 400 bits rounded once: an
    irrational twiddle alone, a sum that nearly cancels (the enclosure needs more bits), a scaled
    imaginary part."""
    from fractions import Fraction
    cases = [({1: Fraction(1)}, 8, 0, 1), ({1: Fraction(3, 4), 7: Fraction(-5, 2)}, 12, 1, 3),
             ({1: Fraction(1), 0: -Fraction(float(np.float64(math.cos(2 * math.pi / 16))))}, 16, 0, 1)]
    for coeffs, M, which, scale in cases:
        with mpmath.workprec(400):
            f = mpmath.cos if which == 0 else mpmath.sin
            want = sum(mpmath.mpf(c.numerator) / c.denominator * f(2 * mpmath.pi * r / M)
                       for r, c in coeffs.items()) / scale
            want = mp_round([want], part)[0]
        assert_same_bits(np.asarray(F._mp_part(coeffs, M, which, scale, np.dtype(part))), np.asarray(want))


# ------------------------------------------------------------------ end to end, adversarial inputs

@pytest.mark.parametrize("cdtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n,kind", [(67, "range"), (45, "sparse"), (64, "range"), (67, "normal")], ids=str)
def test_fft_correctly_rounded_adversarial(cdtype, n, kind):
    """Bit for bit with the 300-bit DFT rounded once: Bluestein (67), odd composite (45), power of
    two (64), huge dynamic range and exact zero inputs."""
    part = np.float32 if cdtype == np.complex64 else np.float64
    x = _inputs(kind, (2, n), np.random.default_rng(n)).astype(cdtype)
    with x64(cdtype == np.complex128):
        got = interp.interpret(lambda c: (jnp.fft.fft(c), jnp.fft.ifft(c)))(x)
    assert_same_bits(got[0], _dft_oracle(x, -1, 1, part).astype(cdtype))
    assert_same_bits(got[1], _dft_oracle(x, 1, n, part).astype(cdtype))


@pytest.mark.parametrize("cdtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_fft_exact_zero_and_tiny_outputs(cdtype):
    """Outputs far below the fast tier's bound: exact zeros of a real even input (+0 imaginary
    parts, the rational test), bins of a rounded cosine that are only its rounding errors (tiny
    irrational values: the fixed-point tier) -- bit for bit with the 300-bit DFT."""
    part = np.float32 if cdtype == np.complex64 else np.float64
    n = 128
    j = np.arange(n)
    even = _inputs("even", (1, n), np.random.default_rng(1)).astype(cdtype)
    cosine = np.cos(2 * np.pi * 5 * j / n).astype(part)[None].astype(cdtype)
    with x64(cdtype == np.complex128):
        out_even, out_cos = interp.interpret(lambda a, b: (jnp.fft.fft(a), jnp.fft.fft(b)))(even, cosine)
    assert_same_bits(out_even.imag, np.zeros((1, n), part))
    assert_same_bits(out_even.real, _dft_oracle(even, -1, 1, part).real.astype(part))
    assert_same_bits(out_cos, _dft_oracle(cosine, -1, 1, part).astype(cdtype))
    assert np.sum(np.abs(out_cos) < 1e-3) > n // 2          # most bins are tiny


def test_fft2_irfft2_complex128_correctly_rounded():
    """Rank 2 in double-double: fft2 and irfft2 bit for bit with the 250-bit DFT rounded once."""
    rng = np.random.default_rng(12)
    c = _inputs("range", (4, 6), rng)
    spec = _inputs("normal", (3, 5), rng)
    with x64(True):
        got_f, got_i = interp.interpret(lambda a, b: (jnp.fft.fft2(a), jnp.fft.irfft2(b, s=(3, 8))))(c, spec)
    want = np.vectorize(lambda z: complex(*(float(mp_round([p], np.float64)[0]) for p in (z.real, z.imag))),
                        otypes=[complex])(_exact_nd(c, -1))
    assert_same_bits(got_f, want)
    with mpmath.workprec(250):
        want = np.vectorize(lambda v: float(mp_round([v / 24], np.float64)[0]), otypes=[float])(
            _irfft_exact(spec, (3, 8)))
    assert_same_bits(got_i, want)


_XLA_PROGRAMS = {
    "fft": (jnp.fft.fft, "c"), "ifft": (jnp.fft.ifft, "c"), "rfft": (jnp.fft.rfft, "r"),
    "irfft": (lambda v: jnp.fft.irfft(v, 30), "h"), "fft2": (jnp.fft.fft2, "c"),
    "ifft2": (jnp.fft.ifft2, "c"), "rfft2": (jnp.fft.rfft2, "r"),
    "irfft2": (lambda v: jnp.fft.irfft2(v, s=(6, 30)), "h"), "fftn3": (jnp.fft.fftn, "c3"),
}


@pytest.mark.parametrize("cdtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_every_fft_type_matches_xla_cpu(cdtype):
    """Every FFT type, rank 1 to 3, against XLA:CPU within the backend budget of spec
    (c log2(N) eps ||y||_2 per element; XLA's own FFT is not correctly rounded)."""
    part = np.dtype(np.float32 if cdtype == np.complex64 else np.float64)
    rng = np.random.default_rng(5)
    args = {"c": (rng.standard_normal((6, 30)) + 1j * rng.standard_normal((6, 30))).astype(cdtype),
            "r": rng.standard_normal((6, 30)).astype(part),
            "h": (rng.standard_normal((6, 16)) + 1j * rng.standard_normal((6, 16))).astype(cdtype),
            "c3": (rng.standard_normal((3, 4, 5)) + 1j * rng.standard_normal((3, 4, 5))).astype(cdtype)}
    eps = float(np.finfo(part).eps)
    with x64(cdtype == np.complex128):
        for name, (fn, a) in _XLA_PROGRAMS.items():
            got, want = interp.interpret(fn)(args[a]), xla_cpu(fn, args[a])
            assert got.dtype == want.dtype and got.shape == want.shape, name
            N = args[a].size
            budget = 4 * math.log2(N) * eps * np.sqrt(np.sum(np.abs(got.astype(complex)) ** 2))
            assert np.max(np.abs(got.astype(complex) - want.astype(complex))) <= budget, name


def test_fft_overflow_and_subnormal_results():
    """Results beyond the format round to inf as the exact value does; subnormal results of
    subnormal inputs are rounded once (hand-computed: n = 4 has twiddles +-1, +-i only)."""
    x = np.array([[1e308, 1e308, 1e-308, 0]], np.complex128)
    with x64(True):
        out = interp.interpret(jnp.fft.fft)(x)
    # 2e308 + 1e-308 overflows; 1e308 - 1e-308 rounds to 1e308
    assert_same_bits(out, np.array([[np.inf, 1e308 - 1e308j, 1e-308, 1e308 + 1e308j]]))
    s = np.array([[2.0 ** -1074, 3 * 2.0 ** -1074, 0, 0]], np.complex128)
    with x64(True):
        out = interp.interpret(jnp.fft.ifft)(s)
    # y_k = (x0 + x1 i^k) / 4 in ulps t: (1 + 3) / 4 = 1; (1 + 3i) / 4 -> +0 (a positive value),
    # 0.75 -> 1; (1 - 3) / 4 = -0.5 is a tie: to even, -0; (1 - 3i) / 4 -> +0, -1. Exact 0: +0.
    t = 2.0 ** -1074
    want = np.zeros((1, 4), np.complex128)
    want.real = [t, 0.0, -0.0, 0.0]
    want.imag = [0.0, t, 0.0, -t]
    assert_same_bits(out, want)
