"""Rules: the Mosaic GPU dialect of Pallas (``jax.experimental.pallas.mosaic_gpu``, plgpu).

The engine (blocks, warpgroups, mbarriers, asynchronous copies and what they make undefined) is
``interp/pallas/warpgroups.py``; these rules read their operands, move the data and tell the
engine what is in flight. Semantics and sources: ``spec/pallas_mosaic_gpu.py``.

Primitive names and parameters differ between JAX versions, each handled here explicitly:
* 0.10.2 passes ``n`` of ``wait_smem_to_gmem`` / ``wgmma_wait`` / ``set_max_registers_p`` as an
  operand, 0.11 and newer as a parameter;
* ``set_max_registers_p``, ``wgmma_accumulator_deref_p``, ``wgmma_accumulator_store_p`` and
  ``inline_mgpu_p`` (0.10.2, 0.11) lost their ``_p`` suffix in 0.12;
* ``copy_gmem_to_smem`` gained ``has_barrier`` / ``has_user_predicate`` (absent in 0.10.2: the
  barrier is always an operand), ``barrier_arrive`` gained ``has_user_predicate``.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..pallas import indexing
from ..pallas.grid import SCRATCH_ALLOCATORS, current_run, maybe_current_run
from ..pallas.memory import KernelRef
from ..pallas.warpgroups import Barrier, Footprint, WarpgroupRun
from ..ref_indexing import POSITION_TRANSFORMS
from ..registry import register
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


# --- scratch: barriers and accumulators ----------------------------------------------------------

def _allocate(aval, name, run, opts):
    dtype = getattr(aval, "dtype", None)
    kind = type(dtype).__name__
    if kind == "BarrierType":
        shape = tuple(aval.shape)
        array = np.empty(shape, object)
        for i in np.ndindex(shape):
            array[i] = Barrier(f"{name}{list(i) if shape else ''}", dtype.num_arrivals)
        return _BarrierRefs(array, name, run)
    if kind == "ClusterBarrierType":
        return _BarrierRefs(np.empty((0,), object), name, run, refused=(
            "cluster barriers (plgpu.ClusterBarrier): arrivals from the blocks of a cluster are "
            "not modelled yet"))
    if type(aval).__name__ == "WGMMAAbstractAccumulatorRef":
        # Mosaic GPU allocates accumulators as zeros (lowering.py _run_scoped_lowering_rule:
        # mgpu.WGMMAAccumulator.zero).
        return KernelRef(np.zeros(aval.shape, aval.dtype), name, run, kind="accumulator (regs)",
                         check_bounds=opts.check_bounds)
    return None


class _BarrierRefs(KernelRef):
    """A ref of barriers: its elements are :class:`Barrier` objects."""
    __slots__ = ("refused",)

    def __init__(self, array, name, run, refused=None):
        super().__init__(array, name, run, kind="barrier")
        self.refused = refused

    def fresh(self, run):
        if self.refused:
            return _BarrierRefs(self.array, self.name, run, self.refused)
        array = np.empty(self.array.shape, object)
        for i in np.ndindex(array.shape):
            b = self.array[i]
            array[i] = Barrier(b.name, b.num_arrivals)
        return _BarrierRefs(array, self.name, run)


SCRATCH_ALLOCATORS.append(_allocate)


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
    if type(transforms) is indexing.FlatTransforms:
        cached = indexing.cached_view(ref, transforms)
        if cached is not None:
            return ref, cached
        target, index = _view(eqn, ref, transforms.unflatten())
        if target is ref:
            indexing.remember_view(ref, transforms, index)
        return target, index
    ref, transforms_of_ref = indexing.split_transformed(ref)
    target, index, dtype = indexing.resolve(eqn, ref, tuple(transforms_of_ref) + tuple(transforms))
    if dtype != target.dtype:
        raise eqn.unsupported(f"a bitcast view ({target.dtype} as {dtype}) as a copy operand")
    return target, index


def _barrier(eqn, ref, transforms) -> Barrier:
    target, index = _view(eqn, ref, transforms)
    if getattr(target, "refused", None):
        raise eqn.unsupported(target.refused)
    chosen = np.asarray(target.array[index], object).reshape(-1)
    if chosen.size != 1:   # JAX: the transforms must select exactly one barrier
        raise eqn.unsupported(f"barrier operand selecting {chosen.size} barriers")
    return chosen[0]


def _predicate(has, rest):
    return bool(np.asarray(rest[0])) if has else True


def _n(n, operands) -> int:
    """``n`` of a wait: a parameter (JAX >= 0.11) or the one operand (0.10.2)."""
    return int(n if n is not None else np.asarray(operands[0]))


# --- TMA ------------------------------------------------------------------------------------------

@register("copy_gmem_to_smem", partial="multicast / partitioned copies over a cluster "
                                       "(collective_axes) and im2col sources unsupported; the "
                                       "source must lie inside its array (OOB fill not modelled)")
def copy_gmem_to_smem(eqn, *flat, src_transforms_treedef, dst_transforms_treedef,
                      barrier_transforms_treedef, collective_axes=None, leader_tracked=None,
                      oob_mode=None, has_barrier=True, has_user_predicate=False, **params):
    run = _warpgroup(eqn)
    if collective_axes:
        raise eqn.unsupported(f"copy_gmem_to_smem over cluster axes {collective_axes} "
                              "(multicast / partitioned TMA)")
    if not has_barrier:
        raise eqn.unsupported("copy_gmem_to_smem without a barrier (cp.async, pre-Hopper)")
    src, dst, barrier, rest = flat[0], flat[1], flat[2], flat[3:]
    src_t, rest = _take(rest, src_transforms_treedef)
    dst_t, rest = _take(rest, dst_transforms_treedef)
    bar_t, rest = _take(rest, barrier_transforms_treedef)
    if not _predicate(has_user_predicate, rest):
        return []   # neither the copy nor the arrival (primitives.py copy_gmem_to_smem docstring)
    src_ref, src_index = _view(eqn, src, src_t)
    dst_ref, dst_index = _view(eqn, dst, dst_t)
    bar = _barrier(eqn, barrier, bar_t)
    value = src_ref.read(src_index)
    dst_ref.write(dst_index, value.reshape(np.shape(dst_ref.array[dst_index])))
    # arrive.expect_tx(bytes) by the issuing warpgroup, complete_tx(bytes) by the TMA unit.
    bar.expect_tx(value.nbytes)
    run.cluster.add_tma(Footprint(dst_ref, dst_index), bar)
    run.arrive(bar)
    bar.complete_tx(value.nbytes)
    return []


_REDUCTIONS = {"add": np.add, "min": np.minimum, "max": np.maximum}


@register("copy_smem_to_gmem", partial="reduction_op other than add/min/max unsupported; the "
                                       "destination must lie inside its array")
def copy_smem_to_gmem(eqn, *flat, src_transforms_treedef, dst_transforms_treedef,
                      has_user_predicate=False, commit_group=True, reduction_op=None, **params):
    run = _warpgroup(eqn)
    src, dst, rest = flat[0], flat[1], flat[2:]
    src_t, rest = _take(rest, src_transforms_treedef)
    dst_t, rest = _take(rest, dst_transforms_treedef)
    if not _predicate(has_user_predicate, rest):
        return []
    src_ref, src_index = _view(eqn, src, src_t)
    dst_ref, dst_index = _view(eqn, dst, dst_t)
    value = src_ref.read(src_index)
    if reduction_op is not None:
        op = _REDUCTIONS.get(str(getattr(reduction_op, "value", reduction_op)).lower())
        if op is None or not (dtypes.is_float(value.dtype) or dtypes.is_int(value.dtype)):
            raise eqn.unsupported(f"reduction_op {reduction_op!r} on {value.dtype}")
        old = dst_ref.read(dst_index)
        value = op(old, value.reshape(old.shape)).astype(old.dtype)
    dst_ref.write(dst_index, value.reshape(np.shape(dst_ref.array[dst_index])))
    run.uncommitted_stores.append(Footprint(src_ref, src_index))
    if commit_group:
        _commit(run)
    return []


def _commit(run):
    if run.uncommitted_stores:
        run.stores.append(run.uncommitted_stores)
        run.uncommitted_stores = []


@register("commit_group")
def commit_group(eqn):
    _commit(_warpgroup(eqn))
    return []


@register("wait_smem_to_gmem")
def wait_smem_to_gmem(eqn, *operands, n=None, wait_read_only=False):
    # Whether the wait covers the GMEM writes too (wait_read_only=False) changes nothing here:
    # the writes are done at issue. The SMEM reads are done either way.
    _warpgroup(eqn).wait_stores(_n(n, operands))
    return []


@register("commit_smem")
def commit_smem(eqn):
    # fence.proxy.async.shared::cta: orders this warpgroup's SMEM writes before later TMA reads
    # of them. The reference's TMA reads see every earlier write: no value effect.
    _warpgroup(eqn)
    return []


# --- barriers -------------------------------------------------------------------------------------

def _barrier_operand(eqn, barrier, rest, treedef):
    """(warpgroup, rest of the operands, transforms) of a barrier primitive."""
    transforms, rest = _take(rest, treedef)
    return _warpgroup(eqn), rest, transforms


@register("barrier_arrive")
def barrier_arrive(eqn, barrier, *rest, transforms_treedef, has_user_predicate=False):
    run, rest, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    if _predicate(has_user_predicate, rest):
        run.arrive(_barrier(eqn, barrier, transforms))
    return []


@register("barrier_wait")
def barrier_wait(eqn, barrier, *rest, transforms_treedef, **params):
    run, _, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    run.wait_barrier(_barrier(eqn, barrier, transforms))
    return []


@register("barrier_arrive_and_wait")
def barrier_arrive_and_wait(eqn, barrier, *rest, transforms_treedef, **params):
    run, _, transforms = _barrier_operand(eqn, barrier, rest, transforms_treedef)
    b = _barrier(eqn, barrier, transforms)
    run.arrive(b)
    run.wait_barrier(b)
    return []


# --- wgmma ----------------------------------------------------------------------------------------

def _mma(acc, a, b, out_dtype) -> np.ndarray:
    """acc + a @ b: every product exact, the sum formed in float64 and rounded once to the
    accumulator type (spec/pallas_mosaic_gpu.py wgmma)."""
    # einsum, not matmul: a block-sized product is cheaper in one thread than through a
    # multithreaded BLAS fighting the warpgroup threads for the cores (measured 4.5 ms vs
    # 164 ms for 128x64x128 on a loaded 2-core machine).
    wide = np.einsum("ik,kj->ij", np.asarray(a, np.float64), np.asarray(b, np.float64))
    return (np.asarray(acc, np.float64) + wide).astype(out_dtype)


def _operand(eqn, x, transforms):
    """(value, Footprint or None) of a wgmma operand: a ref (SMEM) read through its transforms, or
    a value (registers)."""
    if isinstance(x, KernelRef) or hasattr(x, "transforms"):
        ref, index = _view(eqn, x, transforms)
        return ref.read(index), Footprint(ref, index)
    return np.asarray(x), None


@register("wgmma_ref", partial="integer and fp8 operands unsupported")
def wgmma_ref(eqn, acc, a, b, *leaves, acc_transforms_tree=None, a_transforms_tree=None,
              b_transforms_tree=None, **params):
    run = _warpgroup(eqn)
    acc_t, leaves = _take(leaves, acc_transforms_tree)
    a_t, leaves = _take(leaves, a_transforms_tree)
    b_t, leaves = _take(leaves, b_transforms_tree)
    acc_ref, acc_index = _view(eqn, acc, acc_t)
    av, a_region = _operand(eqn, a, a_t)
    bv, b_region = _operand(eqn, b, b_t)
    if not all(dtypes.is_float(np.dtype(v.dtype)) and np.dtype(v.dtype).itemsize == 2
               for v in (av, bv)):
        raise eqn.unsupported(f"wgmma of {av.dtype} x {bv.dtype} (16-bit float operands only)")
    # The wgmma's own accumulator access is ordered with earlier wgmmas (the async proxy runs
    # them in order), so it bypasses the in-flight check a warpgroup's access gets.
    acc_ref.array[acc_index] = _mma(acc_ref.array[acc_index], av, bv, acc_ref.dtype)
    run.wgmma.append((acc_ref, [r for r in (a_region, b_region) if r is not None]))
    return []


@register("wgmma", partial="integer and fp8 operands unsupported")
def wgmma(eqn, acc, a, b, *leaves, **params):
    # The value form (after run_state discharge): acc + a @ b.
    if not all(dtypes.is_float(np.dtype(v.dtype)) and np.dtype(v.dtype).itemsize == 2
               for v in (a, b)):
        raise eqn.unsupported(f"wgmma of {a.dtype} x {b.dtype} (16-bit float operands only)")
    return _mma(acc, a, b, eqn.out_aval.dtype)


def _await_accumulators() -> None:
    # Mosaic GPU lowers run_state (plgpu.ACC.init) to its body followed by
    # "wgmma.wait_group.sync.aligned 0" (lowering.py _run_state_lowering_rule: "Await the
    # accumulators and extract their final values").
    run = maybe_current_run()
    if isinstance(run, WarpgroupRun):
        run.wait_wgmma(0)


RUN_STATE_EXIT.append(_await_accumulators)


@register("wgmma_wait")
def wgmma_wait(eqn, *operands, n=None):
    _warpgroup(eqn).wait_wgmma(_n(n, operands))
    return []


@register("wgmma_accumulator_deref", "wgmma_accumulator_deref_p")
def wgmma_accumulator_deref(eqn, acc, *, wait_n=0):
    run = _warpgroup(eqn)
    if wait_n is not None:
        run.wait_wgmma(int(wait_n))
    return acc.read(tuple(slice(0, n, 1) for n in acc.shape))


@register("wgmma_accumulator_store", "wgmma_accumulator_store_p")
def wgmma_accumulator_store(eqn, acc, value):
    _warpgroup(eqn)
    acc.write(tuple(slice(0, n, 1) for n in acc.shape), np.asarray(value, acc.dtype))
    return []


# --- register values and hints without a value effect -----------------------------------------------

@register("layout_cast")
def layout_cast(eqn, x, **params):
    # A register layout is how the value is spread over threads, not the value.
    return x


@register("set_max_registers", "set_max_registers_p")
def set_max_registers(eqn, *operands, action, n=None):
    return []   # setmaxnreg: register allocation only


@register("print_layout")
def print_layout(eqn, *operands, fmt, transforms_tree=None):
    return []   # evaluated at compile time (primitives.py print_layout docstring)


@register("async_prefetch")
def async_prefetch(eqn, *operands, **params):
    return []   # an L2 prefetch hint


@register("griddepcontrol_wait", "griddepcontrol_launch_dependents")
def griddepcontrol(eqn):
    return []   # programmatic dependent launch: one kernel alone has nothing to wait for


@register("_copysign")
def copysign(eqn, x1, x2):
    return np.copysign(np.asarray(x1), np.asarray(x2)).astype(eqn.out_aval.dtype)


@register("load", partial="the optimized flag is a lowering hint")
def load(eqn, ref, *leaves, tree, **params):
    transforms, _ = _take(leaves, tree)
    target, index = _view(eqn, ref, transforms)
    return np.asarray(target.read(index)).reshape(eqn.out_aval.shape)


@register("store")
def store(eqn, ref, value, *leaves, tree, **params):
    transforms, _ = _take(leaves, tree)
    target, index = _view(eqn, ref, transforms)
    target.write(index, np.asarray(value).reshape(np.shape(target.array[index])))
    return []


# --- refused, with the reason coverage() gives ---------------------------------------------------

REFUSED = {
    "inline_mgpu": "arbitrary Mosaic GPU IR (plgpu.inline_mgpu) has no semantics the reference "
                   "can evaluate",
    "barrier_test": "its value depends on the schedule (whether a phase completed yet)",
    "try_cluster_cancel": "cluster launch control: whether a cancellation succeeds is up to the "
                          "hardware scheduler",
    "query_cluster_cancel": "cluster launch control: whether a cancellation succeeds is up to "
                            "the hardware scheduler",
    "tcgen05_mma": "Blackwell tcgen05 / TMEM not modelled yet",
    "tcgen05_commit_arrive": "Blackwell tcgen05 / TMEM not modelled yet",
    "async_copy_smem_to_tmem": "Blackwell tcgen05 / TMEM not modelled yet",
    "async_copy_scales_to_tmem": "Blackwell tcgen05 / TMEM not modelled yet",
    "async_copy_sparse_metadata_to_tmem": "Blackwell tcgen05 / TMEM not modelled yet",
    "async_load": "Blackwell TMEM loads not modelled yet",
    "async_store_tmem": "Blackwell TMEM stores not modelled yet",
    "wait_load_tmem": "Blackwell TMEM loads not modelled yet",
    "commit_tmem": "Blackwell TMEM not modelled yet",
    "async_store_smem": "cp.async (pre-Hopper) copies not modelled yet",
    "wait_gmem_to_smem": "cp.async (pre-Hopper) copies not modelled yet",
    "mma": "Ampere mma not modelled yet",
    "mosaic_gpu_reduce_sum": "plgpu reductions not modelled yet",
    "mosaic_gpu_reduce_max": "plgpu reductions not modelled yet",
    "mosaic_gpu_reduce_min": "plgpu reductions not modelled yet",
    "mosaic_gpu_reduce_prod": "plgpu reductions not modelled yet",
    "mgpu_atomic_store": "multi-GPU memory (remote refs) not modelled",
    "multimem_store": "multi-GPU memory (multimem) not modelled",
    "multimem_load_reduce": "multi-GPU memory (multimem) not modelled",
    "semaphore_signal_parallel": "Mosaic GPU semaphores not modelled yet",
    "semaphore_signal_multicast": "Mosaic GPU semaphores not modelled yet",
}
REFUSED["inline_mgpu_p"] = REFUSED["inline_mgpu"]


def _refuse(name, reason):
    def rule(eqn, *args, **params):
        raise eqn.unsupported(reason)
    rule.__name__ = name
    register(name, refused=reason)(rule)


for _name, _reason in REFUSED.items():
    _refuse(_name, _reason)
