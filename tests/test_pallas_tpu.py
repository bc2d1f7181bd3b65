"""TPU kernel features in the reference: DMAs, semaphores, run_scoped, core meshes, masked
loads/stores, roll, bitcast; and undefined behaviour made loud (races, out-of-bounds accesses,
uninitialized reads), each message naming kernel, buffer, grid point and index."""
from __future__ import annotations

import dataclasses
import functools
import math
import re

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


@pytest.mark.parametrize("order", ["sequential", "shuffled"])
def test_core_map_over_a_core_mesh_writes_the_refs_it_closes_over(order):
    """pl.core_map: the body closes over refs and runs once per core. JAX 0.10.2 binds it as
    core_map (pallas/core.py core_map_p, run through JAX's own discharge to an mpmd_map), 0.11
    and later as an mpmd_map: the same program, the same answer by hand."""
    from tests.support import core_map_over_refs

    def body(x_ref, o_ref):
        c = jax.lax.axis_index("core")

        def scoped(buf):
            pltpu.sync_copy(x_ref.at[pl.ds(c * 8, 8)], buf)
            buf[...] = buf[...] * 2 + c.astype(jnp.float32)
            pltpu.sync_copy(buf, o_ref.at[pl.ds(c * 8, 8)])

        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32))

    f = core_map_over_refs(_tensorcore_mesh(2), body)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    x_out, got = interp.interpret(f, grid_order=order, detect_races=True)(x)
    want = 2 * x + np.repeat(np.arange(2, dtype=np.float32), 8)[:, None]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x_out, x)   # read, never written


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


def _dma_kernel(body, interpret=None):
    return pl.pallas_call(body, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA((2,))], interpret=interpret)


def _writes_source(x_hbm, o_ref, buf, sem):
    buf[0:8, :] = jnp.ones((8, 128), jnp.float32)
    c = pltpu.make_async_copy(buf.at[pl.ds(0, 8)], o_ref, sem.at[0])
    c.start()
    buf[0:8, :] = jnp.zeros((8, 128), jnp.float32)  # the source changes under the DMA
    c.wait()


def _overlapping(x_hbm, o_ref, buf, sem):
    a = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem.at[0])
    b = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 8)], buf.at[pl.ds(4, 8)], sem.at[1])
    a.start()
    b.start()
    a.wait()
    b.wait()
    o_ref[...] = buf[0:8, :]


def _reads_destination(x_hbm, o_ref, buf, sem):
    buf[0:8, :] = jnp.full((8, 128), 5.0, jnp.float32)
    c = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem.at[0])
    c.start()
    o_ref[...] = buf[0:8, :] + 1.0     # reads the DMA's destination before waiting for it
    c.wait()


def test_dma_races_on_source_and_overlapping_destinations():
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    with pytest.raises(RaceError, match=r"write of scratch \(vmem\) buffer .*\[0:8, 0:128\].*"
                                        r"DMA's source"):
        interp.interpret(_dma_kernel(_writes_source), detect_races=True)(x)
    with pytest.raises(RaceError, match=r"DMA into .*\[4:12, 0:128\] overlaps the DMA in flight"):
        interp.interpret(_dma_kernel(_overlapping), detect_races=True)(x)


# -- races recorded instead of raised (Options.on_race="record": the drop-in mode where JAX's
# detector warns or records; spec pallas_tpu/recorded-race) ------------------------------------

def _jax_tpu_detector(body, x):
    """JAX's TPU interpret mode with its race detector recording (on_race="warn" where JAX has
    it; JAX 0.10 / 0.11 always record): (the kernel's output, races_found)."""
    import dataclasses
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret
    on_race = {"on_race": "warn"} if "on_race" in {
        f.name for f in dataclasses.fields(pltpu.InterpretParams)} else {}
    pltpu.reset_tpu_interpret_mode_state()
    try:
        out = np.asarray(jax.block_until_ready(jax.jit(_dma_kernel(
            body, pltpu.InterpretParams(detect_races=True, **on_race)))(x)))
        return out, mosaic_interpret.races.races_found
    finally:
        pltpu.reset_tpu_interpret_mode_state()


@pytest.mark.parametrize("body, race, jax_flags", [
    (_reads_destination, r"read of scratch \(vmem\) buffer .*\[0:8, 0:128\] while a DMA from "
                         r".*'x_hbm.*to scratch .*\[0:8, 0:128\].*destination before dma_wait",
     True),
    (_writes_source, r"write of scratch \(vmem\) buffer .*\[0:8, 0:128\] while a DMA from "
                     r"scratch .*\[0:8, 0:128\] to .*'o_ref.*source before dma_wait", True),
    # Two DMAs writing one range while both are in flight: JAX's detector runs each DMA at its
    # wait, so the kernel's waits order their writes and it flags nothing; the reference does.
    (_overlapping, r"DMA into scratch .*\[4:12, 0:128\] overlaps the DMA in flight from "
                   r".*'x_hbm.*\[0:8, 0:128\] to scratch .*\[0:8, 0:128\]", False),
], ids=["read-destination", "write-source", "overlapping-destinations"])
def test_recorded_dma_race_goes_on_as_jax_tpu_interpret_mode(body, race, jax_flags):
    """Under on_race="record" the race is recorded naming both accesses and the kernel goes on
    with the DMA landing at its wait: the values JAX's TPU interpret mode gives with its default
    dma_execution_mode="on_wait", whose detector flags the same kernels (races_found)."""
    from interp.schedule import recording_races
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    with recording_races() as races:
        got = interp.interpret(_dma_kernel(body), detect_races=True, on_race="record")(x)
    assert len(races) == 1 and type(races[0]) is RaceError
    assert re.search(race, str(races[0])), str(races[0])
    want, found = _jax_tpu_detector(body, x)
    assert found is jax_flags
    np.testing.assert_array_equal(got, want)
    # hand-computed, the DMA landing at its wait:
    expected = {_reads_destination: np.full((8, 128), 6.0, np.float32),
                _writes_source: np.zeros((8, 128), np.float32),
                _overlapping: np.concatenate([x[0:4], x[8:12]])}[body]
    np.testing.assert_array_equal(got, expected)


def test_recorded_races_of_a_kernel_end_and_of_completion_order():
    """A DMA never waited for lands at the kernel's end (recorded, with the semaphore it leaves
    signalled); a wait two DMAs could satisfy is recorded once, at the first access to either
    destination, and the start-order completion stands; a deadlock is still raised."""
    from interp.pallas.dma import DmaCompletionOrderError
    from interp.schedule import recording_races

    def never_waited(x_hbm, o_hbm, buf, sem):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], o_hbm, sem.at[0]).start()

    def ambiguous(x_hbm, o_ref, buf, sem):
        a = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem.at[0])
        b = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 8)], buf.at[pl.ds(8, 8)], sem.at[0])
        a.start()
        b.start()
        a.wait()                        # either DMA's bytes satisfy it
        o_ref[...] = buf[0:8, :] * 2.0  # a's destination: recorded
        o_ref[...] += buf[0:8, :]       # the same wait: not recorded again
        b.wait()

    def deadlock(x_hbm, o_ref, buf, sem):    # waits for a DMA never started
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem.at[1]).wait()

    x = RNG.standard_normal((16, 128)).astype(np.float32)
    f = pl.pallas_call(never_waited, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec(memory_space=pl.ANY),
                       out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32),
                                       pltpu.SemaphoreType.DMA((2,))])
    with recording_races() as races:
        got = interp.interpret(f, detect_races=True, on_race="record")(x)
    np.testing.assert_array_equal(got, x[0:8])
    assert [type(r) for r in races] == [RaceError, RaceError]
    assert "never waited for before the end of the pallas_call" in str(races[0])
    assert "holds 4096 at index (0,) at the end of the pallas_call" in str(races[1])

    with recording_races() as races:
        got = interp.interpret(_dma_kernel(ambiguous), detect_races=True, on_race="record")(x)
    np.testing.assert_array_equal(got, 3.0 * x[0:8])
    assert [type(r) for r in races] == [DmaCompletionOrderError]
    assert re.search(r"read of scratch .*\[0:8, 0:128\] touches the destination of DMA 1", str(races[0]))

    with recording_races() as races, pytest.raises(RaceError, match="needs 4096 but the semaphore"):
        interp.interpret(_dma_kernel(deadlock), detect_races=True, on_race="record")(x)
    assert races == []
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


# --------------------------------------------------------------------------------------------
# PRNG keys inside kernels. Software-defined bits (Threefry keys, the fold_in of Pallas keys, the
# samplers' transforms) are checked against XLA:CPU of the equivalent jnp program; bits of the
# TPU hardware PRNG against the documented emulation (interp.prng.pallas_tpu_bits, spec/random.py).

