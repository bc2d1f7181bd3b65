"""pl.debug_check inside a kernel, for every Pallas dialect.

pl.debug_check binds checkify's check[debug=True]. Mosaic TPU and Mosaic GPU lower it to a
runtime assertion with the message when pl.enable_debug_checks is on at lowering time, and to
nothing otherwise (lowering.py _check_lowering_rule); outside kernels it is a no-op until
checkify discharges it. JAX's interpret modes never check it (measured on 0.10.2 and 0.12).
"""
from __future__ import annotations

from .grid import maybe_current_run


def kernel_debug_check(eqn, args, err_tree) -> list:
    """The rule of check[debug=True] (called by control_flow.check): inside a kernel with debug
    checks enabled (read when the kernel runs, as Mosaic reads it when it lowers), a failed
    condition raises JaxRuntimeError naming kernel, grid point and message."""
    import jax
    from jax._src.pallas import core as pallas_core
    run = maybe_current_run()
    if run is None or not pallas_core.debug_checks_enabled():
        return []
    exc = jax.tree_util.tree_unflatten(err_tree, list(args)).get_exception()
    if exc is not None:  # the message as Mosaic asserts it: the unformatted fmt_string
        message = getattr(exc, "fmt_string", None) or str(exc)
        raise jax.errors.JaxRuntimeError(f"{run.where()}: debug check failed: {message}")
    return []
