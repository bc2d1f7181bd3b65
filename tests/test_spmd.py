"""SPMD in the reference (interp/rules/spmd.py, interp/spmd.py; semantics spec/spmd.py).

Against XLA:CPU with 8 host devices: pytest's own process may already have started JAX with one
device, so the comparisons run in one subprocess with XLA_FLAGS set before JAX starts
(``_compare_main``); each test below asserts its program's verdict from there. Float programs use
small integer-valued inputs where every sum is exact, so the comparison is bitwise: XLA's
summation order cannot matter. Reference-only tests check hand-computed answers and the
undefined-behaviour errors (deadlock, mismatched collectives, unreplicated outputs).
"""
from __future__ import annotations

import json
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import interp
from conformance.cases.spmd import make_mesh
from interp.spmd import CollectiveMismatchError, DeadlockError
from interp.errors import OutOfBoundsError, RaceError, UndefinedBehaviorError
from tests.support import verdicts_with_8_devices


def smap(f, shape, names, in_specs, out_specs, **kw):
    """shard_map over a mesh built when traced (real devices in the subprocess, abstract here)."""
    def run(*args):
        return jax.shard_map(f, mesh=make_mesh(shape, names), in_specs=in_specs, out_specs=out_specs,
                             **kw)(*args)
    return run


def _ints(shape, lo=-4, hi=4, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


# --- programs compared with XLA:CPU (8 host devices), bit for bit ---------------------------------

def _nested(x):
    # Outer shard_map over x, inner over y: the inner body reduces over both levels.
    def inner(b):
        return lax.psum(b, "y") + lax.psum(b, "x") * 10 + lax.axis_index("y")
    def outer(a):   # (the inner shard_map takes its mesh from the context)
        return jax.shard_map(inner, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"})(a)
    return smap(outer, (2, 4), ("x", "y"), P("x"), P("x"), axis_names={"x"})(x)


def _grad_data_parallel(w, x):
    def loss(w, x):
        return jnp.sum((x @ w) ** 2)
    def step(w, x):
        return lax.psum(jax.grad(loss)(w, x), "x")
    return smap(step, (8,), ("x",), (P(), P("x")), P())(w, x)


def _grad_through_shard_map(w, x):
    # jax.grad of a whole shard_map program: JAX transposes psum/all_gather into the collectives
    # of the backward pass.
    def fwd(w, x):
        y = smap(lambda w, x: lax.all_gather(x @ w, "x", tiled=True), (4,), ("x",), (P(), P("x")),
                 P(), check_vma=False)(w, x)
        return jnp.sum(y ** 2)
    return jax.grad(fwd, argnums=(0, 1))(w, x)


def _vmap_of_shard_map(x):
    f = smap(lambda a: lax.psum(a, "x") * lax.axis_index("x"), (4,), ("x",), P("x"), P("x"))
    return jax.vmap(f)(x)


def _scan_in_shard_map(x):
    def body(a):
        def step(c, _):
            c = lax.ppermute(c, "x", [(j, (j + 1) % 4) for j in range(4)]) + c
            return c, lax.pmax(c, "x")
        return lax.scan(step, a, None, length=3)
    return smap(body, (4,), ("x",), P("x"), (P("x"), P(None, "x")), check_vma=False)(x)


def _shard_map_in_scan(x):
    f = smap(lambda a: lax.psum(a, "x") - a, (8,), ("x",), P("x"), P("x"))
    return lax.scan(lambda c, _: (f(c), c.sum()), x, None, length=3)


def _while_with_collective(x):
    # Every device runs the same trip count (it depends on a psum): lockstep holds.
    def body(a):
        def cond(c):
            return lax.psum(jnp.sum(c), "x") < 1000
        return lax.while_loop(cond, lambda c: c * 2 + lax.axis_index("x"), a)
    return smap(body, (4,), ("x",), P("x"), P("x"))(x)


def _untiled_and_axis_forms(x):
    def body(a):
        return (lax.all_gather(a, "y", axis=1), lax.all_to_all(a, ("x", "y"), 1, 0, tiled=True),
                lax.psum_scatter(a[:4], "y", scatter_dimension=0, tiled=False),
                lax.ppermute(a, ("x", "y"), [(0, 7), (7, 0), (3, 4)]),
                lax.pmin(a, ("y", "x")), lax.pmean(a, "x"))
    return smap(body, (2, 4), ("x", "y"), P("x", "y"),
                (P("x", None, "y"), P("x", "y"), P(("x", "y")), P("x", "y"), P(), P(None, "y")),
                check_vma=False)(x)


def _axis_subset_and_replicated_inputs(x, w):
    # Inputs split over one axis of two, one replicated; outputs over an axis subset.
    def body(a, w):
        return lax.psum(a @ w, "x"), jnp.broadcast_to(lax.axis_index("y"), (1,)) + 0 * a[:1, 0]
    return smap(body, (2, 4), ("x", "y"), (P("x"), P()), (P(), P("y")), check_vma=False)(x, w)


def _pmap(x):
    return jax.pmap(lambda a: lax.psum(a, "i") * lax.axis_index("i"), axis_name="i")(x)


def _pmap_axes(x, y):
    f = jax.pmap(lambda a, b: (lax.all_gather(a, "i"), b + lax.pmax(a.sum(), "i")), axis_name="i",
                 in_axes=(1, None), out_axes=(0, 1))
    return f(x, y)


def _jit_of_shard_map_int(x):
    f = smap(lambda a: (lax.psum(a, "x"), lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True)), (8,), ("x",), P("x"),
             (P(), P("x")))
    return jax.jit(f)(x)


def _sharding_annotations(x):
    # Placement annotations around a shard_map keep values (control_flow.py placement rules).
    mesh = make_mesh((2, 4), ("x", "y"))
    rows = jax.sharding.NamedSharding(mesh, P("x"))
    y = lax.with_sharding_constraint(x * 3, rows)
    y = smap(lambda a: lax.psum(a, "y"), (2, 4), ("x", "y"), P("x", "y"), P("x"))(y)
    return jax.device_put(y, jax.sharding.NamedSharding(mesh, P(None, "y"))) - 1


def _pallas_in_shard_map(x):
    # A Pallas kernel per device (HLO interpret mode on XLA:CPU; the reference runs any kernel).
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + 1

    def body(a):
        y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), interpret=True)(a)
        return lax.psum(y, "x")
    return smap(body, (4,), ("x",), P("x"), P(), check_vma=False)(x)


def _signed_zeros(x):
    # psum of -0.0 everywhere is +0.0 on XLA:CPU (spec/spmd.py psum). (Float pmax/pmin are not
    # compared: XLA:CPU's all-reduce drops NaN and keeps the first device's zero, spec/spmd.py.)
    return smap(lambda a: lax.psum(a, "x"), (8,), ("x",), P("x"), P())(x)


