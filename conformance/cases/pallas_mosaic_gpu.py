"""Pallas Mosaic GPU: feature kernels per primitive family (TMA copies and stores with barriers,
tiled and swizzled SMEM, warpgroups synchronised by barriers, wgmma) and the kernels JAX ships in
``jax.experimental.pallas.ops.gpu``, on ``reference``, ``pallas:gpu-interpret`` (JAX's Mosaic
GPU interpret mode, CPU) and ``pallas:mosaic-gpu`` (a GPU); shipped kernels also against the
function they claim to compute.

Mosaic GPU kernels trace only where ``jax.experimental.pallas.mosaic_gpu`` imports (JAX 0.10.2's
needs absl-py: the `mosaic-gpu` extra): elsewhere every case is listed not applicable, with the
reason. Semantics: ``spec/pallas_mosaic_gpu.py``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np

from spec import compliance as C

from ..case import PALLAS, Case, applicable_if, random_array

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _plgpu():
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return plgpu


def _case(name, build, inputs, *, modes=None, primitives=("mpmd_map",), **kw):
    return Case(id=f"pallas_mosaic_gpu/{name}", fn=None, build=build, inputs=inputs, kind=PALLAS,
                pallas_targets=("mosaic-gpu",), modes=modes, primitives=tuple(primitives), **kw)


def _rows(shapes, dtype=F32, **kw):
    return lambda rng: [random_array(rng, dtype, s, specials=0, **kw) for s in shapes]


# ---------------------------------------------------------------------------- feature kernels
def _tma_kernel(shape, transforms, interpret):
    plgpu = _plgpu()

    def body(x_gmem, o_gmem, smem, barrier):
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        smem[...] = smem[...] * 2.0
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)
    t = tuple(make() for make in transforms)
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                        scratch_types=[plgpu.SMEM(shape, jnp.float32, transforms=t),
                                       plgpu.Barrier(num_arrivals=1)], interpret=interpret)


def build_tma(shape, transforms=()):
    return lambda interpret: _tma_kernel(shape, transforms, interpret)


def build_producer_consumer(shape, poll=False, with_count=False):
    """The producer warpgroup loads x (TMA), adds one and arrives on ``ready``; the consumer
    waits on ``ready`` (barrier_wait; ``poll``: barrier_test until it answers True, the consumer
    being warpgroup 0 so that its first test comes before the producer ran), doubles it and
    stores it: 2 (x + 1) whatever the tests answer. ``with_count``: a second output holds how
    many tests answered False (schedule-dependent: spec/pallas_mosaic_gpu.py BARRIER_TEST)."""
    producer = 1 if poll else 0

    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl

        def body(x_gmem, o_gmem, *rest):
            *count, smem, loaded, ready = rest
            wg = jax.lax.axis_index("wg")

            @pl.when(wg == producer)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem, smem, loaded)
                plgpu.barrier_wait(loaded)
                smem[...] = smem[...] + 1.0
                plgpu.barrier_arrive(ready)

            @pl.when(wg == 1 - producer)
            def _():
                if poll:
                    _, failed = jax.lax.while_loop(
                        lambda c: ~c[0], lambda c: (plgpu.barrier_test(ready), c[1] + 1),
                        (plgpu.barrier_test(ready), jnp.int32(0)))
                    if count:
                        count[0][...] = jnp.full(count[0].shape, failed, jnp.int32)
                else:
                    plgpu.barrier_wait(ready)
                smem[...] = smem[...] * 2.0
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(smem, o_gmem)
                plgpu.wait_smem_to_gmem(0)
        out = jax.ShapeDtypeStruct(shape, jnp.float32)
        return plgpu.kernel(body, out_type=(out, jax.ShapeDtypeStruct((128,), jnp.int32))
                            if with_count else out,
                            scratch_types=[plgpu.SMEM(shape, jnp.float32),
                                           plgpu.Barrier(num_arrivals=1),
                                           plgpu.Barrier(num_arrivals=1)],
                            num_threads=2, thread_name="wg", interpret=interpret)
    return build


def build_wgmma(m, k, n, wait=True, dtype=jnp.float16, acc_dtype=jnp.float32):
    """acc = a @ b by one wgmma (a, b of ``dtype`` through tiled, 128-byte swizzled SMEM);
    without ``wait`` the accumulator is read with no wgmma_wait (undefined: the tests trigger
    it)."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl

        def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, barrier):
            plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
            plgpu.copy_gmem_to_smem(b_gmem, b_smem, barrier)
            plgpu.barrier_wait(barrier)

            def compute(acc_ref):
                plgpu.wgmma(acc_ref, a_smem, b_smem)
                if wait:
                    plgpu.wgmma_wait(0)
                    return acc_ref[...]
                return plgpu.wgmma_accumulator_load(acc_ref, wait_n=None)
            o_gmem[...] = pl.run_scoped(compute, plgpu.ACC((m, n), acc_dtype))
        t = (plgpu.TilingTransform((8, 128 // np.dtype(dtype).itemsize)),
             plgpu.SwizzleTransform(128))
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((m, n), acc_dtype),
                            scratch_types=[plgpu.SMEM((m, k), dtype, transforms=t),
                                           plgpu.SMEM((k, n), dtype, transforms=t),
                                           plgpu.Barrier(num_arrivals=2)], interpret=interpret)
    return build


def build_tcgen05(m, k, n, *, commit="mma_barrier"):
    """acc = a[:, :k/2] @ b[:k/2] + a[:, k/2:] @ b[k/2:] by two tcgen05_mma into TMEM (the second
    accumulating), read back with async_load_tmem. ``commit`` says how the MMAs' completion is
    observed: "mma_barrier" (the barrier operand of the last MMA), "commit_arrive"
    (tcgen05_commit_arrive after them), or "none" (no wait: undefined, the tests trigger it)."""
    def build(interpret):
        plgpu = _plgpu()
        half = k // 2

        def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, acc, tma_bar, mma_bar):
            plgpu.copy_gmem_to_smem(a_gmem, a_smem, tma_bar)
            plgpu.copy_gmem_to_smem(b_gmem, b_smem, tma_bar)
            plgpu.barrier_wait(tma_bar)
            plgpu.tcgen05_mma(acc, a_smem.at[:, :half], b_smem.at[:half], accumulate=False)
            last = mma_bar if commit == "mma_barrier" else None
            plgpu.tcgen05_mma(acc, a_smem.at[:, half:], b_smem.at[half:], last, accumulate=True)
            if commit == "commit_arrive":
                plgpu.tcgen05_commit_arrive(mma_bar)
            if commit != "none":
                plgpu.barrier_wait(mma_bar)
            o_gmem[...] = plgpu.async_load_tmem(acc)
            plgpu.wait_load_tmem()
        t = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
                            scratch_types=[plgpu.SMEM((m, k), jnp.float16, transforms=t),
                                           plgpu.SMEM((k, n), jnp.float16, transforms=t),
                                           plgpu.TMEM((m, n), jnp.float32),
                                           plgpu.Barrier(num_arrivals=2),
                                           plgpu.Barrier(orders_tensor_core=True)],
                            interpret=interpret)
    return build


