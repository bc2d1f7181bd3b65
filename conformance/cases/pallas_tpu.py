"""Pallas TPU primitives of the Mosaic dialect (interp/rules/pallas_tpu.py; spec/pallas_tpu.py):
explicit MXU programming, pltpu.conv, pltpu.stochastic_round, pack_elementwise f32 -> bf16,
unsigned unpack_elementwise, remove_memory_space.

Two cases per kernel: the kernel on every Pallas runner against the reference running the same
kernel (``pallas_tpu/<name>``), and the kernel against the plain JAX function it claims to
compute (``pallas_tpu/claims/<name>``: the reference runs that function). JAX defines no
evaluation rule for these primitives (no impl, no discharge rule, no case in the TPU interpret
mode), so its interpret modes record them as backend-unsupported with JAX's own message
("MLIR translation rule for primitive ... not found"); a TPU runs them.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from spec import compliance as C

from ..case import LAX, PALLAS, Case, applicable_if, random_array
from .pallas import _PIPELINE_HLO_INTERPRET, PIPELINE_PRIMITIVE_TPU_INTERPRET, Gate, gated

F32 = np.dtype(np.float32)
_DEF = C.exact("definition")
# A TPU MXU sums in float32 in an order it does not document (spec/pallas_tpu.py matmul_acc_lhs).
_NEIGHBOUR = C.ulp(1, "stochastic-round-neighbour")


def _tpu():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu


def _has(name) -> bool:
    return hasattr(_tpu(), name)


def _case(name, build, inputs, *, claims=None, primitives, **kw):
    """The kernel case; with ``claims`` (the plain JAX function) also the claims case. A gated
    build's kernel case has the reference run the kernel itself, never the gate."""
    prims = ("pallas_call",) + tuple(primitives)
    own = {"reference_fn": build.ungated(True)} if hasattr(build, "ungated") else {}
    yield Case(id=f"pallas_tpu/{name}", fn=None, build=build, inputs=inputs, kind=PALLAS,
               pallas_targets=("tpu",), primitives=prims, **own, **kw)
    if claims is not None:
        yield Case(id=f"pallas_tpu/claims/{name}", fn=None, build=build, inputs=inputs, kind=PALLAS,
                   pallas_targets=("tpu",), reference_fn=claims, primitives=prims, **kw)


def _call(kernel, out_shape, interpret, **kw):
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret, **kw)


def _abstract_tpu(kind: str):
    """Tracing for a TPU generation off the TPU (ACC refs need one with accumulators)."""
    from jax._src.mesh import AbstractDevice
    dev = AbstractDevice(device_kind=kind, num_cores=1, platform="tpu")
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=dev))


# ---------------------------------------------------------------------------------------- MXU
# JAX's TPU interpret mode allocates scratch by memory space and has no entry for ACC refs.
ACC_TPU_INTERPRET = Gate("JAX's TPU interpret mode cannot allocate an MXU accumulator (pltpu.ACC) ref",
                         (("KeyError", "AccMemorySpace"),))

def _dot_bound(*xs):
    # sum |a||b| of each output (x1 @ y1 + x2 @ y2 for the two-step accumulation)
    pairs = list(zip(xs[0::2], xs[1::2]))
    return [sum(np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) for a, b in pairs)]


def _mxu_modes(dtype, k):
    return _DEF if np.issubdtype(dtype, np.integer) else C.dot_product(k)


def _acc_kernel(x1, y1, x2, y2, o_ref, acc):
    # Two right-hand sides through two staging registers; the second matmul accumulates.
    pltpu = _tpu()
    pltpu.matmul_push_rhs(y1[...], staging_register=0, mxu_index=0)
    pltpu.matmul_push_rhs(y2[...], staging_register=1, mxu_index=0)
    pltpu.matmul_acc_lhs(acc, x1[...], load_staged_rhs=0)
    pltpu.matmul_acc_lhs(acc, x2[...], load_staged_rhs=1)
    o_ref[...] = pltpu.matmul_pop(acc)


