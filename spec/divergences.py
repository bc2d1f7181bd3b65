"""Known divergences: real upstream bugs and documented differences, each with a link, the
runners and JAX versions it affects, and the name of the matcher that recognises it in a failing result.

A failing (case, runner) whose difference one of these matches is reported as
``known-divergence`` with the link; when the upstream bug is fixed the case passes and the
nightly history shows it as fixed.

Data only: the matchers and the numerical models they use are the suite's
(conformance/divergence_models.py MATCHERS, by the name an entry gives).
"""
from __future__ import annotations

import dataclasses

from . import lax_special


@dataclasses.dataclass(frozen=True)
class Divergence:
    id: str
    link: str
    summary: str
    runners: tuple[str, ...]                    # fnmatch patterns
    primitives: tuple[str, ...] = ()            # the case must exercise one of these (empty: any)
    dtypes: tuple[str, ...] = ()                # a failing output must have one of these (empty: any)
    jax_versions: tuple[str, str | None] = ("0", None)   # [first affected, first fixed)
    # The matcher that recognises it in the values: a name of conformance/divergence_models.py
    # MATCHERS (None: the fields above suffice).
    matcher: str | None = None
    # What the entry explains: "fail" (values differ), "timeout" (the backend never returns),
    # "crash" (the backend process dies). Timeouts and crashes carry no values: such an entry names
    # the cases it explains (fnmatch patterns of case ids) and its matcher sees no outputs.
    outcomes: tuple[str, ...] = ("fail",)
    cases: tuple[str, ...] = ()                 # fnmatch patterns of case ids (empty: any)

    def __post_init__(self):
        if set(self.outcomes) - {"fail"} and not self.cases:
            raise ValueError(f"divergence {self.id}: a timeout/crash entry must name its cases")


# --- XLA:CPU special functions and subnormal arguments (found by the conformance cases) -------------
# Worst ULP distance from the correctly rounded reference seen on the conformance cases (quick
# profile, seed 0, JAX 0.10.2 and 0.12.0.1) where it exceeds spec/lax_special.py XLA_CPU_ULP (the
# regression budgets measured on DOMAINS by tests/test_lax_special.py). Keys: (primitive, dtype).
XLA_CPU_CASE_ULP: dict[tuple[str, str], int] = {
    ("digamma", "float32"): 29,     # digamma(1.5) (near the root 1.4616...: 0.0364900 vs 0.0364899)
    ("logistic", "float16"): 4,     # a float16 subnormal result (2**-22) returned as 0
    ("lgamma", "float32"): 57,      # JAX 0.10.2 only (0.12.0.1 stays within 6): lgamma(x) = 0.2322603
    # Found by the nightly seed search (2026-11-23; the worst elements confirmed with mpmath at 60
    # digits: the reference is right). Sampled measurements: budget = 2 x the worst seen; the
    # specials grid is fixed, so its measurement is exhaustive and the budget is the worst itself.
    ("bessel_i1e", "float64"): 14,  # 7 ulp at x = 7.9903 (15 seeds of .../bessel_i1e/float64/33x65, JAX 0.12.0.1; 6 on 0.10.2)
    # computed in float32 and rounded: igammac(6.1035e-5, 0.09998) = 1.1081e-4 vs 1.1128e-4 (8 ulp; for a
    # tiny a XLA forms 1 - P(a, x) in float32, losing the digits of Q ~ 1e-4), igammac(65504, 65504) 2 ulp
    ("igammac", "float16"): 8,
    ("igamma_grad_a", "float64"): 392,   # 196 ulp on a result of -1.67e-57 (a = 19.84, x = 0.01024; 4 seeds of 33x65)
    # 630 ulp at (a, x) = (49.636, 58.055), Q = 0.1190 (11 seeds of 33x65, JAX 0.12.0.1; 481 in 6 on 0.10.2): XLA forms the
    # prefactor x^a e^-x / Gamma(a) as exp(a log x - x - lgamma(a)), whose argument is a difference of
    # terms of size ~a log x (~200 here): their absolute rounding error becomes the relative error of Q
    ("igammac", "float64"): 1260,
    # Found by the program fuzzer (JAX 0.12.0.1, inputs past the measured domain's 12): erfc(24.525142673650148)
    # 244 ulp off (the result is ~1e-263); 2 x that, the rule above
    ("erfc", "float64"): 488,
    # Found by the program fuzzer (2026-11-29, JAX 0.10.2 and 0.12.0.1): sinh(586.82) 376 ulp off, past the
    # measured domain's 80. CHLO computes sinh for |x| >= 1 as exp(x + log(1/2)) - exp(log(1/2) - x)
    # (openxla/stablehlo stablehlo/transforms/ChloLegalizeToStablehlo.cpp
    # materializeSinhApproximationForLargeX): rounding x + log(1/2) costs up to ulp(x)/2 of relative
    # error, growing with |x|. Measured: 4005 arguments in [-710.4, 710.4] (uniform, seed 20261129,
    # and the ends), worst 495 ulp at x = 553.13 on both JAX ends; 2 x that, the rule above
    ("sinh", "float64"): 990,
    # Found by the program fuzzer (2026-11-29, JAX 0.10.2 only: truncated_normal's erf_inv): 19 ulp at
    # erf_inv(0.6431...) = 0.6503. Measured on JAX 0.10.2: 16000 arguments (8000 in [0.55, 0.75], 2000 in
    # [-0.75, -0.55], 6000 in [-0.99, 0.99]; seed 20261129), worst 21 ulp at x = 0.64312; JAX 0.12.0.1
    # stays within 3 there. 2 x that, the rule above
    ("erf_inv", "float64"): 42,
}

# Primitives whose XLA:CPU results at a subnormal argument are neither the value there nor the value
# at zero (the flush-to-zero allowance): DAZ reads the argument as 0 in one part of the expansion and
# not in another. Observed: cbrt(+-2**-149) = -5.6e-16, atan2(+-2**-149, +-2**-149) = NaN,
# pow(2**-149, 0.1) = 2**-15 (as if x = 2**-150), nextafter(2**-149, -2**-149) = -2**-149 (x == y after
# DAZ returns y's raw bits), igamma(2**-149, x) = NaN, complex mul (2**-149) * inf = NaN. lgamma
# (JAX 0.10.2) gives the value at zero (+inf), which flush-to-zero would explain, but in the same output
# as accuracy differences, which the allowance's replay alone cannot.
XLA_CPU_DAZ_INCONSISTENT = frozenset({
    "cbrt", "atan2", "pow", "nextafter", "mul", "igamma", "igammac", "igamma_grad_a", "digamma",
    "polygamma", "zeta", "regularized_incomplete_beta", "lgamma"})