def _signed_zero_inputs():
    x = np.full((8, 3), -0.0, np.float32)
    x[5, 1] = 0.0
    x[0, 2] = 0.0
    return [x]


def _scalar_operands(x, v):
    # rank-0 blocks: a replicated scalar operand, and an untiled psum_scatter down to rank 0
    def body(a, b):
        return (lax.reshape(lax.div(a, a + 1), (1,)),
                lax.reshape(lax.psum_scatter(b, "x", scatter_dimension=0, tiled=False), (1,)))
    return smap(body, (4,), ("x",), (P(), P()), (P("x"), P("x")), check_vma=False)(x, v)


COMPARED = {
    "scalar_operands": (_scalar_operands, lambda: [np.float32(3.0), _ints((4,), dtype=np.int32)]),
    "nested": (_nested, lambda: [_ints((8, 8))]),
    "grad_data_parallel": (_grad_data_parallel, lambda: [_ints((4, 3)), _ints((16, 4), seed=1)]),
    "grad_through_shard_map": (_grad_through_shard_map, lambda: [_ints((4, 3)), _ints((8, 4), seed=1)]),
    "vmap_of_shard_map": (_vmap_of_shard_map, lambda: [_ints((3, 8, 2))]),
    "scan_in_shard_map": (_scan_in_shard_map, lambda: [_ints((8, 3))]),
    "shard_map_in_scan": (_shard_map_in_scan, lambda: [_ints((8, 2))]),
    "while_with_collective": (_while_with_collective, lambda: [_ints((8, 2), 1, 3)]),
    "untiled_and_axis_forms": (_untiled_and_axis_forms, lambda: [_ints((8, 32), dtype=np.int32)]),
    "axis_subset_and_replicated_inputs": (_axis_subset_and_replicated_inputs,
                                          lambda: [_ints((8, 4)), _ints((4, 4), seed=2)]),
    "pmap": (_pmap, lambda: [_ints((8, 3))]),
    "pmap_axes": (_pmap_axes, lambda: [_ints((3, 8), dtype=np.int32), _ints((5,), dtype=np.int32)]),
    "sharding_annotations": (_sharding_annotations, lambda: [_ints((8, 16), dtype=np.int32)]),
    "pallas_in_shard_map": (_pallas_in_shard_map, lambda: [_ints((32, 128), dtype=np.int32)]),
    "signed_zeros": (_signed_zeros, _signed_zero_inputs),
    "jit_of_shard_map_int": (_jit_of_shard_map_int, lambda: [_ints((16, 8), -2**31, 2**31 - 1, dtype=np.int32)]),
}


def _compare_main() -> None:
    """Run in a subprocess with 8 host devices: {program: "ok" | what differs} as JSON."""
    assert len(jax.devices()) == 8, jax.devices()
    verdicts = {}
    for name, (fn, inputs) in COMPARED.items():
        args = inputs()
        try:
            want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
            got = jax.tree_util.tree_leaves(interp.interpret(fn)(*args))
            bad = [i for i, (w, g) in enumerate(zip(want, got))
                   if np.asarray(w).tobytes() != np.asarray(g).tobytes() or np.shape(w) != np.shape(g)]
            verdicts[name] = "ok" if not bad and len(want) == len(got) else f"outputs {bad} differ"
        except Exception as e:  # noqa: BLE001 - reported as the program's verdict
            verdicts[name] = f"{type(e).__name__}: {str(e)[:500]}"
    from conformance.cases import get
    from conformance.execute import run_case
    for case_id in CASES_ON_XLA:
        rec = run_case(get(case_id), "xla:cpu", 0)
        verdicts[case_id] = rec.outcome + " " + str((rec.known_divergence or {}).get("id") or rec.detail)[:300]
    for case_id in CASES_ON_TPU_INTERPRET:
        rec = run_case(get(case_id), "pallas:tpu-interpret", 0)
        verdicts[case_id] = rec.outcome + " " + str((rec.known_divergence or {}).get("id") or rec.detail)[:300]
    verdicts["core_axis_dma_tpu_interpret"] = _core_axis_dma_on_tpu_interpret()
    print("VERDICTS " + json.dumps(verdicts))


# Conformance cases whose outcome on xla:cpu (8 host devices) is asserted here; the whole family
# runs in the main job (make conformance).
CASES_ON_XLA = {"spmd/float_extrema/float32/8": "known-divergence xla-cpu-all-reduce-extremum-nan-zero",
                "spmd/collectives/mixed/2x4": "pass"}
# (the unreduced / reduced spec cases: tests/test_spmd_unreduced.py)


# Remote-DMA kernels on JAX's TPU interpret mode (it simulates the 8 host devices in threads),
# against the reference running the same kernel: every feature, MESH and LOGICAL ids, 1-D and 2-D.
CASES_ON_TPU_INTERPRET = {"spmd/pallas/ring_permute_remote_dma/int32/8": "pass",
                          "spmd/pallas/barrier_handshake/float32/4": "pass",
                          "spmd/pallas/right_permute_signal/float32/2x4": "pass",
                          "spmd/pallas/ring_permute_run_scoped/int32/2x4": "pass",
                          "spmd/pallas/claims/all_gather_shipped/float32/2": "pass",
                          # core-mesh kernels of 2 cores on each of 2 devices
                          "spmd/pallas/core_ring_remote_dma/int32/2x2cores": "pass",
                          "spmd/pallas/core_cross_signal/float32/2x2cores": "pass"}


@pytest.fixture(scope="module")
def xla_verdicts():
    return verdicts_with_8_devices("tests.test_spmd")


@pytest.mark.parametrize("name", list(COMPARED))
def test_matches_xla_cpu_with_8_devices(xla_verdicts, name):
    assert xla_verdicts[name] == "ok", xla_verdicts[name]


@pytest.mark.parametrize("case_id", list(CASES_ON_XLA))
def test_case_outcome_on_xla_cpu_with_8_devices(xla_verdicts, case_id):
    assert xla_verdicts[case_id].startswith(CASES_ON_XLA[case_id]), xla_verdicts[case_id]


@pytest.mark.parametrize("case_id", list(CASES_ON_TPU_INTERPRET))
def test_remote_dma_case_on_tpu_interpret_with_8_devices(xla_verdicts, case_id):
    assert xla_verdicts[case_id].startswith(CASES_ON_TPU_INTERPRET[case_id]), xla_verdicts[case_id]


# --- reference only: hand-computed answers --------------------------------------------------------

