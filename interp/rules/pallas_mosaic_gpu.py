"""Rules: the Mosaic GPU dialect of Pallas (``jax.experimental.pallas.mosaic_gpu``, plgpu).

The engine (blocks, warpgroups, mbarriers, asynchronous operations and what they make
undefined) is ``interp/pallas/mosaic_gpu/``: a rule parses its equation's operands (views,
barriers, the blocks of a collective) and calls one engine operation (``tma.copy``,
``wgmma.issue``, ``tcgen05.mma``...), which moves the data and keeps the ordering and race rules;
the instructions' arithmetic (``_mma``, ``_matrix_product``, the TMA reductions) stays here.
Semantics and sources: ``spec/pallas_mosaic_gpu.py``.

Primitive names and parameters differ between JAX versions, each handled here explicitly:
* 0.10.2 passes ``n`` of ``wait_smem_to_gmem`` / ``wgmma_wait`` / ``set_max_registers_p`` as an
  operand, 0.11 and newer as a parameter;
* ``set_max_registers_p``, ``wgmma_accumulator_deref_p``, ``wgmma_accumulator_store_p`` and
  ``inline_mgpu_p`` (0.10.2, 0.11) lost their ``_p`` suffix in 0.12;
* ``copy_gmem_to_smem`` gained ``has_barrier`` / ``has_user_predicate`` (absent in 0.10.2: the
  barrier is always an operand), ``barrier_arrive`` gained ``has_user_predicate``.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import dtypes
from ..pallas import indexing
from ..pallas.grid import current_run, maybe_current_run
from ..pallas.memory import KernelRef, indexed_shape
from ..pallas.mosaic_gpu import launch, tcgen05, tma, wgmma as wgmma_engine
from ..pallas.mosaic_gpu.barriers import Barrier
from ..pallas.mosaic_gpu.warpgroup import WarpgroupRun
from ..errors import OutOfBoundsError
from ..ref_indexing import POSITION_TRANSFORMS, NDIndexer, Slice
from ..registry import RULES, register
# (importing lax_reductions also registers the reduce_* rules plgpu's reductions use)
from . import lax_reductions  # noqa: F401
from ..numerics import certified_round, refine_sums, round_float, sum_error_bound
from .state import RUN_STATE_EXIT

# --- layout transforms of SMEM refs (views with the same logical values) --------------------------
# A tiled SMEM buffer is held at its physical (tiled) shape; UntilingTransform views it at its
# logical shape (core.py UntilingTransform.transform_type: (..., M/t0, N/t1, t0, t1) -> (..., M, N)).
# Swizzling permutes bytes inside a tile row on the hardware and is undone by every access
# (UnswizzleRef): the logical values are the same, so the reference keeps tiles unswizzled.


def _untile(pos, t):
    n = len(t.tiling)
    lead = pos.ndim - 2 * n
    perm = list(range(lead)) + [a for i in range(n) for a in (lead + i, lead + n + i)]
    shape = pos.shape[:lead] + tuple(pos.shape[lead + i] * pos.shape[lead + n + i]
                                     for i in range(n))
    return pos.transpose(perm).reshape(shape)


def _expand_leading_batch(pos, t):
    # (m, prod(batch) * n) -> (*batch, m, n): element (*b, i, j) is [i, flat(b) * n + j]
    # (core.py ExpandLeadingBatchDimensionsTransform).
    m, rest = pos.shape
    batch = tuple(t.batch_shape)
    pos = pos.reshape((m,) + batch + (rest // max(int(np.prod(batch)), 1),))
    return np.moveaxis(pos, 0, len(batch))


POSITION_TRANSFORMS.update({
    "UntilingTransform": _untile,
    "UnswizzleRef": lambda pos, t: pos,
    "ExpandLeadingBatchDimensionsTransform": _expand_leading_batch,
})


# --- operands ---------------------------------------------------------------------------------------

def _warpgroup(eqn) -> WarpgroupRun:
    run = current_run()
    if not isinstance(run, WarpgroupRun):
        raise eqn.unsupported("a Mosaic GPU primitive outside a Mosaic GPU kernel (plgpu.kernel)")
    return run


def _take(flat, treedef):
    """(transforms, rest): the leaves of ``treedef`` from the front of ``flat`` (the transforms
    still flat: :func:`_view` resolves them, from its cache where it can)."""
    if treedef is None:
        return (), flat
    n = treedef.num_leaves
    return indexing.FlatTransforms(treedef, flat[:n]), flat[n:]


def _view(eqn, ref, transforms):
    """(ref, normalized index) of a ref under its transforms (bitcast views refused)."""
    run = maybe_current_run()
    if run is not None and run.devices is not None:   # in a shard_map body
        ref, transforms = _peer_view_of(eqn, ref, transforms)
    if type(transforms) is indexing.FlatTransforms:
        cached = indexing.cached_view(ref, transforms)
        if cached is not None:
            return ref, cached
        target, index = _view(eqn, ref, transforms.unflatten())
        if target is ref:
            indexing.remember_view(ref, transforms, index)
        return target, index
    ref, transforms_of_ref = indexing.split_transformed(ref)
    chain = tuple(transforms_of_ref) + tuple(transforms)
    if len(chain) > 1:
        # Unit-stride slicings (a TMA copy's block of a GMEM operand) compose to slices: what
        # resolving positions through the chain (below) selects, or its out-of-bounds fallback,
        # without position arrays the size of the buffer (2 MiB per view of a 512x512 operand).
        index = _address_view(ref, chain)
        if index is not None:
            ref.check_index(index)
            return ref, index
    try:
        target, index, dtype = indexing.resolve(eqn, ref, chain)
    except OutOfBoundsError:
        index = _address_view(ref, chain)
        if index is None:
            raise
        ref.check_index(index)   # the elements the operation touches must be in bounds
        return ref, index
    if dtype != target.dtype:
        raise eqn.unsupported(f"a bitcast view ({target.dtype} as {dtype}) as a copy operand")
    return target, index


def _address_view(ref, chain):
    """The index of a chain of unit-stride slicings composed as address arithmetic, or None.

    A Mosaic GPU ref view is a memref subview (a base address and strides): a view that extends
    past its buffer is no access, only the elements an operation then touches must exist.
    JAX's shipped transposed_ragged_dot relies on it ("This slice is potentially out of bounds,
    but we never access the out of bound part in emit_pipeline")."""
    starts, sizes = [0] * len(ref.shape), list(ref.shape)
    view = list(range(len(ref.shape)))   # dimension of the view -> dimension of the buffer
    for t in chain:
        if not isinstance(t, NDIndexer) or len(t.indices) > len(view):
            return None
        kept = []
        for dim, ix in zip(view, t.indices):
            if isinstance(ix, Slice):
                if ix.stride != 1:
                    return None
                starts[dim] += int(np.asarray(ix.start))
                sizes[dim] = int(ix.size)
                kept.append(dim)
            elif np.ndim(ix) == 0:
                starts[dim] += int(np.asarray(ix))
                sizes[dim] = None
            else:
                return None
        view = kept + view[len(t.indices):]
    return tuple(st if n is None else slice(st, st + n, 1) for st, n in zip(starts, sizes))