# Errors that are absolute, not relative: in units of eps * max(1, |f(x)|) of the output dtype, the
# largest |backend - reference| XLA:CPU reaches, where that exceeds the ULP budget. XLA's digamma and
# lgamma (openxla/xla xla/hlo/builder/lib/math.cc Digamma, Lgamma: Lanczos approximation with g = 7,
# plus the reflection formula for x < 0.5) add terms of size O(1) and more (log t, A'(z)/A(z), g/t;
# lgamma: (z + 1/2 - t/log t) log t, log(pi) - log|sin(pi x)|), so their rounding errors are a few
# eps in absolute terms, and near a zero of the function (digamma: 1.4616..., -0.5040..., -1.5734...;
# lgamma: 1, 2, -2.457...) the ULP distance has no bound. Measured (nightly 2026-11-23, the cases'
# input distribution, every element checked against the correctly rounded reference, the worst
# points confirmed with mpmath at 60 digits; JAX 0.12.0.1 / 0.10.2): digamma float64 9.0 / 7.5
# (151 / 23 seeds of lax_special/digamma/float64/33x65; ULPs up to 11930 at x = 1.46179), digamma
# float32 10.75 (100 seeds of .../float32/33x65; 73648 ulp at x = -0.50407), lgamma float64 23 / 23
# (100 / 50 seeds; 944043 ulp at x = 2.0000117). Budget: 2 x the larger measurement (the rule of
# spec/lax_special.py XLA_CPU_ULP).
XLA_CPU_CASE_ABS: dict[tuple[str, str], float] = {
    ("digamma", "float64"): 18,
    ("digamma", "float32"): 22,
    ("lgamma", "float64"): 46,
    ("lgamma", "float32"): 62,      # JAX 0.10.2: 31 (60 seeds; 80059 ulp at the zero -2.45709); 0.12.0.1: 1.9
}

# XLA's erf_inv (math.cc ErfInv32 / ErfInv64, Giles' polynomials) computes w = -log1p(-x * x): the
# product x * x is rounded before 1 - x^2 is formed, and near |x| = 1 that rounding is a large
# relative error of 1 - x^2. XLA:CPU's result is then the erf_inv of sqrt(fl(x * x)), not of x:
# within 3.8 ulp of that (float32: every 7th float32 in [2^-60, 1) and every float32 in [0.5, 1),
# 80 million values; float64: the 200 worst of 4 million values near 1, with mpmath), while it is
# up to 64.7 ulp from erf_inv(x) in float32 (at x = 0.99982744, exhaustively over [0.5, 1); the
# sample below 0.5 stays within 3.5) and 498928 ulp in float64 (at 1 - x = 7.45e-9 = 2^-27, where
# the dropped low part of x^2, k^2 2^-106 for x = 1 - k 2^-53, reaches half an ulp of 1). Same on JAX
# 0.10.2 and 0.12.0.1. Computing 1 - x^2 as (1 - x)(1 + x) would remove it (an upstream report).
XLA_ERF_INV_F32_WORST_ULP = 65      # the exhaustive float32 maximum above, rounded up

# JAX's betainc lowering (jax/_src/lax/special.py regularized_incomplete_beta_impl, a port of XLA's
# math.cc; the same on JAX 0.10.2 and 0.12.0.1) computes I_x(a, b) = h * exp(t) / a with, after the
# swap to (b, a, 1 - x) where x >= (a + 1) / (a + b + 2) (then the result is 1 - that),
# t = a log x + b log1p(-x) - (lgamma(a) + lgamma(b) - lgamma(a + b)), and h the continued fraction
# DLMF 8.17.22 by Lentz's method, stopped after num_iterations (200 float32, 600 float64; narrower
# dtypes are computed in float32). Two errors follow:
# 1. t is a sum of terms of size up to S = |a log x| + |b log1p(-x)| + |lgamma(a)| + |lgamma(b)| +
#    |lgamma(a + b)|, each rounded: an absolute error ~eps S in t, a relative error expm1(eps S) of
#    the swapped value v (I or 1 - I), so an absolute error of v expm1(eps S) in the result (1 - v
#    turns it into a large relative error when I is small: float32 737 ulp at (17.06, 0.1, 0.9556)).
#    Each iteration adds a rounding to h too; on JAX 0.10.2 the loop runs until every element of the
#    array has converged (0.12 masks converged elements), so every element may take up to the cap.
# 2. Near the mean the fraction needs more iterations as a + b grows (a = b at the mean: float64 53
#    at 1e2, 495 at 1e5, 2227 at 1e7; float32 275 at 1e5): past the cap h is a truncated approximant
#    and the result anything (float64 betainc(1e9, 1e9, 0.5) = -1.1955; float32 -inf, 1.0 on 0.10.2).
# Measured (2026-11-23, JAX 0.10.2 and 0.12.0.1; 3405 float32 and 3767 float64 points: a, b = 10^1..
# 10^12 with b/a = 1, 3, 1/3, 30 at the mean +- 0, 0.5, 1, 3, 6 sd, and one parameter 0.5 / 2 / 20 /
# 200 at quantiles 1e-6..0.99; plus 8 seeds of the nightly's 33x65, 1x130, 2x3x4 cases): where the
# fraction converges within the cap, |XLA - I| - ulp(I) <= v expm1(R eps (S + n)) with n the
# iterations run (0.12: the element's own; 0.10.2: the cap) holds with R <= 0.74 (float32) and 2.82
# (float64, JAX 0.10.2; 1.64 on 0.12.0.1), zeros from an underflowing exp(t) aside; no point that
# needs more than the cap was within the ULP budget. K = 2 x the worst, as for the measured budgets.
BETAINC_ITERATIONS = {"float32": 200, "float64": 600}

BETAINC_MODEL_K = 6

# --- XLA:GPU special functions (the H100 evidence, JAX 0.11.2) -----------------------------------------
# The same XLA math.cc / JAX special.py algorithms as on XLA:CPU, evaluated with XLA:GPU's own float32
# arithmetic (PTX div.full, sqrt.approx and approximate transcendentals): the worst ULP distance from
# the correctly rounded reference on every recorded output (quick profile at seed 0 plus every failing
# seed of the nightly; elements at XLA_CPU_SPECIAL_ARGS arguments or with subnormal arguments or
# results excluded), measured by docs/gpu-triage.md's procedure. Budget: 2 x the worst measured, the
# rule of spec/lax_special.py XLA_CPU_ULP; the specials grids are exhaustive, so theirs count as is.
XLA_GPU_CASE_ULP: dict[tuple[str, str], int] = {
    # (primitive, dtype): 2 x worst measured (the worst in a comment)
    ("bessel_i0e", "float32"): 10,       # 5
    ("bessel_i0e", "float64"): 14,       # 7
    ("bessel_i1e", "float32"): 18,       # 9
    ("bessel_i1e", "float64"): 16,       # 8
    ("erf", "float32"): 8,               # 4
    ("erf_inv", "float32"): 22,          # 11
    ("erf_inv", "float64"): 38,          # 19
    ("erfc", "float32"): 110,            # 55
    ("erfc", "float64"): 198,            # 99
    ("igamma", "float32"): 1080,         # 540
    ("igamma", "float64"): 2268,         # 1134
    ("igamma_grad_a", "float32"): 246,   # 123
    ("igamma_grad_a", "float64"): 406,   # 203 at (a, x) = (17.057, 0.01): -1.3553e-48
    ("igammac", "float16"): 18,          # 9
    ("igammac", "float32"): 848,         # 424
    ("igammac", "float64"): 332,         # 166
    ("polygamma", "float32"): 22,        # 11
    ("polygamma", "float64"): 22,        # 11
    ("tanh", "float32"): 8,              # 4 (XLA's own budget: 3)
    ("zeta", "float32"): 18,             # 9
    ("zeta", "float64"): 60,             # 30
}

