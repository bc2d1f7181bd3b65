"""TPU kernel features in the reference: DMAs, semaphores, run_scoped, core meshes, masked
loads/stores, roll, bitcast; and undefined behaviour made loud (races, out-of-bounds accesses,
uninitialized reads), each message naming kernel, buffer, grid point and index."""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import interp
from interp.errors import OutOfBoundsError, RaceError, UninitializedReadError
from tests.support import xla_cpu

RNG = np.random.default_rng(1)



@pytest.fixture(autouse=True)
def _specialised_from_the_first_visit(monkeypatch):
    # Every grid step here runs through the per-grid-point specialised kernel programs
    # (interp/pallas/specialize.py) from the first call on; test_pallas_engine.py and test_pallas_prims.py run first
    # visits through the generic plan, as by default.
    from interp.pallas import specialize
    monkeypatch.setattr(specialize, "GENERIC_VISITS", 0)


def _double_buffered_copy(n_blocks, *, wait_late=False):
    from bench.pallas import double_buffered_call
    return double_buffered_call(n_blocks, scale=1.0, wait_late=wait_late)


@pytest.mark.parametrize("detect_races", [False, True])
def test_dma_double_buffering(detect_races):
    x = RNG.standard_normal((4 * 8, 128)).astype(np.float32)
    f = _double_buffered_copy(4)
    np.testing.assert_array_equal(interp.interpret(f, detect_races=detect_races)(x), x)
    np.testing.assert_array_equal(xla_cpu(f, x), x)


def test_read_before_dma_wait_is_a_race():
    x = RNG.standard_normal((4 * 8, 128)).astype(np.float32)
    f = _double_buffered_copy(4, wait_late=True)
    # Without race detection the DMA completes at start (like interpret=True): no error.
    np.testing.assert_array_equal(interp.interpret(f)(x), x)
    with pytest.raises(RaceError, match=r"kernel 'kernel' at grid point \(0,\): read of scratch "
                                        r"\(vmem\) buffer .*\[0, 0:8, 0:128\] while a DMA"):
        interp.interpret(f, detect_races=True)(x)


def test_dma_never_waited_is_reported_at_kernel_exit():
    def kernel(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm, buf, sem.at[0]).start()
        o_ref[...] = jnp.zeros_like(o_ref)

    f = pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32),
                                       pltpu.SemaphoreType.DMA((1,))], interpret=True)
    x = np.ones((8, 128), np.float32)
    with pytest.raises(RaceError, match="never waited"):
        interp.interpret(f, detect_races=True)(x)
    # Without race detection the copy completes but the semaphore is left signalled; that is
    # only checked with detect_races.
    np.testing.assert_array_equal(interp.interpret(f)(x), np.zeros((8, 128), np.float32))


def test_semaphores_signal_wait_read():
    """The conformance case's kernel: signal 3, read, wait 2, read, signal/read/wait the other,
    then both counts (0 + 0): hand-computed, and the same on XLA:CPU (TPU interpret mode)."""
    from conformance.cases.pallas import build_semaphores
    f = build_semaphores(True)
    want = np.array([3, 1, 1, 0], np.int32)
    np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(), want)
    np.testing.assert_array_equal(xla_cpu(f), want)


def test_semaphore_misuse_is_loud():
    def unbalanced(o_ref, sem):
        pl.semaphore_signal(sem.at[0], 2)
        o_ref[0] = 0

    def deadlock(o_ref, sem):
        pl.semaphore_wait(sem.at[0], 1)
        o_ref[0] = 0

    kw = dict(out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
              out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
              scratch_shapes=[pltpu.SemaphoreType.REGULAR((1,))], interpret=True)
    with pytest.raises(RaceError, match=r"holds 2 at index \(0,\) at the end of the pallas_call"):
        interp.interpret(pl.pallas_call(unbalanced, **kw), detect_races=True)()
    with pytest.raises(RaceError, match="needs 1 but the semaphore holds 0"):
        interp.interpret(pl.pallas_call(deadlock, **kw))()


def test_run_scoped_allocations_are_fresh_and_checked():
    def kernel(x_ref, o_ref):
        def body(tmp):
            tmp[...] = x_ref[...] * 2
            o_ref[...] = tmp[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

    def reads_fresh(x_ref, o_ref):
        def body(tmp):
            o_ref[...] = tmp[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

    x = RNG.standard_normal((8, 128)).astype(np.float32)
    kw = dict(out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=True)
    np.testing.assert_array_equal(interp.interpret(pl.pallas_call(kernel, **kw))(x), 2 * x)
    assert np.isnan(interp.interpret(pl.pallas_call(reads_fresh, **kw))(x)).all()
    with pytest.raises(UninitializedReadError, match=r"run_scoped allocation 0.*index \[0:8, 0:128\]"):
        interp.interpret(pl.pallas_call(reads_fresh, **kw), uninitialized="raise")(x)


def test_out_of_bounds_ref_access_with_dynamic_index():
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(s_ref[0], 8), :]

    f = pl.pallas_call(kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2,),
        in_specs=[pl.BlockSpec((16, 128), lambda i, s: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, s: (i, 0))),
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=True)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(np.array([8], np.int32), x)[8:], x[8:])
    with pytest.raises(OutOfBoundsError, match=r"kernel 'kernel' at grid point \(0,\): input "
                                               r"buffer 'x_ref.*dimension 0 accessed at \[12:20:1\], size 16"):
        interp.interpret(f)(np.array([12], np.int32), x)