def test_rank_0_blocks_stay_rank_0():
    """A replicated scalar operand is a scalar on every device, and an untiled psum_scatter of a
    (4,) block over 4 devices gives each device a scalar (its element of the sum)."""
    x, v = np.float32(3.0), np.array([1, -2, 5, 7], np.int32)
    got = interp.interpret(_scalar_operands)(x, v)
    np.testing.assert_array_equal(got[0], np.full(4, np.float32(3.0) / np.float32(4.0)))
    np.testing.assert_array_equal(got[1], 4 * v)


def test_ppermute_partial_permutation_unsent_shards_are_zero():
    f = smap(lambda a: lax.ppermute(a, "x", [(0, 2), (2, 0)]), (4,), ("x",), P("x"), P("x"))
    x = np.arange(1, 9, dtype=np.int32)
    np.testing.assert_array_equal(interp.interpret(f)(x), [5, 6, 0, 0, 1, 2, 0, 0])


def test_all_to_all_known_answer():
    # 2 devices, rows split: device d holds [[2d, 2d+1], ...]; all_to_all(split 1, concat 0).
    f = smap(lambda a: lax.all_to_all(a, "x", 1, 0, tiled=True), (2,), ("x",), P("x"), P("x"))
    x = np.arange(8, dtype=np.int32).reshape(2, 4)
    # device 0 [0 1 2 3] -> blocks [0 1] [2 3]; device 1 [4 5 6 7] -> [4 5] [6 7]
    np.testing.assert_array_equal(interp.interpret(f)(x), [[0, 1], [4, 5], [2, 3], [6, 7]])


def test_pbroadcast_from_source():
    # pbroadcast lowers on GPU only (jax/_src/lax/parallel.py): a hand-computed answer.
    if not hasattr(lax, "pbroadcast"):
        pytest.skip("jax.lax.pbroadcast is not public in this JAX")
    f = smap(lambda a: lax.pbroadcast(a, "x", 2), (4,), ("x",), P("x"), P("x"), check_vma=False)
    np.testing.assert_array_equal(interp.interpret(f)(np.arange(4, dtype=np.int32)), [2, 2, 2, 2])


def _ragged_example():
    """The example of jax.lax.ragged_all_to_all's docstring (axis of size 2): the program and its
    operands (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)."""
    def body(op, out, io, ss, oo, rs):
        return lax.ragged_all_to_all(op[0], out[0], io[0], ss[0], oo[0], rs[0], axis_name="x")[None]
    args = (np.array([[1, 2, 2], [3, 4, 0]], np.float32), np.zeros((2, 4), np.float32),
            np.array([[0, 1], [0, 1]], np.int32), np.array([[1, 2], [1, 1]], np.int32),
            np.array([[0, 0], [1, 2]], np.int32), np.array([[1, 1], [2, 1]], np.int32))
    return interp.interpret(smap(body, (2,), ("x",), (P("x"),) * 6, P("x"))), args


def test_ragged_all_to_all_docstring_example():
    f, args = _ragged_example()
    np.testing.assert_array_equal(f(*args), [[1, 3, 0, 0], [2, 2, 4, 0]])


def test_ragged_all_to_all_c1_a_send_out_of_bounds_raises():
    f, (op, out, io, _, oo, rs) = _ragged_example()
    # device 1's second send: 3 rows from row 1 of its operand of 3 rows
    with pytest.raises(UndefinedBehaviorError, match="out of bounds.*ragged_all_to_all/c1"):
        f(op, out, io, np.array([[1, 2], [1, 3]], np.int32), oo, rs)


def test_ragged_all_to_all_c2_two_sends_to_one_row_raise():
    f, (op, out, io, ss, _, rs) = _ragged_example()
    # both devices' first sends land on row 0 of device 0's output
    with pytest.raises(UndefinedBehaviorError, match="written by two sends.*ragged_all_to_all/c2"):
        f(op, out, io, ss, np.array([[0, 0], [0, 2]], np.int32), rs)


def test_pbroadcast_dynamic_c1_sources_that_differ_or_lie_outside_raise():
    from jax._src.lax import parallel
    if not hasattr(parallel, "pbroadcast_dynamic_p"):
        pytest.skip("pbroadcast_dynamic is new in JAX 0.12")
    f = smap(lambda a, s: lax.pbroadcast(a, "x", s[0]), (2,), ("x",), (P("x"), P("x")), P("x"),
             check_vma=False)
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(x, np.array([1, 1], np.int32)), [1, 1])
    with pytest.raises(UndefinedBehaviorError, match=r"pbroadcast_dynamic/c1: devices name different"):
        interp.interpret(f)(x, np.array([0, 1], np.int32))
    with pytest.raises(UndefinedBehaviorError, match="pbroadcast_dynamic/c1: source 5 outside"):
        interp.interpret(f)(x, np.array([5, 5], np.int32))


def test_psum_is_the_correctly_rounded_exact_sum():
    # 1e8 + 1 + ... - 1e8 in float32 on 4 devices: any left-to-right order gives 0 or 2; the exact
    # sum is 3 (1 + 1 + 1 on the devices between the large terms).
    x = np.array([1e8, 1, 1, -1e8, 1, 0, 0, 0], np.float32).reshape(8, 1)
    f = smap(lambda a: lax.psum(a, "x"), (8,), ("x",), P("x"), P())
    assert interp.interpret(f)(x)[0, 0] == np.float32(3)


def test_axis_index_row_major_in_the_given_order():
    f = smap(lambda a: jnp.broadcast_to(lax.axis_index(("y", "x")), (1, 1)), (2, 4), ("x", "y"),
             P("x", "y"), P("x", "y"))
    got = interp.interpret(f)(np.zeros((2, 4), np.int32))
    np.testing.assert_array_equal(got, [[0, 2, 4, 6], [1, 3, 5, 7]])


def _await(t):
    """Complete an async collective's future (JAX 0.10: a Future object; later: the tracer's aval)."""
    if hasattr(t, "done_fun"):
        return t.done()
    return t.aval.done_fun(t) if hasattr(t.aval, "done_fun") else t


@pytest.mark.parametrize("start", ["all_gather_start", "psum_start", "psum_scatter_start", "ppermute_start",
                                   "all_to_all_start"])
def test_async_start_done_pairs(start):
    import jax._src.lax.parallel as parallel
    calls = {"all_gather_start": (lambda f, a: f(a, "x", tiled=True), lambda a: lax.all_gather(a, "x", tiled=True)),
             "psum_start": (lambda f, a: f(a, "x"), lambda a: lax.psum(a, "x")),
             "psum_scatter_start": (lambda f, a: f(a, "x", tiled=True), lambda a: lax.psum_scatter(a, "x", tiled=True)),
             "ppermute_start": (lambda f, a: f(a, "x", [(0, 1), (1, 2)]), lambda a: lax.ppermute(a, "x", [(0, 1), (1, 2)])),
             "all_to_all_start": (lambda f, a: f(a, "x", 0, 0, tiled=True),
                                  lambda a: lax.all_to_all(a, "x", 0, 0, tiled=True))}
    if not hasattr(parallel, start):
        pytest.skip(f"this JAX has no {start}")
    async_call, sync = calls[start]
    x = np.arange(32, dtype=np.float32)
    run = lambda body: interp.interpret(smap(body, (4,), ("x",), P("x"), P("x"), check_vma=False))(x)
    np.testing.assert_array_equal(run(lambda a: _await(async_call(getattr(parallel, start), a))), run(sync))


