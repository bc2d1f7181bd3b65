"""SPMD programs: shard_map collectives alone and in small parallel programs, on meshes of 1, 2, 4
and 8 devices (1-D and 2-D). Semantics: spec/spmd.py.

A case needs as many devices as its mesh has (``needs`` holds "devices:N"): the reference
interprets them, an XLA runner needs them for real (xla:cpu gets 8 host devices from the worker's
``--xla_force_host_platform_device_count=8``) and says backend-unsupported when it has fewer.
The mesh is built when the program is traced: a concrete Mesh where JAX has the devices, an
AbstractMesh (all the reference needs to trace) otherwise.

Modes: integer and data-movement outputs EXACT; float psum / psum_scatter DOT_PRODUCT(K = number
of participants) with bound sum|x| over the participants (spec/spmd.py: XLA leaves the all-reduce
order to the implementation); whole programs ABS_REL with multipliers measured on XLA:CPU (8 host
devices) against the reference, seeds 0..4, jax 0.10.2 and 0.12.0.1, times 8, as
conformance/cases/programs.py does (PROGRAMS below).
"""
from __future__ import annotations

import math
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from spec import compliance as C

from ..case import PALLAS, Case, applicable_if, random_array

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)

# (mesh shape, axis names): 1, 2, 4 and 8 devices in one dimension, 8 in two.
MESHES = {"1": ((1,), ("x",)), "2": ((2,), ("x",)), "4": ((4,), ("x",)), "8": ((8,), ("x",)),
          "2x4": ((2, 4), ("x", "y"))}


def make_mesh(shape, names):
    """A Mesh of the first prod(shape) devices, or an AbstractMesh where JAX has fewer."""
    n = math.prod(shape)
    devices = jax.devices()
    if len(devices) >= n:
        return jax.sharding.Mesh(np.array(devices[:n]).reshape(shape), names)
    auto = (jax.sharding.AxisType.Auto,) * len(shape)
    return jax.sharding.AbstractMesh(tuple(shape), tuple(names), axis_types=auto)


def shard_map(f, mesh, in_specs, out_specs, **kw):
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **kw)


def _needs(shape) -> frozenset:
    return frozenset({f"devices:{math.prod(shape)}"})


# --- collectives alone -------------------------------------------------------------------------

def _collectives(shape, names):
    """One program per mesh: every collective over all the mesh's axes on a (n*4, 8) input split
    over them along dimension 0. pmax/pmin take integers: XLA:CPU's float all-reduce max drops
    NaN where lax.max propagates it (spec/spmd.py pmax)."""
    n = math.prod(shape)
    axes = tuple(names)

    def body(xf, xi):
        ring = [(j, (j + 1) % n) for j in range(n)]
        partial_perm = [(j, j + 1) for j in range(0, n - 1, 2)]   # odd devices receive, even get zeros
        return (lax.psum(xf, axes), lax.psum(xi, axes), lax.pmax(xi, axes), lax.pmin(xi, axes),
                lax.all_gather(xi, axes, tiled=True), lax.all_gather(xi, axes, axis=1),
                lax.ppermute(xf, axes, ring), lax.ppermute(xi, axes, partial_perm),
                lax.psum_scatter(xf, axes, scatter_dimension=1, tiled=True),
                lax.all_to_all(xi, axes, 1, 1, tiled=True),
                jnp.broadcast_to(lax.axis_index(axes), (1,)))

    split = P(axes)
    out_specs = (P(), P(), P(), P(), P(), P(), split, split, split, split, split)

    def fn(xf, xi):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (split, split), out_specs, check_vma=False)(xf, xi)

    def inputs(rng):
        return [random_array(rng, F32, (n * 4, 8), specials=0.1),
                random_array(rng, I32, (n * 4, 8))]

    def bound(xf, xi):
        blocks = np.abs(xf.astype(np.float64)).reshape(n, 4, 8)
        total = blocks.sum(0)
        scatter = np.concatenate([total.reshape(4, n, 8 // n)[:, j] for j in range(n)], axis=0)
        return [total, None, None, None, None, None, None, None, scatter, None, None]

    exact = C.exact("definition")
    modes = [C.dot_product(n), exact, exact, exact, exact, exact, exact, exact, C.dot_product(n), exact, exact]
    return fn, inputs, modes, bound


def _two_d(shape, names):
    """Collectives over one axis of a 2-D mesh, over both in the other order, and axis_index_groups."""
    x_, y_ = names

    def body(xi, xf):
        return (lax.psum(xi, y_), lax.psum(xf, x_), lax.all_gather(xi, (y_, x_), tiled=True),
                lax.ppermute(xi, y_, [(0, 3), (3, 0), (1, 2)]),
                lax.all_to_all(xi, x_, 0, 1, tiled=True),
                jnp.broadcast_to(lax.axis_index((y_, x_)), (1, 1)))

    def fn(xi, xf):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (P(x_, y_), P(x_, y_)),
                         (P(x_), P(None, y_), P(), P(x_, y_), P(x_, y_), P(x_, y_)), check_vma=False)(xi, xf)

    def inputs(rng):
        return [random_array(rng, I32, (8, 16)), random_array(rng, F32, (8, 16), specials=0.1)]

    def bound(xi, xf):
        return [None, np.abs(xf.astype(np.float64)).reshape(2, 4, 16).sum(0), None, None, None, None]

    exact = C.exact("definition")
    return fn, inputs, [exact, C.dot_product(2), exact, exact, exact, exact], bound


def _float_extrema(shape, names):
    """Float pmax/pmin with NaN, inf and signed zeros mixed in (XLA:CPU drops NaN here: a
    recorded divergence, spec/divergences.py)."""
    axes = tuple(names)

    def fn(x):
        mesh = make_mesh(shape, names)
        return shard_map(lambda a: (lax.pmax(a, axes), lax.pmin(a, axes)), mesh, P(axes), (P(), P()))(x)
    return fn


# --- programs ------------------------------------------------------------------------------------

def _mlp_loss(x, w1, w2, y):
    h = jnp.tanh(x @ w1)
    return jnp.mean((h @ w2 - y) ** 2)


def data_parallel_step(shape, names):
    """One SGD step of an MLP, the batch split over every mesh axis, gradients averaged by pmean."""
    axes = tuple(names)

    def step(x, y, w1, w2):
        grads = jax.grad(_mlp_loss, argnums=(1, 2))(x, w1, w2, y)
        g1, g2 = lax.pmean(grads, axes)
        return w1 - 0.5 * g1, w2 - 0.5 * g2

    def fn(x, y, w1, w2):
        mesh = make_mesh(shape, names)
        return shard_map(step, mesh, (P(axes), P(axes), P(), P()), (P(), P()))(x, y, w1, w2)
    n = math.prod(shape)
    return fn, [(4 * n, 8), (4 * n, 4), (8, 16), (16, 4)]


def tensor_parallel_matmul(shape, names):
    """Megatron-style: all_gather the row-split activations, multiply by the column-split weight,
    psum_scatter the row-parallel second matmul back to row-split outputs."""
    axes = tuple(names)

    def body(x, w1, w2):
        xg = lax.all_gather(x, axes, tiled=True)              # (B, D)
        h = jnp.tanh(xg @ w1)                                  # (B, H/n)
        return lax.psum_scatter(h @ w2, axes, scatter_dimension=0, tiled=True)   # (B/n, D)

    def fn(x, w1, w2):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (P(axes), P(None, axes), P(axes)), P(axes))(x, w1, w2)
    n = math.prod(shape)
    return fn, [(2 * n, 8), (8, 4 * n), (4 * n, 8)]


def ring_attention(shape, names):
    """Blockwise (flash-style) attention with the keys/values passed around a ring by ppermute."""
    axes = tuple(names)
    n = math.prod(shape)

    def body(q, k, v):
        perm = [(j, (j + 1) % n) for j in range(n)]

        def hop(carry, _):
            m, l, acc, k, v = carry
            s = q @ k.T / np.float32(np.sqrt(q.shape[-1]))
            m_new = jnp.maximum(m, s.max(-1, keepdims=True))
            p = jnp.exp(s - m_new)
            scale = jnp.exp(m - m_new)
            carry = (m_new, l * scale + p.sum(-1, keepdims=True), acc * scale + p @ v,
                     lax.ppermute(k, axes, perm), lax.ppermute(v, axes, perm))
            return carry, None
        init = (jnp.full((q.shape[0], 1), -jnp.inf, q.dtype), jnp.zeros((q.shape[0], 1), q.dtype),
                jnp.zeros_like(q), k, v)
        (m, l, acc, _, _), _ = lax.scan(hop, init, None, length=n)
        return acc / l

    def fn(q, k, v):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (P(axes), P(axes), P(axes)), P(axes), check_vma=False)(q, k, v)
    return fn, [(4 * n, 8), (4 * n, 8), (4 * n, 8)]


