"""Pallas: feature kernels (grids, block specs with partial blocks, rank-3 non-square blocks,
accumulation over a revisited output block, scratch, scalar prefetch, the TPU hardware PRNG) and
kernels JAX ships, run on every Pallas runner against the reference running the same kernel, and
shipped kernels against the function they claim to compute."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from spec import compliance as C

from ..case import PALLAS, Case, random_array

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


def _tpu():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu


def _case(name, build, inputs, *, targets=("generic",), modes=None, primitives=("pallas_call",), **kw):
    return Case(id=f"pallas/{name}", fn=None, build=build, inputs=inputs, kind=PALLAS, pallas_targets=targets,
                modes=modes, primitives=tuple(primitives), **kw)


# ---------------------------------------------------------------------------------- kernels
def _add_kernel(x_ref, y_ref, o_ref):
    # (x + y) * 2, not x + 2 * y: a multiply feeding an add would be contracted into an FMA by
    # XLA:CPU (an allowance the equation replay cannot apply inside a kernel).
    o_ref[...] = (x_ref[...] + y_ref[...]) * 2


def build_add(shape, block):
    def build(interpret):
        grid = tuple(pl.cdiv(s, b) for s, b in zip(shape, block))
        spec = pl.BlockSpec(block, lambda *i: i)
        return lambda x, y: pl.pallas_call(_add_kernel, out_shape=jax.ShapeDtypeStruct(shape, x.dtype), grid=grid,
                                           in_specs=[spec, spec], out_specs=spec, interpret=interpret)(x, y)
    return build


def _exp_kernel(x_ref, o_ref):
    o_ref[...] = jnp.exp(x_ref[...]) * 2   # exact scaling keeps exp's ULP budget meaningful


def build_exp(interpret):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return lambda x: pl.pallas_call(_exp_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                                    in_specs=[spec], out_specs=spec, interpret=interpret)(x)


def _ids_kernel(o_ref):
    i, j = pl.program_id(0), pl.program_id(1)
    o_ref[...] = jnp.full(o_ref.shape, i * 100 + j * 10 + pl.num_programs(1), jnp.int32) + \
        jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 1)


def build_ids(interpret):
    return lambda: pl.pallas_call(_ids_kernel, out_shape=jax.ShapeDtypeStruct((24, 256), jnp.int32), grid=(3, 2),
                                  out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)), interpret=interpret)()


def _matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, nk):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == nk - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def build_matmul(m, k, n, bm, bk, bn):
    def build(interpret):
        pltpu = _tpu()
        kern = functools.partial(_matmul_kernel, nk=k // bk)
        return lambda x, y: pl.pallas_call(
            kern, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)], interpret=interpret)(x, y)
    return build


def _gather_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def build_prefetch_gather(interpret):
    pltpu = _tpu()
    gs = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(4,),
        in_specs=[pl.BlockSpec((1, 8, 128), lambda i, idx: (idx[i], 0, 0))],
        out_specs=pl.BlockSpec((1, 8, 128), lambda i, idx: (i, 0, 0)))
    return lambda idx, x: pl.pallas_call(_gather_kernel, grid_spec=gs, interpret=interpret,
                                         out_shape=jax.ShapeDtypeStruct((4, 8, 128), x.dtype))(idx, x)


def _prng_kernel(seed_ref, o_ref):
    pltpu = _tpu()
    pltpu.prng_seed(seed_ref[0])
    o_ref[...] = pltpu.prng_random_bits(o_ref.shape)


def build_prng(interpret):
    pltpu = _tpu()
    return lambda seed: pl.pallas_call(
        _prng_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)], interpret=interpret)(seed)


def _dma_kernel(x_hbm, o_hbm):
    pltpu = _tpu()

    def body(buf, sem):
        # HBM -> VMEM copy of rows 8..23, scale in VMEM, VMEM -> HBM, each DMA awaited.
        cp = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 16)], buf, sem)
        cp.start()
        cp.wait()
        buf[...] = buf[...] * 3
        back = pltpu.make_async_copy(buf, o_hbm, sem)
        back.start()
        back.wait()
    pl.run_scoped(body, pltpu.VMEM((16, 128), jnp.float32), pltpu.SemaphoreType.DMA)


def build_dma(interpret):
    return lambda x: pl.pallas_call(_dma_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                                    in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                    out_specs=pl.BlockSpec(memory_space=pl.ANY), interpret=interpret)(x)


def _rows(shape, dtype=F32, **kw):
    return lambda rng: [random_array(rng, dtype, s, **kw) for s in shape]


# ------------------------------------------------------------------------ shipped kernels
def _set_interpret(j, value):
    """``j`` (a Jaxpr or ClosedJaxpr, any JAX version) with every pallas_call's interpret set."""
    import jax.extend.core as jcore
    if isinstance(j, jcore.ClosedJaxpr) and getattr(j, "jaxpr", j) is not j:
        return jcore.ClosedJaxpr(_set_interpret(j.jaxpr, value), j.consts)
    eqns = []
    for e in j.eqns:
        params = dict(e.params)
        if e.primitive.name == "pallas_call":
            params["interpret"] = value
        else:
            for k, v in e.params.items():
                if isinstance(v, (jcore.Jaxpr, jcore.ClosedJaxpr)):
                    params[k] = _set_interpret(v, value)
        eqns.append(e.replace(params=params))
    return j.replace(eqns=eqns)