def _pallas_key_data(seed):
    """key_data(pltpu.to_pallas_key(jax.random.key(seed))), computed by XLA:CPU."""
    return xla_cpu(lambda s: jax.random.key_data(pltpu.to_pallas_key(jax.random.key(s))),
                   np.int32(seed))


def _fold_in_jnp(data, msgs):
    """The pallas_tpu fold_in as a plain jnp program (pallas/mosaic/random.py _fold_in): the
    message added to the second word, then one Threefry round (rotation 13)."""
    from jax._src.random import threefry2x32

    def f(data, msgs):
        k0, k1 = data[0, 0], data[0, 1] + msgs
        return jnp.stack(threefry2x32.apply_round([jnp.broadcast_to(k0, msgs.shape), k1], 13), -1)

    return xla_cpu(f, data, msgs)


def _uniform_jnp(bits):
    """jax.random.uniform's transform of 32 random bits into [0, 1) (float32), on XLA:CPU."""
    def f(bits):
        x = jax.lax.bitcast_convert_type((bits >> 9) | np.uint32(0x3F800000), jnp.float32) - 1
        return jnp.maximum(0.0, x)
    return xla_cpu(f, bits)


def _key_call(kernel, key, grid, out_block, out_shape, out_space=None):
    kw = {} if out_space is None else dict(memory_space=out_space)
    return pl.pallas_call(kernel, grid=grid, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_specs=pl.BlockSpec(out_block, lambda i: (i,) + (0,) * (
                              len(out_block) - 1), **kw),
                          out_shape=out_shape)(key)


def test_pallas_key_operand_fold_in_matches_the_jnp_program():
    # A typed pallas_tpu key passed to the kernel (SMEM), folded with the grid index there; the
    # folded key's scalars come out through unwrap_pallas_seed.
    from jax._src.pallas.mosaic import primitives as tpu_prims

    def kernel(key_ref, o_ref):
        key = jax.random.fold_in(key_ref[...], pl.program_id(0))
        k0, k1 = tpu_prims.unwrap_pallas_seed(key)
        o_ref[0] = k0
        o_ref[1] = k1

    def f(seed):
        return _key_call(kernel, pltpu.to_pallas_key(jax.random.key(seed)), (4,), (None, 2),
                         jax.ShapeDtypeStruct((4, 2), jnp.uint32), pltpu.SMEM)

    got = interp.interpret(f)(np.int32(42))
    want = _fold_in_jnp(_pallas_key_data(42), np.arange(4, dtype=np.uint32))
    np.testing.assert_array_equal(got, want)


def test_pallas_key_bits_seed_the_hardware_prng():
    # random_bits of a pallas_tpu key seeds the core's PRNG with the key's scalars and draws
    # (_random_bits): per grid step the emulated bits of the folded key; uniform is jax.random's
    # transform of those bits. The same key in two steps gives the same bits (sequential
    # hardware PRNG: the seed sets its whole state).
    from interp import prng

    def kernel(key_ref, b_ref, u_ref, same_ref):
        key = jax.random.fold_in(key_ref[...], pl.program_id(0))
        b_ref[...] = jax.random.bits(key, (8, 128), jnp.uint32)
        u_ref[...] = jax.random.uniform(key, (8, 128))
        same_ref[...] = jax.random.bits(key_ref[...], (8, 128), jnp.uint32)

    def f(seed):
        spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
        return pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              out_specs=[spec] * 3,
                              out_shape=[jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32),
                                         jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
                                         jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32)],
                              )(pltpu.to_pallas_key(jax.random.key(seed)))

    bits, uni, same = interp.interpret(f)(np.int32(7))
    data = _pallas_key_data(7)
    folded = _fold_in_jnp(data, np.arange(2, dtype=np.uint32))
    for i in range(2):
        want = prng.pallas_tpu_bits(folded[i], (8, 128))
        np.testing.assert_array_equal(bits[i], want)
        np.testing.assert_array_equal(uni[i], _uniform_jnp(want))  # reseeded: draw 0 again
        np.testing.assert_array_equal(same[i], prng.pallas_tpu_bits(data.ravel(), (8, 128)))
    assert len(np.unique(bits)) == bits.size  # never a constant
    assert not np.array_equal(bits, interp.interpret(f)(np.int32(8))[0])


def test_threefry_key_in_a_kernel_matches_jax_random_outside():
    # Pallas guarantees jax.random on threefry keys inside a kernel equals the same calls outside
    # (docs: pallas/tpu/prng): here against XLA:CPU, both partitionable modes.
    def kernel(key_ref, o_ref, u_ref):
        key = jax.random.fold_in(key_ref[...], pl.program_id(0))
        o_ref[...] = jax.random.bits(key, (8, 128), jnp.uint32)
        u_ref[...] = jax.random.uniform(key, (8, 128))

    def f(seed):
        spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
        return pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                              out_specs=[spec] * 2,
                              out_shape=[jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32),
                                         jax.ShapeDtypeStruct((2, 8, 128), jnp.float32)],
                              )(jax.random.key(seed))

    def outside(seed):
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(2))
        return (jax.vmap(lambda k: jax.random.bits(k, (8, 128), jnp.uint32))(keys),
                jax.vmap(lambda k: jax.random.uniform(k, (8, 128)))(keys))

    for partitionable in (False, True):
        with jax.threefry_partitionable(partitionable):
            got = interp.interpret(f)(np.int32(3))
            want = xla_cpu(outside, np.int32(3))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def _sample_block_call(seed, block, impl):
    def kernel(key_ref, o_ref):
        o_ref[...] = pltpu.sample_block(jax.random.uniform, key_ref[...], block_size=block,
                                        tile_size=(8, 128), total_size=(16, 256))

    def f(seed):
        key = jax.random.key(seed)
        if impl == "pallas_tpu":
            key = pltpu.to_pallas_key(key)
        return pl.pallas_call(kernel, grid=(16 // block[0], 256 // block[1]),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
                              out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32))(key)
    return interp.interpret(f)(np.int32(seed))


@pytest.mark.parametrize("impl", ["threefry2x32", "pallas_tpu"])
def test_sample_block_is_invariant_to_the_block_shape(impl):
    # sample_block's promise: the same samples whatever the block shape and iteration order.
    # For Pallas keys it holds only because a seed sets the whole hardware PRNG state.
    small = _sample_block_call(11, (8, 128), impl)
    np.testing.assert_array_equal(small, _sample_block_call(11, (16, 256), impl))
    np.testing.assert_array_equal(small, _sample_block_call(11, (8, 256), impl))
    assert len(np.unique(small)) > small.size // 2
    assert not np.array_equal(small, _sample_block_call(12, (8, 128), impl))
    if impl == "threefry2x32":
        # The tile keys and samples are software-defined: the same blocked sampler on XLA:CPU.
        from jax._src import blocked_sampler

        def outside(seed):
            key = jax.random.key(seed)
            return jnp.block([[blocked_sampler.sample_block(
                jax.random.uniform, blocked_sampler.blocked_fold_in(
                    key, (16, 256), (8, 128), (8, 128), (i, j)), (8, 128), (8, 128))
                for j in range(2)] for i in range(2)])

        np.testing.assert_array_equal(small, xla_cpu(outside, np.int32(11)))


def test_stateful_samplers_draw_in_sequence_after_one_seed():
    # pltpu.stateful_*: no key; each call is the next draw of the seeded hardware PRNG. Seeded
    # once in the first grid step, the state carries over to the next steps.
    from interp import prng

    def kernel(u_ref, b_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            pltpu.prng_seed(123, 456)

        u_ref[...] = pltpu.stateful_uniform(shape=(8, 128))
        b_ref[...] = pltpu.stateful_bits(shape=(8, 128), dtype=jnp.uint32)

    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    f = pl.pallas_call(kernel, grid=(2,), out_specs=[spec, spec],
                       out_shape=[jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
                                  jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32)])
    u, b = interp.interpret(f)()
    for step in range(2):
        draws = [prng.pallas_tpu_bits([123, 456], (8, 128), draw=2 * step + k)
                 for k in range(2)]
        np.testing.assert_array_equal(u[step], _uniform_jnp(draws[0]))
        np.testing.assert_array_equal(b[step], draws[1])