def pipeline(shape, names):
    """A GPipe-style pipeline: stage s applies its layer, microbatches move to the next stage by
    ppermute; after n + m - 1 ticks the last stage holds the outputs."""
    axes = tuple(names)
    n = math.prod(shape)
    micro = 2

    def body(xs, w):
        stage = lax.axis_index(axes)
        w = w[0]
        fwd = [(j, j + 1) for j in range(n - 1)]

        def tick(carry, t):
            buf, outs = carry
            feed = jnp.where(t < micro, xs[jnp.minimum(t, micro - 1)], 0.0)
            inp = jnp.where(stage == 0, feed, buf)
            out = jnp.tanh(inp @ w)
            done = t - (n - 1)
            outs = jnp.where((stage == n - 1) & (done >= 0),
                             outs.at[jnp.clip(done, 0, micro - 1)].set(out), outs)
            return (lax.ppermute(out, axes, fwd), outs), None
        init = (jnp.zeros_like(xs[0]), jnp.zeros_like(xs))
        (_, outs), _ = lax.scan(tick, init, jnp.arange(n + micro - 1))
        return lax.psum(outs, axes)     # only the last stage's outputs are non-zero

    def fn(xs, w):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (P(), P(axes)), P(), check_vma=False)(xs, w)
    return fn, [(micro, 4, 8), (n, 8, 8)]


def moe_all_to_all(shape, names):
    """Mixture-of-experts dispatch: each device's tokens are bucketed per expert (one expert per
    device), exchanged by all_to_all, transformed by the local expert, and sent back."""
    axes = tuple(names)
    n = math.prod(shape)
    cap = 2

    def body(x, w):
        tokens = x.reshape(n, cap, x.shape[-1])                  # bucket e goes to expert e
        received = lax.all_to_all(tokens, axes, 0, 0, tiled=True)
        out = jnp.tanh(received @ w[0])
        back = lax.all_to_all(out, axes, 0, 0, tiled=True)
        return back.reshape(x.shape)

    def fn(x, w):
        mesh = make_mesh(shape, names)
        return shard_map(body, mesh, (P(axes), P(axes)), P(axes))(x, w)
    return fn, [(n * n * cap, 8), (n, 8, 8)]


PROGRAMS = {
    # name: (builder, (atol, rtol) in eps units). Measured worst |XLA:CPU - reference| /
    # (eps max|input|) over meshes 1, 2, 8, 2x4 and seeds 0..4, on JAX 0.10.2 and 0.12.0.1 (8 host
    # devices): data_parallel 2.0, tensor_parallel 5.0, ring_attention 0.76, pipeline 3.4,
    # moe 1.5; atol budgets are 8x those (at least 8), rounded up.
    "data_parallel_mlp_step": (data_parallel_step, (16, 8)),
    "tensor_parallel_matmul": (tensor_parallel_matmul, (41, 8)),
    "ring_attention": (ring_attention, (8, 8)),
    "pipeline": (pipeline, (28, 8)),
    "moe_all_to_all": (moe_all_to_all, (13, 8)),
}
PROGRAM_MESHES = ("1", "2", "8", "2x4")


def _float_inputs(shapes):
    return lambda rng: [random_array(rng, F32, s, specials=0, low=-1, high=1) for s in shapes]