def build_reduction(kind, shape):
    """plgpu.<kind> (sum/max/min/prod: mosaic_gpu_reduce_*) of a register array over axis 1, in
    GMEM refs read and written directly."""
    def build(interpret):
        plgpu = _plgpu()
        reduce = getattr(plgpu, kind)

        def body(x_gmem, o_gmem):
            o_gmem[...] = reduce(x_gmem[...], axis=1)
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape[:1], jnp.float32),
                            interpret=interpret)
    return build


def _abs_rows(x):
    return [np.abs(np.asarray(x, np.float64)).sum(axis=1)]


def build_cp_async(shape):
    """x (2 slabs) into SMEM by two cp.async copies (copy_gmem_to_smem without a barrier: Mosaic
    GPU before Hopper), awaited with wait_gmem_to_smem(0), then doubled out of SMEM."""
    def build(interpret):
        plgpu = _plgpu()

        def body(x_gmem, o_gmem, smem):
            plgpu.copy_gmem_to_smem(x_gmem.at[0], smem.at[0])
            plgpu.copy_gmem_to_smem(x_gmem.at[1], smem.at[1])
            plgpu.wait_gmem_to_smem(0)
            o_gmem[...] = smem[...] * 2.0
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2, *shape), jnp.float32),
                            scratch_types=[plgpu.SMEM((2, *shape), jnp.float32)],
                            interpret=interpret)
    return build