def _barrier(eqn, ref, transforms, block=None) -> Barrier:
    """The one barrier the operand selects (in ``block`` of the cluster: the same barrier of
    another block, for cluster copies and arrivals)."""
    target, index = _view(eqn, ref, transforms)
    if block is not None and block != current_run().block:
        peer = current_run().cluster.peer(target, block)
        if peer is None:
            raise eqn.unsupported(f"barrier {target.short()} has no counterpart in block {block}")
        target = peer
    array = target.array
    if type(index) is tuple and len(index) == array.ndim and all(type(i) is int for i in index):
        return array[index]   # one element of the object array: the barrier itself
    chosen = np.asarray(array[index], object).reshape(-1)
    if chosen.size != 1:   # JAX: the transforms must select exactly one barrier
        raise eqn.unsupported(f"barrier operand selecting {chosen.size} barriers")
    return chosen[0]


def _arrivals(eqn, run, ref, transforms) -> list:
    """The barriers an arrival of ``run`` lands on: its block's, or for a cluster barrier the
    one of every block of its collective group (the group's leader only, leader_tracked)."""
    target, _ = _view(eqn, ref, transforms)
    collective = getattr(target, "collective", None)
    if not collective:
        return [_barrier(eqn, ref, transforms)]
    axes, leader_tracked = collective
    blocks = run.cluster.barrier_group(run.block, axes)   # (barrier_arrive/c1)
    return [_barrier(eqn, ref, transforms, b) for b in (blocks[:1] if leader_tracked else blocks)]


def _peer_view(eqn, run, target, index, block):
    """(ref, index) of the same elements of ``target`` in ``block`` of the cluster."""
    if block == run.block:
        return target, index
    peer = run.cluster.peer(target, block)
    if peer is None:
        raise eqn.unsupported(f"{target.short()} has no counterpart in block {block} (only "
                              "kernel scratch and block-wide run_scoped allocations do)")
    return peer, index


def _predicate(has, rest):
    return bool(np.asarray(rest[0])) if has else True


def _n(n, operands) -> int:
    """``n`` of a wait: a parameter (JAX >= 0.11) or the one operand (0.10.2)."""
    return int(n if n is not None else np.asarray(operands[0]))


# --- TMA ------------------------------------------------------------------------------------------

@register("copy_gmem_to_smem", partial="REPLICATED leader-tracked copies and im2col sources "
                                       "unsupported; the source must lie inside its array (OOB "
                                       "fill not modelled)")
def copy_gmem_to_smem(eqn, *flat, src_transforms_treedef, dst_transforms_treedef,
                      barrier_transforms_treedef, collective_axes, leader_tracked, oob_mode,
                      has_barrier=None, has_user_predicate=None):
    # oob_mode: how a TMA fills a source outside its array; the reference refuses such sources
    # (OutOfBoundsError), so in-bounds values do not depend on it.
    # has_barrier, has_user_predicate: JAX >= 0.11 (0.10.2: the barrier is always an operand).
    run = _warpgroup(eqn)
    if has_barrier is False:
        return _cp_async_copy(eqn, run, flat, src_transforms_treedef, dst_transforms_treedef,
                              has_user_predicate, collective_axes, leader_tracked)
    src, dst, barrier, rest = flat[0], flat[1], flat[2], flat[3:]
    src_t, rest = _take(rest, src_transforms_treedef)
    dst_t, rest = _take(rest, dst_transforms_treedef)
    bar_t, rest = _take(rest, barrier_transforms_treedef)
    if not _predicate(has_user_predicate, rest):
        return []   # neither the copy nor the arrival (primitives.py copy_gmem_to_smem docstring)
    src_view = _view(eqn, src, src_t)
    dst_ref, dst_index = _view(eqn, dst, dst_t)
    if collective_axes:
        axes = collective_axes if isinstance(collective_axes, tuple) else (collective_axes,)
        blocks = run.cluster.group(run.block, axes)
        if leader_tracked is None:   # multicast: every block of the group receives all of src
            group = [(block, _peer_view(eqn, run, dst_ref, dst_index, block)[0],
                      _barrier(eqn, barrier, bar_t, block)) for block in blocks]
            tma.copy_multicast(run, src_view, dst_index, _barrier(eqn, barrier, bar_t), group)
            return []
        axis = getattr(leader_tracked, "axis", None)
        if axis is None:
            raise eqn.unsupported(f"copy_gmem_to_smem(leader_tracked={leader_tracked!r}): only "
                                  "multicast and PARTITIONED copies are modelled")
        tma.copy_partitioned(run, src_view, (dst_ref, dst_index), axis,
                             _barrier(eqn, barrier, bar_t, blocks[0]), blocks)
        return []
    tma.copy(run, src_view, (dst_ref, dst_index), _barrier(eqn, barrier, bar_t))
    return []


def _copy_operands(eqn, flat, src_treedef, dst_treedef, has_user_predicate):
    """((src ref, index), (dst ref, index)) of a copy without a barrier operand (src, dst, their
    transforms, the predicate last), or None when its predicate is false."""
    src, dst, rest = flat[0], flat[1], flat[2:]
    src_t, rest = _take(rest, src_treedef)
    dst_t, rest = _take(rest, dst_treedef)
    if not _predicate(has_user_predicate, rest):
        return None
    return _view(eqn, src, src_t), _view(eqn, dst, dst_t)


def _cp_async_copy(eqn, run, flat, src_treedef, dst_treedef, has_user_predicate,
                   collective_axes, leader_tracked):
    """copy_gmem_to_smem without a barrier: cp.async (Mosaic GPU before Hopper,
    launch_context.py async_copy: the warpgroup's cp.async.shared.global copies, then
    cp.async.commit_group): one group per copy, in flight until wait_gmem_to_smem retires it."""
    if collective_axes or leader_tracked is not None:
        raise eqn.unsupported("a cp.async copy with collective_axes / leader_tracked (JAX: "
                              "TMA only)")
    operands = _copy_operands(eqn, flat, src_treedef, dst_treedef, has_user_predicate)
    if operands is not None:
        tma.cp_async(run, *operands)
    return []


def _as_unsigned(x):
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _unsigned_op(op):
    """An integer reduction on the bits read as unsigned (umin/umax; inc/dec, which Mosaic GPU
    applies to signed and unsigned i32 alike: launch_context.py _is_tma_reduction_op_supported)."""
    return lambda old, new: op(_as_unsigned(old), _as_unsigned(new)).view(old.dtype)


def _signed_op(op):
    return lambda old, new: op(old.view(np.dtype(f"i{old.dtype.itemsize}")),
                               new.view(np.dtype(f"i{old.dtype.itemsize}"))).view(old.dtype)


