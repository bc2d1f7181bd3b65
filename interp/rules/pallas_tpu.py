"""Rules: Pallas TPU (Mosaic) primitives: DMAs and the barrier semaphore, vector primitives
(roll, bitcast, einshape_lo, pack / unpack_elementwise), the hardware PRNG, has_memory_space; and
those JAX 0.11 / 0.12 added: explicit MXU programming (matmul_push_rhs, matmul_acc_lhs,
matmul_pop, matmul_lhs_fifo, matmul_pop_fifo), pltpu.conv, pltpu.stochastic_round and the TPU
interpret mode's remove_memory_space. Primitives every Pallas target shares (pallas_call,
semaphores, run_scoped, masked loads...) are in ``interp/rules/pallas.py``.

Semantics and sources: spec/pallas.py (the older ones), spec/pallas_tpu.py (the new ones). The
MXUs are per-core state of the running kernel (``interp.pallas.grid.KernelRun``): staging
registers, the latched weights, accumulators and the result FIFO of each MXU. Every use the documentation calls an error is an
UndefinedBehaviorError naming the kernel, the grid point and the MXU.
"""
from __future__ import annotations

import collections
import weakref

import numpy as np

from .. import dtypes as D
from ..errors import UndefinedBehaviorError
from ..pallas import indexing
from ..pallas.tpu import hardware_prng, pipeline
from ..pallas.devices import barrier_semaphore
from ..pallas.dma import view_bytes
from ..pallas.grid import current_run
from ..registry import register
from .lax_contractions import conv_general_dilated, matmul
from ..numerics import wrap_int
from .pallas import _sem, _with_operands


@register("get_barrier_semaphore")
def get_barrier_semaphore(eqn, *, tag=None):
    # One barrier semaphore per kernel and device (interp.pallas.devices: other devices' kernels
    # signal it by device_id). tag (JAX >= 0.11) names the collective id kernels share on
    # hardware; within one kernel it selects nothing more, so it has no effect here.
    return barrier_semaphore(current_run())


# -- DMAs ----------------------------------------------------------------------------------------

def _dma_operands(eqn, flat, tree):
    """((src ref, index), (dst ref, index), dst semaphore, src semaphore, device_id) of a DMA
    equation; a semaphore is (ref, index) or None."""
    src, dst, dst_sem, src_sem, device_id = tree.unflatten(flat)
    s_ref, s_idx, s_dt = indexing.resolve_transformed(eqn, src)
    d_ref, d_idx, d_dt = indexing.resolve_transformed(eqn, dst)
    if s_dt != s_ref.dtype or d_dt != d_ref.dtype:
        raise eqn.unsupported("DMA through a bitcast view")
    sems = []
    for sem in (dst_sem, src_sem):
        if sem is None:
            sems.append(None)
        else:
            ref, transforms = indexing.split_transformed(sem)
            sems.append(_sem(eqn, ref, transforms))
    return (s_ref, s_idx), (d_ref, d_idx), sems[0], sems[1], device_id


def _dma_refs(parts):
    if parts[4] is not None:
        return None  # remote DMA: the generic path (its target changes per call)
    return [None if x is None else indexing.split_transformed(x) for x in parts[:4]]


def _dma_resolved(eqn, flat, tree, operands, run, start: bool, send: bool = False):
    """(src, src index, dst, dst index, dst sem, src sem, nbytes, device_id); nbytes is the
    checked byte count of the copy (start) or of the view a wait counts (the destination, or the
    source for a wait_send), None on the generic path."""
    if operands.ref_pos is None:
        (s, si), (d, di), ds, ss, device_id = _dma_operands(eqn, flat, tree)
        return s, si, d, di, ds, ss, None, device_id

    def derive():
        (s, si), (d, di), ds, ss, _ = _dma_operands(eqn, flat, tree)
        if start:
            nbytes = run.dma.check(s, si, d, di)
        else:
            ref, index = (s, si) if send else (d, di)
            nbytes = view_bytes(ref, index)
        return si, di, None if ds is None else ds[1], None if ss is None else ss[1], nbytes

    (si, di, dsi, ssi, nbytes), (s, d, dsr, ssr) = operands.lookup(flat, derive)
    return (s, si, d, di, None if dsi is None else (dsr, dsi), None if ssi is None else (ssr, ssi),
            nbytes, None)