def build_cluster_store(shape, wait=True):
    """Block 0 of a 2-block cluster stores 2x its input (registers) into block 1's SMEM with
    async_store_smem; block 1 waits on its barrier (unless not ``wait``: undefined, the tests
    trigger it) and writes the SMEM out."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl

        def body(x_gmem, o_gmem, smem, barrier):
            b = jax.lax.axis_index("c")

            @pl.when(b == 0)
            def _():
                plgpu.async_store_smem(x_gmem[...] * 2.0, smem, barrier, cluster_idx=1,
                                       cluster_dim="c")

            @pl.when(b == 1)
            def _():
                if wait:
                    plgpu.barrier_wait(barrier)
                o_gmem[...] = smem[...]
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                            cluster=(2,), cluster_names=("c",),
                            scratch_types=[plgpu.SMEM(shape, jnp.float32),
                                           plgpu.Barrier(num_arrivals=1)],
                            interpret=interpret)
    return build


def build_mma(m, k, n):
    """acc + a @ b by plgpu.mma (Ampere mma.sync, registers only)."""
    def build(interpret):
        plgpu = _plgpu()

        def body(acc_gmem, a_gmem, b_gmem, o_gmem):
            o_gmem[...] = plgpu.mma(acc_gmem[...], a_gmem[...], b_gmem[...])
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
                            interpret=interpret)
    return build


def _abs_acc_dot(acc, a, b):
    return [np.abs(np.asarray(acc, np.float64)) + _abs_dot(a, b)[0]]


def build_tmem_round_trip(shape, via="registers"):
    """x into TMEM and back, doubled: from registers (async_store_tmem, commit_tmem) or from SMEM
    (a TMA copy in, async_copy_smem_to_tmem, tcgen05_commit_arrive)."""
    def build(interpret):
        plgpu = _plgpu()

        def body(x_gmem, o_gmem, smem, tmem, tma_bar, tc_bar):
            if via == "registers":
                plgpu.async_store_tmem(tmem, x_gmem[...])
                plgpu.commit_tmem()
            else:
                plgpu.copy_gmem_to_smem(x_gmem, smem, tma_bar)
                plgpu.barrier_wait(tma_bar)
                plgpu.async_copy_smem_to_tmem(smem, tmem)
                plgpu.tcgen05_commit_arrive(tc_bar)
                plgpu.barrier_wait(tc_bar)
            o_gmem[...] = plgpu.async_load_tmem(tmem) * 2.0
            plgpu.wait_load_tmem()
        t = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128))
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                            scratch_types=[plgpu.SMEM(shape, jnp.float32, transforms=t),
                                           plgpu.TMEM(shape, jnp.float32),
                                           plgpu.Barrier(num_arrivals=1),
                                           plgpu.Barrier(orders_tensor_core=True)],
                            interpret=interpret)
    return build


def build_dynamic_scheduling(blocks, rows=8, cols=128):
    """o = 2 x over a grid of ``blocks`` clusters whose work is claimed with
    plgpu.dynamic_scheduling_loop (try_cluster_cancel / query_cluster_cancel): every block of
    rows is computed once whichever clusters claim them."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl

        def body(x_gmem, o_gmem):
            @plgpu.dynamic_scheduling_loop(grid_names=("g",))
            def _(info):
                (i,) = info.index
                o_gmem[pl.ds(i * rows, rows)] = x_gmem[pl.ds(i * rows, rows)] * 2.0
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((blocks * rows, cols),
                                                                jnp.float32),
                            grid=(blocks,), grid_names=("g",), interpret=interpret)
    return build


