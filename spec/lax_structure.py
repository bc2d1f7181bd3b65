"""Semantics of the structure family (interp/rules/lax_structure.py).

Every primitive here moves data without arithmetic (iota converts integers), so results are
EXACT: one bit pattern is right, for every dtype including bool, complex, int2/int4 and every
ml_dtypes float. NaN payloads are preserved bit for bit by the reference.

Backend property found on XLA:CPU (jaxlib 0.10.2 and 0.12.0.1): NaN payloads are not preserved by
data movement of some narrow floats. broadcast_in_dim and pad of bfloat16, and broadcast_in_dim,
concatenate, pad, rev, split, squeeze (reshape), stack, unstack of float8_e5m2, float8_e3m4 and
float8_e4m3 give a different NaN bit pattern (e.g. e5m2 0x7d -> 0x7f, the NaN is quietened).
float16/32/64 and the fnuz/e4m3fn/e8m0fnu types keep their payloads. The EXACT compliance mode
ignores NaN payloads, so this is not a failure; tests/test_lax_structure.py checks XLA:CPU with
payloads normalised and the reference's payload preservation separately.
"""
from __future__ import annotations

from .base import EXACT, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
STABLEHLO = "https://openxla.org/stablehlo/spec"
RULES = "interp/rules/lax_structure.py"
JAX_LAX = "jax/_src/lax/lax.py"

_MOVE = {"structure/bit-exact-move": "bit-exact data movement for every dtype (NaN payloads preserved)"}
_NO_DYN = {"structure/no-dynamic-shapes": "dynamic-shape operands (JAX's experimental dynamic shapes) "
                                          "raise UnsupportedPrimitiveError"}