def cases():
    prims = ("shard_map", "psum", "pmax", "pmin", "all_gather", "ppermute", "reduce_scatter",
             "all_to_all", "axis_index")
    for mesh_id, (shape, names) in MESHES.items():
        fn, inputs, modes, bound = _collectives(shape, names)
        yield Case(id=f"spmd/collectives/mixed/{mesh_id}", fn=fn, inputs=inputs, modes=modes,
                   dot_bound=bound, primitives=prims, needs=_needs(shape), tags=("spmd",))
    shape, names = MESHES["2x4"]
    fn, inputs, modes, bound = _two_d(shape, names)
    yield Case(id="spmd/collectives_2d_axes/mixed/2x4", fn=fn, inputs=inputs, modes=modes, dot_bound=bound,
               primitives=prims, needs=_needs(shape), tags=("spmd",))
    shape, names = MESHES["8"]
    yield Case(id="spmd/float_extrema/float32/8", fn=_float_extrema(shape, names),
               inputs=lambda rng: [random_array(rng, F32, (64, 16), specials=0.25)],
               modes=C.exact("definition"), primitives=("pmax", "pmin"), needs=_needs(shape), tags=("spmd",))
    yield from pallas_cases()
    yield from unreduced_cases()
    yield from pallas_mosaic_gpu_cases()
    for name, (build, tol) in PROGRAMS.items():
        for mesh_id in PROGRAM_MESHES:
            shape, names = MESHES[mesh_id]
            fn, shapes = build(shape, names)
            yield Case(id=f"spmd/{name}/float32/{mesh_id}", fn=fn, inputs=_float_inputs(shapes),
                       modes=C.abs_rel(*tol, source="measured"), primitives=("shard_map",),
                       needs=_needs(shape), tags=("spmd", "program"))


# --- Pallas TPU kernels across devices (interp/pallas/devices.py) -----------------------------------
# They live in the SPMD family (not pallas_tpu): what they exercise is communication between the
# devices of a shard_map, and they need "devices:N" like every case here. Kernels of the TPU
# dialect: the reference and pallas:tpu-interpret (JAX's TPU interpret mode simulates the devices
# of the shard_map in threads, remote DMAs and signals included) run them; xla:cpu runs no Pallas
# kernel (it has no Mosaic TPU lowering: LAX cases only); pallas:interpret (HLO interpret)
# discharges a kernel on one device and refuses remote DMAs (hardware_runners: "remote-dma").

def _pltpu():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu


def _pallas_call(kernel, out_shape, interpret, *, scratch=(), collective_id=None, **kw):
    from jax.experimental import pallas as pl
    pltpu = _pltpu()
    params = pltpu.CompilerParams(collective_id=collective_id) if collective_id is not None else None
    extra = {} if interpret is None else {"interpret": interpret}
    return pl.pallas_call(
        kernel, out_shape=out_shape, compiler_params=params, **extra,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, scratch_shapes=tuple(scratch),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM)), **kw)


def _ring_permute_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis, names):
    # Every device sends its block to its right neighbour along ``axis`` by a remote DMA (a MESH
    # id as a dict: the other mesh axes keep this device's coordinates).
    pltpu = _pltpu()
    right = lax.rem(lax.axis_index(axis) + 1, lax.axis_size(axis))
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id={axis: right})
    copy.start()
    copy.wait()


def _barrier_handshake_kernel(x_ref, o_ref, *, axis, names):
    # The barrier semaphore (collective_id) handshake every collective kernel starts with: signal
    # both neighbours, wait for both; then a local result that depends on the device. MESH ids
    # as tuples of coordinates along every mesh axis.
    from jax.experimental import pallas as pl
    pltpu = _pltpu()
    me, n = lax.axis_index(axis), lax.axis_size(axis)

    def neighbour(k):
        return tuple(lax.rem(me + k, n) if a == axis else lax.axis_index(a) for a in names)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=neighbour(1))
    pl.semaphore_signal(barrier, 1, device_id=neighbour(n - 1))
    pl.semaphore_wait(barrier, 2)
    o_ref[...] = x_ref[...] * 2 + me


def _signal_permute_kernel(x_ref, o_ref, send_sem, recv_sem, ready, *, axis, names):
    # Right permute addressed by LOGICAL ids (row-major over all the mesh axes, ``axis`` last):
    # the DMA's send side is awaited, and a regular semaphore signalled on the receiver tells it
    # the data has landed.
    from jax.experimental import pallas as pl
    pltpu = _pltpu()
    me, n = lax.axis_index(axis), lax.axis_size(axis)
    right = lax.axis_index(tuple(names)) - me + lax.rem(me + 1, n)
    with warnings.catch_warnings():
        # JAX 0.12 deprecates device_id_type (LOGICAL ids keep working there)
        warnings.simplefilter("ignore", DeprecationWarning)
        logical = pl.DeviceIdType.LOGICAL
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=right,
                                            device_id_type=logical)
        copy.start()
        copy.wait_send()
        copy.wait_recv()
        pl.semaphore_signal(ready, 1, device_id=right, device_id_type=logical)
    pl.semaphore_wait(ready, 1)


def _scoped_ring_kernel(x_ref, o_ref, *, axis, names, handshake=True):
    # The ring permute into a run_scoped VMEM buffer of the right neighbour, with run_scoped DMA
    # semaphores; the barrier handshake first puts every device inside its run_scoped before
    # anyone sends (without it the buffer may not exist yet on the target).
    from jax.experimental import pallas as pl
    pltpu = _pltpu()
    me, n = lax.axis_index(axis), lax.axis_size(axis)

    def scoped(buf, send_sem, recv_sem):
        if handshake:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id={axis: lax.rem(me + n - 1, n)})
            pl.semaphore_signal(barrier, 1, device_id={axis: lax.rem(me + 1, n)})
            pl.semaphore_wait(barrier, 2)
        copy = pltpu.make_async_remote_copy(x_ref, buf, send_sem, recv_sem,
                                            device_id={axis: lax.rem(me + 1, n)})
        copy.start()
        copy.wait()
        o_ref[...] = buf[...]
    pl.run_scoped(scoped, pltpu.VMEM(x_ref.shape, x_ref.dtype), pltpu.SemaphoreType.DMA,
                  pltpu.SemaphoreType.DMA)