def shipped(fn):
    """Build a kernel JAX ships (which takes no ``interpret`` argument) for one Pallas mode:
    TPU interpret through ``force_tpu_interpret_mode``; HLO interpret by setting the traced
    pallas_call's ``interpret`` parameter; compiled (False) as is."""
    def build(interpret):
        if interpret is False:
            return fn
        if interpret is True:
            def run(*args):
                closed = _set_interpret(jax.make_jaxpr(fn)(*args), True)
                return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
            return run
        pltpu = _tpu()

        def run_tpu(*args):
            with pltpu.force_tpu_interpret_mode(interpret):
                return fn(*args)
        return run_tpu
    return build


def _ops_tpu_matmul(x, y):
    from jax.experimental.pallas.ops.tpu import matmul as mm
    return mm.matmul(x, y, block_shape=(64, 64), block_k=64)


def _ops_tpu_threefry(shape):
    def f(seed):
        from jax.experimental.pallas.ops.tpu.random import threefry
        key = jax.random.key_data(jax.random.key(seed[0], impl="threefry2x32"))
        return threefry.plthreefry_random_bits(key, 32, shape)
    return f


def _claimed_threefry(shape):
    def f(seed):
        with jax.threefry_partitionable(True) if hasattr(jax, "threefry_partitionable") else _null():
            return jax.random.bits(jax.random.key(seed[0], impl="threefry2x32"), shape, jnp.uint32)
    return f


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _seed(rng):
    return [rng.integers(0, 2 ** 31 - 1, size=(1,)).astype(np.int32)]


def cases():
    yield from gpu_cases()
    yield from mosaic_gpu_cases()
    yield _case("add/f32/16x256_blocks_8x128", build_add((16, 256), (8, 128)), _rows([(16, 256), (16, 256)]),
                primitives=("pallas_call", "add", "mul"))
    yield _case("add/i32/rank3_2x8x384_blocks_1x8x128", build_add((2, 8, 384), (1, 8, 128)),
                _rows([(2, 8, 384)] * 2, I32), primitives=("pallas_call", "add", "mul"))
    yield _case("add/f32/partial_blocks_20x200", build_add((20, 200), (8, 128)), _rows([(20, 200)] * 2),
                primitives=("pallas_call", "add", "mul"))
    yield _case("exp/f32/16x128", build_exp, _rows([(16, 128)], low=-80, high=80),
                modes=C.ulp(6, "xla-accuracy-budget"), primitives=("pallas_call", "exp"))
    yield _case("program_id/i32/grid_3x2", build_ids, lambda rng: [], primitives=("pallas_call", "program_id"))
    yield _case("matmul_acc/f32/64x256x128", build_matmul(64, 256, 128, 32, 64, 128),
                _rows([(64, 256), (256, 128)], specials=0, low=-2, high=2), targets=("tpu",),
                modes=C.dot_product(256), dot_bound=lambda x, y: [np.abs(x.astype(np.float64)) @
                                                                   np.abs(y.astype(np.float64))],
                primitives=("pallas_call", "dot_general"))
    yield _case("scalar_prefetch_gather/f32", build_prefetch_gather,
                lambda rng: [rng.permutation(4).astype(np.int32), random_array(rng, F32, (4, 8, 128))],
                targets=("tpu",), primitives=("pallas_call",))
    yield _case("dma_run_scoped/f32/32x128", build_dma, _rows([(32, 128)]), targets=("tpu",),
                primitives=("pallas_call", "dma_start", "dma_wait", "run_scoped"))
    yield _case("tpu_prng/random_bits", build_prng, _seed, targets=("tpu",), needs=frozenset({"hardware-prng"}),
                modes=C.statistical(), primitives=("pallas_call", "prng_seed", "prng_random_bits"))
    yield _case("ops/tpu_matmul/f32/128x256x128", shipped(_ops_tpu_matmul),
                _rows([(128, 256), (256, 128)], specials=0, low=-2, high=2), targets=("tpu",),
                modes=C.dot_product(256), dot_bound=lambda x, y: [np.abs(x.astype(np.float64)) @
                                                                   np.abs(y.astype(np.float64))],
                primitives=("pallas_call", "dot_general"))
    for shape, prof in (((16, 256), "quick"), ((2, 5, 7), "quick"), ((3, 4, 300), "nightly")):
        sid = "x".join(map(str, shape))
        yield _case(f"ops/tpu_threefry/{sid}", shipped(_ops_tpu_threefry(shape)), _seed, targets=("tpu",),
                    primitives=("pallas_call", "threefry2x32"), profile=prof)
        # The same kernel against what it claims to compute: partitionable jax.random.bits.
        yield Case(id=f"pallas/claims/tpu_threefry_vs_random_bits/{sid}", fn=None,
                   build=shipped(_ops_tpu_threefry(shape)), reference_fn=_claimed_threefry(shape), inputs=_seed,
                   kind=PALLAS, pallas_targets=("tpu",), primitives=("pallas_call", "threefry2x32"), profile=prof,
                   jax_config=(("jax_threefry_partitionable", True),))


