"""Rules: fusion. Block-scaled matmul and the Pallas fuser's higher-order primitives.

Block-scaled matmul (``scaled_matmul_wrapper`` / ``scaled_matmul`` behind ``jax.nn.scaled_matmul``
and ``jax.nn.scaled_dot_general``; ``scaled_dot`` behind ``jax.lax.scaled_dot``) means
``dot(data * scale, data * scale)`` with each scale broadcast over its block of the contracting
dimension. The reference dequantises exactly (data and scale of at most 32 bits each: their
product has at most 48 significant bits and an exponent far inside float64's range) and rounds the
exact dot product of the dequantised operands once to the result type, through the contraction
family's certified matmul (lax_contractions.dot_general_value: float64/long double BLAS, an error
bound, exact recomputation where the rounding is in doubt).

The fuser (jax.experimental.pallas.fuser): a ``fusible`` function (the ``fusible`` primitive on
JAX 0.10.2; a ``Fusible`` HiPrim bound through ``call_hi_primitive`` on newer JAX, handled by the
generic hijax rule in control_flow.py) and a ``custom_fusion`` mean the function they wrap, as
their impl rules say. ``fuser.fuse``d programs are ordinary jaxprs (pallas_call with the fusions
pulled into the kernel and scalar-prefetch operands for dynamic indices): they need no rule here.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..registry import register
from .lax_contractions import dot_general_value

F64 = np.dtype(np.float64)


def _dequantise(eqn, x: np.ndarray, scale: np.ndarray, contracting) -> np.ndarray:
    """``x * scale`` in float64, exactly, with ``scale`` repeated over each contracting block.

    The scale has x's rank; along a contracting dimension it has one entry per block of
    ``x.shape[d] // scale.shape[d]`` consecutive elements, elsewhere x's size
    (jax/_src/lax/scaled_dot.py _scale_broadcast; scaled_matmul: (B, M, K // block))."""
    for v, what in ((x, "operand"), (scale, "scale")):
        if not dtypes.is_float(v.dtype) or dtypes.bit_width(v.dtype) > 32:
            # A float64 (or integer) factor makes the product inexact in float64: not implemented.
            raise eqn.unsupported(f"block_scaled/exact-dequantisation: block-scaled dot with a "
                                  f"{v.dtype} {what} (floats of at most 32 bits)")
    s = scale
    for d in contracting:
        if x.shape[d] % s.shape[d]:
            raise eqn.unsupported(f"dimension {d}: size {x.shape[d]} is not a multiple of the scale's "
                                  f"{s.shape[d]}")
        s = np.repeat(s, x.shape[d] // s.shape[d], axis=d)
    if s.shape != x.shape:
        raise eqn.unsupported(f"scale shape {scale.shape} does not match operand shape {x.shape}")
    with np.errstate(all="ignore"):   # inf * finite, NaN scale (e8m0 0xFF): IEEE in float64
        return x.astype(F64) * s.astype(F64)


def _dot(eqn, a: np.ndarray, b: np.ndarray, dimension_numbers, out_dtype) -> np.ndarray:
    """Correctly rounded dot_general of exact dequantised operands. Both go to float32 when all
    their values fit (fp8/fp4 data with moderate scales): the certified matmul then runs on float64
    BLAS instead of long double (about 10x faster). Both or neither: mixed input dtypes would be
    converted to the result type first (lax_contractions._lowered_inputs)."""
    with np.errstate(all="ignore"):
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        if all(np.all((x32.astype(F64) == x) | np.isnan(x)) for x, x32 in ((a, a32), (b, b32))):
            a, b = a32, b32
    return dot_general_value(eqn, a, b, dimension_numbers, out_dtype)


@register("scaled_matmul_wrapper", "scaled_matmul")
def scaled_matmul(eqn, lhs, rhs, lhs_scales, rhs_scales, *, preferred_element_type):
    # lhs (B, M, K), rhs (B, N, K), scales (B, M|N, K // block): out (B, M, N)
    # (jax/_src/cudnn/scaled_matmul_stablehlo.py _scaled_matmul_abstract / _cpu_lowering_impl).
    a = _dequantise(eqn, np.asarray(lhs), np.asarray(lhs_scales), (2,))
    b = _dequantise(eqn, np.asarray(rhs), np.asarray(rhs_scales), (2,))
    return [_dot(eqn, a, b, (((2,), (2,)), ((0,), (0,))), eqn.out_avals[0].dtype)]


@register("scaled_dot")
def scaled_dot(eqn, lhs, rhs, lhs_scale, rhs_scale, *, dimension_numbers, preferred_element_type=None):
    # (lhs * lhs_scale) . (rhs * rhs_scale) as dot_general(dimension_numbers) (jax.lax.scaled_dot).
    (lc, rc), _ = dimension_numbers
    a = _dequantise(eqn, np.asarray(lhs), np.asarray(lhs_scale), lc)
    b = _dequantise(eqn, np.asarray(rhs), np.asarray(rhs_scale), rc)
    return _dot(eqn, a, b, dimension_numbers, eqn.out_dtype)


@register("fusible")
def fusible(eqn, *args, jaxpr, num_consts, func=None, in_tree=None, out_tree=None,
            output_fusion_prefix=None):
    # JAX 0.10.2 fusible_p: outside fuser.fuse a fusible means its traced body, run on trivial
    # fusions (jax/_src/pallas/fuser/fusible.py: impl = core.eval_jaxpr(jaxpr, consts, *args));
    # func, the trees and output_fusion_prefix only serve fuser.fuse (its lowering to plain
    # types binds jaxpr and num_consts alone: fusible.py _fusible_to_lojax).
    return eqn.eval_jaxpr(jaxpr, *args[num_consts:], consts=args[:num_consts])


@register("custom_fusion")
def custom_fusion(eqn, *args, jaxpr, num_consts, pallas_jaxpr, eval_rule, pull_block_spec_rule,
                  push_block_spec_rule, pallas_num_consts=0, in_tree=None, out_tree=None,
                  kernel_out_tree=None):
    # custom_fusion_lib._custom_fusion_impl: the wrapped function; the pallas_impl (used only when
    # the fusion is pulled into a kernel) and its consts are skipped, as in JAX's impl, and so are
    # the block-spec and eval rules (fusion machinery) and the trees (JAX <= 0.11: the impl's
    # calling convention).
    consts, rest = args[:num_consts], args[num_consts + pallas_num_consts:]
    return eqn.eval_jaxpr(jaxpr, *rest, consts=consts)
