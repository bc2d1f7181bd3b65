"""Pallas: feature kernels (grids, block specs with partial blocks, rank-3 non-square blocks,
accumulation over a revisited output block, scratch, scalar prefetch, the TPU hardware PRNG) and
kernels JAX ships, run on every Pallas runner against the reference running the same kernel, and
shipped kernels against the function they claim to compute."""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from spec import compliance as C

from ..case import PALLAS, Case, applicable_if, random_array

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
    yield from primitive_cases()
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
        why_not = ""
    except Exception as e:  # noqa: BLE001  (this JAX cannot import Mosaic GPU: the case says why)
        why_not = applicable_if(False, f"jax.experimental.pallas.mosaic_gpu does not import "
                                       f"({type(e).__name__}: {e})")
    yield _case("mosaic_gpu/axpb/f32/2x256", build_mgpu_axpb, _rows([(2, 256)]), targets=("mosaic-gpu",),
                primitives=("pallas_call", "add", "mul"), not_applicable=why_not)


# ------------------------------------------------------------------ kernel-body primitives
# One small kernel per group of kernel-body primitives, each run on every Pallas runner against
# the reference running the same kernel. Values are defined bit for bit (integer arithmetic,
# data movement, single correctly rounded float operations), so outputs are EXACT; every
# output element is written (no dependence on what fresh memory holds). Primitives only one JAX
# version has are gated on the API's presence.
_DEF = C.exact("definition")


def _triton():
    from jax.experimental.pallas import triton as plgpu
    return plgpu


# Kernels JAX's own interpret modes cannot run: the build for that mode raises BackendUnsupported
# with the evidence (the error JAX raises, per JAX version). Each gate is re-checked by
# tests/test_conformance_cases_calls.py::test_interpret_mode_gates_still_hold, which runs JAX's
# mode without the gate and fails once JAX runs the kernel (then drop the gate).
@dataclasses.dataclass(frozen=True)
class Gate:
    why: str
    errors: tuple[tuple[str, str], ...]   # (exception type name, message fragment): any one of them
    fixed_in: str | None = None           # first JAX version that runs the kernel (None: none yet)

    def applies(self) -> bool:
        from conformance.divergence_models import version_tuple
        return self.fixed_in is None or version_tuple(jax.__version__) < version_tuple(self.fixed_in)


_TOUCH_TPU_INTERPRET = Gate("JAX's TPU interpret mode cannot evaluate pltpu.touch (add_dependency)",
                            (("AttributeError", "'Fake' object has no attribute 'arg_names'"),      # 0.12.0.1
                             ("ValueError", "does not have a corresponding jaxpr input")))          # 0.10.2
_REF_OPERAND_HLO_INTERPRET = Gate("JAX's HLO interpret mode cannot lower a kernel whose body allocates a "
                                  "barrier / global semaphore ref",
                                  (("TypeError", "No ir_type_handler for aval type"),))
_REF_OPERAND_TPU_INTERPRET = Gate("JAX's TPU interpret mode cannot lower pl.get_global",
                                  (("TypeError", "No ir_type_handler for aval type"),))
# JAX 0.10.2 only (0.11.2 and 0.12.0.1 run it): the constrained operand keeps its HBM memory space inside
# the discharged kernel body, where `add` refuses to mix it with an unconstrained value.
_MEMORY_SPACE_HLO_INTERPRET = Gate("JAX's HLO interpret mode cannot run a kernel on a "
                                   "with_memory_space_constraint operand",
                                   (("ValueError", "memory_space of all inputs passed to `add` must be the same"),),
                                   fixed_in="0.11.0")
# JAX 0.10.2 expands the emit_pipeline primitive only in its Mosaic lowering rule (no
# pipeline.emit_pipeline_to_jaxpr); the reference traces that rule's pipeline function.
PIPELINE_PRIMITIVE_TPU_INTERPRET = Gate("JAX's TPU interpret mode cannot run the emit_pipeline "
                                        "primitive (JAX 0.10.2 expands it only in its Mosaic "
                                        "lowering rule)",
                                        (("ValueError", "does not have a corresponding jaxpr input"),),
                                        fixed_in="0.11.0")
