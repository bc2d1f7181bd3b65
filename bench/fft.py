"""Cost of the correctly rounded FFT (interp/rules/_fft_exact.py): the reference against
numpy.fft (pocketfft, float64 / its own rounding, not correctly rounded) on the same inputs, and
how the reference's elements were decided: by the float64 FFT tier (float32 parts), the
double-double FFT tier, or the exact tiers (fixed-point integer sums, the rational test,
mpmath).

Times are process CPU seconds (time.process_time: steadier than wall time on a shared machine),
the best of ``--repeats`` calls after one warm-up call (which fills the twiddle caches); the
reference side is ``interp.interpret(fn)`` end to end. Every reference result is checked against
pocketfft (within c log2(N) eps ||y||_2, the spec's backend budget).

    python -m bench.fft [--quick] [--repeats N]
"""
from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import interp  # noqa: E402
from bench._timing import measure  # noqa: E402
from interp.rules import _fft_exact as F  # noqa: E402


def _cases(quick: bool):
    rng = np.random.default_rng(0)

    def c(shape, dtype):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    j = np.arange(1024)
    yield "fft c64 1024", jnp.fft.fft, np.fft.fft, c((1, 1024), np.complex64), "FFT", [1024]
    yield "fft c128 1024", jnp.fft.fft, np.fft.fft, c((1, 1024), np.complex128), "FFT", [1024]
    yield "fft2 c128 64x64", jnp.fft.fft2, np.fft.fft2, c((64, 64), np.complex128), "FFT", [64, 64]
    yield "fft c128 1000", jnp.fft.fft, np.fft.fft, c((1, 1000), np.complex128), "FFT", [1000]
    yield "fft c128 1021 (prime)", jnp.fft.fft, np.fft.fft, c((1, 1021), np.complex128), "FFT", [1021]
    yield "ifft c64 8x1024", jnp.fft.ifft, np.fft.ifft, c((8, 1024), np.complex64), "IFFT", [1024]
    yield ("rfft f64 4096", jnp.fft.rfft, np.fft.rfft, rng.standard_normal((1, 4096)), "RFFT", [4096])
    yield ("irfft c128 4096", lambda v: jnp.fft.irfft(v, 4096), lambda v: np.fft.irfft(v, 4096),
           c((1, 2049), np.complex128), "IRFFT", [4096])
    yield ("fft c128 1024 cos (tiny bins)", jnp.fft.fft, np.fft.fft,
           np.cos(2 * np.pi * 5 * j / 1024)[None].astype(np.complex128), "FFT", [1024])
    yield ("fft c128 1024 ones (exact 0s)", jnp.fft.fft, np.fft.fft, np.ones((1, 1024), np.complex128),
           "FFT", [1024])
    if not quick:
        yield "fft c128 65536", jnp.fft.fft, np.fft.fft, c((1, 1 << 16), np.complex128), "FFT", [1 << 16]
        yield "fft c64 65536", jnp.fft.fft, np.fft.fft, c((1, 1 << 16), np.complex64), "FFT", [1 << 16]


def _tiers(kind, x, lengths, out_dtype, out) -> tuple[float, float, float]:
    """Fractions of output parts decided by the float64 FFT, the double-double FFT, the exact tiers:
    the interpreter's own fft_value, which must return what the interpreted program returned."""
    counts: dict = {}
    again = F.fft_value(kind, x, lengths, out_dtype, tiers=counts)
    if again.tobytes() != out.tobytes():
        raise AssertionError(f"fft_value differs from the interpreted program ({kind} {lengths})")
    n = counts["parts"]
    return counts["f64"] / n, counts["dd"] / n, 1 - (counts["f64"] + counts["dd"]) / n


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.fft")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'case':<32} {'reference':>12} {'pocketfft':>12} {'ratio':>9}   "
          f"{'f64 tier':>8} {'dd tier':>8} {'exact':>8}  check")
    for name, jfn, nfn, x, kind, lengths in _cases(args.quick):
        x64 = x.dtype in (np.complex128, np.float64)
        with jax.enable_x64(x64):
            ref = interp.interpret(jfn)
            _, t_ref, _, out = measure(lambda: ref(x), args.repeats, clock=time.process_time)
        _, t_np, _, want = measure(lambda: nfn(x), max(args.repeats, 5), clock=time.process_time)
        part = np.dtype(np.float32 if out.dtype in (np.complex64, np.float32) else np.float64)
        f64, dd, ex = _tiers(kind, x, lengths, out.dtype, out)
        eps = float(np.finfo(part).eps)
        budget = 4 * math.log2(x.size) * eps * np.sqrt(np.sum(np.abs(out.astype(complex)) ** 2))
        ok = "ok" if np.max(np.abs(out.astype(complex) - want)) <= budget else "MISMATCH"
        print(f"{name:<32} {t_ref * 1e3:9.2f} ms {t_np * 1e3:9.3f} ms {t_ref / max(t_np, 1e-9):8.0f}x   "
              f"{f64:8.4f} {dd:8.4f} {ex:8.5f}  {ok}", flush=True)


if __name__ == "__main__":
    main()
