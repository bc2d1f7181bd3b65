"""Smaller Pallas primitives and block-spec options: reciprocal, einshape, Triton atomics,
emit_pipeline, BoundedSlice, pipeline_mode, barrier semaphores, the hardware PRNG emulation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import interp
from interp.errors import UndefinedBehaviorError
from tests.support import xla_cpu

RNG = np.random.default_rng(3)
_reciprocal = getattr(pltpu, "reciprocal", None) or getattr(pl, "reciprocal")


@pytest.mark.parametrize("approx", [False, True])
def test_reciprocal_is_correctly_rounded(approx):
    x = np.concatenate([RNG.standard_normal(120).astype(np.float32),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.0, 7.0],
                                 np.float32)])

    def kernel(x_ref, o_ref):
        o_ref[...] = _reciprocal(x_ref[...], approx=approx)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32))
    with np.errstate(divide="ignore", over="ignore"):
        want = (1.0 / x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(x), want)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_reciprocal_without_full_range_poisons_its_undefined_inputs(dtype):
    # full_range=False: "may produce incorrect results when x or output is +-inf or NaN; or when
    # x is +-1/flt_min or +-0" (pltpu.reciprocal): those elements are NaN in the reference
    # (undefined, like never-written memory); the others keep the correctly rounded 1/x.
    tiny = float(jnp.finfo(dtype).tiny)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1 / tiny, -2 / tiny, 1e-45, 3.0, -7.0,
               0.5 / tiny, 2.0 ** -127]
    x = np.concatenate([RNG.standard_normal(116), special]).astype(dtype)

    def kernel(x_ref, o_ref):
        o_ref[...] = _reciprocal(x_ref[...], full_range=False)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, dtype))
    got = interp.interpret(f)(x).astype(np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        exact = (1.0 / x.astype(np.float64)).astype(dtype).astype(np.float64)
    xa = np.abs(x.astype(np.float64))
    undefined = ~((xa > 0) & (xa < 1 / tiny) & np.isfinite(exact))
    assert undefined[-12:].tolist() == [True] * 8 + [False] * 4  # 1e-45: 1/x overflows
    assert np.isnan(got[undefined]).all()
    np.testing.assert_array_equal(got[~undefined], exact[~undefined])


def test_false_multiple_of_hint_is_undefined_behaviour():
    # pl.multiple_of is a promise the compiler relies on (tpu.assume_multiple): a false one is
    # undefined behaviour, raised at the grid point that makes it; true ones keep the value.
    def call(off):
        def kernel(o_ref):
            i = pl.program_id(0)
            o_ref[...] = jnp.full((8, 128), pl.multiple_of(i * 8 + off(i), 8), jnp.int32)

        return pl.pallas_call(kernel, grid=(3,), out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((24, 128), jnp.int32))

    got = interp.interpret(call(lambda i: 0))()
    np.testing.assert_array_equal(got, np.repeat(np.arange(0, 24, 8, dtype=np.int32), 8)[:, None]
                                  * np.ones((1, 128), np.int32))
    with pytest.raises(UndefinedBehaviorError, match=r"grid point \(2,\): multiple_of: 17 is "
                                                     r"not a multiple of 8"):
        interp.interpret(call(lambda i: (i == 2).astype(jnp.int32)))()


def test_einshape_matches_numpy():
    if not hasattr(pltpu, "einshape"):
        pytest.skip("pltpu.einshape is not in this JAX")
    x = RNG.standard_normal((4, 8, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.einshape("a(bc)d->b(ad)c", x_ref[...], b=2)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 4 * 128, 4), jnp.float32))
    want = x.reshape(4, 2, 4, 128).transpose(1, 0, 3, 2).reshape(2, 512, 4)
    np.testing.assert_array_equal(interp.interpret(f)(x), want)


def test_triton_atomic_add_with_duplicates_and_mask():
    from jax.experimental.pallas import triton as plgpu
    idx = np.array([0, 3, 3, 5, 0, 0, 7, 2], np.int32)
    vals = RNG.standard_normal(8).astype(np.float32)

    def kernel(i_ref, v_ref, o_ref, old_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        mask = jnp.arange(8) != 6
        old_ref[...] = plgpu.atomic_add(o_ref, (i_ref[...],), v_ref[...], mask=mask)

    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8,), jnp.float32),
                                          jax.ShapeDtypeStruct((8,), jnp.float32)],
                       compiler_params=plgpu.CompilerParams())
    out, old = interp.interpret(f, uninitialized="zero")(idx, vals)
    want = np.zeros(8, np.float32)
    seen = np.zeros(8, np.float32)
    for lane in range(8):  # lanes in order, each addition rounded to f32
        if lane == 6:
            continue
        seen[lane] = want[idx[lane]]
        want[idx[lane]] = np.float32(want[idx[lane]] + vals[lane])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.delete(old, 6), np.delete(seen, 6))


def _abstract_tpu():
    from interp.pallas.tpu.pipeline import abstract_tpu_mesh
    try:
        return abstract_tpu_mesh()
    except TypeError:   # this JAX's AbstractDevice cannot describe one
        return None


def _pipeline_primitive(on: bool):
    """jax_use_emit_pipeline_primitive: emit_pipeline binds the emit_pipeline / pipeline_body
    primitives instead of inlining the pipeline."""
    from jax._src import config
    return config.use_emit_pipeline_primitive(on)


def _doubling_pipeline(n_steps):
    def inner(x_ref, o_ref):   # program_id(0) in the body is the pipeline step
        o_ref[...] = x_ref[...] * 2 + pl.program_id(0).astype(jnp.float32)

    def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(inner, grid=(n_steps,),
                            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x_hbm, o_hbm)

    def call(interpret=False):
        return pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pl.ANY),
                              out_shape=jax.ShapeDtypeStruct((8 * n_steps, 128), jnp.float32),
                              interpret=interpret)
    mesh = _abstract_tpu()

    def f(x, interpret=False):
        with jax.sharding.use_abstract_mesh(mesh):
            return call(interpret)(x)
    return f


@pytest.mark.parametrize("primitive", [False, True], ids=["inlined", "primitive"])
def test_emit_pipeline_inside_a_kernel(primitive):
    x = RNG.standard_normal((32, 128)).astype(np.float32)
    f = _doubling_pipeline(4)
    want = x * np.float32(2) + np.repeat(np.arange(4, dtype=np.float32), 8)[:, None]
    with _pipeline_primitive(primitive):
        try:
            jaxpr = jax.make_jaxpr(f)(x)
        except ValueError as e:  # JAX 0.10.2 asks the (CPU) device for TPU info while tracing
            pytest.skip(f"emit_pipeline cannot be traced on CPU with this JAX: {e}")
        assert ("emit_pipeline" in str(jaxpr)) == primitive
        np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(x), want)
        if primitive and _tpu_interpret_expands_the_pipeline():
            # JAX's TPU interpret mode runs the same expansion
            got = xla_cpu(lambda x: f(x, interpret=pltpu.InterpretParams()), x)
            np.testing.assert_array_equal(got, want)


def _tpu_interpret_expands_the_pipeline() -> bool:
    """JAX 0.10.2 expands the emit_pipeline primitive only in its Mosaic lowering rule (the
    reference traces that rule's pipeline function): both its interpret modes fail on it."""
    from jax._src.pallas.mosaic import pipeline
    return hasattr(pipeline, "emit_pipeline_to_jaxpr")


@pytest.mark.parametrize("primitive", [False, True], ids=["inlined", "primitive"])
def test_emit_pipeline_in_a_grid_sees_its_own_steps(primitive):
    # A pipeline per outer grid step (index maps read the outer program_id); inside the body
    # program_id(0) / num_programs(0) are the pipeline's step and size (the body cannot name the
    # outer axes: JAX refuses at trace time).
    def inner(x_ref, o_ref):
        o_ref[...] = x_ref[...] + (pl.program_id(0) * 10 + pl.num_programs(0) * 1000
                                   ).astype(jnp.float32)

    def kernel(x_hbm, o_hbm):
        j = pl.program_id(0)
        spec = pl.BlockSpec((8, 128), lambda i: (2 * j + i, 0))
        pltpu.emit_pipeline(inner, grid=(2,), in_specs=[spec], out_specs=spec)(x_hbm, o_hbm)

    mesh = _abstract_tpu()

    def f(x, interpret=False):
        with jax.sharding.use_abstract_mesh(mesh):
            return pl.pallas_call(kernel, grid=(3,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                  out_specs=pl.BlockSpec(memory_space=pl.ANY),
                                  out_shape=jax.ShapeDtypeStruct((48, 128), jnp.float32),
                                  interpret=interpret)(x)

    x = RNG.standard_normal((48, 128)).astype(np.float32)
    want = x + np.repeat(np.tile([2000, 2010], 3).astype(np.float32), 8)[:, None]
    with _pipeline_primitive(primitive):
        try:
            jax.make_jaxpr(f)(x)
        except ValueError as e:
            pytest.skip(f"emit_pipeline cannot be traced on CPU with this JAX: {e}")
        np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(x), want)
        if primitive and _tpu_interpret_expands_the_pipeline():
            got = xla_cpu(lambda x: f(x, interpret=pltpu.InterpretParams()), x)
            np.testing.assert_array_equal(got, want)


def _indirect_pipeline(n, d, b, *, gather: bool):
    """emit_pipeline over n/b blocks of b rows: ``gather`` reads input rows idx[i*b:(i+1)*b]
    (pl.Indirect input block), else writes output rows there (pl.Indirect output block)."""
    def kernel(idx_ref, x_hbm, o_hbm):
        def body(x_blk, o_blk):
            o_blk[...] = x_blk[...] * 2.0 + 1.0

        rows = pl.BlockSpec((b, d), lambda i: (i, 0))
        picked = pl.BlockSpec((pl.Indirect(b), d), lambda i: (idx_ref[pl.ds(i * b, b)], 0))
        pltpu.emit_pipeline(body, grid=(n // b,), in_specs=[picked if gather else rows],
                            out_specs=[rows if gather else picked])(x_hbm, o_hbm)

    call = pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                                            pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          out_shape=jax.ShapeDtypeStruct((n, d), jnp.float32))
    mesh = _abstract_tpu()

    def f(idx, x):
        with jax.sharding.use_abstract_mesh(mesh):
            return call(idx, x)
    return f


@pytest.mark.parametrize("gather", [True, False], ids=["gather", "scatter"])
def test_indirect_blocks_in_emit_pipeline(gather):
    # pl.Indirect: the index map returns a vector of row indices (read from SMEM), the pipeline
    # DMAs gather (input) or scatter (output) those rows. Expectation: NumPy fancy indexing.
    # (JAX 0.12's interpret modes both fail on this program; the reference must not.)
    if not hasattr(pl, "Indirect"):
        pytest.skip("pl.Indirect is not in this JAX")
    n, d, b = 64, 128, 8
    x = RNG.standard_normal((n, d)).astype(np.float32)
    idx = RNG.permutation(n).astype(np.int32)
    # (With jax_use_emit_pipeline_primitive JAX itself refuses Indirect blocks at trace time:
    # the primitive's grid mapping requires scalar index maps.)
    f = _indirect_pipeline(n, d, b, gather=gather)
    try:
        jax.make_jaxpr(f)(idx, x)
    except ValueError as e:
        pytest.skip(f"emit_pipeline cannot be traced on CPU with this JAX: {e}")
    y = x * np.float32(2) + np.float32(1)
    want = y[idx] if gather else np.empty_like(y)
    if not gather:
        want[idx] = y
    for opts in ({}, {"detect_races": True}, {"uninitialized": "raise"}):
        np.testing.assert_array_equal(interp.interpret(f, **opts)(idx, x), want)


def _scatter_dma(n, d, k, *, add=False, dtype=jnp.float32):
    def kernel(idx_ref, x_ref, o_in, o_hbm, sem):
        pltpu.async_copy(x_ref, o_hbm.at[idx_ref[...]], sem, add=add).wait()
    return pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2 +
                          [pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          out_shape=jax.ShapeDtypeStruct((n, d), dtype),
                          input_output_aliases={2: 0},
                          scratch_shapes=[pltpu.SemaphoreType.DMA(())])


def test_indirect_dma_with_duplicate_destinations():
    # A scatter DMA writes its rows in no defined order: a destination row named twice is
    # defined only when both writes carry the same bits.
    from interp.errors import RaceError
    x = RNG.standard_normal((4, 128)).astype(np.float32)
    idx = np.array([3, 0, 9, 3], np.int32)
    base = RNG.standard_normal((16, 128)).astype(np.float32)
    f = interp.interpret(_scatter_dma(16, 128, 4))
    with pytest.raises(RaceError, match=r"different values .* element \(3, 0\)"):
        f(idx, x, base)
    same = np.stack([x[0], x[1], x[2], x[0]])
    want = base.copy()
    want[idx] = same
    np.testing.assert_array_equal(f(idx, same, base), want)
    # Accumulating DMA: integer additions land in any order with the same result (each
    # duplicate receives its addition); float ones would round differently per order.
    xi = RNG.integers(-2**31, 2**31, (4, 128)).astype(np.int32)
    bi = RNG.integers(-2**31, 2**31, (16, 128)).astype(np.int32)
    want = bi.astype(np.int64)
    np.add.at(want, idx, xi.astype(np.int64))
    got = interp.interpret(_scatter_dma(16, 128, 4, add=True, dtype=jnp.int32))(idx, xi, bi)
    np.testing.assert_array_equal(got, want.astype(np.uint32).astype(np.int32))  # wraps
    with pytest.raises(RaceError, match="order of the float additions"):
        interp.interpret(_scatter_dma(16, 128, 4, add=True))(idx, x, base)


def test_bounded_slice_blocks():
    if not hasattr(pl, "BoundedSlice"):
        pytest.skip("pl.BoundedSlice is not in this JAX")
    x = RNG.standard_normal((24, 128)).astype(np.float32)
    starts = np.array([0, 5, 16], np.int32)
    sizes = np.array([5, 8, 3], np.int32)

    def kernel(st_ref, sz_ref, x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[pl.ds(0, 8), :] = x_ref[...]

    try:
        f = pl.pallas_call(kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(3,),
            in_specs=[pl.BlockSpec((pl.BoundedSlice(8), 128),
                                   lambda i, st, sz: (pl.ds(st[i], sz[i]), 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda i, st, sz: (i, 0, 0))),
            out_shape=jax.ShapeDtypeStruct((3, 8, 128), jnp.float32))
        jax.make_jaxpr(f)(starts, sizes, x)
    except Exception as e:
        pytest.skip(f"BoundedSlice with a dynamic size does not trace here: {e}")
    got = interp.interpret(f)(starts, sizes, x)
    for i in range(3):
        np.testing.assert_array_equal(got[i, :sizes[i]], x[starts[i]:starts[i] + sizes[i]])


def test_pipeline_mode_buffered_does_not_change_results():
    x = RNG.standard_normal((32, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    f = pl.pallas_call(kernel, grid=(4,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0),
                                              pipeline_mode=pl.Buffered(3))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), interpret=True)
    np.testing.assert_array_equal(interp.interpret(f)(x), x + 1)


def test_barrier_semaphore_signal_and_wait():
    def kernel(o_ref):
        sem = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 2)
        o_ref[0] = pl.semaphore_read(sem)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                       out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                       compiler_params=pltpu.CompilerParams(collective_id=0))
    np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(), [0])