_CORE_MESH_HLO_INTERPRET = Gate("JAX's HLO interpret mode does not bind a core mesh's axis names "
                                "(pl.kernel over a TensorCoreMesh)", (("NameError", "unbound axis name"),))

# Under an abstract TPU mesh (which emit_pipeline needs to trace off TPU) the discharged pipeline
# mixes explicitly sharded and unsharded values (both with and without the primitive).
_PIPELINE_HLO_INTERPRET = Gate("JAX's HLO interpret mode cannot run emit_pipeline traced under an "
                               "abstract TPU mesh", (("ShardingTypeError", "operand sharding must "
                                                      "be equal to update sharding"),
                                                     # 0.10.2, the emit_pipeline primitive:
                                                     ("NotImplementedError", "No state discharge "
                                                      "rule implemented for primitive: emit_pipeline")))


def _gated_modes():
    return {"hlo_interpret": lambda interpret: interpret is True,
            "tpu_interpret": lambda interpret: type(interpret).__name__ == "InterpretParams"}


def gated(build, **gates: Gate):
    """``build`` for every Pallas mode except those with a ``Gate`` (keyword: the mode) that
    applies to this JAX, where the program raises BackendUnsupported with the evidence."""
    def gated_build(interpret):
        for mode, gate in gates.items():
            if _gated_modes()[mode](interpret) and gate.applies():
                def unsupported(*args, gate=gate):
                    from hardware_runners.base import BackendUnsupported
                    seen = " or ".join(f"{t}: {m}" for t, m in gate.errors)
                    raise BackendUnsupported(f"{gate.why} (JAX {jax.__version__} raises {seen}...)")
                return unsupported
        return build(interpret)
    gated_build.ungated = build
    gated_build.gates = gates
    return gated_build


def _gated_case(name, build, inputs, **kw):
    # The reference runs the kernel itself (traced the cheap way), never the gate.
    return _case(name, build, inputs, reference_fn=build.ungated(True), **kw)


def _needs_primitives(*prims) -> str:
    """Case.not_applicable of a case whose kernel binds ``prims``: why not where the installed
    JAX defines none of them (interp.coverage() lists what it defines)."""
    import interp
    cov = interp.coverage()
    missing = [p for p in prims if p not in cov]
    return applicable_if(not missing, f"this JAX defines no {', '.join(missing)} primitive")


def _dyn_grid_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 4 + pl.num_programs(0) * 1000 + pl.program_id(0)


def build_dynamic_grid(interpret):
    # grid=(n,) with n traced: num_programs is a primitive (a static grid folds it to a constant).
    # The output aliases x, so blocks past the dynamic grid keep x's values on every runner.
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return lambda x, n: pl.pallas_call(_dyn_grid_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                       grid=(n[0],), in_specs=[spec], out_specs=spec,
                                       input_output_aliases={0: 0}, interpret=interpret)(x)


def _hints_kernel(x_ref, o_ref):
    # Triton-style: row window starts hinted as multiples of 8, columns as contiguous.
    i = pl.multiple_of(pl.program_id(0) * 8, 8)
    cols = _triton().max_contiguous(pl.multiple_of(jnp.arange(128), 128), 128)
    o_ref[...] = x_ref[pl.ds(i, 8), :][:, cols] ^ 0x5A


def build_hints(interpret):
    return lambda x: pl.pallas_call(_hints_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(2,),
                                    out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                                    in_specs=[pl.BlockSpec((16, 128), lambda i: (0, 0))],
                                    compiler_params=_triton().CompilerParams(), interpret=interpret)(x)


def _vector_kernel(x_ref, h_ref, o_ref, s_ref, b_ref, e_ref, l_ref):
    pltpu = _tpu()
    o_ref[...] = pltpu.roll(x_ref[...], 5, 1)
    s_ref[...] = pltpu.roll(x_ref[...], 3, 1, stride=1, stride_axis=0)
    b_ref[...] = pltpu.bitcast(h_ref[...], jnp.int32)
    if hasattr(pltpu, "einshape"):
        e_ref[...] = pltpu.einshape("a(bc)->bac", x_ref[...], b=2)
    else:
        e_ref[...] = x_ref[...].reshape(8, 2, 64).transpose(1, 0, 2)
    # pltpu.einshape is a hijax primitive whose expansion binds einshape_lo (what Mosaic lowers);
    # bound directly too, so the primitive itself is in the kernel's jaxpr.
    from jax._src.pallas.einshape import einshape_lo
    l_ref[...] = einshape_lo("a(cd)->(ca)d", h_ref[...], False, c=4)


