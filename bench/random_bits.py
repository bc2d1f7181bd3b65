"""random_bits for 2**22 uint32 values per PRNG implementation: the reference's NumPy generators
(interp.prng, as the random_bits rule runs them) against jitted XLA:CPU in the same run.

    python -m bench.random_bits [--quick]    # or python -m bench (every bench module)

Wall-clock medians and the median of the per-round ratios (the two sides run alternately, so
both see the same load; the target: within 3x of XLA:CPU for Threefry and Philox), and the
median process CPU time of each (all threads: XLA:CPU's intra-op pool and the reference's chunk
threads), which is the steadier number on a loaded machine. The load average is printed: on a
shared machine wall-clock ratios move with it.

Where the target stands (2-core CI VM, AVX2). Met: threefry2x32 (0.6-0.8x: XLA:CPU's
partitionable threefry is slow), rbg/unsafe_rbg (0.5-1.2x). Not met, and not reachable with one
NumPy ufunc pass per operation: philox4x32, threefry4x32, philox2x32. Idle machine (load
0.7), before the third session's changes -> after: philox4x32 12.5x -> 9.4x wall (reference 75 ->
58 ms; CPU ratio 9.6x), threefry4x32 7.6x -> 5.8x (79 -> 65 ms; CPU 4.6x), philox2x32 6.1x -> 7.0x
(33 -> 30 ms; XLA:CPU itself measured 5.4 then 4.2 ms). The changes (Philox carries the round key
in the product; round keys and key injections made once per call instead of per chunk) cut the
reference's process CPU time by 12% (philox4x32), 9% (philox2x32) and 7% (threefry4x32): median
of 10 alternating old/new rounds on one thread, same run, idle (under load average 11-17: 15%,
6%, 2%, with an identical-code control at 0.997). Why, per
output value (one hash):

* XLA:CPU keeps a hash's words in vector registers through all rounds: 2-6 ns of CPU per hash
  on the idle machine (philox4x32 2.8 ns, threefry4x32 4.4-6.3 ns, philox2x32 1.9 ns).
* The reference makes one pass over memory per operation. Passes per hash, both word pairs of
  the 4x32 generators mixed in each call: philox4x32 10 rounds x 5 ufuncs (multiply; xor of the
  next key into the product; shift; xor; mask) x 2 pairs = 100 uint64 element-passes;
  philox2x32 50 uint64 element-passes; threefry4x32 20 rounds x 5 ufuncs (add; rotate = shift,
  shift, or; xor) x 2 pairs + key injections = 224 uint32 element-passes; threefry2x32 117.
* Measured on the idle machine, ufunc call overhead (1.2-3 us a call) included: 0.13 ns per
  uint32 element-pass (threefry4x32: 29 ns of CPU per hash) and 0.27 ns per uint64
  element-pass (philox4x32 27 ns, philox2x32 13.5 ns): CPU ratios of 4.6-10x before the two
  threads halve the wall time. Measured alternatives that did not lower the cost: uint32 work
  arrays with strided views of the product's halves (NumPy does not vectorise strided
  half-word views: 0.55 ns per element), a widening mixed-type multiply (a cast buffer per
  call), a rotate through a widened uint64 (two strided half-word reads), chunks of 2**13 to
  2**15 (7-50% slower: call overhead grows faster than the cache saving) or 2**17 and 2**18
  (no consistent gain).
"""
from __future__ import annotations

import os
import sys

import jax
import numpy as np

from bench import _timing
from interp import prng

N = 1 << 22


def measure(impl: str, partitionable: bool = True, repeats: int = 5):
    """(comparison of ref vs XLA, identical bits) for one implementation: the comparison's wall
    times, and its cpu_a / cpu_b, medians of the timed calls' CPU times (warm-up dropped)."""
    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        native = prng.IMPLS[impl]
        key = jax.random.key(1701, impl=impl)
        data = np.asarray(jax.random.key_data(key))
        on_cpu = jax.device_put(key, jax.devices("cpu")[0])  # XLA:CPU runs where the key is
        f = jax.jit(lambda k: jax.random.bits(k, (N,), np.uint32))
        cmp = _timing.compare(lambda: native.random_bits(data, 32, (N,), partitionable),
                              lambda: f(on_cpu).block_until_ready(), repeats)
        same = bool(np.array_equal(cmp.out_a, np.asarray(cmp.out_b)))
        return cmp, same
    finally:
        jax.config.update("jax_threefry_partitionable", old)


def main(argv=None) -> None:
    repeats = 3 if "--quick" in (argv or ()) else 7
    print(f"random_bits, {N} x uint32 (2**22), median of {repeats} alternating rounds; XLA:CPU "
          f"jitted, same run; reference threads {prng.THREADS}, chunk {prng.CHUNK}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'implementation':<36}{'ref ms':>8}{'XLA ms':>8}{'ratio':>7}"
          f"{'ref cpu':>9}{'XLA cpu':>9}{'ratio':>7}  exact")
    cases = [(name, True) for name in prng.IMPLS] + [("threefry2x32", False)]
    for name, part in cases:
        label = name if part else f"{name} (partitionable=False)"
        cmp, same = measure(name, part, repeats)
        rc, xc = cmp.cpu_a, cmp.cpu_b
        print(f"{label:<36}{cmp.a * 1e3:>8.1f}{cmp.b * 1e3:>8.1f}{cmp.ratio:>7.2f}"
              f"{rc * 1e3:>9.1f}{xc * 1e3:>9.1f}{rc / xc:>7.2f}  {'yes' if same else 'NO'}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])      # (python -m bench.random_bits --quick)