def _remote(eqn, run, device_id, device_id_type):
    """The (device, core) a remote DMA targets (interp.pallas.devices DeviceKernels.address: the
    device by device_id's mesh axes, the core by a core axis in a MESH dict, else the sender's)."""
    devices = run.devices
    if devices is None:
        raise eqn.unsupported(f"remote {eqn.name} to device {device_id!r} outside a shard_map "
                              "(or pmap) body: no other devices are interpreted")
    return devices, devices.address(run, device_id, device_id_type, eqn.name)


@register("dma_start", partial="DMAs through a bitcast view of a ref (its dtype differs from the "
                               "buffer's)")
@_with_operands("tree", _dma_refs)
def dma_start(eqn, *flat, tree, device_id_type, add=False,
              priority=0,   # issue priority: orders DMAs on hardware, changes no value
              _operands=None):
    run = current_run()
    s, si, d, di, ds, ss, nbytes, device_id = _dma_resolved(eqn, flat, tree, _operands, run,
                                                            start=True)
    if device_id is not None:
        # A remote DMA: the destination and its semaphore are the target device's.
        devices, target = _remote(eqn, run, device_id, device_id_type)
        d = devices.counterpart(run, d, target, "DMA")
        if ds is not None:
            ds = devices.remote_semaphore(run, ds, target, "DMA")
    run.dma.start(s, si, d, di, ds, ss, bool(add), nbytes=nbytes)
    return []


@register("dma_wait")
@_with_operands("tree", _dma_refs)
def dma_wait(eqn, *flat, tree,
             device_id_type,             # the waited semaphore is this device's: no target
             is_wait_send=None,          # JAX >= 0.11
             insert_dummy_device=None,   # JAX <= 0.11: True exactly for a remote wait_send
             _operands=None):
    run = current_run()
    # A wait_send's arguments are pre-swapped by JAX (mosaic/primitives.py wait_send): the send
    # semaphore sits in the destination-semaphore slot and this device's source buffer in the
    # destination slot. JAX 0.10.2 marks it by insert_dummy_device only.
    send = bool(is_wait_send) or bool(insert_dummy_device)
    s, si, d, di, ds, ss, nbytes, _ = _dma_resolved(eqn, flat, tree, _operands, run, start=False,
                                                    send=send)
    if ds is None:
        raise eqn.unsupported("dma_wait without a semaphore")
    # The amount is the copied byte count (the same for both views of a DMA).
    ref, index = (s, si) if send else (d, di)
    run.dma.wait_dma(ds, ref, index, send=send, nbytes=nbytes)
    return []


# -- TPU vector primitives -----------------------------------------------------------------------

@register("roll")
def roll(eqn, x, shift, *, axis, stride=None, stride_axis=None):
    # pltpu.roll: jnp.roll along ``axis``; with a stride, slice i along ``stride_axis`` is rolled
    # by shift + i * stride (jax/_src/pallas/mosaic/primitives.py, _roll_lowering_rule).
    x = np.asarray(x)
    shift = int(shift)
    if stride is None:
        return np.roll(x, shift, axis)
    parts = np.split(x, x.shape[stride_axis], stride_axis)
    return np.concatenate([np.roll(p, shift + i * stride, axis) for i, p in enumerate(parts)],
                          stride_axis)


@register("bitcast")
def bitcast(eqn, x, *, ty, dim=None):
    # pltpu.bitcast packs/unpacks consecutive elements along ``dim`` (second minor by default,
    # the only choice before JAX 0.12), element 0 in the low bits (little endian, as XLA's
    # bitcast_convert_type).
    x = np.asarray(x)
    ty = np.dtype(ty)
    dim = x.ndim - 2 if dim is None else dim
    if x.dtype.itemsize * 8 != _bits(x.dtype) or ty.itemsize * 8 != _bits(ty):
        raise eqn.unsupported(f"bitcast of sub-byte types {x.dtype} -> {ty}")
    y = np.ascontiguousarray(np.moveaxis(x, dim, -1)).view(ty)
    return np.ascontiguousarray(np.moveaxis(y, -1, dim))


def _bits(dtype):
    from ..dtypes import bit_width
    return bit_width(dtype)


# -- TPU hardware PRNG (the core's generator state: interp/pallas/tpu/hardware_prng.py) -----------

@register("prng_seed", partial="hardware PRNG emulated (interp.prng.pallas_tpu_bits): bits are "
                               "deterministic and well mixed but not the TPU's own")