def test_masked_load_and_store_match_interpret_mode():
    def kernel(x_ref, o_ref):
        mask = jnp.arange(16) % 3 != 0
        v = pltpu.load(x_ref.at[pl.ds(0, 16)], mask=mask)
        o_ref[...] = jnp.zeros_like(o_ref)
        pltpu.store(o_ref.at[pl.ds(0, 16)], v * 2, mask=mask)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                       interpret=True)
    x = RNG.standard_normal(16).astype(np.float32)
    want = np.where(np.arange(16) % 3 != 0, 2 * x, 0).astype(np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(x), want)
    np.testing.assert_array_equal(xla_cpu(f, x), want)


def _tensorcore_mesh(n):
    try:
        return pltpu.TensorCoreMesh(axis_name="core", num_cores=n)  # JAX >= 0.12
    except (AttributeError, TypeError):
        return pltpu.create_tensorcore_mesh("core", num_cores=n)


@pytest.mark.parametrize("order", ["sequential", "shuffled"])
def test_core_mesh_kernel_runs_every_core(order):
    mesh = _tensorcore_mesh(4)

    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)
        def k(x_hbm, o_hbm):
            c = jax.lax.axis_index("core")

            def body(buf):
                pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], buf)
                buf[...] = buf[...] + c.astype(jnp.float32)
                pltpu.sync_copy(buf, o_hbm.at[pl.ds(c * 8, 8)])

            pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

        return k(x)

    x = RNG.standard_normal((32, 128)).astype(np.float32)
    want = x + np.repeat(np.arange(4, dtype=np.float32), 8)[:, None]
    got = interp.interpret(f, grid_order=order, detect_races=True, uninitialized="raise")(x)
    np.testing.assert_array_equal(got, want)


def test_roll_matches_jnp_roll():
    def kernel(x_ref, o_ref, p_ref):
        o_ref[...] = pltpu.roll(x_ref[...], 3, 1)
        p_ref[...] = pltpu.roll(x_ref[...], 1, 1, stride=2, stride_axis=0)

    x = RNG.standard_normal((8, 128)).astype(np.float32)
    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8, 128), jnp.float32)] * 2,
                       interpret=True)
    o, p = interp.interpret(f)(x)
    np.testing.assert_array_equal(o, np.roll(x, 3, 1))
    np.testing.assert_array_equal(p, np.stack([np.roll(x[i], 1 + 2 * i) for i in range(8)]))
    wo, wp = xla_cpu(f, x)
    np.testing.assert_array_equal(o, wo)
    np.testing.assert_array_equal(p, wp)


def test_bitcast_packs_second_minor_dim():
    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.bitcast(x_ref[...], jnp.int32)

    x = RNG.integers(-2**15, 2**15, (16, 128)).astype(np.int16)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
                       interpret=True)
    got = interp.interpret(f)(x)
    # element (a, b) holds x[2a, b] in its low half and x[2a+1, b] in its high half
    want = (x[0::2].astype(np.uint16).astype(np.uint32)
            | (x[1::2].astype(np.uint16).astype(np.uint32) << 16)).view(np.int32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(xla_cpu(f, x), want)


def test_dma_moves_never_written_memory_without_reading_it():
    # Copying never-written scratch is not an error by itself (uninitialized='raise'); reading
    # the copy is, and it names the destination buffer.
    def kernel(o_ref, a, b, sem):
        a[0:4, :] = jnp.ones((4, 128), jnp.float32)
        pltpu.sync_copy(a, b) if hasattr(pltpu, "sync_copy") else None
        o_ref[0:4, :] = b[0:4, :]
        o_ref[4:8, :] = b[4:8, :]

    def partial_reader(o_ref, a, b, sem):
        a[0:4, :] = jnp.ones((4, 128), jnp.float32)
        c = pltpu.make_async_copy(a, b, sem.at[0])
        c.start()
        c.wait()
        o_ref[0:4, :] = b[0:4, :]
        o_ref[4:8, :] = jnp.zeros((4, 128), jnp.float32)

    kw = dict(out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.VMEM((8, 128), jnp.float32),
                              pltpu.SemaphoreType.DMA((1,))])
    want = np.concatenate([np.ones((4, 128)), np.zeros((4, 128))]).astype(np.float32)
    got = interp.interpret(pl.pallas_call(partial_reader, **kw), uninitialized="raise",
                           detect_races=True)(),
    np.testing.assert_array_equal(got[0], want)
    if hasattr(pltpu, "sync_copy"):
        with pytest.raises(UninitializedReadError, match=r"scratch \(vmem\) buffer 'b.*\[4:8, 0:128\]"):
            interp.interpret(pl.pallas_call(kernel, **kw), uninitialized="raise")()