def build_vector(interpret):
    i32 = jnp.int32
    outs = [jax.ShapeDtypeStruct((8, 128), i32)] * 3 + [jax.ShapeDtypeStruct((2, 8, 64), i32),
                                                        jax.ShapeDtypeStruct((4 * 16, 32), jnp.int16)]
    return lambda x, h: pl.pallas_call(_vector_kernel, out_shape=outs, interpret=interpret)(x, h)


def _delay_print_kernel(x_ref, o_ref):
    pl.delay(64)
    pl.debug_print("conformance kernel x[0, 0]={}", x_ref[0, 0])
    o_ref[...] = x_ref[...] - 11


def _touch_kernel(x_ref, o_ref):
    _tpu().touch(x_ref)            # a fake read-write dependency (add_dependency)
    o_ref[...] = x_ref[...] - 11


def _trace_value_kernel(x_ref, o_ref):
    _tpu().trace_value("first", x_ref[0, 0])   # emitted to a profiler trace, no value effect
    o_ref[...] = x_ref[...] - 11


def build_same_shape(kernel):
    def build(interpret):
        return lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                        interpret=interpret)(x)
    return build


def _semaphore_kernel(o_ref, sems):
    # Counting semaphores: signal, read, wait (decrement), read again; no DMA involved.
    pl.semaphore_signal(sems.at[1], 3)
    o_ref[0] = pl.semaphore_read(sems.at[1])
    pl.semaphore_wait(sems.at[1], 2)
    o_ref[1] = pl.semaphore_read(sems.at[1])
    pl.semaphore_signal(sems.at[0])
    o_ref[2] = pl.semaphore_read(sems.at[0])
    pl.semaphore_wait(sems.at[0])
    pl.semaphore_wait(sems.at[1])
    o_ref[3] = pl.semaphore_read(sems.at[1]) + pl.semaphore_read(sems.at[0])


def build_semaphores(interpret):
    pltpu = _tpu()
    return lambda: pl.pallas_call(_semaphore_kernel, out_shape=jax.ShapeDtypeStruct((4,), jnp.int32),
                                  out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                                  scratch_shapes=[pltpu.SemaphoreType.REGULAR((2,))], interpret=interpret)()


def _barrier_kernel(o_ref):
    pltpu = _tpu()
    sem = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(sem, 2)
    o_ref[0] = pl.semaphore_read(sem)
    pl.semaphore_wait(sem, 2)
    o_ref[1] = pl.semaphore_read(sem)


def build_barrier_semaphore(interpret):
    pltpu = _tpu()
    return lambda: pl.pallas_call(_barrier_kernel, out_shape=jax.ShapeDtypeStruct((2,), jnp.int32),
                                  out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                                  compiler_params=pltpu.CompilerParams(collective_id=0), interpret=interpret)()


def _global_kernel(o_ref):
    pltpu = _tpu()
    sem = pl.get_global(pltpu.SemaphoreType.REGULAR)
    pl.semaphore_signal(sem, 1)
    o_ref[0] = pl.semaphore_read(sem)


def build_get_global(interpret):
    pltpu = _tpu()
    return lambda: pl.pallas_call(_global_kernel, grid=(3,), out_shape=jax.ShapeDtypeStruct((3,), jnp.int32),
                                  out_specs=pl.BlockSpec((1,), lambda i: (i,), memory_space=pltpu.SMEM),
                                  interpret=interpret)()


def _memory_space_kernel(x_hbm, o_ref):
    pltpu = _tpu()
    o_ref[0] = jnp.where(pltpu.has_memory_space(x_hbm, pltpu.HBM), 1, 0)
    o_ref[1] = jnp.where(pltpu.has_memory_space(x_hbm, pltpu.VMEM), 1, 0)


