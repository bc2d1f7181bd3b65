"""Mosaic GPU kernels across the devices of a shard_map (interp/pallas/devices.py,
interp/pallas/mosaic_gpu/launch.py Launch, the multi-device rules of interp/rules/pallas_mosaic_gpu.py;
semantics spec/pallas_mosaic_gpu.py "multi-device").

JAX's shipped collective kernels (all_gather_mgpu, reduce_scatter_mgpu) are traced under the
emulated H100 and checked against the lax collective they compute and against answers computed
here with NumPy; hand-written kernels check remote refs, remote and multicast signals and the
undefined behaviour (deadlock, cross-device race, device id outside the mesh).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import interp
from interp.errors import OutOfBoundsError, RaceError
from interp.spmd import DeadlockError

try:
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError as e:   # JAX 0.10.2's Mosaic GPU imports absl-py (mosaic/gpu/layout_inference)
    pytest.skip(f"jax.experimental.pallas.mosaic_gpu does not import: {e}",
                allow_module_level=True)

from conformance.cases.spmd import make_mesh, shipped_gpu_collective


def _smap(body, n):
    return lambda *a: jax.shard_map(body, mesh=make_mesh((n,), ("x",)), in_specs=P("x"),
                                    out_specs=P("x"), check_vma=False)(*a)


def _ints(shape, dtype, seed=0):
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype(dtype)


# --- JAX's shipped collective kernels --------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_shipped_all_gather_is_the_lax_all_gather_bit_for_bit(n, dtype):
    # Every device ends with all the shards in device order: the input, once per device.
    build, plain, rows = shipped_gpu_collective("all_gather", (n,), ("x",), dtype,
                                                num_blocks=3)
    x = _ints(rows, dtype, seed=n)
    for detect in (False, True):
        got = interp.interpret(build(None), detect_races=detect)(x)
        assert got.tobytes() == np.tile(x, (n, 1)).tobytes()
    assert got.tobytes() == interp.interpret(plain)(x).tobytes()


def test_shipped_all_gather_with_the_h100_block_count():
    # num_blocks defaults to the device's SM count (132 on the emulated H100): most blocks have
    # no tile, all of them signal and wait on their own semaphore.
    build, _, rows = shipped_gpu_collective("all_gather", (4,), ("x",), np.int32)
    x = _ints(rows, np.int32, seed=1)
    got = interp.interpret(build(None), detect_races=True)(x)
    assert got.tobytes() == np.tile(x, (4, 1)).tobytes()


@pytest.mark.parametrize("n", [2, 4, 8])
def test_shipped_reduce_scatter_int32_is_the_exact_sum(n):
    build, plain, rows = shipped_gpu_collective("reduce_scatter", (n,), ("x",), np.int32,
                                                num_blocks=3)
    x = _ints(rows, np.int32, seed=n)
    want = x.reshape(n, n, -1, rows[1]).sum(0, dtype=np.int32).reshape(-1, rows[1])
    for detect in (False, True):
        got = interp.interpret(build(None), detect_races=detect)(x)
        assert got.tobytes() == want.tobytes()
    assert interp.interpret(plain)(x).tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [2, 8])
def test_shipped_reduce_scatter_float32_is_the_correctly_rounded_sum(n):
    # Multiples of 2^-20 in [-1, 1]: their float64 sum is exact, rounded once to float32.
    build, plain, rows = shipped_gpu_collective("reduce_scatter", (n,), ("x",), np.float32,
                                                num_blocks=2)
    x = (np.random.default_rng(n).integers(-2**20, 2**20, size=rows) / 2**20).astype(np.float32)
    exact = x.astype(np.float64).reshape(n, n, -1, rows[1]).sum(0).reshape(-1, rows[1])
    got = interp.interpret(build(None))(x)
    assert got.tobytes() == exact.astype(np.float32).tobytes()
    assert interp.interpret(plain)(x).tobytes() == got.tobytes()


_NUMPY_REDUCTIONS = {"min": np.min, "max": np.max, "and": np.bitwise_and.reduce,
                     "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}


@pytest.mark.parametrize("op", sorted(_NUMPY_REDUCTIONS))
def test_shipped_reduce_scatter_integer_reductions(op):
    from conformance.cases.pallas_mosaic_gpu import shipped, shipped_module
    n = 4

    def make():
        module = shipped_module("reduce_scatter_mgpu")
        return _smap(lambda s: module.reduce_scatter(s, axis_name="x", reduction=op,
                                                     num_blocks=2), n)
    x = _ints((n * 16, 128), np.int32, seed=7)
    want = _NUMPY_REDUCTIONS[op](x.reshape(n, n, -1, 128), axis=0).reshape(-1, 128)
    got = interp.interpret(shipped(make)(None), detect_races=True)(x)
    assert got.tobytes() == want.astype(np.int32).tobytes()


def _staged_kernel(body, n, semaphore=True):
    """``body(x_gmem, o_gmem, smem, barrier[, sem])`` as a plgpu.kernel on each of n devices:
    the output is shaped as the shard, SMEM as the shard, one barrier, a semaphore."""
    def local(x):
        scratch = [plgpu.SMEM(x.shape, x.dtype), plgpu.Barrier(num_arrivals=1)]
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            scratch_types=scratch + [plgpu.SemaphoreType.REGULAR] * semaphore)(x)
    return _smap(local, n)


# --- hand-written kernels: remote refs and remote signals -------------------------------------------

def _ring_kernel(n, *, extra_wait=0, target=None, read_early=False):
    """Each device copies its shard into the output of its right neighbour through a remote ref
    (a TMA store to a peer's GMEM), then signals the neighbour's semaphore and waits for its own."""
    def body(x_gmem, o_gmem, smem, barrier, sem):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, n) if target is None else jnp.int32(target)
        if read_early:
            o_gmem[pl.ds(0, 1)] = x_gmem[pl.ds(0, 1)]   # own output, written by a peer
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(o_gmem, {"x": right}))
        plgpu.wait_smem_to_gmem(0)
        pl.semaphore_signal(sem, 1, device_id={"x": right})
        pl.semaphore_wait(sem, 1 + extra_wait)

    return _staged_kernel(body, n)


@pytest.mark.parametrize("n", [2, 4])
def test_remote_ref_ring_shift(n):
    x = _ints((n * 8, 128), np.float32, seed=2)
    want = np.roll(x.reshape(n, 8, 128), 1, axis=0).reshape(x.shape)
    for detect in (False, True):
        got = interp.interpret(_ring_kernel(n), detect_races=detect)(x)
        assert got.tobytes() == want.tobytes()


def test_wait_nobody_signals_is_a_deadlock_naming_devices_and_semaphores():
    x = _ints((16, 128), np.float32)
    with pytest.raises(DeadlockError) as err:
        interp.interpret(_ring_kernel(2, extra_wait=1))(x)
    msg = str(err.value)
    assert "device(x=0)" in msg and "device(x=1)" in msg and "semaphore" in msg, msg


def test_peer_write_never_waited_for_is_a_race():
    # No signal, no wait: each device's kernel may end while its neighbour's write into its
    # output is still to come.
    def body(x_gmem, o_gmem, smem, barrier):
        right = lax.rem(lax.axis_index("x") + 1, 2)
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(o_gmem, {"x": right}))
        plgpu.wait_smem_to_gmem(0)

    x = _ints((16, 128), np.float32)
    # The reference runs one device at a time: the first device's kernel ends before the other's
    # write lands in it (a write into a kernel that ended), or, with detect_races, ends with the
    # write not known to have completed; either is the same race.
    for detect in (False, True):
        with pytest.raises(RaceError, match="whose kernel has ended|not known to have completed"):
            interp.interpret(_staged_kernel(body, 2, semaphore=False), detect_races=detect)(x)


def test_access_to_an_output_a_peer_writes_before_waiting_is_a_race():
    x = _ints((16, 128), np.float32)
    with pytest.raises(RaceError, match="not known to precede"):
        interp.interpret(_ring_kernel(2, read_early=True), detect_races=True)(x)


def test_remote_ref_to_a_device_outside_the_mesh_is_out_of_bounds():
    x = _ints((16, 128), np.float32)
    with pytest.raises(OutOfBoundsError, match="outside"):
        interp.interpret(_ring_kernel(2, target=2))(x)


def test_multicast_signal_reaches_every_device():
    # Each device stores its index through multimem into slot i of every device's output, then
    # multicasts a signal and waits for all n: every output holds 0..n-1.
    n = 4

    def body(o_gmem, sem):
        me = lax.axis_index("x")
        plgpu.multimem_store(jnp.full((128,), me, jnp.int32), o_gmem.at[me], "x")
        plgpu.semaphore_signal_multicast(sem, collective_axes="x")
        pl.semaphore_wait(sem, n)

    def local(x):
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((n, 128), jnp.int32),
                            scratch_types=[plgpu.SemaphoreType.REGULAR])() + x
    x = np.zeros((n * n, 128), np.int32)
    got = interp.interpret(_smap(local, n), detect_races=True)(x)
    want = np.tile(np.repeat(np.arange(n, dtype=np.int32), 128).reshape(n, 128), (n, 1))
    assert got.tobytes() == want.tobytes()


def test_multimem_outside_a_shard_map_is_refused():
    from interp.errors import UnsupportedPrimitiveError

    def body(o_gmem):
        plgpu.multimem_store(jnp.zeros((128,), jnp.int32), o_gmem, "x")
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.int32))
    with pytest.raises(UnsupportedPrimitiveError, match="outside a shard_map"):
        interp.interpret(f)()


def test_coverage_states_the_multi_gpu_primitives():
    # coverage(): name -> "supported" / "partial: why" / "unsupported: why".
    # All three are refused outside a shard_map (test_multimem_outside_a_shard_map_is_refused).
    cov = interp.coverage()
    for name in ("multimem_store", "semaphore_signal_multicast", "multimem_load_reduce"):
        assert cov[name].startswith("partial: ") and "outside a shard_map" in cov[name], cov[name]
    assert "NaN" in cov["multimem_load_reduce"]


def test_semaphore_signal_parallel_to_a_peer():
    # Each device signals its own and its right neighbour's semaphore at once, then waits for
    # both: its own signal and its left neighbour's.
    if not hasattr(plgpu, "semaphore_signal_parallel"):
        pytest.skip("this JAX's Mosaic GPU has no semaphore_signal_parallel")
    n = 4

    def body(x_gmem, o_gmem, smem, barrier, sem):
        right = lax.rem(lax.axis_index("x") + 1, n)
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(o_gmem, {"x": right}))
        plgpu.wait_smem_to_gmem(0)
        plgpu.semaphore_signal_parallel(plgpu.SemaphoreSignal(sem, device_id=None),
                                        plgpu.SemaphoreSignal(sem, device_id={"x": right}))
        pl.semaphore_wait(sem, 2)

    x = _ints((n * 8, 128), np.int32, seed=5)
    got = interp.interpret(_staged_kernel(body, n), detect_races=True)(x)
    assert got.tobytes() == np.roll(x.reshape(n, 8, 128), 1, axis=0).reshape(x.shape).tobytes()


def test_read_of_a_peer_buffer_racing_with_its_write_is_a_race():
    # Device 1 writes its own output, then waits for device 0; device 0 reads that output through
    # a remote ref before it heard from device 1 (nothing orders the write before the read), then
    # signals device 1.
    def body(x_gmem, o_gmem, smem, barrier, sem):
        me = lax.axis_index("x")
        o_gmem[...] = x_gmem[...]

        @pl.when(me == 0)
        def _():
            plgpu.copy_gmem_to_smem(plgpu.remote_ref(o_gmem, {"x": 1}), smem, barrier)
            plgpu.barrier_wait(barrier)
            pl.semaphore_signal(sem, 1, device_id={"x": 1})

        @pl.when(me == 1)
        def _():
            pl.semaphore_wait(sem, 1)

    x = _ints((16, 128), np.int32)
    with pytest.raises(RaceError, match="read of .* of device\\(x=1\\) while "
                                        "device\\(x=1\\)'s write"):
        interp.interpret(_staged_kernel(body, 2), detect_races=True)(x)
    # Without detect_races: the values of one schedule.
    assert interp.interpret(_staged_kernel(body, 2))(x).tobytes() == x.tobytes()


def test_a_warp_signals_a_peer_device():
    # Warp 0 of each device's warpgroup (plgpu.warp_map) signals the right neighbour's semaphore;
    # the warpgroup waits for its left neighbour's signal.
    if not hasattr(plgpu, "warp_map"):
        pytest.skip("this JAX's Mosaic GPU has no warp_map")
    n = 2

    def body(o_gmem, sem):
        right = lax.rem(lax.axis_index("x") + 1, n)

        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 0)
            def _():
                pl.semaphore_signal(sem, 1, device_id={"x": right})
        pl.semaphore_wait(sem, 1)
        o_gmem[...] = jnp.full((8, 128), 1, jnp.int32) + lax.axis_index("x")

    def local(x):
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.int32),
                            scratch_types=[plgpu.SemaphoreType.REGULAR])() + x
    got = interp.interpret(_smap(local, n), detect_races=True)(np.zeros((16, 128), np.int32))
    assert got.tobytes() == np.repeat(np.arange(1, n + 1, dtype=np.int32), 8 * 128).tobytes()


# --- collective_matmul_mgpu: every block waits for all blocks of the other device -----------------

@pytest.mark.parametrize("dtype, detect", [(jnp.float16, True), (jnp.bfloat16, False)])
def test_shipped_collective_matmul_is_the_gathered_product(dtype, detect):
    # all_gather_lhs_matmul on 2 devices of the emulated H100 (132 clusters of 3 warpgroups
    # each; its blocks wait on a kernel-wide semaphore for all 132 blocks of the other device).
    # Inputs are multiples of 1/8 in [-2, 2]: every sum of products is exact in float32, so
    # the f32 accumulator rounded to ``dtype`` is the exact product rounded once, bit for bit.
    from conformance.cases.spmd import shipped_gpu_collective_matmul
    build, plain, (lhs, rhs) = shipped_gpu_collective_matmul((2,), ("x",), dtype)
    rng = np.random.default_rng(2)
    a, b = ((rng.integers(-16, 17, size=s) / 8).astype(dtype) for s in (lhs, rhs))
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
    got = interp.interpret(build(None), detect_races=detect)(a, b)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert interp.interpret(plain)(a, b).tobytes() == want.tobytes()


def test_the_emulated_machine_has_one_gpu_per_device_of_the_traced_mesh():
    # What collective_matmul_mgpu checks against its mesh axis (interp/emulated_device.py).
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    module = shipped_module("collective_matmul_mgpu")
    seen = []

    def counts():
        return module.jax.device_count(), module.jax.local_device_count(), module.jax.process_count()

    def body(x):
        seen.append(counts())
        return x
    x = np.zeros(8, np.float32)
    interp.interpret(_smap(body, 4), emulated_device="h100")(x)
    interp.interpret(lambda x: body(x) + 1, emulated_device="h100")(x)
    assert seen == [(4, 4, 1), (1, 1, 1)]
    assert module.jax is jax   # restored after tracing