# cp.reduce.async.bulk.tensor's operations (PTX ISA; .inc/.dec as atom's, unsigned compare):
# dst = op(dst, src) elementwise, in dst's dtype.
_REDUCTIONS = {
    "add": np.add, "min": np.minimum, "max": np.maximum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "umin": _unsigned_op(np.minimum), "umax": _unsigned_op(np.maximum),
    "smin": _signed_op(np.minimum), "smax": _signed_op(np.maximum),
    "inc": _unsigned_op(lambda old, b: np.where(old >= b, 0, old + 1).astype(old.dtype)),
    "dec": _unsigned_op(lambda old, b: np.where((old == 0) | (old > b), b,
                                                old - 1).astype(old.dtype)),
}
_INTEGER_REDUCTIONS = {"and", "or", "xor", "umin", "umax", "smin", "smax", "inc", "dec"}


@register("async_store_smem", partial="atomic stores of floats unsupported")
def async_store_smem(eqn, src, ref, barrier, cluster_idx, *leaves, ref_transforms_treedef,
                     barrier_transforms_treedef, cluster_dim, optimized, atomic):
    # optimized: a bank-conflict-free transfer on the hardware; no value effect.
    """st.async of a register array into ``ref`` of the block at ``cluster_idx`` along cluster
    axis ``cluster_dim`` (primitives.py async_store_smem; the Lane lowering arrives on that
    block's barrier with expect-tx of the bytes, one warpgroup-level arrival, and the stores
    complete them), optionally ``atomic`` (dst = op(dst, src)). The destination is in flight
    until that barrier phase is observed, as a TMA copy's."""
    run = _warpgroup(eqn)
    ref_t, leaves = _take(leaves, ref_transforms_treedef)
    bar_t, leaves = _take(leaves, barrier_transforms_treedef)
    names = list(run.cluster.plan.cluster_names)
    if cluster_dim not in names:
        raise eqn.unsupported(f"async_store_smem along {cluster_dim!r}: not a cluster axis "
                              f"({names})")
    axis, idx = names.index(cluster_dim), int(np.asarray(cluster_idx))
    if not 0 <= idx < run.cluster.plan.cluster[axis]:
        raise OutOfBoundsError(f"{run.where()}: async_store_smem to block {idx} along "
                               f"{cluster_dim!r}, a cluster of {run.cluster.plan.cluster[axis]}")
    block = tuple(idx if d == axis else b for d, b in enumerate(run.block))
    dst_ref, dst_index = _view(eqn, ref, ref_t)
    peer, _ = _peer_view(eqn, run, dst_ref, dst_index, block)
    combine = None
    if atomic is not None:
        combine = _REDUCTIONS.get(str(getattr(atomic, "value", atomic)).lower())
        if combine is None or not dtypes.is_int(np.asarray(src).dtype):
            raise eqn.unsupported(f"async_store_smem(atomic={atomic!r}) on "
                                  f"{np.asarray(src).dtype}")
    tma.store_async(run, src, (peer, dst_index), _barrier(eqn, barrier, bar_t, block), combine)
    return []


@register("copy_smem_to_gmem", partial="the destination must lie inside its array")
def copy_smem_to_gmem(eqn, *flat, src_transforms_treedef, dst_transforms_treedef,
                      has_user_predicate, commit_group, reduction_op):
    run = _warpgroup(eqn)
    operands = _copy_operands(eqn, flat, src_transforms_treedef, dst_transforms_treedef,
                              has_user_predicate)
    if operands is None:
        return []
    (src_ref, src_index), dst = operands
    combine = None
    if reduction_op is not None:
        name = str(getattr(reduction_op, "value", reduction_op)).lower()
        combine = _REDUCTIONS.get(name)
        dtype = src_ref.dtype   # (the read's: bitcast views are refused)
        if combine is None or not (dtypes.is_int(dtype) or (dtypes.is_float(dtype) and
                                                           name not in _INTEGER_REDUCTIONS)):
            raise eqn.unsupported(f"reduction_op {reduction_op!r} on {dtype}")
    tma.store(run, (src_ref, src_index), dst, combine, commit=bool(commit_group))
    return []


@register("wait_gmem_to_smem")
def wait_gmem_to_smem(eqn, *, n):
    # cp.async.wait_group n then a warpgroup barrier (launch_context.py await_cp_async_copy).
    tma.wait_cp_async(_warpgroup(eqn), int(n))
    return []


@register("commit_group")
def commit_group(eqn):
    tma.commit_stores(_warpgroup(eqn))
    return []


@register("wait_smem_to_gmem")
def wait_smem_to_gmem(eqn, *operands, wait_read_only, n=None):
    # n: a parameter from JAX 0.11, the operand on 0.10.2. wait_read_only: the stores' SMEM
    # reads are retired, their GMEM writes stay in flight (cp.async.bulk.wait_group.read).
    tma.wait_stores(_warpgroup(eqn), _n(n, operands), read_only=bool(wait_read_only))
    return []


@register("commit_smem")
def commit_smem(eqn):
    tma.fence_smem(_warpgroup(eqn))
    return []


# --- barriers -------------------------------------------------------------------------------------

def _barrier_operand(eqn, barrier, rest, treedef):
    """(warpgroup, rest of the operands, transforms) of a barrier primitive."""
    transforms, rest = _take(rest, treedef)
    return _warpgroup(eqn), rest, transforms


@register("barrier_arrive")
def barrier_arrive(eqn, barrier, *rest, transforms_treedef, has_user_predicate=None):
    # has_user_predicate: JAX >= 0.11 (the predicate is the last operand).
    run, rest, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    if _predicate(has_user_predicate, rest):
        for b in _arrivals(eqn, run, barrier, transforms):
            run.arrive(b)
    return []


@register("barrier_wait")
def barrier_wait(eqn, barrier, *rest, transforms_treedef):
    run, _, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    run.wait_barrier(_barrier(eqn, barrier, transforms))
    return []


@register("barrier_test")
def barrier_test(eqn, barrier, *rest, transforms_treedef):
    # spec/pallas_mosaic_gpu.py BARRIER_TEST: the answer the reference gives when the completion
    # races the test, and the poll loop that never ends.
    run, _, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    return np.bool_(run.test_barrier(_barrier(eqn, barrier, transforms)))


@register("barrier_arrive_and_wait")
def barrier_arrive_and_wait(eqn, barrier, *rest, transforms_treedef):
    run, _, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    for b in _arrivals(eqn, run, barrier, transforms):
        run.arrive(b)
    run.wait_barrier(_barrier(eqn, barrier, transforms))
    return []


# --- wgmma ----------------------------------------------------------------------------------------

