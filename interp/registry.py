"""The rule table: one function per primitive name.

A rule is ``rule(eqn, *invals, *, <every parameter, by name>) -> value`` (or a sequence of values
for primitives with ``multiple_results``); never ``**params`` (interp/evaluator.py check_params).
``eqn`` is the equation's :class:`interp.evaluator.EqnContext`: its ``in_avals``/``out_avals``,
the evaluation ``options``, and ``eval_jaxpr`` for sub-jaxprs. Register with::

    @register("add")
    def add(eqn, x, y): ...
"""
from __future__ import annotations

from typing import Callable

RULES: dict[str, Callable] = {}
# Primitives whose rule exists but does not cover everything: name -> what is missing.
PARTIAL: dict[str, str] = {}
# Primitives the reference refuses on purpose (their rule raises UnsupportedPrimitiveError):
# name -> why. coverage() says "unsupported: <why>".
REFUSED: dict[str, str] = {}
# Primitives without a rule whose absence has a reason beyond "not written yet": name -> why.
# coverage() says "unsupported: <why>" and evaluating one raises UnsupportedPrimitiveError with it.
_CUDNN_ATTENTION = ("cuDNN's fused attention (jax.nn.dot_product_attention(implementation="
                    "'cudnn')): a GPU library call whose numerics cuDNN does not specify; "
                    "implementation='xla' is the same function in supported primitives")
NO_RULE: dict[str, str] = {
    "mosaic_gpu_p": "a compiled Mosaic GPU module (MLIR from jax.experimental.mosaic.gpu): the "
                    "reference runs Mosaic GPU kernels from their Pallas jaxprs (plgpu.kernel, "
                    "pallas_call), not from lowered IR",
    "tpu_custom_call": "a compiled Mosaic TPU module (MLIR): the reference runs Pallas TPU "
                       "kernels from their jaxprs, not from lowered IR",
    "ffi_call": "a foreign function (XLA FFI custom call): native code with no reference meaning",
    "cudnn_fusion": "a computation handed to cuDNN's graph compiler (jax._src.cudnn.fusion): "
                    "cuDNN does not specify its numerics",
    "call_exported": "a serialized jax.export module (StableHLO): the reference evaluates "
                     "jaxprs, not StableHLO",
    **{name: "symbolic dimensions exist only in shape-polymorphic jax.export modules; the "
             "reference evaluates programs of concrete shapes"
       for name in ("dim_as_value", "dimension_size", "shape_assertion")},
    **{f"dot_product_attention_{kind}{suffix}": _CUDNN_ATTENTION
       for kind in ("fwd", "bwd", "fp8_fwd", "fp8_bwd") for suffix in ("", "_wrapper")},
}

# Rules applied when an equation involves extended dtypes (PRNG keys, semaphores):
# name -> rule with the same signature. Falls back to RULES when absent.
EXTENDED_RULES: dict[str, Callable] = {}


def register(*names: str, partial: str | None = None, extended: bool = False,
             refused: str | None = None):
    """Register the decorated function as the rule for each primitive name (``refused``: a rule
    that only raises, with the reason coverage() states)."""
    table = EXTENDED_RULES if extended else RULES

    def deco(fn):
        for name in names:
            if name in table:
                raise ValueError(f"duplicate rule for primitive {name!r}")
            table[name] = fn
            if partial:
                PARTIAL[name] = partial
            if refused:
                REFUSED[name] = refused
        return fn

    return deco