def pallas_remote_kernels(shape, names):
    """{name: (build(interpret) -> program, its plain-JAX meaning, input shapes, dtype)} of the
    hand-written feature kernels over the last mesh axis."""
    pltpu = _pltpu()
    axis = names[-1]
    n = shape[-1]
    spec = P(tuple(names))
    dma = pltpu.SemaphoreType.DMA
    block = (8, 128)

    def program(kernel, scratch, collective_id=None):
        def build(interpret):
            def local(x):
                out = jax.ShapeDtypeStruct(x.shape, x.dtype)
                return _pallas_call(partial(kernel, axis=axis, names=tuple(names)), out, interpret,
                                    scratch=scratch,
                                    collective_id=collective_id)(x)

            def fn(x):
                return shard_map(local, make_mesh(shape, names), spec, spec, check_vma=False)(x)
            return fn
        return build

    def rolled(x):   # the right permute along the last axis, in plain JAX
        def local(b):
            return lax.ppermute(b, axis, [(i, (i + 1) % n) for i in range(n)])
        return shard_map(local, make_mesh(shape, names), spec, spec)(x)

    def handshake(x):
        return shard_map(lambda b: b * 2 + lax.axis_index(axis).astype(b.dtype),
                         make_mesh(shape, names), spec, spec)(x)

    rows = (math.prod(shape) * block[0], block[1])
    return {
        "ring_permute_remote_dma": (program(_ring_permute_kernel, (dma, dma)), rolled, rows, I32),
        "barrier_handshake": (program(_barrier_handshake_kernel, (), collective_id=0), handshake,
                              rows, F32),
        "ring_permute_run_scoped": (program(_scoped_ring_kernel, (), collective_id=0), rolled,
                                    rows, I32),
        "right_permute_signal": (program(_signal_permute_kernel,
                                         (dma, dma, pltpu.SemaphoreType.REGULAR)), rolled, rows,
                                 F32),
    }


# Core-mesh kernels of several cores (pl.kernel over a TPU core mesh) in a shard_map body: every
# core of every device addresses the others (interp/pallas/devices.py DeviceKernels.address). A
# remote DMA naming no core lands on the sender's core of the target device (JAX's interpret mode:
# interpret_pallas_call.py dma_start "Same core on destination device as on source"); a signal
# names its core by core_index (every JAX version's interpret mode passes it on).

CORES = 2


def _core_mesh(num_cores):
    pltpu = _pltpu()
    try:
        return pltpu.TensorCoreMesh(axis_name="core", num_cores=num_cores)   # JAX >= 0.12
    except (AttributeError, TypeError):
        return pltpu.create_tensorcore_mesh("core", num_cores=num_cores)


def _core_ring_kernel(x_hbm, o_hbm, send_sem, recv_sem, *, axis):
    # Core c of every device sends its rows to core c's rows of the right neighbour (no core
    # named: the same core there) and waits for both halves of its DMA.
    from jax.experimental import pallas as pl
    c = lax.axis_index("core")
    rows = pl.ds(c * 8, 8)
    right = lax.rem(lax.axis_index(axis) + 1, lax.axis_size(axis))
    copy = _pltpu().make_async_remote_copy(x_hbm.at[rows], o_hbm.at[rows], send_sem, recv_sem,
                                           device_id={axis: right})
    copy.start()
    copy.wait()


def _core_cross_signal_kernel(x_hbm, o_hbm, send_sem, recv_sem, done, *, axis):
    # collective_id: the barrier handshake per core (every core signals both cores of its left
    # neighbour, so each hears from both cores it will address on its right), the ring DMA of
    # _core_ring_kernel, then each core tells the OTHER core of its right neighbour that it is
    # done (core_index) and waits for the same from the left.
    from jax.experimental import pallas as pl
    pltpu = _pltpu()
    c = lax.axis_index("core")
    me, n = lax.axis_index(axis), lax.axis_size(axis)
    barrier = pltpu.get_barrier_semaphore()
    for core in range(CORES):
        pl.semaphore_signal(barrier, 1, device_id={axis: lax.rem(me + n - 1, n)}, core_index=core)
    pl.semaphore_wait(barrier, CORES)
    rows = pl.ds(c * 8, 8)
    right = lax.rem(me + 1, n)
    copy = pltpu.make_async_remote_copy(x_hbm.at[rows], o_hbm.at[rows], send_sem, recv_sem,
                                        device_id={axis: right})
    copy.start()
    copy.wait()
    pl.semaphore_signal(done, 1, device_id={axis: right}, core_index=1 - c)
    pl.semaphore_wait(done, 1)


def pallas_core_mesh_kernels(shape, names, num_cores=CORES):
    """{name: (build(interpret) -> program, its plain-JAX meaning, input shape, dtype)} of the
    multi-core kernels over the last mesh axis (each device's block: 8 rows per core)."""
    pltpu = _pltpu()
    axis = names[-1]
    n = shape[-1]
    spec = P(tuple(names))
    dma, regular = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR

    def program(kernel, scratch, collective_id=None):
        def build(interpret):
            from jax.experimental import pallas as pl
            params = pltpu.CompilerParams(collective_id=collective_id) \
                if collective_id is not None else None
            extra = {} if interpret is None else {"interpret": interpret}

            def local(x):
                return pl.kernel(partial(kernel, axis=axis),
                                 out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                 mesh=_core_mesh(num_cores), scratch_types=list(scratch),
                                 compiler_params=params, **extra)(x)

            def fn(x):
                return shard_map(local, make_mesh(shape, names), spec, spec, check_vma=False)(x)
            return fn
        return build

    def rolled(x):   # every device's block to its right neighbour along the last axis
        def local(b):
            return lax.ppermute(b, axis, [(i, (i + 1) % n) for i in range(n)])
        return shard_map(local, make_mesh(shape, names), spec, spec)(x)

    rows = (math.prod(shape) * num_cores * 8, 128)
    return {
        "core_ring_remote_dma": (program(_core_ring_kernel, (dma, dma)), rolled, rows, I32),
        "core_cross_signal": (program(_core_cross_signal_kernel, (dma, dma, regular),
                                      collective_id=0), rolled, rows, F32),
    }


