"""Races between a Mosaic GPU kernel's threads and its TMA unit that JAX's own Mosaic GPU
interpret mode detects (``InterpretGPUParams(detect_races=True)``; the kernels follow JAX's
tests/pallas/gpu_pallas_interpret_race_detection_test.py): each kernel is run by JAX's detector,
which must flag it, and by the reference, which must raise a RaceError naming both accesses; the
race-free variant passes both. GMEM shared by the clusters of a launch (section (d): JAX's
detector flags some of those races, the reference all). And the barrier phases of a warp_map's
warps (JAX's gpu_pallas_interpret_test.py), which order those accesses.
"""
from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import interp

try:
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as mosaic_interpret
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams
    from interp.pallas.mosaic_gpu import AsyncAccessError, TmaRaceError
except ImportError as e:   # JAX 0.10.2's Mosaic GPU imports absl-py (mosaic/gpu/layout_inference)
    plgpu = None
    _WHY = f"jax.experimental.pallas.mosaic_gpu does not import here: {e}"

pytestmark = pytest.mark.skipif(plgpu is None, reason=_WHY if plgpu is None else "")

try:   # JAX 0.11+: the GPU interpret mode JAX's tests of these kernels come from (its race
    # detector, barrier phases per warp)
    import jax._src.pallas.mosaic_gpu.interpret.race_detection_state  # noqa: F401
    JAX_CHECKS = True
except ImportError:   # JAX 0.10.2's GPU interpret mode checks none of these: only the reference's
    JAX_CHECKS = False   # side is checked there

I32 = jnp.int32


def _assert_jax_flags(racy: bool, make, *args) -> None:
    """JAX's Mosaic GPU interpret mode (its race detector, on_race="warn" where JAX has it)
    flags the kernel ``make`` builds with its ``interpret=`` parameters exactly when ``racy``."""
    if JAX_CHECKS:
        assert _jax_flags_race(make, *args) is racy


def _jax_flags_race(make, *args) -> bool:
    mosaic_interpret.reset_gpu_interpret_mode_state()
    jax.block_until_ready(make(_gpu_params(on_race="warn"))(*args))
    return bool(mosaic_interpret.get_races().races_found)


def _has_on_race() -> bool:
    """Whether JAX's GPU interpret mode has on_race (JAX 0.12; before, its detector records)."""
    return "on_race" in {f.name for f in dataclasses.fields(InterpretGPUParams)}


def _gpu_params(**on_race):
    """JAX's GPU interpret parameters with race detection; ``on_race`` only where JAX has it."""
    return InterpretGPUParams(detect_races=True, **(on_race if _has_on_race() else {}))


def _reference(make, *args):
    return interp.interpret(make(None))(*args)


def _check(racy: bool, make, *args, error, match, want=None) -> None:
    """JAX's detector flags the kernel exactly when ``racy``; the reference then raises
    ``error`` matching ``match`` (naming both accesses), else returns ``want``."""
    _assert_jax_flags(racy, make, *args)
    if racy:
        with pytest.raises(error, match=match):
            _reference(make, *args)
    else:
        np.testing.assert_array_equal(_reference(make, *args), want)


def _interpret_kw(params):
    return {} if params is None else {"interpret": params}


# -- (a) the async proxy: a plain SMEM write reaches a TMA operation only through commit_smem --

def _store_of_smem_written_plainly(fence: bool):
    """A plain write of SMEM, then a TMA store of it (test_finds_races_in_single_thread_smem_to_
    gmem_copy)."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(gmem=plgpu.GMEM((), I32), smem=plgpu.SMEM((), I32)),
                           **_interpret_kw(params))
        def kernel(out_ref, gmem, smem):
            smem[...] = 42
            if fence:
                plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(smem, gmem)
            plgpu.wait_smem_to_gmem(0)
            out_ref[...] = gmem[...]
        return kernel
    return make


def _copy_over_smem_written_plainly(fence: bool):
    """A plain write of SMEM, then a TMA copy into it (test_finds_races_in_single_thread_later_
    gmem_to_smem_copy): the two writes race unless the fence orders the plain one first."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(smem=plgpu.SMEM((), I32),
                                              barrier=plgpu.Barrier(num_arrivals=1)),
                           **_interpret_kw(params))
        def kernel(in_ref, out_ref, smem, barrier):
            smem[...] = 100
            if fence:
                plgpu.commit_smem()
            plgpu.copy_gmem_to_smem(in_ref, smem, barrier)
            plgpu.barrier_wait(barrier)
            out_ref[...] = smem[...]
        return kernel
    return make


