"""Structural and indexing primitives (broadcast, reshape, transpose, pad, concatenate, iota, rev,
slices, dynamic slices with clamping, gather/scatter modes): bit-exact on every backend."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax._src import core as _core
from jax._src.lax import lax as _lax_internal

from ._elementwise import BF16, BOOL, C64, F16, F32, F64, I8, I32, U8
from ._programs import program_cases

DT = (F32, I32)
NDT = (BF16, U8, I8, F64, C64)


def _gather_rows(x, idx):
    return jnp.take(x, idx, axis=0, mode="clip")


def _gather_fill(x, idx):
    return x.at[idx].get(mode="fill", fill_value=7)


def cases():
    P = program_cases
    fam = "lax_structure"
    yield from P(fam, "broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3, 5), (1, 2)), [(3, 5)], DT,
                 primitives=["broadcast_in_dim"], nightly_dtypes=NDT)
    yield from P(fam, "reshape", lambda x: lax.reshape(x, (5, 2, 3)), [(3, 10)], DT, primitives=["reshape"],
                 nightly_dtypes=NDT)
    yield from P(fam, "transpose_rank3", lambda x: lax.transpose(x, (2, 0, 1)), [(2, 3, 7)], DT,
                 primitives=["transpose"], nightly_dtypes=NDT)
    yield from P(fam, "pad_negative_interior", lambda x: lax.pad(x, jnp.array(7, x.dtype),
                                                                 ((1, -2, 1), (-1, 2, 0))), [(4, 6)], DT,
                 primitives=["pad"], nightly_dtypes=NDT)
    yield from P(fam, "concatenate", lambda x, y: lax.concatenate([x, y, x], 1), [(3, 2), (3, 5)], DT,
                 primitives=["concatenate"], nightly_dtypes=NDT)
    yield from P(fam, "iota_2d", lambda x: x + lax.broadcasted_iota(x.dtype, x.shape, 1), [(3, 7)], (I32,),
                 primitives=["iota", "add"], specials=0)
    yield from P(fam, "rev", lambda x: lax.rev(x, (0, 2)), [(2, 3, 4)], DT, primitives=["rev"],
                 nightly_dtypes=NDT)
    yield from P(fam, "slice_strided", lambda x: lax.slice(x, (1, 0), (7, 9), (2, 3)), [(8, 10)], DT,
                 primitives=["slice"], nightly_dtypes=NDT)
    yield from P(fam, "squeeze_expand", lambda x: lax.expand_dims(lax.squeeze(x, (1,)), (0,)), [(3, 1, 4)], DT,
                 primitives=["squeeze", "broadcast_in_dim"])
    # Dynamic slices: start indices out of range are clamped (XLA semantics).
    yield from P(fam, "dynamic_slice_clamped", lambda x, i: lax.dynamic_slice(x, (i[0], i[1]), (3, 4)),
                 [(6, 7)], DT, int_inputs={1: (-10, 10, (2,))}, primitives=["dynamic_slice"],
                 nightly_dtypes=NDT)
    yield from P(fam, "dynamic_update_slice_clamped",
                 lambda x, u, i: lax.dynamic_update_slice(x, u, (i[0], i[1])),
                 [(6, 7), (2, 5)], DT, int_inputs={2: (-10, 10, (2,))}, primitives=["dynamic_update_slice"],
                 nightly_dtypes=NDT)
    yield from P(fam, "gather_clip", _gather_rows, [(6, 3)], DT, int_inputs={1: (-9, 9, (10,))},
                 primitives=["gather"], nightly_dtypes=NDT)
    yield from P(fam, "gather_fill", _gather_fill, [(6,)], DT, int_inputs={1: (-9, 9, (10,))},
                 primitives=["gather"])
    yield from P(fam, "scatter_set_drop", lambda x, i, u: x.at[i].set(u, mode="drop"), [(8,), (12,)], DT,
                 int_inputs={1: (-12, 12, (12,))}, primitives=["scatter"])
    yield from P(fam, "scatter_add_int_dups", lambda x, i, u: x.at[i].add(u), [(5,), (16,)], (I32,),
                 int_inputs={1: (0, 4, (16,))}, primitives=["scatter-add"])
    for op in ("mul", "min", "max"):
        yield from P(fam, f"scatter_{op}_dups", lambda x, i, u, op=op: getattr(x.at[i], op)(u), [(5,), (16,)],
                     (I32,) + ((F32,) if op != "mul" else ()), int_inputs={1: (0, 4, (16,))},
                     primitives=[f"scatter-{op}"])
    yield from P(fam, "gather_rank3_batched", lambda x, i: jnp.take_along_axis(x, i, axis=2, mode="clip"),
                 [(2, 3, 5)], DT, int_inputs={1: (-2, 7, (2, 3, 4))}, primitives=["gather"])
    yield from P(fam, "copy_p", lambda x: jnp.copy(x) + 0, [(3, 4)], (I32,), primitives=["copy"])
    yield from P(fam, "roll_tile", lambda x: jnp.tile(jnp.roll(x, 2, axis=1), (2, 1)), [(3, 5)], DT,
                 primitives=["slice", "concatenate"])
    yield from P(fam, "select_where", lambda p, x, y: jnp.where(p > 0, x, y), [(4, 6), (4, 6), (4, 6)], (F32,),
                 primitives=["select_n", "gt"])
    # split (a size-0 piece included), stack, tie (orders effects; the value is its second operand).
    yield from P(fam, "split", lambda x: lax.split(x, (2, 0, 4, 1), axis=1), [(3, 7)], DT, primitives=["split"],
                 nightly_dtypes=NDT + (BOOL, F16))
    yield from P(fam, "stack_rank3", lambda x, y: jnp.stack([x, y, x], axis=1), [(2, 5), (2, 5)], DT,
                 primitives=["stack"], nightly_dtypes=NDT + (BOOL, F16))
    # unstack bound directly (JAX 0.10.2's jnp does not use it; 0.12's does).
    yield from P(fam, "unstack_rank3", lambda x: _lax_internal.unstack_p.bind(x, axis=1), [(2, 3, 4)], DT,
                 primitives=["unstack"], nightly_dtypes=NDT + (BOOL, F16))
    yield from P(fam, "tie", lambda x, y: _lax_internal.tie_p.bind(x, y), [(4,), (4,)], (F32,), primitives=["tie"])
    # lax.empty / empty2 (scan's carry placeholder): never-written memory is undefined, so the
    # programs overwrite all of it and only the overwritten values are compared.
    yield from P(fam, "empty_overwritten", lambda x: lax.dynamic_update_slice(lax.empty(x.shape, x.dtype), x,
                                                                             (0,) * x.ndim),
                 [(3, 5)], DT, primitives=["empty"])
    yield from P(fam, "empty2_overwritten", lambda x: lax.dynamic_update_slice(
        lax.broadcast(_lax_internal.empty2(x.dtype, memory_space=_core.MemorySpace.Device), x.shape), x,
        (0,) * x.ndim), [(3, 5)], DT, primitives=["empty2"])
