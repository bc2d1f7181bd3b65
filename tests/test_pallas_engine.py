"""pallas_call in the reference: grid, block specs, aliasing, revisits, scalar prefetch, scratch.

Most kernels here only move data (get/swap with every block kind), so the expectation is exact and
independent: NumPy slicing of the inputs, XLA:CPU of the equivalent jnp program, or JAX's own
interpret=True where its semantics are the defined ones.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import interp
from interp.errors import OutOfBoundsError, UninitializedReadError
from tests.support import xla_cpu

RNG = np.random.default_rng(0)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _blocked_copy(shape, block, out_shape=None, dtype=jnp.float32, **kw):
    out_shape = out_shape or shape
    grid = tuple(pl.cdiv(o, b) for o, b in zip(out_shape, block))
    return pl.pallas_call(
        _copy_kernel, grid=grid,
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct(out_shape, dtype), interpret=True, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_])
def test_partial_edge_blocks_copy_exactly(dtype):
    # 20x36 with 8x16 blocks: the last block row/column sticks out; what is written outside the
    # array is dropped, everything inside is copied bit-exactly.
    x = RNG.integers(0, 100, (20, 36)).astype(dtype)
    out = interp.interpret(_blocked_copy(x.shape, (8, 16), dtype=x.dtype))(x)
    assert out.dtype == x.dtype and np.array_equal(out, x)


@pytest.mark.parametrize("mode,expect", [("nan", np.nan), ("zero", 0.0)])
def test_padding_of_partial_input_blocks_is_uninitialized(mode, expect):
    # The output (16x32) is larger than the input (10x20): blocks of the input stick out and the
    # padding flows into the output where the expectation is poison (nan) or 0 (zero).
    x = RNG.standard_normal((10, 20)).astype(np.float32)
    f = pl.pallas_call(_copy_kernel, grid=(2, 2),
                       in_specs=[pl.BlockSpec((8, 16), lambda i, j: (i, j))],
                       out_specs=pl.BlockSpec((8, 16), lambda i, j: (i, j)),
                       out_shape=jax.ShapeDtypeStruct((16, 32), jnp.float32), interpret=True)
    out = interp.interpret(f, uninitialized=mode)(x)
    np.testing.assert_array_equal(out[:10, :20], x)
    pad = np.ones(out.shape, bool)
    pad[:10, :20] = False
    np.testing.assert_array_equal(out[pad], np.full(pad.sum(), expect, np.float32))
    with pytest.raises(UninitializedReadError, match=r"kernel '_copy_kernel' at grid point \(0, 1\)"):
        interp.interpret(f, uninitialized="raise")(x)


def test_element_blocks_with_padding_match_interpret_mode():
    # pl.Element(10, padding=(1, 1)): the index map returns element offsets into the padded
    # array; rows of padding are never-written memory (NaN), as in JAX's interpret=True.
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    f = pl.pallas_call(_copy_kernel, grid=(2,),
                       in_specs=[pl.BlockSpec((pl.Element(10, (1, 1)), 128),
                                              lambda i: (i * 8, 0))],
                       out_specs=pl.BlockSpec((None, 10, 128), lambda i: (i, 0, 0)),
                       out_shape=jax.ShapeDtypeStruct((2, 10, 128), jnp.float32), interpret=True)
    want = xla_cpu(f, x)
    got = interp.interpret(f)(x)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0]).all() and np.isnan(got[1, 9]).all()


def test_squeezed_dims_match_numpy():
    x = RNG.standard_normal((3, 4, 8, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, grid=(3, 4),
                       in_specs=[pl.BlockSpec((None, pl.Squeezed(), 8, 128),
                                              lambda i, j: (i, j, 0, 0))],
                       out_specs=pl.BlockSpec((None, None, 8, 128), lambda i, j: (j, i, 0, 0)),
                       out_shape=jax.ShapeDtypeStruct((4, 3, 8, 128), jnp.float32),
                       interpret=True)
    np.testing.assert_array_equal(interp.interpret(f)(x), x.transpose(1, 0, 2, 3))


def test_program_id_and_num_programs():
    def kernel(o_ref, n_ref):
        o_ref[0, 0] = pl.program_id(0)
        o_ref[0, 1] = pl.program_id(1)
        n_ref[0, 0] = pl.num_programs(0)
        n_ref[0, 1] = pl.num_programs(1)

    spec = pl.BlockSpec((None, None, 1, 2), lambda i, j: (i, j, 0, 0))
    f = pl.pallas_call(kernel, grid=(3, 5), out_specs=[spec, spec],
                       out_shape=[jax.ShapeDtypeStruct((3, 5, 1, 2), jnp.int32)] * 2,
                       interpret=True)
    ids, nums = interp.interpret(f)()
    ii, jj = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(ids[:, :, 0, 0], ii)
    np.testing.assert_array_equal(ids[:, :, 0, 1], jj)
    assert (nums[:, :, 0, 0] == 3).all() and (nums[:, :, 0, 1] == 5).all()


def test_scalar_prefetch_data_dependent_index_map():
    # Gather row blocks in the order given by a scalar-prefetch operand: out block i = x block
    # idx[i]. The index map reads the SMEM ref.
    x = RNG.standard_normal((5 * 8, 128)).astype(np.float32)
    idx = np.array([3, 0, 4, 4, 1], np.int32)

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(5,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, idx_ref: (idx_ref[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, idx_ref: (i, 0))),
        out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), interpret=True)
    want = x.reshape(5, 8, 128)[idx].reshape(x.shape)
    np.testing.assert_array_equal(interp.interpret(f)(idx, x), want)
    np.testing.assert_array_equal(xla_cpu(f, idx, x), want)


def test_input_output_aliasing_keeps_unwritten_blocks():
    # The output aliases the input; the kernel only overwrites the even row blocks (with the
    # scalar operand's value), the odd ones keep the input.
    x = RNG.standard_normal((4 * 8, 128)).astype(np.float32)

    def kernel(y_ref, x_ref, o_ref):
        o_ref[...] = y_ref[...]

    f = pl.pallas_call(kernel, grid=(2,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0)),
                                 pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (2 * i, 0)),
                       out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
                       input_output_aliases={1: 0}, interpret=True)
    y = np.full((8, 128), 7.0, np.float32)
    want = x.copy()
    want[0:8] = 7.0
    want[16:24] = 7.0
    got = interp.interpret(f)(y, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(xla_cpu(f, y, x), want)
    assert not np.shares_memory(got, x)


def _column_writer(x_ref, o_ref):
    # Writes only column program_id(1) of the output block.
    o_ref[:, pl.ds(pl.program_id(1), 1)] = x_ref[...]


def test_consecutive_revisits_keep_the_output_block():
    x = RNG.standard_normal((16, 4)).astype(np.float32)
    f = pl.pallas_call(_column_writer, grid=(2, 4),
                       in_specs=[pl.BlockSpec((8, 1), lambda i, k: (i, k))],
                       out_specs=pl.BlockSpec((8, 4), lambda i, k: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((16, 4), jnp.float32), interpret=True)
    np.testing.assert_array_equal(interp.interpret(f, uninitialized="raise")(x), x)
    np.testing.assert_array_equal(xla_cpu(f, x), x)


def test_non_consecutive_revisit_is_undefined_on_tpu():
    # Grid (k, i): output block i is visited at k=0 and again at k=1 after the other block.
    # On TPU the second visit does not see the first one's writes: column 0 is poison.
    x = RNG.standard_normal((16, 2)).astype(np.float32)
    kw = dict(grid=(2, 2),
              in_specs=[pl.BlockSpec((8, 1), lambda k, i: (i, k))],
              out_specs=pl.BlockSpec((8, 2), lambda k, i: (i, 0)),
              out_shape=jax.ShapeDtypeStruct((16, 2), jnp.float32), interpret=True)

    def kernel(x_ref, o_ref):
        o_ref[:, pl.ds(pl.program_id(0), 1)] = x_ref[...]

    tpu = interp.interpret(pl.pallas_call(kernel, **kw))(x)
    assert np.isnan(tpu[:, 0]).all()
    np.testing.assert_array_equal(tpu[:, 1], x[:, 1])
    # Triton kernels write global memory directly: the revisit sees the earlier writes.
    from jax.experimental.pallas import triton as plgpu
    gpu = interp.interpret(pl.pallas_call(kernel, compiler_params=plgpu.CompilerParams(), **kw))(x)
    np.testing.assert_array_equal(gpu, x)


def test_shuffled_parallel_axes_change_order_dependent_results_only():
    # Every step writes its input block to the same output block: the last step wins, so the
    # result shows the visiting order. An order-independent copy is unaffected.
    x = RNG.standard_normal((8 * 8, 128)).astype(np.float32)
    sem = pltpu.CompilerParams(dimension_semantics=("parallel",))
    last_wins = pl.pallas_call(_copy_kernel, grid=(8,),
                               in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                               out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                               out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                               compiler_params=sem, interpret=True)
    blocks = x.reshape(8, 8, 128)
    np.testing.assert_array_equal(interp.interpret(last_wins)(x), blocks[-1])
    winners = {int(np.argmax([np.array_equal(interp.interpret(
        last_wins, grid_order="shuffled", seed=s)(x), b) for b in blocks])) for s in range(6)}
    assert len(winners) > 1
    copy = _blocked_copy((64, 128), (8, 128), compiler_params=pltpu.CompilerParams(
        dimension_semantics=("parallel", "parallel")))
    np.testing.assert_array_equal(interp.interpret(copy, grid_order="shuffled", seed=3)(x), x)


def test_scratch_persists_across_grid_steps():
    # Step i stores its block into scratch; step i+1 outputs the previous step's block.
    x = RNG.standard_normal((4 * 8, 128)).astype(np.float32)

    def kernel(x_ref, o_ref, prev):
        @pl.when(pl.program_id(0) > 0)
        def _():
            o_ref[...] = prev[...]

        prev[...] = x_ref[...]

    f = pl.pallas_call(kernel, grid=(4,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)], interpret=True)
    got = interp.interpret(f)(x)
    np.testing.assert_array_equal(got[8:], x[:-8])
    assert np.isnan(got[:8]).all()  # step 0 never wrote its output block
    # The result of the call is read by its caller: never-written output elements are
    # uninitialized reads.
    with pytest.raises(UninitializedReadError, match=r"output .* element \(0, 0\) \(1024 elements"):
        interp.interpret(f, uninitialized="raise")(x)


def test_blocked_matmul_with_accumulator_matches_xla():
    from bench.pallas import matmul_call
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    y = RNG.standard_normal((64, 64)).astype(np.float32)
    got = interp.interpret(matmul_call(64, bs=16))(x, y)
    # Exact expectation: each 16-term partial dot correctly rounded to f32, then accumulated
    # in f32 in k order, which is what the kernel's equations say.
    xb, yb = x.astype(np.float64), y.astype(np.float64)
    want = np.zeros((64, 64), np.float32)
    for kk in range(4):
        part = (xb[:, kk * 16:(kk + 1) * 16] @ yb[kk * 16:(kk + 1) * 16]).astype(np.float32)
        want = (want + part).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_block_outside_the_array_is_out_of_bounds():
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    f = pl.pallas_call(_copy_kernel, grid=(3,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                       out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=True)
    with pytest.raises(OutOfBoundsError, match=r"grid point \(2,\).*\[16:24\] of dimension 0"):
        interp.interpret(f)(x)


def test_plan_reuse_and_inputs_untouched():
    x = RNG.standard_normal((24, 128)).astype(np.float32)
    keep = x.copy()
    f = interp.interpret(_blocked_copy(x.shape, (8, 128)))
    for _ in range(2):
        np.testing.assert_array_equal(f(x), keep)
    np.testing.assert_array_equal(x, keep)


def test_dynamic_grid_bound():
    # grid=(n,) with n traced: the bound is an operand of the pallas_call (DynamicGridDim).
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.num_programs(0).astype(jnp.float32)

    def f(x, n):
        return pl.pallas_call(kernel, grid=(n,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                              interpret=True)(x)

    x = RNG.standard_normal((32, 128)).astype(np.float32)
    got = interp.interpret(f)(x, np.int32(3))
    np.testing.assert_array_equal(got[:24], x[:24] + np.float32(3))
    assert np.isnan(got[24:]).all()  # block 3 is outside the dynamic grid: never written


def test_index_map_of_the_grid_alone_follows_a_dynamic_grid():
    # The reversing index map (num_programs - 1 - i) is a function of the grid point and of the
    # grid: windows remembered per grid point must not carry over to another grid bound, and
    # the kernel's folded num_programs neither (second calls run the specialised bodies).
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + pl.num_programs(0).astype(jnp.float32)

    def f(x, n):
        return pl.pallas_call(kernel, grid=(n,),
                              in_specs=[pl.BlockSpec((8, 128),
                                                     lambda i: (pl.num_programs(0) - 1 - i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                              interpret=True)(x)

    x = RNG.standard_normal((32, 128)).astype(np.float32)
    g = interp.interpret(f, uninitialized="zero")
    for n in (2, 4, 2, 4, 3):
        got = g(x, np.int32(n))
        blocks = x[:8 * n].reshape(n, 8, 128)[::-1].reshape(8 * n, 128)
        np.testing.assert_array_equal(got[:8 * n], blocks * np.float32(2) + np.float32(n))
        np.testing.assert_array_equal(got[8 * n:], 0)


def _offset_kernel(x_ref, o_ref):
    o_ref[...] = (x_ref[...] + pl.program_id(0).astype(jnp.float32) * 100
                  + jnp.float32(pl.num_programs(0)))


def _offset_call(interpret):
    return pl.pallas_call(_offset_kernel, grid=(2,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                          interpret=interpret)


def test_vmapped_pallas_call_hides_the_batch_grid_axis():
    # vmap prepends a grid axis (vmapped_dims); program_id / num_programs in the kernel do not
    # see it.
    x = RNG.standard_normal((3, 16, 128)).astype(np.float32)
    g = jax.vmap(_offset_call(True))
    want = x + np.repeat(np.array([0, 100], np.float32), 8)[:, None] + 2
    np.testing.assert_array_equal(interp.interpret(g)(x), want)
    np.testing.assert_array_equal(xla_cpu(g, x), want)
    # the batch axis is parallel: any order gives the same result
    np.testing.assert_array_equal(interp.interpret(g, grid_order="shuffled", seed=2)(x), want)


def test_kernel_traced_for_tpu_interpret_mode_runs_in_the_reference():
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    got = interp.interpret(_offset_call(pltpu.InterpretParams()))(x)
    np.testing.assert_array_equal(got, xla_cpu(_offset_call(True), x))


def test_shuffled_order_exposes_a_reduction_axis_marked_parallel():
    # The k axis accumulates into the output, so it must be 'arbitrary'; declaring it
    # 'parallel' is a bug that sequential execution hides and a shuffled order exposes.
    x = RNG.standard_normal((4, 8, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...]

    def call(semantics):
        return pl.pallas_call(kernel, grid=(4,),
                              in_specs=[pl.BlockSpec((None, 8, 128), lambda k: (k, 0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda k: (0, 0)),
                              out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              compiler_params=pltpu.CompilerParams(
                                  dimension_semantics=(semantics,)))

    want = ((x[0] + x[1]) + x[2]) + x[3]
    np.testing.assert_array_equal(interp.interpret(call("arbitrary"), grid_order="shuffled")(x),
                                  want)
    np.testing.assert_array_equal(interp.interpret(call("parallel"))(x), want)
    shuffled = [interp.interpret(call("parallel"), grid_order="shuffled", seed=s)(x)
                for s in range(4)]
    assert any(not np.array_equal(r, want) for r in shuffled)


def test_writes_to_an_input_block_last_until_its_index_changes():
    # An input block is a buffer fetched when its block index changes: the kernel's writes to
    # it are seen while the index stays, never written back, and a later fetch of the same
    # block sees the caller's data again (JAX's interpret=True instead carries the writes).
    x = RNG.standard_normal((16, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        x_ref[...] = jnp.full_like(x_ref, 99.0)

    f = pl.pallas_call(kernel, grid=(4,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (jnp.where(i == 2, 1, 0), 0))],
                       out_specs=pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
                       out_shape=jax.ShapeDtypeStruct((4, 8, 128), jnp.float32), interpret=True)
    # block indices visited: 0, 0, 1, 0
    got = interp.interpret(f)(x)
    np.testing.assert_array_equal(got[0], x[:8])
    np.testing.assert_array_equal(got[1], np.full((8, 128), 99, np.float32))  # same fetch
    np.testing.assert_array_equal(got[2], x[8:])
    np.testing.assert_array_equal(got[3], x[:8])  # fetched again: the caller's data
    assert not np.any(x == 99)


@pytest.mark.parametrize("dtype,poison", [
    (np.float32, np.nan), (jnp.bfloat16, np.nan), (np.int32, np.iinfo(np.int32).min),
    (np.int8, -128), (np.uint8, 255), (np.uint32, 2**32 - 1), (np.bool_, True)])
def test_never_written_outputs_hold_the_documented_poison(dtype, poison):
    def kernel(o_ref):
        pass

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), dtype))
    out = interp.interpret(f)()
    assert out.dtype == np.dtype(dtype)
    want = np.full((8, 128), poison).astype(dtype)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[out.dtype.itemsize]
    np.testing.assert_array_equal(out.view(bits), want.view(bits))  # NaN: the same quiet NaN
    np.testing.assert_array_equal(interp.interpret(f, uninitialized="zero")(),
                                  np.zeros((8, 128), dtype))


def test_shuffled_order_applies_to_every_axis_of_a_triton_kernel():
    from jax.experimental.pallas import triton as plgpu
    x = RNG.standard_normal((8 * 8, 128)).astype(np.float32)
    last_wins = pl.pallas_call(_copy_kernel, grid=(8,),
                               in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                               out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                               out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                               compiler_params=plgpu.CompilerParams())
    blocks = x.reshape(8, 8, 128)
    got = [interp.interpret(last_wins, grid_order="shuffled", seed=s)(x) for s in range(6)]
    assert len({int(np.argmax([np.array_equal(g, b) for b in blocks])) for g in got}) > 1


def _grid_branchy_kernel(x_ref, o_ref, acc):
    # Grid-only scalar work (remainder through jnp, switch with an out-of-range index, a nested
    # pl.when), which the engine evaluates once per grid point, mixed with data work.
    i, j = pl.program_id(0), pl.program_id(1)

    @pl.when(j == 0)
    def _():
        acc[...] = jnp.zeros_like(acc)

    k = (i * 3 + j) % 4          # 0..3; branch 3 does not exist: switch clamps to the last one
    acc[...] += jax.lax.switch(jnp.minimum(k, 2) + (k == 3), [
        lambda x: x, lambda x: x * 2.0, lambda x: x - 1.0], x_ref[...])

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        @pl.when(i % 2 == 1)
        def _():
            o_ref[...] = -acc[...]

        @pl.when(i % 2 == 0)
        def _():
            o_ref[...] = acc[...]


def _grid_branchy_term(blk, i, j):
    k = (i * 3 + j) % 4
    b = min(min(k, 2) + (k == 3), 2)
    v = blk if b == 0 else blk * np.float32(2) if b == 1 else blk - np.float32(1)
    return -v if i % 2 else v   # the kernel stores -acc for odd i: negation is exact, so equal
                                # values (a sum of exactly 0 aside: +0 for -0)


@pytest.mark.parametrize("generic_visits", [0, 1])
def test_folded_values_reading_the_grid_are_not_reused_across_points(generic_visits, monkeypatch):
    # Folded scalar work is remembered by input values (interp/pallas/specialize.py); a nested
    # jit reading program_id has no inputs, so it must be evaluated per grid point, not reused.
    from interp.pallas import specialize
    monkeypatch.setattr(specialize, "GENERIC_VISITS", generic_visits)
    def kernel(x_ref, o_ref):
        i = jax.jit(lambda: pl.program_id(0) * 3)()
        o_ref[...] = x_ref[...] + (i % 4).astype(jnp.float32) + (pl.program_id(0) % 2 == 0)

    f = pl.pallas_call(kernel, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), interpret=True)
    x = RNG.standard_normal((32, 128)).astype(np.float32)
    rows = lambda v: np.repeat(np.array(v, np.float32), 8)[:, None]
    want = (x + rows([0, 3, 2, 1])) + rows([1, 0, 1, 0])   # (x + 3i % 4) + (i even), in f32
    g = interp.interpret(f)
    for _ in range(3):  # (generic first visits,) then specialised (built, then reused)
        np.testing.assert_array_equal(g(x), want)


@pytest.mark.parametrize("generic_visits", [0, 1])
def test_kernel_body_specialised_per_grid_point_matches_hand_computed(generic_visits, monkeypatch):
    # The residual programs (one per combination of branches taken) are shared across grid
    # points and calls; results equal the step-by-step semantics computed by hand, whether a
    # point's first visit runs the generic plan or is specialised at once.
    from interp.pallas import specialize
    monkeypatch.setattr(specialize, "GENERIC_VISITS", generic_visits)
    # (generic first visits,) then specialised (built, then reused)
    _check_row_accumulator(_grid_branchy_kernel, _grid_branchy_term, 4, 3, 8)


def _row_accumulation(x, gi, gj, rows, term):
    """The accumulator kernels' result by hand: row block i is the float32 sum over j of
    ``term(block (i, j), i, j)``."""
    out = np.zeros((gi * rows, 128), np.float32)
    for i in range(gi):
        acc = np.zeros((rows, 128), np.float32)
        for j in range(gj):
            acc += term(x[i * rows:(i + 1) * rows, j * 128:(j + 1) * 128], i, j)
        out[i * rows:(i + 1) * rows] = acc
    return out


def _check_row_accumulator(kernel, term, gi, gj, rows):
    """Runs ``kernel`` (blocks rows x 128 of a (gi*rows, gj*128) input accumulated along j into
    a VMEM scratch) three times against :func:`_row_accumulation` of ``term`` and XLA:CPU;
    returns the kernel's KernelBody (interp/pallas/specialize.py)."""
    x = RNG.standard_normal((gi * rows, gj * 128)).astype(np.float32)
    f = pl.pallas_call(
        kernel, grid=(gi, gj),
        in_specs=[pl.BlockSpec((rows, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((rows, 128), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((gi * rows, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((rows, 128), jnp.float32)], interpret=True)
    g = interp.interpret(f)
    want = _row_accumulation(x, gi, gj, rows, term)
    before = {id(p) for p in interp.rules.pallas._call_plans.values()}
    for _ in range(3):
        np.testing.assert_array_equal(g(x), want)
    np.testing.assert_array_equal(g(x), xla_cpu(f, x))  # JAX's interpret=True on XLA:CPU
    body, = [p.body for p in interp.rules.pallas._call_plans.values() if id(p) not in before]
    return body


def _causal_block_kernel(x_ref, o_ref, acc):
    # ops.tpu flash attention's shape of work: a one-iteration fori_loop whose body builds a
    # causal mask from iota and the grid point inside a jit (jnp.where), all foldable per point.
    i, j = pl.program_id(0), pl.program_id(1)

    @pl.when(j == 0)
    def _():
        acc[...] = jnp.zeros_like(acc)

    def body(t, carry):
        rows = jax.lax.broadcasted_iota(jnp.int32, (16, 128), 0) + i * 16
        cols = jax.lax.broadcasted_iota(jnp.int32, (16, 128), 1) + j * 128 + t
        mask = jnp.where(cols <= rows * 8, 0.0, -1.0).astype(jnp.float32)
        acc[...] += x_ref[...] * 2.0 + mask
        return carry + 1

    jax.lax.fori_loop(0, 1, body, 0)

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc[...]


def _causal_block_term(blk, i, j):
    rows = np.arange(16)[:, None] + i * 16
    cols = np.arange(128)[None, :] + j * 128
    return blk * np.float32(2) + np.where(cols <= rows * 8, np.float32(0), np.float32(-1))


@pytest.mark.parametrize("budget", [None, 0])
def test_inlined_loop_and_call_bodies_fold_large_grid_values(budget, monkeypatch):
    # The body of a one-iteration fori_loop and of a jit are inlined into the specialised program
    # (interp/pallas/specialize.py) and the mask (16x128, from iota and the grid point) folds per
    # point; with no byte budget for large folded values every point runs the generic plan.
    from interp.pallas import specialize
    if budget is not None:
        monkeypatch.setattr(specialize, "FOLD_MAX_BYTES", budget)
    walks = []
    original = specialize.KernelBody._specialise
    monkeypatch.setattr(specialize.KernelBody, "_specialise", lambda self: walks.append(1) or original(self))
    gi, gj = 3, 4
    # specialised (built, then reused) or generic throughout
    body = _check_row_accumulator(_causal_block_kernel, _causal_block_term, gi, gj, 16)
    # Each point is walked once: reused after, or remembered as over the budget.
    assert len(walks) == gi * gj
    if budget is None:
        assert len(body.points) == gi * gj and body.held > 0
        # The residual programs hold no scan, jit or iota: their bodies were inlined and folded.
        names = {s[1].name for _, plan in body.variants.values() for s in plan.steps}
        assert not names & {"scan", "jit", "pjit", "iota", "select_n"}, names
    else:
        assert set(body.points.values()) == {None} and body.held == 0


def _source_semaphore_call(wait_read: bool):
    def kernel(x_hbm, o_ref, buf, sems):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) * 8, 8)], buf, sems.at[0],
                                     src_sem=sems.at[1])
        copy.start()
        if wait_read:
            copy.wait()   # dma_wait with is_wait_send=True (the read), then the write
        else:
            copy.wait_write()
        o_ref[...] = buf[...] + 1.0

    return pl.pallas_call(
        kernel, grid=(4,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        interpret=True)


@pytest.mark.parametrize("detect_races", [False, True])
def test_dma_source_semaphore_wait_read_counts_the_copied_bytes(detect_races):
    # A copy with a source semaphore signals both; .wait() waits on each for the copied byte
    # count (the read through dma_wait's is_wait_send path, operands swapped by JAX), so the
    # semaphores balance at every step; waiting only for the write leaves the source semaphore
    # holding the bytes (4 steps x 4096), which race detection reports at the kernel's end.
    import inspect
    if "src_sem" not in inspect.signature(pltpu.make_async_copy).parameters:
        pytest.skip("make_async_copy takes no source semaphore in this JAX")
    x = RNG.standard_normal((32, 128)).astype(np.float32)
    g = interp.interpret(_source_semaphore_call(True), detect_races=detect_races)
    for _ in range(2):   # the specialised programs built, then reused
        np.testing.assert_array_equal(g(x), x + np.float32(1))
    unbalanced = interp.interpret(_source_semaphore_call(False), detect_races=detect_races)
    if detect_races:
        with pytest.raises(interp.RaceError, match=r"'sems \(operand 3\)' int64\[2\] holds 16384 at index \(1,\)"):
            unbalanced(x)
    else:
        np.testing.assert_array_equal(unbalanced(x), x + np.float32(1))


def test_bounds_checks_remembered_per_index_still_catch_a_new_index():
    # Kernel refs remember the indices they found in bounds (by identity; the state rules hand
    # one tuple per distinct index): a call whose dynamic offset moves out of bounds after
    # in-bounds calls of the same plan still raises, on read and on write, every time.
    def kernel(s_ref, x_ref, o_ref):
        o_ref[pl.ds(s_ref[1], 8), :] = x_ref[pl.ds(s_ref[0], 8), :]

    f = pl.pallas_call(kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2,),
        in_specs=[pl.BlockSpec((16, 128), lambda i, s: (0, 0))],
        out_specs=pl.BlockSpec((16, 128), lambda i, s: (0, 0))),
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=True)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    g = interp.interpret(f)
    for _ in range(2):
        np.testing.assert_array_equal(g(np.array([8, 0], np.int32), x)[:8], x[8:])
    for _ in range(2):
        with pytest.raises(OutOfBoundsError, match=r"input buffer 'x_ref.*\[12:20:1\], size 16"):
            g(np.array([12, 0], np.int32), x)
        with pytest.raises(OutOfBoundsError, match=r"output buffer 'o_ref.*\[9:17:1\], size 16"):
            g(np.array([8, 9], np.int32), x)
    np.testing.assert_array_equal(g(np.array([0, 8], np.int32), x)[8:], x[:8])