def shipped_all_gather(shape, names):
    """(build(interpret) -> program, input shape): JAX's jax.experimental.pallas.ops.tpu.all_gather
    over the last mesh axis. The kernel as shipped (interpret None), or the same kernel and
    pallas_call under pltpu.force_tpu_interpret_mode for an interpret mode."""
    from jax.experimental.pallas.ops.tpu import all_gather as shipped
    axis = names[-1]

    def build(interpret):
        def fn(x):
            mesh = make_mesh(shape, names)
            if interpret is None or isinstance(interpret, bool):
                # as shipped (the reference traces with True and ignores it; pallas:interpret is
                # refused remote-DMA cases)
                return shipped.all_gather(x, mesh=mesh, axis_name=axis)
            with _pltpu().force_tpu_interpret_mode(interpret):
                return shipped.all_gather(x, mesh=mesh, axis_name=axis)
        return fn
    return build, (shape[-1] * 8, 128)


def plain_all_gather(shape, names):
    """What the shipped all-gather computes: lax.all_gather (tiled) of the shards."""
    axis = names[-1]

    def fn(x):
        return shard_map(lambda b: lax.all_gather(b, axis, tiled=True), make_mesh(shape, names),
                         P(axis), P(None), check_vma=False)(x)
    return fn


PALLAS_MESHES = ("2", "4", "8", "2x4")
_REMOTE = ("pallas_call", "dma_start", "dma_wait", "semaphore_signal", "semaphore_wait",
           "get_barrier_semaphore", "shard_map")


CORE_MESH_MESHES = ("2", "2x4")
_CORE_MESH_REMOTE = ("mpmd_map", "dma_start", "dma_wait", "semaphore_signal", "semaphore_wait",
                     "get_barrier_semaphore", "axis_index", "shard_map")


def _int_valued(shape, dtype):
    # integer-valued inputs: data movement is checked bit for bit, float or not
    return lambda rng: [rng.integers(-1000, 1000, size=shape).astype(dtype)]


def pallas_cases():
    """The remote-DMA kernels: each kernel against the reference running it
    (``spmd/pallas/<name>``) and against the plain JAX it computes (``spmd/pallas/claims/...``)."""
    exact = C.exact("definition")
    for mesh_id in PALLAS_MESHES:
        shape, names = MESHES[mesh_id]
        needs = _needs(shape) | {"remote-dma"}
        kernels = pallas_remote_kernels(shape, names)
        build, rows = shipped_all_gather(shape, names)
        kernels["all_gather_shipped"] = (build, plain_all_gather(shape, names), rows, F32)
        for name, (build, plain, rows, dtype) in kernels.items():
            common = dict(fn=None, build=build, inputs=_int_valued(rows, dtype), modes=exact,
                          kind=PALLAS, pallas_targets=("tpu",), primitives=_REMOTE, needs=needs,
                          tags=("spmd", "pallas"))
            dt = np.dtype(dtype).name
            yield Case(id=f"spmd/pallas/{name}/{dt}/{mesh_id}", **common)
            yield Case(id=f"spmd/pallas/claims/{name}/{dt}/{mesh_id}", reference_fn=plain, **common)
    for mesh_id in CORE_MESH_MESHES:   # kernels of several cores on every device
        shape, names = MESHES[mesh_id]
        needs = _needs(shape) | {"remote-dma"}
        for name, (build, plain, rows, dtype) in pallas_core_mesh_kernels(shape, names).items():
            common = dict(fn=None, build=build, inputs=_int_valued(rows, dtype), modes=exact,
                          kind=PALLAS, pallas_targets=("tpu",), primitives=_CORE_MESH_REMOTE,
                          needs=needs, tags=("spmd", "pallas"))
            dt = np.dtype(dtype).name
            yield Case(id=f"spmd/pallas/{name}/{dt}/{mesh_id}x{CORES}cores", **common)
            yield Case(id=f"spmd/pallas/claims/{name}/{dt}/{mesh_id}x{CORES}cores",
                       reference_fn=plain, **common)


# --- unreduced / reduced specs (PartitionSpec.unreduced / reduced; explicit mesh axes) -------------
# An unreduced array holds each device's partial; XLA reduces it when it is resharded, and a later
# shard_map taking it unreduced gets each device's partial (spec/spmd.py shard_map). The programs
# reshard their results or show the partials through a check_vma=False shard_map, so every runner
# returns ordinary arrays (a jit cannot return an array unreduced by max or min: JAX's output
# sharding check fails). Integer-valued float inputs: every sum is exact, so XLA's reduction order
# cannot matter and the comparison is bitwise; max/min take int32 (XLA:CPU's float max/min
# all-reduce drops NaN, spec/spmd.py pmax). Unreduced operands the reference refuses (their partials
# are XLA's choice or untracked local results): spec/spmd.py UNREDUCED_OPERANDS,
# tests/test_spmd_unreduced.py.

def explicit_mesh(shape, names):
    """A mesh with Explicit axes (unreduced/reduced specs need them): the first prod(shape)
    devices where there are enough, else an AbstractMesh (the reference needs no devices)."""
    types = (jax.sharding.AxisType.Explicit,) * len(shape)
    n = math.prod(shape)
    if len(jax.devices()) >= n:
        return jax.make_mesh(tuple(shape), tuple(names), axis_types=types, devices=jax.devices()[:n])
    return jax.sharding.AbstractMesh(tuple(shape), tuple(names), axis_types=types)


def in_mesh(mesh):
    """The context that makes ``mesh``'s explicit axes current while tracing (inside jit too)."""
    return jax.sharding.use_abstract_mesh(getattr(mesh, "abstract_mesh", mesh))