def _mma(acc, a, b, out_dtype) -> np.ndarray:
    """acc + a @ b on 16-bit or fp8 float operands: the exact sum of the accumulator and the
    products, rounded once to ``out_dtype`` (spec/pallas_mosaic_gpu.py wgmma).

    The products of such values are exact in float64 (at most 2 x 11 significant bits), so a
    float64 product (einsum) plus the accumulator is a sum of K + 1 exact terms in some order, within
    gamma_K times the sum of their magnitudes of the exact sum (numerics.sum_error_bound,
    bounded by |acc| + the row sums of |a| times the column maxima of |b|); certified_round keeps
    the elements where that whole interval rounds to one value and sums the others exactly.
    Where :func:`_exactly_summed` shows the float64 sum exact (most elements), it is rounded once."""
    a, b = np.asarray(a), np.asarray(b)
    acc = np.asarray(acc)
    if acc.shape != (a.shape[0], b.shape[1]):
        acc = np.broadcast_to(acc, (a.shape[0], b.shape[1]))   # (tcgen05: 0.0 to start)
    a64, b64, acc64 = (np.asarray(x, np.float64) for x in (a, b, acc))
    with np.errstate(invalid="ignore", over="ignore"):
        # einsum, not matmul: a block-sized product is cheaper in one thread than through a
        # multithreaded BLAS fighting the warpgroup threads for the cores (measured 4.5 ms vs
        # 164 ms for 128x64x128 on a loaded 2-core machine); any summation order is fine here.
        wide = acc64 + np.einsum("ik,kj->ij", a64, b64)
        absbound = np.abs(acc64) + np.abs(a64).sum(axis=1)[:, None] * np.abs(b64).max(axis=0)
    exact = _exactly_summed(acc, a, b, absbound)
    with np.errstate(over="ignore"):               # a sum past the dtype's range rounds to inf
        out = round_float(wide, out_dtype)
    out[exact & (wide == 0)] = 0                 # an exact zero is +0 (as certified_round's)
    todo = np.flatnonzero(~exact)
    if todo.size:
        n = wide.shape[1]

        def terms(j):
            i, k = np.divmod(todo[j], n)
            return (np.concatenate([acc64[i, k][..., None], a64[i]], axis=-1),
                    np.concatenate([np.ones(np.shape(i) + (1,)), b64[:, k].T], axis=-1))
        bound = sum_error_bound(absbound.flat[todo] * (1 + 2.0 ** -40), a64.shape[1] + 1, np.float64)
        out.flat[todo] = certified_round(wide.flat[todo], bound, out_dtype, terms,
                                         lambda j: refine_sums(*terms(j), np.float64))
    return out


@functools.lru_cache(maxsize=None)
def _float_fields(dtype):
    """(storage uint, exponent field shift, its mask, quantum exponent offset, magnitude mask)."""
    info = dtypes.finfo(dtype)
    return (dtypes.storage_uint(dtype), info.nmant, (1 << info.nexp) - 1,
            info.minexp - 1 - info.nmant, (1 << (info.nmant + info.nexp)) - 1)


def _exactly_summed(acc, a, b, absbound) -> np.ndarray:
    """Where the float64 sum of acc[i, j] and the products a[i, k] b[k, j] is exact in any order,
    as a boolean array of acc's shape.

    A finite binary float with an m-bit trailing significand and exponent field E (bias B) is an
    integer multiple of its quantum 2**(max(E, 1) - B - m) (subnormals and zero included), and the
    product of two is a multiple of the product of their quanta. For output element (i, j) let
    2**Q be the least quantum over its terms (bounded below by the accumulator's and by the least
    of row i of a times the least of column j of b; a zero accumulator, which adds nothing,
    does not count): every term, and every sum of some of the terms, is an integer multiple of
    2**Q, of magnitude at most S, the sum of the terms' magnitudes. If S < 2**(53 + Q), every
    such partial sum is n 2**Q with |n| < 2**53, a float64 number, so each addition or fused
    multiply-add of the product (einsum or BLAS), in whatever order or blocking, is exact, and so
    is the computed sum. ``absbound`` (S computed in float64) is below the true S by a relative
    2**-30 at most for K < 2**20 (each float64 operation errs by 2**-53), so requiring it below
    2**(52 + Q) covers that. A non-finite term makes S non-finite: not proven here
    (certified_round keeps non-finite sums as they are)."""
    def least_quantum(x, axis):   # zeros count as the least quantum here: still a lower bound
        uint, shift, _, offset, magnitude_mask = _float_fields(np.dtype(x.dtype))
        least = (x.view(uint) & magnitude_mask).min(axis=axis) >> shift   # (fields order as magnitudes do)
        return np.maximum(least, 1).astype(np.int64) + offset
    uint, shift, _, offset, magnitude_mask = _float_fields(np.dtype(acc.dtype))
    magnitude = acc.view(uint) & magnitude_mask
    q_acc = np.where(magnitude == 0, 4096, np.maximum(magnitude >> shift, 1).astype(np.int64) + offset)
    q = np.minimum(q_acc, least_quantum(a, 1)[:, None] + least_quantum(b, 0)[None, :])
    # absbound < 2**(52 + q): absbound (>= 0, or NaN) lies in [2**(F - 1023), 2**(F - 1022)) for
    # its biased float64 exponent field F >= 1 (below 2**-1022 for F = 0), so the test is
    # F <= 1074 + q; inf and NaN (F = 2047, 4095 with the sign bit) fail it, as q < 973.
    field = (np.ascontiguousarray(absbound, np.float64).view(np.uint64) >> np.uint64(52)).astype(np.int64)
    return (field <= 1074 + q) & (np.shape(a)[1] < 2 ** 20)


_EXACT_PRODUCTS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


@functools.lru_cache(maxsize=None)
def _exact_products(dtype) -> bool:   # (a dtype's name is built anew at each access)
    return dtype.name in _EXACT_PRODUCTS


def _matrix_product(eqn, acc, a, b, out_dtype, instruction, *, unsigned_ints):
    """acc + a @ b of a matrix instruction (spec/pallas_mosaic_gpu.py wgmma_ref, mma): float
    operands whose products are exact in float64 (16-bit floats, fp8) by _mma; integer operands
    exactly, wrapped to the 32-bit accumulator (no .satfinite in Mosaic GPU's instructions).
    ``unsigned_ints``: whether the instruction reads unsigned integers as such (mma.py
    _ptx_dtype_str: u8 / s8 by signedness) or not (wgmma.py ptx_operand_type: always s8)."""
    a, b = np.asarray(a), np.asarray(b)
    if dtypes.is_int(a.dtype) or a.dtype == np.bool_:
        if not unsigned_ints and (a.dtype.kind == "u" or b.dtype.kind == "u"):
            raise eqn.unsupported(f"{instruction} of {a.dtype} x {b.dtype}: Mosaic GPU reads "
                                  "8-bit integer operands as s8 (wgmma.py ptx_operand_type)")
        wide = np.asarray(acc, np.int64) + a.astype(np.int64) @ b.astype(np.int64)
        return wide.astype(np.uint32).view(np.int32).astype(out_dtype)
    if not (_exact_products(a.dtype) and _exact_products(b.dtype)):
        raise eqn.unsupported(f"{instruction} of {a.dtype} x {b.dtype} operands (16-bit and fp8 "
                              "floats, integers only)")
    return _mma(acc, a, b, out_dtype)


