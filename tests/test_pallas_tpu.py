"""TPU kernel features in the reference: DMAs, semaphores, run_scoped, core meshes, masked
loads/stores, roll, bitcast; and undefined behaviour made loud (races, out-of-bounds accesses,
uninitialized reads), each message naming kernel, buffer, grid point and index."""
from __future__ import annotations


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


def test_key_made_in_a_kernel_and_pallas_key_errors():
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

    def call(body):
        def kernel(key_ref, o_ref):
            o_ref[...] = body(key_ref[...])
        return pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              out_shape=jax.ShapeDtypeStruct((8, 128), jnp.uint32))

    key = pltpu.to_pallas_key(jax.random.key(0))
    for body, match in [(lambda k: jax.random.bits(jax.random.split(k)[0], (8, 128), jnp.uint32),
                         "no split of Pallas TPU keys"),
                        (lambda k: jax.random.bits(k, (8, 128), jnp.uint8).astype(jnp.uint32),
                         "bit_width 8")]:
        with pytest.raises(interp.UnsupportedPrimitiveError, match=match):
            interp.interpret(call(body))(key)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="outside a Pallas kernel"):
        interp.interpret(lambda k: jax.random.key_data(jax.random.fold_in(k, 1)))(key)


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
                   scratch_types=[pltpu.VMEM(keys.shape, keys.dtype)])
        def k(k_hbm, o_hbm, ks):
            o_hbm[...] = jax.random.bits(ks[0], (8, 128), jnp.uint32)
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