def test_key_made_in_a_kernel():
    from interp import prng

    def seeded(o_ref):
        key = jax.random.key(pl.program_id(0) + 5, impl="pallas_tpu")
        o_ref[...] = jax.random.bits(key, (8, 128), jnp.uint32)

    f = pl.pallas_call(seeded, grid=(2,), out_specs=pl.BlockSpec((None, 8, 128),
                                                                  lambda i: (i, 0, 0)),
                       out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32))
    got = interp.interpret(f)()
    for i in range(2):  # the pallas_tpu seed broadcasts the seed to both words
        np.testing.assert_array_equal(got[i], prng.pallas_tpu_bits([i + 5] * 2, (8, 128)))


def _pallas_key_kernel(body, shape=(8, 128)):
    """A kernel storing ``body(key)`` of the key it reads from SMEM."""
    def kernel(key_ref, o_ref):
        o_ref[...] = body(key_ref[...])
    return pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_shape=jax.ShapeDtypeStruct(shape, jnp.uint32))


def test_pallas_tpu_key_no_split_raises():
    key = pltpu.to_pallas_key(jax.random.key(0))
    f = _pallas_key_kernel(lambda k: jax.random.bits(jax.random.split(k)[0], (8, 128), jnp.uint32))
    with pytest.raises(interp.UnsupportedPrimitiveError,
                       match="pallas_tpu_key/no-split: JAX defines no split of Pallas TPU keys"):
        interp.interpret(f)(key)


def test_pallas_tpu_key_bit_width_other_than_32_raises():
    key = pltpu.to_pallas_key(jax.random.key(0))
    f = _pallas_key_kernel(lambda k: jax.random.bits(k, (8, 128), jnp.uint8).astype(jnp.uint32))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="pallas_tpu_key/bit-width: bit_width 8"):
        interp.interpret(f)(key)


def test_pallas_tpu_key_in_kernel_only_fold_in_outside_raises():
    key = pltpu.to_pallas_key(jax.random.key(0))
    with pytest.raises(interp.UnsupportedPrimitiveError,
                       match="pallas_tpu_key/in-kernel-only: fold_in of a Pallas TPU key outside"):
        interp.interpret(lambda k: jax.random.key_data(jax.random.fold_in(k, 1)))(key)


def test_pallas_tpu_key_scalar_key_arrays_of_keys_raise():
    keys = pltpu.to_pallas_key(jax.random.split(jax.random.key(0), 2))
    bits = _pallas_key_kernel(jax.vmap(lambda k: jax.random.bits(k, (8, 128), jnp.uint32)), (2, 8, 128))
    with pytest.raises(interp.UnsupportedPrimitiveError,
                       match=r"pallas_tpu_key/scalar-key: random_bits of a Pallas key array \(2,\)"):
        interp.interpret(bits)(keys)
    fold = _pallas_key_kernel(jax.vmap(lambda k: jax.random.key_data(jax.random.fold_in(k, 1))),
                              (2, 1, 2))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="pallas_tpu_key/scalar-key: fold_in"):
        interp.interpret(fold)(keys)


@pytest.mark.parametrize("module,impl", [("threefry", "pallas_threefry2x32"),
                                         ("philox", "pallas_philox4x32")])
def test_shipped_prng_kernels_as_jax_random_impls(module, impl):
    # ops.tpu.random registers its kernels as PRNG impls (seed/split/fold_in/bits are Pallas
    # kernels): run as written, they match JAX's TPU interpret mode of the same program bitwise.
    import importlib
    importlib.import_module(f"jax.experimental.pallas.ops.tpu.random.{module}")

    def f(seed):
        a, b = jax.random.split(jax.random.key(seed, impl=impl))
        c = jax.random.fold_in(b, 7)
        return jax.random.key_data(a), jax.random.key_data(c), jax.random.bits(c, (8, 128))

    got = interp.interpret(f)(np.int32(5))
    with pltpu.force_tpu_interpret_mode(True):
        want = xla_cpu(f, np.int32(5))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_semaphores_at_dynamic_indices_per_grid_step():
    # Semaphore operands resolved per equation and cached per index value: every grid step
    # signals and reads the semaphore its own index names, with its own amount (hand-computed:
    # step i leaves sem[i % 2] at i + 1 before its wait, and also sees what the other slot holds).
    def kernel(o_ref, sem):
        i = pl.program_id(0)
        pl.semaphore_signal(sem.at[i % 2], i + 1)
        o_ref[i, 0] = pl.semaphore_read(sem.at[i % 2])
        o_ref[i, 1] = pl.semaphore_read(sem.at[1 - i % 2])
        pl.semaphore_wait(sem.at[i % 2], i + 1)

    f = pl.pallas_call(kernel, grid=(6,), out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                       out_shape=jax.ShapeDtypeStruct((6, 2), jnp.int32),
                       scratch_shapes=[pltpu.SemaphoreType.REGULAR((2,))])
    want = np.stack([np.arange(1, 7), np.zeros(6)], 1).astype(np.int32)
    for detect in (False, True):
        np.testing.assert_array_equal(interp.interpret(f, detect_races=detect)(), want)


def test_key_output_of_a_kernel():
    # A kernel may store keys into a key-typed output: its key data, returned as a key array.
    def kernel(key_ref, o_ref):
        o_ref[...] = jax.random.fold_in(key_ref[...], 1)

    def f(seed):
        key = jax.random.key(seed)
        out = pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                             out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                             out_shape=jax.ShapeDtypeStruct((), key.dtype))(key)
        return jax.random.key_data(out)

    want = xla_cpu(lambda s: jax.random.key_data(jax.random.fold_in(jax.random.key(s), 1)),
                   np.int32(3))
    np.testing.assert_array_equal(interp.interpret(f)(np.int32(3)), want)


def _mesh_key_kernel(keys, space, **kernel_kw):
    """pl.kernel over one core per key: each core DMAs the typed key operand (HBM) into key
    scratch, loads its own key, draws bits from it into row c of the first output, and core 0
    copies the key operand into a key-typed second output."""
    mesh = _tensorcore_mesh(keys.shape[0])
    out = (jax.ShapeDtypeStruct((keys.shape[0], 8, 128), jnp.uint32),
           jax.ShapeDtypeStruct(keys.shape, keys.dtype))

    @pl.kernel(out_type=out, mesh=mesh, scratch_types=[space(keys.shape, keys.dtype),
                                                       pltpu.VMEM((8, 128), jnp.uint32)],
               **kernel_kw)
    def k(k_hbm, o_hbm, ko_hbm, ks, buf):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(k_hbm, ks)
        buf[...] = jax.random.bits(ks[c], (8, 128), jnp.uint32)
        pltpu.sync_copy(buf, o_hbm.at[c])

        @pl.when(c == 0)
        def _():
            pltpu.sync_copy(k_hbm, ko_hbm)

    bits, keys_out = k(keys)
    return bits, jax.random.key_data(keys_out)


@pytest.mark.parametrize("order", ["sequential", "shuffled"])
def test_core_mesh_kernel_with_typed_key_operands(order):
    # Typed key operands of pl.kernel are their key data in kernel memory, as in pallas_call
    # (Mosaic lowers mpmd_map with key operands physicalized; JAX's interpret modes fail on a
    # DMA of them: NotImplementedError 'key<fry>'). Threefry bits drawn in a kernel equal
    # jax.random outside it (XLA:CPU), both partitionable modes.
    def f(seed):
        return _mesh_key_kernel(jax.random.split(jax.random.key(seed), 2), pltpu.VMEM)

    def outside(seed):
        keys = jax.random.split(jax.random.key(seed), 2)
        return (jax.vmap(lambda k: jax.random.bits(k, (8, 128), jnp.uint32))(keys),
                jax.random.key_data(keys))

    for partitionable in (False, True):
        with jax.threefry_partitionable(partitionable):
            got = interp.interpret(f, grid_order=order, detect_races=True,
                                   uninitialized="raise")(np.int32(3))
            want = xla_cpu(outside, np.int32(3))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_core_mesh_kernel_with_pallas_key_scratch():
    # A pallas_tpu key DMA'd into SMEM key scratch seeds the (emulated) hardware PRNG there.
    from interp import prng

    def f(seed):
        return _mesh_key_kernel(pltpu.to_pallas_key(jax.random.key(seed))[None], pltpu.SMEM)

    bits, data = interp.interpret(f)(np.int32(9))
    want = _pallas_key_data(9)
    np.testing.assert_array_equal(data, want[None])
    np.testing.assert_array_equal(bits[0], prng.pallas_tpu_bits(want.ravel(), (8, 128)))


