"""Cost of exactness for large contractions and sums: the reference (correctly rounded results)
against the same NumPy code written by hand (``a @ b`` / ``x.sum`` in the input dtype, and in
float64), plus the share of elements that needed the refinement tiers.

    python -m bench.contractions [--quick]
"""
from __future__ import annotations


import jax
import numpy as np
from jax import lax

import interp
from bench._timing import measure

REPEATS = 3


def _best(fn) -> float:
    return measure(fn, REPEATS).best


def _row(name, ref_s, hand_s, hand64_s):
    print(f"{name:<34} {ref_s * 1e3:9.1f} ms {hand_s * 1e3:9.1f} ms {hand64_s * 1e3:9.1f} ms "
          f"{ref_s / hand_s:7.2f}x {ref_s / hand64_s:7.2f}x", flush=True)


def main(flags=()) -> None:
    quick = "--quick" in flags
    sizes = (256,) if quick else (256, 512, 1024)
    rng = np.random.default_rng(0)
    print(f"{'program':<34} {'reference':>12} {'numpy dtype':>12} {'numpy f64':>12} {'ratio':>8} {'vs f64':>8}")
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        f = interp.interpret(lambda a, b: a @ b)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        _row(f"f32 matmul {n}^3", _best(lambda: f(a, b)), _best(lambda: a @ b), _best(lambda: a64 @ b64))
    x = rng.standard_normal((1024, 4096)).astype(np.float32)
    fs = interp.interpret(lambda x: lax.reduce(x, np.float32(0), lax.add, (1,)))
    x64 = x.astype(np.float64)
    _row("f32 row sums 1024x4096", _best(lambda: fs(x)), _best(lambda: x.sum(1)), _best(lambda: x64.sum(1)))
    lhs = rng.standard_normal((8, 32, 32, 16)).astype(np.float32)
    rhs = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    conv = lambda l, r: lax.conv_general_dilated(l, r, (1, 1), "SAME",  # noqa: E731
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    fc = interp.interpret(conv)
    with jax.default_device(jax.devices("cpu")[0]):
        jc = jax.jit(conv)
        _row("f32 conv 8x32x32x16 * 3x3x16x32", _best(lambda: fc(lhs, rhs)),
             _best(lambda: np.asarray(jc(lhs, rhs))), float("nan"))
    with jax.enable_x64(True):
        n = 128 if quick else 256
        a = rng.standard_normal((n, n))
        f = interp.interpret(lambda a, b: a @ b)
        _row(f"f64 matmul {n}^3 (x64)", _best(lambda: f(a, a)), _best(lambda: a @ a), _best(lambda: a @ a))


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