def test_hardware_prng_emulation_is_deterministic_and_seeded():
    def kernel(o_ref):
        pltpu.prng_seed(5, pl.program_id(0))
        o_ref[...] = pltpu.prng_random_bits((8, 128))

    f = pl.pallas_call(kernel, grid=(2,), out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int32))
    a = interp.interpret(f)()
    np.testing.assert_array_equal(a, interp.interpret(f)())
    from interp import prng
    np.testing.assert_array_equal(a[:8].view(np.uint32), prng.pallas_tpu_bits([5, 0], (8, 128)))
    assert len(np.unique(a)) == a.size  # never the zeros of JAX's TPU interpret mode
    assert not np.array_equal(a, interp.interpret(f, seed=1)())

    def unseeded(o_ref):
        o_ref[...] = pltpu.prng_random_bits((8, 128))

    g = pl.pallas_call(unseeded, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32))
    with pytest.raises(UndefinedBehaviorError, match="before any prng_seed"):
        interp.interpret(g)()


def test_masked_load_lanes_outside_the_ref_on_both_sides():
    # Triton-style: a window starting before the ref and ending after it, with the
    # out-of-range lanes masked off; only selected lanes are accessed.
    from jax.experimental.pallas import triton as plgpu

    def kernel(x_ref, o_ref):
        i = pl.program_id(0) * 8 - 4
        lane = i + jnp.arange(16)
        mask = (lane >= 0) & (lane < 16)
        o_ref[...] = plgpu.load(x_ref.at[pl.ds(i, 16)], mask=mask, other=-1.0)

    f = pl.pallas_call(kernel, grid=(2,), out_specs=pl.BlockSpec((None, 16), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((2, 16), jnp.float32),
                       compiler_params=plgpu.CompilerParams())
    x = RNG.standard_normal(16).astype(np.float32)
    want = np.full((2, 16), -1, np.float32)
    want[0, 4:] = x[:12]
    want[1, :12] = x[4:]
    np.testing.assert_array_equal(interp.interpret(f)(x), want)


def test_kernel_body_loops_conditionals_strides_and_hints_match_interpret_mode():
    x = RNG.standard_normal((16, 128)).astype(np.float32)

    def kernel(x_ref, o_ref, acc):
        acc[...] = jnp.zeros_like(acc)

        def body(i, carry):
            start = pl.multiple_of(i * 2, 2)
            acc[...] += x_ref[pl.ds(start, 4, stride=2), :]  # rows start, +2, +4, +6
            return carry + 1

        n = jax.lax.fori_loop(0, 4, body, 0)

        @pl.when(acc[0, 0] > 0)
        def _():
            acc[...] = -acc[...]

        o_ref[0:4, :] = acc[...] + n.astype(jnp.float32)
        o_ref[4:8, :] = jnp.tile(x_ref[0:2, 0:64], (2, 2))  # what Mosaic's repeat lowers from

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       scratch_shapes=[pltpu.VMEM((4, 128), jnp.float32)], interpret=True)
    np.testing.assert_array_equal(interp.interpret(f)(x), xla_cpu(f, x))