def _cross_thread_copy(fence_by_writer: bool, fence_by_copier: bool):
    """Thread 0 writes SMEM plainly and arrives; thread 1 observes that and TMA-copies into it
    (test_finds_races_in_cross_thread_gmem_to_smem_copy): a fence by either thread, between the
    write and the copy, orders them."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(smem=plgpu.SMEM((), I32),
                                              thread_barrier=plgpu.Barrier(num_arrivals=1),
                                              copy_barrier=plgpu.Barrier(num_arrivals=1)),
                           num_threads=2, thread_name="t", **_interpret_kw(params))
        def kernel(in_ref, out_ref, smem, thread_barrier, copy_barrier):
            @pl.when(jax.lax.axis_index("t") == 0)
            def _():
                smem[...] = 100
                if fence_by_writer:
                    plgpu.commit_smem()
                plgpu.barrier_arrive(thread_barrier)

            @pl.when(jax.lax.axis_index("t") == 1)
            def _():
                plgpu.barrier_wait(thread_barrier)
                if fence_by_copier:
                    plgpu.commit_smem()
                plgpu.copy_gmem_to_smem(in_ref, smem, copy_barrier)
                plgpu.barrier_wait(copy_barrier)
                out_ref[...] = smem[...]
        return kernel
    return make


@pytest.mark.parametrize("fence", [False, True])
def test_commit_smem_c1_tma_store_of_smem_written_with_no_commit_smem_races(fence):
    _check(not fence, _store_of_smem_written_plainly(fence), error=TmaRaceError,
           match=r"TMA store \(copy_smem_to_gmem\) accesses .*wrote with a plain store .*no "
                 r"commit_smem", want=42)


@pytest.mark.parametrize("fence", [False, True])
def test_commit_smem_c1_tma_copy_over_smem_written_with_no_commit_smem_races(fence):
    _check(not fence, _copy_over_smem_written_plainly(fence), np.int32(42), error=TmaRaceError,
           match=r"TMA copy \(copy_gmem_to_smem\) accesses .*wrote with a plain store .*no "
                 r"commit_smem", want=42)


@pytest.mark.parametrize("by_writer,by_copier", [(False, False), (True, False), (False, True)])
def test_commit_smem_c1_a_fence_of_either_thread_orders_a_plain_write_before_a_copy(
        by_writer, by_copier):
    # both accesses named: the copy (thread 1) and the plain write (thread 0)
    _check(not (by_writer or by_copier), _cross_thread_copy(by_writer, by_copier), np.int32(42),
           error=TmaRaceError,
           match=r"warpgroup 1: TMA copy .* which kernel .*warpgroup 0 wrote with a plain store",
           want=42)


def _write_of_a_copys_source(wait: bool):
    """A TMA copy from GMEM, then a plain write of that GMEM, with or without observing the
    copy's barrier first (test_async_gmem_ops_not_visible_unless_synchronized)."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(smem=plgpu.SMEM((), I32),
                                              barrier=plgpu.Barrier(num_arrivals=1)),
                           **_interpret_kw(params))
        def kernel(out_ref, smem, barrier):
            plgpu.copy_gmem_to_smem(out_ref, smem, barrier)
            if wait:
                plgpu.barrier_wait(barrier)
            plgpu.commit_smem()
            out_ref[...] = 42
            if not wait:
                plgpu.barrier_wait(barrier)
        return kernel
    return make


@pytest.mark.parametrize("wait", [False, True])
def test_copy_gmem_to_smem_c5_a_write_of_gmem_a_tma_copy_still_reads_races(wait):
    make = _write_of_a_copys_source(wait)
    _assert_jax_flags(not wait, make)
    if wait:
        assert int(interp.interpret(make(None), uninitialized="zero")()) == 42
    else:
        with pytest.raises(TmaRaceError, match=r"copy_gmem_to_smem/c5: .*(read|write) of "
                                               r"output \(gmem\) .* while a TMA copy "
                                               r"\(copy_gmem_to_smem\) may still read it"):
            interp.interpret(make(None), uninitialized="zero")()


# -- (b) the GMEM side of TMA stores -----------------------------------------------------------

def _gmem_under_store(wait_read_only: bool, location: str):
    """Two TMA stores, a wait retiring the first (its SMEM read only, or all of it), then a write
    to ``location`` (test_finds_races_when_smem_to_gmem_copy_waits_read_only): the second store
    still reads smem[1] and writes out[1]; the first still writes out[0] after a read-only
    wait."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((2,), I32),
                           scratch_types=dict(smem=plgpu.SMEM((2,), I32)),
                           **_interpret_kw(params))
        def kernel(in_ref, out_ref, smem):
            smem[...] = in_ref[...]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(smem.at[0], out_ref.at[0])
            plgpu.copy_smem_to_gmem(smem.at[1], out_ref.at[1])
            plgpu.wait_smem_to_gmem(1, wait_read_only=wait_read_only)
            {"smem0": smem.at[0], "out0": out_ref.at[0], "out1": out_ref.at[1]}[location][...] = 3
            plgpu.wait_smem_to_gmem(0)
        return kernel
    return make


@pytest.mark.parametrize("location,racy", [("smem0", False), ("out0", False), ("out1", True)])
def test_copy_smem_to_gmem_c1_gmem_a_tma_store_still_writes_races(location, racy):
    _check(racy, _gmem_under_store(False, location), np.array([1, 2], np.int32),
           error=TmaRaceError, match=r"(read|write) of output \(gmem\) .* while a TMA store of "
                                     r"this warpgroup may still write it",
           want=[3 if location == "out0" else 1, 2])


def test_copy_smem_to_gmem_c1_a_read_only_wait_leaves_the_gmem_write_in_flight():
    # JAX's detector does not check this one yet (its test skips it: "Not supported until
    # gmem_commit clock is implemented"); cp.async.bulk.wait_group.read only waits for the
    # source reads (PTX ISA 9.7.9.25.x), so the write of out[0] races with the store's.
    make = _gmem_under_store(True, "out0")
    with pytest.raises(TmaRaceError, match=r"while a TMA store of this warpgroup may still write"):
        _reference(make, np.array([1, 2], np.int32))
    # the SMEM source is retired by the read-only wait
    out = _reference(_gmem_under_store(True, "smem0"), np.array([1, 2], np.int32))
    np.testing.assert_array_equal(out, [1, 2])


def _wait_of_another_thread(write_smem: bool):
    """Thread 0 issues a TMA store; thread 1, after a barrier, waits for its own (none) and writes
    the store's source or destination (test_wait_smem_to_gmem_isolated_per_thread)."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(smem=plgpu.SMEM((), I32),
                                              barrier=plgpu.Barrier(num_arrivals=1),
                                              cleanup=plgpu.Barrier(num_arrivals=1)),
                           num_threads=2, thread_name="t", **_interpret_kw(params))
        def kernel(out_ref, smem, barrier, cleanup):
            @pl.when(jax.lax.axis_index("t") == 0)
            def _():
                plgpu.copy_smem_to_gmem(smem, out_ref)
                plgpu.barrier_arrive(barrier)
                plgpu.barrier_wait(cleanup)
                plgpu.wait_smem_to_gmem(0)

            @pl.when(jax.lax.axis_index("t") == 1)
            def _():
                plgpu.barrier_wait(barrier)
                plgpu.wait_smem_to_gmem(0)
                if write_smem:
                    smem[...] = 43
                else:
                    out_ref[...] = 43
                plgpu.barrier_arrive(cleanup)
        return kernel
    return make