def build_mxu_acc(m, n, out_dtype):
    def build(interpret):
        pltpu = _tpu()

        def f(x1, y1, x2, y2):
            with _abstract_tpu("TPU7x"):   # accumulators: TPU v7 (tpu_info num_accumulators)
                return _call(_acc_kernel, jax.ShapeDtypeStruct((m, n), out_dtype), interpret,
                             scratch_shapes=[pltpu.ACC(0)((m, n), out_dtype)])(x1, y1, x2, y2)
        return f
    return build


def _acc_addr_kernel(x1, y1, x2, y2, o_ref):
    # JAX 0.10.2's form: accumulators named by address, the result's shape and dtype at the pop.
    pltpu = _tpu()
    pltpu.matmul_push_rhs(y1[...], 0, 0)
    pltpu.matmul_push_rhs(y2[...], 1, 0, transpose=True)
    pltpu.matmul_acc_lhs(8, x1[...], 0, load_staged_rhs=0)
    pltpu.matmul_acc_lhs(8, x2[...], 0, load_staged_rhs=1)
    o_ref[...] = pltpu.matmul_pop(8, o_ref.shape, o_ref.dtype, 0)


def build_mxu_acc_addr(m, n, out_dtype):
    def build(interpret):
        return lambda *xs: _call(_acc_addr_kernel, jax.ShapeDtypeStruct((m, n), out_dtype), interpret)(*xs)
    return build


def _acc_by_address() -> bool:
    import inspect
    return _has("matmul_acc_lhs") and "acc_addr" in inspect.signature(_tpu().matmul_acc_lhs).parameters


