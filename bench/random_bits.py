"""random_bits for 2**22 uint32 values per PRNG implementation: the reference's NumPy generators
(interp.prng, as the random_bits rule runs them) against jitted XLA:CPU in the same run.

    python -m bench.random_bits        # or python -m bench (every bench module)
"""
from __future__ import annotations


import jax
import numpy as np

from interp import prng
from bench._timing import measure as timed

N = 1 << 22
REPEATS = 3


def _best(fn) -> float:
    return timed(fn, REPEATS).best


def measure(impl: str, partitionable: bool = True) -> tuple[float, float, bool]:
    """(reference seconds, XLA:CPU seconds, identical bits) for one implementation."""
    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        native = prng.IMPLS[impl]
        key = jax.random.key(1701, impl=impl)
        data = np.asarray(jax.random.key_data(key))
        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            f = jax.jit(lambda k: jax.random.bits(k, (N,), np.uint32))
            xla_out = None

            def run_xla():
                nonlocal xla_out
                xla_out = f(key).block_until_ready()

            t_xla = _best(run_xla)
        ref_out = None

        def run_ref():
            nonlocal ref_out
            ref_out = native.random_bits(data, 32, (N,), partitionable)

        t_ref = _best(run_ref)
        return t_ref, t_xla, bool(np.array_equal(ref_out, np.asarray(xla_out)))
    finally:
        jax.config.update("jax_threefry_partitionable", old)


def main(argv=None) -> None:
    print(f"random_bits, {N} x uint32 (2**22), best of {REPEATS}; XLA:CPU jitted, same run")
    print(f"{'implementation':<28}{'reference ms':>14}{'XLA:CPU ms':>12}{'ratio':>8}  exact")
    cases = [(name, True) for name in prng.IMPLS] + [("threefry2x32", False)]
    for name, part in cases:
        label = name if part else f"{name} (partitionable=False)"
        t_ref, t_xla, same = measure(name, part)
        print(f"{label:<28}{t_ref * 1e3:>14.1f}{t_xla * 1e3:>12.1f}{t_ref / t_xla:>8.2f}  "
              f"{'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
