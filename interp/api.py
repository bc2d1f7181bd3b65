"""``interpret(fn)``: trace with JAX, evaluate in NumPy."""
from __future__ import annotations

import functools
import threading

import jax
import numpy as np

from .evaluator import JaxRef, eval_jaxpr
from .options import make_options

# JAX configuration that changes what a trace means; read at every call, like JAX.
_TRACE_CONFIG = ("jax_enable_x64", "jax_threefry_partitionable", "jax_random_seed_offset",
                 "jax_default_prng_impl", "jax_numpy_rank_promotion", "jax_default_matmul_precision")


def _config_key() -> tuple:
    return tuple(getattr(jax.config, name, None) for name in _TRACE_CONFIG)


def _leaf_key(x) -> tuple:
    if type(x) is np.ndarray:   # the common case first (a jax.Ref isinstance check is slow)
        return (np.ndarray, x.shape, x.dtype, False)
    if isinstance(x, (bool, int, float, complex)):
        return (type(x),)  # Python scalars trace as weakly typed scalars
    if isinstance(x, JaxRef):  # (np.shape would iterate a jax.Ref)
        return (type(x), tuple(x.shape), str(x.dtype))
    return (type(x), np.shape(x), str(getattr(x, "dtype", None)), bool(getattr(x, "weak_type", False)))


def interpret(fn, *, static_argnums=(), static_argnames=(), emulated_device=None, **options):
    """Like ``jax.jit(fn)``, but the traced program is evaluated by the NumPy reference.

    Returns a function with ``fn``'s signature whose outputs have ``fn``'s pytree structure,
    with ``np.ndarray`` leaves. Options: see :class:`interp.options.Options`.
    ``emulated_device`` ("h100", "b200": ``spec/emulated_devices.py``) traces as if on that
    device (``interp/emulated_device.py``), for kernels that ask the device while tracing.
    """
    from .emulated_device import device, tracing
    if emulated_device is not None:
        device(emulated_device)   # an unknown name fails here, not at the first call
    opts = make_options(**options)
    static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    traced: dict = {}
    lock = threading.Lock()

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        dyn_args = [a for i, a in enumerate(args) if i not in static_argnums]
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
        leaves, treedef = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        try:
            key = (treedef, tuple(map(_leaf_key, leaves)), _config_key(),
                   tuple(args[i] for i in static_argnums if i < len(args)),
                   tuple((k, kwargs[k]) for k in static_argnames if k in kwargs))
            hash(key)
        except TypeError:
            key = None
        entry = traced.get(key) if key is not None else None
        if entry is None:
            static_kwargs = {k: kwargs[k] for k in static_argnames if k in kwargs}
            traced_fn = functools.partial(fn, **static_kwargs) if static_kwargs else fn
            with tracing(emulated_device):
                closed, out_shape = jax.make_jaxpr(traced_fn, static_argnums=static_argnums,
                                                   return_shape=True)(*args, **dyn_kwargs)
            entry = (closed, jax.tree_util.tree_structure(out_shape))
            if key is not None:
                with lock:
                    traced[key] = entry
        closed, out_tree = entry
        outs = eval_jaxpr(closed, *leaves, options=opts)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    wrapped.options = opts
    return wrapped
