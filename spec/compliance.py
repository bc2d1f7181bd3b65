"""Compliance modes: how far a backend's output may be from the reference's, per primitive and dtype.

In the spirit of TOSA's conformance modes (a float64 reference, per-operator modes, a dot-product
error bound), XLA's accuracy budgets and StableHLO's testdata checks. A mode is data; the checker
that applies it lives in ``conformance/checks.py``.

Modes:
  EXACT        bitwise equal (NaN payloads normalised): integers, bits, conversions, PRNG, and the
               IEEE-754 basic operations (+ - * / sqrt), which every backend must round correctly.
  ULP(n)       at most n units in the last place from the correctly rounded reference; NaN and
               +-inf must be where the reference has them (+-0 compare equal).
  ABS_REL      |backend - reference| <= atol_eps * eps * magnitude + rtol_eps * eps * |reference|,
               where magnitude is max |input| (the inputs' scale); for whole programs. A program
               whose case gives its matmuls' first-order sensitivity (``dot_sensitivity``: the
               case's dot_bound is, per output, sum over its matmuls of |d out / d product| |a||b|)
               may have those matmuls' inputs rounded to ``input_bits`` (a matmul-precision
               allowance): the tolerance then adds (2 u_in + u_in^2) times that sensitivity, the
               DOT_PRODUCT input-rounding term propagated to the output to first order.
  DOT_PRODUCT  |backend - reference| <= (K * u_acc + u_in + u_out) * sum_k |a_k||b_k|
               (the classic forward error bound of a length-K dot product with inputs rounded to
               u_in, accumulation at u_acc and one output rounding at u_out; TOSA's DOT_PRODUCT
               mode is the same idea). The bound array comes from the program evaluated on |inputs|.
               u_acc is float32's unit unless the mode says the sum is accumulated narrower
               (``acc_bits``: a float16/bfloat16 reduction XLA computes in its own type).
  FP_SPECIAL   only the placement of NaN, +-inf and the sign of zero must match.
  STATISTICAL  outputs random by design and not reproducible (a hardware PRNG): bit balance,
               uniqueness and a chi-square goodness of fit on bytes.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

EXACT = "exact"
ULP = "ulp"
ABS_REL = "abs-rel"
DOT_PRODUCT = "dot-product"
FP_SPECIAL = "fp-special"
STATISTICAL = "statistical"
KINDS = (EXACT, ULP, ABS_REL, DOT_PRODUCT, FP_SPECIAL, STATISTICAL)

# Sources of budgets (cited by key in Mode.source).
SOURCES = {
    "ieee754": "IEEE 754-2019 section 5.4: +, -, *, /, sqrt, fma and conversions are correctly rounded; "
               "XLA lowers them to the hardware's IEEE instructions",
    "xla-accuracy-budget": "openxla/xla xla/codegen/intrinsic/accuracy/accuracy_budget.h "
                           "(per-function ULP budgets of XLA's own transcendental implementations: "
                           "exp f32 6 ulp on CPU / 7 on GPU, tanh 3, erf 2, log1p 1, sqrt/rsqrt 1)",
    "jtu-tolerance": "jax/_src/test_util.py default_tolerance (f64 1e-15, f32 1e-6, f16 1e-3, bf16 1e-2, "
                     "fp8 0.1): the tolerances JAX's own tests accept for transcendental functions",
    "narrow-via-f32": "XLA computes bf16/f16/fp8 elementwise ops by upcasting to f32 "
                      "(xla/service/float_normalization, CPU/GPU elemental emitters) and rounding once: "
                      "an f32 error of a few f32 ulps can move the result across one narrow rounding boundary",
    "f16-attention": "Derived for attention kernels that round the softmax probabilities p to f16 "
                     "before the p.v product and the output once to f16 (JAX's attention_mgpu): 1 "
                     "f16 ulp of p moves a convex combination by at most eps16 max|v|, the output "
                     "rounding adds 0.5 eps16 |o|; the f32 softmax and accumulation errors are orders "
                     "of magnitude below (conformance/cases/pallas_mosaic_gpu.py attention_mode)",
    "mosaic-gpu-reduce-prod-chain": "plgpu.prod of n floats on the hardware is a tree of n - 1 "
                                    "multiplications, each rounded (jax/experimental/mosaic/gpu/"
                                    "fragmented_array.py reduce: arith.mulf): relative error at "
                                    "most (n - 1) u, at most n - 1 ulp of the result, plus 0.5 ulp "
                                    "of the correctly rounded reference: ULP(n)",
    "stochastic-round-neighbour": "pltpu.stochastic_round: how the random bits choose between the two "
                                  "neighbours is the TPU's own rule (Mosaic lowers it to the closed TPU "
                                  "backend); JAX's test (tests/pallas/tpu_ops_test.py test_stochastic_round) "
                                  "requires only one of the two neighbours: ULP(1) of the reference's pick",
    "atomic-float-order": "float atomics of several lanes on one element apply in an order PTX leaves "
                          "undefined (atom.add.f32): the sum of the updates with each addition rounded, "
                          "bounded as a dot product of the updates with ones (Higham section 3.1)",
    "dot-algorithm-preset": "jax.lax.DotAlgorithmPreset (jax/_src/lax/lax.py): the preset's input "
                            "type (bits kept per operand) and number of partial products, each a K-term "
                            "dot accumulated in float32: DOT_PRODUCT(K) on inputs of that width, or for "
                            "the split presets DOT_PRODUCT(spec/lax_contractions.py split_dot_length: "
                            "K x parts, widened by the components' magnitudes)",
    "tanh-approx-f32": "PTX tanh.approx.f32: maximum relative error 1.113e-5 measured over all float32 "
                       "inputs (NVIDIA developer forum, 'hardware accelerated tanh on Turing', "
                       "forums.developer.nvidia.com/t/173291), below 2^-16",
    "ieee754-convert": "IEEE 754 round to nearest even for float narrowing; float to integer truncates "
                       "toward zero (XLA operation semantics, ConvertElementType)",
    "ops-kernel-eps": "engineering bound for JAX's shipped Triton ops kernels (softmax, norms, attention): "
                      "a few eps of the output dtype per reduction stage, stated a priori, not derived from "
                      "an error analysis; the H100 outputs and the HLO interpret mode measure within 1-2 eps "
                      "of the reference (tests/test_pallas_triton.py)",
    "higham": "N. Higham, Accuracy and Stability of Numerical Algorithms (2nd ed.), section 3.1: "
              "|fl(a.b) - a.b| <= gamma_K sum|a_k||b_k|, gamma_K = K u / (1 - K u)",
    "tosa": "TOSA specification 1.0, section 1.8 'Floating-point accuracy': compliance modes "
            "(exact, ULP, dot product, fp special, statistical)",
    "measured": "measured on XLA:CPU by this project against the same program in float64 (the case "
                "module states the measurement and the margin)",
    "definition": "defined bit for bit by the program: integer and bit operations, and float operations "
                  "that are exactly rounded (PRNG bits, uniform samplers, data movement)",
    "faithful": "a correctly rounded result is defined but not required of backends: one ulp (a faithful "
                "result) is allowed for primitives without a stated budget",
    "spec-semantics": "the primitive's exactness class in its family's spec/<family>.py SEMANTICS table",
    "sum-in-operand-type": "XLA:CPU adds a float16/bfloat16 reduce_sum, cumsum, reduce_window_sum and scatter-add "
                           "in the operand type (measured, JAX 0.10.2 and 0.12.0.1: lax.reduce_sum of float16 "
                           "[2048, 1 x 63] gives 2080, bfloat16 [256, 1 x 63] gives 288; a float32 accumulation "
                           "would give 2112 and 320); the HLO reduce computes in its operands' type, so the "
                           "accumulation unit is that type's (jnp.sum upcasts such inputs itself)",
    "first-order": "derived in the case from its operations' budgets: each inexact operation's error bound "
                   "carried to the output by the size of its first-order contribution (the case states "
                   "the derivation; cancellation in a sum makes a per-operation ULP budget meaningless)",
    "gpu-f32-div-sqrt": "the gpu-f32-div-sqrt allowance (spec/allowances.py): XLA:GPU's float32 division "
                        "(PTX div.full.f32) and square root (sqrt.approx.f32) are within 2 ulp, not correctly rounded",
}


@dataclasses.dataclass(frozen=True)
class Mode:
    """One compliance mode with its parameters and the source of those parameters."""
    kind: str
    ulp: int = 0                    # ULP: the budget for the output dtype
    atol_eps: float = 0.0           # ABS_REL: multiples of eps(dtype) * magnitude
    rtol_eps: float = 0.0           # ABS_REL: multiples of eps(dtype) * |reference|
    k: int = 0                      # DOT_PRODUCT: contraction length
    input_bits: int = 0             # DOT_PRODUCT (ABS_REL with dot_sensitivity): significand bits the
    #                                 matmul inputs are rounded to (0: exact)
    dot_sensitivity: bool = False   # ABS_REL: the case's dot_bound gives the program's first-order
    #                                 sensitivity to its matmuls (see the module docstring)
    acc_bits: int = 0               # DOT_PRODUCT: significand bits of the accumulation (0: float32 or wider)
    source: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown compliance mode {self.kind!r}")

    @property
    def needs_dot_bound(self) -> bool:
        """Whether checking this mode needs the case's dot_bound arrays."""
        return self.kind == DOT_PRODUCT or (self.kind == ABS_REL and bool(self.input_bits))

    def describe(self) -> str:
        if self.kind == ULP:
            return f"ULP({self.ulp})"
        if self.kind == ABS_REL:
            return (f"ABS_REL(atol={self.atol_eps:g} eps*max|in|, rtol={self.rtol_eps:g} eps"
                    + (f", matmul inputs {self.input_bits}-bit to first order)" if self.input_bits else ")"))
        if self.kind == DOT_PRODUCT:
            return (f"DOT_PRODUCT(K={self.k}" + (f", inputs {self.input_bits}-bit" if self.input_bits else "")
                    + (f", accumulated {self.acc_bits}-bit" if self.acc_bits else "") + ")")
        return self.kind.upper().replace("-", "_")