def unreduced_out_spec(shape, names):
    """Each device's block times 3 plus its index along the last axis, left unreduced over that
    axis, then resharded (summed). 2-D meshes: rows split over the first axis."""
    from jax._src.lax.parallel import vary_unreduced_cast   # (shard_map demands it from JAX 0.11)
    first, last = names[0], names[-1]

    def fn(x):
        mesh = explicit_mesh(shape, names)
        with in_mesh(mesh):
            def body(b):
                return vary_unreduced_cast(b * 3 + lax.axis_index(last).astype(b.dtype), last)
            a = jax.sharding.reshard(x, P(first, last))
            u = shard_map(body, mesh, P(first, last), P(first, unreduced={last}))(a)
            return jax.sharding.reshard(u, P(first, None))
    return fn


def grad_of_reduced_in_spec(shape, names):
    """jax.value_and_grad of a shard_map taking its weight reduced over the last axis: JAX
    transposes it into a shard_map whose out_specs leave the weight's gradient unreduced."""
    from jax._src.core import reduced_vary_cast
    first, last = names[0], names[-1]

    def fn(x, w):
        mesh = explicit_mesh(shape, names)
        with in_mesh(mesh):
            def loss(w, a):
                def body(b, w):
                    return lax.psum(jnp.sum((b @ reduced_vary_cast(w, last)) ** 2), tuple(names))
                return shard_map(body, mesh, (P(first, last), P(None, reduced={last})), P())(a, w)
            a = jax.sharding.reshard(x, P(first, last))
            value, grad = jax.value_and_grad(loss)(jax.sharding.reshard(w, P(None, reduced={last})), a)
            return value, jax.sharding.reshard(grad, P(None, None))
    return fn


def unreduced_in_spec(shape, names):
    """Partials handed from one shard_map to the next: the first leaves each device's block times 3
    plus its index along the last axis unreduced over that axis; later shard_maps take the array
    unreduced (each device gets its own partial): one shows every device's partial side by side
    (check_vma=False), one sums them (unreduced_psum), one doubles them and leaves them unreduced
    again (inside a jit), one takes them after a reshard that all-gathers them along the first
    axis (the unreduced axis kept). Outputs: partials, sum, doubled partials reduced, partials
    all-gathered."""
    from jax._src.lax.parallel import unreduced_psum, vary_unreduced_cast
    first, last = names[0], names[-1]
    un = P(first, unreduced={last})

    def fn(x):
        mesh = explicit_mesh(shape, names)
        with in_mesh(mesh):
            def produce(b):
                return vary_unreduced_cast(b * 3 + lax.axis_index(last).astype(b.dtype), last)
            u = shard_map(produce, mesh, P(first, last), un)(jax.sharding.reshard(x, P(first, last)))
            seen = shard_map(lambda b: b, mesh, un, P(first, last), check_vma=False)(u)
            total = shard_map(lambda b: unreduced_psum(b, last), mesh, un, P(first))(u)
            doubled = jax.jit(lambda v: shard_map(lambda b: b + b, mesh, un, un)(v))(u)
            gathered = jax.sharding.reshard(u, P(None, None, unreduced={last}))
            seen_gathered = shard_map(lambda b: b, mesh, P(None, unreduced={last}), P(None, last),
                                      check_vma=False)(gathered)
            return seen, total, jax.sharding.reshard(doubled, P(first, None)), seen_gathered
    return fn


def has_unreduced_kinds() -> bool:
    """PartitionSpec.unreduced_kind (jax.sharding.UnreducedKind), unreduced_pmax/pmin and
    lax.reduce_max's out_sharding exist."""
    import inspect
    from jax._src.lax import parallel
    return (hasattr(jax.sharding, "UnreducedKind") and hasattr(parallel, "unreduced_pmax")
            and "out_sharding" in inspect.signature(lax.reduce_max).parameters)


def unreduced_kind_program(kind, shape, names):
    """Partials combined by max or min (PartitionSpec.unreduced_kind, JAX >= 0.11): a shard_map
    with check_vma=False leaves each device's block times 3 plus its index along the last axis
    unreduced by ``kind`` over that axis (with check_vma=True JAX has no cast that makes a body
    value unreduced by max or min: vary_unreduced_cast gives the sum kind, parallel.py). Outputs:
    the array resharded (XLA reduces it by the kind), the partials reduced in a shard_map
    (unreduced_pmax / unreduced_pmin), every device's partial side by side; and lax.reduce_max /
    reduce_min over the input's columns (split over the last axis) with out_sharding unreduced by
    the kind over that axis (each device's local extremum), resharded."""
    from jax._src.lax import parallel
    first, last = names[0], names[-1]

    def fn(x):
        k = getattr(jax.sharding.UnreducedKind, kind)
        reduce = parallel.unreduced_pmax if kind == "max" else parallel.unreduced_pmin
        local = lax.reduce_max if kind == "max" else lax.reduce_min
        un = P(first, unreduced={last}, unreduced_kind=k)
        mesh = explicit_mesh(shape, names)
        with in_mesh(mesh):
            def produce(b):
                return b * 3 + lax.axis_index(last).astype(b.dtype)
            a = jax.sharding.reshard(x, P(first, last))
            u = shard_map(produce, mesh, P(first, last), un, check_vma=False)(a)
            collective = shard_map(lambda b: reduce(b, last), mesh, un, P(first))(u)
            seen = shard_map(lambda b: b, mesh, un, P(first, last), check_vma=False)(u)
            extremum = local(a, (1,), out_sharding=un)
            return (jax.sharding.reshard(u, P(first, None)), collective, seen,
                    jax.sharding.reshard(extremum, P(first)))
    return fn