def build_has_memory_space(interpret):
    pltpu = _tpu()
    return lambda x: pl.pallas_call(_memory_space_kernel, out_shape=jax.ShapeDtypeStruct((2,), jnp.int32),
                                    in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                    out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=interpret)(x)


def build_memory_space_constraint(interpret):
    pltpu = _tpu()

    def f(x, y):
        x = pltpu.with_memory_space_constraint(x, pltpu.HBM)
        return pl.pallas_call(_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=interpret)(x, y)
    return f


def _reciprocal_kernel(x_ref, o_ref):
    recip = getattr(_tpu(), "reciprocal", None) or pl.reciprocal
    o_ref[...] = recip(x_ref[...], approx=False)


def build_reciprocal(interpret):
    return lambda x: pl.pallas_call(_reciprocal_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                    interpret=interpret)(x)


def _atomics_kernel(i_ref, v_ref, o_ref, old_ref, mx_ref, cas_ref, a_ref, b_ref, *, masked):
    plgpu = _triton()
    o_ref[...] = jnp.zeros_like(o_ref)
    mx_ref[...] = jnp.full(mx_ref.shape, -50, mx_ref.dtype)
    mask = (jnp.arange(16) % 5 != 3) if masked else None
    # int32: every order of the duplicate additions gives the same sum. (The values returned to
    # lanes that hit the same element depend on the lane order: not compared across runners.)
    plgpu.atomic_add(o_ref, (i_ref[...],), v_ref[...], mask=mask)
    old_ref[...] = i_ref[...]
    plgpu.atomic_max(mx_ref, (i_ref[...],), v_ref[...])
    # compare-and-swap on scalar refs: one that matches (swapped), one that does not.
    a_ref[...] = v_ref[0]
    b_ref[...] = v_ref[1]
    cas_ref[0] = plgpu.atomic_cas(a_ref, v_ref[0], jnp.int32(7))
    cas_ref[1] = plgpu.atomic_cas(b_ref, v_ref[1] + 1, jnp.int32(9))


def build_atomics(interpret, masked=False):
    plgpu = _triton()
    kernel = functools.partial(_atomics_kernel, masked=masked)
    i32 = jnp.int32
    outs = [jax.ShapeDtypeStruct((16,), i32), jax.ShapeDtypeStruct((16,), i32), jax.ShapeDtypeStruct((16,), i32),
            jax.ShapeDtypeStruct((2,), i32), jax.ShapeDtypeStruct((), i32), jax.ShapeDtypeStruct((), i32)]
    return lambda idx, v: pl.pallas_call(kernel, out_shape=outs, compiler_params=plgpu.CompilerParams(),
                                         interpret=interpret)(idx, v)


def _debug_barrier_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1
    _triton().debug_barrier()
    o_ref[...] = o_ref[...] * 3


def build_debug_barrier(interpret):
    return lambda x: pl.pallas_call(_debug_barrier_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                    compiler_params=_triton().CompilerParams(), interpret=interpret)(x)


def _core_mesh(n):
    pltpu = _tpu()
    try:
        return pltpu.TensorCoreMesh(axis_name="core", num_cores=n)      # JAX 0.12
    except (AttributeError, TypeError):
        return pltpu.create_tensorcore_mesh("core", num_cores=n)


def build_core_mesh(interpret):
    # pl.kernel over a 2-core mesh: an mpmd_map whose body reads its core with axis_index.
    pltpu = _tpu()

    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=_core_mesh(2),
                   **({"interpret": interpret} if interpret is not None else {}))
        def k(x_hbm, o_hbm):
            c = jax.lax.axis_index("core")

            def body(buf):
                pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], buf)
                buf[...] = buf[...] * 2 + c
                pltpu.sync_copy(buf, o_hbm.at[pl.ds(c * 8, 8)])
            pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.int32))
        return k(x)
    return f


