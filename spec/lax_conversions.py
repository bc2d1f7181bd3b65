"""Semantics of convert_element_type, bitcast_convert_type and reduce_precision
(interp/rules/lax_conversions.py).

Confirmed in tests/test_lax_conversions.py: every value of every type of <= 16 bits converted to
every type, and random/special/bound-neighbour values of the 32/64-bit types, bitwise against
XLA:CPU; where XLA:CPU differs (BACKEND_PROPERTIES) the reference is checked against an exact
Fraction oracle and XLA:CPU against a model of what it computes.
"""
from __future__ import annotations

from .base import EXACT, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
STABLEHLO = "https://openxla.org/stablehlo/spec"
EMITTER = "xla/service/elemental_ir_emitter.cc"
JAX_LAX = "jax/_src/lax/lax.py"
NUMERICS = "docs/numerics.md (XLA:CPU observations)"

SEMANTICS = table(
    Semantics(
        "convert_element_type", "Elementwise conversion to new_dtype (weak_type and sharding do not change values).",
        {"convert_element_type/c1": "int -> int: two's complement wrap-around to the target width "
                                    "(int2/int4/uint2/uint4 included)",
         "convert_element_type/c2": "int/float -> float: the exact value rounded once to nearest even "
                                    "(64-bit integers and float64 included: no double rounding through "
                                    "float32)",
         "convert_element_type/c3": "float -> narrower float overflow: "
                                    "float16/bfloat16/float8_e5m2/float8_e4m3/float8_e3m4 -> +-inf; "
                                    "float8_e4m3fn/e4m3fnuz/e5m2fnuz/e4m3b11fnuz -> NaN (no inf; f32 "
                                    "1e6 -> NaN, 464 -> 448, 480 -> NaN); float4_e2m1fn saturates to "
                                    "+-6 (inf too) and NaN -> -0.0; float8_e8m0fnu: powers of two only, "
                                    "ties round up (3 -> 4), negative, zero and NaN -> NaN, overflow -> "
                                    "NaN",
         "convert_element_type/c4": "float -> int: NaN -> 0; x >= T(INT_MAX) -> INT_MAX and x <= "
                                    "T(INT_MIN) -> INT_MIN where T(v) is the bound rounded into the "
                                    "source float type (so float4_e2m1fn 6.0 -> int8 gives 127, and "
                                    "float32 2**31 -> int32 gives INT_MAX); otherwise truncation toward "
                                    "zero; unsigned: negatives -> 0",
         "convert_element_type/c5": "complex -> real/int: the real part, then as above (JAX lowers with "
                                    "hlo.real first); complex -> complex: each part rounded once",
         "convert_element_type/c6": "anything -> bool: x != 0 (NaN -> True, -0.0 -> False, subnormals "
                                    "-> True)",
         "convert_element_type/c7": "bool -> anything: 0 or 1",
         "convert_element_type/c8": "subnormals are kept (never flushed)"},
        (XLA_OPS + "#convertelementtype", STABLEHLO + "#convert",
         EMITTER + " (kConvert: float->int clamp compares in the source type)",
         JAX_LAX + " _convert_element_type_lower", "ml_dtypes float8/float4 conversion (overflow per type)",
         NUMERICS), EXACT),
    Semantics(
        "bitcast_convert_type", "Reinterpret the bits; a width change adds/removes a minor dimension.",
        {"bitcast_convert_type/c1": "same width: the bit pattern unchanged (NaN payloads too)",
         "bitcast_convert_type/c2": "wider -> narrower (ratio k): a new minor dimension of size k, "
                                    "element j holds bits [j*n, (j+1)*n) (least significant first: f32 "
                                    "1.0 -> u8 [0, 0, 0x80, 0x3f])",
         "bitcast_convert_type/c3": "narrower -> wider: the minor dimension (of size k) is packed the "
                                    "same way",
         "bitcast_convert_type/c4": "sub-byte types use their own bits: int4[1, -2] -> uint8 0xE1"},
        (XLA_OPS + "#bitcastconverttype", JAX_LAX + " _bitcast_convert_type_shape_rule"), EXACT),
    Semantics(
        "reduce_precision", "Round to a float with exponent_bits/mantissa_bits, keeping the operand type.",
        {"reduce_precision/c1": "mantissa: round to nearest even by adding 0111..1 + last kept bit and "
                                "truncating (a carry into the exponent is correct)",
         "reduce_precision/c2": "exponent: magnitudes above the reduced range -> +-inf; at or below the "
                                "reduced minimum normal exponent -> +-0 (reduced subnormals are "
                                "flushed: XLA's algorithm)",
         "reduce_precision/c3": "NaN stays NaN (also with mantissa_bits == 0)",
         "reduce_precision/c4": "float16/bfloat16/float32/float64: on the operand's own bits; other "
                                "narrow floats: exactly upcast to float16 (float32 for float8_e8m0fnu), "
                                "reduced there, converted back (round to nearest even), as XLA:CPU "
                                "computes them"},
        (EMITTER + " EmitReducePrecisionIR (quiet_nans=false)", XLA_OPS + "#reduceprecision",
         STABLEHLO + "#reduce_precision"), EXACT),
    Semantics(
        "to_edtype", "convert_element_type to an extended dtype whose rules allow conversion "
        "(jax.experimental.primal_tangent_dtype, Pallas semaphores): the operand becomes the "
        "extended value's representation, bits unchanged.",
        {"to_edtype/c1": "the operand's dtype is the representation dtype (core.physical_element_aval) "
                         "and its trailing dimensions the representation shape; the result drops them",
         "to_edtype/c2": "PRNG key dtypes do not allow conversion (prng.py KeyTyRules.allow_conversion "
                         "= False): jax.random.wrap_key_data binds random_wrap instead"},
        (JAX_LAX + " convert_element_type, to_edtype_p (lowering: the operand)",), EXACT),
    Semantics(
        "from_edtype", "convert_element_type from an extended dtype to its representation dtype: "
        "the representation, bits unchanged.",
        {"from_edtype/c1": "the result has the representation shape as trailing dimensions"},
        (JAX_LAX + " from_edtype_p (lowering: the operand)",), EXACT),
)

# Where XLA:CPU (jaxlib 0.10.2 and 0.12.0.1) computes something other than SEMANTICS.
BACKEND_PROPERTIES = (
    ("xla:cpu", "flush-to-zero",
     "float32, bfloat16 and float64 subnormal inputs and results of a conversion are flushed to "
     "signed zero (float32 1e-40 -> float64 gives 0; then e.g. -> float8_e8m0fnu gives NaN); float16 "
     "subnormals are kept.", NUMERICS),
    ("xla:cpu", "double-rounding-through-f32",
     "float64 -> float16, float64 -> bfloat16 and int32/int64/uint32/uint64 -> bfloat16 are computed "
     "through float32, rounding twice (int64 2**40 + 2**32 + 1 -> bfloat16 gives 2**40, the correctly "
     "rounded value is 2**40 + 2**33); float64 -> float8/float4 rounds once.",
     "tests/test_lax_conversions.py test_float64_and_int64_round_once_near_ties"),
)