def _operand(eqn, x, transforms):
    """A wgmma operand as the engine takes it: a ref (SMEM) as (ref, index) through its
    transforms, or a value (registers) as its array."""
    if isinstance(x, KernelRef) or hasattr(x, "transforms"):
        return _view(eqn, x, transforms)
    return np.asarray(x)


@register("wgmma_ref", partial="unsigned 8-bit integer operands unsupported (Mosaic GPU reads "
                                "them as s8)")
def wgmma_ref(eqn, acc, a, b, *leaves, acc_transforms_tree, a_transforms_tree,
              b_transforms_tree):
    run = _warpgroup(eqn)
    acc_t, leaves = _take(leaves, acc_transforms_tree)
    a_t, leaves = _take(leaves, a_transforms_tree)
    b_t, leaves = _take(leaves, b_transforms_tree)
    acc_ref, acc_index = _view(eqn, acc, acc_t)

    def product(acc_value, av, bv):
        return _matrix_product(eqn, acc_value, av, bv, acc_ref.dtype, "wgmma",
                               unsigned_ints=False)
    wgmma_engine.issue(run, (acc_ref, acc_index), _operand(eqn, a, a_t), _operand(eqn, b, b_t),
                       product)
    return []


@register("wgmma", partial="unsigned 8-bit integer operands unsupported (Mosaic GPU reads them "
                            "as s8)")
def wgmma(eqn, acc, a, b, *leaves, acc_transforms_tree=None, a_transforms_tree=None,
          b_transforms_tree=None):
    # The value form (after run_state discharge): acc + a @ b. It is bound with wgmma_ref's
    # transform trees (primitives.py: wgmma_p.bind(..., **kwargs)); a value form has none left.
    if any(t is not None for t in (acc_transforms_tree, a_transforms_tree, b_transforms_tree)):
        raise eqn.unsupported("the value form of wgmma with ref transforms")
    return _matrix_product(eqn, acc, a, b, eqn.out_aval.dtype, "wgmma", unsigned_ints=False)


@register("mma", partial="float64 operands unsupported (the PTX ISA leaves the f64 mma's "
                         "order of k-step roundings unstated)")
def mma(eqn, acc, a, b):
    # Ampere mma.sync (primitives.py mma: "acc + a @ b synchronously"; mosaic/gpu/mma.py lowers
    # it to mma.sync.aligned.m16n8k{k}.row.col.{s32|f32|f64}): a warp-synchronous register
    # operation, nothing in flight.
    return _matrix_product(eqn, acc, a, b, eqn.out_aval.dtype, "mma", unsigned_ints=True)


def _await_accumulators() -> None:
    # Mosaic GPU lowers run_state (plgpu.ACC.init) to its body followed by
    # "wgmma.wait_group.sync.aligned 0" (lowering.py _run_state_lowering_rule: "Await the
    # accumulators and extract their final values").
    run = maybe_current_run()
    if isinstance(run, WarpgroupRun):
        wgmma_engine.wait(run, 0)


RUN_STATE_EXIT.append(_await_accumulators)


@register("wgmma_wait")
def wgmma_wait(eqn, *operands, n=None):
    # n: a parameter from JAX 0.11, the operand on 0.10.2.
    wgmma_engine.wait(_warpgroup(eqn), _n(n, operands))
    return []


@register("wgmma_accumulator_deref", "wgmma_accumulator_deref_p")
def wgmma_accumulator_deref(eqn, acc, *, wait_n):
    run = _warpgroup(eqn)
    if wait_n is not None:
        wgmma_engine.wait(run, int(wait_n))
    return acc.read(tuple(slice(0, n, 1) for n in acc.shape))


@register("wgmma_accumulator_store", "wgmma_accumulator_store_p")
def wgmma_accumulator_store(eqn, acc, value):
    _warpgroup(eqn)
    acc.write(tuple(slice(0, n, 1) for n in acc.shape), np.asarray(value, acc.dtype))
    return []


# --- Blackwell: tcgen05 and TMEM ---------------------------------------------------------------------
# The tensor core's operations and what they leave in flight: interp/pallas/mosaic_gpu/tcgen05.py.

_TCGEN05_FLOATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


@register("tcgen05_mma", partial="block-scaled (a_scale/b_scale) and sparse MMA unsupported; "
                                 "operands f16/bf16/fp8 only")
def tcgen05_mma(eqn, acc, a, b, accumulate, *rest, acc_transforms_tree, a_transforms_tree,
                b_transforms_tree, barrier_transforms_tree, a_scale_transforms_tree,
                b_scale_transforms_tree, a_sparse_metadata_transforms_tree, collective_axis,
                arrive, scaled, sparse):
    run = _warpgroup(eqn)
    if scaled:
        raise eqn.unsupported("block-scaled tcgen05_mma (a_scale / b_scale): the scale-factor "
                              "layout in TMEM is not modelled")
    if sparse:
        raise eqn.unsupported("sparse tcgen05_mma (a_sparse_metadata): the 2:4 metadata layout "
                              "is not modelled")
    barrier, rest = (rest[0], rest[1:]) if arrive else (None, rest)
    acc_t, rest = _take(rest, acc_transforms_tree)
    a_t, rest = _take(rest, a_transforms_tree)
    b_t, rest = _take(rest, b_transforms_tree)
    bar_t, rest = _take(rest, barrier_transforms_tree)
    blocks = _mma_blocks(eqn, run, collective_axis)
    if not blocks:
        return []   # a collective MMA is issued by the pair's leader block only
    acc_ref, acc_index = _view(eqn, acc, acc_t)
    a_ref, a_index = _view(eqn, a, a_t)
    b_ref, b_index = _view(eqn, b, b_t)
    if not all(np.dtype(r.dtype).name in _TCGEN05_FLOATS for r in (a_ref, b_ref)):
        raise eqn.unsupported(f"tcgen05_mma of {np.dtype(a_ref.dtype)} x {np.dtype(b_ref.dtype)} "
                              "(f16, bf16 and fp8 operands only: tf32 and integer kinds are not "
                              "modelled)")
    # Collective (2-CTA) MMA: the operands of each block of the pair (tcgen05.mma).
    tcgen05.mma(run, [_peer_view(eqn, run, acc_ref, acc_index, blk) for blk in blocks],
                [_peer_view(eqn, run, a_ref, a_index, blk) for blk in blocks],
                [_peer_view(eqn, run, b_ref, b_index, blk) for blk in blocks],
                bool(np.asarray(accumulate)), lambda old, av, bv: _mma(old, av, bv, acc_ref.dtype),
                None if barrier is None else [_barrier(eqn, barrier, bar_t, blk) for blk in blocks])
    return []