@pytest.mark.parametrize("write_smem", [False, True])
def test_copy_smem_to_gmem_c2_a_threads_wait_does_not_retire_another_threads_store(write_smem):
    make = _wait_of_another_thread(write_smem)
    _assert_jax_flags(True, make)
    what = "still reads it" if write_smem else "may still write it"
    with pytest.raises(TmaRaceError, match=r"warpgroup 1: (read|write) of .* while a TMA store of "
                                           rf"kernel .*warpgroup 0 {what}"):
        interp.interpret(make(None), uninitialized="zero")()


def test_copy_smem_to_gmem_c1_two_tma_stores_in_flight_to_one_gmem_location_race():
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=dict(smem=plgpu.SMEM((2,), I32),
                                              gmem=plgpu.GMEM((2,), I32)),
                           **_interpret_kw(params))
        def kernel(out_ref, smem, gmem):
            smem[...] = jnp.zeros((2,), I32)
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(smem, gmem)
            plgpu.copy_smem_to_gmem(smem, gmem)
            plgpu.wait_smem_to_gmem(0)
            out_ref[...] = gmem[0]
        return kernel
    _assert_jax_flags(True, make)
    with pytest.raises(TmaRaceError, match=r"TMA store \(copy_smem_to_gmem\) of .* while a TMA "
                                           r"store of this warpgroup may still write it"):
        _reference(make)


# -- (c) GMEM shared by the blocks of a cluster ----------------------------------------------------

def _cluster_gmem(how: str):
    """Both blocks of a cluster of 2 write the one output element (test_race_in_sync_copy_smem_
    to_gmem_in_cluster, test_race_in_async_copy_smem_to_gmem_in_cluster), or only read it, or
    write it in turn, ordered by a cluster barrier."""
    def make(params):
        scratch = dict(smem=plgpu.SMEM((), I32))
        if how == "ordered":
            scratch["barrier"] = plgpu.ClusterBarrier(collective_axes=("c0",), num_arrivals=1)

        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                           scratch_types=scratch, cluster=(2,), cluster_names=("c0",),
                           **_interpret_kw(params))
        def kernel(in_ref, out_ref, smem, barrier=None):
            block = jax.lax.axis_index("c0")
            if how == "plain":
                out_ref[...] = in_ref[...] + block
            elif how == "tma":
                smem[...] = in_ref[...] + block
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(smem, out_ref)
                plgpu.wait_smem_to_gmem(0)
            elif how == "read":
                smem[...] = in_ref[...]
            else:   # ordered: block 0 writes, both arrive and wait, then block 1 writes
                @pl.when(block == 0)
                def _():
                    out_ref[...] = in_ref[...]
                plgpu.barrier_arrive(barrier)
                plgpu.barrier_wait(barrier)

                @pl.when(block == 1)
                def _():
                    out_ref[...] = in_ref[...] + 1
        return kernel
    return make


@pytest.mark.parametrize("how", ["plain", "tma"])
def test_mosaic_gpu_blocks_of_a_cluster_writing_one_gmem_element_race(how):
    from interp.pallas.mosaic_gpu import WarpgroupRaceError
    make = _cluster_gmem(how)
    x = np.int32(42)
    _assert_jax_flags(True, make, x)
    with pytest.raises(WarpgroupRaceError, match=r"block \(1,\), warpgroup 0: (read|write) of "
                                                 r"output \(gmem\) .* which warpgroup 0 of block "
                                                 r"\(0,\) wrote with no barrier ordering"):
        _reference(make, x)


@pytest.mark.parametrize("how", ["read", "ordered"])
def test_mosaic_gpu_blocks_of_a_cluster_reading_or_ordered_do_not_race(how):
    make = _cluster_gmem(how)
    x = np.int32(42)
    _assert_jax_flags(False, make, x)
    out = interp.interpret(make(None), uninitialized="zero")(x)
    if how == "ordered":
        assert int(out) == 43


@pytest.mark.parametrize("rows_of_block_1,racy", [(slice(128, 256), False),
                                                    (slice(120, 248), True)])
def test_mosaic_gpu_blocks_writing_tiles_of_a_large_gmem_buffer(rows_of_block_1, racy):
    # A buffer past the footprints' mask limit (512 x 256 elements): tiles compared as boxes.
    from interp.pallas.mosaic_gpu import WarpgroupRaceError
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((512, 256), I32),
                           cluster=(2,), cluster_names=("c0",), **_interpret_kw(params))
        def kernel(out_ref):
            @pl.when(jax.lax.axis_index("c0") == 0)
            def _():
                out_ref[0:128, 0:64] = jnp.zeros((128, 64), I32)

            @pl.when(jax.lax.axis_index("c0") == 1)
            def _():
                out_ref[rows_of_block_1, 0:64] = jnp.ones((128, 64), I32)
        return kernel
    if racy:
        with pytest.raises(WarpgroupRaceError, match=r"block \(1,\), warpgroup 0: (read|write) "
                                                     r"of output \(gmem\)"):
            interp.interpret(make(None), uninitialized="zero")()
    else:
        out = interp.interpret(make(None), uninitialized="zero")()
        assert int(np.asarray(out)[128:256, 0:64].min()) == 1


