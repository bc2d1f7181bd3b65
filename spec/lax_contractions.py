"""Semantics of dot_general, ragged_dot_general, conv_general_dilated and fft
(interp/rules/lax_contractions.py).

dot_general / conv / ragged_dot: each float output element is the exact sum of the exact
products of its inputs, rounded once to the output dtype (round to nearest even). The reference
computes a float64 BLAS product (products of float32-and-narrower inputs are exact in float64;
float64 inputs use long double), bounds its error by gamma_K * |a|_2 |b|_2 (Cauchy-Schwarz
bound of sum |a_k b_k|), keeps every element whose error interval rounds to one output value, and
recomputes the others more precisely and then exactly (see spec/lax_reductions.py for the
method). Float64 inputs (wide long double) whose exponents allow it are multiplied as exact slice products on
the float64 BLAS (Ozaki scheme: rows/columns cut into rho-bit slices, K (2**rho + 1)**2 <= 2**53, so
every slice GEMM is exact in any summation order), the slice products summed by error-free
extraction and rounded from the (hi, lo) pair; a near-tie is computed exactly. Inputs spanning more
than ~2**1000 fall back to a long double product with double-double refinement.
Float32 (and narrower, finite) inputs take a fast path that never materialises a full-size
bound (interp/rules/lax_contractions.py _certify_rank1): the bound is the rank-1 matrix
gamma_{K+1} |a_i|_2 |b_j|_2 (norm bounds from a float32 einsum, rigorous for its rounding and
underflow); stage 1 rounds s - bb_i and s + bb_i with one bound per row (bb_i >= the row's largest
element bound, widened as certified_round widens) in two fused subtract/add-and-round passes and
keeps every element whose two roundings have the same bits (rounding is monotone, so that is the
correctly rounded exact sum); the rest (~0.08% at K = 1024 on random data, growing like K**1.5)
are re-summed in sqrt(K) chunks (error bound ~sqrt(K)/2 times below BLAS's) and handed to
certified_round with their element bounds: one error-free extraction step in float64 (Rump,
Ogita, Oishi, SIAM J. Sci. Comput. 31(1) 2008, ExtractVector; extracted_sums), then the exact
sum. A few (at most FSUM_TERMS products in all) are instead rounded exactly at once:
math.fsum's correctly rounded float64 sum plus the sign of its residual (lax_reductions
fsum_round). tests/test_lax_contractions.py
test_dot_undecided_elements_refined_exactly drives constructed near-ties through every tier.

Measured cost (JAX 0.12.0.1, f32 a @ b, random normal data; process CPU time, one BLAS thread,
median of interleaved rounds, the same run; the 2-core machine was at load 11-16, so treat as
+-0.1): against the same-semantics NumPy code (inputs to float64, a float64 BLAS a @ b, one
rounding to float32), 128^3 2.8x (was 3.9x), 256^3 1.55x (2.1x), 512^3 1.19x (1.5x), 1024^3 1.18x
(1.8x). The rest at small sizes is per-call overhead (~30 NumPy calls, ~0.2 ms) and the usual
one or two undecided elements. Wall-clock ratios with a multi-threaded BLAS were not measurable
at that load (bench/contractions.py: the float32 naive a @ b itself varied 10x). f64 matmul 256^3
(x64): 208 ms, 1.9x a long double ``a @ b``, 15x a float64 BLAS ``a @ b`` (before the slices:
~50 s). Rows/columns holding inf/NaN are recomputed without BLAS: IEEE specials are order
independent (NaN if any 0*inf, NaN or +inf meeting -inf).

Backends are judged under DOT_PRODUCT: |backend - ref| <= (K u_acc + u_in + u_out) sum|a_k b_k|
(spec/compliance.py); precision=DEFAULT on TPU / TF32 on GPU is the matmul-precision allowance.
"""
from __future__ import annotations

import math

from .base import CORRECTLY_ROUNDED, Semantics, table

XLA_OPS = "https://openxla.org/xla/operation_semantics"
JAX_LAX = "jax/_src/lax/lax.py"
JAX_CONV = "jax/_src/lax/convolution.py"