def _mma_blocks(eqn, run, collective_axis) -> list:
    """The blocks a tcgen05 operation of ``run`` acts on: its own, or for a collective one the
    pair along ``collective_axis`` when ``run``'s block leads it (the lowering predicates the
    others off: primitives.py _collective_mma_predicate), none otherwise."""
    if collective_axis is None:
        return [run.block]
    blocks = run.cluster.group(run.block, (collective_axis,))
    if len(blocks) != 2:
        raise eqn.unsupported(f"collective tcgen05 over {collective_axis!r} of {len(blocks)} "
                              "blocks (Mosaic GPU requires exactly 2)")
    return blocks if blocks[0] == run.block else []


@register("tcgen05_commit_arrive")
def tcgen05_commit_arrive(eqn, barrier, *rest, barrier_transforms_tree, collective_axis,
                          has_user_predicate=None):
    # has_user_predicate: JAX >= 0.12 (the predicate is the last operand).
    run = _warpgroup(eqn)
    transforms, rest = _take(rest, barrier_transforms_tree)
    if _predicate(has_user_predicate, rest):
        # Collective: the leader's commit arrives on the barrier of both blocks of the pair
        # (mosaic/gpu/tcgen05.py commit_arrive: tcgen05.commit multicast, mask 0b11).
        blocks = _mma_blocks(eqn, run, collective_axis)
        if blocks:
            tcgen05.commit(run, [_barrier(eqn, barrier, transforms, b) for b in blocks])
    return []


@register("async_copy_smem_to_tmem", partial="collective (2-CTA) copies unsupported: Mosaic GPU "
                                             "lowers them to tcgen05.cp.cta_group::2 issued by "
                                             "the pair's leader only, and no source the "
                                             "reference follows states which block's SMEM "
                                             "lands in which block's TMEM (JAX's own interpret "
                                             "mode drops collective_axis)")
def async_copy_smem_to_tmem(eqn, smem, tmem, *leaves, smem_tree, tmem_tree, collective_axis):
    run = _warpgroup(eqn)
    if collective_axis is not None:
        raise eqn.unsupported(f"collective async_copy_smem_to_tmem over {collective_axis!r}")
    smem_t, leaves = _take(leaves, smem_tree)
    tmem_t, leaves = _take(leaves, tmem_tree)
    tcgen05.cp(run, _view(eqn, smem, smem_t), _view(eqn, tmem, tmem_t))
    return []


_TMEM_REDUCTIONS = {"max": lambda x: x.max(-1), "min": lambda x: x.min(-1),
                    "absmax": lambda x: np.abs(x).max(-1), "absmin": lambda x: np.abs(x).min(-1)}


@register("async_load")
def async_load_tmem(eqn, src, *leaves, tree, reduce=None):
    # reduce: JAX >= 0.11.
    # Named async_load in JAX (primitives.py async_load_tmem_p).
    run = _warpgroup(eqn)
    transforms, _ = _take(leaves, tree)
    value = np.asarray(tcgen05.tmem_load(run, _view(eqn, src, transforms)))
    value = value.reshape(eqn.out_avals[0].shape)
    if reduce is None:
        # JAX 0.10.2 binds async_load as a one-result primitive (primitives.py: no
        # multiple_results); from 0.11 it has multiple results (the value, and with reduce= the
        # reduction).
        return [value] if eqn.primitive.multiple_results else value
    name = str(getattr(reduce, "value", reduce)).lower()
    if name not in _TMEM_REDUCTIONS:
        raise eqn.unsupported(f"reduce={reduce!r}")
    reduced = _TMEM_REDUCTIONS[name](value).astype(eqn.out_avals[1].dtype)
    if dtypes.is_float(value.dtype):
        # f32 lowers to tcgen05.ld.red.{min,max}[.abs].NaN.f32 (mosaic/gpu/tcgen05.py _tmem_load,
        # JAX 0.11.2 and 0.12): with .NaN a NaN among the inputs makes the result the
        # canonical NaN.
        canonical = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
        reduced = np.where(np.isnan(value).any(-1), canonical, reduced).astype(reduced.dtype)
    return [value, reduced]


@register("wait_load_tmem")
def wait_load_tmem(eqn):
    tcgen05.wait_tmem_loads(_warpgroup(eqn))
    return []


@register("async_store_tmem")
def async_store_tmem(eqn, ref, value, *leaves, tree):
    run = _warpgroup(eqn)
    transforms, _ = _take(leaves, tree)
    tcgen05.tmem_store(run, _view(eqn, ref, transforms), value)
    return []


@register("commit_tmem")
def commit_tmem(eqn):
    tcgen05.commit_tmem(_warpgroup(eqn))
    return []


# --- cluster launch control (dynamic scheduling: interp/pallas/mosaic_gpu/launch.py) -------------

@register("try_cluster_cancel")
def try_cluster_cancel(eqn, result, barrier, *leaves, result_transforms_tree,
                       barrier_transforms_tree, collective_axes=None):
    # collective_axes: JAX >= 0.11 (0.10.2: every thread issues its own request).
    # The lowering (primitives.py try_cluster_cancel_lowering): the first thread along the
    # thread axis (when collective over it) arrives with expect-tx(16), the others arrive; the
    # first thread of the first block along the collective cluster axes issues the request,
    # whose response is multicast to every block of the cluster, completing 16 bytes on each
    # one's barrier.
    run = _warpgroup(eqn)
    res_t, leaves = _take(leaves, result_transforms_tree)
    bar_t, leaves = _take(leaves, barrier_transforms_tree)
    target, index = _view(eqn, result, res_t)
    cluster = run.cluster
    axes = tuple(collective_axes or ())
    thread = cluster.thread_name
    first_thread = thread is None or thread not in axes or run.point.get(thread) == 0
    first_block = all(run.point[a] == 0 for a in axes if a in cluster.plan.cluster_names)
    responses = []
    if first_thread and first_block:   # this thread issues the request
        responses = [(*_peer_view(eqn, run, target, index, block),
                      _barrier(eqn, barrier, bar_t, block)) for block in cluster.plan.blocks]
    launch.try_cluster_cancel(run, _barrier(eqn, barrier, bar_t), first_thread, responses)
    return []


@register("query_cluster_cancel")
def query_cluster_cancel(eqn, result, *leaves, grid_names, transforms_tree):
    run = _warpgroup(eqn)
    transforms, _ = _take(leaves, transforms_tree)
    target, index = _view(eqn, result, transforms)
    words = np.ascontiguousarray(target.read(index)).reshape(-1).view(np.int32)
    names = run.cluster.plan.grid_names
    # A failed request leaves the coordinates undefined (PTX: clusterlaunchcontrol.query_cancel
    # .get_first_ctaid is defined for a canceled response only): -1, loud as an index.
    coords = [np.int32(words[1 + names.index(n)]) for n in grid_names]
    return coords + [np.bool_(words[0] != 0)]