# --- undefined behaviour is loud --------------------------------------------------------------------

def test_collective_under_divergent_cond_is_a_deadlock():
    def body(a):
        return lax.cond(lax.axis_index("x") == 0, lambda v: lax.psum(v, "x"), lambda v: v, a)
    f = smap(body, (2,), ("x",), P("x"), P("x"), check_vma=False)
    with pytest.raises(DeadlockError, match=r"device\(x=0\) waits in psum"):
        interp.interpret(f)(np.ones(2, np.float32))


def test_while_with_device_dependent_trip_count_and_collective_deadlocks():
    # Device x=1 runs one more psum than device 0: on hardware it waits forever.
    def body(a):
        def step(c):
            i, v = c
            return i + 1, lax.psum(v, "x")
        return lax.while_loop(lambda c: c[0] < 1 + lax.axis_index("x"), step, (0, a))[1]
    f = smap(body, (2,), ("x",), P("x"), P("x"), check_vma=False)
    with pytest.raises(DeadlockError, match=r"device\(x=1\) waits in psum \(#1"):
        interp.interpret(f)(np.ones(2, np.float32))


def test_different_collectives_at_the_same_point_raise():
    def body(a):
        return lax.cond(lax.axis_index("x") == 0, lambda v: lax.psum(v, "x"), lambda v: lax.pmax(v, "x"), a)
    f = smap(body, (2,), ("x",), P("x"), P("x"), check_vma=False)
    with pytest.raises(CollectiveMismatchError, match="reached pmax while device"):
        interp.interpret(f)(np.ones(2, np.float32))


def test_shard_map_c2_unreplicated_output_under_check_vma_false_raises():
    f = smap(lambda a: a, (2,), ("x",), P("x"), P(), check_vma=False)
    with pytest.raises(UndefinedBehaviorError, match="different values for the same block.*shard_map/c2"):
        interp.interpret(f)(np.arange(2, dtype=np.float32))


def test_same_collective_in_different_branches_is_allowed():
    def body(a):
        return lax.cond(lax.axis_index("x") == 1, lambda v: v[jnp.int32(0)] * 0 + lax.psum(v, "x"),
                        lambda v: lax.psum(v, "x"), a)
    f = smap(body, (2,), ("x",), P("x"), P("x"), check_vma=False)
    # Same collective on both branches (different equations): allowed, the sum is right.
    np.testing.assert_array_equal(interp.interpret(f)(np.array([1, 2], np.float32)), [3, 3])


# --- coverage --------------------------------------------------------------------------------------

def test_every_spmd_primitive_is_covered():
    cov = interp.coverage()
    import jax._src.lax.parallel as parallel
    prims = {v.name for v in vars(parallel).values() if isinstance(v, jax.extend.core.Primitive)}
    prims |= {"shard_map", "pvary"} | {n for n in cov if n.startswith("reduced_vary_cast")}
    for name in prims:
        assert cov.get(name, "unsupported") != "unsupported", name


def test_participants_sum_matches_the_certified_reduce_sum():
    # The collective's fast exact path (TwoSum) against reduce_sum's certified sum
    # (interp/numerics.py float_sum_last, tested against exact arithmetic in
    # tests/test_lax_reductions.py): midpoints, cancellations, wide exponent ranges, inf and NaN.
    from interp.numerics import float_sum_last
    from interp.rules.spmd import participants_sum
    rng = np.random.default_rng(0)
    mant = rng.integers(-2**24, 2**24, size=(1500, 4)).astype(np.float64)
    x = np.ldexp(mant, rng.integers(-30, 30, size=mant.shape)).astype(np.float32)
    x[:200] = np.float32(1.5) * rng.integers(-3, 4, size=(200, 4))          # exact sums, midpoints
    x[500:600, 1] = -x[500:600, 0]                                            # cancellations
    x[600:610, 2] = np.inf
    x[610:620, 3] = np.nan
    x[620:630, 0], x[620:630, 1] = np.inf, -np.inf
    x[630:700] = np.ldexp(rng.integers(-2**24, 2**24, size=(70, 4)).astype(np.float64),
                          rng.integers(-149, -120, size=(70, 4))).astype(np.float32)   # subnormals
    x[700:710] = -0.0                                                          # exact zero: +0.0
    for k in (2, 3, 4):
        got = participants_sum(None, x[:, :k], np.float32)
        want = float_sum_last(x[:, :k], np.float32)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


# --- Pallas across devices (interp/pallas/devices.py) ----------------------------------------------