def build_cluster_multicast(shape, blocks=2, *, every_block_issues=True):
    """A cluster of ``blocks`` blocks: a multicast TMA copy (collective_axes) gives every block
    all of x, each block's barrier counting all of its bytes; block b writes (b + 1) * x into
    its rows of the output after a cluster barrier that every block arrives on. Without
    ``every_block_issues`` block 1 skips its share of the multicast (undefined: a deadlock)."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl
        rows = shape[0]

        def body(x_gmem, o_gmem, smem, loaded, everyone):
            b = jax.lax.axis_index("c")

            @pl.when(jnp.logical_or(every_block_issues, b == 0))
            def _():
                plgpu.copy_gmem_to_smem(x_gmem, smem, loaded, collective_axes="c")
            plgpu.barrier_wait(loaded)
            plgpu.barrier_arrive(everyone)
            plgpu.barrier_wait(everyone)
            o_gmem[pl.ds(b * rows, rows)] = smem[...] * (b + 1).astype(jnp.float32)
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((blocks * rows,) + shape[1:],
                                                                jnp.float32),
                            cluster=(blocks,), cluster_names=("c",),
                            scratch_types=[plgpu.SMEM(shape, jnp.float32),
                                           plgpu.Barrier(num_arrivals=1),
                                           plgpu.ClusterBarrier(collective_axes=("c",))],
                            interpret=interpret)
    return build


def build_cluster_partitioned(shape, blocks=2):
    """A PARTITIONED copy over a cluster: block b receives rows b of x (equal slices along axis
    0), only the leader's barrier tracks it; after a cluster barrier each block stores its
    slice doubled."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl
        rows = shape[0] // blocks

        def body(x_gmem, o_gmem, smem, loaded, everyone):
            b = jax.lax.axis_index("c")
            plgpu.copy_gmem_to_smem(x_gmem, smem, loaded, collective_axes="c",
                                    leader_tracked=plgpu.CopyPartition.PARTITIONED(0))

            @pl.when(b == 0)
            def _():
                plgpu.barrier_wait(loaded)
            plgpu.barrier_arrive(everyone)   # the leader arrives after its wait: the data is in
            plgpu.barrier_wait(everyone)
            o_gmem[pl.ds(b * rows, rows)] = smem[...] * 2.0
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                            cluster=(blocks,), cluster_names=("c",),
                            scratch_types=[plgpu.SMEM((rows,) + shape[1:], jnp.float32),
                                           plgpu.Barrier(num_arrivals=1),
                                           plgpu.ClusterBarrier(collective_axes=("c",))],
                            interpret=interpret)
    return build


def build_semaphore_handoff(shape, signal="semaphore_signal"):
    """Warpgroup 0 writes x + 1 to the output and signals a semaphore by 2 (semaphore_signal or
    semaphore_signal_parallel); warpgroup 1 waits for 2 and doubles the output."""
    def build(interpret):
        plgpu = _plgpu()
        from jax.experimental import pallas as pl

        def body(x_gmem, o_gmem, sem):
            wg = jax.lax.axis_index("wg")

            @pl.when(wg == 0)
            def _():
                o_gmem[...] = x_gmem[...] + 1.0
                if signal == "semaphore_signal":
                    plgpu.semaphore_signal(sem, 2)
                else:
                    plgpu.semaphore_signal_parallel(plgpu.SemaphoreSignal(sem, device_id=None,
                                                                          inc=2))

            @pl.when(wg == 1)
            def _():
                plgpu.semaphore_wait(sem, 2)
                o_gmem[...] = o_gmem[...] * 2.0
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                            num_threads=2, thread_name="wg",
                            scratch_types=[plgpu.SemaphoreType.REGULAR], interpret=interpret)
    return build


def _abs_dot(x, y):
    return [np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64))]