# --- semaphores ------------------------------------------------------------------------------------
# Mosaic GPU binds its own semaphore_signal / semaphore_wait primitives (primitives.py
# semaphore_signal_p, semaphore_wait_p), named as Pallas's generic ones (pallas/primitives.py)
# that Mosaic TPU kernels bind: one rule per name serves both (interp/rules/pallas.py), their
# operands (args_tree: semaphore, transforms, value, device_id, core_index / decrement) mean the
# same; Mosaic GPU adds memory_scope, the scope of the atomic, with no value effect on one
# device (spec/pallas_mosaic_gpu.py SEMAPHORE_NAMES). Its semaphores live in GMEM:
# one per kernel launch (interp/pallas/mosaic_gpu/warpgroup.py WarpgroupRun.allocate_scoped).

@register("semaphore_signal_parallel", partial="signals to other devices (device_id) "
                                               "outside a shard_map body unsupported")
def semaphore_signal_parallel(eqn, *flat, args_tree):
    # Several signals without an order among them (primitives.py semaphore_signal_parallel):
    # the reference delivers them in the listed order, one of the allowed orders.
    run = _warpgroup(eqn)
    refs, transforms, incs, device_ids = args_tree.unflatten(flat)
    for ref, t, inc, device_id in zip(refs, transforms, incs, device_ids):
        target, index = _view(eqn, ref, t)
        if device_id is not None:
            if run.devices is None:
                raise eqn.unsupported(f"semaphore_signal_parallel to device {device_id!r} "
                                      "outside a shard_map body")
            # (device ids are mesh coordinates: the lowering's DeviceIdType.MESH)
            other = run.devices.target(run, device_id, None, eqn.name)
            target = run.devices.counterpart(run, target, other, eqn.name)
        run.dma.signal((target, index), int(np.asarray(inc)))
    return []


# --- inline Mosaic GPU: only the fences JAX's own helpers emit -------------------------------------
_KNOWN_PTX = {
    # plgpu.dynamic_scheduling_loop (helpers.py): proxy fences around the cancellation response.
    # They order memory accesses between proxies; the reference's accesses are in program order
    # already, so they change no value.
    "fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;",
    "fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;",
}


def _inline_ptx(mgpu_fn):
    """The PTX string of a helpers.inline_ptx(asm) body, or None for any other function."""
    if getattr(mgpu_fn, "__qualname__", "") != "inline_ptx.<locals>.ptx":
        return None
    cells = [c.cell_contents for c in (mgpu_fn.__closure__ or ())]
    strings = [c for c in cells if isinstance(c, str)]
    return strings[0] if len(strings) == 1 else None


@register("inline_mgpu", "inline_mgpu_p", partial="only the proxy fences JAX's "
          "dynamic_scheduling_loop emits through inline_ptx; any other Mosaic GPU IR has no "
          "semantics the reference can evaluate")
def inline_mgpu(eqn, *args, mgpu_fn, flat_arg_types, flat_ret_ty, pytree_args,
                pytree_ref_transforms, pytree_ret_ty):
    asm = _inline_ptx(mgpu_fn)
    if asm not in _KNOWN_PTX or flat_ret_ty:
        raise eqn.unsupported("arbitrary Mosaic GPU IR (plgpu.inline_mgpu) has no semantics the "
                              f"reference can evaluate ({getattr(mgpu_fn, '__qualname__', mgpu_fn)}"
                              f"{'' if asm is None else ': ' + asm!r})")
    _warpgroup(eqn)
    return []


# --- register values and hints without a value effect -----------------------------------------------

@register("layout_cast")
def layout_cast(eqn, x, *, new_layout):
    # new_layout: how the value is spread over threads, not the value.
    return x


@register("set_max_registers", "set_max_registers_p")
def set_max_registers(eqn, *operands, action, n=None):
    # action and n (a parameter from JAX 0.11, the operand on 0.10.2) say how many registers
    # the warpgroup keeps (setmaxnreg): register allocation only, no value effect.
    return []


@register("print_layout")
def print_layout(eqn, *operands, fmt, transforms_tree):
    return []   # evaluated at compile time (primitives.py print_layout docstring)


@register("async_prefetch")
def async_prefetch(eqn, *operands, ref_transforms_treedef, collective_axes, leader_tracked,
                   has_user_predicate=None):
    # All parameters say what to prefetch into L2 and who issues it: no value effect.
    # has_user_predicate: JAX >= 0.11.
    return []   # an L2 prefetch hint


@register("griddepcontrol_wait", "griddepcontrol_launch_dependents")
def griddepcontrol(eqn):
    return []   # programmatic dependent launch: one kernel alone has nothing to wait for


@register("_copysign")
def copysign(eqn, x1, x2):
    return np.copysign(np.asarray(x1), np.asarray(x2)).astype(eqn.out_aval.dtype)


@register("load")
def load(eqn, ref, *leaves, tree, optimized):
    # optimized: a lowering hint (whether the load may use the optimized path), not a value.
    transforms, _ = _take(leaves, tree)
    target, index = _view(eqn, ref, transforms)
    return np.asarray(target.read(index)).reshape(eqn.out_aval.shape)


@register("store")
def store(eqn, ref, value, *leaves, tree, optimized):
    # optimized: as load's.
    transforms, _ = _take(leaves, tree)
    target, index = _view(eqn, ref, transforms)
    target.write(index, np.asarray(value).reshape(indexed_shape(target.array, index)))
    return []


# --- several devices: remote refs, multicast signals, multimem (semantics: spec/pallas_mosaic_gpu.py
# "multi-device"; the devices' meeting and ordering: interp/pallas/devices.py) ---------------------

def _peer_view_of(eqn, ref, transforms):
    """(buffer, transforms) of a view through plgpu.remote_ref (a PeerMemRef transform): the same
    buffer of the device it names, viewed through the other transforms. Other views unchanged."""
    if type(transforms) is indexing.FlatTransforms:
        transforms = transforms.unflatten()
    base, own = indexing.split_transformed(ref)
    chain = tuple(own) + tuple(transforms)
    kinds = [type(t).__name__ for t in chain]
    if "MulticastRef" in kinds:
        raise eqn.unsupported("a plgpu.multicast_ref operand (a copy to every device's buffer) "
                              "is not modelled; multimem_store is")
    if "PeerMemRef" not in kinds:
        return ref, transforms
    if kinds.count("PeerMemRef") > 1:
        raise eqn.unsupported("a remote_ref of a remote_ref")
    peer = chain[kinds.index("PeerMemRef")]
    run = current_run()
    target = run.devices.target(run, peer.device_id, peer.device_id_type, "remote_ref")
    other = run.devices.counterpart(run, base, target, f"{eqn.name} through remote_ref")
    return other, tuple(t for t in chain if t is not peer)