def unreduced_cases():
    exact = C.exact("definition")
    ints = lambda *shapes: lambda rng: [rng.integers(-4, 4, size=s).astype(F32) for s in shapes]  # noqa: E731
    for mesh_id in ("2x4",):
        shape, names = MESHES[mesh_id]
        yield Case(id=f"spmd/unreduced_out_spec/float32/{mesh_id}", fn=unreduced_out_spec(shape, names),
                   inputs=ints((8, 8)), modes=exact, primitives=("shard_map",),
                   needs=_needs(shape), tags=("spmd",))
        yield Case(id=f"spmd/grad_of_reduced_in_spec/float32/{mesh_id}",
                   fn=grad_of_reduced_in_spec(shape, names), inputs=ints((8, 8), (2, 3)), modes=exact,
                   primitives=("shard_map",),
                   needs=_needs(shape), tags=("spmd",))
        yield Case(id=f"spmd/unreduced_in_spec/float32/{mesh_id}", fn=unreduced_in_spec(shape, names),
                   inputs=ints((8, 8)), modes=exact, primitives=("shard_map", "unreduced_psum"),
                   needs=_needs(shape), tags=("spmd",))
        kinds = applicable_if(has_unreduced_kinds(), "no PartitionSpec.unreduced_kind "
                              "(jax.sharding.UnreducedKind), unreduced_pmax/unreduced_pmin or "
                              "lax.reduce_max(out_sharding=)")
        for kind in ("max", "min"):
            yield Case(id=f"spmd/unreduced_kind/{kind}/int32/{mesh_id}",
                       fn=unreduced_kind_program(kind, shape, names),
                       inputs=lambda rng: [rng.integers(-1000, 1000, size=(8, 8)).astype(I32)],
                       modes=exact, primitives=("shard_map", f"unreduced_p{kind}", f"reduce_{kind}"),
                       needs=_needs(shape), tags=("spmd",), not_applicable=kinds)

# --- Mosaic GPU kernels across devices (interp/pallas/devices.py, interp/pallas/mosaic_gpu/launch.py) ------
# JAX's shipped collective kernels (jax.experimental.pallas.ops.gpu all_gather_mgpu,
# reduce_scatter_mgpu: multimem stores / load-reductions through NVLink multicast memory and a
# multicast semaphore signal), traced under the emulated H100 where there is no GPU, on meshes of
# 2, 4 and 8 devices: ``spmd/pallas_mosaic_gpu/<kernel>/<dtype>/<mesh>`` against the reference
# running them, ``spmd/pallas_mosaic_gpu/claims/...`` against the lax collective they compute;
# a hand-written ring over plgpu.remote_ref and a remote signal (``remote_ref_ring``, claims:
# lax.ppermute); and collective_matmul_mgpu.all_gather_lhs_matmul (``collective_matmul``: a
# persistent hopper matmul on the 132 SMs of each device, sending its lhs tiles to the next device
# with remote TMA stores, every block waiting for all blocks of the other device: claims: lax
# all_gather then dot, within DOT_PRODUCT), f16 and bf16 on 2 devices (4 in the nightly profile).
# pallas:gpu-interpret refuses them (hardware_runners/base.py GpuInterpret.no_remote_dma);
# pallas:mosaic-gpu needs as many GPUs as the mesh has devices.
MGPU_MESHES = ("2", "4", "8")
_MGPU_COLLECTIVE = ("shard_map", "mpmd_map", "semaphore_signal_multicast", "semaphore_wait")


def shipped_gpu_collective(kernel, shape, names, dtype, num_blocks=None):
    """(build(interpret) -> program, plain lax program, rows of the input): JAX's shipped Mosaic
    GPU ``kernel`` ("all_gather" or "reduce_scatter") over the mesh axis, and the lax collective
    it computes (all_gather tiled / psum_scatter tiled along dimension 0)."""
    from .pallas_mosaic_gpu import shipped, shipped_module
    axis, n = names[-1], shape[-1]
    rows = (n * 16, 128)

    def wrap(body):
        return lambda x: shard_map(body, make_mesh(shape, names), P(axis), P(axis),
                                   check_vma=False)(x)

    if kernel == "all_gather":
        def make():
            module = shipped_module("all_gather_mgpu")   # imported before the emulated device
            return wrap(lambda s: module.all_gather(s, axis_name=axis, num_blocks=num_blocks))
        plain = wrap(lambda s: lax.all_gather(s, axis, axis=0, tiled=True))
    else:
        def make():
            module = shipped_module("reduce_scatter_mgpu")
            return wrap(lambda s: module.reduce_scatter(s, axis_name=axis,
                                                        num_blocks=num_blocks))
        plain = wrap(lambda s: lax.psum_scatter(s, axis, scatter_dimension=0, tiled=True))
    return shipped(make), plain, rows


def shipped_gpu_collective_matmul(shape, names, dtype, size=(64, 128, 128), wg_dimension="N"):
    """(build(interpret) -> program, plain lax program, (lhs shape, rhs shape)): JAX's shipped
    collective_matmul_mgpu.all_gather_lhs_matmul over the last mesh axis (lhs rows and rhs
    columns sharded over it; ``size``: the (m, k, n) of one device's shards; tiles 64/64/64, 2
    pipeline steps), and lax all_gather of the lhs then dot, accumulated in float32 and rounded
    to ``dtype`` as the kernel's wgmma and epilogue do."""
    from .pallas_mosaic_gpu import shipped, shipped_module
    axis, n = names[-1], shape[-1]
    m_shard, k, n_shard = size
    specs = dict(in_specs=(P(axis, None), P(None, axis)), out_specs=P(None, axis),
                 check_vma=False)

    def make():
        module = shipped_module("collective_matmul_mgpu")   # imported before the emulated device
        cfg = module.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2,
                                  wg_dimension=module.MatmulDimension[wg_dimension])
        return lambda a, b: shard_map(
            lambda x, y: module.all_gather_lhs_matmul(x, y, axis, config=cfg, dtype=dtype),
            make_mesh(shape, names), **specs)(a, b)

    def plain(a, b):
        def local(x, y):
            full = lax.all_gather(x, axis, axis=0, tiled=True)
            return jnp.dot(full, y, preferred_element_type=jnp.float32).astype(dtype)
        return shard_map(local, make_mesh(shape, names), **specs)(a, b)
    return shipped(make), plain, ((n * m_shard, k), (k, n * n_shard))


