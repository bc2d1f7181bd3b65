"""Backend allowances: documented ways a backend may compute differently from the unfused,
correctly rounded program, each with its source and how the suite checks it.

A difference is explained by an allowance when the reference, recomputed the way the allowance
says the backend computes (subnormals flushed, mul+add fused, bf16 chains kept in f32, inputs of a
dot rounded to bf16/TF32...), agrees with the backend under the case's compliance mode. The outcome
is then ``pass-with-allowance`` and names the allowance: never a silent pass.
"""
from __future__ import annotations

import dataclasses

# Runners whose float arithmetic runs on XLA:CPU (the HLO and TPU interpret modes execute the
# kernel's arithmetic as XLA:CPU code).
CPU_RUNNERS = ("xla:cpu", "pallas:interpret", "pallas:tpu-interpret", "pallas:gpu-interpret")


@dataclasses.dataclass(frozen=True)
class Allowance:
    """Data only: the suite's conformance/allowance_models.py applies it (the mode changes and
    program predicates it names, the search over a runner's allowances)."""
    name: str
    runners: tuple[str, ...]       # fnmatch patterns of runner names
    summary: str
    sources: tuple[str, ...]
    variant: dict | None = None     # conformance.replay.Variant fields: recompute the reference
    # A looser mode the backend is allowed: (name, *arguments) of a mode change of
    # conformance/allowance_models.py MODE_CHANGES.
    mode_change: tuple | None = None
    # Only for programs that contain one of these operations: the name of a predicate of
    # conformance/allowance_models.py REQUIRES over the program's (primitive, output dtype name,
    # params) triples, nested jaxprs included (None: any program). A kernel or a case without a
    # jaxpr has no operations to show: such an allowance is not tried.
    requires: str | None = None
    kernels: bool = False           # with ``requires``: tried for kernels too (no program to inspect)


# Maximum error of the PTX instructions XLA:GPU emits for float32 division and square root.
GPU_F32_DIV_SQRT_ULP = 2