@pytest.mark.parametrize("mode", ["nan", "raise"])
def test_scratch_and_semaphores_start_fresh_every_call(mode):
    # Scratch is copied per call from a prototype allocated once per plan: a call never sees
    # what the previous call left in scratch (the block DMA'd there at its last step): its
    # never-written memory is poison again ('nan'), or still an uninitialized read ('raise').
    def kernel(x_ref, o_ref, acc, sem):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = acc[...]   # never written in this call: poison / uninitialized read

        @pl.when(pl.program_id(0) == 1)
        def _():
            o_ref[...] = x_ref[...]

        copy = pltpu.make_async_copy(x_ref, acc, sem.at[0])
        copy.start()
        copy.wait()

    f = pl.pallas_call(kernel, grid=(2,),
                       in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32),
                                       pltpu.SemaphoreType.DMA((1,))], interpret=True)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    g = interp.interpret(f, uninitialized=mode, detect_races=True)
    for _ in range(3):
        if mode == "raise":
            with pytest.raises(UninitializedReadError, match=r"scratch .* never-written"):
                g(x)
        else:
            out = g(x)
            assert np.isnan(out[:8]).all()
            np.testing.assert_array_equal(out[8:], x[8:])


def _k_only_kernel(x_ref, o_ref, acc):
    # The body reads only program_id(1) (the index maps read both axes).
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        acc[...] = jnp.zeros_like(acc)

    # (adds only: XLA:CPU would contract a multiply-add into an FMA)
    acc[...] += x_ref[...] + jax.jit(lambda: (j + 1).astype(jnp.float32))()

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc[...]