def test_debug_print_and_delay_in_a_kernel(capsys):
    def kernel(x_ref, o_ref):
        pl.debug_print("first={}", x_ref[0])
        pl.delay(100)
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))
    x = np.arange(8, dtype=np.float32) + 3
    np.testing.assert_array_equal(interp.interpret(f)(x), x)
    assert "first=3.0" in capsys.readouterr().out


def test_has_memory_space_of_an_any_operand():
    if not hasattr(pltpu, "has_memory_space"):
        pytest.skip("pltpu.has_memory_space is not in this JAX")

    def kernel(x_hbm, o_ref):
        o_ref[0] = jnp.where(pltpu.has_memory_space(x_hbm, pltpu.HBM), 1, 0)
        o_ref[1] = jnp.where(pltpu.has_memory_space(x_hbm, pltpu.VMEM), 1, 0)

    f = pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                       out_shape=jax.ShapeDtypeStruct((2,), jnp.int32))
    # The reference keeps pl.ANY operands in HBM.
    np.testing.assert_array_equal(interp.interpret(f)(np.ones((8, 128), np.float32)), [1, 0])


def test_get_global_persists_across_grid_steps():
    if not hasattr(pl, "get_global"):
        pytest.skip("pl.get_global is not in this JAX")

    def kernel(o_ref):
        sem = pl.get_global(pltpu.SemaphoreType.REGULAR)
        pl.semaphore_signal(sem, 1)
        o_ref[0] = pl.semaphore_read(sem)

    f = pl.pallas_call(kernel, grid=(3,),
                       out_specs=pl.BlockSpec((1,), lambda i: (i,), memory_space=pltpu.SMEM),
                       out_shape=jax.ShapeDtypeStruct((3,), jnp.int32))
    np.testing.assert_array_equal(interp.interpret(f)(), [1, 2, 3])


