"""Semantics of sort, top_k and approx_top_k (interp/rules/lax_ordering.py)."""
from __future__ import annotations

from .base import EXACT, Semantics, table

JAX_LAX = "jax/_src/lax/lax.py"

SEMANTICS = table(
    Semantics("sort", "Sort `num_keys` key operands lexicographically along `dimension`, permuting all operands.",
              {"sort/c1": "floats: -0.0 is canonicalised to +0.0 and every NaN to +NaN, then IEEE total "
                          "order: -inf < ... < -0.0 == +0.0 < ... < +inf < NaN (all NaN equal, after "
                          "+inf)",
               "sort/c2": "complex keys: (real, imag), each canonicalised as a float",
               "sort/c3": "ties keep input order (stable); with is_stable=False XLA may order ties "
                          "differently, the reference gives the stable order (coverage: partial)",
               "sort/c4": "bool: False < True; integers: numeric order"},
              (JAX_LAX + " _sort_lt_comparator, _canonicalize_float_for_sort",
               "docs/numerics.md: XLA:CPU sort gives -inf,-0,0,1,nan"), EXACT),
    Semantics("top_k", "The k largest elements along `axis` (newest JAX; last axis before), descending, with indices (int32).",
              {"top_k/c1": "floats compare in IEEE total order without canonicalisation (XLA TopK): "
                           "+NaN > +inf > ... > +0.0 > -0.0 > ... > -inf > -NaN",
               "top_k/c2": "ties: lowest index first (stable)"},
              ("xla/service/topk_rewriter / chlo.top_k (comparator with TOTALORDER)", JAX_LAX + " _top_k_lower"),
              EXACT),
    Semantics("approx_top_k", "approx_max_k / approx_min_k.",
              {"approx_top_k/c1": "off TPU XLA computes it exactly: a stable sort with JAX's sort order "
                                  "(-0.0 == +0.0, every NaN above +inf) and the first k (max_k: "
                                  "descending, so NaN first; min_k: ascending, NaN last)",
               "approx_top_k/c2": "recall_target and reduction_input_size_override do not change the "
                                  "CPU result",
               "approx_top_k/c3": "XLA:CPU's order of NaN and of -0.0/+0.0 ties depends on k (observed "
                                  "JAX 0.12: k == n sorts with JAX's comparator like the reference; 1 < "
                                  "k < n uses TopK's IEEE total order for max_k; k == 1 is a comparison "
                                  "reduction where NaN breaks the order; jaxlib 0.10.2 differs again "
                                  "for k == n): with NaN or signed-zero ties only the reference's "
                                  "result is defined here, backends are compared on NaN-free inputs",
               "approx_top_k/c4": "aggregate_to_topk=False: CPU/GPU still return k candidates; a "
                                  "TPU-sized result shape is unsupported"},
              ("jax/_src/lax/ann.py _approx_top_k_lowering (fallback=True on CPU/GPU)",), EXACT,
              "TPU returns approximate results by design: backends other than CPU/GPU need a recall check."),
)
