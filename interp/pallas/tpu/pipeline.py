"""``pltpu.emit_pipeline`` as a primitive (``jax_use_emit_pipeline_primitive=True``): its
expansion, traced and evaluated, and the body's steps.

pltpu.emit_pipeline binds emit_pipeline (and, in its expansion, pipeline_body for the body) when
jax_use_emit_pipeline_primitive is set. Its meaning is its expansion: JAX 0.12's
pipeline.emit_pipeline_to_jaxpr (what the Mosaic lowering and the TPU interpret mode run) traces
the same DMA pipeline the default path inlines, calling pipeline_body per step. The body sees
the pipeline step as program_id(0..P-1) and the pipeline grid as num_programs(0..P-1), the
enclosing kernel's axes after them (lowering.py: user_grid_indices / grid_sizes concatenated).
JAX 0.10.2 has no emit_pipeline_to_jaxpr: :func:`expansion_0_10` traces what its lowering rule
traces. Rules: ``interp/rules/pallas_tpu.py``; semantics: ``spec/pallas_tpu.py``.
"""
from __future__ import annotations

import contextlib
import weakref

import numpy as np

from .. import indexing
from ..grid import current_run
from ..memory import KernelRef

_pipeline_jaxprs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def expansion():
    """JAX's ``emit_pipeline_to_jaxpr`` (JAX 0.11 on), or None."""
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
    return getattr(mosaic_pipeline, "emit_pipeline_to_jaxpr", None)


def run_expansion(eqn, args, grid_mapping, dynamic_bounds, expand) -> list:
    """Evaluate the pipeline's expansion (``expand(kernel grid)``: traced once per enclosing grid
    and cached) with the pipeline grid (dynamic dimensions from ``dynamic_bounds``) pushed for
    the body's program_id / num_programs."""
    run = current_run()
    outer = tuple(int(g) for g in run.kernel_grid)
    per_eqn = _pipeline_jaxprs.setdefault(eqn, {})
    closed = per_eqn.get(outer)
    if closed is None:
        with _tpu_target():
            closed = per_eqn[outer] = expand(outer)
    dynamic = iter(dynamic_bounds)
    grid = tuple(int(d) if isinstance(d, (int, np.integer)) else int(next(dynamic))
                 for d in grid_mapping.grid)
    vmapped = set(getattr(grid_mapping, "vmapped_dims", ()))
    grids = run.pipeline_grids
    grids.append(tuple(d for i, d in enumerate(grid) if i not in vmapped))
    try:
        eqn.eval_jaxpr(closed, *args)
    finally:
        grids.pop()
    return []


def run_body(eqn, index, refs, lead, jaxpr, consts) -> list:
    """One step of the innermost running pipeline: the body ``jaxpr`` on ``refs`` (views of the
    step's buffers: refs or TransformedRefs), with program_id / num_programs of the leading axes
    the step ``index`` and the pipeline grid; ``lead``: the body's explicit index operands."""
    run = current_run()
    refs = [_body_ref(eqn, run, r) for r in refs]
    grids = run.pipeline_grids
    grid = grids[-1] if grids else ()
    saved = run.program_ids, run.kernel_grid
    run.program_ids = index + tuple(saved[0])
    run.kernel_grid = tuple(grid) + tuple(saved[1])
    try:
        eqn.eval_jaxpr(jaxpr, *lead, *refs, consts=list(consts))
    finally:
        run.program_ids, run.kernel_grid = saved
    return []


def _body_ref(eqn, run, x):
    """A body operand (a ref or a TransformedRef such as ``buffer.at[slot]``) as a kernel ref:
    a view of the buffer, so accesses, race checks and never-written tracking stay exact."""
    ref, transforms = indexing.split_transformed(x)
    if not transforms:
        return ref
    target, index, dtype = indexing.resolve(eqn, ref, transforms)
    if dtype != target.dtype or any(isinstance(i, np.ndarray) for i in index):
        raise eqn.unsupported(f"pipeline body operand {target!r} through transforms "
                              f"{transforms} (not a view of the buffer)")
    target.check_index(index)
    init = None if target.init is None else target.init[index]
    return KernelRef(target.array[index], target.name, run, init=init, kind=target.kind,
                     check_bounds=target.check_bounds)


