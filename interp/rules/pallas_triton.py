"""Rules: Pallas Triton dialect (``jax.experimental.pallas.triton``): atomics, compare-and-swap,
the contiguity hint and the thread barrier. Primitives every Pallas lowering shares (loads and
stores with masks, program ids, ``multiple_of``) stay in ``interp/rules/pallas.py``.
"""
from __future__ import annotations

import numpy as np

from ..registry import register
from .pallas import _target


@register("max_contiguous")
def max_contiguous(eqn, x, *, values):
    # Triton's contiguity hint for vectors of indices; the value unchanged.
    return x


@register("debug_barrier", "debug_barrier_p")
def debug_barrier(eqn):
    # A thread barrier inside one program: nothing observable in values.
    return []


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, val: val}


@register("atomic_rmw", partial="float max/min propagate NaN (Triton's integer-trick float "
                                "min/max leaves NaN handling undefined)")
def atomic_rmw(eqn, *flat, args_tree, atomic_type):
    # One kernel instance runs at a time, so an atomic is a read-modify-write; lanes that hit the
    # same element apply in row-major lane order (each addition rounded), and each lane returns
    # the value it saw.
    ref, transforms, val, mask = args_tree.unflatten(flat)
    target, index = _target(eqn, ref, transforms)
    op = _ATOMIC[str(getattr(atomic_type, "value", atomic_type)).lower()]
    shape = eqn.out_aval.shape
    lanes = np.ones(shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
    coords = _coords(target, index, lanes)
    val = np.broadcast_to(np.asarray(val, target.dtype), shape)[lanes]
    old = target.masked_read(index, lanes, None) if mask is not None else target.read(index)
    flat_idx = np.ravel_multi_index(coords, target.shape) if coords else np.zeros(1, np.int64)
    seen = np.empty(val.shape, target.dtype)
    if len(np.unique(flat_idx)) == flat_idx.size:
        seen[...] = target.array[coords]
        new = op(seen, val).astype(target.dtype)
    else:
        seen_l = []
        current = {}
        for lane, pos in enumerate(flat_idx.tolist()):
            before = current.get(pos, target.array.reshape(-1)[pos])
            seen_l.append(before)
            current[pos] = op(before, val[lane]).astype(target.dtype)
        seen[...] = seen_l
        new = np.array([current[p] for p in flat_idx.tolist()], target.dtype)
    target.masked_write(index, _scatter(shape, lanes, new, target.dtype), lanes)
    out = np.array(old, copy=True)
    out[lanes] = seen
    return out.reshape(shape)


def _coords(ref, index, lanes):
    from ..pallas.memory import _selected_coords
    return _selected_coords(ref.shape, index, lanes)


def _scatter(shape, lanes, values, dtype):
    out = np.zeros(shape, dtype)
    out[lanes] = values
    return out


@register("atomic_cas")
def atomic_cas(eqn, ref, cmp, val):
    # The comparison is of bit patterns: Triton lowers tt.atomic_cas to PTX atom.cas.b32/.b64
    # (triton-lang/triton test/TritonGPU/atomic-cas.mlir), so a float -0.0 does not match +0.0
    # and a NaN matches the same NaN (spec/pallas_triton.py atomic_cas/bitwise-compare).
    old = np.asarray(ref.read(()))
    if _bits(old) == _bits(np.asarray(cmp, old.dtype)):
        ref.write((), val)
    return old


def _bits(x: np.ndarray) -> int:
    from ..dtypes import storage_uint
    return int(np.array(x).reshape(1).view(storage_uint(x.dtype))[0])


# approx_tanh's instructions (jax/_src/pallas/triton/primitives.py approx_tanh): the only inline
# assembly with a meaning the reference can state (the hyperbolic tangent; its accuracy is the
# compliance mode, spec/pallas_triton.py APPROX_TANH).
_APPROX_TANH = {"tanh.approx.f32 $0, $1;": "float32", "tanh.approx.f16 $0, $1;": "float16",
                "tanh.approx.bf16 $0, $1;": "bfloat16"}


@register("elementwise_inline_asm", "elementwise_inline_asm_p",
          partial="only approx_tanh's tanh.approx instructions; other assembly is refused")
def elementwise_inline_asm(eqn, *args, asm, constraints, pack, result_shape_dtypes):
    dtype = _APPROX_TANH.get(asm.strip())
    if dtype is None or pack != 1 or len(args) != 1 or np.asarray(args[0]).dtype.name != dtype:
        raise eqn.unsupported("elementwise_inline_asm: arbitrary PTX has no reference meaning; only "
                              f"approx_tanh's {sorted(_APPROX_TANH)} (pack=1, one operand of that "
                              f"type) are implemented, as the correctly rounded tanh")
    from .lax_special import REAL, evaluate
    return [evaluate(REAL["tanh"], [np.asarray(args[0])], dtype)]