def _blocks_rolled_right(x, shape):
    """The right permute along the last mesh axis, by hand: device (i, j) gets (i, j-1)'s rows."""
    n, rows = shape[-1], x.shape[0] // math.prod(shape)
    blocks = x.reshape(math.prod(shape) // n, n, rows, *x.shape[1:])
    return np.roll(blocks, 1, axis=1).reshape(x.shape)


@pytest.mark.parametrize("mesh_id", ["2", "4", "8", "2x4"])
def test_shipped_all_gather_kernel_matches_plain_all_gather(mesh_id):
    # jax.experimental.pallas.ops.tpu.all_gather: remote DMAs both ways round the ring after a
    # barrier-semaphore handshake. Gathering every shard, tiled, gives the input back (on 2x4:
    # along the last axis, the input replicated over the first).
    from conformance.cases.spmd import MESHES, plain_all_gather, shipped_all_gather
    shape, names = MESHES[mesh_id]
    build, rows = shipped_all_gather(shape, names)
    x = _ints(rows, -1000, 1000, seed=3)
    got = interp.interpret(build(None))(x)
    assert got.shape == x.shape and got.tobytes() == x.tobytes()
    want = interp.interpret(plain_all_gather(shape, names))(x)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("mesh_id", ["2", "4", "8", "2x4"])
def test_shipped_all_gather_relies_on_dma_completion_order(mesh_id):
    # On a ring of 3 or more devices, the left neighbour's DMAs of two slots can both be in flight
    # into a device's recv_sem[1] (its wait_send does not wait for the receive), each with the
    # half-shard's byte count: the device's wait cannot tell which landed, and it then forwards
    # the slot it expects (docs/pallas/tpu/distributed.md: DMA semaphores count bytes; the
    # tutorial's all-gather gives each step its own receive semaphore for this reason). On 2
    # devices there is one step: nothing to confuse.
    from conformance.cases.spmd import MESHES, shipped_all_gather
    from interp.pallas.dma import DmaCompletionOrderError
    shape, names = MESHES[mesh_id]
    build, rows = shipped_all_gather(shape, names)
    x = _ints(rows, -1000, 1000, seed=3)
    run = interp.interpret(build(None), detect_races=True)
    if shape[-1] == 2:
        assert run(x).tobytes() == x.tobytes()
        return
    with pytest.raises(DmaCompletionOrderError,
                       match=r"kernel 'ag_kernel' on 'device\(.*recv_sem\[1\].*for 2048 bytes "
                             r"could be satisfied by several DMAs in flight \(1: DMA from .*"
                             r"started by 'ag_kernel' on 'device\(.*; 2: DMA"):
        run(x)


def _two_dmas_one_semaphore_kernel(x_ref, o_ref, send_sem, recv_sem, other_sem, *, waits,
                                   own_semaphores=False):
    # Device 0 sends both halves of its block into device 1's output by two DMAs of the same
    # size; device 1 waits ``waits`` times on the receive semaphore, then reads the first half.
    # With own_semaphores the second DMA signals another semaphore (waited for last).
    from jax.experimental.pallas import tpu as pltpu
    me = lax.axis_index("x")
    half = x_ref.shape[0] // 2
    second_sem = other_sem if own_semaphores else recv_sem
    first = pltpu.make_async_remote_copy(x_ref.at[:half], o_ref.at[:half], send_sem, recv_sem,
                                         device_id=(1,))
    second = pltpu.make_async_remote_copy(x_ref.at[half:], o_ref.at[half:], send_sem, second_sem,
                                          device_id=(1,))

    @pl_when(me == 0)
    def _():
        first.start()
        second.start()
        first.wait_send()
        second.wait_send()
        o_ref[...] = x_ref[...]

    @pl_when(me == 1)
    def _():
        for _ in range(waits):
            first.wait_recv()
        o_ref[0:1, :] = o_ref[0:1, :] * 2       # reads the first half
        if own_semaphores:
            second.wait_recv()


def test_a_wait_several_same_sized_dmas_could_satisfy_then_a_read_is_undefined():
    from interp.pallas.dma import DmaCompletionOrderError
    dma = _pltpu_dma()
    kernel = partial(_two_dmas_one_semaphore_kernel, waits=1)
    with pytest.raises(DmaCompletionOrderError,
                       match=r"kernel '.*' on 'device\(x=1\)'.*read of .*o_ref.*\[0:1, .*"
                             r"destination of DMA 1.*recv_sem.* for 2048 bytes .*several DMAs"):
        _remote_kernel(kernel, 2, (dma, dma, dma))()
    # Without race detection the reference completes DMAs at their start (one of the orders).
    _remote_kernel(kernel, 2, (dma, dma, dma), detect_races=False)()


@pytest.mark.parametrize("form", ["wait for both first", "one semaphore each"])
def test_reads_after_every_dma_on_the_semaphore_landed_are_defined(form):
    # The same transfers, made safe: device 1 waits for both DMAs before reading, or each DMA
    # signals its own semaphore. Known answer: device 1's block is device 0's, its first row
    # doubled; device 0 keeps its own.
    dma = _pltpu_dma()
    kernel = partial(_two_dmas_one_semaphore_kernel, waits=2) if form == "wait for both first" \
        else partial(_two_dmas_one_semaphore_kernel, waits=1, own_semaphores=True)
    got = _remote_kernel(kernel, 2, (dma, dma, dma))()
    x = _ints((16, 128), dtype=np.int32)
    want = np.concatenate([x[:8], x[:8]])
    want[8] *= 2
    assert got.tobytes() == want.tobytes()


def test_a_wait_send_reads_the_source_and_the_data_lands_at_the_receive():
    # The send half of a DMA is done at wait_send: the sender may then overwrite its source and
    # the receiver still gets the old data (it lands by the receive wait).
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, buf, send_sem, recv_sem):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(buf, o_ref, send_sem, recv_sem, device_id=(1,))

        @pl_when(me == 0)
        def _():
            buf[...] = x_ref[...]
            copy.start()
            copy.wait_send()
            buf[...] = jnp.zeros_like(x_ref)     # the source is free once sent
            o_ref[...] = buf[...] + x_ref[...]

        @pl_when(me == 1)
        def _():
            copy.wait_recv()
    dma = _pltpu_dma()
    got = _remote_kernel(kernel, 2, (pltpu.VMEM((8, 128), jnp.int32), dma, dma))()
    x = _ints((16, 128), dtype=np.int32)
    assert got.tobytes() == np.concatenate([x[:8], x[:8]]).tobytes()


def _pltpu_dma():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.SemaphoreType.DMA


@pytest.mark.parametrize("mesh_id", ["2", "8", "2x4"])
def test_remote_dma_feature_kernels_known_answers(mesh_id):
    from conformance.cases.spmd import MESHES, pallas_remote_kernels
    shape, names = MESHES[mesh_id]
    kernels = pallas_remote_kernels(shape, names)
    for name, (build, _, rows, dtype) in kernels.items():
        x = _ints(rows, -1000, 1000, seed=4, dtype=dtype)
        if name == "barrier_handshake":
            n = shape[-1]
            me = np.repeat(np.tile(np.arange(n), math.prod(shape) // n), rows[0] // math.prod(shape))
            want = x * 2 + me[:, None].astype(dtype)
        else:
            want = _blocks_rolled_right(x, shape)
        for detect in (False, True):
            got = interp.interpret(build(None), detect_races=detect)(x)
            assert got.tobytes() == want.tobytes(), (name, detect)


def _remote_kernel(kernel, n, scratch, detect_races=True, collective_id=None):
    from conformance.cases.spmd import _pallas_call
    x = _ints((8 * n, 128), dtype=np.int32)

    def local(a):
        return _pallas_call(kernel, jax.ShapeDtypeStruct(a.shape, a.dtype), None, scratch=scratch,
                            collective_id=collective_id)(a)
    f = smap(local, (n,), ("x",), P("x"), P("x"), check_vma=False)
    return lambda: interp.interpret(f, detect_races=detect_races)(x)


def test_remote_wait_nobody_signals_is_a_deadlock_naming_devices_and_semaphores():
    # Device 0 sends to device 1; device 1 sends nothing, yet every device waits to receive.
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(1,))

        @pl_when(me == 0)
        def _():
            copy.start()
            copy.wait_send()
        copy.wait_recv()
    dma = pltpu.SemaphoreType.DMA
    for detect in (False, True):
        with pytest.raises(DeadlockError) as err:
            _remote_kernel(kernel, 2, (dma, dma), detect_races=detect)()
        msg = str(err.value)
        assert "device(x=0)" in msg and "semaphore buffer" in msg and "dma_wait" in msg, msg


def test_barrier_wait_with_one_signal_missing_is_a_deadlock():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        me = lax.axis_index("x")
        sem = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(sem, 1, device_id=(lax.rem(me + 1, 4),))   # right only
        pl.semaphore_wait(sem, 2)                                         # waits for two
        o_ref[...] = x_ref[...]
    with pytest.raises(DeadlockError, match="barrier semaphore"):
        _remote_kernel(kernel, 4, (), collective_id=0)()


def test_read_of_a_remote_dma_destination_before_its_wait_is_a_race():
    # Device 0 starts a DMA into device 1's output and tells device 1 so; device 1 reads that
    # output before waiting for the DMA (whatever order the devices run in).
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, send_sem, recv_sem, started, done):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(1,))

        @pl_when(me == 0)
        def _():
            copy.start()
            pl.semaphore_signal(started, 1, device_id=(1,))
            pl.semaphore_wait(done, 1)
            copy.wait_send()

        @pl_when(me == 1)
        def _():
            pl.semaphore_wait(started, 1)
            o_ref[0:1, :] = o_ref[1:2, :] + 1       # reads the DMA's destination
            pl.semaphore_signal(done, 1, device_id=(0,))
            copy.wait_recv()
    dma, regular = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
    scratch = (dma, dma, regular, regular)
    with pytest.raises(RaceError, match=r"device\(x=1\).*read of .*o_ref.* in flight"):
        _remote_kernel(kernel, 2, scratch)()
    _remote_kernel(kernel, 2, scratch, detect_races=False)()   # (no detection: it runs)


