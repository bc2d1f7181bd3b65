"""Pallas Triton: kernels written for ``pallas:triton`` (the Triton lowering of Pallas on GPU), each
also run on ``pallas:interpret`` (JAX's HLO interpret mode) and in the reference.

- every Triton-side primitive: atomics (add/max/min/xchg/and/or/xor and compare-and-swap, integer
  and float, distinct / duplicate / masked indices, across grid programs), masked loads and stores
  with ``other``, ``program_id`` / ``num_programs`` on 1-3 grid axes, ``dot`` for every input
  dtype, precision and algorithm preset JAX's Triton lowering accepts
  (``jax/_src/pallas/triton/lowering.py`` ``_dot_general_lowering``), the ``multiple_of`` /
  ``max_contiguous`` hints, ``approx_tanh`` and ``elementwise_inline_asm``;
- generic Triton-style kernels (whole-array refs indexed by ``pl.ds`` offsets with tail masks, a
  blocked grid, input/output aliasing, loops inside a kernel);
- every Triton kernel JAX ships in ``jax.experimental.pallas.ops.gpu`` (softmax, layer_norm,
  rms_norm, attention forward and backward, decode attention, paged attention) at several
  shapes and dtypes, against the same kernel in the reference and against the plain JAX
  function it claims to compute.

Where JAX's Triton lowering refuses or crashes on a kernel, ``TRITON_LOWERING`` says how (checked
on CPU by tests/test_pallas_triton.py, which lowers every case for an abstract H100); a crash is a
known divergence (spec/divergences.py) with its one-line reproducer, a refusal is
backend-unsupported with JAX's reason. Kernels JAX's HLO interpret mode cannot run are gated with
the error it raises (``conformance.cases.pallas.gated``).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from spec import compliance as C
from spec import pallas_triton as S
from spec.lax_contractions import split_dot_length

from ..case import PALLAS, Case, random_array
from .pallas import Gate, gated

F32, F16, BF16, I32, U32 = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(jnp.bfloat16),
                            np.dtype(np.int32), np.dtype(np.uint32))
_DEF = C.exact("definition")
LANES = 16


def _plgpu():
    from jax.experimental.pallas import triton as plgpu
    return plgpu


def _prim_name(attr):
    """The name this JAX gives a Triton primitive (0.12 dropped the _p suffix of some)."""
    from jax._src.pallas.triton import primitives
    return getattr(primitives, attr).name


def _params(**kw):
    return _plgpu().CompilerParams(**kw)


def _case(name, build, inputs, *, modes=_DEF, primitives=("pallas_call",), targets=("triton",), **kw):
    if hasattr(build, "ungated"):       # the reference runs the kernel itself, never the gate
        kw.setdefault("reference_fn", build.ungated(True))
    return Case(id=f"pallas_triton/{name}", fn=None, build=build, inputs=inputs, kind=PALLAS,
                pallas_targets=targets, modes=modes, primitives=tuple(primitives), **kw)


# How JAX's Triton lowering treats a case that it does not lower: {case id: Gate(why, ((exception
# type, message fragment),), first JAX version that lowers it or None)}. Every other case lowers:
# tests/test_pallas_triton.py checks both on CPU, lowering each case for an abstract H100.
TRITON_LOWERING: dict[str, Gate] = {}
_INT_MINMAX_LOWERING = Gate("JAX's Triton lowering sends a vector integer atomic max/min down the float "
                            "path (_expand_atomic_fp_min_max asserts); spec/divergences.py "
                            "pallas-triton-vector-integer-atomic-minmax-assert",
                            (("AssertionError", ""),), fixed_in="0.12.0")
_UNSIGNED_DOT_LOWERING = Gate("JAX's Triton lowering refuses unsigned integer dots (dot_general treats "
                              "integer inputs as signed)", (("NotImplementedError", "Unsigned integer dtype"),))

# JAX's HLO interpret mode discharges atomic_rmw for add/max/min without a mask only
# (jax/_src/pallas/triton/primitives.py _atomic_rmw_discharge_rule raises NotImplementedError).
_MASKED_ATOMIC_HLO = Gate("JAX's HLO interpret mode has no discharge for a masked atomic",
                          (("NotImplementedError", ""),))
_XCHG_BITWISE_HLO = Gate("JAX's HLO interpret mode discharges only atomic add/max/min (not xchg/and/"
                         "or/xor)", (("NotImplementedError", "AtomicOpType"),))
_BARRIER_HLO = Gate("JAX's HLO interpret mode has no CPU lowering of debug_barrier",
                    (("NotImplementedError", "MLIR translation rule for primitive"),))
_INLINE_ASM_HLO = Gate("JAX's HLO interpret mode cannot lower elementwise_inline_asm (PTX) to HLO",
                       (("NotImplementedError", "MLIR translation rule for primitive"),))


# ---------------------------------------------------------------------------------- atomics
# One program of LANES lanes: out starts as `init`; the atomic applies `val` at `idx` (and the
# mask); the outputs are the updated ref and, where every lane's old value is defined (distinct
# indices), the values the lanes saw.
def _atomic_kernel(idx_ref, val_ref, init_ref, out_ref, *seen_ref, op, masked):
    out_ref[...] = init_ref[...]
    mask = (jnp.arange(LANES) % 5 != 3) if masked else None
    seen = getattr(_plgpu(), f"atomic_{op}")(out_ref, (idx_ref[...],), val_ref[...], mask=mask)
    if seen_ref:
        seen_ref[0][...] = jnp.where(mask, seen, jnp.zeros_like(seen)) if masked else seen


def build_atomic(op, dtype, *, seen, masked=False):
    kernel = functools.partial(_atomic_kernel, op=op, masked=masked)
    outs = [jax.ShapeDtypeStruct((LANES,), dtype)] * (2 if seen else 1)

    def build(interpret):
        return lambda idx, val, init: pl.pallas_call(kernel, out_shape=outs, compiler_params=_params(),
                                                     interpret=interpret)(idx, val, init)
    return build


def _atomic_inputs(dtype, indices, *, same_per_index=False):
    def make(rng):
        idx = (rng.permutation(LANES) if indices == "distinct" else rng.integers(0, 6, size=LANES)).astype(np.int32)
        if np.dtype(dtype).kind == "f":
            # No NaN and no zeros: Triton's float max/min (integer max/min on the bits) leaves
            # NaN and -0.0 vs +0.0 undefined (spec/pallas_triton.py atomic_rmw/float-minmax).
            val = random_array(rng, dtype, (LANES,), specials=0, low=-100, high=100)
            init = random_array(rng, dtype, (LANES,), specials=0, low=-100, high=100)
            val[val == 0], init[init == 0] = 1, 1
        else:
            val = rng.integers(-1000, 1000, size=LANES).astype(dtype)
            init = rng.integers(-1000, 1000, size=LANES).astype(dtype)
        if same_per_index:   # duplicate lanes exchange the same value: a defined final state
            val = (idx.astype(np.float64) * 3 - 7).astype(dtype)
        return [idx, val, init]
    return make


def _sum_bound(idx, val, init):
    """sum |init| + sum |val| per element: the DOT_PRODUCT bound of duplicate float additions (the
    lanes' order of addition is the hardware's)."""
    b = np.abs(init.astype(np.float64))
    np.add.at(b, idx, np.abs(val.astype(np.float64)))
    return [b]


def atomic_cases():
    for dtype in (I32, F32):
        t = dtype.name
        for op in ("add", "max", "min"):
            for indices in ("distinct", "duplicates"):
                cid = f"atomic_{op}/{t}/{indices}"
                modes = _DEF
                kw = {}
                if indices == "duplicates" and op == "add" and dtype == F32:
                    modes, kw = C.dot_product(LANES, "atomic-float-order"), \
                        {"dot_bound": _sum_bound}
                yield _case(cid, build_atomic(op, dtype, seen=indices == "distinct"),
                            _atomic_inputs(dtype, indices), modes=modes,
                            primitives=("pallas_call", "atomic_rmw"), **kw)
                if dtype == I32 and op in ("max", "min"):
                    TRITON_LOWERING[f"pallas_triton/{cid}"] = _INT_MINMAX_LOWERING
            cid = f"atomic_{op}/{t}/masked"
            yield _case(cid, gated(build_atomic(op, dtype, seen=True, masked=True), hlo_interpret=_MASKED_ATOMIC_HLO),
                        _atomic_inputs(dtype, "distinct"), primitives=("pallas_call", "atomic_rmw"))
            if dtype == I32 and op in ("max", "min"):
                TRITON_LOWERING[f"pallas_triton/{cid}"] = _INT_MINMAX_LOWERING
    # float16 atomics: add only (jax _atomic_abstract_eval refuses the others for f16).
    yield _case("atomic_add/float16/distinct", build_atomic("add", F16, seen=True),
                _atomic_inputs(F16, "distinct"), primitives=("pallas_call", "atomic_rmw"))
    for dtype in (I32, F32):
        yield _case(f"atomic_xchg/{dtype.name}/distinct",
                    gated(build_atomic("xchg", dtype, seen=True), hlo_interpret=_XCHG_BITWISE_HLO),
                    _atomic_inputs(dtype, "distinct"), primitives=("pallas_call", "atomic_rmw"))
    yield _case("atomic_xchg/float32/duplicates_same_value",
                gated(build_atomic("xchg", F32, seen=False), hlo_interpret=_XCHG_BITWISE_HLO),
                _atomic_inputs(F32, "duplicates", same_per_index=True), primitives=("pallas_call", "atomic_rmw"))
    yield _case("atomic_xchg/int32/masked",
                gated(build_atomic("xchg", I32, seen=True, masked=True), hlo_interpret=_MASKED_ATOMIC_HLO),
                _atomic_inputs(I32, "distinct"), primitives=("pallas_call", "atomic_rmw"))
    for op in ("and", "or", "xor"):   # commutative: duplicate lanes give one defined result
        yield _case(f"atomic_{op}/uint32/duplicates",
                    gated(build_atomic(op, U32, seen=False), hlo_interpret=_XCHG_BITWISE_HLO),
                    _atomic_inputs(U32, "duplicates"), primitives=("pallas_call", "atomic_rmw"))
    yield from grid_atomic_cases()
    yield from cas_cases()


# Atomics across the programs of a grid (their real use): every program folds its block into one
# element of an output that aliases `init` (so it starts defined), with a scalar index.
def _grid_atomic_kernel(x_ref, init_ref, out_ref, *, op):
    block = x_ref[...]
    if op == "add":
        part = jnp.sum(block)
    else:
        part = jnp.max(block) if op == "max" else jnp.min(block)
    getattr(_plgpu(), f"atomic_{op}")(out_ref, (pl.program_id(0) % 2,), part)


def build_grid_atomic(op, dtype, programs=8, block=32):
    kernel = functools.partial(_grid_atomic_kernel, op=op)

    def build(interpret):
        return lambda x, init: pl.pallas_call(
            kernel, grid=(programs,), out_shape=jax.ShapeDtypeStruct((2,), dtype),
            in_specs=[pl.BlockSpec((block,), lambda i: (i,)), pl.BlockSpec((2,), lambda i: (0,))],
            out_specs=pl.BlockSpec((2,), lambda i: (0,)), input_output_aliases={1: 0},
            compiler_params=_params(), interpret=interpret)(x, init)
    return build


def grid_atomic_cases():
    ints = lambda rng: [rng.integers(-10**6, 10**6, size=256).astype(np.int32),
                        rng.integers(-10**6, 10**6, size=2).astype(np.int32)]
    for op in ("add", "max", "min"):
        yield _case(f"atomic_{op}/int32/scalar_index_across_grid", build_grid_atomic(op, I32), ints,
                    primitives=("pallas_call", "atomic_rmw"))
    # float: the programs' order of addition is the hardware's; the in-block sum's order is the
    # lowering's: a dot-product bound over all 128 terms of an element.
    floats = lambda rng: [random_array(rng, F32, (256,), specials=0, low=-4, high=4),
                          random_array(rng, F32, (2,), specials=0, low=-4, high=4)]

    def bound(x, init):
        return [np.abs(init.astype(np.float64)) + np.abs(x.astype(np.float64)).reshape(8, 32).sum(1)
                .reshape(4, 2).sum(0)]
    yield _case("atomic_add/float32/block_sums_across_grid", build_grid_atomic("add", F32), floats,
                modes=C.dot_product(129, "atomic-float-order"), dot_bound=bound,
                primitives=("pallas_call", "atomic_rmw", "reduce_sum"))


# compare-and-swap on scalar refs: one that matches (swapped) and one that does not, per dtype;
# and the float cases where a bitwise compare and a float compare part (-0.0 vs +0.0, NaN).
def _cas_kernel(v_ref, a_ref, b_ref, seen_ref):
    a_ref[...] = v_ref[0]
    b_ref[...] = v_ref[1]
    seen_ref[0] = _plgpu().atomic_cas(a_ref, v_ref[2], v_ref[3])
    seen_ref[1] = _plgpu().atomic_cas(b_ref, v_ref[4], v_ref[5])


def build_cas(dtype):
    def build(interpret):
        outs = [jax.ShapeDtypeStruct((), dtype)] * 2 + [jax.ShapeDtypeStruct((2,), dtype)]
        return lambda v: pl.pallas_call(_cas_kernel, out_shape=outs, compiler_params=_params(),
                                        interpret=interpret)(v)
    return build


def _cas_values(dtype, special=False):
    def make(rng):
        if special:   # +0.0 holds, cmp -0.0 (float-equal, bits differ); NaN holds, cmp that NaN
            return [np.array([0.0, np.nan, -0.0, 5.0, np.nan, 6.0], dtype)]
        a, b = (rng.integers(-1000, 1000, size=2) if dtype.kind == "i" else rng.uniform(-9, 9, size=2)).astype(dtype)
        return [np.array([a, b, a, a + 1, b + 3, b - 1], dtype)]
    return make


def cas_cases():
    for dtype in (I32, F32):
        yield _case(f"atomic_cas/{dtype.name}/match_and_mismatch", build_cas(dtype), _cas_values(dtype),
                    primitives=("pallas_call", "atomic_cas"))
    yield _case("atomic_cas/float32/signed_zero_and_nan_compare_bits", build_cas(F32), _cas_values(F32, True),
                primitives=("pallas_call", "atomic_cas"))


# ------------------------------------------------------------------- masked loads and stores
def _tail_kernel(x_ref, o_ref, *, n, block, other):
    # The canonical Triton kernel: whole-array refs, offsets from program_id, a tail mask.
    plgpu = _plgpu()
    start = pl.multiple_of(pl.program_id(0) * block, block)
    offs = start + jnp.arange(block)
    mask = offs < n
    x = plgpu.load(x_ref.at[pl.ds(start, block)], mask=mask, other=other)
    plgpu.store(o_ref.at[pl.ds(start, block)], (x + 1) * 3, mask=mask)   # no mul feeding an add (FMA)


def build_tail(n, block, dtype, other):
    kernel = functools.partial(_tail_kernel, n=n, block=block, other=other)

    def build(interpret):
        return lambda x: pl.pallas_call(kernel, grid=(pl.cdiv(n, block),),
                                        out_shape=jax.ShapeDtypeStruct((n,), dtype),
                                        compiler_params=_params(), interpret=interpret)(x)
    return build


def _other_kernel(x_ref, fill_ref, o_ref, *, n):
    # load with an array `other` over a block larger than the data; every output lane defined.
    # (the start is a program id, 0: a static window past the array's end does not trace)
    mask = jnp.arange(o_ref.shape[0]) < n
    start = pl.program_id(0) * o_ref.shape[0]
    o_ref[...] = _plgpu().load(x_ref.at[pl.ds(start, o_ref.shape[0])], mask=mask, other=fill_ref[...])


def build_other(n, size, dtype):
    def build(interpret):
        return lambda x, fill: pl.pallas_call(functools.partial(_other_kernel, n=n), grid=(1,),
                                              out_shape=jax.ShapeDtypeStruct((size,), dtype),
                                              compiler_params=_params(), interpret=interpret)(x, fill)
    return build


def _mask2d_kernel(x_ref, o_ref, *, m, n):
    # A 2-D block (16, 32) over a (10, 20) array: rows and columns masked; the store writes only
    # the array's elements (the output is the array's shape).
    plgpu = _plgpu()
    rows = jnp.arange(16)[:, None]
    cols = jnp.arange(32)[None, :]
    mask = (rows < m) & (cols < n)
    zero = pl.program_id(0)   # dynamic window starts (static windows past the end do not trace)
    x = plgpu.load(x_ref.at[pl.ds(zero, 16), pl.ds(zero, 32)], mask=mask, other=0,
                   eviction_policy="evict_last")
    plgpu.store(o_ref.at[pl.ds(zero, 16), pl.ds(zero, 32)], x.astype(o_ref.dtype) * 2, mask=mask,
                eviction_policy="evict_first")


def build_mask2d(m, n, dtype):
    def build(interpret):
        return lambda x: pl.pallas_call(functools.partial(_mask2d_kernel, m=m, n=n), grid=(1,),
                                        out_shape=jax.ShapeDtypeStruct((m, n), dtype),
                                        compiler_params=_params(), interpret=interpret)(x)
    return build


def _cache_modifier_kernel(x_ref, o_ref):
    # A load with a cache modifier (".cg": cache in L2, not L1): a hint, the values unchanged.
    o_ref[...] = _plgpu().load(x_ref, cache_modifier=".cg") + 1


# JAX before 0.12 looks ".cg" / ".ca" up in a table keyed "cg" / "ca" (lowering.py _load:
# _STR_TO_CACHE_MODIFIER[cache_modifier]); 0.12 strips the dot.
_CACHE_MODIFIER_LOWERING = Gate("JAX's Triton lowering looks the cache modifier '.cg' up without its dot "
                                "(KeyError); spec/divergences.py pallas-triton-cache-modifier-keyerror",
                                (("KeyError", ".cg"),), fixed_in="0.12.0")


def masked_cases():
    cid = "load_cache_modifier_cg/int32/128"
    yield _case(cid, _same_shape(_cache_modifier_kernel), lambda rng: [rng.integers(-99, 99, size=128).astype(np.int32)],
                primitives=("pallas_call", "masked_load"))
    TRITON_LOWERING[f"pallas_triton/{cid}"] = _CACHE_MODIFIER_LOWERING
    for dtype, n, block in ((F32, 1000, 256), (I32, 300, 128), (F16, 77, 32)):
        yield _case(f"masked_load_store/{dtype.name}/tail_{n}_blocks_{block}", build_tail(n, block, dtype, -7),
                    lambda rng, dtype=dtype, n=n: [random_array(rng, dtype, (n,), specials=0, low=-50, high=50)],
                    modes=C.exact("ieee754"), primitives=("pallas_call", "masked_load", "masked_swap", "program_id"))
    yield _case("masked_load/int32/array_other", build_other(20, 32, I32),
                lambda rng: [rng.integers(-99, 99, size=20).astype(np.int32),
                             rng.integers(1000, 2000, size=32).astype(np.int32)],
                primitives=("pallas_call", "masked_load"))
    yield _case("masked_load_store/bfloat16/2d_10x20_block_16x32", build_mask2d(10, 20, BF16),
                lambda rng: [random_array(rng, BF16, (10, 20), specials=0)], modes=C.exact("ieee754"),
                primitives=("pallas_call", "masked_load", "masked_swap"))


# ------------------------------------------------------------------------ grid and hints
def _ids3_kernel(o_ref):
    i, j, k = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    val = (i * 100 + j * 10 + k) * 1000 + pl.num_programs(0) * 100 + pl.num_programs(1) * 10 + pl.num_programs(2)
    o_ref[...] = jnp.full(o_ref.shape, val, jnp.int32) + jnp.arange(o_ref.shape[-1], dtype=jnp.int32)[None, None, :]


def build_ids3(interpret):
    return lambda: pl.pallas_call(_ids3_kernel, grid=(2, 3, 4), out_shape=jax.ShapeDtypeStruct((2, 3, 4 * 16), jnp.int32),
                                  out_specs=pl.BlockSpec((1, 1, 16), lambda i, j, k: (i, j, k)),
                                  compiler_params=_params(), interpret=interpret)()


def _hints_kernel(x_ref, o_ref, *, block):
    # Offsets hinted as multiples of the block and the index vector as contiguous (Triton
    # vectorises such accesses); the values are the data's.
    plgpu = _plgpu()
    start = pl.multiple_of(pl.program_id(0) * block, block)
    offs = plgpu.max_contiguous(pl.multiple_of(start + jnp.arange(block), block), block)
    o_ref[pl.ds(start, block)] = x_ref[pl.ds(start, block)] ^ offs


def build_hints(interpret):
    return lambda x: pl.pallas_call(functools.partial(_hints_kernel, block=128), grid=(4,),
                                    out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                    compiler_params=_params(), interpret=interpret)(x)


def _barrier_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1
    _plgpu().debug_barrier()
    o_ref[...] = o_ref[...] * 3


def build_barrier(interpret):
    return lambda x: pl.pallas_call(_barrier_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                    compiler_params=_params(), interpret=interpret)(x)


def grid_cases():
    yield _case("program_id_num_programs/int32/grid_2x3x4", build_ids3, lambda rng: [],
                primitives=("pallas_call", "program_id"))
    yield _case("hints_multiple_of_max_contiguous/int32/512", build_hints,
                lambda rng: [rng.integers(-2**31, 2**31, size=512).astype(np.int32)],
                primitives=("pallas_call", "multiple_of", "max_contiguous"))
    yield _case("debug_barrier/int32/128", gated(build_barrier, hlo_interpret=_BARRIER_HLO), lambda rng: [rng.integers(-99, 99, size=128).astype(np.int32)],
                primitives=("pallas_call", _prim_name("debug_barrier_p")))


# ------------------------------------------------------------------------------------- dot
def _dot_kernel(a_ref, b_ref, o_ref, *, precision, trans_b):
    b = b_ref[...]
    o_ref[...] = jnp.dot(a_ref[...], b.T if trans_b else b, precision=precision,
                         preferred_element_type=o_ref.dtype)


def build_dot(m, k, n, out_dtype, precision=None, trans_b=False):
    kernel = functools.partial(_dot_kernel, precision=precision, trans_b=trans_b)

    def build(interpret):
        return lambda a, b: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
                                           compiler_params=_params(), interpret=interpret)(a, b)
    return build


def _abs_dot(trans_b=False):
    def bound(a, b):
        a = np.abs(a.astype(np.float64))
        b = np.abs(b.astype(np.float64))
        return [a @ (b.T if trans_b else b)]
    return bound


def _dot_inputs(m, k, n, dtype, trans_b=False):
    def make(rng):
        if np.dtype(dtype).kind == "i":
            return [rng.integers(-128, 128, size=(m, k)).astype(dtype),
                    rng.integers(-128, 128, size=(n, k) if trans_b else (k, n)).astype(dtype)]
        lo = 0.5 if "float8" in np.dtype(dtype).name else 2.0
        return [random_array(rng, dtype, (m, k), specials=0, low=-lo * 4, high=lo * 4),
                random_array(rng, dtype, (n, k) if trans_b else (k, n), specials=0, low=-lo * 4, high=lo * 4)]
    return make


def dot_cases():
    m, k, n = 16, 32, 32     # Triton's dot needs every dimension >= 16
    P = jax.lax.Precision
    Alg = jax.lax.DotAlgorithmPreset
    prims = ("pallas_call", "dot_general")
    # float32 by lax.Precision: HIGHEST is IEEE; DEFAULT and HIGH are TF32 (_TF32_PRECISIONS),
    # explained by the matmul-precision-tf32 allowance against the exact reference.
    for name, prec in (("highest", P.HIGHEST), ("default", None), ("high", P.HIGH)):
        yield _case(f"dot/float32/precision_{name}/{m}x{k}x{n}", build_dot(m, k, n, F32, prec),
                    _dot_inputs(m, k, n, F32), modes=C.dot_product(k), dot_bound=_abs_dot(), primitives=prims)
    yield _case(f"dot/float32/trans_b_highest/{m}x{k}x{n}", build_dot(m, k, n, F32, P.HIGHEST, trans_b=True),
                _dot_inputs(m, k, n, F32, trans_b=True), modes=C.dot_product(k), dot_bound=_abs_dot(True),
                primitives=prims)
    # narrow inputs, float32 accumulation and output: exact products, f32 sums.
    for dtype in (F16, BF16, np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)):
        yield _case(f"dot/{dtype.name}_to_float32/{m}x{k}x{n}", build_dot(m, k, n, F32), _dot_inputs(m, k, n, dtype),
                    modes=C.dot_product(k), dot_bound=_abs_dot(), primitives=prims)
    yield _case(f"dot/int8_to_int32/{m}x{k}x{n}", build_dot(m, k, n, I32), _dot_inputs(m, k, n, np.int8),
                primitives=prims)
    yield _case(f"dot/float64/{m}x{k}x{n}", build_dot(m, k, n, np.float64, P.HIGHEST), _dot_inputs(m, k, n, np.float64),
                modes=C.dot_product(k), dot_bound=_abs_dot(), primitives=prims, x64=True)
    cid = f"dot/uint8_to_int32/{m}x{k}x{n}"
    yield _case(cid, build_dot(m, k, n, I32), _dot_inputs(m, k, n, np.uint8), primitives=prims)
    TRITON_LOWERING[f"pallas_triton/{cid}"] = _UNSIGNED_DOT_LOWERING
    # Algorithm presets the lowering accepts; the reference computes each as JAX defines it
    # (interp/rules/lax_contractions.py: inputs rounded / split, f32 accumulation). The split
    # presets sum 3, 6 or 9 exact component products per term, whose magnitudes exceed |a||b|
    # a little (spec/lax_contractions.py split_dot_length); TF32 rounding in Triton is the
    # hardware's (cvt.rna), hence the inputs' 11-bit allowance in the mode.
    presets = (("F32_F32_F32", 1, 0), ("TF32_TF32_F32", 1, 11), ("TF32_TF32_F32_X3", 3, 0),
               ("F16_F16_F32", 1, 11), ("BF16_BF16_F32", 1, 0), ("BF16_BF16_F32_X3", 3, 0), ("BF16_BF16_F32_X6", 6, 0),
               ("BF16_BF16_F32_X9", 9, 0))
    for name, parts, bits in presets:
        alg = getattr(Alg, name, None)
        if alg is None:
            continue
        length = split_dot_length(k, parts, 2.0 ** (-11 if name.startswith("TF32") else -8)) if parts > 1 else k
        yield _case(f"dot/float32/algorithm_{name}/{m}x{k}x{n}", build_dot(m, k, n, F32, alg),
                    _dot_inputs(m, k, n, F32), modes=C.dot_product(length, "dot-algorithm-preset", bits),
                    dot_bound=_abs_dot(), primitives=prims)


# ------------------------------------------------------------------ approx_tanh, inline asm
def _tanh_kernel(x_ref, o_ref):
    o_ref[...] = _plgpu().approx_tanh(x_ref[...])


def _asm_kernel(x_ref, o_ref):
    [o_ref[...]] = _plgpu().elementwise_inline_asm("shl.b32 $0, $1, 3;", args=[x_ref[...]], constraints="=r,r",
                                                  pack=1, result_shape_dtypes=[jax.ShapeDtypeStruct(x_ref.shape,
                                                                                                    x_ref.dtype)])


def _same_shape(kernel):
    def build(interpret):
        return lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                        compiler_params=_params(), interpret=interpret)(x)
    return build


def asm_cases():
    yield _case("approx_tanh/float32/256", gated(_same_shape(_tanh_kernel), hlo_interpret=_INLINE_ASM_HLO),
                lambda rng: [random_array(rng, F32, (256,), low=-12, high=12)], modes=S.APPROX_TANH_F32,
                primitives=("pallas_call", _prim_name("elementwise_inline_asm_p")))
    # Arbitrary PTX has no reference meaning: the reference refuses it (reference-unsupported).
    yield _case("elementwise_inline_asm/int32/shl", gated(_same_shape(_asm_kernel), hlo_interpret=_INLINE_ASM_HLO),
                lambda rng: [rng.integers(-99, 99, size=128).astype(np.int32)],
                primitives=("pallas_call", _prim_name("elementwise_inline_asm_p")))


# ------------------------------------------------------------------ generic Triton-style kernels
def _blocked_matmul_kernel(a_ref, b_ref, o_ref, *, bk, nk):
    # One (bm, bn) output block per program; the K loop inside the program (Triton style: grid
    # programs run concurrently, so accumulation never revisits an output block across them).
    def body(kk, acc):
        start = pl.multiple_of(kk * bk, bk)
        a = a_ref[:, pl.ds(start, bk)]
        b = b_ref[pl.ds(start, bk), :]
        return acc + jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    acc = jax.lax.fori_loop(0, nk, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def build_blocked_matmul(m, k, n, bm, bn, bk):
    kernel = functools.partial(_blocked_matmul_kernel, bk=bk, nk=k // bk)

    def build(interpret):
        return lambda a, b: pl.pallas_call(
            kernel, grid=(m // bm, n // bn), out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)), compiler_params=_params(num_warps=4),
            interpret=interpret)(a, b)
    return build


def _alias_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 - y_ref[...]


def build_alias(interpret):
    spec = pl.BlockSpec((None, 8, 32), lambda b, i: (b, i, 0))
    return lambda x, y: pl.pallas_call(_alias_kernel, grid=(3, 2), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                       in_specs=[spec, spec], out_specs=spec, input_output_aliases={0: 0},
                                       compiler_params=_params(), interpret=interpret)(x, y)


def _row_reduce_kernel(x_ref, max_ref, argmax_ref, isum_ref):
    x = x_ref[...]
    max_ref[...] = jnp.max(x, axis=1)
    argmax_ref[...] = jnp.argmax(x, axis=1).astype(jnp.int32)
    isum_ref[...] = jnp.sum((x * 16).astype(jnp.int32), axis=1)


def build_row_reduce(interpret):
    def f(x):
        spec = pl.BlockSpec((8, 64), lambda i: (i, 0))
        row = pl.BlockSpec((8,), lambda i: (i,))
        outs = [jax.ShapeDtypeStruct((32,), x.dtype), jax.ShapeDtypeStruct((32,), jnp.int32),
                jax.ShapeDtypeStruct((32,), jnp.int32)]
        return pl.pallas_call(_row_reduce_kernel, grid=(4,), out_shape=outs, in_specs=[spec],
                              out_specs=[row, row, row], compiler_params=_params(), interpret=interpret)(x)
    return f


def _int_ops_kernel(x_ref, y_ref, o_ref):
    x, y = x_ref[...], y_ref[...]
    o_ref[0] = jax.lax.div(x, y)
    o_ref[1] = jax.lax.rem(x, y)
    o_ref[2] = (x << 3) ^ (x >> 2)
    o_ref[3] = jnp.where(x > y, x - y, jnp.minimum(x, y) * 7)
    o_ref[4] = jax.lax.shift_right_logical(x, 5) | (y & 0xFF)


def build_int_ops(interpret):
    return lambda x, y: pl.pallas_call(_int_ops_kernel, out_shape=jax.ShapeDtypeStruct((5,) + x.shape, x.dtype),
                                       compiler_params=_params(), interpret=interpret)(x, y)


def _convert_kernel(x_ref, f16_ref, bf16_ref, i32_ref):
    x = x_ref[...]
    f16_ref[...] = x.astype(jnp.float16)
    bf16_ref[...] = x.astype(jnp.bfloat16)
    i32_ref[...] = x.astype(jnp.int32)     # |x| < 2**31: in range (out of range is UB in Triton)


def build_convert(interpret):
    return lambda x: pl.pallas_call(_convert_kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, jnp.float16),
                                                                jax.ShapeDtypeStruct(x.shape, jnp.bfloat16),
                                                                jax.ShapeDtypeStruct(x.shape, jnp.int32)],
                                    compiler_params=_params(), interpret=interpret)(x)


def generic_cases():
    # Kernels without TPU-only features, but traced with Triton's compiler params (num_warps,
    # num_stages): Triton kernels, which HLO interpret mode also runs (TPU interpret mode refuses
    # foreign compiler params with an assertion).
    yield _case("blocked_matmul/float32/64x128x64_blocks_32x32x32", build_blocked_matmul(64, 128, 64, 32, 32, 32),
                lambda rng: [random_array(rng, F32, (64, 128), specials=0, low=-2, high=2),
                             random_array(rng, F32, (128, 64), specials=0, low=-2, high=2)],
                modes=C.dot_product(128), dot_bound=_abs_dot(), primitives=("pallas_call", "dot_general", "scan"))
    yield _case("alias_in_place/float32/rank3_3x16x32_blocks_1x8x32", build_alias,
                lambda rng: [random_array(rng, F32, (3, 16, 32), specials=0), random_array(rng, F32, (3, 16, 32), specials=0)],
                modes=C.exact("ieee754"), primitives=("pallas_call", "mul", "sub"))
    yield _case("row_reductions/float32/32x64_blocks_8x64", build_row_reduce,
                lambda rng: [random_array(rng, F32, (32, 64), specials=0, low=-1000, high=1000)],
                primitives=("pallas_call", "reduce_max", "argmax", "reduce_sum"))
    yield _case("integer_ops/int32/4x128", build_int_ops,
                lambda rng: [rng.integers(-10**6, 10**6, size=(4, 128)).astype(np.int32),
                             rng.integers(1, 5000, size=(4, 128)).astype(np.int32)],
                primitives=("pallas_call", "div", "rem", "shift_left", "shift_right_arithmetic"))
    yield _case("convert/float32_to_f16_bf16_i32/4x128", build_convert,
                lambda rng: [random_array(rng, F32, (4, 128), specials=0, low=-7e4, high=7e4)],
                modes=C.exact("ieee754-convert"),
                primitives=("pallas_call", "convert_element_type"))


def cases():
    yield from atomic_cases()
    yield from masked_cases()
    yield from grid_cases()
    yield from dot_cases()
    yield from asm_cases()
    yield from generic_cases()
    yield from ops_cases()


# ------------------------------------------------------------------ shipped ops.gpu kernels
# Each kernel at several shapes and dtypes: against the same kernel in the reference (ops/...) and
# against the plain JAX function it claims to compute (claims/...), run by the reference on the
# same inputs (widened to float32, rounded once to the kernel's output dtype). Budgets: ABS_REL in
# eps of the output dtype.
def _ops(module):
    import importlib
    return importlib.import_module(f"jax.experimental.pallas.ops.gpu.{module}")


def _softmax(interpret):
    return lambda x: _ops("softmax").softmax(x, axis=-1, interpret=interpret)


def _norm(name):
    def build(interpret):
        return lambda x, w, b: getattr(_ops(name), name)(x, w, b, interpret=interpret)
    return build


def _norm_claim(name):
    return lambda x, w, b: getattr(_ops(name), f"{name}_reference")(x, w, b)


def _mha(causal, block):
    def build(interpret):
        att = _ops("attention")
        bs = att.BlockSizes(block_q=block, block_k=block, block_q_dkv=block, block_kv_dkv=block,
                            block_q_dq=block, block_kv_dq=block)
        return lambda q, k, v: att.mha(q, k, v, None, causal=causal, block_sizes=bs, interpret=interpret)
    return build


def _mha_claim(causal):
    return lambda q, k, v: _ops("attention").mha_reference(q, k, v, None, causal=causal)


def _mha_grad(causal, block):
    def build(interpret):
        fwd = _mha(causal, block)(interpret)
        return jax.grad(lambda q, k, v, do: jnp.sum((fwd(q, k, v) * do).astype(jnp.float32)), argnums=(0, 1, 2))
    return build


def _mqa(block_k, k_splits):
    def build(interpret):
        return lambda q, k, v: _ops("decode_attention").mqa(q, k, v, block_k=block_k, k_splits=k_splits,
                                                           interpret=interpret)
    return build


def _gqa(block_k, k_splits):
    def build(interpret):
        return lambda q, k, v: _ops("decode_attention").gqa(q, k, v, block_k=block_k, k_splits=k_splits,
                                                           interpret=interpret)
    return build


def _paged(pages_per_block, k_splits):
    def build(interpret):
        return lambda q, kp, vp, tables, lengths: _ops("paged_attention").paged_attention(
            q, kp, vp, tables, lengths, pages_per_compute_block=pages_per_block, k_splits=k_splits,
            interpret=interpret)
    return build


def _paged_claim(q, kp, vp, tables, lengths):
    # each sequence's pages gathered: [batch, seq, kv_heads, head_dim] as the reference takes them
    h, _, page, d = kp.shape
    b = tables.shape[0]
    k = kp[:, tables].reshape(h, b, -1, d).transpose(1, 2, 0, 3)
    v = vp[:, tables].reshape(h, b, -1, d).transpose(1, 2, 0, 3)
    return _ops("paged_attention").paged_attention_reference(q, k, v, lengths)


def _normal(*shapes, dtype=F32, scale=1.0):
    return lambda rng: [(rng.standard_normal(s) * scale).astype(dtype) for s in shapes]


def _paged_inputs(b, h, d, page, pages_per_seq, dtype):
    def make(rng):
        total = b * pages_per_seq
        q = (rng.standard_normal((b, h, d))).astype(dtype)
        kp = (rng.standard_normal((h, total, page, d))).astype(dtype)
        vp = (rng.standard_normal((h, total, page, d))).astype(dtype)
        tables = rng.permutation(total).reshape(b, pages_per_seq).astype(np.int32)
        lengths = rng.integers(1, page * pages_per_seq, size=b, endpoint=True).astype(np.int32)
        return [q, kp, vp, tables, lengths]
    return make


def _eps_mode(atol, rtol):
    return C.abs_rel(atol, rtol, "ops-kernel-eps")


def _claim(fn, out_dtype):
    """What a kernel claims: ``fn`` on its float inputs widened to float32 (the kernels compute in
    float32), rounded once to the kernel's output dtype ``out_dtype``."""
    def claimed(*args):
        wide = [a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a for a in args]
        return jax.tree_util.tree_map(lambda o: o.astype(out_dtype), fn(*wide))
    return claimed


