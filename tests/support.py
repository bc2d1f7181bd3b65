"""Helpers for the project's tests: run a function on XLA:CPU and in the reference."""
from __future__ import annotations

import jax
import numpy as np

import interp


def xla_cpu(fn, *args, **kwargs):
    """``fn`` compiled by XLA:CPU, outputs as NumPy (the independent side of most tests)."""
    with jax.default_device(jax.devices("cpu")[0]):
        out = jax.jit(fn)(*args, **kwargs)
    return jax.tree_util.tree_map(np.asarray, out)


def reference(fn, *args, **kwargs):
    return interp.interpret(fn)(*args, **kwargs)


def x64(enabled: bool = True):
    """Context manager: ``jax_enable_x64`` on (or off) inside the block, on every supported JAX."""
    return jax.enable_x64(enabled)