def _cluster_barrier_over_two_axes(reader):
    """Each block of a 2x2 cluster writes its row of a GMEM scratch, all arrive and wait on a
    ClusterBarrier over both axes, then block (1, 1) reads the row of block ``reader``
    (test_cluster_barrier_differ_at_most_one_collective_axis)."""
    def make(params):
        def kernel(in_gmem, scratch, out_gmem, barrier):
            c0, c1 = jax.lax.axis_index("c0"), jax.lax.axis_index("c1")
            scratch[c0, c1, :] = in_gmem[c0, c1, :]
            plgpu.barrier_arrive(barrier)
            plgpu.barrier_wait(barrier)
            mine = (c0 == 1) & (c1 == 1)

            @pl.when(mine)
            def _():
                out_gmem[c0, c1, :] = scratch[reader[0], reader[1], :]

            @pl.when(~mine)
            def _():
                out_gmem[c0, c1, :] = scratch[c0, c1, :]
        return plgpu.kernel(
            kernel, out_type=jax.ShapeDtypeStruct((2, 2, 16), I32),
            scratch_types=dict(barrier=plgpu.ClusterBarrier(collective_axes=("c0", "c1"),
                                                            num_arrivals=1)),
            cluster=(2, 2), cluster_names=("c0", "c1"), **_interpret_kw(params))
    return make


def test_barrier_arrive_c1_a_cluster_barrier_over_no_axis_is_the_blocks_own():
    def make(params):
        def kernel(out_ref, barrier):
            plgpu.barrier_arrive(barrier)
            plgpu.barrier_wait(barrier)
            out_ref[jax.lax.axis_index("c0")] = jax.lax.axis_index("c0")
        return plgpu.kernel(
            kernel, out_type=jax.ShapeDtypeStruct((2,), I32),
            scratch_types=dict(barrier=plgpu.ClusterBarrier(collective_axes=(),
                                                            num_arrivals=1)),
            cluster=(2,), cluster_names=("c0",), **_interpret_kw(params))
    _assert_jax_flags(False, make)
    np.testing.assert_array_equal(_reference(make), [0, 1])


@pytest.mark.parametrize("reader,racy", [((0, 0), True), ((0, 1), False), ((1, 0), False)])
def test_barrier_arrive_c1_a_cluster_barrier_orders_blocks_differing_along_one_axis(reader,
                                                                                     racy):
    from interp.pallas.mosaic_gpu import WarpgroupRaceError
    make = _cluster_barrier_over_two_axes(reader)
    x = np.arange(64, dtype=np.int32).reshape(2, 2, 16)
    s = np.zeros_like(x)
    _assert_jax_flags(racy, make, x, s)
    if racy:
        with pytest.raises(WarpgroupRaceError, match=r"block \(1, 1\), warpgroup 0: read of "
                                                     r".* which warpgroup 0 of block \(0, 0\) "
                                                     r"wrote"):
            _reference(make, x, s)
    else:
        out = _reference(make, x, s)
        want = x.copy()
        want[1, 1] = x[reader]
        np.testing.assert_array_equal(out, want)


# -- (d) the tensor core's pipe: tcgen05 operations of one or two threads ----------------------

_ACC, _OPND = (128, 128), (128, 128)


def _tc_scratch(**extra):
    return dict(acc=plgpu.TMEM(_ACC, jnp.float32), a=plgpu.SMEM(_OPND, jnp.float16),
                b=plgpu.SMEM(_OPND, jnp.float16), **extra)


def _cross_thread_mmas(second_mma_before_the_arrive: bool):
    """Thread 0 issues an mma and arrives on a barrier that orders the tensor core; thread 1
    waits for it and issues an mma into the same accumulator, committed to its own barrier
    (test_cross_thread_mmas_pipelined: race-free, the pipe orders them). With a second mma of
    thread 0 after its arrival (test_cross_thread_mma_pipeline_multiparent_has_race), that one
    and thread 1's are unordered."""
    def make(params):
        @functools.partial(
            plgpu.kernel, out_type=jax.ShapeDtypeStruct(_ACC, jnp.float32),
            scratch_types=_tc_scratch(mine=plgpu.Barrier(orders_tensor_core=True),
                                      theirs=plgpu.Barrier(orders_tensor_core=True),
                                      handoff=plgpu.Barrier(orders_tensor_core=True)),
            num_threads=2, thread_name="t", **_interpret_kw(params))
        def kernel(out_ref, acc, a, b, mine, theirs, handoff):
            @pl.when(jax.lax.axis_index("t") == 0)
            def _():
                plgpu.tcgen05_mma(acc, a, b, accumulate=False)
                plgpu.barrier_arrive(handoff)
                if second_mma_before_the_arrive:
                    plgpu.tcgen05_mma(acc, a, b, theirs)
                    plgpu.barrier_wait(theirs)

            @pl.when(jax.lax.axis_index("t") == 1)
            def _():
                plgpu.barrier_wait(handoff)
                plgpu.tcgen05_mma(acc, a, b, mine)
                plgpu.barrier_wait(mine)
                if not second_mma_before_the_arrive:
                    out_ref[...] = plgpu.async_load_tmem(acc)
        return kernel
    return make


def test_tcgen05_mma_c3_mmas_handed_over_through_a_tensor_core_barrier_are_pipelined():
    make = _cross_thread_mmas(False)
    _assert_jax_flags(False, make)
    out = interp.interpret(make(None), uninitialized="zero")()
    np.testing.assert_array_equal(out, np.zeros(_ACC, np.float32))


def test_tcgen05_mma_c3_mmas_of_two_threads_not_pipelined_race():
    make = _cross_thread_mmas(True)
    _assert_jax_flags(True, make)
    with pytest.raises(AsyncAccessError, match=r"tcgen05_mma writes .* while a tcgen05_mma of "
                                               r"kernel .*warpgroup (0|1) still (writes|reads) "
                                               r"it .* not pipelined"):
        interp.interpret(make(None), uninitialized="zero")()