# ------------------------------------------------------------------ shipped GPU (Triton) kernels
def _gpu_softmax(interpret):
    from jax.experimental.pallas.ops.gpu import softmax as sm
    return lambda x: sm.softmax(x, axis=-1, interpret=interpret)


def _gpu_layer_norm(interpret):
    from jax.experimental.pallas.ops.gpu import layer_norm as ln
    return lambda x, w, b: ln.layer_norm(x, w, b, interpret=interpret)


def _jnp_layer_norm(x, w, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * w + b


def gpu_cases():
    # Measured worst abs error (HLO interpret on XLA:CPU vs float64, seeds 0..9, jax 0.12.0.1):
    # softmax 0.08, layer norm 1.3 eps*max|in|; the budgets are about 8x that (source "measured").
    softmax_in = _rows([(4, 8, 128)], specials=0, low=-20, high=20)
    ln_in = _rows([(2, 8, 256), (256,), (256,)], specials=0, low=-3, high=3)   # the kernel is vmapped twice
    yield _case("ops/gpu_softmax/f32/rank3_4x8x128", _gpu_softmax, softmax_in, targets=("triton",),
                modes=C.abs_rel(1, 8, "measured"), primitives=("pallas_call", "exp", "div"))
    yield Case(id="pallas/claims/gpu_softmax_vs_jax_nn_softmax/f32/rank3_4x8x128", fn=None, build=_gpu_softmax,
               reference_fn=lambda x: jax.nn.softmax(x, axis=-1), inputs=softmax_in, kind=PALLAS,
               pallas_targets=("triton",), modes=C.abs_rel(1, 8, "measured"),
               primitives=("pallas_call", "exp", "div"))
    yield _case("ops/gpu_layer_norm/f32/rank3_2x8x256", _gpu_layer_norm, ln_in, targets=("triton",),
                modes=C.abs_rel(12, 8, "measured"), primitives=("pallas_call", "rsqrt"))
    yield Case(id="pallas/claims/gpu_layer_norm_vs_jnp/f32/rank3_2x8x256", fn=None, build=_gpu_layer_norm,
               reference_fn=_jnp_layer_norm, inputs=ln_in, kind=PALLAS, pallas_targets=("triton",),
               modes=C.abs_rel(12, 8, "measured"), primitives=("pallas_call", "rsqrt"))


# ---------------------------------------------------------------------- Mosaic GPU kernels
def _mgpu_axpb_kernel(x_ref, o_ref):
    o_ref[...] = (x_ref[...] + 1) * 2     # no mul feeding an add (FMA contraction, see above)


def build_mgpu_axpb(interpret):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return lambda x: pl.pallas_call(_mgpu_axpb_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                    compiler_params=plgpu.CompilerParams(), interpret=interpret)(x)


def mosaic_gpu_cases():
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: F401
    except Exception:  # noqa: BLE001  (this JAX cannot import Mosaic GPU: no such cases here)
        return
    yield _case("mosaic_gpu/axpb/f32/2x256", build_mgpu_axpb, _rows([(2, 256)]), targets=("mosaic-gpu",),
                primitives=("pallas_call", "add", "mul"))