def test_core_mesh_key_operand_matches_jax_interpret_mode():
    # Where JAX's interpret modes run a pl.kernel with a key operand (the kernel does not touch
    # it), the reference gives their result; never-written key scratch is loud when read.
    mesh = _tensorcore_mesh(2)

    def f(keys, x, interpret=False):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                   interpret=interpret)
        def k(k_hbm, x_hbm, o_hbm):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])
        return k(keys, x)

    keys = jax.random.split(jax.random.key(0), 3)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    want = xla_cpu(lambda k, x: f(k, x, interpret=pltpu.InterpretParams()), keys, x)
    np.testing.assert_array_equal(interp.interpret(f)(keys, x), want)

    def unread(keys):
        @pl.kernel(out_type=jax.ShapeDtypeStruct((8, 128), jnp.uint32), mesh=mesh,
                   scratch_types=[pltpu.VMEM(keys.shape, keys.dtype),
                                  pltpu.VMEM((8, 128), jnp.uint32)])
        def k(k_hbm, o_hbm, ks, bits):
            bits[...] = jax.random.bits(ks[0], (8, 128), jnp.uint32)
            pltpu.sync_copy(bits, o_hbm)      # (only DMAs reach HBM: pallas_call/c19)
        return k(keys)

    with pytest.raises(UninitializedReadError, match=r"scratch \(vmem\)"):
        interp.interpret(unread, uninitialized="raise")(keys)


def test_core_threads_run_under_the_callers_jax_config():
    # JAX keeps context-manager config per thread; each core of a multi-core mesh runs in a
    # thread of its own and must still see the caller's settings (here pl.enable_debug_checks:
    # the check fails on core 1 only, so the message names that core).
    mesh = _tensorcore_mesh(2)

    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)
        def k(x_hbm, o_hbm):
            pl.debug_check(jax.lax.axis_index("core") < 1, "only core 0 passes")
            pltpu.sync_copy(x_hbm, o_hbm)
        return k(x)

    x = np.ones((8, 128), np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(x), x)
    with pl.enable_debug_checks(True):
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match=r"grid point \{'core': 1\}: debug check failed: only core 0"):
            interp.interpret(f)(x)


def _signal_other_core(**signal_kw):
    """Two cores: each signals the other core's semaphore (named by ``signal_kw(c)``), then
    waits for the other's signal and writes its core index."""
    mesh = _tensorcore_mesh(2)

    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                   scratch_types=[pltpu.SemaphoreType.REGULAR])
        def k(x_hbm, o_hbm, sem):
            c = jax.lax.axis_index("core")
            pl.semaphore_signal(sem, 1, **{k: v(1 - c) for k, v in signal_kw.items()})
            pl.semaphore_wait(sem, 1)
            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])

        return k(x)

    return f


def test_signals_name_cores_by_core_axis_or_core_index_never_by_device_id():
    # Mosaic (lowering.py _device_id_to_logical, primitives.py device_id_to_logical): a dict of
    # core axes (device_id_type MESH) or core_index names a core of this kernel's mesh; a logical
    # device id or device-mesh coordinates name another device (remote: unsupported here).
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    for kw in (dict(device_id=lambda o: {"core": o}), dict(core_index=lambda o: o)):
        for order in ("sequential", "shuffled"):
            got = interp.interpret(_signal_other_core(**kw), grid_order=order,
                                   detect_races=True)(x)
            np.testing.assert_array_equal(got, x)
    logical = pl.DeviceIdType.LOGICAL   # (deprecated in JAX 0.12 with device_id_type itself)
    for kw in (dict(device_id=lambda o: o),
               dict(device_id=lambda o: o, device_id_type=lambda o: logical),
               dict(device_id=lambda o: {"core": o}, device_id_type=lambda o: logical)):
        with pytest.raises(interp.UnsupportedPrimitiveError,
                           match=r"semaphore_signal to device .*only the cores of a core-mesh"):
            interp.interpret(_signal_other_core(**kw))(x)


def test_key_scratch_persists_across_grid_steps():
    # Key scratch (key data, like key operands) lasts across grid steps as all scratch does: the
    # key stored at step 0 and folded at every step gives jax.random's bits outside (XLA:CPU).
    # (Defined by JAX's ref semantics; Mosaic itself refuses a scalar store to VMEM.)
    def kernel(key_ref, o_ref, ks):
        @pl.when(pl.program_id(0) == 0)
        def _():
            ks[0] = key_ref[...]

        ks[0] = jax.random.fold_in(ks[0], pl.program_id(0))
        o_ref[...] = jax.random.bits(ks[0], (8, 128), jnp.uint32)

    def f(seed):
        key = jax.random.key(seed)
        return pl.pallas_call(kernel, grid=(3,), in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              out_specs=pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
                              out_shape=jax.ShapeDtypeStruct((3, 8, 128), jnp.uint32),
                              scratch_shapes=[pltpu.VMEM((1,), key.dtype)])(key)

    def outside(seed):
        key, out = jax.random.key(seed), []
        for i in range(3):
            key = jax.random.fold_in(key, i)
            out.append(jax.random.bits(key, (8, 128), jnp.uint32))
        return jnp.stack(out)

    np.testing.assert_array_equal(interp.interpret(f, uninitialized="raise")(np.int32(4)),
                                  xla_cpu(outside, np.int32(4)))


# -- the Mosaic TPU primitives of JAX 0.11 / 0.12 (interp/rules/pallas_tpu.py) ----------------------
# Semantics and sources: spec/pallas_tpu.py. Each is checked against an independent computation
# (bit arithmetic, exact float64 sums, XLA:CPU running the plain JAX function).

import inspect  # noqa: E402

import ml_dtypes  # noqa: E402

from interp.errors import UndefinedBehaviorError  # noqa: E402

STOCHASTIC_TARGETS = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz",
                      "float4_e2m1fn", "int4")
needs_stochastic = pytest.mark.skipif(not hasattr(pltpu, "stochastic_round"),
                                      reason="pltpu.stochastic_round is not in this JAX")


def _stochastic(x, bits, target):
    def kernel(x_ref, b_ref, o_ref):
        o_ref[...] = pltpu.stochastic_round(x_ref[...], b_ref[...], target_dtype=o_ref.dtype)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, target))
    return interp.interpret(f)(x, bits)


def _random_words(shape):
    words = RNG.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
    edge = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32)
    return np.where(RNG.random(shape) < 0.2, RNG.choice(edge, size=shape), words)


@needs_stochastic
def test_stochastic_round_to_bf16_is_xla_stochastic_convert_on_the_bits():
    # bfloat16 keeps the top 16 bits of a float32: the discarded fraction, 2**-1 in the MSB of a
    # uint32, is the low half shifted up; the magnitude rounds up iff bits < it (XLA's rule), and
    # the carry runs into the exponent (to inf past the largest finite). Every finite float32
    # class: normals, subnormals, values near the largest finite, signed zeros.
    shape = (16, 128)
    mags = RNG.integers(0, 0x7F800000, size=shape, dtype=np.uint64).astype(np.uint32)
    mags[0, :8] = [0, 1, 0x7FFFFF, 0x800000, 0x7F7F0000, 0x7F7FFFFF, 0x7F7F8000, 0x3F808000]
    signs = RNG.integers(0, 2, size=shape).astype(np.uint32) << 31
    x = (mags | signs).view(np.float32)
    bits = _random_words(shape)
    got = _stochastic(x, bits, jnp.bfloat16).view(np.uint16)
    fraction = (mags & 0xFFFF) << 16
    want = ((mags >> 16) + (bits < fraction)).astype(np.uint32) | (signs >> 16)
    np.testing.assert_array_equal(got, want.astype(np.uint16))
    # NaN stays NaN, infinities stay
    special = np.array([[np.nan, -np.nan, np.inf, -np.inf] * 32] * 8, np.float32)
    out = _stochastic(special, _random_words(special.shape), jnp.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(special))
    np.testing.assert_array_equal(out[~np.isnan(out)], special[~np.isnan(special)])


def _neighbours(v: float, values: list) -> tuple:
    """The grid values around |v| (lo <= |v| < hi) by exact comparison."""
    import bisect
    from fractions import Fraction
    i = bisect.bisect_right(values, abs(Fraction(v)))
    return values[i - 1], (values[i] if i < len(values) else None)