@pytest.mark.parametrize("wait", [False, True])
def test_tcgen05_mma_c3_cp_into_the_accumulator_of_an_unawaited_mma_races(wait):
    # mma -> cp is not a pipelined pair (test_copy_into_accumulator_while_mma_in_flight)
    def make(params):
        @functools.partial(
            plgpu.kernel, out_type=jax.ShapeDtypeStruct(_ACC, jnp.float32),
            scratch_types=_tc_scratch(src=plgpu.SMEM(_ACC, jnp.float32),
                                      first=plgpu.Barrier(orders_tensor_core=True),
                                      second=plgpu.Barrier(orders_tensor_core=True)),
            **_interpret_kw(params))
        def kernel(out_ref, acc, a, b, src, first, second):
            plgpu.tcgen05_mma(acc, a, b, accumulate=False)
            if wait:
                plgpu.tcgen05_commit_arrive(first)
                plgpu.barrier_wait(first)
            plgpu.async_copy_smem_to_tmem(src, acc)
            plgpu.tcgen05_commit_arrive(second)
            plgpu.barrier_wait(second)
        return kernel
    _assert_jax_flags(not wait, make)
    if wait:
        interp.interpret(make(None), uninitialized="zero")()
    else:
        with pytest.raises(AsyncAccessError, match=r"tcgen05.cp \(async_copy_smem_to_tmem\) "
                                                   r"writes .* while a tcgen05_mma of this "
                                                   r"thread still writes it"):
            interp.interpret(make(None), uninitialized="zero")()


@pytest.mark.parametrize("commit", [False, True])
def test_async_store_tmem_c1_two_stores_with_no_commit_tmem_between_race(commit):
    # test_overlapping_stores_require_commit_tmem: st -> st is not a pipelined pair
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct(_ACC, jnp.float32),
                           scratch_types=dict(tmem=plgpu.TMEM(_ACC, jnp.float32)),
                           **_interpret_kw(params))
        def kernel(out_ref, tmem):
            plgpu.async_store_tmem(tmem, jnp.full(_ACC, 1.0, jnp.float32))
            if commit:
                plgpu.commit_tmem()
            plgpu.async_store_tmem(tmem, jnp.full(_ACC, 2.0, jnp.float32))
            plgpu.commit_tmem()
            out_ref[...] = plgpu.async_load_tmem(tmem)
        return kernel
    _check(not commit, make, error=AsyncAccessError,
           match=r"async_store_tmem writes .* earlier async_store_tmem of this thread .* not "
                 r"committed", want=np.full(_ACC, 2.0, np.float32))


@pytest.mark.parametrize("producer_commits", [False, True])
def test_async_store_tmem_c1_tmem_handed_over_before_the_producers_commit_races(producer_commits):
    # test_cross_thread_handoff_requires_producer_wait: an arrival carries no pending store
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct(_ACC, jnp.float32),
                           scratch_types=dict(tmem=plgpu.TMEM(_ACC, jnp.float32),
                                              handoff=plgpu.Barrier(orders_tensor_core=True)),
                           num_threads=2, thread_name="t", **_interpret_kw(params))
        def kernel(out_ref, tmem, handoff):
            @pl.when(jax.lax.axis_index("t") == 0)
            def _():
                plgpu.async_store_tmem(tmem, jnp.full(_ACC, 1.0, jnp.float32))
                if producer_commits:
                    plgpu.commit_tmem()
                plgpu.barrier_arrive(handoff)

            @pl.when(jax.lax.axis_index("t") == 1)
            def _():
                plgpu.barrier_wait(handoff)
                plgpu.commit_tmem()   # (the consumer's own: covers nothing of the producer's)
                out_ref[...] = plgpu.async_load_tmem(tmem)
        return kernel
    _check(not producer_commits, make, error=AsyncAccessError,
           match=r"warpgroup 1: read of .* which an async_store_tmem of kernel .*warpgroup 0 "
                 r"wrote .* with no commit_tmem", want=np.full(_ACC, 1.0, np.float32))


@pytest.mark.parametrize("fence", [False, True])
def test_commit_smem_c1_a_tcgen05_mma_reading_smem_written_plainly(fence):
    # test_smem_write_then_mma_requires_commit_smem: the tensor core reads SMEM through the
    # async proxy
    def make(params):
        @functools.partial(
            plgpu.kernel, out_type=jax.ShapeDtypeStruct(_ACC, jnp.float32),
            scratch_types=_tc_scratch(done=plgpu.Barrier(orders_tensor_core=True)),
            **_interpret_kw(params))
        def kernel(a_in, b_in, out_ref, acc, a, b, done):
            a[...] = a_in[...]
            b[...] = b_in[...]
            if fence:
                plgpu.commit_smem()
            plgpu.tcgen05_mma(acc, a, b, done, accumulate=False)
            plgpu.barrier_wait(done)
            out_ref[...] = plgpu.async_load_tmem(acc)
        return kernel
    x = np.ones(_OPND, np.float16)
    _check(not fence, make, x, x, error=TmaRaceError,
           match=r"commit_smem/c1: .* tcgen05_mma accesses .* wrote with a plain store",
           want=np.full(_ACC, 128.0, np.float32))


# -- barrier phases observed inside a warp_map -------------------------------------------------

def _phases_kernel(body):
    def make(params):
        return functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), I32),
                                 scratch_types=dict(barrier=plgpu.Barrier(num_arrivals=1)),
                                 **_interpret_kw(params))(body)
    return make


def _warps_wait(barrier, skip_warp=None):
    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _():
        @pl.when(jax.lax.axis_index("warp") != (-1 if skip_warp is None else skip_warp))
        def _():
            plgpu.barrier_wait(barrier)


def _jax_runs(make, *args):
    """JAX's Mosaic GPU interpret mode's outputs, or the exception it raised."""
    mosaic_interpret.reset_gpu_interpret_mode_state()
    try:
        return jax.block_until_ready(make(InterpretGPUParams())(*args))
    except Exception as e:   # (JAX's callback error)
        return e


def test_barrier_wait_c1_the_warps_phases_become_the_warpgroups():
    # JAX's test_warpgroup_gets_warps_barrier_phase: the warps wait phases 0 and 1, then the
    # warpgroup waits phase 2.
    def body(out_ref, barrier):
        plgpu.barrier_arrive(barrier)
        _warps_wait(barrier)
        plgpu.barrier_arrive(barrier)
        _warps_wait(barrier)
        plgpu.barrier_arrive(barrier)
        plgpu.barrier_wait(barrier)
        out_ref[...] = 42
    make = _phases_kernel(body)
    if JAX_CHECKS:
        assert int(_jax_runs(make)) == 42
    assert int(_reference(make)) == 42