_DOT_EDGES = {"dot/rounded-once": "float: exact sum of exact products, rounded once to the output dtype "
                                  "(preferred_element_type)",
              "dot/zero-is-plus-zero": "float: an exact zero result is +0.0 (XLA accumulates from "
                                       "+0.0), except K == 1 where the single product is the result "
                                       "(-0.0 kept; XLA:CPU simplifies such dots to a multiply)",
              "dot/nan-and-inf": "float: NaN if a product is NaN (0 * inf) or +inf and -inf products "
                                 "meet; else +-inf",
              "dot/int-wrap": "integer: wraps around modulo 2**bits of the output type; bool: OR of "
                              "ANDs",
              "dot/mixed-dtypes": "mixed input dtypes: converted to the output dtype first, except two "
                                  "float8 types (jax/_src/lax/lax.py _handle_dot_precision, CPU/GPU "
                                  "lowering)",
              "dot/precision-ignored": "precision (DEFAULT/HIGH/HIGHEST) does not change the reference "
                                       "(a backend's bf16/TF32 passes are the matmul-precision "
                                       "allowance)",
              "dot/complex-parts": "complex: real part = exact sum of ar*br - ai*bi, imaginary = exact "
                                   "sum of ar*bi + ai*br, each rounded once",
              "dot/int64-to-float-unsupported": "64-bit integer inputs with a float output: unsupported "
                                                "(raise)"}

XLA_ALGORITHMS = ("xla/xla_data.proto PrecisionConfig.Algorithm",
                  "xla/backends/gpu/codegen/triton/dot_algorithms.cc (SplitF32, EmitBF16x3Matmul, "
                  "EmitBF16x6Matmul, EmitBF16x9Matmul, ZeroNaNs)",
                  JAX_LAX + " DotAlgorithm, DotAlgorithmPreset, get_algorithm_compute_types, _handle_dot_precision")

_ALGORITHM_EDGES = {"dot_algorithm/rounding-steps": "explicit algorithm (DotAlgorithmPreset other than "
                                                    "DEFAULT, or DotAlgorithm), as JAX lowers it: (1) "
                                                    "each input converted (round to nearest even) to "
                                                    "the preset's input type unless its dtype is one "
                                                    "the preset accepts (BF16 presets accept float32 "
                                                    "storage); (2) inputs rounded to the precision "
                                                    "type: BF16_* to bfloat16, TF32_* to tf32 (float32 "
                                                    "with a 10-bit significand, round to nearest even: "
                                                    "the reference's choice, hardware may truncate), "
                                                    "F16/F32/F64/ANY_F8 as they are; (3) every product "
                                                    "exact, the sum rounded once to the accumulation "
                                                    "type (F32 for *_F32, the output dtype for "
                                                    "ANY_F8_ANY_F8_ANY); (4) converted to the dot's "
                                                    "result type (the output dtype if the preset "
                                                    "supports it, else the accumulation type) and then "
                                                    "to the output dtype",
                    "dot_algorithm/split-products": "_X3 / _X6 / _X9: each float32 input split x = c0 + "
                                                    "c1 (+ c2), c_i = bf16(x - c0 - ... - c_{i-1}) "
                                                    "computed in float32 (TF32_TF32_F32_X3: tf32 "
                                                    "components); the sum covers hi*hi + hi*lo + lo*hi "
                                                    "(X3), + hi*lo2 + lo2*hi + mid*mid (X6, with c0, "
                                                    "c1, c2 = hi, mid, lo), all nine (X9), rounded once",
                    "dot_algorithm/split-inf-nan": "_X3/_X6/_X9: an output element whose inputs hold "
                                                   "inf/NaN is the hi*hi sum alone (XLA's ZeroNaNs "
                                                   "drops the low products' sum where it is not "
                                                   "finite), so inf stays inf",
                    "dot_algorithm/fast-accum": "*_FAST_ACCUM and allow_imprecise_accumulation: the "
                                                "same exact value (the backend's imprecision is "
                                                "measured under DOT_PRODUCT)",
                    "dot_algorithm/unsupported": "ANY_F8_* with a non-float8 input: ValueError (as "
                                                 "JAX's lowering); DotAlgorithm with component counts "
                                                 "other than 1: unsupported (no definition to follow)"}