def build_core_map_refs(interpret):
    # pl.core_map over a 2-core mesh, the body closing over refs pl.run_state made: JAX 0.10.2 binds
    # it as core_map, 0.11 and later as an mpmd_map.
    pltpu = _tpu()

    def body(x_ref, o_ref):
        c = jax.lax.axis_index("core")

        def scoped(buf):
            pltpu.sync_copy(x_ref.at[pl.ds(c * 8, 8)], buf)
            buf[...] = buf[...] * 3 - c
            pltpu.sync_copy(buf, o_ref.at[pl.ds(c * 8, 8)])
        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.int32))

    def f(x):
        def stateful(refs):
            pl.core_map(_core_mesh(2), **({"interpret": interpret} if interpret is not None else {}))(
                lambda: body(*refs))
        return pl.run_state(stateful)((x, jnp.zeros_like(x)))[1]
    return f


def _pack_kernel(a_ref, b_ref, c_ref, d_ref, w_ref, p_ref, u0_ref, u1_ref):
    # Four int32 sources truncated to int8 fields of one uint32 word (source i at bits 8i..8i+7),
    # and the two int16 fields of an int32 word, sign-extended.
    pltpu = _tpu()
    p_ref[...] = pltpu.pack_elementwise([a_ref[...], b_ref[...], c_ref[...], d_ref[...]], packed_dtype=jnp.int8)
    u0_ref[...] = pltpu.unpack_elementwise(w_ref[...], index=0, packed_dtype=jnp.int16, unpacked_dtype=jnp.int32)
    u1_ref[...] = pltpu.unpack_elementwise(w_ref[...], index=1, packed_dtype=jnp.int16, unpacked_dtype=jnp.int32)


def build_pack(interpret):
    outs = [jax.ShapeDtypeStruct((8, 128), jnp.uint32)] + [jax.ShapeDtypeStruct((8, 128), jnp.int32)] * 2
    return lambda *xs: pl.pallas_call(_pack_kernel, out_shape=outs, interpret=interpret)(*xs)


def _key_kernel(o_ref):
    # A Pallas TPU key is a bundle of uint32 scalars: join them (prng_join) and split them back
    # (prng_split); the order must survive the round trip.
    from jax._src.pallas.mosaic import primitives as tpu_prims
    i = pl.program_id(0).astype(jnp.uint32)
    key = tpu_prims.wrap_pallas_seed(i + 7, i * 3 + 1000, impl="pallas_tpu")
    k0, k1 = tpu_prims.unwrap_pallas_seed(key)
    o_ref[0] = k1
    o_ref[1] = k0


def build_keys(interpret):
    pltpu = _tpu()
    return lambda: pl.pallas_call(_key_kernel, grid=(2,), out_shape=jax.ShapeDtypeStruct((2, 2), jnp.uint32),
                                  out_specs=pl.BlockSpec((None, 2), lambda i: (i, 0), memory_space=pltpu.SMEM),
                                  interpret=interpret)()


def _pipeline_body_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 + pl.program_id(0)   # program_id(0): the pipeline step


def build_emit_pipeline(interpret):
    # pltpu.emit_pipeline over 4 blocks inside a kernel, traced with
    # jax_use_emit_pipeline_primitive (the case's jax_config): the emit_pipeline and
    # pipeline_body primitives. Tracing asks for a TPU target: an abstract TPU v5e mesh.
    pltpu = _tpu()
    from jax._src.mesh import AbstractDevice
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=AbstractDevice(
        device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

    def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(_pipeline_body_kernel, grid=(4,), in_specs=[spec],
                            out_specs=spec)(x_hbm, o_hbm)

    def f(x):
        with jax.sharding.use_abstract_mesh(mesh):
            return pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                  out_specs=pl.BlockSpec(memory_space=pl.ANY),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  interpret=interpret)(x)
    return f


def _threefry_kernel(seed_ref, bits_ref, uni_ref):
    # jax.random on a threefry key made in the kernel: Pallas promises the bits of the same
    # calls outside a kernel (docs/pallas/tpu/prng.rst), per grid step a folded key.
    key = jax.random.fold_in(jax.random.key(seed_ref[0]), pl.program_id(0))
    bits_ref[...] = jax.random.bits(key, (8, 128), jnp.uint32)
    uni_ref[...] = jax.random.uniform(key, (8, 128))