def remote_ref_ring(shape, names):
    """(build(interpret) -> program, plain lax program, rows): a hand-written Mosaic GPU kernel
    that sends each device's shard to its right neighbour along the last mesh axis through
    plgpu.remote_ref (a TMA store into the peer's output), then signals the peer's semaphore
    and waits for its own; the plain program is the ring lax.ppermute."""
    axis, n = names[-1], shape[-1]
    rows = (math.prod(shape) * 8, 128)

    def kernel(interpret):
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import mosaic_gpu as plgpu

        def body(x_gmem, o_gmem, smem, barrier, sem):
            right = {axis: lax.rem(lax.axis_index(axis) + 1, n)}
            plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
            plgpu.barrier_wait(barrier)
            plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(o_gmem, right))
            plgpu.wait_smem_to_gmem(0)
            pl.semaphore_signal(sem, 1, device_id=right)
            pl.semaphore_wait(sem, 1)

        def local(x):
            scratch = [plgpu.SMEM(x.shape, x.dtype), plgpu.Barrier(num_arrivals=1),
                       plgpu.SemaphoreType.REGULAR]
            return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                scratch_types=scratch, interpret=interpret)(x)
        return lambda x: shard_map(local, make_mesh(shape, names), P(names), P(names),
                                   check_vma=False)(x)

    def plain(x):
        ring = [(j, (j + 1) % n) for j in range(n)]
        return shard_map(lambda b: lax.ppermute(b, axis, ring), make_mesh(shape, names),
                         P(names), P(names), check_vma=False)(x)
    return kernel, plain, rows


def _scatter_bound(n):
    """sum|x| over the participants of each reduce-scatter output element."""
    def bound(x):
        blocks = np.abs(x.astype(np.float64)).reshape(n, n, -1, x.shape[-1])  # device, chunk
        return [blocks.sum(0).reshape(-1, x.shape[-1])]
    return bound


def pallas_mosaic_gpu_cases():
    from .pallas_mosaic_gpu import _unavailable
    why = _unavailable()   # JAX 0.10.2 without absl-py: Mosaic GPU does not import
    for mesh_id in MGPU_MESHES:
        shape, names = MESHES[mesh_id]
        n = math.prod(shape)
        needs = _needs(shape) | {"remote-dma"}
        for kernel, dtype in (("all_gather", F32), ("all_gather", I32),
                              ("reduce_scatter", F32), ("reduce_scatter", I32)):
            build, plain, rows = shipped_gpu_collective(kernel, shape, names, dtype)
            prims = _MGPU_COLLECTIVE + (("multimem_store",) if kernel == "all_gather"
                                        else ("multimem_load_reduce",))
            inexact = kernel == "reduce_scatter" and dtype == F32
            common = dict(
                fn=None, build=build, kind=PALLAS, pallas_targets=("mosaic-gpu",),
                inputs=(_float_inputs([rows]) if inexact else _int_valued(rows, dtype)),
                modes=C.dot_product(n) if inexact else C.exact("definition"),
                dot_bound=_scatter_bound(n) if inexact else None, primitives=prims,
                needs=needs, tags=("spmd", "pallas", "mosaic-gpu"), not_applicable=why)
            dt = np.dtype(dtype).name
            yield Case(id=f"spmd/pallas_mosaic_gpu/{kernel}/{dt}/{mesh_id}", **common)
            yield Case(id=f"spmd/pallas_mosaic_gpu/claims/{kernel}/{dt}/{mesh_id}",
                       reference_fn=plain, **common)
        build, plain, rows = remote_ref_ring(shape, names)
        common = dict(fn=None, build=build, kind=PALLAS, pallas_targets=("mosaic-gpu",),
                      inputs=_int_valued(rows, F32), modes=C.exact("definition"),
                      primitives=("shard_map", "mpmd_map", "copy_smem_to_gmem", "semaphore_signal",
                                  "semaphore_wait"),
                      needs=needs, tags=("spmd", "pallas", "mosaic-gpu"), not_applicable=why)
        yield Case(id=f"spmd/pallas_mosaic_gpu/remote_ref_ring/float32/{mesh_id}", **common)
        yield Case(id=f"spmd/pallas_mosaic_gpu/claims/remote_ref_ring/float32/{mesh_id}",
                   reference_fn=plain, **common)
    yield from _collective_matmul_cases(why)


def _abs_product(a, b):
    return [np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))]


def _collective_matmul_cases(why):
    """collective_matmul_mgpu on 2 devices (f16, bf16) and, in the nightly profile, 4 devices
    with larger shards: each 2 x 132 clusters of 3 warpgroups, a few seconds in the reference."""
    for mesh_id, dtype, size, profile in (("2", jnp.float16, (64, 128, 128), "quick"),
                                          ("2", jnp.bfloat16, (64, 128, 128), "quick"),
                                          ("4", jnp.float16, (128, 128, 256), "nightly")):
        shape, names = MESHES[mesh_id]
        build, plain, shapes = shipped_gpu_collective_matmul(shape, names, dtype, size)
        dt = np.dtype(dtype).name
        sid = "x".join(map(str, size))
        common = dict(
            fn=None, build=build, kind=PALLAS, pallas_targets=("mosaic-gpu",),
            inputs=lambda rng, shapes=shapes, dtype=dtype: [
                random_array(rng, np.dtype(dtype), s, specials=0, low=-2, high=2)
                for s in shapes],
            modes=C.dot_product(shapes[0][1]), dot_bound=_abs_product, profile=profile,
            examples=1, primitives=("shard_map", "mpmd_map", "wgmma_ref", "copy_smem_to_gmem",
                                    "semaphore_signal", "semaphore_wait", "get_global"),
            needs=_needs(shape) | {"remote-dma"}, tags=("spmd", "pallas", "mosaic-gpu"),
            not_applicable=why)
        yield Case(id=f"spmd/pallas_mosaic_gpu/collective_matmul/{dt}/{sid}/{mesh_id}", **common)
        yield Case(id=f"spmd/pallas_mosaic_gpu/claims/collective_matmul/{dt}/{sid}/{mesh_id}",
                   reference_fn=plain, **common)