def prng_seed(eqn, *seeds):
    if len(seeds) == 1 and hasattr(seeds[0], "impl"):
        # A Pallas PRNG key: its scalars are the seeds (mosaic lowering _prng_seed_lowering_rule,
        # KeyScalarBundle case).
        seeds = tuple(np.ravel(seeds[0].data))
    elif any(a.shape != () or np.dtype(a.dtype) not in _SEED_DTYPES for a in eqn.in_avals):
        # _prng_seed_lowering_rule: 'All seed data must be scalar integers'; tpu.prng_set_seed_32
        # verifies 32-bit operands (int64 seeds under jax_enable_x64 fail there too).
        raise eqn.unsupported("seeds " + ", ".join(str(a.str_short()) for a in eqn.in_avals)
                              + ": Mosaic seeds the hardware PRNG from scalar 32-bit integers")
    hardware_prng.seed(current_run(), seeds)
    return []


_SEED_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


# A Pallas TPU key is a bundle of uint32 scalars (key shape (1, N)); split / join convert between
# the key and its scalars in order (mosaic lowering _split_key_lowering_rule / _join_key_...).

@register("prng_split")
def prng_split(eqn, key):
    data = np.asarray(key.data)
    if data.shape != (1, len(eqn.out_avals)):
        raise eqn.unsupported(f"prng_split of key data {list(data.shape)}")
    return [np.uint32(v) for v in data[0]]


@register("prng_join")
def prng_join(eqn, *scalars, impl):
    from .random import KeyArray, _pallas_kind
    if _pallas_kind(impl) != "key":   # _join_key_lowering_rule: "Can only join Pallas keys"
        raise eqn.unsupported(f"prng_join of {impl.name} keys: Mosaic joins only Pallas keys")
    return KeyArray(impl, np.array([[np.uint32(np.asarray(s)) for s in scalars]], np.uint32))


@register("prng_random_bits", partial="hardware PRNG emulated (interp.prng.pallas_tpu_bits)")
def prng_random_bits(eqn, *, shape):
    return hardware_prng.draw(eqn, current_run(), shape).view(eqn.out_dtype)


# -- elementwise packing (pltpu.pack_elementwise / unpack_elementwise) --------------------------
# Defined by the docstrings of jax/_src/pallas/mosaic/primitives.py (and tpu.pack_elementwise):
# factor = bits(source) / bits(packed); source i goes to bits [i*w, (i+1)*w) of the result.

def _packing(eqn, wide, packed):
    from ..dtypes import bit_width
    wbits, pbits = bit_width(wide), bit_width(packed)
    if wbits % pbits or wbits > 32:
        raise eqn.unsupported(f"packing {packed} into {wide}")
    return wbits, pbits


@register("pack_elementwise")
def pack_elementwise(eqn, *xs, packed_dtype):
    from ..dtypes import is_int
    from ..numerics import convert
    src, packed = np.dtype(xs[0].dtype), np.dtype(packed_dtype)
    if is_int(src) and is_int(packed):
        fields = [np.asarray(x).astype(np.int64).astype(np.uint64) for x in xs]  # truncated below
    elif src == np.float32 and packed.name == "bfloat16":
        # f32 -> bf16 rounds to nearest even, as convert_element_type: JAX's own TPU test of the
        # primitive requires the packed bits of x.astype(bfloat16) (tests/pallas/tpu_ops_test.py
        # test_pack_elementwise; spec/pallas_tpu.py pack_elementwise).
        fields = [np.asarray(convert(np.asarray(x), packed)).view(np.uint16).astype(np.uint64)
                  for x in xs]
    else:   # _pack_elementwise_abstract_eval: "Only f32 -> bf16 and int -> int are supported"
        raise eqn.unsupported(f"pack_elementwise {src} -> {packed}")
    wbits, pbits = _packing(eqn, src, packed)
    out = np.zeros(xs[0].shape, np.uint64)
    mask = np.uint64((1 << pbits) - 1)
    for i, field in enumerate(fields):  # source i in bits [i*w, (i+1)*w)
        out |= (field & mask) << np.uint64(i * pbits)
    return out.astype(eqn.out_dtype)


@register("unpack_elementwise")
def unpack_elementwise(eqn, x, *, index, packed_dtype, unpacked_dtype):
    from ..dtypes import is_float, is_int, storage_uint
    packed = np.dtype(packed_dtype)
    wbits, pbits = _packing(eqn, unpacked_dtype, packed)
    bits = np.ascontiguousarray(np.asarray(x)).view(storage_uint(x.dtype)).astype(np.uint64)
    field = (bits >> np.uint64(index * pbits)) & np.uint64((1 << pbits) - 1)
    out = np.dtype(unpacked_dtype)
    if is_float(packed) and is_float(out) and packed.itemsize * 8 == pbits:
        # The field is a packed float; widening it to the unpacked float is exact.
        return field.astype(storage_uint(packed)).view(packed).astype(out)
    if is_int(packed) and (is_int(out) or is_float(out)):
        # index 0 is the low field, sign-extended ("s_y'y'" in the docstring), signed or not:
        # Mosaic sees signless integers (lowering.py _dtype_to_ir_type "makes mosaic interpret
        # all unsigned types as signed types"), so a uint field unpacks as the int field does;
        # a float result is the (exact) conversion of the sign-extended field.
        signed = field.astype(np.int64) - ((field >> np.uint64(pbits - 1)).astype(np.int64) << pbits)
        if is_float(out):
            return signed.astype(out)
        from ..numerics import wrap_int
        return wrap_int(signed, out)
    raise eqn.unsupported(f"unpack_elementwise of {packed} fields into {out}")


