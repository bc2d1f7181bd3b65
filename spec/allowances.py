"""Backend allowances: documented ways a backend may compute differently from the unfused,
correctly rounded program, each with its source and a checker.

A difference is explained by an allowance when the reference, recomputed the way the allowance
says the backend computes (subnormals flushed, mul+add fused, bf16 chains kept in f32, inputs of a
dot rounded to bf16/TF32...), agrees with the backend under the case's compliance mode. The outcome
is then ``pass-with-allowance`` and names the allowance: never a silent pass.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Callable

from . import compliance as C

# Runners whose float arithmetic runs on XLA:CPU (the HLO and TPU interpret modes execute the
# kernel's arithmetic as XLA:CPU code).
CPU_RUNNERS = ("xla:cpu", "pallas:interpret", "pallas:tpu-interpret", "pallas:gpu-interpret")


@dataclasses.dataclass(frozen=True)
class Allowance:
    name: str
    runners: tuple[str, ...]       # fnmatch patterns of runner names
    summary: str
    sources: tuple[str, ...]
    variant: dict | None = None     # conformance.replay.Variant fields: recompute the reference
    mode_change: Callable | None = None  # Mode -> Mode: a looser mode the backend is allowed
    # Only for programs that contain one of these operations: a predicate over the program's
    # (primitive, output dtype name, params) triples, nested jaxprs included (None: any program).
    # A kernel or a case without a jaxpr has no operations to show: such an allowance is not tried.
    requires: Callable | None = None
    kernels: bool = False           # with ``requires``: tried for kernels too (no program to inspect)

    def applies_to(self, runner: str) -> bool:
        return any(fnmatch.fnmatchcase(runner, p) for p in self.runners)

    def applies_to_program(self, ops) -> bool:
        if self.requires is None:
            return True
        if ops is None:
            return self.kernels
        return any(self.requires(*op) for op in ops)


def _matmul_precision(bits: int):
    """DOT_PRODUCT modes get inputs of ``bits`` significant bits; so do the ABS_REL modes of programs
    whose case gives its matmuls' first-order sensitivity (spec/compliance.py, ABS_REL)."""
    def change(mode: C.Mode) -> C.Mode:
        if mode.kind == C.DOT_PRODUCT:
            return C.dot_product(mode.k, mode.source, input_bits=bits)
        if mode.kind == C.ABS_REL and mode.dot_sensitivity:
            return dataclasses.replace(mode, input_bits=bits)
        return mode
    return change


def _faithful_f32(ulps: int):
    """EXACT float32/complex64 outputs may be ``ulps`` ulp from the correctly rounded value."""
    def change(mode: C.Mode) -> C.Mode:
        if mode.kind != C.EXACT:
            return mode
        return C.ulp(ulps, "gpu-f32-div-sqrt")
    return change


def _approximate_f32_div_sqrt(primitive: str, dtype: str, params) -> bool:
    if dtype not in ("float32", "complex64"):
        return False
    if primitive == "integer_pow":
        return params.get("y", 0) < 0          # XLA lowers x**-n as 1 / x**n: a division
    return primitive in ("div", "sqrt")


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
        "A float32 or float64 multiply (a mul, a square, the last product of an integer_pow) feeding an "
        "add/sub is fused into one FMA (one rounding instead of two): LLVM contracts fmul+fadd because XLA "
        "emits them with the 'contract' fast-math flag.",
        ("openxla/xla#41579", "xla/service/cpu/cpu_options (xla_cpu_enable_fast_math, contraction)",
         "XLA:CPU, JAX 0.12.0.1: jax.jit(lambda a, b, c: a * b + c) on 2000 float64 triples in [-3, 3]: 473 "
         "differ from the twice-rounded value, none from the FMA (found by the program fuzzer)"),
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
        "algebraic-rewrite",
        ("xla:*", "pallas:*"),
        "XLA's algebraic simplifier rewrites log(exp(x)) -> x and sqrt(x*x) -> |x| "
        "(exact in real arithmetic, not in floating point: overflow and rounding differ).",
        ("openxla/xla xla/hlo/transforms/simplifiers/algebraic_simplifier.cc",
         "jax-ml/jax#38099", "jax-ml/jax#38100", "jax-ml/jax#37919"),
        variant={"rewrites": True}),
    Allowance(
        "matmul-precision-bf16",
        ("xla:tpu", "pallas:mosaic-tpu"),
        "Precision.DEFAULT f32 matmuls/convolutions use one bf16 pass on TPU: inputs are rounded to "
        "bf16 (8 significant bits) before exact products and f32 accumulation.",
        ("jax docs: jax.lax.Precision / jax_default_matmul_precision", "jax-ml/jax#9973"),
        mode_change=_matmul_precision(8)),
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
        variant={"tf32": "nearest"}, mode_change=_matmul_precision(11),
        requires=lambda prim, dtype, params: prim in ("dot_general", "conv_general_dilated", "ragged_dot_general")
        and dtype in ("float32", "complex64"), kernels=True),
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
        mode_change=_faithful_f32(GPU_F32_DIV_SQRT_ULP), requires=_approximate_f32_div_sqrt),
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
        requires=lambda prim, dtype, params: prim == "scatter"),
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
        requires=lambda prim, dtype, params: prim == "select_and_gather_add" and dtype == "float64"),
    Allowance(
        "bf16-minmax-daz-compare",
        ("xla:cpu", "pallas:interpret", "pallas:tpu-interpret", "pallas:gpu-interpret"),
        "Host-dependent: XLA:CPU on a host with AVX512-BF16 compares bfloat16 max/min operands with "
        "subnormals read as zero (DAZ) but returns the selected operand unflushed, the left one on "
        "ties (max(-s, +0) = -s for a subnormal s: neither the exact +0 nor a flushed zero). Seen "
        "with JAX 0.11.2 and 0.12.0.1 on an AMD EPYC with AVX512-BF16, not on hosts without it "
        "(issue 15; which instructions the bf16 compare becomes on such hosts is not established "
        "here). Only that selection is accepted: the replay (conformance/replay.py "
        "minmax_compared_under_daz) computes exactly it.",
        ("xla/service/llvm_ir/llvm_util.cc EmitFloatMax / EmitFloatMin (select on lhs >= rhs)",
         "jax-conformance issue 15 (JAX 0.11.2 / 0.12.0.1 on an AVX512-BF16 EPYC host)"),
        variant={"minmax_daz": True}),
)

BY_NAME = {a.name: a for a in ALLOWANCES}


def for_runner(runner: str) -> list[Allowance]:
    return [a for a in ALLOWANCES if a.applies_to(runner)]


def explain(runner: str, attempt: Callable[[dict | None, Callable | None, str], bool], ops=None) -> str | None:
    """The name of the first allowance (or '+'-joined combination) that explains a difference.

    ``ops``: the program's (primitive, output dtype name, params) triples (None: no program, a
    kernel), which decide the allowances that name the operations they need (``requires``).

    ``attempt(variant, mode_change, name)`` recomputes the comparison under one allowance (named
    ``name``, or the '+'-joined names of a combination) and says whether every output then complies. Single allowances are tried first, then all the
    applicable replay allowances together (FTZ and FMA often meet in one program).
    """
    applicable = [a for a in for_runner(runner) if a.applies_to_program(ops)]
    for a in applicable:
        if attempt(a.variant, a.mode_change, a.name):
            return a.name
    replays = [a for a in applicable if a.variant]
    if len(replays) > 1:
        merged: dict = {}
        for a in replays:
            merged.update(a.variant)
        name = "+".join(a.name for a in replays)
        if attempt(merged, None, name):
            return name
    return None