def _k_only_term(blk, i, j):
    return blk + np.float32(j + 1)


def test_points_agreeing_on_the_axes_the_body_reads_share_their_specialisation():
    # Known values depend on the grid point only through program_id: a body reading only axis 1
    # (inside a jit too) is specialised once per j, and every i reuses it.
    body = _check_row_accumulator(_k_only_kernel, _k_only_term, 3, 4, 8)
    assert body.axes == (1,) and len(body.points) == 4


# -- the core scheduler (interp/schedule.py): nesting and lazy starts -------------------------
def test_cores_started_inside_a_core_join_its_schedule():
    """A kernel's cores started by a running core (a device, an enclosing kernel's core) are forked
    into that core's scheduler: a sibling of the parent can satisfy an inner core's wait (with a
    scheduler of their own they would deadlock), and a wait nobody can satisfy is one deadlock of
    the outer schedule."""
    from interp.errors import RaceError
    from interp.schedule import run_cores, wait_until
    flag, events = [], []

    def inner():
        events.append("inner waits")
        wait_until(lambda: flag, "inner waits for the flag", RaceError)
        events.append("inner resumes")

    def parent():
        run_cores({"x": inner}, "inner kernel")
        events.append("parent joined")

    def sibling():
        events.append("sibling sets the flag")
        flag.append(1)

    run_cores({"parent": parent, "sibling": sibling}, "outer")
    assert events == ["inner waits", "sibling sets the flag", "inner resumes", "parent joined"]

    class Outer(RaceError):
        pass

    def stuck():
        run_cores({"y": lambda: wait_until(lambda: False, "waits forever", RaceError)}, "inner")

    with pytest.raises(Outer, match="waits forever"):
        run_cores({"a": stuck, "b": lambda: None}, "outer", deadlock=Outer)