def test_coverage_reports_pallas_primitives():
    cov = interp.coverage()
    for name in ("program_id", "num_programs", "masked_load", "masked_swap", "semaphore_wait",
                 "roll", "bitcast", "multiple_of"):
        assert cov[name] == "supported", (name, cov[name])
    for name in ("pallas_call", "dma_start", "mpmd_map", "prng_random_bits"):
        assert cov[name].startswith("partial: "), (name, cov[name])


def test_indirect_block_in_pallas_call_blockspec_is_loud():
    # pallas_call's index maps return scalars: an Indirect dimension there has no defined meaning
    # (no lowering takes it), so the reference refuses it instead of guessing.
    if not hasattr(pl, "Indirect"):
        pytest.skip("pl.Indirect is not in this JAX")

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec((pl.Indirect(8), 128),
                                                                 lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32))
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="Indirect"):
        interp.interpret(f)(x)


@pytest.mark.parametrize("src,packed", [(np.int8, "int4"), (np.int16, np.int8), (np.int32, np.int8),
                                        (np.int32, np.int16)])
def test_pack_elementwise_integers_match_bit_arithmetic(src, packed):
    # Each source truncated to the packed width, source i at bits [i*w, (i+1)*w) of an unsigned
    # word of the source's width (the primitive's docstring), computed here with Python ints.
    import ml_dtypes
    packed = np.dtype(getattr(ml_dtypes, packed) if isinstance(packed, str) else packed)
    wbits, pbits = np.dtype(src).itemsize * 8, (4 if packed.name == "int4" else packed.itemsize * 8)
    n = wbits // pbits
    info = np.iinfo(src)
    xs = [RNG.integers(info.min, info.max, (8, 128), endpoint=True).astype(src) for _ in range(n)]

    def kernel(*refs):
        refs[-1][...] = pltpu.pack_elementwise([r[...] for r in refs[:-1]], packed_dtype=packed)

    out_dtype = np.dtype(f"uint{wbits}")
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), out_dtype))
    got = interp.interpret(f)(*xs)
    want = np.zeros((8, 128), np.uint64)
    for i, x in enumerate(xs):
        for idx, v in np.ndenumerate(x):
            want[idx] |= (int(v) % (1 << pbits)) << (i * pbits)
    assert got.dtype == out_dtype
    np.testing.assert_array_equal(got, want.astype(out_dtype))


