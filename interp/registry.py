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
    # Primitives no program given to the reference can hold, or whose value JAX leaves undefined.
    "zeros_like": "a legacy name (jax/_src/ad_util.py zeros_like_p, 'TODO(mattjj): remove "
                  "these after fixing downstream users'): JAX gives it no abstract evaluation, "
                  "impl or lowering and binds it nowhere, so no jaxpr can contain it",
    "call_hi_primitive_linearized": "the linear map of a hijax primitive defined only by its VJP "
                                    "(jax/_src/hijax.py fake_linear_op): a placeholder between "
                                    "linearization and transposition whose only meaning is its "
                                    "transpose (vjp_bwd); evaluating it forward is an error in "
                                    "JAX too (to_lojax = ad.raise_custom_vjp_error_on_jvp)",
    **{name: "a value of a fuser FusionDType (jax/_src/pallas/fuser/fusible_dtype.py: 'pack has "
             "no eager implementation or lowering'): its meaning is the dtype's own physicalize "
             "rules, applied by fuser.fuse / physicalize while tracing, so their jaxprs no longer "
             "hold it; a jaxpr traced outside them holds it but JAX cannot run it either"
       for name in ("pack_dtype", "unpack_dtype")},
    "log_read": "JAX 0.10's hijax Log read (jax/_src/hijax.py ReadLog): its abstract evaluation "
                "raises, so no traced program holds it (a Log is read back only by jax.jit's "
                "write-back into a Log passed in)",
    "jaxpr_call": "an internal primitive of JAX 0.10's Mosaic GPU lowering "
                  "(jax/_src/pallas/primitives.py _jaxpr_call: 'not a general purpose "
                  "primitive', bound only in pallas/mosaic_gpu/lowering.py while lowering "
                  "emit_pipeline to MLIR): it is never in a traced program",
}

# Rules applied when an equation involves extended dtypes (PRNG keys, semaphores):
# name -> rule with the same signature. Falls back to RULES when absent.
EXTENDED_RULES: dict[str, Callable] = {}


def register(*names: str, partial: str | None = None, extended: bool = False,
             refused: str | None = None, prepare: Callable | None = None, inplace: Callable | None = None):
    """Register the decorated function as the rule for each primitive name (``refused``: a rule
    that only raises, with the reason coverage() states).

    A rule's plan-time facets are declared here too (the evaluator reads them as the rule's
    attributes, interp/evaluator.py): ``prepare(ctx)`` runs once per equation and returns the
    function to call for it, or None for the rule itself; ``inplace(eqn, out, *args, **params)``
    computes the result into ``out``, a dying input buffer of the result's shape and dtype."""
    table = EXTENDED_RULES if extended else RULES

    def deco(fn):
        if prepare is not None:
            fn.prepare = lambda ctx: prepare(ctx) or fn
        if inplace is not None:
            fn.inplace = inplace
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