def exact(source: str = "ieee754") -> Mode:
    return Mode(EXACT, source=source)


def ulp(n: int, source: str) -> Mode:
    return Mode(ULP, ulp=int(n), source=source)


def abs_rel(atol_eps: float, rtol_eps: float, source: str, dot_sensitivity: bool = False) -> Mode:
    return Mode(ABS_REL, atol_eps=float(atol_eps), rtol_eps=float(rtol_eps), source=source,
                dot_sensitivity=dot_sensitivity)


def dot_product(k: int, source: str = "higham", input_bits: int = 0, acc_bits: int = 0) -> Mode:
    return Mode(DOT_PRODUCT, k=int(k), input_bits=int(input_bits), acc_bits=int(acc_bits), source=source)


def fp_special(source: str = "tosa") -> Mode:
    return Mode(FP_SPECIAL, source=source)


def statistical(source: str = "tosa") -> Mode:
    return Mode(STATISTICAL, source=source)


# --------------------------------------------------------------------------------------------
# Per-primitive budgets.
# --------------------------------------------------------------------------------------------
# The IEEE basic operations and everything defined bit for bit: EXACT on every dtype.
# (Semantics tables say "correctly-rounded" for add as well as for exp; only these are required
# to be correctly rounded by IEEE 754 and hence by a backend.)
IEEE_EXACT = frozenset({
    "add", "sub", "mul", "div", "sqrt", "neg", "abs", "max", "min", "rem", "floor", "ceil", "round",
    "sign", "nextafter", "copysign", "convert_element_type", "reduce_precision", "is_finite",
    "select_n", "clamp", "real", "imag", "complex", "conj", "square", "mulhi",
})