@pytest.mark.parametrize("wide,packed", [(np.int16, np.int8), (np.int32, np.int8),
                                         (np.int32, np.int16), (np.float32, jnp.bfloat16)])
def test_unpack_elementwise_takes_the_indexed_field(wide, packed):
    # The docstring's statement: unpack(x, index=i) == bitcast(x, packed)[i::factor] widened
    # (sign-extended for integers, exactly widened for floats); NumPy's little-endian view of x
    # gives the fields independently.
    packed = np.dtype(packed)
    factor = np.dtype(wide).itemsize // packed.itemsize
    bits = RNG.integers(0, 2**32, (8, 128), dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.int32).astype(np.dtype(f"int{np.dtype(wide).itemsize * 8}")).view(wide) \
        if wide != np.float32 else bits.view(np.float32)

    def kernel(x_ref, *o_refs):
        for i, o in enumerate(o_refs):
            o[...] = pltpu.unpack_elementwise(x_ref[...], index=i, packed_dtype=packed,
                                              unpacked_dtype=wide)

    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8, 128), wide)] * factor)
    outs = interp.interpret(f)(x)
    fields = np.ascontiguousarray(x).view(packed).reshape(8, 128, factor)
    for i, got in enumerate(outs):
        want = fields[..., i].astype(wide)
        np.testing.assert_array_equal(got.view(np.dtype(f"uint{got.itemsize * 8}")),
                                      want.view(np.dtype(f"uint{want.itemsize * 8}")))