@needs_stochastic
@pytest.mark.parametrize("target", STOCHASTIC_TARGETS)
def test_stochastic_round_picks_a_neighbour_by_the_exact_fraction(target):
    # Per element with Python fractions: the neighbours lo <= |x| < hi of the target's values,
    # f = floor((|x| - lo) / (hi - lo) * 2**32), hi iff bits < f, sign of x (int4 saturates).
    # The result is always one of the two neighbours (the only property JAX's TPU test checks).
    from fractions import Fraction
    t = np.dtype(getattr(ml_dtypes, target))
    is_int = target == "int4"
    if is_int:
        values, top = [Fraction(i) for i in range(0, 9)], 7.0
    else:
        raw = np.arange(1 << (4 if target.startswith("float4") else 8 if "8" in target else 16))
        with np.errstate(invalid="ignore"):   # the NaN encodings
            allv = raw.astype(np.uint8 if t.itemsize == 1 else np.uint16).view(t).astype(np.float64)
        values = sorted({Fraction(float(v)) for v in allv if np.isfinite(v) and v >= 0})
        top = float(values[-1])
    shape = (4, 128)
    x = RNG.uniform(-top, top, size=shape).astype(np.float32)
    x[0, :6] = [0.0, -0.0, float(values[1]), -float(values[2]), top, -top]
    bits = _random_words(shape)
    got = _stochastic(x, bits, t).astype(np.float64)
    for idx in np.ndindex(shape):
        v = float(x[idx])
        lo, hi = _neighbours(v, values)
        if hi is None or Fraction(v) == lo or -Fraction(v) == lo:
            mag = lo
        else:
            f = int((abs(Fraction(v)) - lo) / (hi - lo) * 2 ** 32)
            mag = hi if int(bits[idx]) < f else lo
        want = float(mag) if v >= 0 else -float(mag)
        if is_int:
            want = min(max(want, -8.0), 7.0)
        assert got[idx] == want, (target, v, int(bits[idx]), got[idx], want)
        assert got[idx] in (float(lo) * np.sign(v or 1), float(hi or lo) * np.sign(v or 1), -8.0, 7.0)


@needs_stochastic
def test_stochastic_round_is_unbiased_over_evenly_spread_bits():
    # Over the 2**16 words k * 2**16, the share rounding up is ceil(f / 2**16) / 2**16: the mean
    # of the results is x within gap / 2**16 (stochastic rounding's defining property).
    words = (np.arange(1 << 16, dtype=np.uint32) << 16).reshape(512, 128)
    for v in (1.0 + 3 * 2.0 ** -10, -5.3e-39, 1.7e38, 0.1):
        x = np.full(words.shape, v, np.float32)
        mean = _stochastic(x, words, jnp.bfloat16).astype(np.float64).mean()
        gap = np.spacing(np.float64(abs(float(np.float32(v).astype(ml_dtypes.bfloat16)))))
        gap = 2.0 ** (math.frexp(abs(float(np.float32(v))))[1] - 8) if abs(v) > 1e-38 else 2.0 ** -133
        assert abs(mean - float(np.float32(v))) <= gap / 2 ** 16, (v, mean)


@needs_stochastic
def test_stochastic_round_undefined_and_unsupported_uses_raise():
    bits = np.zeros((8, 128), np.uint32)
    big = np.full((8, 128), 1e4, np.float32)   # above float8_e4m3fn's 448: no upper neighbour
    with pytest.raises(UndefinedBehaviorError, match=r"kernel 'kernel' at grid point \(\).*no "
                                                      r"infinity"):
        _stochastic(big, bits, jnp.float8_e4m3fn)
    with pytest.raises(UndefinedBehaviorError, match="NaN"):
        _stochastic(np.full((8, 128), np.nan, np.float32), bits, jnp.int4)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="float16"):
        _stochastic(big, bits, jnp.float16)


def test_remove_memory_space_is_the_identity():
    try:
        from jax._src.pallas.mosaic.interpret.interpret_pallas_call import remove_memory_space_p
    except ImportError:
        pytest.skip("JAX has no remove_memory_space here")
    x = RNG.standard_normal((8, 128)).astype(np.float32)
    f = remove_memory_space_p.bind
    np.testing.assert_array_equal(interp.interpret(f)(x), xla_cpu(f, x))


# -- the MXUs -------------------------------------------------------------------------------------

def _tpu7():
    from conformance.cases.pallas_tpu import _abstract_tpu
    return _abstract_tpu("TPU7x")


needs_acc = pytest.mark.skipif(not hasattr(pltpu, "ACC"), reason="pltpu.ACC refs are JAX >= 0.11")
needs_fifo = pytest.mark.skipif(not hasattr(pltpu, "matmul_lhs_fifo"),
                                reason="the MXU result FIFO is JAX >= 0.11")
MXU_MSG = r"kernel '{}' at grid point \({}\): MXU {}: "


def _exact_product(*pairs):
    # bfloat16 / int8 operands: every product and the float64 sum of 256 of them are exact, so
    # rounding each matmul once to float32 (the spec's accumulation) is independent arithmetic.
    out = None
    for a, b in pairs:
        p = (a.astype(np.float64) @ b.astype(np.float64))
        p = p.astype(np.float32) if a.dtype != np.int8 else p.astype(np.int64)
        out = p if out is None else (out.astype(np.float64) + p).astype(p.dtype)
    return out


@needs_acc
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.int8])
def test_mxu_accumulates_over_grid_steps_and_pops_zeroed(dtype):
    # K split over an 'arbitrary' grid axis: the accumulator lasts across grid steps, a pop
    # returns the sum and zeroes it (the second row block starts from zero again).
    m, k, n = 16, 512, 256
    x = RNG.integers(-100, 100, (2 * m, k)).astype(dtype) if dtype == np.int8 else \
        RNG.standard_normal((2 * m, k)).astype(dtype)
    y = RNG.integers(-100, 100, (k, n)).astype(dtype) if dtype == np.int8 else \
        RNG.standard_normal((k, n)).astype(dtype)
    out = np.int32 if dtype == np.int8 else np.float32

    def kernel(x_ref, y_ref, o_ref, acc):
        pltpu.matmul_push_rhs(y_ref[...], staging_register=1, mxu_index=0)
        pltpu.matmul_acc_lhs(acc, x_ref[...], load_staged_rhs=1)

        @pl.when(pl.program_id(1) == 1)
        def _():
            o_ref[...] = pltpu.matmul_pop(acc)

    with _tpu7():
        f = pl.pallas_call(kernel, grid=(2, 2), out_shape=jax.ShapeDtypeStruct((2 * m, n), out),
                           in_specs=[pl.BlockSpec((m, 256), lambda i, j: (i, j)),
                                     pl.BlockSpec((256, n), lambda i, j: (j, 0))],
                           out_specs=pl.BlockSpec((m, n), lambda i, j: (i, 0)),
                           scratch_shapes=[pltpu.ACC(0)((m, n), out)])
        jaxpr = jax.make_jaxpr(f)(x, y)
    got = interp.eval_jaxpr(jaxpr, x, y)[0]
    for i in range(2):
        rows = slice(i * m, (i + 1) * m)
        want = _exact_product((x[rows, :256], y[:256]), (x[rows, 256:], y[256:]))
        np.testing.assert_array_equal(got[rows], want.astype(out))


@needs_fifo
def test_mxu_fifo_results_come_out_in_order_with_transposed_weights():
    m, k, n = 8, 256, 256
    xs = [RNG.standard_normal((m, k)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    y = RNG.standard_normal((n, k)).astype(ml_dtypes.bfloat16)

    def kernel(a, b, c, y_ref, o_ref):
        pltpu.matmul_push_rhs(y_ref[...], staging_register=0, mxu_index=1, transpose=True)
        for i, r in enumerate((a, b, c)):
            pltpu.matmul_lhs_fifo(r[...], mxu_index=1, load_staged_rhs=0 if i == 0 else None)
        for i in range(3):
            o_ref[i] = pltpu.matmul_pop_fifo((m, n), jnp.float32, mxu_index=1)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((3, m, n), jnp.float32))
    got = interp.interpret(f)(*xs, y)
    for i in range(3):
        np.testing.assert_array_equal(got[i], _exact_product((xs[i], y.T)))


def _fifo_call(body, n_out=1):
    m, k = 8, 256
    x = RNG.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    y = RNG.standard_normal((k, k)).astype(ml_dtypes.bfloat16)

    def kernel(x_ref, y_ref, o_ref):
        body(x_ref, y_ref, o_ref)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((m, k), jnp.float32))
    return lambda: interp.interpret(f)(x, y)


def _pop(o_ref, mxu=0, shape=(8, 256), dtype=jnp.float32):
    o_ref[...] = pltpu.matmul_pop_fifo(shape, dtype, mxu_index=mxu)


