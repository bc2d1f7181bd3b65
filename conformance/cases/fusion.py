"""Fusion: Pallas fuser programs (input fusions and epilogues pulled into a pallas_call through
the fuser's block-spec rules), block-scaled matmul in every BlockScaleConfig mode, and the
excess-precision family (programs whose per-equation rounding a fusing compiler may skip).

The fuser programs all call one fusible kernel (``fusible_double``: a (8, 128)-blocked
``pallas_call`` computing ``2 * x``, exact in every float type; epilogue reductions use a block
spanning the reduced axes, ``FUSER_BLOCKS``) between an input fusion and an output fusion that
exercise one block-spec rule family each (pull rules through input fusions, push rules through
epilogues). What the installed fuser refuses is stated in spec/fusion.py (FUSER_LIMITS,
FUSER_REDUCTIONS_WITHOUT_RULES). ``FUSER_PROGRAMS`` is shared with tests/test_fusion.py, which
checks the fused and unfused programs against each other equation by equation
(conformance/fusion_diff.py). The conformance run executes the fused programs on the Pallas
runners (``fusion/fuser/*``) and the unfused ones on the XLA runners (``fusion/fuser_unfused/*``)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from spec import compliance as C

from ..case import LAX, PALLAS, Case, applicable_if, random_array

F32, BF16, F16 = np.dtype(np.float32), np.dtype(jnp.bfloat16), np.dtype(np.float16)
M, N = 16, 256          # the kernel's operand shape
BM, BN = 8, 128         # its block shape: a (2, 2) grid


# ---------------------------------------------------------------------------- the fusible kernel
def _double_kernel(x_sp, z_sp, x_refs, z_refs, o_refs, *, x_fn, z_fn):
    pids = (pl.program_id(0), pl.program_id(1))
    sp = (x_sp, z_sp)
    x = x_fn(pids, sp, jax.tree.map(lambda r: r[...], x_refs))
    out = z_fn(pids, sp, jax.tree.map(lambda r: r[...], z_refs), x * 2)
    for r, v in zip(jax.tree.leaves(o_refs), jax.tree.leaves(out)):
        r[...] = v


def fusible_double(interpret=True, block=(BM, BN)):
    """A fusible ``2 * x`` for (M, N) operands, written as the fuser's tests write kernels
    (tests/pallas/tpu_fusible_matmul_test.py): values and scalar prefetch taken out of the fusions,
    block specs pulled through the input fusion and pushed through the output fusion. ``block``
    divides (M, N); the grid is (M // block[0], N // block[1])."""
    bm, bn = block
    from jax.experimental.pallas import fuser
    from jax.experimental.pallas import tpu as pltpu

    @fuser.fusible
    def double(x, z):
        typ = jax.ShapeDtypeStruct(x.shape, x.dtype)
        if z is None:
            z = lambda v: v   # noqa: E731
        spec = pl.BlockSpec((bm, bn), lambda i, j, *_: (i, j))
        x_fn, x_values, x_sp = fuser.get_fusion_values(x)
        z_fn, z_values, z_sp = fuser.get_fusion_values(z, typ)
        x_fn, (x_specs,), _ = fuser.pull_block_spec(
            x_fn, spec, scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(0), grid_len=2)(x_values)
        z_out_specs = fuser.push_block_spec(z, spec)(typ)
        z_fn, (z_specs, _), _ = fuser.pull_block_spec(
            z_fn, z_out_specs, scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(1), grid_len=2)(
                z_values, typ)
        out_type = jax.eval_shape(z, typ)
        # Scalar prefetch operands get a leading unit dimension (as in JAX's fuser tests; 0.10.2
        # indexes them with [0]).
        sp = jax.tree.map(lambda v: v[None], (x_sp, z_sp))
        out = pl.pallas_call(
            functools.partial(_double_kernel, x_fn=x_fn, z_fn=z_fn),
            grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=len(sp),
                                                   grid=(M // bm, N // bn), in_specs=[x_specs, z_specs],
                                                   out_specs=[z_out_specs]),
            out_shape=[out_type], interpret=interpret)(*sp, x_values, z_values)
        return out[0]
    return double


# ---------------------------------------------------------------------------- fuser programs
def _f32(rng, shape, ints=False):
    if ints:   # small integers: sums of them are exact in any order (reductions)
        return rng.integers(-8, 9, shape).astype(np.float32)
    return random_array(rng, F32, shape, specials=0, low=-4, high=4)


def _prng_fusion(k, x, key_data):
    # random_seed has no block-spec rule: the key comes in as data (random_wrap has one).
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return k(x + jax.random.uniform(key, (M, N), jnp.float32))


def _relu(x):
    return jnp.maximum(x, 0.0)


def _custom_relu():
    """A user-defined fusion (fuser.custom_fusion): relu with elementwise block-spec rules and an
    eval rule that computes the same (the custom_fusion primitive in the unfused program). Exact
    arithmetic: XLA:CPU turns a division by a constant into a multiply by its rounded reciprocal."""
    from jax.experimental.pallas import fuser
    relu = fuser.custom_fusion(_relu)
    relu.def_pull_block_spec(lambda bss: bss)
    relu.def_push_block_spec(lambda bss: bss)
    relu.def_eval_rule(lambda ctx, x: (_relu(x),))
    return relu


# name -> (program(kernel) -> fn, inputs(rng) -> args, rule family the block specs go through).
# Every program's arithmetic is exact or one IEEE operation per element, and no multiply feeds an
# add (XLA:CPU contracts those into FMAs): fused, unfused and XLA:CPU agree bit for bit.
FUSER_PROGRAMS = {
    "elementwise": (lambda k: lambda x, y: k(jnp.maximum(x, y) * x) + y,
                    lambda r: [_f32(r, (M, N)), _f32(r, (M, N))]),
    "broadcast": (lambda k: lambda x, b: k(x + b[None, :]) - b[None, :],
                  lambda r: [_f32(r, (M, N)), _f32(r, (N,))]),
    "broadcast_scalar": (lambda k: lambda x, s: k(x * s),
                         lambda r: [_f32(r, (M, N)), _f32(r, ())]),
    "reshape": (lambda k: lambda x: k(x.reshape(M, N)),
                lambda r: [_f32(r, (M, 2, N // 2))]),
    "transpose": (lambda k: lambda y: k(y.T),
                  lambda r: [_f32(r, (N, M))]),
    "slice": (lambda k: lambda x: k(x[8:8 + M]),
              lambda r: [_f32(r, (3 * M, N))]),
    "dynamic_slice": (lambda k: lambda x, i: k(x[i]),
                      lambda r: [_f32(r, (3, M, N)), np.int32(r.integers(0, 3))]),
    "slice_epilogue": (lambda k: lambda x, b: k(x) + b[1],
                       lambda r: [_f32(r, (M, N)), _f32(r, (4, M, N))]),
    "concatenate": (lambda k: lambda x, y: k(jnp.concatenate([x, y], axis=1)),
                    lambda r: [_f32(r, (M, N // 2)), _f32(r, (M, N // 2))]),
    "select": (lambda k: lambda x, y: k(jnp.where(x > y, x, y)),
               lambda r: [_f32(r, (M, N)), _f32(r, (M, N))]),
    "reduce_sum": (lambda k: lambda x: k(x.sum(axis=-1)),
                   lambda r: [_f32(r, (M, N, 4), ints=True)]),
    "convert": (lambda k: lambda x: k(x.astype(jnp.float32)).astype(jnp.bfloat16),
                lambda r: [random_array(r, BF16, (M, N), specials=0)]),
    "bf16_chain": (lambda k: lambda x, y, z: k((x + y) * z) - x,
                   lambda r: [random_array(r, BF16, (M, N), specials=0) for _ in range(3)]),
    "prng": (lambda k: lambda x, i: _prng_fusion(k, x, i),
             lambda r: [_f32(r, (M, N)), r.integers(0, 2**32, (2,), dtype=np.uint32)]),
    "multiple_outputs": (lambda k: lambda x, y: (lambda o: (o + y, jnp.maximum(o, y)))(k(x)),
                         lambda r: [_f32(r, (M, N)), _f32(r, (M, N))]),
    "custom_fusion": (lambda k: (lambda relu: lambda x, y: k(relu(x) + y) - y)(_custom_relu()),
                      lambda r: [_f32(r, (M, N)), _f32(r, (M, N))]),
    "bitcast": (lambda k: lambda u: k(lax.bitcast_convert_type(u, jnp.float32)),
                lambda r: [_f32(r, (M, N)).view(np.uint32)]),
    "dynamic_slice_epilogue": (lambda k: lambda x, b, i: k(x) + b[i],
                               lambda r: [_f32(r, (M, N)), _f32(r, (3, M, N)), np.int32(r.integers(0, 3))]),
    # A matmul pulled into the kernel (the contracting dimension read whole); integer-valued
    # operands keep every summation order exact.
    "dot_general": (lambda k: lambda a, b: k(a @ b),
                    lambda r: [_f32(r, (M, 32), ints=True), _f32(r, (32, N), ints=True)]),
    # Epilogues through the push rules of the structural primitives (the kernel's output block
    # pushed forward, the other operands' blocks pulled back).
    "transpose_epilogue": (lambda k: lambda x, yt: k(x).T + yt,
                           lambda r: [_f32(r, (M, N)), _f32(r, (N, M))]),
    "reshape_epilogue": (lambda k: lambda x: k(x).reshape(M, 2, N // 2),
                         lambda r: [_f32(r, (M, N))]),
    "broadcast_epilogue": (lambda k: lambda x: jnp.broadcast_to(k(x), (2, M, N)),
                           lambda r: [_f32(r, (M, N))]),
    "select_epilogue": (lambda k: lambda x, y: jnp.where(y > 0, k(x), y),
                        lambda r: [_f32(r, (M, N)), _f32(r, (M, N))]),
    # Epilogue reductions: reduce_sum's push rule needs blocks spanning the reduced axes
    # (FUSER_BLOCKS); integer-valued inputs keep every summation order exact (XLA:CPU's too).
    "epilogue_reduce_sum_rows": (lambda k: lambda x: k(x).sum(axis=1),
                                 lambda r: [_f32(r, (M, N), ints=True)]),
    "epilogue_reduce_sum_cols": (lambda k: lambda x, b: k(x).sum(axis=0) + b,
                                 lambda r: [_f32(r, (M, N), ints=True), _f32(r, (N,))]),
    "epilogue_reduce_sum_all": (lambda k: lambda x: k(x).sum(),
                                lambda r: [_f32(r, (M, N), ints=True)]),
}
# The kernel's block shape where it is not (BM, BN): the reduced axes of an epilogue reduction
# lie inside one block (block_spec.py _reduce_sum_push_rule: "reduce_sum over partial blocks not
# supported yet").
FUSER_BLOCKS = {"epilogue_reduce_sum_rows": (BM, N), "epilogue_reduce_sum_cols": (M, BN),
                "epilogue_reduce_sum_all": (M, N)}


def fuser_program(name: str, interpret=True, fused: bool = True):
    """The program ``name`` with the fusible kernel, ``fuser.fuse``d or not."""
    from jax.experimental.pallas import fuser
    prog = FUSER_PROGRAMS[name][0](fusible_double(interpret, FUSER_BLOCKS.get(name, (BM, BN))))
    return fuser.fuse(prog) if fused else prog


# ---------------------------------------------------------------------------- excess precision
# Each program rounds to a narrow type between two operations: the reference rounds per
# equation; a backend that keeps f32 (excess precision) or contracts mul+add into an FMA
# differs, and the case says which allowance may explain it.
def _excess(name, fn, dtype, shapes, mode, prims, dot_bound=None):
    return Case(id=f"fusion/excess_precision/{name}/{np.dtype(dtype).name}", fn=fn,
                inputs=lambda rng: [random_array(rng, dtype, s, specials=0, low=-3, high=3) for s in shapes],
                modes=mode, primitives=prims, tags=("excess-precision",), dot_bound=dot_bound)


def _excess_cases():
    for dt in (BF16, F16):
        yield _excess("add_chain", lambda x, y, z: (x + y) + z, dt, [(64,)] * 3, C.exact(), ("add",))
        yield _excess("mul_add", lambda x, y, z: x * y + z, dt, [(64,)] * 3, C.exact(), ("mul", "add"))
        yield _excess("round_trip", lambda x, y: (x.astype(jnp.float32) * y.astype(jnp.float32)).astype(dt)
                      .astype(jnp.float32) + 1, dt, [(64,)] * 2, C.exact(), ("convert_element_type", "mul"))
        yield _excess("convert_pair", lambda x: x.astype(jnp.float32).astype(dt) * x, dt, [(64,)], C.exact(),
                      ("convert_element_type",))
        yield _excess("reduce_sum", lambda x: jnp.sum(x, axis=-1), dt, [(8, 64)], C.dot_product(64),
                      ("reduce_sum",), dot_bound=lambda x: [np.abs(x.astype(np.float64)).sum(-1)])
    yield _excess("f32_mul_add", lambda x, y, z: x * y + z, F32, [(64,)] * 3, C.exact(), ("mul", "add"))


# ---------------------------------------------------------------------------- block-scaled matmul
def _scaled_matmul_inputs(rng, mode, b=2, m=4, n=3, k=64):
    """(lhs, rhs, lhs_scales, rhs_scales) of one BlockScaleConfig mode, scales of moderate size."""
    cfg = jax.nn.get_scaled_dot_general_config(mode, **({"global_scale": jnp.float32(1)} if mode == "nvfp4"
                                                        else {}))
    dt, st, bs = np.dtype(cfg.data_type), np.dtype(cfg.scale_type), cfg.block_size
    fmax = float(jnp.finfo(dt).max)

    def data(shape):
        return np.clip(rng.standard_normal(shape) * fmax / 3, -fmax, fmax).astype(dt)

    def scales(shape):
        if mode == "nvfp4":   # e4m3fn scales: positive values in [2^-4, 16), the same on every host
            from interp.rules.lax_special import correctly_rounded
            return correctly_rounded("exp2", rng.uniform(-4, 4, shape)).astype(st)
        return np.ldexp(1.0, rng.integers(-8, 9, shape)).astype(st)
    return [data((b, m, k)), data((b, n, k)), scales((b, m, k // bs)), scales((b, n, k // bs))]


def scaled_matmul_bound(a, b, sa, sb):
    """sum_k |a_k sa_k| |b_k sb_k| per output element (the DOT_PRODUCT bound), in float64."""
    def deq(x, s):
        return np.abs(x.astype(np.float64) * np.repeat(s.astype(np.float64), x.shape[-1] // s.shape[-1], -1))
    return [np.einsum("bmk,bnk->bmn", deq(a, sa), deq(b, sb))]


def _has_mode(mode) -> bool:
    try:   # JAX 0.10.2 has no mxfp4
        jax.nn.get_scaled_dot_general_config(mode)
        return True
    except ValueError:
        return False


def _scaled_matmul_cases():
    for mode in ("mxfp8", "nvfp4", "mxfp4"):
        yield Case(id=f"fusion/scaled_matmul/{mode}", fn=lambda a, b, sa, sb: jax.nn.scaled_matmul(a, b, sa, sb),
                   inputs=functools.partial(_scaled_matmul_inputs, mode=mode), modes=C.dot_product(64),
                   dot_bound=scaled_matmul_bound, primitives=("scaled_matmul_wrapper",), tags=("block-scaled",),
                   not_applicable=applicable_if(_has_mode(mode), f"jax.nn.get_scaled_dot_general_config has no "
                                                                 f"{mode!r} mode"))
    # jax.lax.scaled_dot (JAX >= 0.12): the same product, batched
    dn = (((2,), (2,)), ((0,), (0,)))
    yield Case(id="fusion/scaled_dot/mxfp8",
               fn=lambda a, b, sa, sb: lax.scaled_dot(a, b, lhs_scale=sa, rhs_scale=sb, dimension_numbers=dn,
                                                      preferred_element_type=jnp.float32),
               inputs=functools.partial(_scaled_matmul_inputs, mode="mxfp8"), modes=C.dot_product(64),
               dot_bound=scaled_matmul_bound, primitives=("scaled_dot",), tags=("block-scaled",),
               not_applicable=applicable_if(hasattr(lax, "scaled_dot"), "no jax.lax.scaled_dot"))


# The fuser gives a 0-d operand of broadcast_in_dim a whole-array block in memory space ANY, which
# the fused kernel then loads directly: TPU kernels cannot (TPU interpret mode raises "Buffers with a
# memory space of HBM or ANY cannot be referenced directly"). No runner target selects HLO interpret
# mode alone for a TPU-written kernel, so that program stays in tests/test_fusion.py only.
NOT_TPU_VALID = {"broadcast_scalar"}
FUSED_DIFFERS_BY_DESIGN = {"prng"}


def _fuser_cases():
    for name, (_, inputs) in FUSER_PROGRAMS.items():
        if name in NOT_TPU_VALID:
            continue
        # The reference runner also evaluates the unfused program and requires the same bits
        # (with the first differing equation on failure), except where the arithmetic differs by
        # design: the fuser folds block indices into PRNG keys.
        unfused = None if name in FUSED_DIFFERS_BY_DESIGN else fuser_program(name, fused=False)
        yield Case(id=f"fusion/fuser/{name}", fn=None, kind=PALLAS, pallas_targets=("tpu",),
                   build=lambda interpret, name=name: fuser_program(name, interpret), inputs=inputs,
                   modes=C.exact(), primitives=("pallas_call",), tags=("fuser",), unfused_fn=unfused)


def _unfused_cases():
    # The unfused programs (the Fusible call with its unfused meaning, the kernel run in Pallas'
    # HLO interpret mode) on the XLA backends: what the fused cases above must agree with.
    # (Reference fused == reference unfused, with the first differing equation on failure: the
    # reference runner of the fused cases above, through conformance/fusion_diff.py.)
    for name, (_, inputs) in FUSER_PROGRAMS.items():
        yield Case(id=f"fusion/fuser_unfused/{name}", fn=fuser_program(name, fused=False), kind=LAX,
                   inputs=inputs, modes=C.exact(), primitives=("pallas_call",), tags=("fuser",))


def cases():
    yield from _fuser_cases()
    yield from _unfused_cases()
    yield from _scaled_matmul_cases()
    yield from _excess_cases()