def build_threefry_in_kernel(interpret):
    pltpu = _tpu()
    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    return lambda seed: pl.pallas_call(
        _threefry_kernel, grid=(2,), in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=[spec, spec], out_shape=[jax.ShapeDtypeStruct((2, 8, 128), jnp.uint32),
                                           jax.ShapeDtypeStruct((2, 8, 128), jnp.float32)],
        interpret=interpret)(seed)


def _i32(*shapes):
    return lambda rng: [random_array(rng, I32, s) for s in shapes]


def primitive_cases():
    tpu = ("tpu",)
    yield _case("dynamic_grid_num_programs/i32/32x128", build_dynamic_grid,
                lambda rng: [random_array(rng, I32, (32, 128)), rng.integers(1, 4, size=(1,), endpoint=True)
                             .astype(np.int32)],
                modes=_DEF, primitives=("pallas_call", "num_programs", "program_id"))
    yield _case("triton_hints_multiple_of_max_contiguous/i32", build_hints, _i32((16, 128)), targets=("triton",),
                modes=_DEF, primitives=("pallas_call", "multiple_of", "max_contiguous"))
    yield _case("tpu_roll_bitcast_einshape/i32", build_vector,
                lambda rng: [random_array(rng, I32, (8, 128)),
                             random_array(rng, np.dtype(np.int16), (16, 128))], targets=tpu, modes=_DEF,
                primitives=("pallas_call", "roll", "bitcast", "einshape_lo"))
    yield _case("tpu_pack_unpack_elementwise/i32", build_pack, _i32(*[(8, 128)] * 5), targets=tpu, modes=_DEF,
                primitives=("pallas_call", "pack_elementwise", "unpack_elementwise"),
                not_applicable=_needs_primitives("pack_elementwise", "unpack_elementwise"))
    yield _case("tpu_prng_key_join_split", build_keys, lambda rng: [], targets=tpu, modes=_DEF,
                primitives=("pallas_call", "prng_join", "prng_split"),
                not_applicable=_needs_primitives("prng_split", "prng_join"))
    yield _gated_case("tpu_emit_pipeline_primitive/i32/32x128",
                      gated(build_emit_pipeline, hlo_interpret=_PIPELINE_HLO_INTERPRET,
                            tpu_interpret=PIPELINE_PRIMITIVE_TPU_INTERPRET),
                      _i32((32, 128)), targets=tpu, modes=_DEF,
                      jax_config=(("jax_use_emit_pipeline_primitive", True),),
                      primitives=("pallas_call", "emit_pipeline"),
                      not_applicable=_needs_primitives("emit_pipeline", "pipeline_body"))
    yield _case("tpu_threefry_key_in_kernel/fold_in_bits_uniform", build_threefry_in_kernel,
                lambda rng: [rng.integers(-2**31, 2**31, size=(1,)).astype(np.int32)], targets=tpu,
                modes=_DEF, primitives=("pallas_call", "random_seed", "random_fold_in",
                                        "random_bits"))
    yield _case("delay_debug_print/i32", build_same_shape(_delay_print_kernel), _i32((8, 128)), targets=tpu,
                modes=_DEF, primitives=("pallas_call", "delay", "debug_print"))
    yield _gated_case("tpu_touch/i32", gated(build_same_shape(_touch_kernel), tpu_interpret=_TOUCH_TPU_INTERPRET),
                      _i32((8, 128)), targets=tpu, modes=_DEF, primitives=("pallas_call", "add_dependency"),
                      not_applicable=applicable_if(hasattr(_tpu(), "touch"), "no pltpu.touch"))
    yield _case("tpu_trace_value/i32", build_same_shape(_trace_value_kernel), _i32((8, 128)), targets=tpu,
                modes=_DEF, primitives=("pallas_call", "trace_value"),
                not_applicable=applicable_if(hasattr(_tpu(), "trace_value"), "no pltpu.trace_value"))
    yield _case("semaphores_signal_wait_read", build_semaphores, lambda rng: [], targets=tpu, modes=_DEF,
                primitives=("pallas_call", "semaphore_signal", "semaphore_wait", "semaphore_read"))
    yield _gated_case("barrier_semaphore", gated(build_barrier_semaphore, hlo_interpret=_REF_OPERAND_HLO_INTERPRET),
                      lambda rng: [], targets=tpu, modes=_DEF,
                      primitives=("pallas_call", "get_barrier_semaphore", "semaphore_signal", "semaphore_wait"))
    yield _gated_case("get_global_across_grid_steps",
                      gated(build_get_global, hlo_interpret=_REF_OPERAND_HLO_INTERPRET,
                            tpu_interpret=_REF_OPERAND_TPU_INTERPRET),
                      lambda rng: [], targets=tpu, modes=_DEF,
                      primitives=("pallas_call", "get_global", "semaphore_signal", "semaphore_read"),
                      not_applicable=applicable_if(hasattr(pl, "get_global"), "no pl.get_global"))
    yield _case("has_memory_space_of_any_operand", build_has_memory_space, _rows([(8, 128)]), targets=tpu,
                modes=_DEF, primitives=("pallas_call", "has_memory_space"),
                not_applicable=applicable_if(hasattr(_tpu(), "has_memory_space"), "no pltpu.has_memory_space"))
    yield _gated_case("with_memory_space_constraint/f32/8x128",
                      gated(build_memory_space_constraint, hlo_interpret=_MEMORY_SPACE_HLO_INTERPRET),
                      _rows([(8, 128), (8, 128)]), targets=tpu, modes=C.exact("ieee754"),
                      primitives=("pallas_call", "with_memory_space_constraint"),
                      not_applicable=applicable_if(hasattr(_tpu(), "with_memory_space_constraint"),
                                                   "no pltpu.with_memory_space_constraint"))
    yield _case("reciprocal/f32/8x128", build_reciprocal, _rows([(8, 128)]), modes=C.exact("ieee754"),
                primitives=("pallas_call", "reciprocal"))
    # Distinct indices, then duplicate ones: JAX's HLO interpret mode discharges an atomic as
    # gather -> op -> scatter-set, so lanes hitting the same element lose all but one update
    # (spec/divergences.py: pallas-interpret-triton-atomic-duplicates).
    for name, draw in (("distinct", lambda rng: rng.permutation(16)),
                       ("duplicates", lambda rng: rng.integers(0, 8, size=(16,)))):
        yield _case(f"triton_atomics_add_max_cas/{name}_indices/i32", build_atomics,
                    lambda rng, draw=draw: [draw(rng).astype(np.int32),
                                            rng.integers(-1000, 1000, size=(16,)).astype(np.int32)],
                    targets=("triton",), modes=_DEF, primitives=("pallas_call", "atomic_rmw", "atomic_cas"))
    # A masked atomic: JAX's HLO interpret mode has no discharge for it (backend-unsupported).
    yield _case("triton_atomics_add_max_cas/masked/i32", functools.partial(build_atomics, masked=True),
                lambda rng: [rng.integers(0, 8, size=(16,)).astype(np.int32),
                             rng.integers(-1000, 1000, size=(16,)).astype(np.int32)],
                targets=("triton",), modes=_DEF, primitives=("pallas_call", "atomic_rmw", "atomic_cas"))
    yield _case("triton_debug_barrier/i32", build_debug_barrier, _i32((16,)), targets=("triton",), modes=_DEF,
                primitives=("pallas_call", "debug_barrier"))
    yield _gated_case("core_mesh_axis_index/i32/16x128", gated(build_core_mesh, hlo_interpret=_CORE_MESH_HLO_INTERPRET),
                      _i32((16, 128)), targets=tpu, modes=_DEF,
                      primitives=("mpmd_map", "axis_index", "run_scoped", "dma_start", "dma_wait"))
    yield _gated_case("core_map_refs/i32/16x128", gated(build_core_map_refs, hlo_interpret=_CORE_MESH_HLO_INTERPRET),
                      _i32((16, 128)), targets=tpu, modes=_DEF,
                      primitives=("run_state", "axis_index", "run_scoped", "dma_start", "dma_wait"))