def test_lazy_cores_start_only_when_no_started_core_can_go_on():
    """Lazy cores (the clusters of a Mosaic GPU grid) start in order, but a started core that can
    go on runs before a new one starts; eager cores start as the baton reaches them."""
    from interp.errors import RaceError
    from interp.schedule import run_cores, wait_until

    def schedule(lazy):
        state, events = {"ready": False}, []

        def first():
            events.append("0 starts")
            wait_until(lambda: state["ready"], "0 waits", RaceError)
            events.append("0 resumes")

        def second():
            events.append("1 starts")
            state["ready"] = True
            wait_until(lambda: "0 resumes" in events, "1 waits", RaceError)
            events.append("1 resumes")

        def third():
            events.append("2 starts")

        run_cores({0: first, 1: second, 2: third}, "kernel", lazy=lazy)
        return events

    assert schedule(lazy=True) == ["0 starts", "1 starts", "0 resumes", "1 resumes", "2 starts"]
    assert schedule(lazy=False) == ["0 starts", "1 starts", "2 starts", "0 resumes", "1 resumes"]


def test_cores_run_with_the_thread_context_of_their_schedule():
    """Per-thread state is one object (interp.schedule.context): a core runs with its own core
    key and kernel stack, as the device of the core that forked it, with the watcher of the thread
    that started its schedule, on whichever thread runs it (here the caller's and a worker's);
    the caller's own values are back when the schedule returns."""
    import threading
    from interp.errors import RaceError
    from interp.schedule import Scheduler, context, run_cores, wait_until

    class Device:
        def describe(self):
            return "device(x=1)"

    device, seen, flag = Device(), {}, []

    def record(name, wait=False):
        def body():
            if wait:   # parks this core: the next one starts on a worker thread
                wait_until(lambda: flag, f"{name} waits", RaceError)
            else:
                flag.append(name)
            seen[name] = (context.core[1], context.device, list(context.runs), context.watcher,
                          threading.get_ident())
        return body

    def parent():
        context.runs.append("the parent's kernel")
        run_cores({"child": record("child")}, "inner kernel")
        context.runs.pop()
        record("parent")()

    context.watcher, context.runs[:] = "watcher", ["caller's kernel"]
    try:
        Scheduler(["p", "q"], "outer").run({"p": record("p", wait=True), "q": parent},
                                          devices={"p": None, "q": device})
        assert (context.core, context.device, context.runs, context.watcher) == \
            (None, None, ["caller's kernel"], "watcher")
    finally:
        context.watcher, context.runs[:] = None, []
    assert seen["p"][:4] == ("p", None, [], "watcher")
    assert seen["parent"][:4] == ("q", device, [], "watcher")
    assert seen["child"][:4] == (("q", "child"), device, [], "watcher")
    assert seen["p"][4] == threading.get_ident() != seen["parent"][4]


