"""Semantics of the reduction family (interp/rules/lax_reductions.py).

Float sums: the reference result of every output element is the exact (infinitely precise) sum
of its terms, rounded once to the output dtype with round-to-nearest-even. It does not depend on
any summation order, so it is the one right answer backends are measured against (under
DOT_PRODUCT / ABS error bounds in spec/compliance.py, because a backend sums in the output type
in an order of its own choosing).

How the reference computes it fast (interp/rules/lax_reductions.py ``certified_round``):
  1. s = the sum in float64 (float32 and narrower inputs: every term exact) or long double
     (float64 inputs), accumulated by NumPy in its own order; A >= sum |x| (k * max|x| for sums,
     |a|_2 |b|_2 for dot products, sum |x| otherwise).
  2. Any order of k-1 additions has |s - exact| <= gamma_{k-1} sum|x| (Higham, Accuracy and
     Stability of Numerical Algorithms, 2nd ed., eq. 4.4); the reference uses gamma_{k+1} A
     (A itself rounded upwards), widened by the rounding of s +- bound itself.
  3. Where round(s - bound) == round(s + bound) bitwise, that is the answer (rounding is monotone).
  4. Otherwise the element is recomputed by a second tier: float32-and-narrower inputs in long
     double (products still exact, a 2**11 times tighter bound); float64 inputs in double-double
     (Ogita, Rump, Oishi 2005, Dot2: each product split exactly into four float64 terms, TwoSum
     accumulation, bound gamma_{n-1}^2 sum|term|). Still undecided elements are computed exactly
     with Python integers (mantissa << exponent) and rounded to nearest-even by integer arithmetic.
  float64 -> bfloat16/float8 rounding goes through round-to-odd float32 because ml_dtypes' casts
  from float64 round twice.
  An exact zero sum is +0.0 (XLA starts from the +0.0 init value: -0.0 + -0.0 chains end at +0.0;
  checked against XLA:CPU), except a sum of a single term, which is that term. Non-finite sums are exact already (no finite partial sum can overflow
  the wide type): NaN if any NaN or +inf and -inf meet, else the infinity.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, EXACT, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
STABLEHLO = "https://openxla.org/stablehlo/spec"
RULES = "interp/rules/lax_reductions.py"
JAX_LAX = "jax/_src/lax/lax.py"
JAX_WIN = "jax/_src/lax/windowed_reductions.py"
JAX_LOOPS = "jax/_src/lax/control_flow/loops.py"

_SUM_EDGES = {"sum/rounded-once": "float: exact sum rounded once to the output dtype (round to nearest "
                                  "even), never order dependent",
              "sum/zero-is-plus-zero": "float: an exact zero sum of two or more terms is +0.0, also for "
                                       "all -0.0 terms (XLA accumulates from its +0.0 init value); a "
                                       "sum of exactly one term is that term (-0.0 kept: XLA does not "
                                       "accumulate it); cumsum of length >= 2 is a zero-padded "
                                       "reduce_window, so every prefix counts as several terms (checked "
                                       "against XLA:CPU on both JAX versions)",
              "sum/no-partial-overflow": "float: partial sums never overflow in the reference; XLA sums "
                                         "in the output type, where a finite exact sum can overflow to "
                                         "inf (and inf + -inf to NaN): a backend property",
              "sum/nan-and-inf": "float: NaN if any term is NaN or both +inf and -inf occur; else +-inf "
                                 "if an infinity occurs",
              "sum/overflow-to-inf": "float: a finite exact sum beyond the output range rounds to +-inf "
                                     "(float8 types without inf: the value convert_element_type gives, "
                                     "NaN for e4m3fn)",
              "sum/subnormals-kept": "float: subnormal terms and results are kept (XLA:CPU flushes "
                                     "them: allowance flush-to-zero)",
              "sum/int-wrap": "integer: wraps around modulo 2**bits of the output type",
              "sum/complex-parts": "complex: real and imaginary parts each correctly rounded"}

# Complex max/min: JAX lowers max/min of complex to select(real_eq ? imag_cmp : real_cmp, x, y)
# (jax/_src/interpreters/mlir.py _minmax_hlo), with IEEE comparisons.
_COMPLEX_EXTREMUM = {"complex_extremum/lexicographic": "complex (complex64 and complex128): "
                                                       "lexicographic order, real part first, then the "
                                                       "imaginary part where the real parts compare "
                                                       "equal (JAX's lowering, _minmax_hlo)",
                     "complex_extremum/init-folded": "complex: the init value (-inf+0j for max, +inf+0j "
                                                     "for min) is folded in, since it is no identity of "
                                                     "this order (max(-inf-1j) is -inf+0j on XLA:CPU), "
                                                     "except in a reduction of exactly one element, "
                                                     "which XLA's simplifier replaces by the element "
                                                     "(measured on XLA:CPU, both JAX versions)",
                     "complex_extremum/signed-zeros-tie": "complex: -0.0 and +0.0 compare equal, so "
                                                          "between values that differ only in the sign "
                                                          "of a zero XLA's pick depends on its "
                                                          "reduction order; the reference orders -0.0 < "
                                                          "+0.0 (as real max/min). Backends may return "
                                                          "either tied value",
                     "complex_extremum/nan-undefined": "complex with NaN: IEEE comparisons with NaN are "
                                                       "false, so the comparator is not an order and "
                                                       "XLA's result depends on the reduction order it "
                                                       "leaves unspecified (XLA:CPU folds short rows "
                                                       "sequentially, long ones in a tree: measured). "
                                                       "Where a NaN can decide an output (a NaN real "
                                                       "part in the reduced set, or a NaN imaginary "
                                                       "part on an element whose real part equals the "
                                                       "extreme real part of the NaN-free elements) the "
                                                       "reference raises UndefinedBehaviorError; "
                                                       "elsewhere the NaN cannot be picked and the "
                                                       "result is defined"}

_COMPLEX_PROD = {"complex_prod/rounded-once": "complex: real and imaginary parts of the exact product "
                                              "each rounded once (certified from a complex128 / "
                                              "clongdouble left-to-right product with the normwise "
                                              "bound sqrt(5) u per multiply of Brent, Percival, "
                                              "Zimmermann 2007; undecided parts and prefixes leaving "
                                              "the wide range: exact Gaussian-integer product); an "
                                              "exact zero part of a product of nonzero factors is +0.0",
                 "complex_prod/naive-prefixes": "complex: prefixes with an inf/NaN or zero factor keep "
                                                "the left-to-right naive product's value (IEEE signs of "
                                                "zeros, inf/NaN propagation): XLA leaves the "
                                                "multiplication order unspecified, so backends may "
                                                "differ in zero signs and inf/NaN there"}

SEMANTICS = table(
    Semantics("reduce_sum", "Sum over `axes`.", _SUM_EDGES,
              (XLA_OPS + "#reduce", JAX_LAX + " reduce_sum_p", RULES + " certified_round"),
              CORRECTLY_ROUNDED,
              "Backends: DOT_PRODUCT-style bound |b - ref| <= (K u_out) sum|x| + ulp/2 (XLA sums in the "
              "output type, in tree or vectorised order)."),
    Semantics("reduce_prod", "Product over `axes`.",
              {"reduce_prod/c1": "float: exact product rounded once (carried as mantissa * 2**E, so "
                                 "intermediate over/underflow cannot happen; undecided elements "
                                 "recomputed exactly with integers)",
               "reduce_prod/c2": "float: NaN if any NaN or 0 * inf; else +-0 if any zero, +-inf if any "
                                 "infinity; sign = xor of signs",
               "reduce_prod/c3": "integer: wraps around",
               **_COMPLEX_PROD},
              (XLA_OPS + "#reduce", JAX_LAX + " reduce_prod_p"), CORRECTLY_ROUNDED),
    Semantics("reduce_max", "Maximum over `axes` (XLA max: NaN propagates, -0.0 < +0.0).",
              {"reduce_max/c1": "any NaN in the slice gives NaN",
               "reduce_max/c2": "max(-0.0, +0.0) = +0.0",
               "reduce_max/c3": "empty slice: -inf (lowest integer, False)",
               **_COMPLEX_EXTREMUM},
              (XLA_OPS + "#reduce", "docs/numerics.md (XLA:CPU max/min)",
               "jax/_src/interpreters/mlir.py _minmax_hlo", JAX_LAX + " _get_max_identity"), EXACT),
    Semantics("reduce_min", "Minimum over `axes` (XLA min: NaN propagates, -0.0 < +0.0).",
              {"reduce_min/c1": "any NaN in the slice gives NaN",
               "reduce_min/c2": "min(-0.0, +0.0) = -0.0",
               "reduce_min/c3": "empty slice: +inf / highest",
               **_COMPLEX_EXTREMUM},
              (XLA_OPS + "#reduce", "jax/_src/interpreters/mlir.py _minmax_hlo"), EXACT),
    Semantics("reduce_and", "Bitwise/logical AND over `axes`.", {"reduce_and/c1": "empty: all ones / True"},
              (XLA_OPS + "#reduce",)),
    Semantics("reduce_or", "Bitwise/logical OR over `axes`.", {"reduce_or/c1": "empty: 0 / False"},
              (XLA_OPS + "#reduce",)),
    Semantics("reduce_xor", "Bitwise/logical XOR over `axes`.", {"reduce_xor/c1": "empty: 0 / False"},
              (XLA_OPS + "#reduce",)),
    Semantics("reduce", "Generic (multi-operand) reduce with a computation jaxpr.",
              {"reduce/c1": "the computation is evaluated elementwise on whole slices: pairwise halving "
                            "of the reduced axis, then combined with the init values (acc first)",
               "reduce/c2": "XLA leaves the order unspecified: results are only defined for associative "
                            "computations whose init value is an identity; the reference's tree order "
                            "is one valid order"},
              (XLA_OPS + "#reduce", STABLEHLO + "#reduce"), EXACT),
    Semantics("argmax", "Index of the maximum along one axis.",
              {"argmax/c1": "NaN is the maximum: the first NaN's index",
               "argmax/c2": "ties (including -0.0 vs +0.0): lowest index",
               "argmax/c3": "result in index_dtype"},
              (JAX_LAX + " _compute_argminmax", "docs/numerics.md"), EXACT),
    Semantics("argmin", "Index of the minimum along one axis.",
              {"argmin/c1": "NaN is the minimum: the first NaN's index",
               "argmin/c2": "ties (including -0.0 vs +0.0): lowest index"},
              (JAX_LAX + " _compute_argminmax",), EXACT),
    Semantics("reduce_window_sum", "Windowed sum (padding, strides, base and window dilation).",
              {**_SUM_EDGES, "reduce_window_sum/c1": "padding and base-dilation holes contribute 0"},
              (XLA_OPS + "#reducewindow", JAX_WIN), CORRECTLY_ROUNDED),
    Semantics("reduce_window_max", "Windowed max.", {"reduce_window_max/c1": "padding/holes are -inf (lowest "
                                                                             "integer)",
                                                     "reduce_window_max/c2": "NaN propagates",
                                                     "reduce_window_max/c3": "-0.0 < +0.0",
                                                     **_COMPLEX_EXTREMUM},
              (XLA_OPS + "#reducewindow", JAX_WIN), EXACT),
    Semantics("reduce_window_min", "Windowed min.", {"reduce_window_min/c1": "padding/holes are +inf (highest "
                                                                             "integer)",
                                                     "reduce_window_min/c2": "NaN propagates",
                                                     **_COMPLEX_EXTREMUM},
              (XLA_OPS + "#reducewindow", JAX_WIN), EXACT),
    Semantics("reduce_window", "Generic windowed reduce with a computation jaxpr.",
              {"reduce_window/c1": "padding/holes hold the init value",
               "reduce_window/c2": "window elements combined pairwise, then with the init value",
               "reduce_window/c3": "closed-over consts: unsupported"},
              (XLA_OPS + "#reducewindow", JAX_WIN), EXACT),
    Semantics("select_and_scatter_add", "Gradient of max/min pooling: each window selects one operand "
              "element and adds its source value there.",
              {"select_and_scatter_add/c1": "selection scans the window in row-major order over "
                                            "in-bounds elements; the selected element is replaced by "
                                            "candidate e unless select(selected, e) (XLA "
                                            "SelectAndScatter); padding is never selected",
               "select_and_scatter_add/c2": "with select=ge: the first maximum wins ties; a NaN is "
                                            "selected when met and replaced by the next element",
               "select_and_scatter_add/c3": "each output element is the correctly rounded sum of the "
                                            "source values scattered to it (+0 if none)"},
              (XLA_OPS + "#selectandscatter", JAX_WIN), CORRECTLY_ROUNDED),
    Semantics("select_and_scatter", "Generic SelectAndScatter with select and scatter computations.",
              {"select_and_scatter/c1": "selection as select_and_scatter_add, with the select "
                                        "computation",
               "select_and_scatter/c2": "each output starts at init_value; the scatter computation "
                                        "folds in the source values that selected it, in row-major "
                                        "window order (XLA leaves the order unspecified: results are "
                                        "defined for associative, commutative scatter computations)"},
              (XLA_OPS + "#selectandscatter", JAX_WIN + " _select_and_scatter"), EXACT),
    Semantics("select_and_gather_add", "JVP of max/min pooling: per window, the tangent of the selected operand element.",
              {"select_and_gather_add/c1": "JAX's lowering: a reduce_window over (operand, tangent) "
                                           "pairs from init (-inf for ge, +inf for le; tangent 0) that "
                                           "keeps the accumulator when select(acc, e), in window order; "
                                           "padding holds the init",
               "select_and_gather_add/c2": "a window whose elements all equal the init value yields "
                                           "tangent 0"},
              (JAX_WIN + " _select_and_gather_add_lowering",), EXACT),
    Semantics("cumsum", "Inclusive prefix sum along `axis` (reverse: suffix sums).", _SUM_EDGES,
              (JAX_LOOPS + " cumsum_p",), CORRECTLY_ROUNDED),
    Semantics("cumprod", "Inclusive prefix product.", {"cumprod/c1": "float: every prefix product "
                                                                     "correctly rounded (as reduce_prod)",
                                                       "cumprod/c2": "integer: wraps",
                                                       **_COMPLEX_PROD},
              (JAX_LOOPS + " cumprod_p",), CORRECTLY_ROUNDED),
    Semantics("cummax", "Inclusive prefix max (NaN propagates, -0.0 < +0.0).",
              {"cummax/c1": "lowered to a reduce_window of the whole prefix padded with the init value",
               **_COMPLEX_EXTREMUM},
              (JAX_LOOPS + " cumred_reduce_window_impl",), EXACT),
    Semantics("cummin", "Inclusive prefix min (NaN propagates, -0.0 < +0.0).", _COMPLEX_EXTREMUM,
              (JAX_LOOPS + " cumred_reduce_window_impl",), EXACT),
    Semantics("cumlogsumexp", "Inclusive prefix log(sum(exp(x))).",
              {"cumlogsumexp/c1": "every prefix correctly rounded: r_k = m_k + log1p(s_k) with m_k the "
                                  "running maximum and s_k the sum of exp(x_i - m_k) over the other "
                                  "terms, evaluated in float64 (long double for float64) with a "
                                  "rigorous running error bound; elements whose bound straddles a "
                                  "rounding boundary are recomputed in mpmath with Ziv's test "
                                  "(128..4096 bits; undecided at 4096 bits: ArithmeticError, never an "
                                  "uncertified value)",
               "cumlogsumexp/c2": "a prefix with exactly one finite term (the rest -inf) is that term "
                                  "exactly, -0.0 giving +0.0 (log(1) = +0, as JAX's logaddexp from the "
                                  "-inf init value); every other finite result is transcendental "
                                  "(Lindemann-Weierstrass), so no other exact case exists",
               "cumlogsumexp/c3": "-inf terms contribute nothing; all -inf: -inf; any +inf: +inf; NaN "
                                  "propagates"},
              (JAX_LOOPS + " cumlogsumexp_p",), CORRECTLY_ROUNDED,
              "Backends: ULP/ABS bound; XLA evaluates an associative scan of logaddexp in the input type."),
)