# Transcendental functions: ULP budgets per dtype name.
# float32: XLA's own accuracy budgets where accuracy_budget.h states one (XLA_BUDGETED), otherwise
# JAX's test tolerance for f32 (1e-6 relative, about 8 ulp). float64: JAX's f64 tolerance
# (1e-15 relative, about 5 ulp). bf16/f16/fp8: computed in f32 and rounded once, so 1 ulp.
XLA_BUDGETED = {"exp": 6, "tanh": 3, "erf": 2, "log1p": 1, "rsqrt": 1}
JTU_F32_ULP = 8
JTU_F64_ULP = 5
_TRANSCENDENTALS = ("exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "rsqrt", "cbrt", "sin", "cos",
                    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
                    "erfc", "erf_inv", "lgamma", "digamma", "pow", "log2", "bessel_i0e", "bessel_i1e",
                    "igamma", "igammac", "polygamma", "zeta", "random_gamma_grad", "igamma_grad_a",
                    "regularized_incomplete_beta")
TRANSCENDENTAL_ULP: dict[str, dict[str, int]] = {
    name: {"float32": XLA_BUDGETED.get(name, JTU_F32_ULP), "float64": JTU_F64_ULP} for name in _TRANSCENDENTALS}
NARROW_FLOAT_ULP = 1     # bf16 / f16 / fp8 via f32 (source "narrow-via-f32")


