"""PRNG: every key implementation, both jax_threefry_partitionable modes, the samplers, key
operations and lax.rng_bit_generator. Bits are bit-exact by definition; samplers that go through
transcendental functions (normal: erf_inv) get that function's ULP budget."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from spec import compliance as C

from ..case import Case

IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox4x32", "threefry4x32", "philox2x32")
SAMPLERS = {
    # name: (fn(key) -> array, mode or None (exact), profile)
    "bits32": (lambda k: jax.random.bits(k, (4, 33), jnp.uint32), None, "quick"),
    "bits8": (lambda k: jax.random.bits(k, (3, 7), jnp.uint8), None, "quick"),
    "uniform_f32": (lambda k: jax.random.uniform(k, (5, 17)), None, "quick"),
    "uniform_bf16": (lambda k: jax.random.uniform(k, (5, 17), jnp.bfloat16), None, "nightly"),
    "randint": (lambda k: jax.random.randint(k, (40,), -7, 1000), None, "quick"),
    "bernoulli": (lambda k: jax.random.bernoulli(k, 0.3, (64,)), None, "quick"),
    "normal_f32": (lambda k: jax.random.normal(k, (5, 17)), C.ulp(C.JTU_F32_ULP + 2, "jtu-tolerance"), "quick"),
    "split_fold_in": (lambda k: jax.random.key_data(jax.random.split(jax.random.fold_in(k, 7), 3)), None, "quick"),
    "permutation": (lambda k: jax.random.permutation(k, 20), None, "nightly"),
    "rademacher": (lambda k: jax.random.rademacher(k, (64,), jnp.int32), None, "nightly"),
    "randint_u8": (lambda k: jax.random.randint(k, (50,), 0, 256, jnp.uint8), None, "nightly"),
    # -log1p(-u): log1p's budget (negation is exact).
    "exponential_f32": (lambda k: jax.random.exponential(k, (64,)), C.mode_for_primitive("log1p", np.float32),
                        "nightly"),
}


def _program(impl, sampler):
    def f(seed):
        return sampler(jax.random.key(seed[0], impl=impl))
    return f


def _available(impl: str) -> bool:
    try:
        jax.eval_shape(lambda: jax.random.key(0, impl=impl))   # traced only: nothing compiles
        return True
    except Exception:  # noqa: BLE001  (an implementation this JAX does not ship: no cases)
        return False


def cases():
    for impl in filter(_available, IMPLS):
        for partitionable in (True, False):
            if impl != "threefry2x32" and not partitionable:
                continue   # the flag only changes threefry
            for name, (fn, mode, prof) in SAMPLERS.items():
                tag = f"{impl}-{'partitionable' if partitionable else 'legacy'}"
                if impl not in ("threefry2x32", "rbg") and name not in ("bits32", "uniform_f32", "split_fold_in"):
                    prof = "nightly"   # the newer impls: bits, a sampler and key ops in the quick profile
                yield Case(id=f"random/{name}/{tag}", fn=_program(impl, fn),
                           inputs=lambda rng: [rng.integers(0, 2 ** 31 - 1, size=(1,)).astype(np.int32)],
                           modes=mode or C.exact("definition"), primitives=("random_bits", "random_seed"),
                           profile=prof,
                           jax_config=(("jax_threefry_partitionable", partitionable),))
    for alg in ("THREE_FRY", "PHILOX", "DEFAULT"):
        yield Case(id=f"random/rng_bit_generator/{alg.lower()}",
                   fn=lambda key, alg=alg: lax.rng_bit_generator(key, (6, 10), dtype=jnp.uint32,
                                                                 algorithm=getattr(lax.RandomAlgorithm, f"RNG_{alg}")),
                   inputs=lambda rng: [rng.integers(0, 2 ** 32, size=(4,), dtype=np.uint64).astype(np.uint32)],
                   primitives=("rng_bit_generator",))
