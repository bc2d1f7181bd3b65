"""Zero-size operands and outputs across the primitive families, against XLA:CPU (bit for bit).

An empty operand or output is legal everywhere XLA allows it: the reference returns what XLA:CPU
returns (the empty result, or the identity / padding / fill value where the output is not empty),
never a reshape error. One program per family shape of the problem; each costs one XLA compile.
"""
from __future__ import annotations

import numpy as np
import pytest
import jax.numpy as jnp
from jax import lax

from tests.support import assert_tree_same_bits, reference, xla_cpu

F32, I32 = np.float32, np.int32


def _f(*shape):
    return np.arange(int(np.prod(shape)), dtype=F32).reshape(shape) - 2.5


def _i(*shape):
    return np.arange(int(np.prod(shape)), dtype=I32).reshape(shape) - 3


_GATHER_DN = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
_SCATTER_DN = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))

PROGRAMS = {
    # elementwise and conversions: empty in, empty out
    "add": (lambda x, y: x + y, (_f(0, 3), _f(0, 3))),
    "exp": (jnp.exp, (_f(2, 0),)),
    "select_n": (lambda p, x, y: lax.select_n(p, x, y), (np.zeros((0, 2), bool), _f(0, 2), _f(0, 2))),
    "clamp": (lambda x: lax.clamp(F32(-1), x, F32(1)), (_f(0),)),
    "convert_element_type": (lambda x: x.astype(jnp.bfloat16), (_f(3, 0),)),
    "bitcast_convert_type": (lambda x: lax.bitcast_convert_type(x, I32), (_f(0, 4),)),
    "shift_left": (lambda x: x << 2, (_i(0, 5),)),
    # structure
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (0, 3), (1,)), (_f(3),)),
    "reshape": (lambda x: x.reshape(3, 0, 2), (_f(0, 6),)),
    "transpose": (lambda x: x.T, (_f(0, 4),)),
    "pad_of_empty": (lambda x: lax.pad(x, F32(7), ((1, 2, 0), (0, 0, 0))), (_f(0, 2),)),
    "pad_to_empty": (lambda x: lax.pad(x, F32(7), ((-2, 0, 0),)), (_f(2),)),
    "concatenate": (lambda x, y: lax.concatenate([x, y], 0), (_f(0, 3), _f(2, 3))),
    "rev": (lambda x: lax.rev(x, (0,)), (_f(0, 2),)),
    "iota": (lambda: lax.iota(I32, 0), ()),
    # indexing
    "slice": (lambda x: lax.slice(x, (1,), (1,)), (_f(4),)),
    "dynamic_slice": (lambda x, i: lax.dynamic_slice(x, (i,), (0,)), (_f(4), np.int32(2))),
    "dynamic_update_slice": (lambda x, u, i: lax.dynamic_update_slice(x, u, (i,)), (_f(4), _f(0), np.int32(1))),
    "gather_no_indices": (lambda x, i: lax.gather(x, i, _GATHER_DN, (1, 3)), (_f(4, 3), np.zeros((0, 1), I32))),
    "scatter_add_no_updates": (lambda x, i, u: lax.scatter_add(x, i, u, _SCATTER_DN),
                               (_f(4, 3), np.zeros((0, 1), I32), _f(0, 3))),
    # reductions: an empty reduced axis gives the identity
    "reduce_sum": (lambda x: x.sum(0), (_f(0, 3),)),
    "reduce_max": (lambda x: lax.reduce_max(x, (1,)), (_f(3, 0),)),
    "reduce_min_int": (lambda x: lax.reduce_min(x, (0,)), (_i(0, 2),)),
    "reduce_prod": (lambda x: lax.reduce_prod(x, (0,)), (_f(0, 2),)),
    # an empty kept axis (found by the program fuzzer: the rule reshaped with -1, ambiguous at size 0)
    "reduce_max_empty_kept_axis": (lambda x: lax.reduce_max(x, (0,)), (_f(2, 17, 0),)),
    "reduce_and": (lambda x: lax.reduce_and(x, (0,)), (np.zeros((0, 2), bool),)),
    "cumsum": (lambda x: lax.cumsum(x, 0), (_f(0, 2),)),
    "cummax": (lambda x: lax.cummax(x, 1), (_f(2, 0),)),
    "reduce_window_empty_output": (lambda x: lax.reduce_window(x, F32(0), lax.add, (5,), (1,), "VALID"), (_f(3),)),
    "reduce_window_padded_empty_input": (
        lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), ((1, 2),)), (_f(0),)),
    # ordering
    "sort": (lambda x: lax.sort(x, dimension=0), (_f(0, 3),)),
    "top_k_of_empty_rows": (lambda x: lax.top_k(x, 2), (_f(0, 4),)),
    # contractions: an empty contracting dimension gives zeros
    "dot_general_empty_k": (lambda a, b: a @ b, (_f(3, 0), _f(0, 2))),
    "dot_general_empty_m": (lambda a, b: a @ b, (_f(0, 4), _f(4, 2))),
    "conv_output_spatial_0": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID"),
                              (_f(1, 2, 3, 3), _f(4, 2, 5, 5))),
    "conv_empty_batch": (lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME"), (_f(0, 2, 5), _f(3, 2, 3))),
    "conv_empty_in_features": (lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID"), (_f(1, 0, 5), _f(3, 0, 2))),
    # control flow
    "scan_length_0": (lambda x: lax.scan(lambda c, v: (c + v, c * v), F32(1), x), (_f(0),)),
    "while_on_empty": (lambda x: lax.fori_loop(0, 3, lambda i, v: v * 2, x), (_f(0, 2),)),
    "cond_on_empty": (lambda p, x: lax.cond(p, lambda v: v + 1, lambda v: v - 1, x), (np.bool_(True), _f(0),)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_zero_size_against_xla_cpu(name):
    fn, args = PROGRAMS[name]
    want = xla_cpu(fn, *args)
    got = reference(fn, *args)
    assert_tree_same_bits(got, want)