def ulp_budget(primitive: str, dtype) -> int | None:
    """The ULP budget of a transcendental primitive on ``dtype``; None if it has none."""
    table = TRANSCENDENTAL_ULP.get(primitive)
    if table is None:
        return None
    name = np.dtype(dtype).name
    if name in table:
        return table[name]
    if name in ("complex64",):
        return table.get("float32")
    if name in ("complex128",):
        return table.get("float64")
    return NARROW_FLOAT_ULP


def _is_float_like(dtype) -> bool:
    from interp import dtypes as D
    return D.is_float(dtype) or D.is_complex(dtype)


def mode_for_primitive(primitive: str, dtype, semantics: Mapping | None = None) -> Mode:
    """The default mode of one primitive's output of ``dtype``.

    Order: bit-exact outputs (non-float dtypes, IEEE basic ops) -> EXACT; a transcendental budget
    -> ULP; otherwise the family's SEMANTICS ``exactness`` (spec/base.py): exact -> EXACT,
    correctly-rounded -> ULP(1) (a last-bit difference from an implementation that is not
    correctly rounded), convention -> FP_SPECIAL plus the case's own check.
    """
    if not _is_float_like(dtype) or primitive in IEEE_EXACT:
        return exact()
    budget = ulp_budget(primitive, dtype)
    if budget is not None:
        name = np.dtype(dtype).name
        if name in ("float32", "complex64"):
            src = "xla-accuracy-budget" if primitive in XLA_BUDGETED else "jtu-tolerance"
        else:
            src = "jtu-tolerance" if name in ("float64", "complex128") else "narrow-via-f32"
        return ulp(budget, src)
    if primitive in ("dot_general", "conv_general_dilated"):
        raise ValueError("dot_general/conv need dot_product(K): the case knows K")
    from spec import aliases, semantics as all_semantics
    if semantics is None:
        semantics = all_semantics()
    entry = semantics.get(aliases().get(primitive, primitive))
    if entry is not None:
        if entry.exactness == "exact":
            return exact("spec-semantics")
        if entry.exactness == "convention":
            return fp_special("spec-semantics")
    return ulp(1, "faithful")


def combine(modes) -> Mode:
    """The mode of an output computed by several primitives: the loosest of theirs.

    Errors compound along a chain (and cancellation amplifies them), so programs of more than a
    few inexact operations state their own ABS_REL or DOT_PRODUCT mode instead.
    """
    order = {EXACT: 0, ULP: 1, FP_SPECIAL: 2, ABS_REL: 3, DOT_PRODUCT: 4, STATISTICAL: 5}
    modes = list(modes)
    if not modes:
        return exact()
    return max(modes, key=lambda m: (order[m.kind], m.ulp, m.k))
