"""Semantics of the Pallas Triton primitives (``jax.experimental.pallas.triton``) as the reference
implements them (``interp/rules/pallas_triton.py``). Primitives every Pallas lowering shares
(masked loads and stores, program ids, ``multiple_of``) are in ``spec/pallas.py``.

Anchors: ``jax/_src/pallas/triton/primitives.py`` (the primitives, their discharge rules and
Triton lowerings), ``jax/_src/pallas/triton/lowering.py`` (what the Triton lowering accepts) and
Triton's own lowering to PTX (triton-lang/triton, ``test/TritonGPU/atomic-cas.mlir``).
Conformance cases: ``conformance/cases/pallas_triton.py``.
"""
from __future__ import annotations

from . import compliance as C
from .base import CORRECTLY_ROUNDED, Semantics, table

_TRITON = "jax/_src/pallas/triton/primitives.py"
_LOWERING = "jax/_src/pallas/triton/lowering.py"
_PTX_TANH = "https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#floating-point-instructions-tanh"
_ASM_SUMMARY = ("Elementwise inline PTX (plgpu.elementwise_inline_asm). Only approx_tanh's instructions "
                "(tanh.approx.f32 / .f16 / .bf16, pack=1, one operand of that type) have a meaning the "
                "reference states: the correctly rounded tanh, a backend held to APPROX_TANH_F32 (float32). Any other "
                "assembly raises UnsupportedPrimitiveError naming it (inline-asm/arbitrary-ptx).")

SEMANTICS = table(
    Semantics("max_contiguous", "Triton compiler hint; the value unchanged.",
              sources=(_TRITON,)),
    Semantics("atomic_rmw", "Triton atomics (xchg, add, max, min, and, or, xor) return the value "
              "each lane saw; lanes hitting one element apply in row-major lane order, each "
              "result rounded; masked-out lanes are not accessed.",
              edge_cases={"atomic_rmw/float-minmax": "Triton lowers float max/min to integer max/min "
                                                     "of the bits (_expand_atomic_fp_min_max 'Does not "
                                                     "handle NaNs'): NaN and -0.0 vs +0.0 are left "
                                                     "undefined there; the reference propagates NaN "
                                                     "(np.maximum) and cases avoid both",
                          "atomic_rmw/duplicate-order": "with duplicate indices only order-free results "
                                                        "are defined (integer add/max/min, and/or/xor, "
                                                        "float max/min, xchg of equal values); the "
                                                        "values the lanes saw and float sums depend on "
                                                        "the hardware's order (cases compare the final "
                                                        "ref, float sums under a DOT_PRODUCT bound)",
                          "atomic_rmw/f16": "only add (jax _atomic_abstract_eval refuses the others for "
                                            "f16)"},
              sources=(_TRITON,),
              notes="Float max/min propagate NaN; Triton's integer-trick float min/max leaves NaN "
                    "handling undefined."),
    Semantics("atomic_cas", "Compare-and-swap of a scalar ref; returns the old value.",
              edge_cases={"atomic_cas/bitwise-compare": "the comparison is of bit patterns (PTX "
                                                        "atom.cas.b32/.b64): a float -0.0 does not "
                                                        "match +0.0, a NaN matches the same NaN (JAX's "
                                                        "HLO interpret mode compares as floats: a known "
                                                        "divergence)"},
              sources=(_TRITON, "triton-lang/triton test/TritonGPU/atomic-cas.mlir")),
    Semantics("debug_barrier", "Triton thread barrier: no effect on values.",
              sources=(_TRITON,)),
    Semantics("elementwise_inline_asm", _ASM_SUMMARY, sources=(_TRITON, _PTX_TANH),
              exactness=CORRECTLY_ROUNDED),
)

# Other JAX spellings of the primitives above: {name: the primitive of its entry}.
ALIASES = {"debug_barrier_p": "debug_barrier",                       # up to JAX 0.11
           "elementwise_inline_asm_p": "elementwise_inline_asm"}     # up to JAX 0.11

# approx_tanh (jax.experimental.pallas.triton.approx_tanh) is PTX tanh.approx.f32 through
# elementwise_inline_asm (the instruction: PTX ISA, Floating Point Instructions: tanh, the page
# JAX's docstring cites; MUFU.TANH since sm_75). Its accuracy, measured over every float32 input
# (N. Juffa, https://forums.developer.nvidia.com/t/hardware-accelerated-tanh-on-turing/173291):
# maximum relative error 1.113e-5, 133.96 ulp. The reference computes the correctly rounded tanh;
# a backend may be 2^-16 relative away (1.113e-5 rounded up to a power of two):
# rtol = 2^-16 / eps(f32) = 128 eps, atol 0 (relative only).
APPROX_TANH_F32 = C.abs_rel(0, 128, "tanh-approx-f32")

# What JAX's Triton lowering accepts (jax/_src/pallas/triton/lowering.py _dot_general_lowering,
# identical in JAX 0.10.2, 0.11.2 and 0.12.0.1), stated for the dot cases:
DOT_LOWERING = {
    "inputs": "float16, bfloat16, float32, float64 (M>=16, N>=8, K>=16), int8 (int32 accumulator), the "
              "float8 types Triton supports on the GPU; unsigned integers refused (NotImplementedError)",
    "precision": "DEFAULT and HIGH: TF32 (_TF32_PRECISIONS); HIGHEST: IEEE for float32",
    "algorithms": "TF32_TF32_F32, TF32_TF32_F32_X3, F32_F32_F32, F16_F16_F16, F16_F16_F32, BF16_BF16_BF16, "
                  "BF16_BF16_F32, BF16_BF16_F32_X3/X6/X9; any other preset raises NotImplementedError",
    "accumulator": "the output dtype if int32 / float16 / float64, else float32 (F16/BF16 presets: the "
                   "preset's accumulation type)",
    "shape": "2-D operands only (no batch dimensions); Triton's tl.dot needs every dimension >= 16",
}

# What the Triton pallas_call lowering refuses outright (pallas_call_registration.py, lowering.py;
# measured by lowering for an abstract H100 on JAX 0.12.0.1): dynamic grid bounds, scalar prefetch
# (num_index_operands), a mesh, scratch_shapes ("scratch memory not implemented in the Triton
# backend") and run_scoped ("Unimplemented primitive"), as well as gather and reciprocal (no rule;
# the H100 run). The TPU feature kernels that need them have no Triton counterpart. Grid programs
# run concurrently on a GPU, so kernels that accumulate into an output block revisited across grid
# steps (the TPU pattern) are races there: the Triton cases accumulate inside one program.
TRITON_REFUSES = ("dynamic grid bounds", "scalar prefetch", "mesh", "scratch_shapes", "run_scoped", "gather",
                  "reciprocal")