def _scoped_ring_kernel(handshake):
    from conformance.cases.spmd import _scoped_ring_kernel as kernel
    return partial(kernel, axis="x", names=("x",), handshake=handshake)


def test_remote_dma_into_a_run_scoped_buffer_of_the_neighbour():
    run = _remote_kernel(_scoped_ring_kernel(True), 4, (), collective_id=0)
    x = _ints((32, 128), dtype=np.int32)
    assert run().tobytes() == _blocks_rolled_right(x, (4,)).tobytes()


def test_remote_dma_into_a_run_scoped_buffer_the_target_has_not_entered_is_a_race():
    # Without the handshake the first device sends before its neighbour has allocated the buffer
    # (no collective_id: Mosaic's device barrier at the start still orders the kernels).
    with pytest.raises(RaceError, match="not inside the run_scoped"):
        _remote_kernel(_scoped_ring_kernel(False), 4, ())()


def test_double_barrier_signals_a_run_scoped_semaphore_before_the_neighbour_enters_it():
    # JAX's double-barrier pattern (docs/pallas/tpu/distributed.md; its distributed interpret
    # tests): after the barrier semaphore, a second one from run_scoped, which a device signals
    # on both neighbours while they may still wait on the first (in the reference's schedule the
    # last device through the first barrier signals two that have not entered the run_scoped):
    # the signal lands in the neighbour's allocation of that run_scoped (semaphore_signal/c3).
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me, n = lax.axis_index("x"), 4
        left, right = lax.rem(me + n - 1, n), lax.rem(me + 1, n)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id={"x": left})
        pl.semaphore_signal(barrier, 1, device_id={"x": right})
        pl.semaphore_wait(barrier, 2)

        def second(second_barrier):
            pl.semaphore_signal(second_barrier, 1, device_id={"x": left})
            pl.semaphore_signal(second_barrier, 1, device_id={"x": right})
            pl.semaphore_wait(second_barrier, 2)
        pl.run_scoped(second, pltpu.SemaphoreType.REGULAR)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                            device_id={"x": right})
        copy.start()
        copy.wait()
    dma = pltpu.SemaphoreType.DMA
    want = _blocks_rolled_right(_ints((32, 128), dtype=np.int32), (4,))
    for detect in (True, False):
        got = _remote_kernel(kernel, 4, (dma, dma), detect_races=detect, collective_id=0)()
        assert got.tobytes() == want.tobytes(), detect


def test_remote_dma_before_the_handshake_of_a_collective_id_kernel_is_a_race():
    # collective_id set: no device barrier precedes the kernel, so a DMA into a neighbour that has
    # not signalled yet may land in a kernel that has not started.
    from conformance.cases.spmd import _ring_permute_kernel
    from jax.experimental.pallas import tpu as pltpu
    kernel = partial(_ring_permute_kernel, axis="x", names=("x",))
    dma = pltpu.SemaphoreType.DMA
    with pytest.raises(RaceError, match="has not heard from.*collective_id"):
        _remote_kernel(kernel, 4, (dma, dma), collective_id=0)()
    x = _ints((32, 128), dtype=np.int32)
    got = _remote_kernel(kernel, 4, (dma, dma), detect_races=False, collective_id=0)()
    assert got.tobytes() == _blocks_rolled_right(x, (4,)).tobytes()
    got = _remote_kernel(kernel, 4, (dma, dma))()   # (Mosaic's start barrier: no race)
    assert got.tobytes() == _blocks_rolled_right(x, (4,)).tobytes()
    # Recorded (Options.on_race="record"): the DMAs land in the target's buffers, which exist
    # from the start rendezvous on (spec pallas_tpu/recorded-race).
    from interp.schedule import recording_races
    from conformance.cases.spmd import _pallas_call

    def local(a):
        return _pallas_call(kernel, jax.ShapeDtypeStruct(a.shape, a.dtype), None,
                            scratch=(dma, dma), collective_id=0)(a)
    f = smap(local, (4,), ("x",), P("x"), P("x"), check_vma=False)
    with recording_races() as races:
        got = interp.interpret(f, detect_races=True, on_race="record")(x)
    assert got.tobytes() == _blocks_rolled_right(x, (4,)).tobytes()
    assert races and all("has not heard from" in str(r) for r in races), races


def test_signal_nobody_waits_for_on_another_device_raises():
    # Device 1 signals device 0's semaphore, which device 0 never waits on: a signal into a kernel
    # that has ended, or a semaphore left non-zero at its end (whichever device runs first).
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, sem):
        o_ref[...] = x_ref[...]

        @pl_when(lax.axis_index("x") == 1)
        def _():
            pl.semaphore_signal(sem, 1, device_id=(0,))
    with pytest.raises(RaceError, match="kernel has ended|holds 1"):
        _remote_kernel(kernel, 2, (pltpu.SemaphoreType.REGULAR,))()


