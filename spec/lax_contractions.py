"""Semantics of dot_general, ragged_dot_general, conv_general_dilated and fft
(interp/rules/lax_contractions.py).

dot_general / conv / ragged_dot: each float output element is the exact sum of the exact
products of its inputs, rounded once to the output dtype (round to nearest even). The reference
computes a float64 BLAS product (products of float32-and-narrower inputs are exact in float64;
float64 inputs use long double), bounds its error by gamma_K * |a|_2 |b|_2 (Cauchy-Schwarz
bound of sum |a_k b_k|), keeps every element whose error interval rounds to one output value, and
recomputes the others in long double (double-double for float64 inputs) and then exactly (see
spec/lax_reductions.py for the method). Measured cost (bench/contractions.py, loaded 2-core
machine): f32 matmul 256^3 ~1.2x, 1024^3 ~3-4x the hand-written float32 ``a @ b`` (~1.05-3.4x a
float64 ``a @ b``): a float64 GEMM is the floor of this design; float64 inputs use a long double
product (no BLAS) and are 50-150x slower than ``a @ b``. Rows/columns holding inf/NaN are recomputed without BLAS: IEEE specials are order
independent (NaN if any 0*inf, NaN or +inf meeting -inf).

Backends are judged under DOT_PRODUCT: |backend - ref| <= (K u_acc + u_in + u_out) sum|a_k b_k|
(spec/compliance.py); precision=DEFAULT on TPU / TF32 on GPU is the matmul-precision allowance.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
JAX_LAX = "jax/_src/lax/lax.py"
JAX_CONV = "jax/_src/lax/convolution.py"

_DOT_EDGES = (
    "float: exact sum of exact products, rounded once to the output dtype (preferred_element_type)",
    "float: an exact zero result is +0.0 (XLA accumulates from +0.0), except K == 1 where the single "
    "product is the result (-0.0 kept; XLA:CPU simplifies such dots to a multiply)",
    "float: NaN if a product is NaN (0 * inf) or +inf and -inf products meet; else +-inf",
    "integer: wraps around modulo 2**bits of the output type; bool: OR of ANDs",
    "mixed input dtypes: converted to the output dtype first, except two float8 types "
    "(jax/_src/lax/lax.py _handle_dot_precision, CPU/GPU lowering)",
    "precision (DEFAULT/HIGH/HIGHEST) does not change the reference; explicit DotAlgorithm presets other "
    "than DEFAULT are unsupported (raise)",
    "complex: real part = exact sum of ar*br - ai*bi, imaginary = exact sum of ar*bi + ai*br, each rounded once",
    "64-bit integer inputs with a float output: unsupported (raise)",
)

SEMANTICS = table(
    Semantics("dot_general", "Generalised tensor contraction with batch dimensions.", _DOT_EDGES,
              (XLA_OPS + "#dotgeneral", JAX_LAX + " _dot_general_lower"), CORRECTLY_ROUNDED),
    Semantics("ragged_dot_general", "Grouped matmul: group g covers [sum(sizes[:g]), sum(sizes[:g+1])) of the "
              "ragged dimension (ragged non-contracting: rows use rhs[g]; ragged contracting: one output per "
              "group; ragged batch: an ordinary dot_general).",
              _DOT_EDGES + ("rows outside every group give 0", "group sizes are accumulated in their integer type",
                            "group_offset, multi-dimensional group_sizes, batch dims in ragged modes: unsupported"),
              (JAX_LAX + " _ragged_dot_general_impl",), CORRECTLY_ROUNDED),
    Semantics("conv_general_dilated", "Convolution (any dimension numbers, strides, padding incl. negative, lhs "
              "and rhs dilation, feature groups, batch groups).",
              _DOT_EDGES + ("padding and lhs-dilation holes are zeros (they add exact zero products)",
                            "feature groups: output feature o uses input features (o // (O/G)) * C/G ...",
                            "batch groups: output feature o uses lhs batch block o // (O/B) (batch split as (B, N/B))",
                            "feature_group_count and batch_group_count both > 1: unsupported"),
              (XLA_OPS + "#conv_convolution", JAX_CONV), CORRECTLY_ROUNDED),
    Semantics("fft", "FFT / IFFT (1/n scaled) / RFFT / IRFFT over the last len(fft_lengths) axes.",
              ("accuracy-defined: computed with NumPy's pocketfft in complex128 (complex64 results) or long double "
               "(complex128 results) and rounded once; error before rounding about log2(n) * u_wide * |x|_2; "
               "not certified correctly rounded (coverage: partial)",
               "IRFFT ignores the imaginary parts of the DC and Nyquist bins (Hermitian input assumed)"),
              (XLA_OPS + "#fft", "jax/_src/lax/fft.py"), CORRECTLY_ROUNDED,
              "Backends: ABS bound c * log2(n) * eps * |x|_2 per output element."),
)