# Absolute errors (eps * max(1, |f|) multiples) where XLA's digamma/lgamma add O(1) terms (see
# XLA_CPU_CASE_ABS): 2 x the worst measured on the H100.
XLA_GPU_CASE_ABS: dict[tuple[str, str], float] = {
    ("digamma", "float32"): 20,          # 10.0 at x = 2.7948 (ULPs up to 498 near its zeros)
    ("digamma", "float64"): 88,          # 43.7 at x = -17.4015 (a reflection, |pi / tan(pi x)| ~ 1)
    ("lgamma", "float32"): 45,           # 22.5 at x = -3.0641 (ULPs up to 891)
    ("lgamma", "float64"): 27,           # 13.1 at x = -3.8389 (at its zeros 1 and 2 no ULP bound holds)
}

# --- JAX lowerings that round in the operand's own dtype (found on the H100 evidence) ---------------
# jax/_src/lax/lax.py _exp2_lower: exp2(x) = exp(log(2) * x) with log(2) a constant of x's dtype, so
# the product's rounding (bf16: ln 2 itself is 0.6914, 2.5e-3 off) becomes a relative error of the
# result; lax.py logistic_impl (GPU/CPU lowering): 1 / (1 + exp(-x)) with exp and the sum rounded
# to x's dtype (the H100's optimized HLO keeps exp and add in bf16/f16; a float16 exp(-x) overflows
# to inf below x = -11.09 and the result is 0). Each model is the lowering with every intermediate
# rounded to the dtype (or, for the product feeding exp, kept in float32: XLA may fuse it), the
# last operation correctly rounded; the backend must be within LOWERING_MODEL_ULP of it. log2 (JAX >=
# 0.11, lax.py _log2_lower) is log(x) * fl(1 / ln 2), the same way: bfloat16 log2(0.006226) = -7.375
# for -7.3125 (2 ulp).
LOWERING_MODEL_ULP = {"float32": 7, "float64": 5, "bfloat16": 1, "float16": 1}   # exp: accuracy_budget.h GPU, JAX f64 tolerance; narrow: 1

# --- XLA:GPU complex multiply (the H100 evidence, JAX 0.11.2) ------------------------------------------
# XLA expands a complex multiply into real products and sums without C99 Annex G's recovery of
# infinities: (1.5 + 1.2e-7j) * (3.4e38 + inf j) is (nan + inf j) where the reference gives
# (-inf + inf j); a part that overflows or meets a flushed subnormal is lost the same way. On ordinary
# complex128 arguments the H100's result is up to 1.48 eps |a||b| from the correctly rounded product
# (3 of 2145 elements of lax_elementwise/mul_complex/complex128/33x65 at seed 0, e.g. (100 - 100j) *
# (0.53954216782201 - 0.55270783468416j): real part -1.3165666862147631, correctly rounded
# -1.3165666862147702), past the case's DOT_PRODUCT(K=2) bound of eps |a||b|; complex64 stays within it.
# Budget: 2 x the worst measured.
GPU_COMPLEX128_MUL_EPS = 3.0

# The primitives XLA:CPU's special functions leave their domain for at extreme arguments (returning
# NaN/inf/0/1): conformance/divergence_models.py XLA_CPU_SPECIAL_ARGS says which arguments.
XLA_CPU_SPECIAL_ARG_PRIMITIVES = frozenset({
    "asin", "digamma", "igamma", "igamma_grad_a", "igammac",
    "lgamma", "mul", "polygamma", "regularized_incomplete_beta", "zeta"})