SEMANTICS = table(
    Semantics("broadcast_in_dim",
              "out[i] = x[j] where operand dim k maps to output dim broadcast_dimensions[k]; "
              "operand dims of size 1 broadcast.",
              {**_MOVE,
               "broadcast_in_dim/c1": "sharding is ignored (a placement, not a value)",
               **_NO_DYN},
              (XLA_OPS + "#broadcastindim", STABLEHLO + "#broadcast_in_dim",
               JAX_LAX + " broadcast_in_dim_p")),
    Semantics("reshape",
              "Row-major reshape to new_sizes; with `dimensions`, of the operand transposed by it.",
              {**_MOVE, "reshape/c1": "dimensions=None: plain row-major reshape", **_NO_DYN},
              (XLA_OPS + "#reshape", JAX_LAX + " reshape_p")),
    Semantics("squeeze", "Drops the listed size-1 dimensions.", {**_MOVE},
              (JAX_LAX + " squeeze_p", STABLEHLO + "#reshape")),
    Semantics("transpose", "out dims are operand dims in `permutation` order.", {**_MOVE},
              (XLA_OPS + "#transpose", JAX_LAX + " transpose_p")),
    Semantics("rev", "Reverses the order of elements along `dimensions`.", {**_MOVE},
              (XLA_OPS + "#rev_reverse", JAX_LAX + " rev_p")),
    Semantics("concatenate", "Joins operands along `dimension` in order.",
              {**_MOVE, "concatenate/c1": "size-0 operands contribute nothing"},
              (XLA_OPS + "#concatenate", JAX_LAX + " concatenate_p")),
    Semantics("pad",
              "Per dim (lo, hi, interior): `interior` padding values between elements, then lo/hi "
              "values at the ends; negative lo/hi remove elements (after interior padding).",
              {**_MOVE,
               "pad/c1": "output size = lo + hi + n + max(n - 1, 0) * interior",
               "pad/c2": "negative lo/hi crop the interior-padded operand from that end",
               "pad/c3": "negative interior padding is rejected by JAX; the rule raises if it ever sees "
                         "one"},
              (XLA_OPS + "#pad", STABLEHLO + "#pad", JAX_LAX + " pad_p")),
    Semantics("iota",
              "0, 1, 2, ... along `dimension`, converted to `dtype` as XLA converts an integer.",
              {"iota/c1": "integers wrap modulo 2**bits: int8 iota(300) reaches 127 then -128 ...; int4 "
                          "and uint2 wrap at 16 and 4 (XLA:CPU agrees)",
               "iota/c2": "floats: the integer rounded to nearest even (bfloat16 iota(300)[257] == "
                          "256); beyond the type's range as that type converts (float8_e4m3fnuz: NaN, "
                          "float4_e2m1fn: saturates to 6, float8_e8m0fnu: 0 is NaN, no zero)",
               "iota/c3": "complex: real part as the float, imaginary +0",
               "iota/c4": "bool is rejected by JAX",
               "iota/c5": "sharding is ignored",
               **_NO_DYN},
              (XLA_OPS + "#iota", STABLEHLO + "#iota", JAX_LAX + " iota_p")),
    Semantics("split", "Consecutive pieces of the given `sizes` along `axis`.",
              {**_MOVE, "split/c1": "size-0 pieces are empty arrays"}, (JAX_LAX + " split_p",)),
    Semantics("copy", "A fresh copy of the operand (jnp.array(x, copy=True)).", {**_MOVE},
              (JAX_LAX + " copy_p",)),
    Semantics("stage", "The identity: lax.stage lifts a value into the trace.",
              {**_MOVE,
               "stage/c1": "tracing records no equation (each trace's stage_value lifts the value "
                           "directly): only a jaxpr built by hand holds one"},
              (JAX_LAX + " stage, stage_p (impl and lowering return the operand)",
               "jax/_src/core.py EvalTrace.stage_value")),
    Semantics("tile", "numpy.tile with one repetition count per dimension.", {**_MOVE},
              (JAX_LAX + " tile_p",)),
    Semantics("stack", "Stacks the operands along a new dimension `axis`.", {**_MOVE},
              (JAX_LAX + " stack_p",)),
    Semantics("unstack", "The slices x[..., i, ...] along `axis`, one result each.", {**_MOVE},
              (JAX_LAX + " unstack_p",)),
    Semantics("empty",
              "An array whose contents are undefined (XLA:CPU: zeros; TPU/GPU: AllocateBuffer).",
              {"empty/c1": "uninitialized='zero': zeros (bit-identical to XLA:CPU's lowering)",
               "empty/c2": "uninitialized='nan' (default): the reference's poison value "
                           "(interp/uninitialized.py, shared with Pallas buffers): NaN for floats and "
                           "complex, iinfo.min for signed, iinfo.max for unsigned, True for bool",
               "empty/c3": "uninitialized='raise': the value carries a mask of written elements through "
                           "the primitives that only move data (dynamic_update_slice, scatter, slices, "
                           "gather, pad, concatenate, reshapes, select_n, convert_element_type) and "
                           "through calls and loops; any other use of a never-written element "
                           "(arithmetic, reductions, indices, predicates, the program's outputs) raises "
                           "UninitializedReadError; new_ref of it is a tracked ref "
                           "(interp/rules/lax_structure.py Unwritten)",
               "empty/c4": "extended dtypes raise UnsupportedPrimitiveError"},
              (JAX_LAX + " empty_p", "jax/_src/pallas/primitives.py uninitialized_value"),
              notes="A program whose result depends on the contents of lax.empty is undefined; "
                    "the poison makes such a dependence visible."),
    Semantics("empty2", "A scalar lax.empty (used by scan for residual buffers).",
              {"empty2/c1": "as `empty`, shape ()"}, (JAX_LAX + " empty2_p",
                                          "jax/_src/lax/control_flow/loops.py")),
    Semantics("tie", "tie(x, y) is y; x only orders effects.", {"tie/c1": "returns y unchanged"},
              (JAX_LAX + " tie_p",)),
)

# Primitives of the family deliberately not registered (coverage() says "unsupported"):
NOT_IMPLEMENTED = {
    "zeros_like": "legacy jax._src.ad_util primitive with no abstract evaluation rule; it cannot "
                  "appear in a jaxpr",
    "expand_dims": "not a primitive: lax.expand_dims traces to broadcast_in_dim/reshape",
}