def test_barrier_wait_c1_the_warpgroups_phase_is_the_warps_start():
    # JAX's test_warps_get_parent_warpgroups_barrier_phase
    def body(out_ref, barrier):
        for _ in range(2):
            plgpu.barrier_arrive(barrier)
            plgpu.barrier_wait(barrier)
        plgpu.barrier_arrive(barrier)
        _warps_wait(barrier)
        out_ref[...] = 42
    make = _phases_kernel(body)
    if JAX_CHECKS:
        assert int(_jax_runs(make)) == 42
    assert int(_reference(make)) == 42


def test_barrier_wait_c1_a_wait_after_warps_that_observed_different_phases_is_undefined():
    # JAX's test_all_warps_must_wait_on_barrier: warp 0 did not wait phase 0, the others did.
    def body(out_ref, barrier):
        plgpu.barrier_arrive(barrier)
        _warps_wait(barrier, skip_warp=0)
        plgpu.barrier_wait(barrier)
    make = _phases_kernel(body)
    if JAX_CHECKS:
        assert "only 3 of its constituent warps" in str(_jax_runs(make))
    from interp.pallas.mosaic_gpu import BarrierError
    with pytest.raises(BarrierError, match=r"barrier_wait/c1: .* warps observed different "
                                           r"phases of it \(\[0, 1, 1, 1\], per warp\)"):
        _reference(make)


# -- (d) GMEM shared by the clusters of a launch (mosaic_gpu/gmem-race-between-clusters) ----------
# Clusters run concurrently in any order and order each other only through GMEM semaphores. JAX's
# detector runs the clusters one after another with fresh clocks: it flags two clusters writing
# one location, not a write after another cluster's read (_write_after_read), and it cannot run
# reduction stores (JAX 0.12.0.1: "reduction_op not supported") nor pl.get_global semaphores (a
# TypeError tracing them), so the ordered chain below is the reference's alone.

_ROWS = 8


