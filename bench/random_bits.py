"""random_bits for 2**22 uint32 values per PRNG implementation: the reference's NumPy generators
(interp.prng, as the random_bits rule runs them) against jitted XLA:CPU in the same run.

    python -m bench.random_bits [--quick]    # or python -m bench (every bench module)

Wall-clock medians and their ratio (the target: within 3x of XLA:CPU for Threefry and Philox),
and the process CPU time of each (all threads: XLA:CPU's intra-op pool and the reference's chunk
threads), which is the steadier number on a loaded machine. The load average is printed: on a
shared machine wall-clock ratios move with it.
"""
from __future__ import annotations

import os
import statistics
import time

import jax
import numpy as np

from interp import prng

N = 1 << 22


def _timed(fn, repeats: int) -> tuple[float, float]:
    """(median wall seconds, median process CPU seconds) of ``repeats`` calls after a first."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def measure(impl: str, partitionable: bool = True, repeats: int = 5):
    """((ref wall, ref cpu), (XLA wall, XLA cpu), identical bits) for one implementation."""
    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        native = prng.IMPLS[impl]
        key = jax.random.key(1701, impl=impl)
        data = np.asarray(jax.random.key_data(key))
        outs = {}
        with jax.default_device(jax.devices("cpu")[0]):
            f = jax.jit(lambda k: jax.random.bits(k, (N,), np.uint32))
            t_xla = _timed(lambda: outs.__setitem__("xla", f(key).block_until_ready()), repeats)
        t_ref = _timed(lambda: outs.__setitem__(
            "ref", native.random_bits(data, 32, (N,), partitionable)), repeats)
        return t_ref, t_xla, bool(np.array_equal(outs["ref"], np.asarray(outs["xla"])))
    finally:
        jax.config.update("jax_threefry_partitionable", old)


def main(argv=None) -> None:
    repeats = 3 if "--quick" in (argv or ()) else 7
    print(f"random_bits, {N} x uint32 (2**22), median of {repeats}; XLA:CPU jitted, same run; "
          f"reference threads {prng.THREADS}, chunk {prng.CHUNK}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'implementation':<36}{'ref ms':>8}{'XLA ms':>8}{'ratio':>7}"
          f"{'ref cpu':>9}{'XLA cpu':>9}{'ratio':>7}  exact")
    cases = [(name, True) for name in prng.IMPLS] + [("threefry2x32", False)]
    for name, part in cases:
        label = name if part else f"{name} (partitionable=False)"
        (rw, rc), (xw, xc), same = measure(name, part, repeats)
        print(f"{label:<36}{rw * 1e3:>8.1f}{xw * 1e3:>8.1f}{rw / xw:>7.2f}"
              f"{rc * 1e3:>9.1f}{xc * 1e3:>9.1f}{rc / xc:>7.2f}  {'yes' if same else 'NO'}",
              flush=True)


if __name__ == "__main__":
    main()