# ---------------------------------------------------------------------------- shipped kernels
@contextlib.contextmanager
def _test_util_placeholder():
    """The shipped Mosaic GPU kernels import ``jax._src.test_util`` and never use it (``# noqa:
    F401``); test_util needs absl-py. Where absl-py is missing, an empty module stands in for that
    one import (and is removed after it), so the kernels trace without it."""
    name = "jax._src.test_util"
    try:
        importlib.import_module(name)
        yield
        return
    except ImportError:
        pass
    sys.modules[name] = types.ModuleType(name)
    try:
        yield
    finally:
        sys.modules.pop(name, None)


def shipped_module(name: str):
    """``jax.experimental.pallas.ops.gpu.<name>`` (see ``_test_util_placeholder``)."""
    full = f"jax.experimental.pallas.ops.gpu.{name}"
    if full in sys.modules:
        return sys.modules[full]
    with _test_util_placeholder():
        return importlib.import_module(full)


def _on_gpu() -> bool:
    try:
        return jax.devices()[0].platform == "gpu"
    except RuntimeError:
        return False


def shipped(make, device="h100"):
    """Build a shipped kernel (which takes no ``interpret``) for one Pallas mode: JAX's Mosaic GPU
    interpret mode through ``force_gpu_interpret_mode``; compiled or the reference as is. Without
    a GPU it traces under the emulated ``device`` (interp/emulated_device.py: SM count, CUDA
    version)."""
    def build(interpret):
        fn = make()

        def run(*args):
            from interp.emulated_device import tracing
            plgpu = _plgpu()
            emulate = tracing(None if _on_gpu() else device)
            interp_mode = (_force_gpu_interpret_mode(plgpu)(interpret)
                           if interpret not in (None, True, False) else contextlib.nullcontext())
            with emulate, interp_mode:
                return fn(*args)
        return run
    return build


def _force_gpu_interpret_mode(plgpu):
    """plgpu.force_gpu_interpret_mode (JAX >= 0.11); JAX 0.10.2 has it only in
    jax._src.pallas.mosaic_gpu.interpret.params."""
    force = getattr(plgpu, "force_gpu_interpret_mode", None)
    if force is None:
        from jax._src.pallas.mosaic_gpu.interpret.params import force_gpu_interpret_mode as force
    return force


def _hopper_matmul(tile_m=128, tile_n=128, tile_k=64, steps=2):
    hm = shipped_module("hopper_matmul_mgpu")
    cfg = hm.TuningConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, max_concurrent_steps=steps)
    return lambda a, b: hm.matmul(a, b, None, config=cfg)


def _attention(causal, block_q=64, block_kv=64, steps=2):
    am = shipped_module("attention_mgpu")
    cfg = am.TuningConfig(block_q=block_q, block_kv=block_kv, max_concurrent_steps=steps,
                          causal=causal)
    return functools.partial(am.attention, config=cfg)


def _blackwell_ragged_dot(sizes):
    """blackwell_ragged_dot_mgpu on 2-CTA clusters (its collective=False path reads a cluster
    axis it does not create), the group sizes fixed by the case."""
    rd = shipped_module("blackwell_ragged_dot_mgpu")
    bm = shipped_module("blackwell_matmul_mgpu")
    cfg = rd.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          collective=True, grid_tile_width=1,
                          grid_minor_dim=bm.MatmulDimension.N)
    return lambda lhs, rhs: rd.ragged_dot_kernel(lhs, rhs, jnp.asarray(sizes, jnp.int32), cfg)


def _grouped_abs_dot(sizes):
    def bound(lhs, rhs):
        group = np.repeat(np.arange(len(sizes)), sizes)
        return [np.einsum("mk,mkn->mn", np.abs(lhs.astype(np.float64)),
                          np.abs(rhs.astype(np.float64))[group])]
    return bound