def _fifo_kernel(x_ref, y_ref, o_ref, *, rows, out_dtype):
    # One right-hand side latched by the first push, reused for each row block (FIFO order).
    pltpu = _tpu()
    pltpu.matmul_push_rhs(y_ref[...], staging_register=0, mxu_index=0)
    for i in range(o_ref.shape[0] // rows):
        pltpu.matmul_lhs_fifo(x_ref[pl.ds(i * rows, rows), :], mxu_index=0,
                              load_staged_rhs=0 if i == 0 else None)
    for i in range(o_ref.shape[0] // rows):
        o_ref[pl.ds(i * rows, rows), :] = pltpu.matmul_pop_fifo((rows, o_ref.shape[1]), out_dtype,
                                                                mxu_index=0)


def build_mxu_fifo(m, n, rows, out_dtype):
    def build(interpret):
        kernel = functools.partial(_fifo_kernel, rows=rows, out_dtype=out_dtype)
        return lambda x, y: _call(kernel, jax.ShapeDtypeStruct((m, n), out_dtype), interpret)(x, y)
    return build


def _claimed_matmul(out_dtype):
    def f(*xs):
        pairs = list(zip(xs[0::2], xs[1::2]))
        out = [jnp.matmul(a, b, preferred_element_type=out_dtype,
                          precision=jax.lax.Precision.HIGHEST) for a, b in pairs]
        return functools.reduce(jnp.add, out)
    return f


def _operands(dtype, *shapes):
    def draw(rng):
        if np.issubdtype(dtype, np.integer):
            return [rng.integers(-128, 128, size=s).astype(dtype) for s in shapes]
        return [random_array(rng, F32, s, specials=0, low=-2, high=2).astype(dtype) for s in shapes]
    return draw


def mxu_cases():
    import ml_dtypes
    for dtype in (np.dtype(ml_dtypes.bfloat16), F32, np.dtype(np.int8)):
        out = np.int32 if np.issubdtype(dtype, np.integer) else np.float32
        m, k, n = 16, 256, 256
        yield from _case(f"mxu_acc_two_staging_registers/{dtype.name}/{m}x{k}x{n}",
                         gated(build_mxu_acc(m, n, out), tpu_interpret=ACC_TPU_INTERPRET),
                         _operands(dtype, (m, k), (k, n), (m, k), (k, n)),
                         claims=_claimed_matmul(out), modes=_mxu_modes(dtype, 2 * k),
                         dot_bound=_dot_bound, not_applicable=applicable_if(
                             _has("matmul_acc_lhs") and hasattr(_tpu(), "ACC"),
                             "no pltpu.matmul_acc_lhs with pltpu.ACC accumulator refs"),
                         primitives=("matmul_push_rhs", "matmul_acc_lhs", "matmul_pop"))
        def claims(x1, y1, x2, y2, out=out):   # the second right-hand side pushed transposed
            return _claimed_matmul(out)(x1, y1, x2, y2.T)
        yield from _case(f"mxu_acc_address/{dtype.name}/{m}x{k}x{n}", build_mxu_acc_addr(m, n, out),
                         _operands(dtype, (m, k), (k, n), (m, k), (n, k)), claims=claims,
                         modes=_mxu_modes(dtype, 2 * k), dot_bound=lambda x1, y1, x2, y2:
                         _dot_bound(x1, y1, x2, y2.T),
                         not_applicable=applicable_if(_acc_by_address(), "pltpu.matmul_acc_lhs "
                                                      "names its accumulator by acc_addr only in "
                                                      "JAX 0.10.x (from 0.11 by an accumulator ref)"),
                         primitives=("matmul_push_rhs", "matmul_acc_lhs", "matmul_pop"))
        yield from _case(f"mxu_fifo/{dtype.name}/{2 * m}x{k}x{n}", build_mxu_fifo(2 * m, n, 8, out),
                         _operands(dtype, (2 * m, k), (k, n)), claims=_claimed_matmul(out),
                         modes=_mxu_modes(dtype, k), dot_bound=_dot_bound,
                         not_applicable=applicable_if(_has("matmul_lhs_fifo"), "no pltpu.matmul_lhs_fifo"),
                         primitives=("matmul_push_rhs", "matmul_lhs_fifo", "matmul_pop_fifo"))


# --------------------------------------------------------------------------------------- conv
CONVS = {
    # name: (lhs shape, rhs shape, dimension numbers, keyword arguments, dtype, preferred)
    "nhwc_same_reversed/f32": ((2, 8, 8, 4), (3, 3, 4, 8), ("NHWC", "HWIO", "NHWC"),
                               dict(padding="SAME", window_reversal=(True, False)), F32, None),
    "nchw_strided_dilated/bf16_to_f32": ((1, 4, 9, 9), (6, 4, 3, 3), ("NCHW", "OIHW", "NCHW"),
                                         dict(window_strides=(2, 1), padding=((1, 0), (2, 2)),
                                              rhs_dilation=(1, 2), lhs_dilation=(2, 1)),
                                         "bfloat16", np.float32),
    "feature_groups_acc/i8_to_i32": ((1, 6, 6, 4), (3, 3, 2, 6), ("NHWC", "HWIO", "NHWC"),
                                     dict(padding="VALID", feature_group_count=2), "int8", np.int32),
    "1d_batch_groups/f32": ((4, 10, 3), (3, 3, 4), ("NWC", "WIO", "NWC"),
                            dict(padding=((1, 1),), batch_group_count=2), F32, None),
}


def _conv_kernel(*refs, dn, kw, preferred, with_acc):
    pltpu = _tpu()
    x, w = refs[0][...], refs[1][...]
    acc = refs[2][...] if with_acc else None
    refs[-1][...] = pltpu.conv(x, w, acc, dimension_numbers=dn, preferred_element_type=preferred,
                               precision=jax.lax.Precision.HIGHEST, **kw)


def _conv_out(lhs, rhs, dn, kw, preferred):
    return jax.eval_shape(_plain_conv(dn, kw, preferred, False), jax.ShapeDtypeStruct(*lhs),
                          jax.ShapeDtypeStruct(*rhs))


def _plain_conv(dn, kw, preferred, with_acc):
    """What pltpu.conv claims: conv_general_dilated on the window-reversed kernel, plus acc."""
    def f(x, w, *acc):
        kw2 = dict(kw)
        rev = kw2.pop("window_reversal", None)
        if rev:
            spec = jax.lax.conv_dimension_numbers(x.shape, w.shape, dn).rhs_spec[2:]
            w = jnp.flip(w, [d for d, r in zip(spec, rev) if r])
        out = jax.lax.conv_general_dilated(
            x, w, kw2.pop("window_strides", (1,) * (x.ndim - 2)), kw2.pop("padding"),
            dimension_numbers=dn, preferred_element_type=preferred,
            precision=jax.lax.Precision.HIGHEST, **kw2)
        return out + acc[0] if with_acc else out
    return f


def build_conv(lhs, rhs, dn, kw, dtype, preferred, with_acc):
    def build(interpret):
        out = _conv_out((lhs, dtype), (rhs, dtype), dn, kw, preferred)
        kernel = functools.partial(_conv_kernel, dn=dn, kw=kw, preferred=preferred, with_acc=with_acc)
        return lambda *xs: _call(kernel, out, interpret)(*xs)
    return build


def _conv_bound(dn, kw, with_acc):
    plain = _plain_conv(dn, kw, np.float32, with_acc)

    def bound(x, w, *acc):
        import interp
        absacc = [np.abs(a.astype(np.float32)) for a in acc]
        return [np.asarray(interp.interpret(plain)(np.abs(x.astype(np.float32)),
                                                   np.abs(w.astype(np.float32)), *absacc))]
    return bound


def conv_cases():
    import ml_dtypes
    why = applicable_if(_has("conv"), "no pltpu.conv")
    for name, (lhs, rhs, dn, kw, dtype, preferred) in CONVS.items():
        dtype = np.dtype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
        with_acc = "acc" in name
        out = _conv_out((lhs, dtype), (rhs, dtype), dn, kw, preferred)
        shapes = [lhs, rhs] + ([out.shape] if with_acc else [])

        def inputs(rng, shapes=shapes, dtype=dtype, out=out):
            xs = _operands(dtype, *shapes[:2])(rng)
            if len(shapes) > 2:
                xs.append(_operands(np.dtype(out.dtype), shapes[2])(rng)[0])
            return xs
        integer = np.issubdtype(dtype, np.integer)
        k = int(np.prod(rhs)) // max(1, rhs[dn[1].index("O")])
        yield from _case(f"conv/{name}", build_conv(lhs, rhs, dn, kw, dtype, preferred, with_acc), inputs,
                         claims=_plain_conv(dn, kw, preferred, with_acc),
                         modes=_DEF if integer else C.dot_product(k),
                         dot_bound=None if integer else _conv_bound(dn, kw, with_acc), not_applicable=why,
                         primitives=("conv",))


# ---------------------------------------------------------------------------- stochastic_round
STOCHASTIC = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz", "float4_e2m1fn", "int4")


def _stochastic_kernel(x_ref, b_ref, o_ref):
    o_ref[...] = _tpu().stochastic_round(x_ref[...], b_ref[...], target_dtype=o_ref.dtype)


def build_stochastic(shape, target):
    def build(interpret):
        return lambda x, b: _call(_stochastic_kernel, jax.ShapeDtypeStruct(shape, target), interpret)(x, b)
    return build


def _stochastic_inputs(shape, target):
    import ml_dtypes
    t = np.dtype(getattr(ml_dtypes, target))
    top = float(ml_dtypes.iinfo(t).max if target == "int4" else ml_dtypes.finfo(t).max)

    def draw(rng):
        # Within the finite range (types without infinity have no upper neighbour beyond it),
        # exact grid values and zeros mixed in; every bit pattern of the random word.
        x = rng.uniform(-top, top, size=shape).astype(np.float32)
        grid = np.asarray(rng.choice([0.0, 1.0, -1.0, 0.5], size=shape), np.float32)
        x = np.where(rng.random(shape) < 0.1, grid, x).astype(np.float32)
        bits = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
        return [x, bits]
    return draw


def stochastic_cases():
    import ml_dtypes
    why = applicable_if(_has("stochastic_round"), "no pltpu.stochastic_round")
    for target in STOCHASTIC:
        for shape in ((8, 128), (16, 256)):
            sid = "x".join(map(str, shape))
            yield from _case(f"stochastic_round/{target}/{sid}",
                             build_stochastic(shape, np.dtype(getattr(ml_dtypes, target))),
                             _stochastic_inputs(shape, target), modes=_NEIGHBOUR,
                             not_applicable=why, primitives=("stochastic_round",))


# ----------------------------------------------------------------- pack / unpack elementwise
def _pack_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = _tpu().pack_elementwise([a_ref[...], b_ref[...]], packed_dtype=jnp.bfloat16)


def build_pack_bf16(interpret):
    return lambda a, b: _call(_pack_kernel, jax.ShapeDtypeStruct(a.shape, jnp.uint32), interpret)(a, b)


def _claimed_pack_bf16(a, b):
    # The packed bits of a.astype(bfloat16) (low half) and b.astype(bfloat16) (high half).
    def half(x):
        return jax.lax.bitcast_convert_type(x.astype(jnp.bfloat16), jnp.uint16).astype(jnp.uint32)
    return half(a) | (half(b) << 16)


def _rounding_cases(rng, shape):
    """float32 values exercising every bfloat16 rounding case: ties (low half 0x8000) with even and
    odd kept halves, just below / above ties, overflow to inf, subnormals, NaN, inf, -0, and
    random values with specials."""
    hi = rng.integers(0, 1 << 16, size=shape, dtype=np.uint32) << 16
    low = rng.choice(np.array([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF], np.uint32), size=shape)
    crafted = (hi | low).view(np.float32)
    near_max = np.full(shape, np.float32(3.3961e38), np.float32)   # above bf16's max + half ulp
    mixed = random_array(rng, F32, shape, specials=0.3)
    pick = rng.integers(0, 3, size=shape)
    return np.where(pick == 0, crafted, np.where(pick == 1, mixed, np.where(
        rng.random(shape) < 0.2, near_max, crafted))).astype(np.float32)


def _unpack_kernel(x_ref, o0, o1):
    pltpu = _tpu()
    o0[...] = pltpu.unpack_elementwise(x_ref[...], index=0, packed_dtype=jnp.uint4, unpacked_dtype=jnp.uint8)
    o1[...] = pltpu.unpack_elementwise(x_ref[...], index=1, packed_dtype=jnp.uint4, unpacked_dtype=jnp.uint8)


def build_unpack_unsigned(interpret):
    out = [jax.ShapeDtypeStruct((8, 128), jnp.uint8)] * 2
    return lambda x: _call(_unpack_kernel, out, interpret)(x)


def _claimed_unpack_unsigned(x):
    # Field i of each byte, sign-extended (Mosaic's signless types): an arithmetic shift of the
    # field moved to the top of an int8.
    s = jax.lax.bitcast_convert_type(x, jnp.int8)
    lo = jax.lax.shift_right_arithmetic(jax.lax.shift_left(s, jnp.int8(4)), jnp.int8(4))
    hi = jax.lax.shift_right_arithmetic(s, jnp.int8(4))
    return [jax.lax.bitcast_convert_type(v, jnp.uint8) for v in (lo, hi)]


def packing_cases():
    why = applicable_if(_has("pack_elementwise"), "no pltpu.pack_elementwise")
    shape = (16, 128)
    yield from _case("pack_elementwise/f32_to_bf16_rounding/16x128", build_pack_bf16,
                     lambda rng: [_rounding_cases(rng, shape), _rounding_cases(rng, shape)],
                     claims=_claimed_pack_bf16, modes=_DEF, not_applicable=why,
                     primitives=("pack_elementwise",))
    yield from _case("unpack_elementwise/uint4_fields_of_uint8/8x128", build_unpack_unsigned,
                     lambda rng: [rng.integers(0, 256, size=(8, 128)).astype(np.uint8)],
                     claims=_claimed_unpack_unsigned, modes=_DEF, not_applicable=why,
                     primitives=("unpack_elementwise",))


# ------------------------------------------------------------------- emit_pipeline over cores
def _pipeline_step_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 + pl.program_id(0) * 100   # program_id(0): the pipeline step


def build_pipeline_core_axis(steps, cores):
    # pltpu.emit_pipeline(core_axis=0) inside a kernel whose grid axis 0 is the core axis
    # ("core_parallel"): each core runs its share of the pipeline's steps.
    def build(interpret):
        pltpu = _tpu()
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

        def kernel(x_hbm, o_hbm):
            pltpu.emit_pipeline(_pipeline_step_kernel, grid=(steps,), in_specs=[spec], out_specs=spec,
                                core_axis=0, dimension_semantics=(pltpu.PARALLEL,))(x_hbm, o_hbm)

        def f(x):
            with _abstract_tpu("TPU v5 lite"):
                return pl.pallas_call(
                    kernel, grid=(cores,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                    out_specs=pl.BlockSpec(memory_space=pl.ANY), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                    compiler_params=pltpu.CompilerParams(dimension_semantics=("core_parallel",)),
                    interpret=interpret)(x)
        return f
    return build


def _pipeline_claim(x):
    steps = x.shape[0] // 8
    return x * 2 + jnp.repeat(jnp.arange(steps, dtype=x.dtype) * 100, 8)[:, None]


def pipeline_cases():
    import interp.rules  # noqa: F401  (registers every rule)
    from interp.registry import PARTIAL, RULES
    why = applicable_if("emit_pipeline" in RULES and "core_axis" not in PARTIAL.get("emit_pipeline", ""),
                        "emit_pipeline has no expansion outside the Mosaic lowering (spec/pallas.py)")
    for steps, cores in ((4, 2), (5, 2)):
        yield from _case(f"emit_pipeline_core_axis/i32/{steps}_steps_{cores}_cores",
                         gated(build_pipeline_core_axis(steps, cores), hlo_interpret=_PIPELINE_HLO_INTERPRET,
                               tpu_interpret=PIPELINE_PRIMITIVE_TPU_INTERPRET),
                         lambda rng, steps=steps: [random_array(rng, np.dtype(np.int32), (8 * steps, 128),
                                                                low=-1000, high=1000)],
                         claims=_pipeline_claim, modes=_DEF,
                         jax_config=(("jax_use_emit_pipeline_primitive", True),),
                         not_applicable=why, primitives=("emit_pipeline",))


# -------------------------------------------------------------------------- remove_memory_space
def _remove_memory_space():
    try:
        from jax._src.pallas.mosaic.interpret.interpret_pallas_call import remove_memory_space_p
    except ImportError:
        return None
    return remove_memory_space_p


def cases():
    yield from mxu_cases()
    yield from conv_cases()
    yield from stochastic_cases()
    yield from packing_cases()
    yield from pipeline_cases()
    prim = _remove_memory_space()   # a plain program: XLA runs it (its lowering is the identity)
    yield Case(id="pallas_tpu/remove_memory_space/f32/8x128", fn=lambda x: prim.bind(x),
               inputs=lambda rng: [random_array(rng, F32, (8, 128))], kind=LAX, modes=_DEF,
               not_applicable=applicable_if(prim is not None, "no remove_memory_space primitive"),
               primitives=("remove_memory_space",))