@needs_fifo
@pytest.mark.parametrize("misuse,message", [
    ("pop_empty", "pop from an empty result FIFO"),
    ("push_twice", "push to staging register 0, which still holds"),
    ("other_mxu_register", "loads staging register 0, which holds no pushed"),
    ("no_weights", "a matmul reuses the latched right-hand side, but none was ever loaded"),
    ("left_in_staging", r"the kernel ends with data in staging register\(s\) \[3\]"),
    ("left_in_fifo", r"the kernel ends with 1 result\(s\) in the result FIFO"),
    ("pop_wrong_dtype", "pops a .* int32 result; the oldest FIFO entry is a .* float32"),
])
def test_mxu_misuse_is_undefined_behaviour_naming_kernel_grid_point_and_mxu(misuse, message):
    def body(x_ref, y_ref, o_ref):
        x, y = x_ref[...], y_ref[...]
        if misuse == "pop_empty":
            _pop(o_ref)
        elif misuse == "push_twice":
            pltpu.matmul_push_rhs(y, staging_register=0, mxu_index=0)
            pltpu.matmul_push_rhs(y, staging_register=0, mxu_index=0)
        elif misuse == "other_mxu_register":   # registers are per MXU: MXU 0's register 0 is empty
            pltpu.matmul_push_rhs(y, staging_register=0, mxu_index=1)
            pltpu.matmul_lhs_fifo(x, mxu_index=0, load_staged_rhs=0)
        elif misuse == "no_weights":
            pltpu.matmul_lhs_fifo(x, mxu_index=0)
        elif misuse == "left_in_staging":
            pltpu.matmul_push_rhs(y, staging_register=3, mxu_index=0)
            o_ref[...] = jnp.zeros_like(o_ref)
        elif misuse == "left_in_fifo":
            pltpu.matmul_push_rhs(y, staging_register=0, mxu_index=0)
            pltpu.matmul_lhs_fifo(x, mxu_index=0, load_staged_rhs=0)
            pltpu.matmul_lhs_fifo(x, mxu_index=0)
            _pop(o_ref)
        elif misuse == "pop_wrong_dtype":
            pltpu.matmul_push_rhs(y, staging_register=0, mxu_index=0)
            pltpu.matmul_lhs_fifo(x, mxu_index=0, load_staged_rhs=0)
            o_ref[...] = pltpu.matmul_pop_fifo((8, 256), jnp.int32, mxu_index=0).astype(jnp.float32)
    mxu = 0
    with pytest.raises(UndefinedBehaviorError, match=MXU_MSG.format("kernel", "", mxu) + message):
        _fifo_call(body)()


@needs_acc
def test_mxu_accumulator_left_unpopped_raises_at_kernel_end():
    x = RNG.standard_normal((8, 256)).astype(ml_dtypes.bfloat16)

    def kernel(x_ref, o_ref, acc):
        pltpu.matmul_push_rhs(x_ref[...].T @ x_ref[...], staging_register=0, mxu_index=1)
        pltpu.matmul_acc_lhs(acc, x_ref[...], load_staged_rhs=0)
        o_ref[...] = jnp.zeros_like(o_ref)

    with _tpu7():
        f = pl.pallas_call(kernel, grid=(2,), out_shape=jax.ShapeDtypeStruct((8, 256), jnp.float32),
                           in_specs=[pl.BlockSpec((8, 256), lambda i: (0, 0))],
                           out_specs=pl.BlockSpec((8, 256), lambda i: (0, 0)),
                           scratch_shapes=[pltpu.ACC(1)((8, 256), jnp.float32)])
        jaxpr = jax.make_jaxpr(f)(x)
    with pytest.raises(UndefinedBehaviorError, match=MXU_MSG.format("kernel", "1,", 1) +
                       "the kernel ends with data in an accumulator"):
        interp.eval_jaxpr(jaxpr, x)


@pytest.mark.skipif(not (hasattr(pltpu, "matmul_acc_lhs") and "acc_addr" in
                         inspect.signature(pltpu.matmul_acc_lhs).parameters),
                    reason="accumulators named by address are JAX 0.10.2's form")
def test_mxu_accumulators_by_address_jax_0_10():
    x = RNG.integers(-100, 100, (8, 256)).astype(np.int8)
    y = RNG.integers(-100, 100, (256, 256)).astype(np.int8)

    def kernel(x_ref, y_ref, o_ref, p_ref):
        pltpu.matmul_push_rhs(y_ref[...], 0, 0)
        pltpu.matmul_acc_lhs(0, x_ref[...], 0, load_staged_rhs=0)
        pltpu.matmul_acc_lhs(0, x_ref[...], 0)
        o_ref[...] = pltpu.matmul_pop(0, (8, 256), jnp.int32, 0)
        p_ref[...] = pltpu.matmul_pop(0, (8, 256), jnp.int32, 0)   # zeroed by the first pop

    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8, 256), jnp.int32)] * 2)
    got, again = interp.interpret(f)(x, y)
    np.testing.assert_array_equal(got, 2 * (x.astype(np.int64) @ y.astype(np.int64)))
    np.testing.assert_array_equal(again, np.zeros((8, 256), np.int32))


# -- conv ---------------------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(pltpu, "conv"), reason="pltpu.conv is JAX >= 0.11")
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_conv_is_conv_general_dilated_of_the_reversed_window_plus_acc(dtype):
    # Small integers (exact in float32 in any summation order), so XLA:CPU's plain
    # conv_general_dilated on the flipped kernel, plus acc, is bit-exact.
    out = np.int32 if dtype == np.int8 else np.float32
    x = RNG.integers(-8, 8, (2, 7, 9, 4)).astype(dtype)
    w = RNG.integers(-8, 8, (3, 2, 2, 6)).astype(dtype)   # HWIO, two feature groups
    acc = RNG.integers(-50, 50, (2, 4, 7, 6)).astype(out)
    dn = ("NHWC", "HWIO", "NHWC")
    kw = dict(window_strides=(2, 1), padding=((1, 1), (0, 0)), rhs_dilation=(1, 2),
              feature_group_count=2)

    def kernel(x_ref, w_ref, a_ref, o_ref):
        o_ref[...] = pltpu.conv(x_ref[...], w_ref[...], a_ref[...], dimension_numbers=dn,
                                window_reversal=(True, False), preferred_element_type=out, **kw)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(acc.shape, out))

    def plain(x, w, acc):
        return jax.lax.conv_general_dilated(
            x, w[::-1], kw["window_strides"], kw["padding"], rhs_dilation=kw["rhs_dilation"],
            dimension_numbers=dn, feature_group_count=2, preferred_element_type=out) + acc
    np.testing.assert_array_equal(interp.interpret(f)(x, w, acc), xla_cpu(plain, x, w, acc))


@pytest.mark.skipif(not hasattr(pltpu, "conv"), reason="pltpu.conv is JAX >= 0.11")
def test_conv_refuses_what_mosaic_refuses():
    x, w = np.ones((1, 4, 4, 2), np.uint8), np.ones((2, 2, 2, 2), np.uint8)

    def kernel(x_ref, w_ref, o_ref):
        o_ref[...] = pltpu.conv(x_ref[...], w_ref[...], dimension_numbers=(
            "NHWC", "HWIO", "NHWC"), preferred_element_type=jnp.int32)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, 3, 3, 2), jnp.int32))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="unsigned"):
        interp.interpret(f)(x, w)


# -- pack / unpack elementwise: the partials completed ------------------------------------------

@pytest.mark.skipif(not hasattr(pltpu, "pack_elementwise"), reason="not in this JAX")
def test_pack_elementwise_f32_to_bf16_rounds_as_xla_convert_in_every_case():
    # Ties (low half 0x8000) with even and odd kept halves, one below / above, overflow to inf,
    # subnormals, signed zeros, infinities, NaN: the bits XLA:CPU's convert gives (JAX's own TPU
    # test requires x.astype(bfloat16)'s bits).
    from conformance.cases.pallas_tpu import _claimed_pack_bf16, _rounding_cases
    a, b = _rounding_cases(RNG, (64, 128)), _rounding_cases(RNG, (64, 128))
    a[0, :6] = [1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1e-40, -0.0, np.inf, 3.3961e38]

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = pltpu.pack_elementwise([a_ref[...], b_ref[...]], packed_dtype=jnp.bfloat16)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(a.shape, jnp.uint32))
    got = interp.interpret(f)(a, b)
    want = xla_cpu(_claimed_pack_bf16, a, b)
    for half in (0, 16):   # NaN payloads aside, bit for bit
        g, w = (got >> half) & 0xFFFF, (want >> half) & 0xFFFF
        nan = ((w & 0x7F80) == 0x7F80) & ((w & 0x7F) != 0)
        np.testing.assert_array_equal(((g & 0x7F80) == 0x7F80) & ((g & 0x7F) != 0), nan)
        np.testing.assert_array_equal(g[~nan], w[~nan])
    assert got[0, 0] & 0xFFFF == 0x3F80 and got[0, 1] & 0xFFFF == 0x3F82   # ties to even


