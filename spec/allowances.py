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

    def applies_to(self, runner: str) -> bool:
        return any(fnmatch.fnmatchcase(runner, p) for p in self.runners)


def _matmul_precision(bits: int):
    def change(mode: C.Mode) -> C.Mode:
        if mode.kind != C.DOT_PRODUCT:
            return mode
        return C.dot_product(mode.k, mode.source, input_bits=bits)
    return change


ALLOWANCES: tuple[Allowance, ...] = (
    Allowance(
        "flush-to-zero",
        CPU_RUNNERS + ("xla:cuda", "xla:rocm", "xla:tpu", "pallas:triton", "pallas:mosaic-*"),
        "Subnormal f32/bf16/f64 inputs and results are treated as zero (FTZ/DAZ): XLA:CPU sets the "
        "MXCSR flush bits around execution; GPUs compile with denormal flushing for f32; TPUs have no "
        "subnormals. f16 keeps its subnormals on CPU.",
        ("openxla/xla xla/tsl/platform/denormal.h ScopedFlushDenormal, used by the CPU runtime",
         "jax-ml/jax#26658 (f64 denormal add on CPU)", "jax-ml/jax#37762 (log/sqrt of subnormals on CPU)",
         "research/numerics.md: x+x of 1e-40 is 0 on XLA:CPU, nextafter(0,1) is kept"),
        variant={"flush": True}),
    Allowance(
        "fma-contraction",
        CPU_RUNNERS + ("xla:cuda", "xla:rocm", "pallas:triton", "pallas:mosaic-gpu"),
        "A float32 multiply feeding an add/sub is fused into one FMA (one rounding instead of two): "
        "LLVM contracts fmul+fadd because XLA emits them with the 'contract' fast-math flag.",
        ("openxla/xla#41579", "xla/service/cpu/cpu_options (xla_cpu_enable_fast_math, contraction)"),
        variant={"fma": True}),
    Allowance(
        "excess-precision",
        ("xla:cuda", "xla:rocm", "xla:tpu", "pallas:triton", "pallas:mosaic-*"),
        "bf16/f16 elementwise chains are computed in f32 and the intermediate bf16 round trips are "
        "removed (xla_allow_excess_precision, default true; SimplifyFPConversions).",
        ("openxla/xla xla/service/simplify_fp_conversions.cc", "jax-ml/jax#23007",
         "XLA flag --xla_allow_excess_precision (default true)"),
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
        "later: inputs are rounded to 11 significant bits.",
        ("jax-ml/jax#22557", "NVIDIA: TensorFloat-32 in the A100 GPU"),
        mode_change=_matmul_precision(11)),
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


def explain(runner: str, attempt: Callable[[dict | None, Callable | None, str], bool]) -> str | None:
    """The name of the first allowance (or '+'-joined combination) that explains a difference.

    ``attempt(variant, mode_change, name)`` recomputes the comparison under one allowance (named
    ``name``, or the '+'-joined names of a combination) and says whether every output then complies. Single allowances are tried first, then all the
    applicable replay allowances together (FTZ and FMA often meet in one program).
    """
    applicable = for_runner(runner)
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