def _devices_along(eqn, run, collective_axes) -> list:
    """The logical ids of the devices a multicast along ``collective_axes`` reaches."""
    from ..pallas.devices import members
    if run.devices is None:
        raise eqn.unsupported(f"{eqn.name} outside a shard_map body (it reaches the devices "
                              f"along {collective_axes!r} of the enclosing mesh)")
    return members(run, collective_axes)


_OUTSIDE = "outside a shard_map body refused (the devices it reaches are the enclosing mesh's)"


@register("semaphore_signal_multicast", partial=_OUTSIDE)
def semaphore_signal_multicast(eqn, *flat, args_tree, collective_axes):
    # The semaphore's counterpart on every device along collective_axes (this one included) gets
    # value (primitives.py semaphore_signal_multicast; SemaphoreRef.signal_multimem: a multimem.red
    # add to the multicast address).
    run = _warpgroup(eqn)
    ref, transforms, value = args_tree.unflatten(flat)
    target, index = _view(eqn, ref, transforms)
    for device in _devices_along(eqn, run, collective_axes):
        other = run.devices.counterpart(run, target, device, "semaphore_signal_multicast")
        run.dma.signal((other, index), int(np.asarray(value)))
    return []


@register("multimem_store", partial=_OUTSIDE)
def multimem_store(eqn, source, ref, *leaves, collective_axes, transforms_tree):
    # The same elements of ref's counterpart on every device along collective_axes (this one
    # included) get source (primitives.py multimem_store; PTX multimem.st).
    run = _warpgroup(eqn)
    transforms, _ = _take(leaves, transforms_tree)
    target, index = _view(eqn, ref, transforms)
    value = np.asarray(source).reshape(np.shape(target.array[index]))
    for device in _devices_along(eqn, run, collective_axes):
        run.devices.counterpart(run, target, device, "multimem_store").write(index, value)
    return []


def _multimem_min_max(eqn, stacked, pick):
    if dtypes.is_float(stacked.dtype):
        if stacked.dtype == np.float32:
            raise eqn.unsupported("multimem_load_reduce min/max of float32 (PTX multimem "
                                  "min/max take f16/bf16 only; JAX's docstring: all dtypes but "
                                  "f32)")
        if np.isnan(stacked.astype(np.float32)).any():
            raise eqn.unsupported("multimem_load_reduce min/max with NaN operands (the PTX "
                                  "result then depends on the .NaN qualifier the lowering picks)")
        zeros = stacked.astype(np.float32) == 0
        signs = np.signbit(stacked.astype(np.float32))
        if (zeros.any(-1) & (zeros & signs).any(-1) & (zeros & ~signs).any(-1)).any():
            raise eqn.unsupported("multimem_load_reduce min/max of +0.0 and -0.0 (which one PTX "
                                  "returns is not stated)")
    return pick(stacked, axis=-1)


_MULTIMEM_REDUCTIONS = {
    "min": lambda eqn, s: _multimem_min_max(eqn, s, np.min),
    "max": lambda eqn, s: _multimem_min_max(eqn, s, np.max),
    "and": lambda eqn, s: np.bitwise_and.reduce(s, axis=-1),
    "or": lambda eqn, s: np.bitwise_or.reduce(s, axis=-1),
    "xor": lambda eqn, s: np.bitwise_xor.reduce(s, axis=-1),
}


@register("multimem_load_reduce", partial=_OUTSIDE + "; float min/max with NaN or with zeros "
                                          "of both signs, and float32 min/max (no PTX "
                                          "instruction) refused")
def multimem_load_reduce(eqn, ref, *leaves, tree, collective_axes, reduction_op):
    # The reduction of the same elements of ref's counterparts on every device along
    # collective_axes (PTX multimem.ld_reduce). Integers: exact (add wraps modulo 2^bits, the
    # PTX integer add). Float add: the correctly rounded exact sum, as psum (spec: the order is
    # the hardware's; the compliance mode bounds it).
    run = _warpgroup(eqn)
    transforms, _ = _take(leaves, tree)
    target, index = _view(eqn, ref, transforms)
    values = [run.devices.counterpart(run, target, device, "multimem_load_reduce").read(index)
              for device in _devices_along(eqn, run, collective_axes)]
    stacked = np.stack([np.asarray(v) for v in values], axis=-1)
    op = str(getattr(reduction_op, "value", reduction_op)).lower()
    op = op.rsplit(".", 1)[-1]
    is_float = dtypes.is_float(stacked.dtype)
    if op == "add":
        if is_float:
            from .spmd import participants_sum
            out = participants_sum(eqn, stacked, stacked.dtype)
        else:
            out = np.add.reduce(stacked, axis=-1, dtype=stacked.dtype)   # wraps, as PTX .add
    elif op in _MULTIMEM_REDUCTIONS and not (is_float and op in ("and", "or", "xor")):
        out = _MULTIMEM_REDUCTIONS[op](eqn, stacked)
    else:
        raise eqn.unsupported(f"multimem_load_reduce reduction_op={reduction_op!r} on "
                              f"{stacked.dtype}")
    return np.asarray(out, stacked.dtype).reshape(eqn.out_aval.shape)


# --- reductions across a warpgroup's layout -----------------------------------------------------
# plgpu.sum/max/min/prod (primitives.py reduce_*_p) reduce ``axes`` out of a register array as
# lax.reduce_* do (_reduce_abstract_eval: the remaining axes in order); the value is the lax
# reduction's (spec/pallas_mosaic_gpu.py REDUCTIONS), whatever layout the array has.


def _mgpu_reduction(lax_rule):
    def rule(eqn, x, *, axes, accumulator_ilp=None):
        # accumulator_ilp: how many independent accumulators each thread keeps on the hardware
        # (fragmented_array.py reduce acc_ilp): it changes only the hardware's summation order,
        # which the reference does not follow (the result is correctly rounded).
        return lax_rule(eqn, x, axes=axes)
    return rule


for _name in ("sum", "max", "min", "prod"):
    register(f"mosaic_gpu_reduce_{_name}")(_mgpu_reduction(RULES[f"reduce_{_name}"]))


# --- refused, with the reason coverage() gives ---------------------------------------------------

REFUSED = {
    "async_copy_scales_to_tmem": "block scales in TMEM feed only block-scaled tcgen05_mma, "
                                 "whose scale-factor layout is not modelled",
    "async_copy_sparse_metadata_to_tmem": "sparse metadata in TMEM feeds only sparse "
                                          "tcgen05_mma, whose 2:4 metadata layout is not modelled",
    "mgpu_atomic_store": "atomic read-modify-write stores (red.global, local or through "
                         "remote_ref) not modelled: concurrent float atomics make the value "
                         "schedule-dependent",
}


def _refuse(name, reason):
    def rule(eqn, *args, **params):   # noqa: every parameter: the equation is refused whatever
        raise eqn.unsupported(reason)   # its parameters say, with the reason coverage() gives
    rule.__name__ = name
    register(name, refused=reason)(rule)


for _name, _reason in REFUSED.items():
    _refuse(_name, _reason)
