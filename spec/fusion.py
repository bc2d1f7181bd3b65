"""Semantics: fusion (interp/rules/fusion.py). Block-scaled matmul and the Pallas fuser.

Backend notes (what the conformance cases and tests/test_fusion.py found):
- XLA:CPU runs ``scaled_matmul`` (JAX >= 0.11; 0.10.2 has no CPU lowering) by converting data and
  scales to the result type, multiplying, and an ordinary f32 dot: the dequantised values are
  exact there for moderate scales, the sum is checked under DOT_PRODUCT(K). In f16/bf16 results the
  dequantisation itself can overflow/underflow (e8m0 2^-127 is 0 in f16): outside DOT_PRODUCT.
- ``lax.scaled_dot``'s composite decomposition (XLA:CPU) dequantises in bf16: exact for fp8/fp4
  data with e8m0 scales in range, rounded otherwise.
- Fused vs unfused (conformance/fusion_diff.py): the reference evaluates ``fuser.fuse(f)`` and
  ``f`` equation by equation and pairs the fused kernel's equations with the unfused program's
  (the kernel's own code by source line; pulled-in fusions by primitive and dtype in program
  order, each restricted to the block the grid step computes). Every FUSER_PROGRAMS program but
  PRNG agrees bit for bit at the outputs and at every paired intermediate, on both JAX versions.
- The fuser's PRNG rule draws per block from ``fold_in(fold_in(key, i), j)``
  (block_spec.py _random_bits_eval_rule): a fused program's random values differ from the
  unfused one's by design; the reference reproduces the fused program's rule exactly.
- Excess precision (conformance/cases/fusion.py, measured on XLA:CPU, both JAX versions): the bf16
  and f16 chains (add chains, mul+add, convert round trips and pairs, 64-element sums) come out
  bitwise equal to per-equation rounding; the f32 mul+add differs (FMA contraction: the
  fma-contraction allowance in spec/allowances.py explains it).
- JAX 0.10.2 and 0.11.2 quantise bfloat16 mxfp8 inputs in bfloat16, and XLA:CPU flushes the
  subnormal bf16 scale of an all-zero block (DIVERGENCES below: the flush-to-zero allowance; JAX
  0.12 computes the scale in float32: jax/_src/cudnn/scaled_matmul_stablehlo.py quantize).
- nvfp4 quantisation on XLA:CPU multiplies by float32 reciprocals instead of dividing (both JAX
  versions, DIVERGENCES "xla-cpu-nvfp4-reciprocal"): the data differ from the program exactly
  where a quotient is an e2m1 rounding midpoint.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, Semantics, table

_SM = "jax/_src/cudnn/scaled_matmul_stablehlo.py"
_SD = "jax/_src/lax/scaled_dot.py"
_FUSER = "jax/_src/pallas/fuser/"
_OCP_MX = "https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf"

_BLOCK_SCALED = {"block_scaled/exact-dequantisation": "dequantisation data * scale is exact: both "
                                                      "factors have at most 24 significant bits and "
                                                      "their product's exponent lies inside float64's "
                                                      "range (fp8/fp4 data with e8m0/e4m3 scales use at "
                                                      "most 8 bits); float64 factors are unsupported "
                                                      "(loud)",
                 "block_scaled/rounded-once": "the result is the exact dot product of the dequantised "
                                              "operands rounded once to preferred_element_type (round "
                                              "to nearest even; overflow to +-inf, gradual underflow)",
                 "block_scaled/e8m0-nan": "an e8m0 scale 0xFF is NaN and makes its block's products "
                                          "NaN; inf data * scale is inf",
                 "block_scaled/zero-sign": "an exactly zero sum is +0 unless every product is -0"}

SEMANTICS = table(
    Semantics(
        "scaled_matmul_wrapper",
        "Block-scaled batched matmul (jax.nn.scaled_matmul): lhs (B, M, K), rhs (B, N, K), scales "
        "(B, M|N, K // block); each scale multiplies `block` consecutive elements of the contracting "
        "dimension; out (B, M, N) = sum_k (lhs sl)(rhs sr) in preferred_element_type.",
        edge_cases=_BLOCK_SCALED,
        sources=(f"{_SM} scaled_matmul_wrapper, _scaled_matmul_abstract, _scaled_matmul_cpu_lowering_impl",
                 _OCP_MX),
        exactness=CORRECTLY_ROUNDED,
        notes="BlockScaleConfig modes: mxfp8 (e4m3fn/e5m2 data, e8m0fnu scales, block 32), nvfp4 "
              "(e2m1fn data, e4m3fn scales, block 16, global scale applied after the matmul by "
              "scaled_dot_general in ordinary primitives), mxfp4 (e2m1fn data, e8m0fnu scales, block 32; "
              "not in JAX 0.10.2)."),
    Semantics(
        "scaled_matmul",
        "The primitive scaled_matmul_wrapper binds under jit: the same meaning.",
        edge_cases=_BLOCK_SCALED, sources=(f"{_SM} _scaled_matmul_p",), exactness=CORRECTLY_ROUNDED),
    Semantics(
        "scaled_dot",
        "jax.lax.scaled_dot: dot_general(lhs * lhs_scale, rhs * rhs_scale, dimension_numbers) with "
        "each scale of the operand's rank repeated over contiguous blocks of every contracting "
        "dimension (size ratio >= 2).",
        edge_cases=_BLOCK_SCALED,
        sources=(f"{_SD} scaled_dot, _scale_broadcast, _scaled_dot_impl",),
        exactness=CORRECTLY_ROUNDED,
        notes="XLA's decomposition dequantises in bfloat16: a backend difference, not the meaning."),
    Semantics(
        "fusible",
        "JAX 0.10.2 fuser.fusible outside fuser.fuse: the traced body on trivial fusions "
        "(impl: core.eval_jaxpr(jaxpr, consts, *args)). Newer JAX binds a Fusible HiPrim through "
        "call_hi_primitive, whose generic rule (control_flow.py) evaluates its expansion, the same "
        "body.",
        sources=(f"{_FUSER}fusible.py",)),
    Semantics(
        "custom_fusion",
        "fuser.custom_fusion: the wrapped function (its eval/pull/push rules and pallas_impl are used "
        "only when fuser.fuse pulls it into a kernel, where it no longer appears as this primitive).",
        sources=(f"{_FUSER}custom_fusion_lib.py _custom_fusion_impl",)),
)

# Not implemented (no rule; interp/registry.py NO_RULE gives coverage() the reason):
# - pack_dtype / unpack_dtype (fusible_dtype.py): values of a FusionDType extended dtype; they have
#   no eager implementation in JAX either and are removed by fuser.fuse's physicalisation
#   (resolve_fusion_dtypes) before anything runs.
UNSUPPORTED = {
    "pack_dtype": "FusionDType values exist only before fuser physicalisation (no JAX impl either)",
    "unpack_dtype": "FusionDType values exist only before fuser physicalisation (no JAX impl either)",
}

# The installed fuser's block-spec rules for reductions (jax/_src/pallas/fuser/block_spec.py,
# identical on JAX 0.10.2 and 0.12.0.1; tests/test_fusion.py test_fuser_reduction_rules pins it):
# - reduce_sum has a pull rule (input fusion: the reduced axes are read whole, case "reduce_sum")
#   and a push rule (epilogue: the block must span every reduced axis, else fuser.fuse raises
#   NotImplementedError "reduce_sum over partial blocks not supported yet"; cases
#   "epilogue_reduce_sum_rows/_cols/_all" use a kernel block (8, 256) / (16, 128) / (16, 256)).
# - the reductions below have neither rule: fuser.fuse raises NotImplementedError naming the
#   primitive, as an input fusion or an epilogue.
# - an epilogue with two outputs of different block specs (a reduction and an elementwise result of
#   the same kernel output) is refused: "Fusion contains a DAG, cannot uniquely pull block specs".
FUSER_REDUCTIONS_WITHOUT_RULES = (
    "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor", "argmax",
    "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")

# Block-spec rules the coverage list names that the installed fuser lacks or refuses
# (fuser.fuse raises; same on JAX 0.10.2 and 0.12.0.1 unless a version is named). Every other
# rule family has a program in conformance/cases/fusion.py FUSER_PROGRAMS (input fusion and, where
# a push rule exists, epilogue), run fused and unfused on both versions.
FUSER_LIMITS = {
    "slice / dynamic_slice / squeeze / tile / iota / bitcast_convert_type / random_* as an epilogue":
        "no push rule (they work in input fusions and on an epilogue's other operands)",
    "concatenate of the kernel output with another array (epilogue)":
        "the push rule fails: AttributeError 'NoBlockSpec' object has no attribute 'block_shape'",
    "reshape of the kernel output that splits a blocked dimension differently (epilogue)":
        "NotImplementedError 'reshape not supported yet' (reshapes that keep the blocked minor "
        "dimensions whole work: case reshape_epilogue)",
    "dot_general of the kernel output (epilogue)":
        "the push rule raises NotImplementedError 'dot_general not supported yet' (a matmul in an "
        "input fusion works: case dot_general)",
    "neg (-x) in an input fusion or an epilogue":
        "no pull and no push rule: NotImplementedError 'neg' (write x * -1 or 0 - x)",
    "abs, ne as an epilogue (JAX 0.10.2)":
        "no push rule on 0.10.2 (NotImplementedError naming it); 0.11 has them",
    "ge, le, or, xor, shift_right_logical as an epilogue (JAX 0.10.2, 0.11)":
        "a pull rule but no push rule before 0.12 (NotImplementedError naming it); 0.12 has them",
    "clamp, round, one_minus_square, dynamic_update_slice, split (JAX 0.10.2)":
        "no block-spec rule at all on 0.10.2; 0.11 has pull and push rules",
}
# FUSER_LIMITS' version-dependent rules: the first JAX release whose fuser has them
# (jax/_src/pallas/fuser/block_spec.py push_block_spec_rules / pull_block_spec_rules), pinned on
# every release in range by tests/test_fusion.py test_fuser_limits.
FUSER_PUSH_RULE_SINCE = {"abs": (0, 11), "ne": (0, 11), "ge": (0, 12), "le": (0, 12), "or": (0, 12),
                         "xor": (0, 12), "shift_right_logical": (0, 12)}
FUSER_RULES_SINCE = {n: (0, 11) for n in ("clamp", "round", "one_minus_square", "dynamic_update_slice", "split")}

# Backend departures found by tests/test_fusion.py (JAX 0.10.2, XLA:CPU, bfloat16 quantize):
DIVERGENCES = {
    "xla-cpu-bf16-mxfp8-zero-block": (
        "quantize(mxfp8) of a bfloat16 all-zero block on JAX 0.10.2 and 0.11.2 divides by e8m0_to_dtype(0, bf16) "
        "= 2^-127, a bf16 subnormal that XLA:CPU flushes to 0: 0/0 gives NaN data where the program "
        "gives 0. The flush-to-zero allowance (spec/allowances.py) explains it entirely: XLA:CPU's "
        "data and scales equal the reference replayed with subnormals flushed "
        "(conformance/replay.py Variant(flush=True)) bit for bit (tests/test_fusion.py)."),
    "xla-cpu-nvfp4-reciprocal": (
        "quantize(nvfp4) on XLA:CPU (both JAX versions, any input dtype): XLA's algebraic simplifier "
        "turns every division of the program into a multiplication by a float32 reciprocal: "
        "x / global_scale -> x * fl(1/gs) (2.66666675 for 0.375), amax / 6 -> amax * 0.166666672, and "
        "v / s -> v * fl(1/s) (s the e4m3 block scale); the XLA of JAX 0.10.2 and 0.11.2 also reassociates the "
        "data path into x * fl(fl(1/s) * fl(1/gs)) (compiled HLO: fused_computation multiply(x, "
        "broadcast(multiply(recip_s, 2.66666675)))), JAX 0.12's keeps (x * fl(1/gs)) * fl(1/s). The "
        "scales equal the program's on the tested inputs (they could differ only where amax / 6 is an "
        "e4m3 rounding midpoint); the data differ where the exact quotient "
        "x / gs / s is an e2m1 rounding midpoint (0.25, 0.75, ..., 5), which the reciprocals' "
        "rounding error moves off the tie. bfloat16 inputs (8 significant bits) produce exact "
        "midpoints often: issue 6's '2/512 on JAX 0.10.2' are x = 0.025634765625 (quotient exactly "
        "5.0: program 4, XLA 6) and x = -0.703125 (quotient exactly -0.25: program -0, XLA -0.5), "
        "global scale 0.375; the same input on JAX 0.12 rounds back onto the ties. "
        "tests/test_fusion.py checks XLA:CPU's data against this float32 reciprocal arithmetic bit "
        "for bit on both versions and the reference's departures against the midpoint set."),
}