@pytest.mark.skipif(not hasattr(pltpu, "unpack_elementwise"), reason="not in this JAX")
@pytest.mark.parametrize("packed,unpacked", [(jnp.uint4, jnp.uint8), (jnp.uint8, jnp.uint32),
                                             (jnp.uint16, jnp.uint32), (jnp.int8, jnp.uint16),
                                             (jnp.uint8, jnp.float32)])
def test_unpack_elementwise_sign_extends_unsigned_fields(packed, unpacked):
    # Mosaic sees signless integers: an unsigned field unpacks as the signed field of its width
    # does (sign-extended, then wrapped / converted); computed with NumPy views and shifts.
    pbits = 4 if packed == jnp.uint4 else np.dtype(packed).itemsize * 8
    ubits = np.dtype(unpacked).itemsize * 8
    factor = ubits // pbits
    words = RNG.integers(0, 2 ** 32, (8, 128), dtype=np.uint64).astype(np.uint64)
    storage = np.dtype(f"uint{ubits}")
    x = (words & ((1 << ubits) - 1)).astype(storage).view(np.dtype(f"int{ubits}") if
                                                          unpacked == jnp.float32 else unpacked) \
        if unpacked != jnp.float32 else (words & 0xFFFFFFFF).astype(np.uint32).view(np.float32)

    def kernel(x_ref, *o_refs):
        for i, o in enumerate(o_refs):
            o[...] = pltpu.unpack_elementwise(x_ref[...], index=i, packed_dtype=packed,
                                              unpacked_dtype=unpacked)
    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8, 128), unpacked)] * factor)
    outs = interp.interpret(f)(x)
    raw = np.ascontiguousarray(x).view(storage).astype(np.int64)
    for i, got in enumerate(outs):
        field = (raw >> (i * pbits)) & ((1 << pbits) - 1)
        signed = np.where(field >= 1 << (pbits - 1), field - (1 << pbits), field)
        want = signed.astype(np.float32) if unpacked == jnp.float32 else \
            (signed & ((1 << ubits) - 1)).astype(storage).view(unpacked)
        np.testing.assert_array_equal(got, want)


# -- conformance cases and coverage ---------------------------------------------------------------

def _tpu_pallas_primitives():
    from interp.coverage import all_primitives
    return {p for p, mods in all_primitives().items()
            if any(m.startswith(("jax._src.pallas.mosaic.", "jax._src.tpu_custom_call")) for m in mods)
            and not any(m.startswith("jax._src.lax") for m in mods)}


def test_every_tpu_pallas_primitive_is_supported_or_refused_with_a_reason():
    from spec import pallas as spec_pallas
    from spec import pallas_tpu as spec_tpu
    reasons = {**spec_pallas.UNSUPPORTED, **spec_tpu.UNSUPPORTED}
    cov = interp.coverage()
    for p in sorted(_tpu_pallas_primitives()):
        if cov[p] == "unsupported":
            assert any(p in key.replace("/", " ").split() for key in reasons), \
                f"{p} is unsupported with no reason in spec/pallas*.py UNSUPPORTED"


def test_pallas_tpu_cases_name_their_primitives_and_run_on_the_reference():
    from conformance.cases.pallas_tpu import cases
    from conformance.cli import case_primitives
    from conformance.execute import run_case
    for case in cases():
        if "/claims/" in case.id or case.not_applicable:   # (not applicable: tests/test_versions.py)
            continue
        seen = case_primitives(case)
        assert set(case.primitives) <= seen, (case.id, set(case.primitives) - seen)
        if case.id.endswith(("/8x128", "/f32", "16x256x256", "32x256x256", "16x128")):
            assert run_case(case, "reference").outcome == "pass", case.id


def test_interpret_modes_record_the_new_primitives_as_backend_unsupported():
    # JAX defines no evaluation for them: both interpret modes say so (JAX's message), and the
    # ACC gate's evidence (the TPU interpret mode's KeyError) still holds.
    from conformance.cases.pallas_tpu import cases
    from conformance.execute import run_case
    picked = [c for c in cases() if c.id.startswith(("pallas_tpu/stochastic_round/bfloat16/8x128",
                                                     "pallas_tpu/conv/1d", "pallas_tpu/mxu_acc_two"))
              and not c.not_applicable]   # (not applicable: tests/test_versions.py)
    for case in picked[:3]:
        for runner in ("pallas:interpret", "pallas:tpu-interpret"):
            rec = run_case(case, runner, first_divergence=False)
            assert rec.outcome == "backend-unsupported", (case.id, runner, rec.outcome,
                                                             rec.detail)
        for mode, gate in getattr(case.build, "gates", {}).items():
            with pytest.raises(Exception) as err:
                with case.context():
                    jax.block_until_ready(jax.jit(case.build.ungated(pltpu.InterpretParams()))(
                        *case.make_inputs(0)))
            assert any(type(err.value).__name__ == t and m in str(err.value)
                       for t, m in gate.errors), str(err.value)[:300]


def test_emit_pipeline_over_a_core_axis_matches_tpu_interpret_mode():
    # pltpu.emit_pipeline(core_axis=0): 5 pipeline steps split over 2 cores of the enclosing
    # kernel's core_parallel axis (the remainder to the first core). The reference and JAX's TPU
    # interpret mode agree bit for bit, and both compute 2 x + 100 * step.
    from conformance.cases.pallas_tpu import pipeline_cases
    from conformance.execute import run_case
    cases = {c.id: c for c in pipeline_cases() if not c.not_applicable}
    if not cases:
        pytest.skip("emit_pipeline is a primitive the reference expands from JAX 0.11 on")
    case = cases["pallas_tpu/emit_pipeline_core_axis/i32/5_steps_2_cores"]
    (x,) = case.make_inputs(0)
    with case.context():
        got = interp.interpret(case.reference_program())(x)
    steps = np.repeat(np.arange(5, dtype=np.int32) * 100, 8)[:, None]
    np.testing.assert_array_equal(got, x * 2 + steps)
    rec = run_case(case, "pallas:tpu-interpret", first_divergence=False)
    from conformance.cases.pallas import PIPELINE_PRIMITIVE_TPU_INTERPRET as gate
    if gate.applies():   # JAX 0.10.2: its TPU interpret mode cannot run the primitive
        assert rec.outcome == "backend-unsupported", (rec.outcome, rec.detail)
        return
    assert rec.outcome == "pass", (rec.outcome, rec.detail)


def _mosaic_text(kernel, out, *args) -> list[str]:
    """The tpu-dialect operations Mosaic's lowering emits for a kernel (pallas_call debug=True
    prints the module), lowered for TPU on this CPU-only machine."""
    import contextlib
    import io
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), out), debug=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        jax.jit(f).trace(*[jax.ShapeDtypeStruct((8, 128), a) for a in args]).lower(
            lowering_platforms=("tpu",))
    ops = [line.split("=", 1)[-1].strip() for line in buf.getvalue().splitlines()]
    return [op for op in ops if op.startswith("tpu.") and not op.startswith("tpu.vector_store")]


@pytest.mark.skipif(not hasattr(pltpu, "unpack_elementwise"), reason="not in this JAX")
def test_mosaic_lowering_text_defines_pack_rounding_and_unsigned_unpacking():
    # f32 -> bf16 packing is one tpu.pack_elementwise with target_type bf16: no separate rounding
    # op, so the rounding is the op's own (what JAX's TPU test requires: x.astype(bfloat16)).
    def pack(a, b, o):
        o[...] = pltpu.pack_elementwise([a[...], b[...]], packed_dtype=jnp.bfloat16)
    (op,) = _mosaic_text(pack, jnp.uint32, jnp.float32, jnp.float32)
    assert op.startswith("tpu.pack_elementwise") and "{target_type = bf16}" in op, op

    # uint4 fields of uint8 lower to exactly the op of int4 fields of int8 (Mosaic's types are
    # signless): the documented sign extension applies to unsigned fields too.
    def unpack(packed, unpacked):
        def kernel(x, o):
            o[...] = pltpu.unpack_elementwise(x[...], index=1, packed_dtype=packed,
                                              unpacked_dtype=unpacked)
        return _mosaic_text(kernel, unpacked, unpacked)
    unsigned, signed = unpack(jnp.uint4, jnp.uint8), unpack(jnp.int4, jnp.int8)
    assert unsigned == signed and "{source_type = i4}" in unsigned[0], (unsigned, signed)


