"""Semantics of the lax elementwise primitives (interp/rules/lax_elementwise.py).

Every edge case below is confirmed against XLA:CPU in tests/test_lax_elementwise.py (bitwise on
exhaustive pairs of <= 8-bit types and on special-value pairs of the others), except where a
BACKEND_PROPERTIES entry says XLA:CPU computes something else; there the test checks the
reference against an exact oracle (Python fractions / integers) instead.
"""
from __future__ import annotations

from .base import CONVENTION, CORRECTLY_ROUNDED, EXACT, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
STABLEHLO = "https://openxla.org/stablehlo/spec"
EMITTER = "xla/service/elemental_ir_emitter.cc"
JAX_LAX = "jax/_src/lax/lax.py"
NUMERICS = "docs/numerics.md (XLA:CPU observations)"

_ROUND = {"elementwise/rounded-once": "float16/float32/float64: IEEE-754 operation in the type (NumPy); "
                                      "bfloat16, float8_*, float4_e2m1fn: exact operands in float64, "
                                      "the result rounded once to nearest even with the type's overflow "
                                      "rule (see spec/lax_conversions.py convert_element_type)",
          "elementwise/subnormals-kept": "subnormal inputs and results are kept (never flushed)"}
_INT_WRAP = {"elementwise/int-wrap": "integers: two's complement wrap-around at the element width "
                                     "(int2/int4 included)"}
_COMPARE = {"compare/nan-unordered": "any comparison with NaN is False except ne (True)",
            "compare/signed-zeros-equal": "-0.0 == +0.0",
            "compare/complex-both-parts": "complex: eq/ne compare both parts"}
_TOTAL_ORDER = {
    "total_order/ieee-layouts": "IEEE layouts: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN; "
                                "NaNs ordered by payload; -0.0 != +0.0",
    "total_order/fnuz-nan-lowest": "fnuz float8 types: the NaN pattern 0x80 is below everything "
                                   "(XLA:CPU compares the float32 upcast, where it is -NaN)",
    "total_order/e8m0-bit-order": "float8_e8m0fnu: bit order (no sign bit), NaN (0xFF) on top",
    "total_order/complex-lexicographic": "complex operands (JAX accepts them for eq_to only): (real, "
                                         "imag) compared lexicographically with the total order, so "
                                         "eq_to is total-order equality of both parts (-0.0 != +0.0 "
                                         "in either part; a NaN equals the identical NaN)",
}

# A complex multiply/divide part is not an IEEE operation. XLA:CPU rounds each product (error
# <= 1/2 ulp of |x||y| each) before the sum, so on a part with |part| >= |x||y|/4 it may be up to
# ~2 * 4 ulps from the reference's single rounding (finite, non-overflowing operands); parts that
# cancel below that carry only an absolute error of a few ulps of |x||y|
# (tests/test_lax_elementwise.py test_complex_arithmetic_within_budget).
COMPLEX_ULP_BUDGET = 8