@pytest.mark.parametrize("form", ["mesh", "logical", "dict"])
def test_remote_dma_to_a_device_outside_the_mesh_is_out_of_bounds(form):
    import warnings
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # device_id_type (JAX 0.12)
            kw = {"mesh": dict(device_id=(4,)), "dict": dict(device_id={"x": 5}),
                  "logical": dict(device_id=4, device_id_type=pl.DeviceIdType.LOGICAL)}[form]
            copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, **kw)
        copy.start()
        copy.wait()
    dma = pltpu.SemaphoreType.DMA
    with pytest.raises(OutOfBoundsError, match=r"outside \[0, 4\)"):
        _remote_kernel(kernel, 4, (dma, dma))()


def pl_when(cond):
    from jax.experimental import pallas as pl
    return pl.when(cond)


def _core_mesh_ring_program(num_cores):
    # shard_map over a pl.kernel on a TPU core mesh: a barrier-semaphore handshake with the left
    # neighbour, then a remote DMA of the block to the right neighbour (a ring permute).
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    try:
        cores = pltpu.TensorCoreMesh(axis_name="core", num_cores=num_cores)   # JAX >= 0.12
    except (AttributeError, TypeError):
        cores = pltpu.create_tensorcore_mesh("core", num_cores=num_cores)

    def local(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=cores,
                   scratch_types=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
                   compiler_params=pltpu.CompilerParams(collective_id=0))
        def ring(x_hbm, o_hbm, send_sem, recv_sem):
            me, n = lax.axis_index("x"), lax.axis_size("x")
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id={"x": lax.rem(me + n - 1, n)})
            pl.semaphore_wait(barrier, 1)
            copy = pltpu.make_async_remote_copy(x_hbm, o_hbm, send_sem, recv_sem,
                                                device_id={"x": lax.rem(me + 1, n)})
            copy.start()
            copy.wait()
        return ring(x)
    return smap(local, (4,), ("x",), P("x"), P("x"), check_vma=False)


@pytest.mark.parametrize("detect_races", [False, True])
def test_core_mesh_kernel_in_shard_map_sends_remote_dmas(detect_races):
    x = _ints((32, 128), -1000, 1000, dtype=np.int32)
    got = interp.interpret(_core_mesh_ring_program(1), detect_races=detect_races)(x)
    want = np.roll(x.reshape(4, 8, 128), 1, axis=0).reshape(x.shape)   # device d gets d-1's block
    assert got.tobytes() == want.tobytes()


def test_remote_signal_from_a_kernel_of_several_cores_must_name_the_core():
    # The barrier signal of _core_mesh_ring_program names a device only: Mosaic passes no core id
    # and JAX's interpret mode would signal core 0 (interpret_pallas_call.py semaphore_signal).
    from interp.errors import UnsupportedPrimitiveError
    x = _ints((32, 128), dtype=np.int32)
    with pytest.raises(UnsupportedPrimitiveError, match=r"semaphore_signal.*kernel of 2 cores "
                                                        r"must name the core"):
        interp.interpret(_core_mesh_ring_program(2))(x)


# --- core-mesh kernels of several cores on every device (2 devices x 2 cores) -------------------------

def _device_blocks_rolled_right(x, n):
    # NumPy: device d's block (8 rows per core) is device d-1's
    return np.roll(x.reshape(n, -1, x.shape[-1]), 1, axis=0).reshape(x.shape)


@pytest.mark.parametrize("name", ["core_ring_remote_dma", "core_cross_signal"])
def test_core_mesh_kernel_of_two_cores_on_two_devices_rings_remote_dmas(name):
    # Every core of every device sends its rows to the same core of the right neighbour (the
    # cross-signal kernel also signals the OTHER core there by core_index, after a per-core barrier
    # handshake); JAX's TPU interpret mode agrees (test_remote_dma_case_on_tpu_interpret_...).
    from conformance.cases.spmd import MESHES, pallas_core_mesh_kernels
    shape, names = MESHES["2"]
    build, _, rows, dtype = pallas_core_mesh_kernels(shape, names)[name]
    x = _ints(rows, -1000, 1000, seed=5, dtype=dtype)
    for detect in (False, True):
        for order in ("sequential", "shuffled"):
            got = interp.interpret(build(None), detect_races=detect, grid_order=order)(x)
            assert got.tobytes() == _device_blocks_rolled_right(x, 2).tobytes(), (detect, order)