@register("einshape_lo")
def einshape_lo(eqn, x, *, equation, sizes=(), assert_is_tile_preserving=False):
    # pltpu.einshape: the split / merge / transpose steps JAX derives from the equation.
    # assert_is_tile_preserving only asks the Mosaic lowering to refuse a relayout (per TPU
    # generation's tiling); the values are the same either way.
    from jax._src.pallas import einshape as _es
    x = np.asarray(x)
    for t in _es.get_einshape_transforms(equation, x.shape, **dict(sizes)):
        if type(t).__name__ == "Transpose":
            x = np.transpose(x, t.permutation)
        else:
            x = x.reshape(t.transform_shape(x.shape))
    return np.ascontiguousarray(x)


@register("has_memory_space")
def has_memory_space(eqn, ref, *, memory_space):
    # Where the compiler places a pl.ANY operand is its choice; the reference keeps every ANY
    # operand in HBM (interp.pallas.grid: whole operands), so only HBM answers True.
    name = str(getattr(memory_space, "value", memory_space)).lower()
    return np.bool_(name == "hbm")





# -- remove_memory_space -------------------------------------------------------------------------

@register("remove_memory_space")
def remove_memory_space(eqn, x):
    # The TPU interpret mode's identity marker for HBM / ANY operands (interpret_pallas_call.py
    # _remove_memory_space_impl returns x): only the aval's memory space changes.
    return x


# -- stochastic_round ----------------------------------------------------------------------------
# Mosaic lowers it to tpu.stochastic_convert (f32 input, i32 random word per element), whose
# hardware bit selection is not public. The reference applies XLA's stochastic-convert rule
# (xla/hlo/transforms/expanders/stochastic_convert_decomposer.cc): the discarded fraction of
# |x|, in units of the gap between the two neighbours, is placed in a uint32 with 2**-1 in the
# most significant bit (truncated) and the magnitude rounds up iff bits < that fraction.

STOCHASTIC_TARGETS = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz",
                      "float4_e2m1fn", "int4")   # lowering.py _stochastic_round_lowering_rule

_grids: dict = {}


def stochastic_grid(dtype) -> np.ndarray:
    """The non-negative finite values of ``dtype`` (float64, ascending; int4: 0..8, the
    saturation bound one past 7 included so that values in (7, 8) have two neighbours)."""
    dtype = np.dtype(dtype)
    grid = _grids.get(dtype)
    if grid is None:
        if D.is_int(dtype):
            grid = np.arange(0, -int(D.iinfo(dtype).min) + 1, dtype=np.float64)
        else:
            raw = np.arange(1 << D.bit_width(dtype), dtype=np.uint32)
            with np.errstate(invalid="ignore"):   # NaN encodings among the bit patterns
                vals = raw.astype(D.storage_uint(dtype)).view(dtype).astype(np.float64)
            grid = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
        grid.setflags(write=False)
        _grids[dtype] = grid
    return grid


