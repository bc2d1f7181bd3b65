"""Cost of exactness for large contractions and sums: the reference (correctly rounded results)
against hand-written NumPy, two ways:

- "naive": the same operation in the input dtype (``a @ b`` / ``x.sum`` in float32): faster
  but a different result (float32 accumulation, rounded at every step);
- "same semantics": NumPy code computing what the reference computes as closely as NumPy can by
  hand: the inputs converted to float64, a float64 BLAS product (or sum), one rounding to
  float32. (Its float64 sum is not always correctly rounded; the reference certifies every
  element and recomputes the undecided few, which is the overhead this column measures.)

Both sides run in alternating rounds (bench/_timing.py compare): the machine is shared, so the
ratio is the median of per-round ratios. Fresh temporaries of 128 KiB and more are mmaps that
glibc may page-fault in on every call (about 1 us per 4 KiB page on these VMs), and whether it
does depends on what was freed before, so the same code measures 0.7 or 1.35 ms at 256^3 from
one run to the next. The reference keeps its dot's temporaries in per-thread scratch buffers
(interp/rules/_scratch.py); the hand-written side allocates as NumPy code does. Read the ratio
with that spread in mind; the reference's cost beyond the float64 GEMM is its certification
(norms, two bracket roundings, ~0.1% of the elements re-summed), single-threaded while BLAS
uses every core. Every result is checked against the same-semantics
NumPy result (max |diff| must be within one float32 ulp-scale; the reference is the exact one).

    python -m bench.contractions [--quick] [--repeats N]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import interp
from bench._timing import compare

TARGET = 1.2


def _row(name, ref_fn, naive_fn, same_fn, repeats):
    naive = compare(ref_fn, naive_fn, repeats)
    same = compare(ref_fn, same_fn, repeats) if same_fn is not None else None
    diff = float(np.max(np.abs(np.asarray(naive.out_a, np.float64) - np.asarray(
        (same or naive).out_b, np.float64))))
    same_s = f"{same.b * 1e3:9.1f} ms {same.ratio:7.2f}x" if same else f"{'-':>12} {'-':>8}"
    met = "met" if same and same.ratio <= TARGET else "NOT met" if same else "-"
    print(f"{name:<34} {naive.a * 1e3:9.1f} ms {naive.b * 1e3:9.1f} ms {naive.ratio:7.2f}x "
          f"{same_s} {diff:10.2e}  {met}", flush=True)


def main(flags=()) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(list(flags))
    sizes = (256,) if args.quick else (256, 512, 1024)
    r = args.repeats
    rng = np.random.default_rng(0)
    f64 = np.float64
    print(f"JAX {jax.__version__}; medians of {r} alternating rounds; target <= {TARGET}x same-semantics NumPy")
    print(f"{'program':<34} {'reference':>12} {'naive NumPy':>12} {'ratio':>8} {'same-sem.':>12} "
          f"{'ratio':>8} {'max|diff|':>10}  target")
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        f = interp.interpret(lambda a, b: a @ b)
        _row(f"f32 matmul {n}^3", lambda: f(a, b), lambda: a @ b,
             lambda: (a.astype(f64) @ b.astype(f64)).astype(np.float32), r)
    # Narrow inputs: their float64 sums are often exact and then often float32 rounding ties,
    # which no bound decides (decided as exact sums: lax_contractions._summed_exactly).
    for name, dt in (("bf16", jnp.bfloat16), ("f16", np.float16)):
        n = 256
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        f = interp.interpret(lambda a, b: lax.dot(a, b, preferred_element_type=np.float32))
        _row(f"{name} -> f32 matmul {n}^3", lambda: f(a, b),
             lambda: (a.astype(np.float32) @ b.astype(np.float32)),
             lambda: (a.astype(f64) @ b.astype(f64)).astype(np.float32), r)
    # Integer dots: exact sums below 2**53 through float64 BLAS (lax_contractions._integer_matmul);
    # "naive" is NumPy's integer matmul (no BLAS), the reference's path before.
    n = 256 if args.quick else 1024
    a = rng.integers(-100, 100, (n, n)).astype(np.int32)
    f = interp.interpret(lambda a, b: a @ b)
    _row(f"int32 matmul {n}^3", lambda: f(a, a.T), lambda: a @ a.T,
         lambda: (a.astype(f64) @ a.T.astype(f64)).astype(np.int32), r)
    x = rng.standard_normal((1024, 4096)).astype(np.float32)
    fs = interp.interpret(lambda x: lax.reduce(x, np.float32(0), lax.add, (1,)))
    _row("f32 row sums 1024x4096", lambda: fs(x), lambda: x.sum(1),
         lambda: x.astype(f64).sum(1).astype(np.float32), r)
    lhs = rng.standard_normal((8, 32, 32, 16)).astype(np.float32)
    rhs = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    conv = lambda l, r: lax.conv_general_dilated(l, r, (1, 1), "SAME",  # noqa: E731
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    fc = interp.interpret(conv)
    with jax.default_device(jax.devices("cpu")[0]):
        jc = jax.jit(conv)
        _row("f32 conv 8x32x32x16 * 3x3x16x32 (vs XLA)", lambda: fc(lhs, rhs),
             lambda: np.asarray(jc(lhs, rhs)), None, r)
    with jax.enable_x64(True):
        n = 128 if args.quick else 256
        a = rng.standard_normal((n, n))
        f = interp.interpret(lambda a, b: a @ b)
        _row(f"f64 matmul {n}^3 (x64)", lambda: f(a, a), lambda: a @ a,
             lambda: (a.astype(np.longdouble) @ a.astype(np.longdouble)).astype(f64), r)


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