def abstract_tpu_mesh():
    """A one-core abstract mesh of a TPU v5e: what tracing a TPU kernel asks for off a TPU."""
    import jax
    from jax._src.mesh import AbstractDevice
    dev = AbstractDevice(device_kind="TPU v5 lite", num_cores=1, platform="tpu")
    return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=dev)


def _tpu_target():
    """The TPU the expansion is traced for: the caller's abstract mesh if it names one, else a
    TPU v5e core. The expansion asks the TPU generation only for buffer tiling (how scratch is
    laid out), which moves no value: results do not depend on the choice."""
    import jax
    try:
        from jax._src import tpu_info   # (JAX 0.11 on; JAX 0.10 asks the abstract mesh)
        tpu_info.get_tpu_info()
        return contextlib.nullcontext()
    except (ImportError, ValueError):
        return jax.sharding.use_abstract_mesh(abstract_tpu_mesh())


# JAX 0.10.2 has no emit_pipeline_to_jaxpr: its only definition of the primitive is the Mosaic
# lowering rule (pipeline.py _emit_pipeline_lowering_rule), which traces wrapped_pipeline_fun in
# the kernel's grid environment and lowers that jaxpr. The reference traces the same function
# (expansion_0_10, the lowering rule's tracing part) and evaluates it. Probed (JAX 0.11.2 has
# emit_pipeline_to_jaxpr).

def expansion_0_10(avals_in, *, grid_sizes, grid_mapping, args_tree, body_jaxpr,
                    body_consts_len, _num_extra_dynamic, _static_grid_offsets, **params):
    import dataclasses
    from jax._src import api_util, core
    from jax._src import linear_util as lu
    from jax._src import util as jax_util
    from jax._src.interpreters import partial_eval as pe
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas.mosaic import pipeline as mp
    counts = tuple(len(bm.index_map_jaxpr.consts) for bm in grid_mapping.block_mappings)

    def wrapped_pipeline_fun(*all_args):
        num_dynamic = grid_mapping.num_dynamic_grid_bounds + _num_extra_dynamic
        map_consts, dynamic, body_consts, flat_refs = jax_util.split_list(
            all_args, [sum(counts), num_dynamic, body_consts_len])
        per_map = jax_util.split_list(map_consts, counts)
        gm = dataclasses.replace(grid_mapping, block_mappings=[
            bm.replace(index_map_jaxpr=core.ClosedJaxpr(bm.index_map_jaxpr.jaxpr, per_map[i]))
            for i, bm in enumerate(grid_mapping.block_mappings)])
        flat_refs, _ = mp.tracing_registry.flatten(args_tree.unflatten(flat_refs),
                                                   mp.is_transformed_ref)
        dyn = iter(dynamic)
        grid = tuple(next(dyn) if pallas_core.is_dynamic_dim(d) else d for d in gm.grid)
        offsets = tuple(next(dyn) if pallas_core.is_dynamic_dim(d) else d
                        for d in _static_grid_offsets)
        specs = [bm.to_block_spec() for bm in gm.block_mappings]

        def new_body(indices, *refs):
            kept = tuple(x for i, x in enumerate(indices) if i not in gm.vmapped_dims)
            flat, tree = mp.tracing_registry.flatten((kept, body_consts, refs))
            return mp.pipeline_body_p.bind(*flat, jaxpr=body_jaxpr, in_tree=tree,
                                           num_inputs=gm.num_inputs)
        pipeline_fun = mp._emit_pipeline(
            new_body, grid=grid, in_specs=specs[:gm.num_inputs], out_specs=specs[gm.num_inputs:],
            _grid_offsets=offsets, _explicit_indices=True, **params)
        pipeline_grid = tuple(d for i, d in enumerate(gm.grid) if i not in gm.vmapped_dims)
        with pallas_core.tracing_grid_env(pipeline_grid, ()):
            pipeline_fun(*flat_refs)
        return ()

    del grid_sizes   # (the kernel's grid names are None here: no axis environment to extend)
    dbg = api_util.debug_info("emit_pipeline_lowering", wrapped_pipeline_fun, avals_in, {})
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(wrapped_pipeline_fun, debug_info=dbg),
                                                 list(avals_in))
    return core.ClosedJaxpr(jaxpr, consts)