ALLOWANCES: tuple[Allowance, ...] = (
    Allowance(
        "flush-to-zero",
        CPU_RUNNERS + ("xla:cuda", "xla:rocm", "xla:tpu", "pallas:triton", "pallas:mosaic-*"),
        "Subnormal f32/bf16/f64 inputs and results are treated as zero (FTZ/DAZ): XLA:CPU sets the "
        "MXCSR flush bits around execution; GPUs compile with denormal flushing for f32; TPUs have no "
        "subnormals. f16 keeps its subnormals on CPU.",
        ("openxla/xla xla/tsl/platform/denormal.h ScopedFlushDenormal, used by the CPU runtime",
         "jax-ml/jax#26658 (f64 denormal add on CPU)", "jax-ml/jax#37762 (log/sqrt of subnormals on CPU)",
         "docs/numerics.md: x+x of 1e-40 is 0 on XLA:CPU, nextafter(0,1) is kept"),
        variant={"flush": True}),
    Allowance(
        "fma-contraction",
        CPU_RUNNERS + ("xla:cuda", "xla:rocm", "pallas:triton", "pallas:mosaic-gpu"),
        "A float32 or float64 multiply (a mul, a square, the last product of an integer_pow, a dot_general "
        "that contracts nothing: an elementwise or outer product) feeding an add/sub, or accumulated into a "
        "ref (ref[i] += a * b), is fused into one FMA (one rounding instead of two): LLVM contracts fmul+fadd "
        "because XLA emits them with the 'contract' fast-math flag.",
        ("openxla/xla#41579", "xla/service/cpu/cpu_options (xla_cpu_enable_fast_math, contraction)",
         "XLA:CPU, JAX 0.12.0.1: jax.jit(lambda a, b, c: a * b + c) on 2000 float64 triples in [-3, 3]: 473 "
         "differ from the twice-rounded value, none from the FMA (found by the program fuzzer)",
         "XLA:CPU, JAX 0.10.2 and 0.12.0.1 (program fuzzer, 2026-11-29): c + dot_general(x, x) with no "
         "contracting or batch dimensions and ref[...] += x * x give the once-rounded values (x = 9.11096: "
         "92.12017, twice rounded 92.12016)"),
        variant={"fma": True}),
    Allowance(
        "excess-precision",
        ("xla:cpu", "xla:cuda", "xla:rocm", "xla:tpu", "pallas:triton", "pallas:mosaic-*"),
        "bf16/f16 elementwise chains are computed in f32 and the intermediate bf16 round trips are "
        "removed (xla_allow_excess_precision, default true; SimplifyFPConversions). XLA:CPU does it "
        "too where the algebraic simplifier folds a convert pair: a bf16 integer_pow feeding cosh keeps "
        "its float32 square (and keeps the round trip in a chain of adds).",
        ("openxla/xla xla/service/simplify_fp_conversions.cc", "jax-ml/jax#23007",
         "XLA flag --xla_allow_excess_precision (default true)",
         "XLA:CPU, JAX 0.10.2 and 0.12.0.1: the optimized HLO of jax.jit(lambda x: lax.cosh(lax.integer_pow(x, 2))) "
         "on bfloat16 adds the float32 integer_pow result to -ln 2 with no bfloat16 convert between "
         "(cosh(9.375**2) = 7.41045e+37 where the rounded square gives 8.27444e+37; found by the program fuzzer)"),
        variant={"excess": True}),
    Allowance(
        "float-normalization-excess",
        ("xla:cpu",),
        "XLA:CPU computes bfloat16 arithmetic in float32 (float-normalization-bf16), each operation on "
        "its bfloat16 operands, the result converted to bfloat16; where the only use of that result is a "
        "conversion back to float32 (JAX's and CHLO's upcast in front of a transcendental such as "
        "digamma, erf_inv, cosh, sinh), the pass drops the pair and the consumer reads the float32 result "
        "unrounded (an integer_pow: its last product; exp, log and tanh keep the rounding).",
        ("openxla/xla xla/hlo/transforms/simplifiers/float_normalization.cc "
         "(ChangeOutputTypeThenInsertConvertBack: a user converting low to high precision is replaced by the "
         "high-precision result)",
         "XLA:CPU, JAX 0.12.0.1 (program fuzzer, 2026-11-29, random/2026112903/8882): digamma of "
         "jax.random.normal(key, (2, 3), bfloat16): the optimized HLO rounds erf_inv to bf16, multiplies by "
         "1.4140625 in f32 and feeds the product to digamma with no bf16 convert between; digamma(1.0494995) "
         "rounds to -0.498047 where the rounded sample 1.046875 gives -0.503906 (mpmath)",
         "XLA:CPU, JAX 0.10.2 and 0.12.0.1 (program fuzzer, random/2026112903/6002; 2000 random bfloat16 "
         "operands per form, against mpmath): sinh(x*y) and cosh(x*y) are sinh/cosh of the float32 product in "
         "2000 of 2000; sinh(x*y + z) of float32(bf16(x*y) + z) in 2000 of 2000; sinh(integer_pow(x, 5)) of "
         "float32(x * bf16(bf16(x*x)**2)) in 2000 of 2000; exp, log and tanh of the same product use the rounded "
         "product in 2000 of 2000; the whole chain kept in float32 (excess-precision) matches 80 of 2000"),
        variant={"excess": True, "excess_operands_rounded": True}, requires="bfloat16_arithmetic"),
    Allowance(
        "algebraic-rewrite",
        ("xla:*", "pallas:*"),
        "XLA's algebraic simplifier rewrites log(exp(x)) -> x (so log(exp2(x)) -> ln2 * x: JAX lowers "
        "exp2(x) as exp(ln2 * x)), sqrt(x*x) -> |x|, exp(a) * exp(b) -> exp(a + b) (so integer_pow(exp(a), y), "
        "lowered to multiplications, and square(exp(a)) become one exp; exp2 is exp(ln2 * x) there too) and exp(a) / exp(b) -> exp(a - b) (exact in real "
        "arithmetic, not in floating point: overflow and rounding differ; exp(x) / exp(x) is 1 where exp(x) "
        "overflows). The exp products and quotients are rewritten by JAX 0.10.2's XLA, not by 0.11.2's or "
        "0.12.0.1's (nor is log(exp(x)) there). A / sqrt(B) -> A * rsqrt(B) and A / rsqrt(B) -> A * sqrt(B) "
        "(so integer_pow(sqrt(x), -1), lowered to 1 / sqrt(x), is one rsqrt: rounded once, not twice).",
        ("openxla/xla xla/hlo/transforms/simplifiers/algebraic_simplifier.cc ('exp(A) * exp(B) => exp(A+B)', "
         "'exp(A)/exp(B) => exp(A-B)', 'A/sqrt(B) => A*rsqrt(B)', 'A/rsqrt(B) => A*sqrt(B)')",
         "jax/_src/lax/lax.py _exp2_lower: hlo.exponential(hlo.multiply(log2, x))",
         "jax-ml/jax#38099", "jax-ml/jax#38100", "jax-ml/jax#37919",
         "XLA:CPU, JAX 0.10.2 (program fuzzer, 2026-11-29): integer_pow(exp(-1.0), 4) = 0.01831564 = exp(-4) "
         "(twice rounded: 0.018315643); log(exp2(-0.0)) = -0.0",
         "XLA:CPU, JAX 0.12.0.1 (program fuzzer, 2026-11-29): the optimized HLO of "
         "jax.jit(lambda x: lax.integer_pow(lax.sqrt(x), -1)) is one rsqrt; float64 x = 0.11488431021471203 "
         "gives 0x1.79a4335e7b8b2p+1 (1 / sqrt(x) correctly rounded, mpmath), twice rounded 0x1.79a4335e7b8b3p+1"),
        variant={"rewrites": True}),
    Allowance(
        "matmul-precision-bf16",
        ("xla:tpu", "pallas:mosaic-tpu"),
        "Precision.DEFAULT f32 matmuls/convolutions use one bf16 pass on TPU: inputs are rounded to "
        "bf16 (8 significant bits) before exact products and f32 accumulation.",
        ("jax docs: jax.lax.Precision / jax_default_matmul_precision", "jax-ml/jax#9973"),
        mode_change=("matmul_precision", 8)),
    Allowance(
        "matmul-precision-tf32",
        ("xla:cuda", "pallas:triton", "pallas:mosaic-gpu"),
        "Precision.DEFAULT f32 matmuls/convolutions may use TF32 tensor cores on NVIDIA Ampere and "
        "later: inputs are rounded to 11 significant bits. A DOT_PRODUCT mode gets the looser input "
        "rounding; a whole program is replayed in the reference with the operands of every DEFAULT "
        "float32 dot/conv rounded to TF32 (to nearest: on the H100 evidence every programs/* case but "
        "the transformer block agrees with that replay within 0.09 of its ABS_REL bound, and disagrees "
        "by 290-1090x with truncated operands; docs/gpu-triage.md).",
        ("jax-ml/jax#22557", "NVIDIA: TensorFloat-32 in the A100 GPU",
         "openxla/xla xla/service/gpu/transforms/gemm_fusion.cc and the Triton GEMM emitter: a DEFAULT f32 "
         "dot becomes a __triton_nested_gemm_fusion whose tt.dot uses input precision tf32 (H100 optimized "
         "HLO of jit_dot_f32_default in the evidence: split into 4 K-chunks, then a reduce)",
         "openxla/xla xla/hlo/transforms/expanders/ragged_dot_rewriter.h ('RaggedDotRewriter converts ragged "
         "dots to general dots through expansion', a GPU pass: the expanded dots are DEFAULT-precision f32 dots "
         "like any other; H100 evidence: lax_contractions/ragged_dot/f32 off the float32 bound, within the "
         "11-bit one)"),
        variant={"tf32": "nearest"}, mode_change=("matmul_precision", 11),
        requires="float32_matmul", kernels=True),
    Allowance(
        "gpu-f32-div-sqrt",
        ("xla:cuda",),
        "XLA:GPU compiles float32 division to PTX div.full.f32 (LLVM -nvptx-prec-divf32=1), whose "
        "maximum error is 2 ulp, and float32 square root to sqrt.approx.f32 (relative error 2^-23, "
        "at most 2 ulp), not to the correctly rounded div.rn/sqrt.rn: an EXACT float32 output of a "
        "program containing a float32 div, sqrt or integer_pow with a negative exponent may be 2 ulp "
        "off. Measured on the H100 evidence: every such difference is 1 ulp.",
        ("openxla/xla xla/service/gpu/llvm_gpu_backend/nvptx_backend.cc GetNVPTXBackendOptions: "
         "'-nvptx-prec-divf32=1' ('Use div.full -- it matters for some float-division heavy benchmarks')",
         "llvm/lib/Target/NVPTX/NVPTXISelLowering.cpp nvptx-prec-divf32 (1: div.full) and "
         "nvptx-prec-sqrtf32 (sqrt.approx unless the function asks for precise sqrt)",
         "NVIDIA PTX ISA: div.full.f32 'maximum ulp error is 2 across the full range'; sqrt.approx.f32 "
         "maximum relative error 2^-23",
         "openxla/xla GPU elemental emitter FileCheck tests (hlo_to_llvm_ir --ptx): 'CHECK-DAG: "
         "sqrt.approx.f32' for f32 and f16 sqrt fusions"),
        mode_change=("faithful_f32", GPU_F32_DIV_SQRT_ULP), requires="float32_div_sqrt"),
    Allowance(
        "scatter-duplicate-order",
        ("xla:*",),
        "A scatter whose indices hit one element several times may apply those updates in any order: "
        "each such element of a set-scatter holds one of the updates targeting it (the reference applies "
        "them in XLA:CPU's order, the last one wins). Checked per element: the reference is replayed once "
        "per duplicate rank with the k-th update winning, and an element complies if it matches any "
        "replay; elements no update targets, or one update only, must still be exact.",
        ("https://openxla.org/xla/operation_semantics#scatter ('If the index ... for multiple updates is the "
         "same, the order in which the updates are applied is implementation-defined' / non-deterministic)",
         "jax-ml/jax#12359 (scatter with duplicate indices differs between CPU and GPU)",
         "H100 evidence (JAX 0.11.2): lax_indexing/scatter_rows_clip_rank3 and lax_structure/scatter_set_drop "
         "keep another duplicate's row than XLA:CPU"),
        variant={"scatter_winner": 0},
        requires="scatter"),
    Allowance(
        "gpu-packed-select-and-gather-add-f64",
        ("xla:cuda", "xla:rocm"),
        "JAX lowers select_and_gather_add (the JVP of max/min pooling) on GPU by packing operand and "
        "tangent into one 64-bit word for a single-output reduce_window; float64 has no 128-bit word, so "
        "both are first rounded to 32 bits (reduce_precision to 11 exponent and 20 mantissa bits): the "
        "window's choice and the tangent it returns are those of the rounded values. Replayed exactly.",
        ("jax-ml/jax jax/_src/lax/windowed_reductions.py _select_and_gather_add_lowering (max_bits=64; "
         "'we can pack two half words into a single word, at the cost of precision'; registered with "
         "platform='gpu', TODO(b/183233858))",),
        variant={"packed_window_f64": True},
        requires="float64_select_and_gather_add"),
    Allowance(
        "bf16-minmax-daz-compare",
        ("xla:cpu", "pallas:interpret", "pallas:tpu-interpret", "pallas:gpu-interpret"),
        "Host-dependent: XLA:CPU on a host with AVX512-BF16 compares the operands of bfloat16 max, min and "
        "clamp (max then min) with subnormals read as zero (DAZ) and returns the operand it selects "
        "unflushed. Where both operands are zero or subnormal they compare equal, and which of the two comes "
        "back is not determined by the operand order: with s the smallest subnormal, max(0, s) = 0 but "
        "max(-0, -s) = -s, min(0, s) = s, min(-s, -0) = -0 (neither the exact result nor a flushed zero); "
        "clamp(0, -1, s) = s. Accepted exactly there: one of the two operands, unflushed (each tie of max "
        "and of min replayed both ways: conformance/replay.py minmax_compared_under_daz); every other "
        "element is the exact max/min. Measured with JAX 0.11.2 and 0.12.0.1 on an AMD EPYC with "
        "AVX512-BF16, at every shape (specials, 33x65, 1x130); with XLA_FLAGS=--xla_cpu_max_isa=AVX2 the same "
        "host flushes instead (flush-to-zero), and hosts without AVX512-BF16 do not show it. XLA emits "
        "llvm.maximum / llvm.minimum (xla/service/llvm_ir/llvm_util.cc EmitFloatMax / EmitFloatMin); which "
        "x86 instructions LLVM makes of them for bf16 on such hosts, and so which operand a tie returns, is "
        "not established here.",
        ("xla/service/llvm_ir/llvm_util.cc EmitFloatMax / EmitFloatMin (llvm.maximum / llvm.minimum)",
         "jax-conformance issues 15, 22 and 27 (JAX 0.11.2 / 0.12.0.1 on an AVX512-BF16 EPYC host; "
         "recorded: tests/data/xla_cpu_avx512_bf16)"),
        variant={"minmax_daz": 0},
        requires="bfloat16_max_min_clamp"),
)

BY_NAME = {a.name: a for a in ALLOWANCES}