@needs_acc
def test_reading_an_accumulator_other_than_by_matmul_pop_raises():
    # Mosaic refuses the program ("Loading from an accumulator is not supported. Use
    # matmul_pop"); the reference's accumulator buffer is never-written memory in every mode.
    x = RNG.standard_normal((8, 256)).astype(ml_dtypes.bfloat16)

    def kernel(x_ref, o_ref, acc):
        pltpu.matmul_push_rhs(jnp.ones((256, 256), jnp.bfloat16), staging_register=0, mxu_index=0)
        pltpu.matmul_acc_lhs(acc, x_ref[...], load_staged_rhs=0)
        o_ref[...] = acc[...]
        o_ref[...] = pltpu.matmul_pop(acc)

    with _tpu7():
        f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 256), jnp.float32),
                           scratch_shapes=[pltpu.ACC(0)((8, 256), jnp.float32)])
        jaxpr = jax.make_jaxpr(f)(x)
    with pytest.raises(UninitializedReadError, match=r"MXU accumulator acc\(mxu_id=0\)"):
        interp.eval_jaxpr(jaxpr, x)


def _signal_into_a_scoped_semaphore(first, interpret=None):
    """Core ``first`` of two signals (core_index) the other core's copy of a run_scoped semaphore,
    which the other core waits on before copying (JAX's test_allocate_shared_buffer_in_core_map,
    with the buffer in VMEM)."""
    second = 1 - first
    mesh = _tensorcore_mesh(2)

    def f(x):
        def inner(refs):
            x_ref, y_ref = refs

            @pl.core_map(mesh, **({} if interpret is None else {"interpret": interpret}))
            def _():
                def body(sem):
                    @pl.when(jax.lax.axis_index("core") == second)
                    def _():
                        pl.semaphore_wait(sem, 1)

                    def copy(x_vmem):
                        pltpu.sync_copy(x_ref, x_vmem)
                        pltpu.sync_copy(x_vmem, y_ref)
                    pl.run_scoped(copy, pltpu.VMEM(x_ref.shape, x_ref.dtype))

                    @pl.when(jax.lax.axis_index("core") == first)
                    def _():
                        pl.semaphore_signal(sem, 1, core_index=second)
                pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)
        _, y = pl.run_state(inner)((x, jnp.zeros_like(x)))
        return y
    return f


@pytest.mark.parametrize("first", [0, 1])
@pytest.mark.parametrize("order", ["sequential", "shuffled"])
def test_semaphore_signal_c3_into_another_cores_run_scoped_semaphore(first, order):
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret
    x = jnp.arange(16 * 128, dtype=jnp.int32).reshape((16, 128))
    # JAX's TPU interpret mode: race-free, y == x
    y = jax.jit(_signal_into_a_scoped_semaphore(
        first, pltpu.InterpretParams(detect_races=True)))(x)
    np.testing.assert_array_equal(y, x)
    assert not tpu_interpret.races.races_found
    y = interp.interpret(_signal_into_a_scoped_semaphore(first), detect_races=True,
                         grid_order=order, seed=1)(x)
    np.testing.assert_array_equal(y, x)


def _two_cores_copy(x, how, interpret=None):
    """Both cores of a TPU core mesh copy rows of ``x`` into the one output block through VMEM:
    "race" unordered, "ordered" core 1 after core 0's signal, "disjoint" each into its own rows."""
    mesh = _tensorcore_mesh(2)
    rows = 8 if how == "disjoint" else 0

    @pl.kernel(out_type=jax.ShapeDtypeStruct((8 + rows, 128), x.dtype), mesh=mesh,
               scratch_types=[pltpu.VMEM((8, 128), x.dtype), pltpu.SemaphoreType.REGULAR],
               **({} if interpret is None else {"interpret": interpret}))
    def k(x_hbm, o_hbm, buf, sem):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], buf)

        @pl.when(c == 0)
        def _():
            pltpu.sync_copy(buf, o_hbm.at[pl.ds(0, 8)])
            pl.semaphore_signal(sem, 1, core_index=1)

        @pl.when(c == 1)
        def _():
            if how == "ordered":
                pl.semaphore_wait(sem, 1)
            pltpu.sync_copy(buf, o_hbm.at[pl.ds(rows, 8)])
            if how != "ordered":
                pl.semaphore_wait(sem, 1)
    return k(x)


@pytest.mark.parametrize("how", ["race", "ordered", "disjoint"])
def test_mpmd_map_c7_core_races_found_as_jax_finds_them(how):
    """DMAs of two cores into one HBM block, unordered, ordered by a semaphore, or disjoint: the
    reference reports a race exactly where JAX's TPU interpret mode's vector clocks do, naming
    both cores' DMAs; the values are JAX's."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as jax_interp
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    params = {"on_race": "warn"} if "on_race" in {f.name for f in dataclasses.fields(
        pltpu.InterpretParams)} else {}
    pltpu.reset_tpu_interpret_mode_state()
    want = jax.jit(functools.partial(_two_cores_copy, how=how, interpret=pltpu.InterpretParams(
        detect_races=True, **params)))(x)
    jax_found = bool(jax_interp.races.races_found)
    pltpu.reset_tpu_interpret_mode_state()
    assert jax_found == (how == "race")
    f = functools.partial(_two_cores_copy, how=how)
    if how == "race":
        with pytest.raises(RaceError, match=r"core \{'core': 1\}: DMA write of .*o_hbm.* core "
                                            r"\{'core': 0\}'s DMA write"):
            interp.interpret(f, detect_races=True)(x)
        interp.interpret(f)(x)       # (no detection: it runs; which write lands is undefined)
    else:
        np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(x), want)


def _through_scoped_hbm(cores, **params):
    """A core-mesh kernel whose cores copy x into a run_scoped HBM buffer and out again (JAX's
    test_hbm_allocation_in_run_scoped_raises, test_allocate_shared_buffer_in_core_map_with_race)."""
    mesh = _tensorcore_mesh(cores)

    def f(x):
        def inner(refs):
            x_ref, z_ref = refs

            @pl.core_map(mesh, interpret=pltpu.InterpretParams(**params))
            def _():
                def body(hbm):
                    pltpu.sync_copy(x_ref, hbm)
                    pltpu.sync_copy(hbm, z_ref)
                pl.run_scoped(body, pltpu.HBM(x_ref.shape, x_ref.dtype))
        return pl.run_state(inner)((x, jnp.zeros_like(x)))[1]
    return f


def test_pallas_call_c19_hbm_in_run_scoped_is_refused_unless_jax_allows_it():
    """run_scoped allocating HBM in a TPU kernel: refused as JAX's TPU interpret mode refuses it
    (a real TPU does not support it), run when the kernel's InterpretParams allow it."""
    x = jnp.arange(8, dtype=jnp.int32)
    refused = jax.jit(_through_scoped_hbm(1, allow_hbm_allocation_in_run_scoped=False))
    with pytest.raises(ValueError, match="Cannot allocate HBM in `run_scoped`"):
        refused(x)
    with pytest.raises(interp.InvalidKernelError, match="Cannot allocate HBM in `run_scoped`"):
        with interp.pallas_mode():
            refused(x)
    with interp.pallas_mode():
        np.testing.assert_array_equal(
            jax.jit(_through_scoped_hbm(1, allow_hbm_allocation_in_run_scoped=True))(x), x)


def test_mpmd_map_c7_hbm_run_scoped_buffer_is_shared_by_the_cores_as_in_jax():
    """JAX's interpreter extension allow_hbm_allocation_in_run_scoped: the HBM buffer is the
    device's, shared by the cores (JAX's test_allocate_shared_buffer_in_core_map_with_race): two
    cores copying through it unordered race, in JAX's TPU interpret mode and in the reference."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as jax_interp
    params = {"on_race": "warn"} if "on_race" in {f.name for f in dataclasses.fields(
        pltpu.InterpretParams)} else {}
    f = _through_scoped_hbm(2, detect_races=True, allow_hbm_allocation_in_run_scoped=True, **params)
    x = jnp.arange(16 * 128, dtype=jnp.int32).reshape(16, 128)
    pltpu.reset_tpu_interpret_mode_state()
    np.testing.assert_array_equal(jax.jit(f)(x), x)
    assert jax_interp.races.races_found
    pltpu.reset_tpu_interpret_mode_state()
    with pytest.raises(RaceError, match=r"DMA write of scratch \(hbm\) buffer 'run_scoped "
                                        r"allocation 0'.* core \{'core': 0\}'s DMA write"):
        interp.interpret(f, detect_races=True)(x)