def test_pallas_prng_keys_join_split_and_seed_the_hardware_prng():
    # A Pallas TPU key is a bundle of uint32 scalars: prng_join / prng_split convert in order
    # (mosaic lowering), and prng_seed(key) seeds the (emulated) hardware PRNG with the key's
    # scalars (as pallas/mosaic/random.py _random_bits does).
    from jax._src.pallas.mosaic import primitives as tpu_prims

    from interp import prng

    def kernel(o_key, o_bits):
        i = pl.program_id(0).astype(jnp.uint32)
        key = tpu_prims.wrap_pallas_seed(i + 7, i * 3 + 1000, impl="pallas_tpu")
        k0, k1 = tpu_prims.unwrap_pallas_seed(key)
        o_key[0] = k1   # swapped on purpose: the order must survive the round trip
        o_key[1] = k0
        pltpu.prng_seed(key)
        o_bits[...] = pltpu.prng_random_bits((8, 128))

    f = pl.pallas_call(kernel, grid=(2,),
                       out_specs=[pl.BlockSpec((None, 2), lambda i: (i, 0),
                                               memory_space=pltpu.SMEM),
                                  pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))],
                       out_shape=[jax.ShapeDtypeStruct((2, 2), jnp.uint32),
                                  jax.ShapeDtypeStruct((2, 8, 128), jnp.int32)])
    keys, bits = interp.interpret(f)()
    for i in range(2):
        np.testing.assert_array_equal(keys[i], np.array([i * 3 + 1000, i + 7], np.uint32))
        want = np.asarray(prng.pallas_tpu_bits([i + 7, i * 3 + 1000], (8, 128)), np.uint32)
        np.testing.assert_array_equal(bits[i].view(np.uint32), want)