def _clusters_storing(how: str):
    """Two clusters (grid points) storing x + g (g: the cluster) to rows of the output: the same
    rows plainly or by TMA stores ("plain", "tma"), rows of their own ("disjoint",
    "disjoint_tma"), the same rows by TMA reduction stores (atomic: "reduce"), or cluster 0 by a
    TMA store and cluster 1 by a reduction store ("store_and_reduce")."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((2 * _ROWS, 128), I32),
                           scratch_types=dict(smem=plgpu.SMEM((_ROWS, 128), I32)),
                           grid=(2,), grid_names=("g",), **_interpret_kw(params))
        def kernel(in_ref, out_ref, smem):
            g = jax.lax.axis_index("g")
            start = g * _ROWS if how.startswith("disjoint") else 0
            if how in ("plain", "disjoint"):
                out_ref[pl.ds(start, _ROWS)] = in_ref[...] + g
                return
            smem[...] = in_ref[...] + g
            plgpu.commit_smem()
            dst = out_ref.at[pl.ds(start, _ROWS)]
            if how in ("tma", "disjoint_tma"):
                plgpu.copy_smem_to_gmem(smem, dst)
            elif how == "reduce":
                plgpu.copy_smem_to_gmem(smem, dst, reduction_op="add")
            else:
                @pl.when(g == 0)
                def _():
                    plgpu.copy_smem_to_gmem(smem, dst)

                @pl.when(g == 1)
                def _():
                    plgpu.copy_smem_to_gmem(smem, dst, reduction_op="add")
            plgpu.wait_smem_to_gmem(0)
        return kernel
    return make


def _x():
    return np.arange(_ROWS * 128, dtype=np.int32).reshape(_ROWS, 128)


_BOTH = (r"mosaic_gpu/gmem-race-between-clusters: kernel 'kernel' at cluster \(1,\), block "
         r"\(\), warpgroup 0: {access} of output \(gmem\) .*\[0:8, 0:128\], which kernel "
         r"'kernel' at cluster \(0,\), block \(\), warpgroup 0 {other} .* with no semaphore "
         r"ordering the two: clusters \(0,\) and \(1,\) run concurrently")


@pytest.mark.parametrize("how,access", [
    ("plain", "read"),   # a plain store is a swap: its read is the first access to meet
    ("tma", r"TMA store \(copy_smem_to_gmem\)")])
def test_mosaic_gpu_gmem_race_between_clusters_two_grid_points_storing_one_block(how, access):
    from interp.pallas.mosaic_gpu import ClusterRaceError
    make = _clusters_storing(how)
    _assert_jax_flags(True, make, _x())   # JAX flags it too
    with pytest.raises(ClusterRaceError, match=_BOTH.format(access=access, other="wrote")):
        _reference(make, _x())


@pytest.mark.parametrize("how", ["disjoint", "disjoint_tma"])
def test_mosaic_gpu_gmem_race_between_clusters_not_for_blocks_of_their_own(how):
    make = _clusters_storing(how)
    _assert_jax_flags(False, make, _x())
    x = _x()
    np.testing.assert_array_equal(_reference(make, x), np.concatenate([x, x + 1]))


def test_mosaic_gpu_gmem_race_between_clusters_not_for_two_reduction_stores():
    # cp.reduce.async.bulk updates each element atomically: x + (x + 1) whatever the order (the
    # output zeroed first: uninitialized="zero").
    x = _x()
    out = interp.interpret(_clusters_storing("reduce")(None), uninitialized="zero")(x)
    np.testing.assert_array_equal(np.asarray(out)[:_ROWS], 2 * x + 1)


def test_mosaic_gpu_gmem_race_between_clusters_a_reduction_store_and_a_store():
    from interp.pallas.mosaic_gpu import ClusterRaceError
    access = r"TMA reduction store \(copy_smem_to_gmem with reduction_op\)"
    with pytest.raises(ClusterRaceError, match=_BOTH.format(access=access, other="wrote")):
        interp.interpret(_clusters_storing("store_and_reduce")(None), uninitialized="zero")(_x())


def _write_after_read(params):
    """Cluster 0 copies row 1 of the output to row 0; cluster 1 stores row 1."""
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((2, 128), I32),
                       grid=(2,), grid_names=("g",), **_interpret_kw(params))
    def kernel(in_ref, out_ref):
        g = jax.lax.axis_index("g")

        @pl.when(g == 0)
        def _():
            out_ref[0] = out_ref[1]

        @pl.when(g == 1)
        def _():
            out_ref[1] = in_ref[0]
    return kernel


def test_mosaic_gpu_gmem_race_between_clusters_a_write_after_another_clusters_read():
    # Run in order, cluster 0 reads row 1 before cluster 1 stores it; on the hardware either may
    # come first. JAX's detector does not flag it (clusters in sequence, fresh clocks).
    from interp.pallas.mosaic_gpu import ClusterRaceError
    x = np.arange(2 * 128, dtype=np.int32).reshape(2, 128)
    _assert_jax_flags(False, _write_after_read, x)
    with pytest.raises(ClusterRaceError, match=r"cluster \(1,\), block \(\), warpgroup 0: write of "
                                               r"output \(gmem\) .*\[1, 0:128\], which kernel "
                                               r"'kernel' at cluster \(0,\), .* read"):
        interp.interpret(_write_after_read(None), uninitialized="zero")(x)


def _semaphore_chain(ordered: bool, n: int = 4):
    """Cluster 0 stores x to the output, every other cluster adds one to it; ``ordered``: each
    waits for a signal of a launch-wide semaphore (pl.get_global) first and signals it after,
    a chain through all the clusters in whatever order they take it."""
    def make(params):
        @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((_ROWS, 128), I32),
                           grid=(n,), grid_names=("g",), **_interpret_kw(params))
        def kernel(in_ref, out_ref):
            sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
            g = jax.lax.axis_index("g")

            @pl.when(g == 0)
            def _():
                out_ref[...] = in_ref[...]

            @pl.when(g > 0)
            def _():
                if ordered:
                    pl.semaphore_wait(sem, 1)
                out_ref[...] = out_ref[...] + 1
            if ordered:
                pl.semaphore_signal(sem, 1)
        return kernel
    return make


@pytest.mark.parametrize("grid_order", ["sequential", "shuffled"])
def test_mosaic_gpu_gmem_race_between_clusters_ordered_by_a_semaphore_chain(grid_order):
    x = _x()
    for seed in range(3):
        out = interp.interpret(_semaphore_chain(True)(None), grid_order=grid_order, seed=seed)(x)
        np.testing.assert_array_equal(out, x + 3)
    from interp.pallas.mosaic_gpu import ClusterRaceError
    with pytest.raises(ClusterRaceError, match=r"cluster \(1,\).* read of output .* which kernel "
                                               r"'kernel' at cluster \(0,\).* wrote"):
        interp.interpret(_semaphore_chain(False)(None))(x)


def test_mosaic_gpu_gmem_race_between_clusters_recorded():
    # on_race="record": every racing access of cluster 1 is recorded (its swap's read and
    # write) and the schedule's value returned: cluster 1's store, last.
    from interp.pallas.mosaic_gpu import ClusterRaceError
    from interp.schedule import recording_races
    x = _x()
    with recording_races() as races:
        out = interp.interpret(_clusters_storing("plain")(None), on_race="record")(x)
    np.testing.assert_array_equal(np.asarray(out)[:_ROWS], x + 1)
    assert [type(r) for r in races] == [ClusterRaceError] * 2
    assert [re.search(r"warpgroup 0: (\w+) of output", str(r)).group(1) for r in races] == \
        ["read", "write"]


# -- races recorded instead of raised (Options.on_race="record"; the drop-in mode where JAX's
# detector warns or records) ------------------------------------------------------------------

@pytest.mark.parametrize("how,accesses", [("plain", ["read", "write"]), ("tma", ["write"])])
def test_mosaic_gpu_recorded_race_accesses_apply_in_schedule_order(how, accesses):
    # Block (0,) runs first in the sequential schedule, then block (1,) writes 42 + 1 over its
    # 42; every racing access of block (1,) is recorded (a plain store is a swap: read, write).
    from interp.pallas.mosaic_gpu import WarpgroupRaceError
    from interp.schedule import recording_races
    make = _cluster_gmem(how)
    with recording_races() as races:
        out = interp.interpret(make(None), on_race="record")(np.int32(42))
    assert int(out) == 43
    assert all(type(r) is WarpgroupRaceError for r in races)
    assert [re.search(r"warpgroup 0: (\w+) of output \(gmem\) .* which warpgroup 0 of block "
                      r"\(0,\) wrote with no barrier ordering", str(r)).group(1)
            for r in races] == accesses
    with pytest.warns(RuntimeWarning, match="no recording_races"):   # outside a block: warned
        interp.interpret(make(None), on_race="record")(np.int32(42))


def test_mosaic_gpu_recorded_race_of_the_async_proxy_in_the_drop_in_mode(caplog):
    """A TMA store of SMEM written with no commit_smem, under the drop-in mode where JAX's
    detector warns (on_race="warn"; JAX 0.10/0.11: it only records): logged, flagged in JAX's
    race state, and the kernel returns (the TMA store sees the plain write: 42)."""
    import logging
    make = _store_of_smem_written_plainly(False)
    if JAX_CHECKS:   # JAX's own interpret mode returns the same value
        mosaic_interpret.reset_gpu_interpret_mode_state()
        assert int(make(_gpu_params(on_race="warn"))()) == 42
    mosaic_interpret.reset_gpu_interpret_mode_state()
    with caplog.at_level(logging.WARNING, logger="interp.pallas_mode"):
        with interp.pallas_mode():
            out = jax.block_until_ready(make(_gpu_params(on_race="warn"))())
    assert int(out) == 42
    assert "RACE DETECTED by the reference" in caplog.text and "commit_smem/c1" in caplog.text
    if JAX_CHECKS:
        assert mosaic_interpret.get_races().races_found is True
    if _has_on_race():   # JAX 0.12's default on_race="raise": the reference's error, as today
        mosaic_interpret.reset_gpu_interpret_mode_state()
        with pytest.raises(TmaRaceError, match="commit_smem/c1"):
            with interp.pallas_mode():
                jax.block_until_ready(make(_gpu_params())())


def _read_before_the_copy_lands(params):
    """JAX's test_copy_gmem_to_smem_single_thread(with_race=True): a TMA copy into SMEM, read
    before the barrier phase that guards the copy is observed."""
    x = jnp.arange(16, dtype=I32).reshape(2, 8)

    def kernel(in_gmem, out_gmem, barrier, smem):
        plgpu.copy_gmem_to_smem(in_gmem, smem, barrier)
        out_gmem[...] = smem[...]
        plgpu.barrier_wait(barrier)
    return functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct.like(x),
                             scratch_types=dict(barrier=plgpu.Barrier(), smem=plgpu.SMEM(x.shape, I32)),
                             **_interpret_kw(params))(kernel), x


def test_mosaic_gpu_recorded_race_of_a_tma_copy_read_early_in_the_drop_in_mode(caplog):
    """SMEM read while a TMA copy may still write it (mosaic_gpu/recorded-race): where JAX's
    detector records or warns, the reference records the race (flagged in JAX's race state) and
    the kernel goes on with the copy landed at issue; raised otherwise."""
    import logging
    from interp.pallas.mosaic_gpu import AsyncAccessError
    kernel, x = _read_before_the_copy_lands(_gpu_params(on_race="warn"))
    if JAX_CHECKS:
        mosaic_interpret.reset_gpu_interpret_mode_state()
        jax.block_until_ready(kernel(x))
        assert mosaic_interpret.get_races().races_found is True
    mosaic_interpret.reset_gpu_interpret_mode_state()
    with caplog.at_level(logging.WARNING, logger="interp.pallas_mode"):
        with interp.pallas_mode():
            out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, x)
    assert "RACE DETECTED by the reference" in caplog.text and "TMA copy is still" in caplog.text
    if JAX_CHECKS:
        assert mosaic_interpret.get_races().races_found is True
    mosaic_interpret.reset_gpu_interpret_mode_state()
    with pytest.raises(AsyncAccessError, match="while a TMA copy is still writing it"):
        interp.interpret(_read_before_the_copy_lands(None)[0])(x)


def test_mosaic_gpu_recorded_race_free_kernel_is_unaffected_in_the_drop_in_mode(caplog):
    import logging
    make = _store_of_smem_written_plainly(True)
    mosaic_interpret.reset_gpu_interpret_mode_state()
    with caplog.at_level(logging.WARNING, logger="interp.pallas_mode"):
        with interp.pallas_mode():
            out = jax.block_until_ready(make(_gpu_params(on_race="warn"))())
    assert int(out) == 42 and "RACE DETECTED" not in caplog.text
    if JAX_CHECKS:
        assert mosaic_interpret.get_races().races_found is False


def test_mosaic_gpu_gmem_race_between_clusters_records_by_box_view_and_position_array():
    # races.ClusterAccesses by hand (threads as stand-ins): a thread's newer write of a box
    # replaces its record (a reader that knows only the older write races with the newer); a
    # write through a view of the buffer and one through a position array meet the boxes they
    # overlap, and only those.
    import types
    from interp.options import Options
    from interp.pallas.mosaic_gpu import ClusterRaceError
    from interp.pallas.mosaic_gpu.races import ClusterAccesses, Footprint

    def thread(point):
        t = types.SimpleNamespace(cluster=types.SimpleNamespace(point=point), known={}, epoch=1,
                                  async_proxy=None, options=Options())
        t.where = lambda: f"cluster {point}"
        return t
    buffer = np.zeros((64, 64), np.float32)
    ref = types.SimpleNamespace(array=buffer, short=lambda: "buffer")
    view = types.SimpleNamespace(array=buffer[32:], short=lambda: "view")
    a, b, c = thread((0,)), thread((1,)), thread((2,))
    accesses = ClusterAccesses()
    rows = (slice(0, 8, 1), slice(0, 64, 1))
    accesses.check(a, Footprint(ref, rows), "write", False)
    b.known[id(a)] = 1   # b observed a release of a made after its first write
    accesses.check(b, Footprint(ref, rows), "read", False)
    a.epoch, a.known[id(b)] = 2, 1   # and a observed a release of b made after its read
    accesses.check(a, Footprint(ref, rows), "write", False)   # same box, newer epoch
    assert len(accesses.buffers[id(buffer)][1].records) == 1
    with pytest.raises(ClusterRaceError, match=r"cluster \(1,\): read of .* which cluster \(0,\) "
                                               r"wrote"):
        accesses.check(b, Footprint(ref, rows), "read", False)
    accesses.check(c, Footprint(view, (slice(0, 8, 1), slice(0, 64, 1))), "write", False)
    accesses.check(b, Footprint(ref, (slice(8, 32, 1), slice(0, 64, 1))), "read", False)
    with pytest.raises(ClusterRaceError, match=r"cluster \(1,\): read of .* which cluster \(2,\)"):
        accesses.check(b, Footprint(ref, (slice(39, 40, 1), 5)), "read", False)
    positions = np.array([44, 63])
    accesses.check(c, Footprint(ref, (positions, 0)), "write", False)
    accesses.check(b, Footprint(ref, (slice(45, 63, 1), slice(0, 64, 1))), "read", False)
    with pytest.raises(ClusterRaceError, match=r"cluster \(1,\): write of .* which cluster \(2,\)"):
        accesses.check(b, Footprint(ref, (63, slice(0, 1, 1))), "write", False)
