"""fft correctly rounded (interp/rules/_fft_exact.py): every output part against the DFT
evaluated in mpmath at 300 bits (independent: direct sum with exp(i pi t), no cyclotomic
reduction, no wide tier), exact zeros and rational outputs against Fractions, XLA:CPU within its
FFT error bound."""
from __future__ import annotations

import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import interp
from conformance.values import assert_same_bits
from interp.rules.lax_special import mp_round
from tests.support import x64, xla_cpu


def _dft_oracle(x: np.ndarray, sign: int, scale: int, part) -> np.ndarray:
    """Direct DFT along the last axis at 300 bits, each part rounded once to ``part``."""
    n = x.shape[-1]
    out = np.empty(x.shape, complex)
    with mpmath.workprec(300):
        for b in np.ndindex(x.shape[:-1]):
            row = [mpmath.mpc(float(v.real), float(v.imag)) for v in x[b]]
            for k in range(n):
                v = mpmath.fsum(row[j] * mpmath.expjpi(sign * mpmath.mpf(2 * j * k) / n) for j in range(n)) / scale
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