SEMANTICS = table(
    Semantics("add", "x + y.", {**_INT_WRAP, **_ROUND, "add/c1": "complex: componentwise"},
              (XLA_OPS + "#element-wise_binary_arithmetic_operations", STABLEHLO + "#add"),
              CORRECTLY_ROUNDED),
    Semantics("add_any", "x + y (the add of JAX's linear algebra of tangents); as add.",
              {**_INT_WRAP, **_ROUND},
              ("jax/_src/ad_util.py add_jaxvals_p",), CORRECTLY_ROUNDED),
    Semantics("sub", "x - y.", {**_INT_WRAP, **_ROUND}, (STABLEHLO + "#subtract",), CORRECTLY_ROUNDED),
    Semantics("mul", "x * y; with out_dtype=T: convert(x, T) * convert(y, T).",
              {**_INT_WRAP,
               **_ROUND,
               "mul/c1": "complex: (ac - bd) + (ad + bc)i, each part the textbook expression rounded "
                         "once (complex64: exactly, via exact float64 products and a round-to-odd sum; "
                         "complex128: computed in long double); inf/NaN operands give what that formula "
                         "gives"},
              (STABLEHLO + "#multiply", JAX_LAX + " _nary_lower_hlo (out_dtype converts the operands)"),
              CORRECTLY_ROUNDED, "complex parts: CONVENTION (XLA:CPU rounds each product; within "
              f"{COMPLEX_ULP_BUDGET} ulp)"),
    Semantics("div", "x / y.",
              {"div/c1": "signed int: truncating; x / 0 == -1; INT_MIN / -1 == INT_MIN",
               "div/c2": "unsigned int: x / 0 == all ones (2**n - 1)",
               "div/c3": "float: IEEE (x/0 == +-inf, 0/0 == NaN), correctly rounded as add",
               "div/c4": "complex: NumPy's Smith algorithm in the wider complex type, rounded once per "
                         "part"},
              (EMITTER + " EmitIntegerDivide", XLA_OPS + "#element-wise_binary_arithmetic_operations",
               NUMERICS), CORRECTLY_ROUNDED, "complex: CONVENTION"),
    Semantics("rem", "Remainder with the sign of the dividend.",
              {"rem/c1": "int: x % 0 == x; INT_MIN % -1 == 0; x - trunc(x / y) * y otherwise",
               "rem/c2": "float: C fmod (exact): fmod(x, 0) and fmod(+-inf, y) are NaN, fmod(x, +-inf) "
                         "== x"},
              (EMITTER + " EmitIntegerRemainder", STABLEHLO + "#remainder"), EXACT),
    Semantics("neg", "-x.", {"neg/c1": "INT_MIN wraps to INT_MIN",
                             "neg/c2": "floats flip the sign (fnuz types: -0 is +0)"},
              (STABLEHLO + "#negate",), EXACT),
    Semantics("sign", "-1, 0 or 1 with the operand's type.",
              {"sign/c1": "float: sign(+-0) == +-0, sign(NaN) == NaN",
               "sign/c2": "unsigned: 0 or 1",
               "sign/c3": "complex: x / |x|, 0 for 0 (CONVENTION for non-finite parts)"},
              (STABLEHLO + "#sign", JAX_LAX + " _sign_lower_hlo"), EXACT),
    Semantics("abs", "|x|.", {"abs/c1": "abs(INT_MIN) == INT_MIN (wraps)",
                              "abs/c2": "float: the sign cleared, abs(NaN) is NaN",
                              "abs/c3": "complex: hypot(re, im) computed in the wider type and rounded "
                                        "once (CONVENTION: not proven correctly rounded)"},
              (STABLEHLO + "#abs", NUMERICS), EXACT),
    Semantics("square", "x * x (as mul).", {**_INT_WRAP, **_ROUND}, (JAX_LAX + " square_p",),
              CORRECTLY_ROUNDED),
    Semantics("integer_pow", "x ** y for a static int y as JAX lowers it.",
              {"integer_pow/c1": "y == 0: ones (also for NaN, inf and 0 inputs)",
               "integer_pow/c2": "y == 3: (x*x)*x; otherwise binary exponentiation (square-and-multiply "
                                 "from the low bit), every product an equation rounded to the dtype",
               "integer_pow/c3": "y < 0: 1 / x**|y| (one more rounded division)",
               **_INT_WRAP},
              (JAX_LAX + " _integer_pow, _integer_pow_lowering",), EXACT,
              "exact with respect to JAX's lowering, not the correctly rounded power"),
    Semantics("mulhi", "The high N bits of the 2N-bit product.",
              {"mulhi/c1": "signed: of the signed product; unsigned: of the unsigned product"},
              (JAX_LAX + " mulhi / _mulhi_impl", "chlo.mulhi"), EXACT),
    Semantics("max", "Maximum.",
              {"max/c1": "NaN if either operand is NaN",
               "max/c2": "max(-0.0, +0.0) == +0.0 (either order)",
               "max/c3": "bool: or; integers: numeric",
               "max/c4": "complex: lexicographic on (real, imag) as x > y ? x : y (a NaN part makes the "
                         "comparison false, so y is returned), as XLA:CPU computes it"},
              (STABLEHLO + "#maximum", NUMERICS, "tests/test_lax_elementwise.py test_complex_max_min_pairs"), EXACT),
    Semantics("min", "Minimum.",
              {"min/c1": "NaN if either operand is NaN",
               "min/c2": "min(-0.0, +0.0) == -0.0 (either order)",
               "min/c3": "bool: and; integers: numeric",
               "min/c4": "complex: lexicographic on (real, imag) as x < y ? x : y (a NaN part returns "
                         "y)"},
              (STABLEHLO + "#minimum", NUMERICS, "tests/test_lax_elementwise.py test_complex_max_min_pairs"), EXACT),
    Semantics("clamp", "min(max(x, lo), hi) (lo and hi may be scalars).",
              {"clamp/c1": "lo > hi gives hi: clamp(3, 2, 1) == 1",
               "clamp/c2": "NaN in any operand gives NaN",
               "clamp/c3": "complex operands (JAX accepts them at trace time): minimum(maximum(x, lo), "
                           "hi) with the spec's lexicographic complex maximum/minimum, i.e. max = x > "
                           "lo ? x : lo and min = m < hi ? m : hi comparing (real, imag) "
                           "lexicographically; a comparison involving a NaN part is false (the same "
                           "max/min as XLA:CPU's max and min); StableHLO plans to drop complex clamp "
                           "(openxla/stablehlo#560)"},
              (XLA_OPS + "#clamp", STABLEHLO + "#clamp", NUMERICS), EXACT),
    *[Semantics(name, f"Comparison {name} (FLOAT/SIGNED/UNSIGNED compare type).", _COMPARE,
                (STABLEHLO + "#compare", JAX_LAX + " _compare_lower_hlo"), EXACT)
      for name in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[Semantics(name, f"Comparison {name[:2]} with XLA's TOTALORDER compare type (used by sort).",
                _TOTAL_ORDER, (STABLEHLO + "#compare (TOTALORDER)", JAX_LAX + " _sort_lt_comparator"),
                EXACT)
      for name in ("eq_to", "le_to", "lt_to")],
    Semantics("is_finite", "Neither inf nor NaN.", {}, (STABLEHLO + "#is_finite",), EXACT),
    *[Semantics(name, f"Bitwise {name} (logical for bool).", {}, (STABLEHLO + "#" + name,), EXACT)
      for name in ("and", "or", "xor", "not")],
    Semantics("shift_left", "x << s.",
              {"shift_left/c1": "the shift amount is read as unsigned: s >= bit width (negative s "
                                "included) gives 0"},
              (EMITTER + " SaturateShiftIfNecessary", STABLEHLO + "#shift_left", NUMERICS), EXACT),
    Semantics("shift_right_logical", "x >> s with zero fill.",
              {"shift_right_logical/c1": "s >= bit width (unsigned) gives 0"},
              (EMITTER + " SaturateShiftIfNecessary", NUMERICS), EXACT),
    Semantics("shift_right_arithmetic", "x >> s with sign fill.",
              {"shift_right_arithmetic/c1": "s >= bit width (unsigned) gives -1 for negative x, 0 "
                                            "otherwise"},
              (EMITTER + " SaturateShiftIfNecessary", NUMERICS), EXACT),
    Semantics("population_count", "Number of set bits of the element's own bit pattern.",
              {"population_count/c1": "popcount(int32 -1) == 32",
               "population_count/c2": "the count wraps into the element type (int2: popcount(-1) = 2 -> "
                                      "-2)"},
              (STABLEHLO + "#popcnt", NUMERICS), EXACT),
    Semantics("clz", "Leading zero bits within the element width.", {"clz/c1": "clz(0) == bit width"},
              (STABLEHLO + "#count_leading_zeros", NUMERICS), EXACT),
    Semantics("floor", "Round toward -inf (exact).", {"floor/c1": "-0.0, +-inf, NaN unchanged"},
              (STABLEHLO + "#floor",), EXACT),
    Semantics("ceil", "Round toward +inf (exact).", {"ceil/c1": "ceil(-0.5) == -0.0"},
              (STABLEHLO + "#ceil",), EXACT),
    Semantics("round", "Round to an integral value.",
              {"round/c1": "AWAY_FROM_ZERO (lax.round default): halfway cases away from zero, "
                           "round(-2.5) == -3",
               "round/c2": "TO_NEAREST_EVEN (jnp.round): halfway cases to even, round(2.5) == 2",
               "round/c3": "the sign of zero is kept: round(-0.4) == -0.0"},
              (STABLEHLO + "#round_nearest_afz", STABLEHLO + "#round_nearest_even", JAX_LAX + " RoundingMethod",
               NUMERICS), EXACT),
    Semantics("nextafter", "The next representable value of x toward y.",
              {"nextafter/c1": "NaN if either is NaN",
               "nextafter/c2": "x == y gives y (nextafter(-0.0, +0.0) == +0.0)",
               "nextafter/c3": "from +-0: the smallest subnormal with y's sign (subnormals are never "
                               "flushed)",
               "nextafter/c4": "narrow floats: chlo.next_after's bit expansion: top bit as sign; x == y "
                               "-> y; |x| bits 0 -> y if |y| bits are 0 too, else (y's top bit) | 1; x "
                               "- 1 if the top bits differ or |x| > |y| (as integers), else x + 1 (fnuz "
                               "types too)",
               "nextafter/c5": "float8_e8m0fnu (no sign, no zero): the same expansion, so its top "
                               "exponent bit is taken as the sign: 0x00 (2**-127) and 0x80 (2**1) act "
                               "as zeros, e.g. nextafter(2**1, 2**-127) == 2**-127 and "
                               "nextafter(2**-126, 2**1) == 2**-127 (XLA:CPU, all 65536 pairs)"},
              ("chlo.next_after (stablehlo/transforms/ChloLegalizeToStablehlo.cpp)", "C99 nextafter"), EXACT),
    Semantics("select_n", "cases[which] elementwise (which: bool or integer, scalar or full shape).",
              {"select_n/c1": "bool which: False -> cases[0], True -> cases[1]",
               "select_n/c2": "which outside [0, n) raises UndefinedBehaviorError (XLA leaves it "
                              "undefined)"},
              (JAX_LAX + " select_n, _select_hlo_lowering",), EXACT),
    Semantics("complex", "re + im*i.", {}, (STABLEHLO + "#complex",), EXACT),
    Semantics("real", "Real part.", {}, (STABLEHLO + "#real",), EXACT),
    Semantics("imag", "Imaginary part.", {}, (STABLEHLO + "#imag",), EXACT),
    Semantics("conj", "complex(real(x), -imag(x)); complex(x, +0) for a real x.",
              {"conj/c1": "conj of +0 imaginary part is -0"}, (JAX_LAX + " _conj_impl",), EXACT),
)

# Where XLA:CPU (jaxlib 0.10.2 and 0.12.0.1) computes something other than SEMANTICS, found by the
# tests; each is a property of that backend, not of the program.
BACKEND_PROPERTIES = (
    ("xla:cpu", "flush-to-zero",
     "float32, bfloat16 and float64 subnormal inputs and results of arithmetic, comparisons, "
     "max/min, conversions are flushed to (signed) zero; float16 subnormals are kept. float8_e8m0fnu "
     "is computed in float32, so 2**-127 is read as 0 (then NaN: e8m0fnu has no zero).",
     NUMERICS),
    ("xla:cpu", "complex-mul-div-rounding",
     "complex multiply rounds each of the four products before adding (no single rounding per part); "
     f"division differs from Smith's algorithm; within {COMPLEX_ULP_BUDGET} ulp on finite operands; "
     "inf/NaN operands of complex division give different results (e.g. (inf+inf i)/tiny).",
     "tests/test_lax_elementwise.py test_complex_arithmetic_within_budget"),
    ("xla:cpu", "int4-popcount-mulhi",
     "population_count of int2/int4 counts the bits of the sign-extended storage byte "
     "(popcount(int4 -8) == 5, the element's own count is 1); mulhi of int2/int4/uint2/uint4 is "
     "wrong (mulhi(int4 -8, int4 -8) gives 0, the high half of 64 is 4).",
     "tests/test_lax_elementwise.py test_unary / test_mulhi_by_hand"),
    ("xla:cpu", "int2-scalar-constant-compare",
     "max/min/clamp of an int2 array with a broadcast int2 scalar constant compare wrongly "
     "(max(-1, int2[0, 1]) gives [-1, -1]); with array operands the result is right.",
     "tests/test_lax_elementwise.py test_clamp"),
    ("xla:cpu", "complex-clamp",
     "complex clamp compares real parts only: m = re(lo) >= re(x) ? lo : x, then "
     "re(m) <= re(hi) ? m : hi (a NaN real part selects x, then hi); clamp(0j, 1j, 1j) gives 0j "
     "where the spec's lexicographic minimum(maximum(1j, 0j), 1j) is 1j. Its lax.max/lax.min are "
     "lexicographic, so only the fused clamp differs.",
     "tests/test_lax_elementwise.py test_complex_clamp"),
    ("xla:cpu", "complex-total-order-eq",
     "eq_to (compare EQ, TOTALORDER) of complex operands is IEEE equality of the parts on jaxlib "
     "0.12.0.1: 0j == -0j and NaN != NaN, where the spec's total order separates -0.0 from +0.0 and "
     "equates identical NaNs; jaxlib 0.10.2 refuses to compile it (HLO verifier: 'Expected comparison "
     "type FLOAT').",
     "tests/test_lax_elementwise.py test_complex_eq_to"),
)