def test_prng_join_of_a_non_pallas_impl_is_refused():
    # JAX's abstract eval accepts any impl of key shape (1, N); Mosaic joins only Pallas keys
    # (_join_key_lowering_rule: "Can only join Pallas keys").
    from jax._src.pallas.mosaic import primitives as tpu_prims
    from jax._src.random import prng as jax_prng
    impl = jax_prng.PRNGImpl(key_shape=(1, 2), seed=lambda s: jnp.zeros((1, 2), jnp.uint32),
                             split=None, random_bits=None, fold_in=None, name="test_1x2",
                             tag="t12")   # not registered: JAX's impl registry stays as it is

    def kernel(o_ref):
        o_ref[0] = tpu_prims.unwrap_pallas_seed(tpu_prims.wrap_pallas_seed(
            jnp.uint32(1), jnp.uint32(2), impl=impl))[0]

    f = pl.pallas_call(kernel, out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                       out_shape=jax.ShapeDtypeStruct((2,), jnp.uint32))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="Mosaic joins only Pallas keys"):
        interp.interpret(f)()


def _draw(bits, seed=lambda: pltpu.prng_seed(1, 2), in_specs=(), out_shape=(8, 128)):
    def kernel(*refs):
        seed(*refs[:-1])
        o_ref = refs[-1]
        o_ref[...] = jnp.broadcast_to(bits(*refs[:-1]), o_ref.shape).astype(jnp.uint32)
    return pl.pallas_call(kernel, in_specs=list(in_specs),
                          out_shape=jax.ShapeDtypeStruct(out_shape, jnp.uint32))


@pytest.mark.parametrize("how", ["prng_random_bits", "stateful_bits", "pallas key"])
@pytest.mark.parametrize("shape", [(), (128,)])
def test_hardware_random_bits_of_rank_below_two_are_refused(how, shape):
    # Mosaic lowers the hardware PRNG draw only for rank >= 2 results
    # (_prng_random_bits_lowering_rule: NotImplementedError 'random_bits only supports rank>=2
    # outputs.'); every path to it (the primitive, stateful samplers, jax.random on a Pallas
    # key) is refused the same way instead of returning bits.
    key = pltpu.to_pallas_key(jax.random.key(0))
    smem = [pl.BlockSpec(memory_space=pltpu.SMEM)]
    f = {"prng_random_bits": lambda: _draw(lambda: pltpu.prng_random_bits(shape)),
         "stateful_bits": lambda: _draw(lambda: pltpu.stateful_bits(shape=shape,
                                                                    dtype=jnp.uint32)),
         "pallas key": lambda: _draw(lambda k: jax.random.bits(k[...], shape, jnp.uint32),
                                     seed=lambda k: None, in_specs=smem)}[how]()
    args = (key,) if how == "pallas key" else ()
    with pytest.raises(interp.UnsupportedPrimitiveError, match=r"shape \(.*\): Mosaic draws "
                                                               r"only rank >= 2 blocks"):
        interp.interpret(f)(*args)
    np.testing.assert_array_equal(  # rank 2 of the same draws: fine
        interp.interpret(_draw(lambda: pltpu.prng_random_bits((8, 128))))().shape, (8, 128))


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8, np.bool_, np.int64])
def test_hardware_prng_seeds_must_be_32_bit_integers(dtype):
    # _prng_seed_lowering_rule: 'All seed data must be scalar integers'; tpu.prng_set_seed_32
    # verifies 32-bit operands (int64 seeds, e.g. literals under jax_enable_x64, fail there).
    from interp import prng
    smem = [pl.BlockSpec(memory_space=pltpu.SMEM)]
    with jax.enable_x64(dtype == np.int64):
        f = _draw(lambda s: pltpu.prng_random_bits((8, 128)),
                  seed=lambda s: pltpu.prng_seed(s[0], 5), in_specs=smem)
        with pytest.raises(interp.UnsupportedPrimitiveError,
                           match="seeds .*: Mosaic seeds the hardware PRNG from scalar 32-bit"):
            interp.interpret(f)(np.ones(4, dtype))
    for ok in (np.int32, np.uint32):
        got = interp.interpret(f)(np.full(4, 7, ok))
        np.testing.assert_array_equal(got, prng.pallas_tpu_bits([7, 5], (8, 128)))


