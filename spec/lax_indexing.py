"""Semantics of the indexing family (interp/rules/lax_indexing.py).

Index values are integers of any signed or unsigned dtype (int4 ... uint64); the reference compares
and clamps them as mathematical integers (a uint64 index of 2**64-1 is huge, never -1), which is
what XLA:CPU does in jaxlib 0.12.0.1 (one exception in 0.10.2, below).

Gather/scatter out-of-bounds behaviour per GatherScatterMode (jax/_src/lax/slicing.py):
  gather CLIP, PROMISE_IN_BOUNDS: JAX emits a plain XLA gather, which clamps every start index to
      [0, operand_dim - slice_size] (XLA operation semantics, Gather: "start indices are clamped").
      So PROMISE_IN_BOUNDS clamps, like CLIP, on XLA (checked on XLA:CPU).
  gather FILL_OR_DROP (JAX _gather_fill): indices are converted to int32 (int64 if an operand
      dimension exceeds int32), wrapping like convert_element_type; a batch element whose start is
      outside [0, dim - slice_size] in any indexed dimension gives fill_value for its whole window.
      Consequence (XLA:CPU agrees): an int64 index 2**32 + 1 wraps to 1 and is *in* bounds; a
      uint32 index 2**32 - 1 becomes -1 and is filled.
      fill_value None (jax.lax.gather): NaN for floats/complex, iinfo.min for signed, iinfo.max for
      unsigned, True for bool.
  scatter CLIP (JAX _clamp_scatter_indices): indices clamped to [0, dim - window_size], then a
      plain XLA scatter.
  scatter FILL_OR_DROP and PROMISE_IN_BOUNDS: a plain XLA scatter, which skips an update window
      that is not entirely in bounds (XLA operation semantics, Scatter). PROMISE_IN_BOUNDS drops,
      as JAX's GatherScatterMode docstring says.
  ONE_HOT (JAX 0.12 enum value, no lowering): raises UnsupportedPrimitiveError.

Duplicate scatter indices: XLA:CPU applies updates one after the other, in row-major order of the
scatter (batch) dimensions of `updates`, each window in row-major order; each combination is
rounded to the dtype. The reference does exactly that: scatter = last write wins; scatter-add of
float32 [1e8, 1, -1e8, 1, 1, 1] into 0 is 3.0 (an exact sum would be 4). Other backends may apply
duplicates in another order (GPU: atomics; TPU: sorted), see the spec/allowances.py
scatter-duplicate-order allowance; the reference defines the CPU order.

Known XLA:CPU divergences (the reference follows the operation semantics):
  * scatter with an empty index vector (scatter_dims_to_operand_dims=()) and several update
    windows: every window starts at 0, so all updates combine into the same elements. XLA:CPU
    instead spreads them over the operand when its shape equals the updates' (0.12.0.1: scatter of
    [5, 7] into f32[2] gives [5, 7], the semantics give [7, x1]) and in 0.10.2 loses updates of
    scatter-add (1 + 5 + 7 gives 8). Gather with an empty index vector agrees with the reference.
  * jaxlib 0.10.2 only: dynamic_update_slice with a start index dtype narrower than the bound
    (int8/uint8 start, dim - size = 297) clamps against the bound converted to the index dtype
    (297 -> 41). 0.12.0.1 clamps correctly; dynamic_slice is correct in both.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, EXACT, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
STABLEHLO = "https://openxla.org/stablehlo/spec"
RULES = "interp/rules/lax_indexing.py"
JAX_SLICING = "jax/_src/lax/slicing.py"

_INDEX = {"indexing/integer-indices": "index operands of any integer dtype (signed or unsigned, "
                                      "int4..uint64), compared as integers"}
_HINTS = {"indexing/hints-only": "indices_are_sorted and unique_indices are hints: results do not "
                                 "depend on them"}
_SCATTER_EDGES = {**_INDEX,
                  **_HINTS,
                  "scatter/clip-mode": "CLIP: indices clamped to [0, dim - window] (JAX "
                                       "_clamp_scatter_indices)",
                  "scatter/fill-or-drop": "FILL_OR_DROP and PROMISE_IN_BOUNDS: a window not entirely in "
                                          "bounds is skipped (XLA)",
                  "scatter/dimension-numbers": "all ScatterDimensionNumbers fields, "
                                               "operand_batching_dims/scatter_indices_batching_dims "
                                               "included",
                  "scatter/duplicates-in-order": "duplicates applied sequentially in XLA:CPU's order: "
                                                 "scatter (batch) dims of updates row-major, then the "
                                                 "window row-major",
                  "scatter/empty-index-vector": "empty index vector: every window starts at 0 (XLA:CPU "
                                                "diverges, see module docstring)"}


def _scatter(name, combiner, extra, exactness=EXACT):
    return Semantics(
        name, f"XLA Scatter with update computation {combiner}.", {**_SCATTER_EDGES, **extra},
        (XLA_OPS + "#scatter", STABLEHLO + "#scatter", JAX_SLICING + " _scatter_lower",
         JAX_SLICING + " _clamp_scatter_indices", RULES + " _apply_updates"),
        exactness)


_ARITH = {"scatter_arith/rounded-once": "float: each combination correctly rounded to the dtype, one at "
                                        "a time (float16/32/64 native IEEE; bfloat16/float8/float4 "
                                        "computed in float32 and rounded once, exact since 24 >= 2p + "
                                        "2)",
          "scatter_arith/subnormals-kept": "float: subnormals kept (XLA:CPU flushes "
                                           "float32/bfloat16/float64 subnormal results: allowance "
                                           "flush-to-zero)",
          "scatter_arith/int-wrap": "integer: wraps modulo 2**bits (int2/int4 too)"}

SEMANTICS = table(
    Semantics("slice", "operand[start:limit:stride] per dimension.",
              {"slice/c1": "strides None means 1",
               "slice/c2": "bit-exact data movement for every dtype"},
              (XLA_OPS + "#slice", JAX_SLICING + " slice_p")),
    Semantics("dynamic_slice",
              "A slice of slice_sizes at runtime start indices (one scalar operand per dim).",
              {"dynamic_slice/c1": "each start clamped to [0, dim - size] so the slice is always in "
                                   "bounds",
               "dynamic_slice/c2": "all starts share one dtype (JAX requires it)",
               **_INDEX,
               "dynamic_slice/c3": "negative starts are clamped to 0 by the primitive; "
                                   "lax.dynamic_slice adds the dimension size to a negative start "
                                   "before the primitive (JAX wrapper)",
               "dynamic_slice/c4": "dynamic-shape size operands raise UnsupportedPrimitiveError"},
              (XLA_OPS + "#dynamicslice", STABLEHLO + "#dynamic_slice",
               JAX_SLICING + " dynamic_slice_p, _dynamic_slice_indices")),
    Semantics("dynamic_update_slice",
              "operand with `update` written at runtime start indices.",
              {"dynamic_update_slice/c1": "each start clamped to [0, dim - update_dim] so the update is "
                                          "always in bounds",
               **_INDEX,
               "dynamic_update_slice/c2": "jaxlib 0.10.2's XLA:CPU mis-clamps with narrow index dtypes "
                                          "(module docstring)"},
              (XLA_OPS + "#dynamicupdateslice", STABLEHLO + "#dynamic_update_slice",
               JAX_SLICING + " dynamic_update_slice_p")),
    Semantics("gather",
              "XLA Gather with JAX's GatherDimensionNumbers (index_vector_dim is the last "
              "dimension of the indices).",
              {**_INDEX,
               **_HINTS,
               "gather/c1": "all GatherDimensionNumbers fields, "
                            "operand_batching_dims/start_indices_batching_dims included",
               "gather/c2": "CLIP and PROMISE_IN_BOUNDS: start indices clamped to [0, dim - slice_size]",
               "gather/c3": "FILL_OR_DROP: indices converted (wrapping) to int32/int64 as JAX "
                            "_gather_fill does; an out-of-bounds window is fill_value as a whole",
               "gather/c4": "fill_value None: NaN (float, complex), iinfo.min (signed), iinfo.max "
                            "(unsigned), True (bool); a fill_value the dtype cannot hold exactly raises",
               "gather/c5": "an empty output is returned without reading the operand",
               "gather/c6": "ONE_HOT mode raises UnsupportedPrimitiveError"},
              (XLA_OPS + "#gather", STABLEHLO + "#gather", JAX_SLICING + " _gather_lower, "
               "_gather_fill, gather (fill_value defaults)")),
    _scatter("scatter", "(old, new) -> new, or the equation's update_jaxpr",
             {"scatter/c1": "update_jaxpr None or `lambda old, new: new`: the last update of each "
                            "element wins",
              "scatter/c2": "any other update_jaxpr (x.at[i].apply(f)): evaluated once per update, in "
                            "order, with the reference's own rules"}),
    _scatter("scatter-add", "add", {**_ARITH, "scatter-add/c1": "complex: each part correctly rounded"},
             CORRECTLY_ROUNDED),
    _scatter("scatter-sub", "sub (old - update)", {**_ARITH,
                                                   "scatter-sub/c1": "complex: each part correctly rounded"},
             CORRECTLY_ROUNDED),
    _scatter("scatter-mul", "mul", {**_ARITH,
                                    "scatter-mul/c1": "complex: the equation's update_jaxpr (the "
                                                      "elementwise mul rule) once per update"},
        CORRECTLY_ROUNDED),
    _scatter("scatter-min", "min",
             {"scatter-min/c1": "NaN propagates; -0.0 < +0.0 (XLA:CPU: min(+0, -0) == -0 in either "
                                "order)",
              "scatter-min/c2": "bool: logical and",
              "scatter-min/c3": "complex: the update_jaxpr (elementwise min rule) per update"}),
    _scatter("scatter-max", "max",
             {"scatter-max/c1": "NaN propagates; -0.0 < +0.0 (XLA:CPU: max(+0, -0) == +0 in either "
                                "order)",
              "scatter-max/c2": "bool: logical or",
              "scatter-max/c3": "complex: the update_jaxpr (elementwise max rule) per update"}),
)