def test_tiled_view_accesses_take_the_flat_path_with_the_same_elements():
    """Reads, writes and swaps through read-only position arrays indexing every dimension (tiled
    SMEM views) go through one flat take/store on a C-contiguous buffer (interp/pallas/memory.py
    _flat_positions): the same elements and bits as NumPy's multi-dimensional indexing, for
    broadcasting position arrays too; other buffers and indices keep NumPy's indexing; an
    out-of-bounds position is still the bounds check's error."""
    from interp.pallas import memory
    from interp.pallas.memory import KernelRef
    shape = (2, 4, 3, 8, 16)
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2 ** 16, np.prod(shape), dtype=np.uint16).reshape(shape)
    bits.flat[:4] = [0x7C01, 0xFE00, 0x8000, 0x7E55]      # NaN payloads and -0.0 kept bitwise
    # a swizzle-like view: positions of a (24, 64) tile, last two dims XOR-permuted
    r = np.arange(24)[:, None]
    c = np.arange(64)[None, :]
    view = np.broadcast_arrays(c // 32, r // 6, r % 3, (r % 8) ^ (c % 8), c % 16)
    broadcast = (c // 32, r // 6, r % 3, (r % 8), c % 16)   # (shapes (1, 64) and (24, 1))
    for index in (tuple(view), broadcast):
        for ix in index:
            ix.flags.writeable = False
        buf = bits.view(np.float16).copy()
        ref = KernelRef(buf, "smem", None, kind="smem")
        want = bits.view(np.float16)[index]
        got = ref.read(index)
        assert memory._FLAT[id(index)][0] is index          # (the flat path was taken)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        value = rng.integers(0, 2 ** 16, want.shape, dtype=np.uint16).view(np.float16)
        expect = bits.view(np.float16).copy()
        expect[index] = value
        old = ref.swap(index, value)
        np.testing.assert_array_equal(old.view(np.uint16), want.view(np.uint16))
        np.testing.assert_array_equal(buf.view(np.uint16), expect.view(np.uint16))
        ref.write(index, np.float16(-0.0))
        expect[index] = np.float16(-0.0)
        np.testing.assert_array_equal(buf.view(np.uint16), expect.view(np.uint16))
    # one element by 0-d position arrays (atomics): NumPy's indexing and its scalar result
    one = tuple(np.array(i) for i in (1, 2, 0, 5, 9))
    for ix in one:
        ix.flags.writeable = False
    ref = KernelRef(bits.view(np.float16).copy(), "smem", None)
    assert ref.read(one) == bits.view(np.float16)[one] and ref.read(one).shape == ()
    ref.write(one, np.float16(3))
    assert ref.array[1, 2, 0, 5, 9] == 3
    # a buffer that is not C-contiguous, and writeable position arrays: NumPy's indexing
    strided = bits.view(np.float16).copy().transpose(4, 3, 2, 1, 0)
    index = tuple(np.ascontiguousarray(ix.T) for ix in view)[::-1]
    ref = KernelRef(strided, "t", None)
    np.testing.assert_array_equal(ref.read(index).view(np.uint16), strided[index].view(np.uint16))
    assert id(index) not in memory._FLAT
    out = list(view)
    out[0] = view[0] + 2
    out = tuple(out)
    for ix in out:
        ix.flags.writeable = False
    with pytest.raises(OutOfBoundsError):
        KernelRef(bits.view(np.float16).copy(), "smem", None).read(out)