def _mixed_type_matmul(cluster):
    mm = shipped_module("hopper_mixed_type_matmul_mgpu")
    cfg = mm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          cluster_dimension=None if cluster is None else
                          mm.MatmulDimension[cluster])
    return lambda a, b: mm.mixed_matmul_kernel(a, b, out_dtype=jnp.bfloat16, config=cfg)


def attention_claim(q, k, v, causal):
    """What attention_mgpu.attention computes: softmax(q k^T) v per batch and head (layout
    [batch, seq, heads, head_dim]; no 1/sqrt(d) scaling, as attention_mgpu.attention_reference),
    the causal variant masking keys after the query."""
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
    hi = jax.lax.Precision.HIGHEST
    s = jnp.einsum("bqhd,bkhd->bhqk", q32, k32, precision=hi)
    if causal:
        n = q.shape[1]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v32,
                      precision=hi).astype(q.dtype)


def attention_mode():
    """|o - o'| <= (1 * eps16) max|v| + 0.5 eps16 |o|: the kernel rounds the probabilities p to
    f16 before the p v wgmma (1 ulp of p, summed over a convex combination, moves o by at most
    eps16 max|v| between two implementations that differ in p by less than an f16 rounding)
    and rounds o once to f16 (0.5 eps16 |o|); the f32 softmax and accumulation errors are orders
    of magnitude below. ``magnitude`` is max|v| (Case.magnitude)."""
    return C.abs_rel(1, 0.5, "f16-attention")


def _unavailable() -> str:
    """Case.not_applicable of every case here: why this installation cannot import Mosaic GPU
    (JAX 0.10.2 needs absl-py for it: the project's ``mosaic-gpu`` extra)."""
    try:
        _plgpu()
        return ""
    except Exception as e:  # noqa: BLE001  (listed as not applicable with the reason, never dropped)
        return applicable_if(False, f"jax.experimental.pallas.mosaic_gpu does not import "
                                    f"({type(e).__name__}: {e})")


def _no_tmem() -> str:
    """Why Blackwell cases do not apply here ('' where they do): JAX's Mosaic GPU has TMEM and
    tcgen05 from 0.11; JAX's GPU interpret mode has them from 0.12 (0.10.2's raises
    'Unsupported memory space: tmem')."""
    try:
        plgpu = _plgpu()
    except Exception:  # noqa: BLE001  (_unavailable says why)
        return ""
    return applicable_if(hasattr(plgpu, "tcgen05_mma") and hasattr(plgpu, "TMEM"),
                         "this JAX's Mosaic GPU has no tcgen05_mma / TMEM")


def _no_api(name) -> str:
    try:
        plgpu = _plgpu()
    except Exception:  # noqa: BLE001  (_unavailable says why)
        return ""
    return applicable_if(hasattr(plgpu, name), f"this JAX's Mosaic GPU has no plgpu.{name}")


def cases():
    why = _unavailable()
    for case in _cases():
        yield dataclasses.replace(case, not_applicable=why) if why else case


