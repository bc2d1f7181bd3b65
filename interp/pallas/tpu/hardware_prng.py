"""The TPU core's hardware PRNG: the generator state a kernel run carries across grid steps.

The hardware generator is undocumented and generation-specific; the reference uses the
documented deterministic emulation of the PRNG family (interp.prng.pallas_tpu_bits). TPUs have a
sequential generator per core: prng_seed sets its whole state, so the bits after a seed depend
on the seeds and on the draws made since, never on the grid point (pltpu.sample_block's
invariance over block shapes and iteration orders relies on this). The state lasts across grid
steps. JAX's TPU interpret mode returns zeros.
"""
from __future__ import annotations

import numpy as np

from ... import prng
from ...errors import UndefinedBehaviorError


def seed(run, seeds) -> None:
    """prng_seed: the core's PRNG state becomes a function of these 32-bit seeds."""
    run.prng = [np.array([int(np.asarray(s)) & 0xFFFFFFFF for s in seeds], np.int64), 0]


def draw(eqn, run, shape) -> np.ndarray:
    """prng_random_bits: the next uint32 draw of the core's PRNG."""
    if len(shape) < 2:
        raise eqn.unsupported(f"hardware random bits of shape {tuple(shape)}: Mosaic draws only "
                              "rank >= 2 blocks (lowering.py _prng_random_bits_lowering_rule: "
                              "'random_bits only supports rank>=2 outputs.')")
    if run.prng is None:
        raise UndefinedBehaviorError(f"{run.where()}: prng_random_bits before any prng_seed "
                                     "(the hardware PRNG state is undefined)")
    seeds, draws_before = run.prng
    run.prng[1] += 1
    return np.asarray(prng.pallas_tpu_bits(seeds, tuple(shape), draw=draws_before,
                                           options_seed=run.options.seed), np.uint32)