def split_truncation(kept, parts: int, u: float) -> float:
    """How far a split preset's exact value (the ``kept`` component products (i, j), each exact,
    summed exactly) can lie from the exact product of its float32 inputs, as a multiple of
    sum_k |a_k||b_k|, without underflow in the splits.

    Derivation: each component rounds the rest to nearest, c_i = rnd(e_i), e_0 = x,
    e_{i+1} = e_i - c_i (exact in float32), so |e_i| <= u^i |x| and |c_i| <= (1 + u) u^i |x|
    (u: the component type's unit roundoff, bf16 2**-8, tf32 2**-11), and x = c_0 + ... + c_{n-1}
    + e_n. The product a_k b_k is the sum of every pair of those n + 1 terms; the preset drops
    the pairs it does not keep, each at most |a_k||b_k| times the product of the two factors above.
    X3 (bf16): 3u^2 + 6u^3 + 4u^4 = 774 * 2**-24; X6: 4.04 * 2**-24; X9: 2.02 * 2**-24 (the splits
    are XLA's, XLA_ALGORITHMS, after Henry, Tang, Heinecke, arXiv:1904.06376; this bound is derived
    here and checked on exact emulations in tests/test_lax_contractions.py).
    """
    size = [(1 + u) * u ** i for i in range(parts)] + [u ** parts]   # |c_i| / |x|, then |e_n| / |x|
    return sum(size[i] * size[j] for i in range(parts + 1) for j in range(parts + 1) if (i, j) not in kept)


def split_dot_length(k: int, products: int, u: float) -> int:
    """The DOT_PRODUCT length (spec/compliance.py) that bounds a backend computing a split preset
    the reference's way (components rounded to nearest, unit roundoff u; ``products`` component
    products per term, each exact in float32, k * products of them accumulated in float32)
    against the reference.

    The backend is within gamma_{n-1} sum|c_i c'_j| of the preset's exact value (n = k * products
    terms summed; Higham section 3.1), and sum|c_i c'_j| <= w sum|a||b| with
    w = ((1 + u) / (1 - u))**2 >= (sum_i |c_i| / |x|)**2 (split_truncation's sizes); the reference
    is that exact value rounded once, within u_acc (1 + split_truncation) sum|a||b|. DOT_PRODUCT(K)
    allows (gamma_K + u_acc) sum|a||b|, and gamma is convex, so K = ceil((n - 1) w) + 1 covers both.
    """
    w = ((1 + u) / (1 - u)) ** 2
    return math.ceil((k * products - 1) * w) + 1


# What XLA:CPU computes differently (jaxlib 0.10.2, 0.11.2 and 0.12.0.1), found by the tests.
BACKEND_PROPERTIES = (
    ("xla:cpu", "dot-algorithm-input-rounding",
     "XLA:CPU compiles only DEFAULT, F16_F16_F16, F32_F32_F32, F64_F64_F64, BF16_BF16_F32, BF16_BF16_F32_X3 "
     "and BF16_BF16_F32_X6 (JAX raises for the others on CPU: jax/_src/lax/lax.py _handle_dot_precision, "
     "'The CPU backend silently ignores the algorithm spec'). Its library dot kernels (every dot but a "
     "1 x K x 1 vector product) ignore the bf16 input rounding and splits: BF16_BF16_F32(_X3/_X6) results "
     "are bitwise its F32_F32_F32 result, a float32 dot of the unrounded inputs (openxla/xla "
     "xla/backends/cpu/ynn_support.cc IsDotSupportedByYnn picks the F32 x F32 -> F32 kernel by dtype alone; "
     "XLA's algorithm rewriting and checking are GPU passes, xla/service/gpu/transforms/"
     "dot_algorithm_rewriter.cc, algorithm_checker.cc), within the float32 dot bound plus what the preset "
     "drops (split_truncation) of the exact product of the reference. A 1 x K x 1 dot goes to the elemental "
     "emitter, which refuses _X3/_X6 (and, in jaxlib 0.10.2, BF16_BF16_F32) at compile time with "
     "INVALID_ARGUMENT 'Algorithm not supported by the ElementalIrEmitter' (xla/service/algorithm_util.cc "
     "IsSupportedByElementalIrEmitter) and from jaxlib 0.11 gives the reference's BF16_BF16_F32 value",
     "tests/test_lax_contractions.py test_dot_algorithm_presets_vs_xla_cpu"),
)