def _cases():
    yield _case("tma/f32/64x128", build_tma((64, 128)), _rows([(64, 128)]),
                primitives=("mpmd_map", "copy_gmem_to_smem", "barrier_wait", "copy_smem_to_gmem",
                            "wait_smem_to_gmem", "commit_smem"))
    tiled = (lambda: _plgpu().TilingTransform((8, 32)), lambda: _plgpu().SwizzleTransform(128))
    yield _case("tma_tiled_swizzled/f32/64x64", build_tma((64, 64), tiled), _rows([(64, 64)]),
                primitives=("mpmd_map", "copy_gmem_to_smem", "copy_smem_to_gmem"))
    yield _case("warpgroups_producer_consumer/f32/64x128", build_producer_consumer((64, 128)),
                _rows([(64, 128)]), primitives=("mpmd_map", "axis_index", "barrier_wait",
                                                "barrier_arrive", "copy_gmem_to_smem"))
    yield _case("barrier_test_poll/f32/64x128", build_producer_consumer((64, 128), poll=True),
                _rows([(64, 128)]), primitives=("mpmd_map", "barrier_test", "barrier_arrive",
                                                "copy_gmem_to_smem", "while"))
    yield _case("wgmma/f16/64x128x128", build_wgmma(64, 128, 128),
                _rows([(64, 128), (128, 128)], F16, low=-2, high=2), modes=C.dot_product(128),
                dot_bound=_abs_dot, primitives=("mpmd_map", "wgmma_ref", "wgmma_wait"))
    for commit in ("mma_barrier", "commit_arrive"):
        yield _case(f"tcgen05/f16/128x128x128/{commit}", build_tcgen05(128, 128, 128, commit=commit),
                    _rows([(128, 128), (128, 128)], F16, low=-2, high=2),
                    modes=C.dot_product(128), dot_bound=_abs_dot, not_applicable=_no_tmem(),
                    primitives=("mpmd_map", "tcgen05_mma", "async_load", "wait_load_tmem") +
                    (("tcgen05_commit_arrive",) if commit == "commit_arrive" else ()))
    for via, prims in (("registers", ("async_store_tmem", "commit_tmem")),
                       ("smem", ("async_copy_smem_to_tmem", "tcgen05_commit_arrive"))):
        yield _case(f"tmem_round_trip/{via}/f32/128x128", build_tmem_round_trip((128, 128), via),
                    _rows([(128, 128)]), not_applicable=_no_tmem(),
                    primitives=("mpmd_map", "async_load", "wait_load_tmem") + prims)
    yield _case("dynamic_scheduling/f32/6x8x128", build_dynamic_scheduling(6), _rows([(48, 128)]),
                not_applicable=_no_api("dynamic_scheduling_loop"),
                primitives=("mpmd_map", "try_cluster_cancel", "query_cluster_cancel",
                            "inline_mgpu"))
    yield _case("cluster_multicast/f32/2x64x128", build_cluster_multicast((64, 128)),
                _rows([(64, 128)]), not_applicable=_no_api("ClusterBarrier"),
                primitives=("mpmd_map", "copy_gmem_to_smem", "barrier_arrive", "barrier_wait"))
    yield _case("cluster_partitioned/f32/2x64x128", build_cluster_partitioned((128, 128)),
                _rows([(128, 128)]), not_applicable=_no_api("CopyPartition"),
                primitives=("mpmd_map", "copy_gmem_to_smem", "barrier_arrive", "barrier_wait"))
    for signal in ("semaphore_signal", "semaphore_signal_parallel"):
        yield _case(f"semaphores/{signal}/f32/8x128", build_semaphore_handoff((8, 128), signal),
                    _rows([(8, 128)]), not_applicable=_no_api("semaphore_signal_parallel"),
                    primitives=("mpmd_map", signal, "semaphore_wait"))
    for kind in ("sum", "max", "min", "prod"):
        # prod: values near 1 (|x| in [0.9, 1.1]) keep 64 factors finite and normal.
        inputs = (_rows([(128, 64)], low=0.9, high=1.1) if kind == "prod" else _rows([(128, 64)]))
        # The hardware sums in its shuffle-tree order: DOT_PRODUCT over the 64 terms (spec
        # REDUCTIONS); max/min are exact; prod is correctly rounded here, a chain of roundings
        # there (64 roundings: 64 ulp).
        mode = {"sum": dict(modes=C.dot_product(64), dot_bound=_abs_rows),
                "prod": dict(modes=C.ulp(64, "mosaic-gpu-reduce-prod-chain"))}.get(kind, {})
        yield _case(f"reductions/{kind}/f32/128x64", build_reduction(kind, (128, 64)), inputs,
                    not_applicable=_no_api("sum"), primitives=("mpmd_map",
                                                               f"mosaic_gpu_reduce_{kind}"),
                    **mode)
    yield _case("cluster_store/f32/2x64x128", build_cluster_store((64, 128)), _rows([(64, 128)]),
                not_applicable=_no_api("async_store_smem"),
                primitives=("mpmd_map", "async_store_smem", "barrier_wait"))
    yield _case("cp_async/f32/2x64x128", build_cp_async((64, 128)), _rows([(2, 64, 128)]),
                not_applicable=_no_api("wait_gmem_to_smem"),
                primitives=("mpmd_map", "copy_gmem_to_smem", "wait_gmem_to_smem"))
    yield _case("mma/f16/64x32x64", build_mma(64, 32, 64),
                lambda rng: [random_array(rng, F32, (64, 64), specials=0),
                             *_rows([(64, 32), (32, 64)], F16, low=-2, high=2)(rng)],
                not_applicable=_no_api("mma"), modes=C.dot_product(33), dot_bound=_abs_acc_dot,
                primitives=("mpmd_map", "mma"))
    for (m, k, n), prof in (((512, 256, 512), "quick"), ((256, 512, 256), "nightly")):
        sid = f"{m}x{k}x{n}"
        inputs = _rows([(m, k), (k, n)], F16, low=-2, high=2)
        yield _case(f"ops/hopper_matmul/f16/{sid}", shipped(_hopper_matmul), inputs,
                    modes=C.dot_product(k), dot_bound=_abs_dot, profile=prof, examples=2,
                    primitives=("mpmd_map", "wgmma_ref", "copy_gmem_to_smem"))
        yield Case(id=f"pallas_mosaic_gpu/claims/hopper_matmul_vs_dot/f16/{sid}", fn=None,
                   build=shipped(_hopper_matmul), inputs=inputs, kind=PALLAS,
                   pallas_targets=("mosaic-gpu",), modes=C.dot_product(k), dot_bound=_abs_dot,
                   reference_fn=lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32
                                                     ).astype(a.dtype),
                   primitives=("mpmd_map", "wgmma_ref"), profile=prof, examples=2)
    sizes = (128, 64, 192, 128)
    yield _case("ops/blackwell_ragged_dot/f16/512x128x256/4groups",
                shipped(lambda: _blackwell_ragged_dot(sizes), "b200"),
                _rows([(512, 128), (4, 128, 256)], F16, low=-2, high=2),
                modes=C.dot_product(128), dot_bound=_grouped_abs_dot(sizes),
                not_applicable=_no_tmem(), examples=1,
                primitives=("mpmd_map", "tcgen05_mma", "copy_gmem_to_smem"))
    for cluster in (None, "M"):
        yield _case(f"ops/hopper_mixed_type_matmul/int8xbf16/256x256x256/cluster={cluster}",
                    shipped(lambda cluster=cluster: _mixed_type_matmul(cluster)),
                    lambda rng: [rng.integers(-128, 127, (256, 256)).astype(np.int8),
                                 random_array(rng, np.dtype(jnp.bfloat16), (256, 256),
                                              specials=0, low=-2, high=2)],
                    modes=C.dot_product(256), dot_bound=_abs_dot, examples=1,
                    not_applicable=_no_api("ClusterBarrier"),
                    primitives=("mpmd_map", "wgmma_ref", "copy_gmem_to_smem"))
    for causal in (False, True):
        inputs = _rows([(1, 256, 2, 64)] * 3, F16, low=-3, high=3)
        yield _case(f"ops/attention/f16/1x256x2x64/causal={causal}",
                    shipped(lambda causal=causal: _attention(causal)), inputs,
                    modes=attention_mode(), magnitude=lambda q, k, v: float(np.abs(v).max()),
                    primitives=("mpmd_map", "wgmma_ref", "run_state"), examples=2)
        yield Case(id=f"pallas_mosaic_gpu/claims/attention_vs_softmax/f16/1x256x2x64/"
                      f"causal={causal}", fn=None,
                   build=shipped(lambda causal=causal: _attention(causal)), inputs=inputs,
                   kind=PALLAS, pallas_targets=("mosaic-gpu",), modes=attention_mode(),
                   magnitude=lambda q, k, v: float(np.abs(v).max()),
                   reference_fn=functools.partial(attention_claim, causal=causal),
                   primitives=("mpmd_map", "wgmma_ref"), examples=2)
