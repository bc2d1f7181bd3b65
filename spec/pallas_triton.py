"""Semantics of the Pallas Triton primitives (``jax.experimental.pallas.triton``) as the reference
implements them (``interp/rules/pallas_triton.py``). Primitives every Pallas lowering shares
(masked loads and stores, program ids, ``multiple_of``) are in ``spec/pallas.py``.

Anchors: ``jax/_src/pallas/triton/primitives.py`` (the primitives, their discharge rules and
Triton lowerings) and ``jax/_src/pallas/triton/lowering.py`` (what the Triton lowering accepts).
"""
from __future__ import annotations

from . import compliance as C
from .base import Semantics, table

_TRITON = "jax/_src/pallas/triton/primitives.py"

SEMANTICS = table(
    Semantics("max_contiguous", "Triton compiler hint; the value unchanged.",
              sources=(_TRITON,)),
    Semantics("atomic_rmw", "Triton atomics (xchg, add, max, min, and, or, xor) return the value "
              "each lane saw; lanes hitting one element apply in row-major lane order, each "
              "result rounded; masked-out lanes are not accessed.",
              sources=(_TRITON,),
              notes="Float max/min propagate NaN; Triton's integer-trick float min/max leaves NaN "
                    "handling undefined."),
    Semantics("atomic_cas", "Compare-and-swap of a scalar ref; returns the old value.",
              sources=(_TRITON,)),
    Semantics("debug_barrier", "Triton thread barrier: no effect on values.",
              sources=(_TRITON,)),
)

# approx_tanh (jax.experimental.pallas.triton.approx_tanh) is PTX tanh.approx.f32 through
# elementwise_inline_asm. The PTX ISA states its accuracy: "Max relative error 2^-10.987" for
# .f32 (PTX ISA, Floating Point Instructions: tanh,
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#floating-point-instructions-tanh,
# the page JAX's docstring cites). The reference computes the correctly rounded tanh; a backend
# may be that relative error away: rtol = 2^-10.987 / eps(f32) = 2^12.013 ~ 4134 eps.
APPROX_TANH_F32 = C.abs_rel(0, 4134, "PTX ISA tanh.approx.f32: max relative error 2^-10.987")