def _op_pair(name, claim_name, build, claim, inputs, mode, claim_mode, prims, profile="quick", claim_profile=None,
             **kw):
    yield _case(f"ops/{name}", build, inputs, modes=mode, primitives=prims, profile=profile, **kw)
    yield _case(f"claims/{claim_name}", build, inputs, modes=claim_mode, primitives=prims,
                profile=claim_profile or profile, reference_fn=claim, **kw)


def ops_cases():
    sm = ("pallas_call", "exp", "div", "reduce_max")
    for dtype, shape, prof in ((F16, (2, 3, 256), "quick"), (BF16, (5, 200), "quick"), (F32, (3, 4, 300), "nightly")):
        t, sid = dtype.name, "x".join(map(str, shape))
        yield from _op_pair(f"softmax/{t}/{sid}", f"softmax_vs_jax_nn_softmax/{t}/{sid}", _softmax,
                            _claim(lambda x: jax.nn.softmax(x, axis=-1), dtype), _normal(shape, dtype=dtype, scale=4),
                            _eps_mode(1, 8), _eps_mode(1, 8), sm, prof)
    for name in ("layer_norm", "rms_norm"):
        for dtype, shape, prof in ((F16, (2, 4, 256), "quick"), (F32, (3, 2, 128), "quick"), (BF16, (2, 3, 512), "nightly")):
            # (rank 3 only: the kernels vmap their row kernel over exactly two leading axes)
            t, sid = dtype.name, "x".join(map(str, shape))
            yield from _op_pair(f"{name}/{t}/{sid}", f"{name}_vs_{name}_reference/{t}/{sid}", _norm(name),
                                _claim(_norm_claim(name), dtype), _normal(shape, shape[-1:], shape[-1:], dtype=dtype),
                                _eps_mode(16, 8), _eps_mode(16, 8), ("pallas_call", "rsqrt"), prof)
    for dtype, shape, causal, prof in ((F16, (1, 64, 2, 32), True, "quick"), (F16, (2, 128, 1, 64), False, "nightly"),
                                       (BF16, (1, 128, 2, 64), True, "nightly")):
        t, sid = dtype.name, "x".join(map(str, shape))
        c = "causal" if causal else "full"
        yield from _op_pair(f"mha_forward/{t}/{c}/{sid}", f"mha_vs_mha_reference/{t}/{c}/{sid}", _mha(causal, 32),
                            _claim(_mha_claim(causal), dtype), _normal(shape, shape, shape, dtype=dtype), _eps_mode(8, 8),
                            _eps_mode(8, 8), ("pallas_call", "dot_general", "exp"), prof, claim_profile="nightly")
    shape = (1, 64, 1, 32)
    yield from _op_pair("mha_backward/float16/causal/1x64x1x32", "mha_backward_vs_grad_of_mha_reference/float16/"
                        "causal/1x64x1x32", _mha_grad(True, 32),
                        _claim(lambda q, k, v, do: jax.grad(lambda q, k, v: jnp.sum(_mha_claim(True)(q, k, v) * do),
                                                            argnums=(0, 1, 2))(q, k, v), F16),
                        _normal(shape, shape, shape, shape, dtype=F16), _eps_mode(32, 8), _eps_mode(32, 8),
                        ("pallas_call", "dot_general", "exp"), "nightly")
    # Decode attention returns float32 but rounds the probabilities to the value dtype before the
    # second dot (decode_attention.py: s_curr.astype(v.dtype)), where a one-ulp difference in exp
    # flips a rounding: held to 8 eps of the input dtype (float16: 2^13 float32 eps; bfloat16: 2^16).
    for dtype, (b, hq, s, d), prof in ((F16, (2, 4, 128, 32), "quick"), (BF16, (1, 16, 256, 64), "nightly")):
        t = dtype.name
        narrow = 8 * float(jnp.finfo(dtype).eps / jnp.finfo(jnp.float32).eps)
        yield from _op_pair(f"decode_mqa/{t}/{b}x{hq}x{s}x{d}", f"decode_mqa_vs_mqa_reference/{t}/{b}x{hq}x{s}x{d}",
                            _mqa(32, 2), _claim(lambda q, k, v: _ops("decode_attention").mqa_reference(q, k, v), F32),
                            _normal((b, hq, d), (b, s, d), (b, s, d), dtype=dtype), _eps_mode(narrow, 8),
                            _eps_mode(narrow, 8), ("pallas_call", "dot_general", "exp"), prof, claim_profile="nightly")
    yield from _op_pair("decode_gqa/float16/2x4x128x2x32", "decode_gqa_vs_gqa_reference/float16/2x4x128x2x32",
                        _gqa(32, 2), _claim(lambda q, k, v: _ops("decode_attention").gqa_reference(q, k, v), F32),
                        _normal((2, 4, 32), (2, 128, 2, 32), (2, 128, 2, 32), dtype=F16), _eps_mode(8 * 2 ** 13, 8),
                        _eps_mode(8 * 2 ** 13, 8), ("pallas_call", "dot_general", "exp"), "nightly")
    for dtype, (b, h, d, page, pps), prof in ((F16, (2, 16, 32, 16, 4), "quick"), (F32, (2, 16, 64, 16, 8), "nightly")):
        t, sid = dtype.name, f"{b}x{h}x{d}_pages_{pps}x{page}"
        yield from _op_pair(f"paged_attention/{t}/{sid}", f"paged_attention_vs_reference/{t}/{sid}", _paged(2, 2),
                            _claim(_paged_claim, dtype), _paged_inputs(b, h, d, page, pps, dtype), _eps_mode(8, 8),
                            _eps_mode(8, 8),
                            ("pallas_call", "dot_general", "exp"), prof, claim_profile="nightly")