def _core_mesh_kernel(kernel, scratch, n=2, collective_id=None, interpret=None):
    """shard_map over ``n`` devices of a pl.kernel on a 2-core TPU core mesh (8 rows per core)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from conformance.cases.spmd import _core_mesh
    params = pltpu.CompilerParams(collective_id=collective_id) if collective_id is not None else None
    extra = {} if interpret is None else {"interpret": interpret}

    def local(a):
        return pl.kernel(kernel, out_type=jax.ShapeDtypeStruct(a.shape, a.dtype), mesh=_core_mesh(2),
                         scratch_types=list(scratch), compiler_params=params, **extra)(a)
    return smap(local, (n,), ("x",), P("x"), P("x"), check_vma=False)


def _core_axis_swap_kernel(x_hbm, o_hbm, send_sem, recv_sem):
    # Core c sends its rows to the rows of core 1 - c on the right neighbour, naming that core by
    # the core axis in the MESH dict (lowering.py _device_id_to_logical: a non-mesh axis that is a
    # core axis names the core); the receiving core waits on its own semaphore.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    c = lax.axis_index("core")
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    copy = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds((1 - c) * 8, 8)],
                                        send_sem, recv_sem, device_id={"x": right, "core": 1 - c})
    copy.start()
    copy.wait()


def _core_axis_swap_want(x):
    # device d, core c's rows: device d-1, core 1-c's
    blocks = np.roll(x.reshape(2, 2, 8, x.shape[-1]), 1, axis=0)[:, ::-1]
    return blocks.reshape(x.shape)


def _interpret_names_core_axes() -> bool:
    """Whether JAX's TPU interpret mode resolves a core axis in a device_id dict (JAX 0.12:
    interpret/utils.py _device_id_to_logical(..., core_axis_names)); older ones ignore it."""
    import inspect
    from jax._src.pallas.mosaic.interpret import utils
    return "core_axis_names" in inspect.signature(utils._device_id_to_logical).parameters


def _core_axis_dma_on_tpu_interpret() -> str:
    if not _interpret_names_core_axes():
        return "skip"
    from jax.experimental.pallas import tpu as pltpu
    dma = pltpu.SemaphoreType.DMA
    x = _ints((32, 128), -1000, 1000, seed=6, dtype=np.int32)
    try:
        want = jax.jit(_core_mesh_kernel(_core_axis_swap_kernel, (dma, dma),
                                         interpret=pltpu.InterpretParams()))(x)
        got = interp.interpret(_core_mesh_kernel(_core_axis_swap_kernel, (dma, dma)),
                               detect_races=True)(x)
    except Exception as e:  # noqa: BLE001 - reported as the verdict
        return f"{type(e).__name__}: {str(e)[:500]}"
    return "ok" if np.asarray(want).tobytes() == np.asarray(got).tobytes() else "outputs differ"


def test_remote_dma_names_the_target_core_by_the_core_axis():
    from jax.experimental.pallas import tpu as pltpu
    dma = pltpu.SemaphoreType.DMA
    x = _ints((32, 128), -1000, 1000, seed=6, dtype=np.int32)
    for detect in (False, True):
        got = interp.interpret(_core_mesh_kernel(_core_axis_swap_kernel, (dma, dma)),
                               detect_races=detect)(x)
        assert got.tobytes() == _core_axis_swap_want(x).tobytes(), detect


def test_remote_dma_naming_the_core_axis_matches_tpu_interpret_mode(xla_verdicts):
    if xla_verdicts["core_axis_dma_tpu_interpret"] == "skip":
        pytest.skip("JAX's TPU interpret mode before 0.12 ignores a core axis in device_id "
                    "(interpret/utils.py _device_id_to_logical has no core_axis_names)")
    assert xla_verdicts["core_axis_dma_tpu_interpret"] == "ok", \
        xla_verdicts["core_axis_dma_tpu_interpret"]


def test_cores_that_end_early_do_not_end_their_devices_kernel():
    # Cores 0 only copy locally and end; cores 1 exchange a remote DMA afterwards. The devices
    # meet at the kernel's end once per device, after all its cores ended: a meet per core would
    # let a device's end checks (no DMA in flight) run while its other core's DMA is in flight.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, o_hbm, send_sem, recv_sem):
        c = lax.axis_index("core")

        @pl_when(c == 0)
        def _():
            pltpu.sync_copy(x_hbm.at[pl.ds(0, 8)], o_hbm.at[pl.ds(0, 8)])

        @pl_when(c == 1)
        def _():
            other = lax.rem(lax.axis_index("x") + 1, 2)
            copy = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(8, 8)], o_hbm.at[pl.ds(8, 8)],
                                                send_sem, recv_sem, device_id={"x": other})
            copy.start()
            copy.wait()
    dma = pltpu.SemaphoreType.DMA
    x = _ints((32, 128), -1000, 1000, seed=7, dtype=np.int32)
    want = x.reshape(2, 2, 8, 128).copy()
    want[:, 1] = want[::-1, 1]          # rows 8:16 of each device: the other device's
    for detect in (False, True):
        for order in ("sequential", "shuffled"):
            got = interp.interpret(_core_mesh_kernel(kernel, (dma, dma)), detect_races=detect,
                                   grid_order=order)(x)
            assert got.tobytes() == want.reshape(x.shape).tobytes(), (detect, order)


def test_core_barrier_between_the_cores_of_each_device():
    # pltpu.core_barrier (signals named by the core axis alone: this device's other core) inside a
    # shard_map body: each core reads the half its sibling wrote before the barrier (+1).
    from tests.test_pallas_tpu import _exchange_kernel
    f = smap(_exchange_kernel(True), (2,), ("x",), P("x"), (P("x"), P("x")), check_vma=False)
    x = _ints((32, 128), -100, 100)
    want = x.reshape(2, 2, 8, 128)[:, ::-1].reshape(x.shape) + 1   # the sibling core's half
    for order in ("sequential", "shuffled"):
        o, p = interp.interpret(f, detect_races=True, uninitialized="raise", grid_order=order)(x)
        assert o.tobytes() == x.tobytes() and p.tobytes() == want.tobytes(), order


def test_cross_device_deadlock_names_every_waiting_device_and_core():
    # Core 0 of each device signals core 1 of the other device; core 1 signals nobody; every core
    # waits for one signal: both cores 0 wait forever.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, o_hbm, sem):
        c = lax.axis_index("core")
        other = lax.rem(lax.axis_index("x") + 1, 2)

        @pl_when(c == 0)
        def _():
            pl.semaphore_signal(sem, 1, device_id={"x": other}, core_index=1)
        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(x_hbm, o_hbm)
    x = _ints((32, 128), dtype=np.int32)
    for detect in (False, True):
        with pytest.raises(DeadlockError) as err:
            interp.interpret(_core_mesh_kernel(kernel, (pltpu.SemaphoreType.REGULAR,)),
                             detect_races=detect)(x)
        msg = str(err.value)
        for d in (0, 1):
            assert f"device(x={d}) core {{'core': 0}} in kernel 'kernel': semaphore_wait" in msg, msg
            assert f"device(x={d}) waits for 2 forked cores to finish" in msg, msg
        assert "core {'core': 1} in kernel" not in msg, msg


def test_cross_device_race_between_cores_is_reported():
    # Device 0's core 1 starts a DMA into device 1's output (core 1's semaphore) and tells device
    # 1's core 0, which reads the destination before anyone waited for the DMA.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, o_hbm, send_sem, recv_sem, started, done, rows):
        c, me = lax.axis_index("core"), lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(0, 8)], o_hbm.at[pl.ds(0, 8)], send_sem,
                                            recv_sem, device_id={"x": 1})

        @pl_when((me == 0) & (c == 1))
        def _():
            copy.start()
            pl.semaphore_signal(started, 1, device_id={"x": 1}, core_index=0)
            pl.semaphore_wait(done, 1)
            copy.wait_send()

        @pl_when((me == 1) & (c == 0))
        def _():
            pl.semaphore_wait(started, 1)
            pltpu.sync_copy(o_hbm.at[pl.ds(0, 8)], rows)     # reads the DMA's destination
            pl.semaphore_signal(done, 1, device_id={"x": 0}, core_index=1)

        @pl_when((me == 1) & (c == 1))
        def _():
            copy.wait_recv()
    dma, regular = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
    program = _core_mesh_kernel(kernel, (dma, dma, regular, regular,
                                         pltpu.VMEM((8, 128), jnp.int32)))
    x = _ints((32, 128), dtype=np.int32)
    with pytest.raises(RaceError, match=r"device\(x=1\)' at grid point \{'core': 0\}: .*"
                                        r"o_hbm.* in flight"):
        interp.interpret(program, detect_races=True)(x)
    interp.interpret(program, detect_races=False)(x)   # (no detection: it runs)


def test_inspect_array_sharding_is_refused_with_its_reason():
    # XLA:CPU calls back with a Sharding of its own devices; the reference has no device to name.
    seen = []

    def f(a):
        jax.debug.inspect_array_sharding(a, callback=seen.append)
        return a * 2
    xs = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(f)(xs), xs * 2)
    assert len(seen) == 1 and seen[0].device_set <= set(jax.devices())
    assert interp.coverage()["inspect_sharding"].startswith("unsupported: jax.debug.inspect_array")
    with pytest.raises(interp.UnsupportedPrimitiveError, match="inspect_sharding.*no device"):
        interp.interpret(f)(xs)