SEMANTICS = table(
    Semantics("dot_general", "Generalised tensor contraction with batch dimensions.",
              {**_DOT_EDGES, **_ALGORITHM_EDGES},
              (XLA_OPS + "#dotgeneral", JAX_LAX + " _dot_general_lower") + XLA_ALGORITHMS, CORRECTLY_ROUNDED),
    Semantics("ragged_dot_general", "Grouped matmul: group g covers [sum(sizes[:g]), sum(sizes[:g+1])) of the "
              "ragged dimension (ragged non-contracting: rows use rhs[g]; ragged contracting: one output per "
              "group, the group axis first; ragged batch: an ordinary dot_general, group_sizes unused).",
              {**_DOT_EDGES,
               **_ALGORITHM_EDGES,
               "ragged_dot_general/c1": "rows outside every group give 0",
               "ragged_dot_general/c2": "group sizes are accumulated in their integer type",
               "ragged_dot_general/c3": "group_sizes [prefix..., g]: one set of groups per position of "
                                        "the prefix dims (the batch dims, then the dims before the "
                                        "ragged one among the non-contracting (mode 1) or contracting "
                                        "(mode 2) dims); a 1-D group_sizes is broadcast over them",
               "ragged_dot_general/c4": "precision / algorithms as dot_general: the semantics are those "
                                        "of JAX's dense formulation (_ragged_dot_general_impl, the "
                                        "lowering of CPU and of every platform without a ragged-dot "
                                        "instruction; the TPU/GPU instruction lowering keeps the input "
                                        "conversions but drops the algorithm)",
               "ragged_dot_general/c5": "group_offset: JAX defines no result (its implementation and "
                                        "every lowering raise 'Unimplemented group_offset support', and "
                                        "an array parameter cannot be traced): raises"},
              (JAX_LAX + " _ragged_dot_general_impl, _ragged_dot_prefix_dims",), CORRECTLY_ROUNDED),
    Semantics("conv_general_dilated", "Convolution (any dimension numbers, strides, padding incl. negative, lhs "
              "and rhs dilation, feature groups, batch groups).",
              {**_DOT_EDGES,
               "conv_general_dilated/c1": "padding and lhs-dilation holes are zeros (they add exact "
                                          "zero products)",
               "conv_general_dilated/c2": "feature groups: output feature o uses input features (o // "
                                          "(O/G)) * C/G ...",
               "conv_general_dilated/c3": "batch groups: output feature o uses lhs batch block o // "
                                          "(O/B) (batch split as (B, N/B))",
               "conv_general_dilated/c4": "feature_group_count and batch_group_count both > 1: "
                                          "ValueError (JAX's shape rule rejects it: XLA defines no such "
                                          "convolution)",
               "conv_general_dilated/c5": "an explicit dot algorithm does not change a convolution: JAX "
                                          "lowers it as precision DEFAULT without an algorithm "
                                          "attribute (jax/_src/lax/convolution.py, lax._full_precision)"},
              (XLA_OPS + "#conv_convolution", JAX_CONV), CORRECTLY_ROUNDED),
    Semantics("fft", "FFT / IFFT (1/n scaled) / RFFT / IRFFT over the last len(fft_lengths) axes.",
              {"fft/c1": "every output part is the exact DFT of the exact inputs rounded once "
                         "(interp/rules/_fft_exact.py): an O(n log n) FFT (mixed radix, direct radix p "
                         "<= 64, Bluestein for larger prime factors) in float64 (float32 parts) or "
                         "double-double (float64 parts, and what float64 left) with a rigorous normwise "
                         "bound (Higham ch. 24, evaluated a posteriori per batch element) decides "
                         "nearly every part exactly against the rounding boundaries; the rest go to "
                         "exact fixed-point integer sums (128..512-bit twiddles), the exact rational "
                         "test in the cyclotomic field Q(zeta_M) (exact zeros of symmetric inputs and "
                         "ties, rounded exactly; an exact zero is +0), then mpmath with Ziv's test; one "
                         "still undecided at 4096 bits raises ArithmeticError",
               "fft/c2": "inputs holding inf/NaN: an FFT algorithm's IEEE propagation (pocketfft in the "
                         "wide type; matches XLA:CPU on the tested cases; not certified: a backend's "
                         "inf/NaN pattern depends on its algorithm)",
               "fft/c3": "cost: O(n log n) per axis (bench/fft.py; 1024-point complex128 ~8 ms CPU); "
                         "inputs whose outputs are mostly exact zeros or far below ||x||_2 * 2**-40 pay "
                         "the exact tiers (~1 s at 1024 points)",
               "fft/c4": "IRFFT ignores the imaginary parts of the DC and Nyquist bins (Hermitian input "
                         "assumed)"},
              (XLA_OPS + "#fft", "jax/_src/lax/fft.py"), CORRECTLY_ROUNDED,
              "Backends: ABS bound c * log2(n) * eps * |x|_2 per output element."),
)