DIVERGENCES: tuple[Divergence, ...] = (
    Divergence(
        "xla-cpu-all-reduce-extremum-nan-zero",
        "https://openxla.org/stablehlo/spec#all_reduce (the reduction body JAX emits is "
        "stablehlo.maximum / minimum, https://openxla.org/stablehlo/spec#maximum: NaN propagates)",
        "XLA:CPU's all-reduce with a maximum/minimum body (lax.pmax/pmin on floats) drops NaN "
        "operands and, between -0.0 and +0.0, returns the lowest-numbered device's zero (8 host "
        "devices, JAX 0.10.2 and 0.12.0.1). Found by this suite (spmd cases, spec/spmd.py pmax).",
        runners=("xla:cpu",), primitives=("pmax", "pmin"),
        cases=("spmd/*",), matcher="all_reduce_extremum_specials"),
    Divergence(
        "tpu-interpret-prng-zeros",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py "
        "(prng_random_bits_p: 'TODO(jburnim): Implement this properly?' returns jnp.zeros)",
        "JAX's TPU interpret mode ignores pltpu.prng_seed and returns all zeros from "
        "pltpu.prng_random_bits (and from the stateful samplers built on it).",
        runners=("pallas:tpu-interpret",),
        primitives=("prng_random_bits",),
        matcher="failing_all_zero"),
    Divergence(
        "xla-rng-uniform-reaches-b",
        "https://openxla.org/xla/operation_semantics#rng (RNG_UNIFORM: values in [a, b)); "
        "xla/service/rng_expander.cc (a + (b - a) * u, rounded to nearest; float16/bfloat16 drawn in "
        "float32 and converted)",
        "XLA's lax.rng_uniform returns b itself: in a range of four ulps about one draw in eight "
        "is b (every float dtype; XLA:CPU on JAX 0.10.2 and 0.12.0.1; XLA:GPU on an H100, JAX 0.11.2: "
        "126-144 of 1024 draws, the optimized HLO is the same RngExpander arithmetic over Philox bits), and "
        "float16/bfloat16 draws reach 1.0 on [0, 1). Found by this suite (conformance/cases/random.py "
        "rng_uniform cases, output 1).",
        runners=("xla:cpu", "xla:cuda"), primitives=("rng_uniform",),
        cases=("random/rng_uniform/*",), matcher="only_the_draws_outside_fail"),
    Divergence(
        "pallas-ops-tpu-threefry-rank3",
        "https://github.com/jax-ml/jax/blob/main/jax/experimental/pallas/ops/tpu/random/prng_utils.py "
        "(blocked_iota/compute_scalar_offset use total_shape[0..1] as strides)",
        "The shipped Pallas TPU threefry kernel (plthreefry_random_bits) equals partitionable "
        "jax.random.bits only for rank <= 2: for rank >= 3 its counters use the wrong strides. "
        "Found by this suite (docs/prng.md; verified for (2,5,7) and (3,4,300)).",
        runners=("pallas:*",), primitives=("threefry2x32",),
        cases=("pallas/claims/tpu_threefry*",), matcher="rank3_outputs_fail"),
    Divergence(
        "jax-39707-log1p-f64-cpu", "https://github.com/jax-ml/jax/issues/39707",
        "float64 log1p on XLA:CPU is up to ~129 ulp from the correctly rounded result.",
        runners=("xla:cpu",), primitives=("log1p",), dtypes=("float64", "complex128"),
        matcher="within_256_ulp"),
    Divergence(
        "jax-14717-erf-above-one-cpu", "https://github.com/jax-ml/jax/issues/14717",
        "erf returns values slightly above 1 on XLA:CPU.",
        runners=("xla:cpu", "pallas:interpret", "pallas:tpu-interpret"), primitives=("erf",),
        matcher="erf_out_of_range"),
    Divergence(
        "jax-19011-fp8-minmax-nan", "https://github.com/jax-ml/jax/issues/19011",
        "min/max of fp8 values with NaN do not propagate NaN on some backends.",
        runners=("xla:*",), primitives=("max", "min"),
        dtypes=("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")),
    Divergence(
        "jax-19689-frexp-subnormal-tpu", "https://github.com/jax-ml/jax/issues/19689",
        "frexp of subnormals is wrong on TPU (no subnormal support).",
        runners=("xla:tpu",), primitives=("frexp",)),
    Divergence(
        "jax-25047-pallas-gpu-float-to-int8", "https://github.com/jax-ml/jax/issues/25047",
        "Pallas GPU converts negative floats to int8 as 0.",
        runners=("pallas:triton",), primitives=("convert_element_type",), dtypes=("int8",)),
    Divergence(
        "xla-40862-f64-rsqrt-blackwell", "https://github.com/openxla/xla/issues/40862",
        "f64 rsqrt is inaccurate on NVIDIA Blackwell.",
        runners=("xla:cuda",), primitives=("rsqrt",), dtypes=("float64",)),
    Divergence(
        "pallas-interpret-triton-atomic-duplicates",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_rmw_discharge_rule: x_new = ref.at[idx].set(monoid(ref[idx], val)))",
        "JAX's HLO interpret mode discharges a Triton atomic_add/max/min as gather -> op -> "
        "scatter-set, so when several lanes of one atomic hit the same element all but one update "
        "is lost (a GPU applies every lane's update atomically). Distinct indices agree. Found by "
        "this suite (pallas/triton_atomics_add_max_cas/duplicates_indices; JAX 0.10.2 and 0.12.0.1).",
        runners=("pallas:interpret",), primitives=("atomic_rmw",),
        # The case's outputs 0 and 2 are the atomically updated refs; output 1 echoes the indices.
        cases=("pallas/triton_atomics_*",), matcher="atomic_duplicate_targets"),
    Divergence(
        "pallas-triton-maxnum", "jax/_src/pallas/triton/lowering.py (lax.max_p/min_p lower to arith maxnumf/minnumf)",
        "Pallas Triton lowers max/min to maxnum/minnum, which drop NaN instead of propagating it.",
        runners=("pallas:triton",), primitives=("max", "min")),
    Divergence(
        "xla-cpu-e3m4-sqrt-via-f16",
        "conformance case lax_special/sqrt/float8_e3m4/exhaustive (found by this suite; every value checked)",
        "XLA:CPU computes float8_e3m4 sqrt in float16 and rounds twice (float64 value -> float16 -> e3m4), "
        "so a root just below an e3m4 midpoint that rounds onto it in float16 goes up: sqrt(0.96875) = 1.0, "
        "the correctly rounded e3m4 value is 0.96875. The other one-byte floats are computed through "
        "float32 and are exact. XLA:GPU (H100, JAX 0.11.2) gives the same bits for all 256 values.",
        runners=("xla:cpu", "xla:cuda"), primitives=("sqrt",), dtypes=("float8_e3m4",), matcher="sqrt_via_float16"),
    Divergence(
        "xla-erf-inv-rounded-square",
        "https://github.com/openxla/xla/blob/main/xla/hlo/builder/lib/math.cc (ErfInv32 / ErfInv64: "
        "w = -Log1p(-x * x)); spec/divergences.py XLA_ERF_INV_F32_WORST_ULP (the measurement)",
        "XLA's erf_inv forms 1 - x^2 from the rounded product x * x, so near |x| = 1 it computes "
        "erf_inv(sqrt(fl(x * x))) instead of erf_inv(x): up to 65 ulp off in float32 (x = 0.99982744, "
        "measured over every float32 in [0.5, 1)) and 498928 ulp in float64 (1 - x = 2^-27), while staying "
        "within 3.8 ulp of erf_inv(sqrt(fl(x * x))). Computing (1 - x)(1 + x) would avoid it. Found by this "
        "suite (nightly lax_special/erf_inv/float64/33x65 and float32/2x3x4 at seed 595; JAX 0.10.2 and 0.12.0.1).",
        runners=("xla:cpu",), primitives=("erf_inv",),
        matcher="xla_cpu_erf_inv_model"),
    Divergence(
        "xla-betainc-prefactor-and-iteration-cap",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/lax/special.py (regularized_incomplete_beta_impl: "
        "exp(log(x) * a + log1p(-x) * b - lbeta_ab) / a with lbeta_ab = lgamma(a) + lgamma(b) - lgamma(a + b); "
        "lentz_thompson_barnett_algorithm(num_iterations=200 if float32 else 600); ported from XLA's math.cc); "
        "spec/divergences.py _betainc_model (the model and its measurement); reproducers (JAX 0.10.2 and "
        "0.12.0.1, jax_enable_x64): lax.betainc(1e9, 1e9, 0.5) = -1.1955 (I = 0.5); lax.betainc(1e12, 3e12, "
        "0.25) = 72.04; float32 lax.betainc(*np.float32([1e9, 1e9, 0.5])) = -inf (1.0 on 0.10.2); float32 "
        "(17.059217, 0.1, 0.95561355) = 0.036376417 (I = 0.036379162: 737 ulp; 0.03637481 on 0.10.2)",
        "JAX's betainc on XLA:CPU forms its prefactor as exp of a sum of terms as large as lgamma(a + b), "
        "whose rounding (~eps of their size) is the relative error of I or, above the mean, of 1 - I; and it "
        "stops Lentz's continued fraction after 200 (float32) / 600 (float64) iterations, which near the mean "
        "needs more once a + b exceeds about 1e5 (float32) / 6e5 (float64): the result is then arbitrary, "
        "even outside [0, 1]. float32 is 0.7378 for 0.6915 at a = b = 1e5, half a standard deviation above "
        "the mean. The matcher recomputes both per element (the loop's iteration count in long double).",
        runners=("xla:cpu",), primitives=("regularized_incomplete_beta",),
        matcher="xla_cpu_betainc_model"),
    Divergence(
        "xla-gpu-complex-mul",
        "spec/divergences.py _gpu_complex_mul and GPU_COMPLEX128_MUL_EPS (measured on the H100 evidence, "
        "docs/gpu-triage.md); reproducer (H100, JAX 0.11.2): jnp.complex64(1.5 + 1.1920929e-07j) * "
        "jnp.complex64(3.4028235e+38 + np.inf * 1j) = (nan+infj), the reference (-inf+infj)",
        "XLA:GPU's complex multiply has no C99 Annex G recovery (an infinite or huge part gives NaN where the "
        "reference keeps the infinity), loses parts that overflow or meet subnormals, and on ordinary complex128 "
        "arguments is up to 1.48 eps |a||b| off (complex64: within the case's bound). Per element: within 3 eps "
        "|a||b| (complex128), or an argument with a non-finite, huge, tiny or subnormal part.",
        runners=("xla:cuda",), primitives=("mul",), dtypes=("complex64", "complex128"), matcher="gpu_complex_mul"),
    Divergence(
        "jax-lowering-rounds-in-dtype",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/lax/lax.py (_exp2_lower: hlo.exponential(hlo.multiply("
        "log2, x)) with log2 = np.log(2) in x's dtype; logistic_impl: div(one, add(one, exp(neg(x)))), "
        "lowered with mlir.lower_fun on GPU and CPU); spec/divergences.py LOWERING_MODELS; reproducers "
        "(H100, JAX 0.11.2): jnp.exp2(np.float16(11.96)) = 4012 (2^11.96 = 3986.3); "
        "jax.nn.sigmoid(jnp.bfloat16(-0.1001)) = 0.4785 (0.4750 correctly rounded)",
        "exp2, log2 and logistic are not lowered to one operation: exp2(x) is exp(fl(fl(ln 2) * x)), log2(x) is "
        "fl(log(x)) * fl(1 / ln 2) and logistic(x) is 1 / fl(1 + fl(exp(-x))), every intermediate rounded to x's dtype, so float32 exp2 is up to 60 ulp "
        "off for |x| ~ 95, float16/bfloat16 exp2 up to 13 / 75 ulp, bfloat16 logistic 2 ulp and float16 logistic "
        "0 instead of a tiny result once exp(-x) overflows. The matcher recomputes the lowering per element "
        "(XLA:CPU runs the same lowering: its records are matched by xla-cpu-special-functions' measurements).",
        runners=("xla:cuda", "xla:rocm"), primitives=("exp2", "logistic", "log2"), matcher="lowering_model_explains"),
    Divergence(
        "xla-gpu-special-functions",
        "spec/divergences.py XLA_GPU_CASE_ULP / XLA_GPU_CASE_ABS (measured on the H100 evidence, JAX 0.11.2; "
        "docs/gpu-triage.md) and the models XLA_GPU_MODELS; openxla/xla xla/hlo/builder/lib/math.cc",
        "XLA:GPU evaluates XLA's special-function expansions (math.cc; JAX's special.py ports) with its "
        "approximate float32 division, square root and transcendentals: digamma, lgamma, polygamma, zeta, "
        "erfc, igamma*, betainc and the Bessel functions exceed the compliance budget by the measured amounts; "
        "at extreme arguments they return NaN/inf/0/1 as on XLA:CPU (XLA_CPU_SPECIAL_ARGS); lgamma and "
        "digamma of a float32 subnormal reflect through a pi * x rounded to the subnormal grid (lgamma(2^-149) = "
        "103.32505, truly 103.27893); erf_inv and betainc follow the models of their XLA:CPU entries.",
        runners=("xla:cuda",),
        primitives=("digamma", "lgamma", "polygamma", "zeta", "erfc", "erf", "erf_inv", "igamma", "igammac",
                    "igamma_grad_a", "random_gamma_grad", "regularized_incomplete_beta", "bessel_i0e",
                    "bessel_i1e", "tanh"),
        matcher="xla_gpu_elementwise"),
    Divergence(
        "xla-cpu-special-functions",
        "spec/divergences.py XLA_CPU_CASE_ULP / XLA_CPU_CASE_ABS / XLA_CPU_DAZ_INCONSISTENT / XLA_CPU_SPECIAL_ARGS; "
        "spec/lax_special.py XLA_CPU_ULP (measured by tests/test_lax_special.py)",
        "XLA:CPU's own approximations exceed the compliance ULP budget (XLA's accuracy_budget.h or "
        "JAX's test tolerance) by the measured amounts (on the quick cases, seed 0: exp2 float32 35 ulp, "
        "bfloat16 69; igamma float32 802 ulp, igammac 115, betainc 166, polygamma 17, igamma_grad_a 21, "
        "digamma 29 near its root, lgamma 57 on JAX 0.10.2; all within spec/lax_special.py XLA_CPU_ULP "
        "or XLA_CPU_CASE_ULP; digamma and lgamma err by a few eps absolutely, unboundedly many ulp near "
        "their zeros: XLA_CPU_CASE_ABS); at subnormal arguments some functions return neither the value there nor "
        "at zero (cbrt, atan2, pow, nextafter, complex mul, igamma...); and at extreme arguments "
        "(0, tiny, huge, +-inf) the special functions return NaN/inf/0/1 where the reference follows "
        "DLMF; zeta with q < -5 loses all accuracy on XLA:CPU.",
        runners=("xla:cpu",),
        primitives=tuple(sorted(set(lax_special.XLA_CPU_ULP) | {p for p, _ in XLA_CPU_CASE_ULP}
                                | XLA_CPU_DAZ_INCONSISTENT | XLA_CPU_SPECIAL_ARG_PRIMITIVES)),
        matcher="xla_cpu_elementwise"),
    Divergence(
        "xla-cpu-threefry4x32-fold-in-split-hang",
        "conformance case random/split_fold_in/threefry4x32-partitionable (found by this suite; reproducer: "
        "jax-conformance repro random/split_fold_in/threefry4x32-partitionable --runner xla:cpu --isolated "
        "--timeout 25, JAX 0.10.2)",
        "XLA:CPU of JAX 0.10.2 compiles jax.random.split(jax.random.fold_in(key, 7), 3) of a threefry4x32 key "
        "(jax_threefry_partitionable=True) in about 2 s and its execution then never returns (no result after "
        "60 s in the quick profile, 25 s by hand); JAX 0.12.0.1 returns the reference's bits. The reference's "
        "threefry4x32 bits are checked against the Random123 known-answer vectors (tests/test_prng_kat.py).",
        runners=("xla:cpu",), outcomes=("timeout",), jax_versions=("0.10.2", "0.12.0.1"),
        cases=("random/split_fold_in/threefry4x32-partitionable",)),
    Divergence(
        "xla-cpu-igamma-huge-argument-hang",
        "https://github.com/openxla/xla/blob/main/xla/hlo/builder/lib/math.cc (IgammaSeries: a while loop "
        "until the term c / ans <= eps, with no iteration cap); spec/lax_special.py (the special-functions "
        "measurement of igamma at large a); reproducer: jax.jit(lax.igamma)(x, x) with x = [1.7976931348623157e308] "
        "under jax_enable_x64 never returns (25 s by hand, JAX 0.10.2 and 0.12.0.1)",
        "XLA:CPU's float64 igamma(a, x) sums its power series until the terms are below eps with no iteration "
        "cap; near a = x the terms decay like exp(-k^2 / 2a), so about sqrt(a) iterations: at a = x = DBL_MAX "
        "(in the special-value grid) it never returns. The nightly's lax_special/igamma/float64/specials timeout "
        "(300 s); the reference gives 0.5 there (0.7 s CPU for the whole grid).",
        runners=("xla:cpu",), outcomes=("timeout",), cases=("lax_special/igamma/float64/specials",)),
    # -- SPMD Pallas kernels (conformance/cases/spmd.py) ------------------------------------------
    Divergence(
        "pallas-tpu-interpret-all-gather-dma-order",
        "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/pallas/mosaic/interpret/shared_memory.py "
        "(Semaphore.wait: 'This approach will tend to run DMAs as late as possible, as well as "
        "out-of-order', tasks.pop() takes the newest DMA; params.py dma_execution_mode='on_wait' runs "
        "a DMA's read and write separately); one-line reproducer: jax-conformance repro "
        "spmd/pallas/all_gather_shipped/float32/8 --runner pallas:tpu-interpret",
        "The shipped jax.experimental.pallas.ops.tpu.all_gather forwards slot s to its right "
        "neighbour after a dma_wait on the receive semaphore that the left neighbour's DMAs of "
        "slots s and s+1 both signal with the same byte count. JAX's TPU interpret mode completes "
        "a waited DMA semaphore's DMAs newest first and a DMA's send and receive sides separately, "
        "so the wait can be satisfied by slot s+1 and the device forwards slot s before it lands "
        "(never-written NaN; its race detector reports the read, and raises on 0.12). On 2 devices "
        "there is one step and no overlap. Which DMA such a wait sees is undefined (spec/spmd.py "
        "remote-dma/completion-order): the kernel is at fault (docs/findings.md), interpret mode "
        "picks another order. The reference, completing in start order, gives lax.all_gather's "
        "values on 2, 4, 8 and 2x4 devices, and with detect_races=True raises "
        "DmaCompletionOrderError on 4, 8 and 2x4.",
        runners=("pallas:tpu-interpret",), outcomes=("fail", "crash"),
        cases=("spmd/pallas/all_gather_shipped/*", "spmd/pallas/claims/all_gather_shipped/*")),
    # -- Pallas Mosaic GPU (conformance/cases/pallas_mosaic_gpu.py) ---------------------------
    Divergence(
        "pallas-gpu-interpret-attention-effects",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic/interpret/thread_map.py "
        "(_run_jaxpr lowers each warpgroup's jaxpr with jax.jit, and mlir.lower_jaxpr_to_module refuses "
        "the Mosaic GPU effects the kernel still carries); one-line reproducer: jax-conformance repro "
        "pallas_mosaic_gpu/ops/attention/f16/1x256x2x64/causal=False --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run the shipped attention_mgpu kernel: a warpgroup "
        "thread fails with 'ValueError: Cannot lower jaxpr with effects: {IOEffect, "
        "_WGMMAPipelineEffect, MemoryEffect}', reported through the CPU callback as JaxRuntimeError "
        "INTERNAL (a crash of the backend, JAX 0.12.0.1 on CPU; the research that first saw it: "
        "run_state and wgmma with a register operand are missing there).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/ops/attention/*", "pallas_mosaic_gpu/claims/attention_vs_softmax/*")),
    Divergence(
        "pallas-gpu-interpret-ignores-partitioned-copies",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (_interpret_copy_gmem_to_smem_p never reads collective_axes or "
        "leader_tracked); reproducer: jax-conformance repro "
        "pallas_mosaic_gpu/cluster_partitioned/f32/2x64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode copies the whole source of a PARTITIONED cluster copy into "
        "each block's (smaller) SMEM, so block 1 gets rows 0..63 of x instead of its slice 64..127 "
        "(primitives.py copy_gmem_to_smem: 'block 0 gets src[0:128, :], block 1 gets "
        "src[128:256, :]').",
        runners=("pallas:gpu-interpret",), outcomes=("fail",),
        cases=("pallas_mosaic_gpu/cluster_partitioned/*",)),
    Divergence(
        "pallas-gpu-interpret-dynamic-scheduling-axis",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (axis resolution: 'Collective axis `None` not found among axes' for "
        "the run_scoped of plgpu.dynamic_scheduling_loop, collective_axes=thread_axis=None); "
        "reproducer: jax-conformance repro pallas_mosaic_gpu/dynamic_scheduling/f32/6x8x128 "
        "--runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.dynamic_scheduling_loop in a kernel "
        "without num_threads/thread_name: the loop allocates its scratch with "
        "run_scoped(collective_axes=thread_axis), None there, and the interpreter looks the axis "
        "None up (ValueError, a crash of the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/dynamic_scheduling/*",)),
    Divergence(
        "pallas-gpu-interpret-collective-tcgen05",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "gpu_callbacks.py (tcgen05_mma task: 'AssertionError: collective_axis not supported "
        "yet'); reproducer: jax-conformance repro pallas_mosaic_gpu/ops/blackwell_ragged_dot/"
        "f16/512x128x256/4groups --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode asserts on the 2-CTA (collective) tcgen05_mma that the "
        "shipped blackwell_ragged_dot_mgpu issues (a crash of the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/ops/blackwell_ragged_dot/*",)),
    Divergence(
        "pallas-gpu-interpret-async-store-smem",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (no rule for async_store_smem: it falls to "
        "_interpret_arithmetic_primitive, which binds it with the interpreter's buffer keys, and "
        "primitives.py _async_store_smem_abstract_eval raises 'ref must be a reference, got "
        "int32[6]'); reproducer: jax-conformance repro pallas_mosaic_gpu/cluster_store/f32/"
        "2x64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.async_store_smem (a store into another "
        "block's SMEM): it binds the primitive with buffer keys in place of refs (a crash of "
        "the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/cluster_store/*",)),
    Divergence(
        "pallas-gpu-interpret-register-lhs-wgmma",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "gpu_callbacks.py (wgmma passes a register LHS to HostAllocationKey.from_array: "
        "'ValueError: Expected shape (6,) but got (128, 64)'); reproducer: jax-conformance repro "
        "'pallas_mosaic_gpu/ops/hopper_mixed_type_matmul/int8xbf16/256x256x256/cluster=None' "
        "--runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run a wgmma whose LHS is a register value (the "
        "shipped hopper_mixed_type_matmul_mgpu converts int8 to bf16 in registers first): a "
        "crash of the backend. On JAX 0.10.2 the same ValueError ('Expected shape (5,) but got "
        "(128, 64)') fails the io_callback and the kernel's other threads then wait forever: a "
        "timeout (no result after 600 s, by the reproducer with --isolated --timeout 600).",
        runners=("pallas:gpu-interpret",), outcomes=("crash", "timeout"),
        cases=("pallas_mosaic_gpu/ops/hopper_mixed_type_matmul/*",)),
    Divergence(
        "pallas-gpu-interpret-barrier-test",
        "https://github.com/jax-ml/jax/blob/jax-v0.12.0.1/jax/_src/pallas/mosaic_gpu/interpret/"
        "jaxpr_interpret.py (no rule for barrier_test_p: it falls to "
        "_interpret_arithmetic_primitive, which binds it with the interpreter's buffer keys, and "
        "primitives.py _barrier_test_abstract_eval raises 'barrier must be a reference, got "
        "int32[6]'); reproducer: jax-conformance repro pallas_mosaic_gpu/barrier_test_poll/f32/"
        "64x128 --runner pallas:gpu-interpret",
        "JAX's Mosaic GPU interpret mode cannot run plgpu.barrier_test (a non-blocking test of a "
        "barrier phase): it binds the primitive with buffer keys in place of refs (a crash of "
        "the backend).",
        runners=("pallas:gpu-interpret",), outcomes=("crash",),
        cases=("pallas_mosaic_gpu/barrier_test_poll/*",)),
    Divergence(
        "pallas-gpu-interpret-0.10-retraces-every-thread",
        "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/pallas/mosaic/interpret/thread_map.py "
        "(_run_jaxpr jits a function nested in itself, so the jit cache never hits; JAX 0.11.2 "
        "moved it to top level 'so that caching works properly'); reproducer (JAX 0.10.2): "
        "jax-conformance repro pallas_mosaic_gpu/ops/hopper_matmul/f16/512x256x512 --runner "
        "pallas:gpu-interpret --isolated --timeout 600",
        "JAX 0.10.2's Mosaic GPU interpret mode (jax._src.pallas.mosaic_gpu.interpret, not yet "
        "exported) re-traces and recompiles each Pallas thread's jaxpr at every grid point and "
        "warpgroup (about 0.3 s each): the shipped hopper matmul (132 clusters, 3 warpgroups) "
        "took 136 s per call on an idle 2-vCPU VM where 0.12 takes 7.9 s (2026-11-27), past the "
        "quick profile's 60 s; under load the reproducer gave no result in 420 s and its worker "
        "printed no error (a slow run, not a failure).",
        runners=("pallas:gpu-interpret",), outcomes=("timeout",), jax_versions=("0", "0.11.2"),
        cases=("pallas_mosaic_gpu/ops/hopper_matmul/*", "pallas_mosaic_gpu/claims/hopper_matmul_vs_dot/*")),
    # -- Pallas Triton (conformance/cases/pallas_triton.py) --------------------------------------
    Divergence(
        "pallas-triton-vector-integer-atomic-minmax-assert",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/primitives.py "
        "(_atomic_lowering_rule: isinstance(val.type, ir.IntegerType) is False for a tensor; fixed in 0.12.0 "
        "by lowering._element_type(val.type)); one-line reproducer (CPU, abstract H100, JAX 0.10.2/0.11.2): "
        "tests/test_pallas_triton.py::test_triton_lowering_as_declared",
        "JAX's Triton lowering before 0.12 sends an integer atomic_max/atomic_min over a vector of indices "
        "down the float path (_expand_atomic_fp_min_max), whose _fp_bits_type asserts on an integer type: "
        "the kernel never compiles (AssertionError). Seen on the H100 with JAX 0.11.2 "
        "(pallas/triton_atomics_add_max_cas/*); scalar-index integer atomics lower correctly.",
        runners=("pallas:triton",), outcomes=("crash",), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/atomic_max/int32/distinct", "pallas_triton/atomic_max/int32/duplicates",
               "pallas_triton/atomic_max/int32/masked", "pallas_triton/atomic_min/int32/distinct",
               "pallas_triton/atomic_min/int32/duplicates", "pallas_triton/atomic_min/int32/masked",
               "pallas/triton_atomics_add_max_cas/*")),
    Divergence(
        "pallas-triton-vector-integer-atomic-add-as-fadd",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/primitives.py "
        "(_atomic_lowering_rule, same test as the min/max crash); reproducer: pallas_call(debug=True) of "
        "pallas_triton/atomic_add/int32/distinct lowered for an abstract H100 on CPU prints "
        "'tt.atomic_rmw fadd, acq_rel, gpu, %p : (tensor<16x!tt.ptr<i32>>, tensor<16xi32>)'",
        "JAX's Triton lowering before 0.12 emits a float add (tt.atomic_rmw fadd) for an integer atomic_add "
        "over a vector of indices; Triton's PTX for FADD is atom.add.f32, which adds the bit patterns as "
        "floats (or the kernel fails to compile). Not yet observed on a GPU: the H100 run crashed on the "
        "min/max of the same kernel first.",
        runners=("pallas:triton",), outcomes=("fail", "crash"), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/atomic_add/int32/distinct", "pallas_triton/atomic_add/int32/duplicates",
               "pallas_triton/atomic_add/int32/masked")),
    Divergence(
        "pallas-triton-cache-modifier-keyerror",
        "https://github.com/jax-ml/jax/blob/jax-v0.11.2/jax/_src/pallas/triton/lowering.py (_load: "
        "_STR_TO_CACHE_MODIFIER = {str(c): c for c in tt_dialect.CacheModifier} has keys 'ca', 'cg', ... but is "
        "indexed with the accepted spellings '.ca' / '.cg'; 0.12.0 indexes cache_modifier.removeprefix('.')); "
        "one-line reproducer (CPU, abstract H100, JAX 0.10.2/0.11.2): "
        "tests/test_pallas_triton.py::test_triton_lowering_as_declared[pallas_triton/load_cache_modifier_cg/int32/128]",
        "Before JAX 0.12 every plgpu.load with a cache_modifier ('.ca' or '.cg', the only ones it accepts) "
        "fails in the Triton lowering with KeyError: '.cg' (found by lowering the case on CPU).",
        runners=("pallas:triton",), outcomes=("crash",), jax_versions=("0", "0.12.0"),
        cases=("pallas_triton/load_cache_modifier_cg/*",)),
    Divergence(
        "pallas-interpret-triton-atomic-duplicates-last-lane",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_rmw_discharge_rule: x_new = ref.at[idx].set(monoid(ref[idx], val)))",
        "JAX's HLO interpret mode discharges a Triton atomic add/max/min as gather -> op -> scatter-set: "
        "where several lanes hit one element, one lane's update survives instead of all of them. Modelled: "
        "every element of the backend's result is init or op(init, v) for the value v of one lane that hits it.",
        runners=("pallas:interpret",), primitives=("atomic_rmw",), outcomes=("fail",),
        cases=("pallas_triton/atomic_*/duplicates",),
        matcher="one_lane_survives"),
    Divergence(
        "pallas-interpret-triton-atomic-cas-float-compare",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_cas_discharge_rule: jnp.where(ref == cmp, val, ref)); Triton: atom.cas.b32 "
        "(triton-lang/triton test/TritonGPU/atomic-cas.mlir)",
        "JAX's HLO interpret mode compares a float compare-and-swap as floats (+0.0 == -0.0 swaps, NaN never "
        "swaps); the GPU instruction compares bit patterns. Modelled: the backend's refs are the float-compare "
        "results.",
        runners=("pallas:interpret",), primitives=("atomic_cas",), outcomes=("fail",),
        cases=("pallas_triton/atomic_cas/float32/*",), matcher="cas_float_compare"),
    Divergence(
        "xla-cpu-dot-algorithm-bf16-bf16-f32-not-applied",
        "jax/_src/lax/lax.py _handle_dot_precision ('The CPU backend silently ignores the algorithm spec'); "
        "openxla/xla xla/backends/cpu/ynn_support.cc IsDotSupportedByYnn (the kernel is chosen by dtype "
        "alone); reproducer: jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32, "
        "preferred_element_type=jnp.float32)) on float32 inputs, XLA:CPU (JAX 0.12.0.1): within 7e-5 of the exact "
        "float32 product, 0.7 from the product of the bf16-rounded inputs (16x32 @ 32x32, values in [-8, 8]); "
        "_X3: jax-conformance repro pallas_triton/dot/float32/algorithm_BF16_BF16_F32_X3/16x32x32 "
        "--runner pallas:interpret --seed 1 (output [10, 26]: -40.768654 = the float32 dot, 2.3e-6 from the exact "
        "product; the X3 value -40.769110 is 4.6e-4 from it, 6.2e-6 sum|a||b|)",
        "XLA:CPU computes a BF16_BF16_F32, BF16_BF16_F32_X3 or BF16_BF16_F32_X6 dot of float32 operands as a "
        "float32 dot (bitwise its F32_F32_F32 result, JAX 0.10.2 to 0.12.0.1), neither rounding the operands to "
        "bfloat16 nor splitting them (the algorithm's meaning, jax/_src/lax/lax.py get_algorithm_compute_types; "
        "XLA's dot_algorithms.cc); JAX's HLO interpret mode of a Pallas kernel inherits it. BF16_BF16_F32 fails "
        "at every seed; _X3 where its dropped products (up to 774 * 2**-24 sum|a||b|, spec/lax_contractions.py "
        "split_truncation) exceed the case's DOT_PRODUCT (seeds 1, 3, 4 of 0-11); _X6 (4 * 2**-24) never can. Modelled: "
        "the backend is within the float32 dot bound of the exact product.",
        runners=("pallas:interpret",), primitives=("dot_general",), outcomes=("fail",),
        cases=tuple(f"pallas_triton/dot/float32/algorithm_BF16_BF16_F32{x}/*" for x in ("", "_X3", "_X6")),
        matcher="dot_unrounded"),
    # -- XLA:CPU rewrites found by the program fuzzer (docs/findings.md, "XLA:CPU: found by the
    # program fuzzer"); each matcher recomputes the rewritten expression per element ----------------
    Divergence(
        "xla-cpu-add-zero-keeps-negative-zero",
        "docs/findings.md#xla-cpu-x--00-keeps-the-sign-of-a-negative-zero; reproducer (XLA:CPU, JAX 0.10.2 "
        "and 0.12.0.1, every float type): jax.jit(lambda x: x + np.float32(0))(np.float32(-0.0)) = -0.0",
        "XLA:CPU compiles x + 0.0 as x: for x = -0.0 it returns -0.0 where IEEE 754 addition gives +0.0 "
        "(disabling no HLO pass changes it: the code generator folds the addition). Per element: the "
        "reference is +0.0, the backend -0.0, the operand -0.0 and the other operand a zero.",
        runners=("xla:cpu",), primitives=("add", "sub"), outcomes=("fail",), matcher="adds_zero_as_identity"),
    Divergence(
        "pallas-interpret-add-zero-keeps-negative-zero",
        "docs/findings.md#jaxs-interpret-modes-xlacpu-a-kernels-00--x-keeps-the-sign-of-a-negative-zero; "
        "the same XLA:CPU fold as xla-cpu-add-zero-keeps-negative-zero, reached through JAX's interpret "
        "modes (both run the kernel's operations on XLA:CPU); found by the program fuzzer (pallas family, "
        "seed 0 program 12 on pallas:interpret, seed 2 program 40 on pallas:tpu-interpret); reproducer "
        "(JAX 0.10.2 and 0.12.0.1, interpret=True and interpret=pltpu.InterpretParams() alike): a kernel "
        "o_ref[...] = lax.add(np.float32(0.0), x_ref[...]) gives -0.0 for x = -0.0",
        "A kernel's float addition of a zero (a constant 0, a zero-initialised accumulator) is compiled "
        "as the other operand: -0.0 + 0.0 gives -0.0 where IEEE 754 gives +0.0. Per element: the "
        "reference is +0.0, the backend -0.0, and the kernel adds floats.",
        runners=("pallas:interpret", "pallas:tpu-interpret"), primitives=("pallas_call",), outcomes=("fail",),
        matcher="kernel_adds_zero_as_identity"),
    Divergence(
        "xla-cpu-divide-by-constant-as-reciprocal",
        "docs/findings.md#xla-cpu-x--c-is-x--1c; reproducer (XLA:CPU, JAX 0.10.2 and 0.12.0.1): "
        "jax.jit(lambda x: x / np.float32(5))(np.float32(-1.1046107e-03)) = -2.2092216e-04, the correctly "
        "rounded quotient is -2.2092214e-04; --xla_disable_hlo_passes=algsimp gives the quotient",
        "XLA's algebraic simplifier (algsimp) rewrites a float division by a constant or by a broadcast "
        "value as a multiplication by its reciprocal, rounded twice: up to 1 ulp from the correctly rounded "
        "quotient (float32; float16 and bfloat16 further, the reciprocal rounded too). Per element: the backend's "
        "value is x * fl(1 / y), each step rounded in float32 (float16: the reciprocal rounded to float16; "
        "float16/bfloat16: the product then rounded to the type).",
        runners=("xla:cpu",), primitives=("div",), outcomes=("fail",), matcher="division_as_reciprocal"),
    Divergence(
        "xla-cpu-multiply-by-converted-bool-as-select",
        "docs/findings.md#xla-cpu-x--convertp-is-selectp-x-0; reproducer (XLA:CPU, JAX 0.10.2 and 0.12.0.1): "
        "jax.jit(lambda x, p: x * p.astype(np.float32))(np.float32(np.nan), False) = 0.0 (IEEE: NaN); "
        "--xla_disable_hlo_passes=algsimp gives NaN",
        "XLA's algebraic simplifier rewrites x * convert(p) for a boolean p as select(p, x, 0): where p is "
        "false the product is +0.0, never NaN (NaN or inf times 0) or -0.0 (a negative x times 0). Per "
        "element: one operand is 0 or 1 and the backend's value is the other operand where it is 1, +0.0 "
        "where it is 0.",
        runners=("xla:cpu",), primitives=("mul",), outcomes=("fail",), matcher="product_with_bool_as_select"),
    Divergence(
        "xla-cpu-constant-folded-clz-of-negative",
        "docs/findings.md#xla-cpu-jax-0102-constant-folded-clz-of-a-negative-value; reproducer (XLA:CPU, JAX "
        "0.10.2): jax.jit(lambda: lax.clz(np.int32(-1)))() = -32, at run time 0; JAX 0.11.2 folds it to 0",
        "JAX 0.10.2's XLA constant-folds clz of a negative integer as width - 64 (int32 -32, int16 -48, int8 "
        "-56) instead of 0: the count of a sign-extended 64-bit value, less 64 - width. Per element: a "
        "negative operand and the backend's value width - 64.",
        runners=("xla:cpu",), primitives=("clz",), jax_versions=("0", "0.11.2"), outcomes=("fail",),
        matcher="clz_folded_negative"),
    Divergence(
        "xla-cpu-convolution-skips-padding",
        "docs/findings.md#xla-cpu-a-convolution-leaves-out-its-padding-and-lhs-dilation-holes; openxla/xla "
        "xla/service/cpu/ir_emitter.cc (the convolution loop: 'We are not in the padding, so carry out the "
        "computation', an in-bounds and not-in-hole condition around the multiply-add); reproducer (XLA:CPU, JAX "
        "0.10.2 and 0.12.0.1): lax.conv_general_dilated(np.float32([[[1, 2]]]), np.float32([[[np.nan, 1, 1]]]), "
        "(1,), ((1, 0),)) = [[[3.]]], by the definition (a zero-padded lhs) 0 * NaN + 1 + 2 = NaN",
        "XLA:CPU computes a convolution over the real lhs elements only: a kernel weight that meets padding or "
        "a hole of lhs dilation contributes nothing, where StableHLO's definition (pad and dilate the lhs with "
        "zeros, then a dot product per window) multiplies it by zero: a NaN or infinite weight there makes the "
        "definition's result NaN (0 * NaN, 0 * inf), XLA:CPU's finite. Per element: the convolution of the "
        "finite weights, plus the infinities and NaNs the non-finite weights give on real lhs elements.",
        runners=("xla:cpu",), primitives=("conv_general_dilated",), outcomes=("fail",),
        matcher="convolution_skips_padding"),
    Divergence(
        "xla-cpu-bf16-interior-pad-flushes-subnormals",
        "docs/findings.md#xla-cpu-jax-0112-bfloat16-pad-with-interior-padding-flushes-subnormals; reproducer "
        "(XLA:CPU, JAX 0.11.2 and 0.12.0.1): jax.jit(lambda x: lax.pad(x, bf16(0), ((0, 0, 1), (0, 0, 0)))) of "
        "the bfloat16 bits [[0x8001, 0x0001], [0x0001, 0x8001]] gives [[0x8001, 0x0000], [0, 0], [0x0001, 0x8000]]; "
        "JAX 0.10.2 copies the bits",
        "XLA:CPU (JAX 0.11.2 and 0.12.0.1) returns some bfloat16 subnormals of a pad with interior padding "
        "as zeros of their sign (the last column of a 2-d operand in the reproducer; a 1-d pad keeps them, "
        "float32 too): a data movement that must copy its operand's bits. Per element: the reference is a "
        "subnormal, the backend a zero of its sign.",
        runners=("xla:cpu",), primitives=("pad",), dtypes=("bfloat16",), jax_versions=("0.11.2", None),
        outcomes=("fail",), matcher="subnormals_returned_as_zero"),
)

BY_ID = {d.id: d for d in DIVERGENCES}