def stochastic_magnitude(a: np.ndarray, bits: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """|x| (float64, finite, >= 0) rounded to a neighbour on ``grid`` by the random words.
    Past the last grid value the gap below it continues (the neighbours are then inf / the
    saturation value, decided by the caller)."""
    i = np.searchsorted(grid, a, side="right") - 1
    lower = grid[i]
    top = i + 1 >= grid.size
    gap = np.where(top, grid[-1] - grid[-2], grid[np.minimum(i + 1, grid.size - 1)] - lower)
    # a - lower and the division by a power-of-two gap are exact in float64; so is the floor.
    fixed = np.floor((a - lower) / gap * 2.0 ** 32)
    up = bits.astype(np.float64) < fixed
    return lower + np.where(up, gap, 0.0)


@register("stochastic_round", partial="the bits choose by XLA's stochastic-convert rule; "
                                       "Mosaic's hardware rule is not public (hardware is checked "
                                       "for one of the two neighbours)")
def stochastic_round(eqn, x, random_bits, *, target_dtype):
    target = np.dtype(target_dtype)
    if np.dtype(x.dtype) != np.float32 or target.name not in STOCHASTIC_TARGETS:
        # _stochastic_round_lowering_rule: "Only float32 input is supported." / "Unsupported
        # target dtype"; tpu.stochastic_convert_elementwise verifies the same targets.
        raise eqn.unsupported(f"stochastic_round {np.dtype(x.dtype)} -> {target}: Mosaic "
                              f"converts float32 to {', '.join(STOCHASTIC_TARGETS)} only")
    xw = np.asarray(x).astype(np.float64)
    bits = np.asarray(random_bits).view(np.uint32)
    nan = np.isnan(xw)
    grid = stochastic_grid(target)
    if D.is_int(target):
        if nan.any():
            raise UndefinedBehaviorError(f"{_where()}: stochastic_round of NaN to {target} "
                                         "(no integer represents it)")
        mag = stochastic_magnitude(np.minimum(np.abs(xw), grid[-1]), bits, grid)
        info = D.iinfo(target)
        out = np.clip(np.copysign(mag, xw), int(info.min), int(info.max))   # XLA's saturation
        return out.astype(np.int8).astype(target)
    a = np.abs(np.where(nan, 0.0, xw))
    has_inf = bool(np.isinf(np.array(np.inf).astype(target)))
    beyond = a > grid[-1]
    if beyond.any() and not has_inf:
        raise UndefinedBehaviorError(
            f"{_where()}: stochastic_round of {xw[beyond][0]!r} to {target}: beyond its largest "
            f"finite value {grid[-1]!r} and {target} has no infinity (no upper neighbour)")
    mag = stochastic_magnitude(np.where(np.isinf(a), grid[-1], a), bits, grid)
    mag = np.where(mag > grid[-1], np.inf, mag)          # the gap past the largest finite: inf
    mag = np.where(np.isinf(a), np.inf, mag)
    signed = np.where(np.signbit(xw), -mag, mag)
    if "fnuz" in target.name:
        signed = np.where(signed == 0, 0.0, signed)      # fnuz types: -0 is the NaN encoding
    return np.where(nan, np.nan, signed).astype(target)


def _where() -> str:
    from ..pallas.grid import maybe_current_run
    run = maybe_current_run()
    return run.where() if run is not None else "outside a kernel"


# -- conv ----------------------------------------------------------------------------------------

@register("conv")
def conv(eqn, lhs, rhs, *acc, dimension_numbers, window_strides=None, padding=None,
         lhs_dilation=None, rhs_dilation=None, window_reversal=None, feature_group_count=1,
         batch_group_count=1, precision=None, preferred_element_type=None):
    # pltpu.conv: conv_general_dilated's meaning (the reference's rule), the window reversed
    # along spatial dimensions where window_reversal says so, plus the accumulator.
    for x in (lhs, rhs):
        if D.is_unsigned(np.asarray(x).dtype):   # _conv_lowering_rule refuses unsigned operands
            raise eqn.unsupported(f"conv of unsigned {np.asarray(x).dtype}: Mosaic refuses "
                                  "unsigned integer operands")
    _conv_precision(eqn, precision)
    spatial = len(dimension_numbers.lhs_spec) - 2
    ones = (1,) * spatial
    rhs = np.asarray(rhs)
    if window_reversal is not None:
        flip = tuple(d for d, r in zip(dimension_numbers.rhs_spec[2:], window_reversal) if r)
        rhs = np.flip(rhs, flip) if flip else rhs
    out = conv_general_dilated(
        eqn, lhs, rhs, window_strides=window_strides or ones,
        padding=padding if padding is not None else ((0, 0),) * spatial,
        lhs_dilation=lhs_dilation or ones, rhs_dilation=rhs_dilation or ones,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count)
    if not acc:
        return out
    acc = np.asarray(acc[0])
    if acc.shape != out.shape:   # (JAX's abstract eval takes the accumulator's shape unchecked)
        raise ValueError(f"conv: accumulator {acc.shape} is not the convolution's {out.shape}")
    return accumulate(acc, out)


def _conv_precision(eqn, precision):
    # lowering.py _parse_precision_attr: DEFAULT / HIGHEST only, one for both operands.
    from jax import lax
    p = precision
    if isinstance(p, tuple):
        if p[0] != p[1]:
            raise eqn.unsupported("conv with per-operand precision: Mosaic refuses it")
        p = p[0]
    if p not in (None, lax.Precision.DEFAULT, lax.Precision.HIGHEST):
        raise eqn.unsupported(f"conv precision {p}: Mosaic lowers DEFAULT and HIGHEST only")


def accumulate(acc: np.ndarray, value: np.ndarray) -> np.ndarray:
    """acc + value in acc's dtype: one rounding for floats (exact sum of two floats of the same
    type, rounded once), wrapping for integers."""
    if D.is_int(acc.dtype):
        return wrap_int(acc.astype(np.int64) + value.astype(np.int64), acc.dtype)
    from ..numerics import round_float
    return round_float(acc.astype(D.wide_float(acc.dtype)) + value.astype(D.wide_float(acc.dtype)),
                       acc.dtype)


# -- the MXUs ------------------------------------------------------------------------------------

class Mxu:
    """One MXU of one core: staged right-hand sides by staging register, the latched weights,
    accumulators (by ACC ref or, before JAX 0.11, by address) and the result FIFO."""

    def __init__(self, index: int):
        self.index = index
        self.staging: dict[int, np.ndarray] = {}
        self.weights: np.ndarray | None = None
        self.accumulators: dict = {}          # key -> [array, holds data]
        self.fifo: collections.deque = collections.deque()


_mxus: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def mxu(run, index: int) -> Mxu:
    """MXU ``index`` of the running core; the first use registers the exit check."""
    units = _mxus.get(run)
    if units is None:
        units = _mxus[run] = {}
        run.exit_checks.append(lambda: _check_exit(run, units))
    unit = units.get(index)
    if unit is None:
        unit = units[index] = Mxu(index)
    return unit


def mxu_error(run, unit: Mxu, message: str) -> UndefinedBehaviorError:
    return UndefinedBehaviorError(f"{run.where()}: MXU {unit.index}: {message}")


def _check_exit(run, units) -> None:
    # "The kernel must not leave any data in the staging registers / accumulator / result FIFO
    # upon exit" (primitives.py matmul_push_rhs, matmul_pop, matmul_lhs_fifo docstrings).
    for unit in units.values():
        if unit.staging:
            raise mxu_error(run, unit, f"the kernel ends with data in staging register(s) "
                                       f"{sorted(unit.staging)} (never loaded by a matmul)")
        held = [k for k, (_, full) in unit.accumulators.items() if full]
        if held:
            raise mxu_error(run, unit, "the kernel ends with data in an accumulator (never "
                                       "popped)")
        if unit.fifo:
            raise mxu_error(run, unit, f"the kernel ends with {len(unit.fifo)} result(s) in the "
                                       "result FIFO (never popped)")


def _weights(run, unit: Mxu, load_staged_rhs, lhs) -> np.ndarray:
    if load_staged_rhs is not None:
        reg = int(load_staged_rhs)
        if reg not in unit.staging:
            raise mxu_error(run, unit, f"loads staging register {reg}, which holds no pushed "
                                       "right-hand side")
        unit.weights = unit.staging.pop(reg)
    if unit.weights is None:
        raise mxu_error(run, unit, "a matmul reuses the latched right-hand side, but none was "
                                   "ever loaded (load_staged_rhs=None)")
    w = unit.weights
    if np.dtype(w.dtype) != np.dtype(lhs.dtype):
        raise UndefinedBehaviorError(
            f"{run.where()}: MXU {unit.index}: right-hand side {w.dtype} with left-hand side "
            f"{lhs.dtype}: the matmul type is the left-hand side's and the reinterpretation of "
            "a staged operand of another type is not documented")
    if lhs.ndim != 2 or lhs.shape[1] != w.shape[0]:
        raise mxu_error(run, unit, f"left-hand side {lhs.shape} does not contract with the "
                                   f"latched right-hand side {w.shape}")
    return w


def mxu_product(eqn, lhs: np.ndarray, w: np.ndarray) -> np.ndarray:
    """lhs @ w as the MXU's result type: float32 correctly rounded, int32 wrapped."""
    out = np.dtype(np.int32) if D.is_int(lhs.dtype) else np.dtype(np.float32)
    return np.asarray(matmul(eqn, lhs[None], w[None], out))[0]


@register("matmul_push_rhs")
def matmul_push_rhs(eqn, rhs, *, staging_register, mxu_index, transpose=False):
    run = current_run()
    unit = mxu(run, int(mxu_index))
    reg = int(staging_register)
    if reg in unit.staging:
        # "It is not allowed to push to the same staging register twice" (matmul_push_rhs)
        raise mxu_error(run, unit, f"push to staging register {reg}, which still holds a "
                                   "right-hand side no matmul has loaded")
    rhs = np.asarray(rhs)
    if rhs.ndim != 2:
        raise eqn.unsupported(f"matmul_push_rhs of rank {rhs.ndim}: the MXU takes a matrix")
    unit.staging[reg] = np.array(rhs.T if transpose else rhs, copy=True)
    return []


@register("matmul_acc_lhs")
def matmul_acc_lhs(eqn, *args, load_staged_rhs=None, acc_transforms_tree=None, acc_addr=None,
                   mxu_index=None):
    run = current_run()
    if acc_transforms_tree is None:                    # JAX 0.10: an accumulator address
        (lhs,) = args
        unit = mxu(run, int(mxu_index))
        lhs = np.asarray(lhs)
        product = mxu_product(eqn, lhs, _weights(run, unit, load_staged_rhs, lhs))
        key = ("address", int(acc_addr))
    else:                                              # JAX >= 0.11: an ACC ref
        ref, lhs, *transforms = args
        if transforms or acc_transforms_tree.num_leaves:
            raise eqn.unsupported("matmul_acc_lhs through ref transforms (lowering.py: "
                                  "'Transforms not supported for matmul_acc_lhs.')")
        unit = mxu(run, _acc_mxu(eqn))
        lhs = np.asarray(lhs)
        product = mxu_product(eqn, lhs, _weights(run, unit, load_staged_rhs, lhs))
        key = ref
        if product.shape != tuple(ref.shape) or (
                D.is_int(product.dtype) != D.is_int(np.dtype(ref.dtype))):
            raise mxu_error(run, unit, f"a {product.shape} {product.dtype} result accumulated "
                                       f"into the {tuple(ref.shape)} {ref.dtype} accumulator")
    slot = unit.accumulators.get(key)
    if slot is None or not slot[1]:
        slot = unit.accumulators[key] = [np.zeros(product.shape, product.dtype), True]
    elif slot[0].shape != product.shape or slot[0].dtype != product.dtype:
        raise mxu_error(run, unit, f"accumulator {key} holds a {slot[0].shape} {slot[0].dtype} "
                                   f"sum; a {product.shape} {product.dtype} result added")
    slot[0] = accumulate(slot[0], product)
    return []


def _acc_mxu(eqn) -> int:
    return int(eqn.in_avals[0].memory_space.mxu_id)


@register("matmul_pop")
def matmul_pop(eqn, *args, acc_transforms_tree=None, acc_addr=None, shape=None, dtype=None,
               mxu_index=None):
    run = current_run()
    out = eqn.out_aval
    if acc_transforms_tree is None:
        unit = mxu(run, int(mxu_index))
        key = ("address", int(acc_addr))
    else:
        ref, *transforms = args
        if transforms or acc_transforms_tree.num_leaves:
            raise eqn.unsupported("matmul_pop through ref transforms (lowering.py: "
                                  "'Transforms not supported for matmul_pop.')")
        unit = mxu(run, _acc_mxu(eqn))
        key = ref
    slot = unit.accumulators.pop(key, None)
    if slot is None or not slot[1]:
        # A zeroed accumulator pops zeros: JAX's own tests pop without initialising it
        # (tests/pallas/tpu_pallas_test.py ExplicitMXUTest), and every pop leaves it zero.
        return np.zeros(out.shape, out.dtype)
    value = slot[0]
    if value.shape != tuple(out.shape) or value.dtype != np.dtype(out.dtype):
        raise mxu_error(run, unit, f"pops a {tuple(out.shape)} {np.dtype(out.dtype)} result "
                                   f"from an accumulator holding a {value.shape} {value.dtype} "
                                   "sum")
    return value


@register("matmul_lhs_fifo")
def matmul_lhs_fifo(eqn, lhs, *, mxu_index, load_staged_rhs=None):
    run = current_run()
    unit = mxu(run, int(mxu_index))
    lhs = np.asarray(lhs)
    unit.fifo.append(mxu_product(eqn, lhs, _weights(run, unit, load_staged_rhs, lhs)))
    return []


@register("matmul_pop_fifo")
def matmul_pop_fifo(eqn, *, shape, dtype, mxu_index):
    run = current_run()
    unit = mxu(run, int(mxu_index))
    if not unit.fifo:
        # "a hardware error if the result FIFO is empty and there are no matmul_lhs_fifo ops
        # in-flight" (matmul_pop_fifo); the TPU raises "Cannot schedule FIFO pop instruction
        # when the FIFO is empty" (tests/pallas/tpu_pallas_test.py test_fifo_underflow).
        raise mxu_error(run, unit, "pop from an empty result FIFO (no matmul_lhs_fifo result "
                                   "pending)")
    value = unit.fifo.popleft()
    if value.shape != tuple(shape) or value.dtype != np.dtype(dtype):
        raise mxu_error(run, unit, f"pops a {tuple(shape)} {np.dtype(dtype)} result; the oldest "
                                   f"FIFO entry is a {value.shape} {value.dtype} result")
    return value


# -- emit_pipeline as a primitive (jax_use_emit_pipeline_primitive=True) -------------------------
# Its meaning is its expansion (interp/pallas/tpu/pipeline.py): the rules read the parameters and
# the body step's operands.

def emit_pipeline(eqn, *args, grid_mapping, args_tree, body_jaxpr, dimension_semantics, core_axis,
                  core_axis_name, tiling, no_pipelining, trace_scopes, refs_tree=None, num_cores=None,
                  _explicit_indices=None, output_wait_read_only=None):
    # core_axis / core_axis_name: the core index is an operand (core_id, traced in the enclosing
    # kernel as program_id / axis_index of the core axis) and the expansion partitions the
    # pipeline grid over num_cores with it (pipeline.py _partition_grid). Every parameter is the
    # expansion's (refs_tree, num_cores and _explicit_indices from JAX 0.11,
    # output_wait_read_only from 0.12): passed on as the equation has them.
    expand = pipeline.expansion()
    params = {k: v for k, v in eqn.params.items() if k not in ("grid_mapping", "args_tree", "core_axis")}
    if expand is None or refs_tree is None:
        raise eqn.unsupported("this JAX expands emit_pipeline only inside its Mosaic lowering "
                              "rule (no pipeline.emit_pipeline_to_jaxpr): nothing defines it "
                              "outside TPU compilation")
    return pipeline.run_expansion(
        eqn, args, grid_mapping, args_tree.unflatten(args).dynamic_grid_spec,
        lambda outer: expand(list(eqn.in_avals), grid_mapping=grid_mapping, grid_names=None,
                             grid_sizes=outer, args_tree=args_tree, core_axis=core_axis, **params))


def emit_pipeline_0_10(eqn, *args, grid_mapping, args_tree, body_jaxpr, body_consts_len,
                       dimension_semantics, core_axis, core_axis_name, tiling, no_pipelining,
                       trace_scopes, _static_grid_offsets, _num_extra_dynamic):
    # Every parameter is the expansion's, passed on as the equation has them. The operands: the
    # index maps' consts, then the dynamic grid bounds (pipeline.py emit_pipeline's bind).
    if core_axis_name is not None:
        raise eqn.unsupported(_NAMED_CORE_AXIS_0_10)
    num_maps = sum(len(bm.index_map_jaxpr.consts) for bm in grid_mapping.block_mappings)
    return pipeline.run_expansion(
        eqn, args, grid_mapping, args[num_maps:],
        lambda outer: pipeline.expansion_0_10(list(eqn.in_avals), grid_sizes=outer, **eqn.params))


def pipeline_body(eqn, *args, jaxpr, in_tree, num_inputs=None, _explicit_indices=False):
    # (num_inputs: the abstract evaluation's split of the operands, which in_tree gives here)
    import jax
    ps, consts, refs = in_tree.unflatten(args)
    # a PipelineStep (JAX 0.11 on: its .index) or the tuple of indices (JAX 0.10)
    index = tuple(int(i) for i in (ps if isinstance(ps, tuple) else ps.index))
    lead = jax.tree_util.tree_leaves(ps) if _explicit_indices else []
    return pipeline.run_body(eqn, index, refs, lead, jaxpr, consts)


# The lowering rule traces the core index as lax.axis_index(core_axis_name) in the kernel's axis
# environment (pipeline.py _partition_grid), which the reference does not rebuild on 0.10.2.
_NAMED_CORE_AXIS_0_10 = ("JAX 0.10.2: a pipeline split over the cores of a named mesh axis is "
                         "unsupported (split over a grid axis of the kernel, it is supported)")
_PIPELINE_BODY_PARTIAL = ("body refs whose transforms are not basic indexing (a view of the "
                          "buffer) are unsupported")
if pipeline.expansion() is not None:
    register("emit_pipeline")(emit_pipeline)
else:
    register("emit_pipeline", partial=_NAMED_CORE_AXIS_0_10)(emit_pipeline_0_10)
register("pipeline_body", partial=_PIPELINE_BODY_PARTIAL)(pipeline_body)