@pytest.mark.parametrize("mode", ["nan", "zero"])
def test_empty_and_empty_like_in_a_kernel_are_never_written_memory(mode):
    # pl.empty / pl.empty_like give uninitialized values: the documented poison (NaN, iinfo.min
    # for signed ints; spec/pallas.py POISON) or zeros, never plausible data.
    def kernel(x_ref, o_ref, o2_ref):
        o_ref[...] = pl.empty_like(x_ref[...])
        o2_ref[...] = pl.empty((8, 128), jnp.int32)

    f = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((8, 128), jnp.float32),
                                          jax.ShapeDtypeStruct((8, 128), jnp.int32)])
    a, b = interp.interpret(f, uninitialized=mode)(np.ones((8, 128), np.float32))
    if mode == "nan":
        assert np.isnan(a).all() and (b == np.iinfo(np.int32).min).all()
    else:
        assert (a == 0).all() and (b == 0).all()


def test_triton_max_contiguous_and_multiple_of_hints_keep_values():
    from jax.experimental.pallas import triton as plgpu
    x = RNG.integers(0, 1000, 128).astype(np.int32)

    def kernel(x_ref, o_ref):
        idx = pl.multiple_of(jnp.arange(128) * 1, 1)
        o_ref[...] = plgpu.max_contiguous(x_ref[...] + idx, 128)

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128,), jnp.int32),
                       compiler_params=plgpu.CompilerParams())
    np.testing.assert_array_equal(interp.interpret(f)(x), x + np.arange(128, dtype=np.int32))


def _checked_kernel():
    def kernel(x_ref, o_ref):
        pl.debug_check(x_ref[0] > 0, "first element of the block must be positive")
        o_ref[...] = x_ref[...] * 2

    spec = pl.BlockSpec((8,), lambda i: (i,))
    return pl.pallas_call(kernel, grid=(3,), in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct((24,), jnp.float32))


def test_debug_check_asserts_when_debug_checks_are_enabled():
    # Mosaic (TPU and GPU) lowers pl.debug_check to a runtime assertion when
    # pl.enable_debug_checks is on, to nothing when off; the reference does the same at the
    # failing grid point. (JAX's interpret modes never check: measured on 0.10.2 and 0.12.)
    f = _checked_kernel()
    good = np.arange(1, 25, dtype=np.float32)
    bad = good.copy()
    bad[16] = -1.0   # the block of grid point (2,)
    with pl.enable_debug_checks(True):
        np.testing.assert_array_equal(interp.interpret(f)(good), 2 * good)
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match=r"kernel 'kernel' at grid point \(2,\): debug check failed: "
                                 r"first element of the block must be positive"):
            interp.interpret(f)(bad)
    # Disabled (the default): no check, the kernel's values.
    np.testing.assert_array_equal(interp.interpret(f)(bad), 2 * bad)
    with pl.enable_debug_checks(True):   # the setting is read when the kernel runs
        with pytest.raises(jax.errors.JaxRuntimeError):
            interp.interpret(f)(bad)


def test_checkify_debug_check_outside_kernels_stays_a_no_op():
    from jax.experimental import checkify

    def f(x):
        checkify.debug_check(x > 0, "x must be positive")
        return x + 1

    with pl.enable_debug_checks(True):
        np.testing.assert_array_equal(interp.interpret(f)(np.float32(-1)), np.float32(0))