def test_race_regions_are_exact_element_sets():
    # Race checks compare the exact elements (by address) two accesses touch: interleaved
    # strided halves do not overlap; refs viewing the same memory are compared too.
    from interp.pallas.dma import Region
    from interp.pallas.memory import KernelRef
    buf = KernelRef(np.zeros((8, 128), np.float32), "buf", None)
    full = slice(0, 128, 1)
    even = Region(buf, (slice(0, 8, 2), full))
    odd = Region(buf, (slice(1, 8, 2), full))
    assert not even.overlaps(odd)
    assert even.overlaps(Region(buf, (2, slice(5, 6, 1))))
    assert not even.overlaps(Region(buf, (np.array([1, 3, 7]), full)))
    view = KernelRef(buf.array[4:], "view", None)
    assert Region(view, (0, full)).overlaps(even)
    assert not Region(view, (1, full)).overlaps(even)


def _exchange_kernel(barrier):
    """Two cores: each copies its half of x to o, (optionally) meets the other core at a
    barrier, then reads the other core's half of o into p (+1)."""
    mesh = _tensorcore_mesh(2)

    def f(x):
        @pl.kernel(out_type=(jax.ShapeDtypeStruct(x.shape, x.dtype),) * 2, mesh=mesh,
                   scratch_types=[pltpu.SemaphoreType.REGULAR])
        def k(x_hbm, o_hbm, p_hbm, sem):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])
            if barrier:
                pltpu.core_barrier(sem, core_axis_name="core")

            def body(buf):
                pltpu.sync_copy(o_hbm.at[pl.ds((1 - c) * 8, 8)], buf)
                buf[...] = buf[...] + 1
                pltpu.sync_copy(buf, p_hbm.at[pl.ds(c * 8, 8)])

            pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

        return k(x)

    return f


@pytest.mark.parametrize("order", ["sequential", "shuffled"])
def test_cores_meet_at_a_barrier(order):
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    o, p = interp.interpret(_exchange_kernel(True), grid_order=order, detect_races=True)(x)
    np.testing.assert_array_equal(o, x)
    np.testing.assert_array_equal(p, np.concatenate([x[8:], x[:8]]) + 1)


def test_missing_barrier_reads_the_other_cores_unwritten_half():
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    _, p = interp.interpret(_exchange_kernel(False))(x)
    assert np.isnan(p[:8]).all()  # core 0 ran before core 1 wrote its half
    with pytest.raises(UninitializedReadError, match=r"grid point \{'core': 0\}"):
        interp.interpret(_exchange_kernel(False), uninitialized="raise")(x)


def test_cores_waiting_on_each_other_deadlock_loudly():
    mesh = _tensorcore_mesh(2)

    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                   scratch_types=[pltpu.SemaphoreType.REGULAR])
        def k(x_hbm, o_hbm, sem):
            pl.semaphore_wait(sem, 1)  # nobody ever signals
            pltpu.sync_copy(x_hbm, o_hbm)

        return k(x)

    with pytest.raises(RaceError, match=r"deadlock.*core \(0,\).*core \(1,\)"):
        interp.interpret(f)(np.ones((8, 128), np.float32))


def _dma_kernel(body):
    return pl.pallas_call(body, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA((2,))])


def test_dma_races_on_source_and_overlapping_destinations():
    def writes_source(x_hbm, o_ref, buf, sem):
        buf[0:8, :] = jnp.ones((8, 128), jnp.float32)
        c = pltpu.make_async_copy(buf.at[pl.ds(0, 8)], o_ref, sem.at[0])
        c.start()
        buf[0:8, :] = jnp.zeros((8, 128), jnp.float32)  # the source changes under the DMA
        c.wait()

    def overlapping(x_hbm, o_ref, buf, sem):
        a = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem.at[0])
        b = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 8)], buf.at[pl.ds(4, 8)], sem.at[1])
        a.start()
        b.start()
        a.wait()
        b.wait()
        o_ref[...] = buf[0:8, :]

    x = RNG.standard_normal((16, 128)).astype(np.float32)
    with pytest.raises(RaceError, match=r"write of scratch \(vmem\) buffer .*\[0:8, 0:128\].*"
                                        r"DMA's source"):
        interp.interpret(_dma_kernel(writes_source), detect_races=True)(x)
    with pytest.raises(RaceError, match=r"DMA into .*\[4:12, 0:128\] overlaps the DMA in flight"):
        interp.interpret(_dma_kernel(overlapping), detect_races=True)(x)


def test_dma_out_of_bounds_source():
    def kernel(x_hbm, o_ref, buf, sem):
        start = pl.program_id(0) * 12  # dynamic: 0, then 12 (rows 12..19 of 16)
        c = pltpu.make_async_copy(x_hbm.at[pl.ds(start, 8)], buf.at[pl.ds(0, 8)], sem.at[0])
        c.start()
        c.wait()
        o_ref[...] = buf[0:8, :]

    f = pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                       out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32),
                                       pltpu.SemaphoreType.DMA((2,))])
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    with pytest.raises(OutOfBoundsError, match=r"grid point \(1,\): input \(any\) buffer "
                                               r"'x_hbm.*\[12:20:1\], size 16"):
        interp.interpret(f)(x)
